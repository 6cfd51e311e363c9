"""Preprocessing benchmark: throughput with 1 and 2 workers, and peak memory against length.

Measures, and prints as JSON on stdout (``--parts`` chooses which):

- ``throughput``: for each recording set (msu-schizophrenia from ../shared/data when present,
  and synthetic 19-channel 256 Hz EDF recordings), the wall time of
  :func:`eegformer_cli.preprocess.run_preprocess` (default preset) in a fresh Python process
  into an empty folder, with ``n_jobs`` 1 and 2 (median of ``--repeats`` alternating runs), as
  seconds per recording-minute, the speed-up (target: >= 1.7), and the CPU time of the main
  process and of the workers.
- ``peak_memory``: the peak resident memory (``ru_maxrss`` of a child process) of
  ``eegformer preprocess`` of one synthetic 20-minute, 19-channel, 256 Hz EDF recording with
  one worker (:func:`run_preprocess`, the connectome file written)
  (target: < 1.5 GiB), next to the child's memory after the imports alone.
- ``length_sweep``: the same, and the child's wall and CPU seconds per recording-minute, for
  synthetic 19-channel, 256 Hz EDF recordings of ``--sweep-minutes`` (10 min, 2, 8 and 24 h):
  peak memory must be flat in the length (24 h within 1.2x the 2-hour figure, under 1 GB).
  With ``--baseline DIR`` (a checkout of another version, e.g. ``git worktree add
  ../baseline 263a978``) the same children run that version's code too, alternating with this
  one's (``--baseline-minutes``, ``--repeats`` each), so both see the same machine load.
  With ``--sweep-bids`` each recording is the one recording of a minimal BIDS dataset
  (``dataset_description.json``, ``sub-01/eeg/sub-01_task-rest_eeg.edf`` and its
  ``channels.tsv`` marking F3 bad) and the child preprocesses the root: the BIDS path (mne-bids
  finding it, the bad channel interpolated) in the same memory.
- ``four_nights``: ``run_preprocess`` with ``n_jobs`` 2 on four 8-hour recordings in a child
  process, the summed RSS of it and its workers sampled every 0.2 s (target: < 2.5 GB).

The long recordings are written to disk in 10-minute pieces (:func:`write_synthetic_edf`: a
24-hour float64 array would take 3.4 GB) under ``--workdir`` (default: the system's temporary
folder) and deleted after use (24 h at 19 channels and 256 Hz: 840 MB of EDF).

Usage::

    .venv/bin/python benchmarks/bench_preprocess.py [--synthetic 24 --minutes 10 --repeats 3] > result.json
    .venv/bin/python benchmarks/bench_preprocess.py --parts length_sweep,four_nights \
        --baseline ../baseline > long.json

The machine is shared: run it when it is quiet, and record the CPU (``lscpu``) with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mne
import numpy as np
from machine import machine  # benchmarks/machine.py (scripts run from this folder)
from stress_preprocess import tree_rss_bytes

from eegformer_cli.recordings.channels import STANDARD_1020

REPO = Path(__file__).resolve().parents[1]
MSU = REPO.parent / "shared" / "data" / "msu-schizophrenia"

CHILD_RUN = """
import json, resource, sys, time
started = time.perf_counter()
from pathlib import Path
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
summary = run_preprocess([Path(p) for p in sys.argv[3:]], Path(sys.argv[1]),
                         PreprocessSettings.from_preset("default"), n_jobs=int(sys.argv[2]))
wall = time.perf_counter() - started
# run_preprocess has reaped its workers on return, so their CPU time is in RUSAGE_CHILDREN
cpu = lambda usage: usage.ru_utime + usage.ru_stime
print(json.dumps({"wall": wall, "cpu_main": cpu(resource.getrusage(resource.RUSAGE_SELF)),
                  "cpu_workers": cpu(resource.getrusage(resource.RUSAGE_CHILDREN)),
                  "n_error": summary.n_error}))
"""

PEAK_MEMORY_CHILD = """
import csv, re, resource, sys, tempfile, time
from pathlib import Path
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
status = Path("/proc/self/status").read_text()
after_imports = int(re.search(r"VmRSS:\\s+(\\d+)", status).group(1))
source = Path(sys.argv[1])
started, cpu_started = time.perf_counter(), time.process_time()
with tempfile.TemporaryDirectory(dir=source.parent) as out:  # one worker: this process
    run_preprocess([source], Path(out), PreprocessSettings.from_preset(sys.argv[2]), n_jobs=1)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    with open(Path(out) / "manifest.tsv", newline="") as handle:
        row = next(csv.DictReader(handle, delimiter="\\t"))
assert row["status"] == "ok", row["error"]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(after_imports, peak, row["n_segments"], wall, cpu)
"""

#: EDF physical range (uV) of the synthetic recordings, and their record length (s).
EDF_RANGE_UV = 500.0
EDF_RECORD_S = 1


def write_synthetic_edf(
    path: Path,
    minutes: float,
    seed: int,
    sfreq: int = 256,
    piece_s: int = 600,
    noise: str = "normal",
) -> Path:
    """A 19-channel recording (~10 uV noise plus a shared 10 Hz rhythm of 5-15 uV) saved as EDF
    (16 bits, 1 s records), generated and written ``piece_s`` seconds at a time so that a
    recording of any length takes bounded memory to make. ``noise`` "laplace" gives
    super-Gaussian sources, on which extended infomax ICA converges in a few iterations (on
    Gaussian noise it runs to its iteration limit)."""
    n_channels, per_record = len(STANDARD_1020), sfreq * EDF_RECORD_S
    n_records = int(round(minutes * 60 / EDF_RECORD_S))

    def field(value, width: int) -> bytes:
        return str(value).ljust(width)[:width].encode("ascii")

    header = b"".join(
        [
            field(0, 8),
            field("X X X X", 80),
            field("Startdate 01-JAN-2020 X X X", 80),
            field("01.01.20", 8),
            field("00.00.00", 8),
            field(256 * (n_channels + 1), 8),
            field("", 44),
            field(n_records, 8),
            field(EDF_RECORD_S, 8),
            field(n_channels, 4),
        ]
    )
    signal_fields = [
        ("label", 16),
        ("", 80),
        ("uV", 8),
        (-EDF_RANGE_UV, 8),
        (EDF_RANGE_UV, 8),
        (-32768, 8),
        (32767, 8),
        ("", 80),
        (per_record, 8),
        ("", 32),
    ]
    for index, (value, width) in enumerate(signal_fields):
        header += b"".join(field(name if index == 0 else value, width) for name in STANDARD_1020)
    rng = np.random.default_rng(seed)
    gains = rng.uniform(0.5, 1.5, (n_channels, 1))
    with open(path, "wb") as handle:
        handle.write(header)
        for first in range(0, n_records, piece_s // EDF_RECORD_S):
            records = min(piece_s // EDF_RECORD_S, n_records - first)
            t = (first * per_record + np.arange(records * per_record)) / sfreq
            draw = rng.laplace if noise == "laplace" else rng.normal
            microvolts = 10 * draw(size=(n_channels, t.size)) + 10 * gains * np.sin(
                2 * np.pi * 10 * t
            )
            digital = np.round((microvolts + EDF_RANGE_UV) / (2 * EDF_RANGE_UV) * 65535 - 32768)
            digital = np.clip(digital, -32768, 32767).astype("<i2")
            # (C, R*T) -> records of C signals of T samples each
            handle.write(
                digital.reshape(n_channels, records, per_record).transpose(1, 0, 2).tobytes()
            )
    return path


@dataclass
class RunTimes:
    """One run: wall seconds, and CPU seconds of this process and of its worker processes."""

    wall: float
    cpu_main: float
    cpu_workers: float


def timed_run(inputs: list[Path], n_jobs: int, workdir: Path) -> RunTimes:
    """One run in a fresh Python process into an empty folder, as a user's run: the wall time
    covers importing eegformer_cli.preprocess, starting the workers and everything after."""
    out = Path(tempfile.mkdtemp(dir=workdir))
    result = subprocess.run(
        [sys.executable, "-c", CHILD_RUN, str(out), str(n_jobs), *map(str, inputs)],
        check=True,
        capture_output=True,
        text=True,
    )
    times = json.loads(result.stdout)
    assert times.pop("n_error") == 0, result.stderr
    return RunTimes(**times)


def throughput(
    name: str, inputs: list[Path], recording_minutes: float, workdir: Path, repeats: int
) -> dict:
    """Median times of ``repeats`` runs per n_jobs (alternating 1, 2, 1, 2 ... so that a burst
    of load from other users hits both alike).

    ``idle_machine_estimate_s`` (n_jobs=2): what the wall time would be if the two workers had
    a core each, i.e. the main process's CPU time plus half the workers' CPU time. On a shared
    machine the measured wall time also contains waiting for the CPU.
    """
    samples: dict[int, list[RunTimes]] = {1: [], 2: []}
    for _ in range(repeats):
        for n_jobs in samples:
            samples[n_jobs].append(timed_run(inputs, n_jobs, workdir))
    median = {
        n: {
            key: float(np.median([getattr(r, key) for r in runs]))
            for key in ("wall", "cpu_main", "cpu_workers")
        }
        for n, runs in samples.items()
    }
    idle_estimate = median[2]["cpu_main"] + median[2]["cpu_workers"] / 2
    return {
        "set": name,
        "recording_minutes": round(recording_minutes, 2),
        "wall_s_median": {f"n_jobs_{n}": round(m["wall"], 2) for n, m in median.items()},
        "wall_s_all": {
            f"n_jobs_{n}": [round(r.wall, 2) for r in runs] for n, runs in samples.items()
        },
        "cpu_s_median": {
            f"n_jobs_{n}": {"main": round(m["cpu_main"], 2), "workers": round(m["cpu_workers"], 2)}
            for n, m in median.items()
        },
        "seconds_per_recording_minute": {
            f"n_jobs_{n}": round(m["wall"] / recording_minutes, 4) for n, m in median.items()
        },
        "speedup_2_vs_1": round(median[1]["wall"] / median[2]["wall"], 2),
        "idle_machine_estimate_s": {
            "n_jobs_2": round(idle_estimate, 2),
            "speedup_2_vs_1": round(median[1]["cpu_main"] / idle_estimate, 2),
        },
    }


def child_peak(path: Path, code_dir: Path = REPO, preset: str = "default") -> dict:
    """``eegformer preprocess`` of ``path`` alone with one worker (:func:`run_preprocess`
    ``n_jobs=1``: the recording processed and its connectome file written, in this process) in
    a fresh process running the code of ``code_dir`` (first on its PYTHONPATH): peak RSS, RSS
    after the imports, wall and CPU seconds."""
    environment = {**os.environ, "PYTHONPATH": str(code_dir), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY_CHILD, str(path), preset],
        cwd=code_dir,  # ``python -c`` puts its folder before PYTHONPATH on the path
        check=True,
        capture_output=True,
        text=True,
        env=environment,
    )
    after_imports_kib, peak_kib, n_segments, wall, cpu = result.stdout.split()
    return {
        "segments": int(n_segments),
        "rss_after_imports_mib": round(int(after_imports_kib) / 1024, 1),
        "peak_rss_mib": round(int(peak_kib) / 1024, 1),
        "wall_s": round(float(wall), 2),
        "cpu_s": round(float(cpu), 2),
    }


def peak_memory(workdir: Path) -> dict:
    path = write_synthetic_edf(workdir / "long_20min.edf", minutes=20, seed=99)
    try:
        peak = child_peak(path)
    finally:
        path.unlink()
    return {
        "recording": "synthetic 20 min, 19 channels, 256 Hz (EDF)",
        **{key: peak[key] for key in ("segments", "rss_after_imports_mib", "peak_rss_mib")},
        "target_mib": 1536,
    }


def bids_dataset(root: Path) -> Path:
    """A minimal BIDS dataset at ``root`` for one recording: ``dataset_description.json`` and
    the ``channels.tsv`` of ``sub-01_task-rest`` (the 19 channels, F3 marked bad); returns the
    path its EDF must have."""
    eeg = root / "sub-01" / "eeg"
    eeg.mkdir(parents=True)
    description = {"Name": "length sweep", "BIDSVersion": "1.9.0", "DatasetType": "raw"}
    (root / "dataset_description.json").write_text(json.dumps(description))
    rows = ["name\ttype\tunits\tstatus"]
    rows += [f"{name}\tEEG\tuV\t{'bad' if name == 'F3' else 'good'}" for name in STANDARD_1020]
    (eeg / "sub-01_task-rest_channels.tsv").write_text("\n".join(rows) + "\n")
    return eeg / "sub-01_task-rest_eeg.edf"


def length_sweep(
    workdir: Path,
    minutes: list[float],
    baseline: Path | None,
    baseline_minutes: list[float],
    repeats: int,
    preset: str = "default",
    bids: bool = False,
) -> list[dict]:
    """Per length: peak RSS and seconds per recording-minute (wall and CPU) of this code, and of
    ``baseline``'s for the lengths in ``baseline_minutes`` (alternating runs, medians), with
    the preprocessing ``preset`` (``paper``: ICA, on Laplacian noise); ``bids``: the recording
    in a BIDS dataset (:func:`bids_dataset`), the child given its root."""
    rows = []
    for length in minutes:
        root = workdir / f"sweep_{length:g}min_bids"
        edf = bids_dataset(root) if bids else workdir / f"sweep_{length:g}min.edf"
        path = root if bids else edf
        write_synthetic_edf(
            edf, minutes=length, seed=7, noise="laplace" if preset == "paper" else "normal"
        )
        codes = {"this": REPO}
        if baseline is not None and length in baseline_minutes:
            codes["baseline"] = baseline
        try:
            runs: dict[str, list[dict]] = {name: [] for name in codes}
            for repeat in range(repeats if len(codes) > 1 else 1):
                order = list(codes) if repeat % 2 == 0 else list(codes)[::-1]
                for name in order:
                    runs[name].append(child_peak(path, codes[name], preset))
        finally:
            edf.unlink()
            if bids:
                shutil.rmtree(root)
        row = {
            "minutes": length,
            "preset": preset,
            "layout": "BIDS, F3 bad" if bids else "file",
            "load_average": round(os.getloadavg()[0], 2),
        }
        for name, samples in runs.items():
            wall = float(np.median([r["wall_s"] for r in samples]))
            cpu = float(np.median([r["cpu_s"] for r in samples]))
            row[name] = {
                "segments": samples[0]["segments"],
                "peak_rss_mib": max(r["peak_rss_mib"] for r in samples),
                "rss_after_imports_mib": samples[0]["rss_after_imports_mib"],
                "seconds_per_recording_minute": round(wall / length, 4),
                "cpu_seconds_per_recording_minute": round(cpu / length, 4),
                "wall_s_all": [r["wall_s"] for r in samples],
                "cpu_s_all": [r["cpu_s"] for r in samples],
            }
        rows.append(row)
        print(f"length sweep: {json.dumps(row)}", file=sys.stderr)
    return rows


FOUR_NIGHTS_CHILD = """
import sys
from pathlib import Path
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
summary = run_preprocess([Path(sys.argv[2])], Path(sys.argv[1]),
                         PreprocessSettings.from_preset("default"), n_jobs=2)
assert summary.n_error == 0
"""


def four_nights(workdir: Path, hours: float = 8.0, interval_s: float = 0.2) -> dict:
    """``run_preprocess`` with ``n_jobs`` 2 on four recordings of ``hours``: the largest summed
    RSS of the process and its workers (sampled every ``interval_s``), and the wall time."""
    folder = workdir / "nights"
    folder.mkdir()
    try:
        for seed in range(4):
            write_synthetic_edf(folder / f"night{seed}.edf", minutes=hours * 60, seed=seed)
        out = workdir / "nights-out"
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-c", FOUR_NIGHTS_CHILD, str(out), str(folder)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        largest = 0
        while process.poll() is None:
            largest = max(largest, tree_rss_bytes(process.pid))
            time.sleep(interval_s)
        stderr = process.stderr.read()
        if process.returncode != 0:
            raise RuntimeError(f"four nights failed: {stderr[-2000:]}")
        wall = time.monotonic() - started
    finally:
        for path in folder.glob("*.edf"):
            path.unlink()
    return {
        "recordings": f"4 x {hours:g} h, 19 channels, 256 Hz (EDF)",
        "n_jobs": 2,
        "largest_summed_rss_mib": round(largest / 2**20, 1),
        "target_mib": round(2.5e9 / 2**20, 1),  # 2.5 GB
        "wall_s": round(wall, 1),
        "seconds_per_recording_minute": round(wall / (4 * hours * 60), 4),
        "load_average": round(os.getloadavg()[0], 2),
    }


def minutes_list(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part]


PARTS = ("throughput", "peak_memory", "length_sweep", "four_nights")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="throughput,peak_memory", help=", ".join(PARTS))
    parser.add_argument("--synthetic", type=int, default=24, help="synthetic recordings")
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes per synthetic one")
    parser.add_argument("--repeats", type=int, default=3, help="runs per n_jobs / code (median)")
    parser.add_argument("--skip-msu", action="store_true", help="do not use msu-schizophrenia")
    parser.add_argument("--sweep-minutes", type=minutes_list, default=[10, 120, 480, 1440])
    parser.add_argument("--baseline", type=Path, help="another version's checkout to compare")
    parser.add_argument("--baseline-minutes", type=minutes_list, default=[20, 120])
    parser.add_argument("--workdir", type=Path, help="where the recordings are written")
    parser.add_argument("--sweep-preset", default="default", help="default or paper (ICA)")
    parser.add_argument(
        "--sweep-bids", action="store_true", help="each sweep recording in a BIDS dataset"
    )
    args = parser.parse_args()
    parts = [part for part in args.parts.split(",") if part]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown --parts {unknown}; choose from {', '.join(PARTS)}")
    mne.set_log_level("ERROR")
    report = {"machine": machine(), "load_average_before": os.getloadavg(), "throughput": []}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        workdir = Path(tmp)
        if "throughput" in parts and MSU.is_dir() and not args.skip_msu:
            report["throughput"].append(
                throughput(
                    "msu-schizophrenia (84 x 1 min, 16 ch, 128 Hz)",
                    [MSU],
                    84.0,
                    workdir,
                    args.repeats,
                )
            )
        if "throughput" in parts and args.synthetic:
            synthetic = workdir / "synthetic"
            synthetic.mkdir()
            for seed in range(args.synthetic):
                write_synthetic_edf(synthetic / f"rec{seed:03d}.edf", args.minutes, seed)
            report["throughput"].append(
                throughput(
                    f"synthetic ({args.synthetic} x {args.minutes:g} min, 19 ch, 256 Hz)",
                    [synthetic],
                    args.synthetic * args.minutes,
                    workdir,
                    args.repeats,
                )
            )
        if "peak_memory" in parts:
            report["peak_memory"] = peak_memory(workdir)
        if "length_sweep" in parts:
            sweep_lengths = sorted(set(args.sweep_minutes) | set(args.baseline_minutes))
            report["length_sweep"] = length_sweep(
                workdir,
                sweep_lengths if args.baseline else args.sweep_minutes,
                args.baseline,
                args.baseline_minutes,
                args.repeats,
                args.sweep_preset,
                args.sweep_bids,
            )
        if "four_nights" in parts:
            report["four_nights"] = four_nights(workdir)
    report["load_average_after"] = os.getloadavg()
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
