"""Preprocessing benchmark: throughput with 1 and 2 workers, and peak memory of one long recording.

Measures, and prints as JSON on stdout:

- ``throughput``: for each recording set (msu-schizophrenia from ../shared/data when present,
  and synthetic 19-channel 256 Hz EDF recordings), the wall time of
  :func:`eegformer_cli.preprocess.run_preprocess` (default preset) in a fresh Python process
  into an empty folder, with ``n_jobs`` 1 and 2 (median of ``--repeats`` alternating runs), as
  seconds per recording-minute, the speed-up (target: >= 1.7), and the CPU time of the main
  process and of the workers.
- ``peak_memory``: the peak resident memory (``ru_maxrss`` of a child process) of
  :func:`process_recording` on a synthetic 20-minute, 19-channel, 256 Hz EDF recording
  (target: < 1.5 GiB), next to the child's memory after the imports alone.

Usage::

    .venv/bin/python benchmarks/bench_preprocess.py [--synthetic 24 --minutes 10 --repeats 3] > result.json

The machine is shared: run it when it is quiet, and record the CPU (``lscpu``) with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mne
import numpy as np
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

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
import re, resource, sys
from pathlib import Path
from eegformer_cli.preprocess import PreprocessSettings, process_recording
status = Path("/proc/self/status").read_text()
after_imports = int(re.search(r"VmRSS:\\s+(\\d+)", status).group(1))
connectome = process_recording(sys.argv[1], PreprocessSettings.from_preset("default"))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(after_imports, peak, connectome.coh.shape[0])
"""


def write_synthetic_edf(path: Path, minutes: float, seed: int, sfreq: float = 256.0) -> Path:
    """A 19-channel recording (~20 uV noise plus a shared 10 Hz rhythm) saved as EDF."""
    rng = np.random.default_rng(seed)
    n_times = int(minutes * 60 * sfreq)
    alpha = np.sin(2 * np.pi * 10 * np.arange(n_times) / sfreq)
    data = rng.standard_normal((19, n_times)) + rng.uniform(0.5, 1.5, (19, 1)) * alpha
    raw = mne.io.RawArray(
        data * 1e-5, mne.create_info(list(STANDARD_1020), sfreq, "eeg"), verbose=False
    )
    mne.export.export_raw(path, raw, fmt="edf", overwrite=True, verbose=False)
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


def peak_memory(workdir: Path) -> dict:
    path = write_synthetic_edf(workdir / "long_20min.edf", minutes=20, seed=99)
    result = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY_CHILD, str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    after_imports_kib, peak_kib, n_segments = map(int, result.stdout.split())
    return {
        "recording": "synthetic 20 min, 19 channels, 256 Hz (EDF)",
        "segments": n_segments,
        "rss_after_imports_mib": round(after_imports_kib / 1024, 1),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "target_mib": 1536,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, default=24, help="synthetic recordings")
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes per synthetic one")
    parser.add_argument("--repeats", type=int, default=3, help="runs per n_jobs (median)")
    parser.add_argument("--skip-msu", action="store_true", help="do not use msu-schizophrenia")
    args = parser.parse_args()
    mne.set_log_level("ERROR")
    report = {"machine": machine(), "load_average_before": os.getloadavg(), "throughput": []}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if MSU.is_dir() and not args.skip_msu:
            report["throughput"].append(
                throughput(
                    "msu-schizophrenia (84 x 1 min, 16 ch, 128 Hz)",
                    [MSU],
                    84.0,
                    workdir,
                    args.repeats,
                )
            )
        if args.synthetic:
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
        report["peak_memory"] = peak_memory(workdir)
    report["load_average_after"] = os.getloadavg()
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
