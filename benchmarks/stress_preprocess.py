"""Stress check: hundreds of recordings, a few bad ones mixed in, through ``preprocess --n-jobs 2``.

Writes ``--n-recordings`` synthetic EDF recordings (default 500: 19 channels, 128 Hz, 30-40 s,
the project's simulator, :mod:`eegformer_cli.simulation.simulate`) of which ``len(BAD_KINDS)`` (10) are bad
in the ways of issue 7 (empty, truncated, a text file, 5 s, a flat channel, all NaN, 2 channels,
numbered channel names, 64 Hz, a header cut short), with their names sorted in among the good
ones. Then runs the real command, ``python -m eegformer_cli preprocess DATA --out OUT --n-jobs 2``,
in a subprocess and samples the resident memory (RSS) of its process tree (the command and its
worker processes) every ``--interval`` seconds, together with the number of connectome files
written so far.

Checks: exit 0; every good recording ``ok`` in the manifest with its connectome file; every bad
one ``error`` with a one-line reason naming its file. Memory is "flat" when the RSS of the tree
does not grow with the number of recordings done: the JSON gives the slope of a least-squares
line of RSS against recordings done (MiB per 100 recordings) over the processing phase, and the
median RSS of its first and last quarters.

Usage::

    .venv/bin/python benchmarks/stress_preprocess.py [--n-recordings 500 --n-jobs 2] > stress.json

Prints JSON on stdout (progress on stderr). The data and output go to a temporary folder,
removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mne
import numpy as np

from eegformer_cli.simulation import simulate

SFREQ = 128
DURATIONS_S = range(30, 41)  # recording i lasts DURATIONS_S[i % 11] seconds
SEED = 500
BAD_KINDS = (
    "empty",
    "truncated_data",
    "text",
    "short",
    "flat",
    "nan",
    "two_channels",
    "numbered",
    "rate64",
    "truncated_header",
)
MIB = 2**20


def write_bad_recording(kind: str, folder: Path, good: mne.io.BaseRaw, good_file: Path) -> Path:
    """One bad recording of ``kind`` (see BAD_KINDS), derived from a good one; returns its path."""
    path = folder / f"{kind}.edf"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind in ("truncated_data", "truncated_header"):
        content = good_file.read_bytes()
        path.write_bytes(content[: len(content) // 2 if kind == "truncated_data" else 200])
    elif kind == "text":
        path.write_text("participant_id\tage\nsub-001\t30\n")
    elif kind == "short":
        simulate.write_edf(good.copy().crop(0, 5, include_tmax=False), path)
    elif kind == "flat":
        simulate.write_edf(good.copy().apply_function(lambda x: x * 0.0, picks=[9]), path)
    elif kind == "nan":  # EDF cannot store NaN; FIF can
        path = folder / "nan_raw.fif"
        good.copy().apply_function(lambda x: np.full_like(x, np.nan)).save(path, verbose="error")
    elif kind == "two_channels":
        simulate.write_edf(good.copy().pick([0, 1]), path)
    elif kind == "numbered":
        raw = good.copy()
        raw.rename_channels({name: f"E{i + 1}" for i, name in enumerate(raw.ch_names)})
        simulate.write_edf(raw, path)
    elif kind == "rate64":
        simulate.write_edf(good.copy().resample(64, verbose="error"), path)
    else:
        raise ValueError(f"unknown bad kind {kind!r}")
    return path


def write_dataset(folder: Path, n_recordings: int) -> tuple[list[Path], list[Path]]:
    """``n_recordings - len(BAD_KINDS)`` good EDFs + one bad file per kind, and participants.tsv.

    The bad files are named ``sub-<n>-bad-<kind>`` so that they sort in among the good ones.
    Returns (good paths, bad paths).
    """
    n_good = n_recordings - len(BAD_KINDS)
    eeg = folder / "eeg"
    eeg.mkdir(parents=True)
    participants = simulate.draw_participants(n_good, SEED)
    good = []
    for i, participant in enumerate(participants):
        raw = simulate.simulate_participant(participant, DURATIONS_S[i % len(DURATIONS_S)], SFREQ)
        good.append(eeg / participant.file_name)
        simulate.write_edf(raw, good[-1])
        if i % 50 == 0:
            print(f"stress: wrote {i + 1}/{n_good} good recordings", file=sys.stderr)
    (folder / "participants.tsv").write_text(simulate.participants_table(participants))
    source = simulate.simulate_participant(participants[0], 30, SFREQ)
    bad = []
    step = max(1, n_good // len(BAD_KINDS))
    for k, kind in enumerate(BAD_KINDS):
        path = write_bad_recording(kind, eeg, source, good[0])
        renamed = path.with_name(f"sub-{k * step + 1:03d}-bad-{path.name}")
        bad.append(path.rename(renamed))
    return good, bad


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` and all its descendants, bytes (0 once it is gone)."""
    try:
        import psutil
    except ImportError:
        return _tree_rss_from_proc(pid)
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_info().rss
    return total


def _tree_rss_from_proc(pid: int) -> int:
    """:func:`tree_rss_bytes` without psutil: /proc/<pid>/stat parents, /proc/<pid>/statm RSS."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, p in parents.items() if p == parent and child not in tree]
        tree.update(children)
        frontier.extend(children)
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for member in tree:
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{member}/statm").read_text().split()[1]) * page
    return total


def run_and_sample(command: list[str], connectomes: Path, interval_s: float) -> dict:
    """Run ``command``, sampling (seconds, RSS of the tree, connectome files so far)."""
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []
    while process.poll() is None:
        done = sum(1 for _ in os.scandir(connectomes)) if connectomes.is_dir() else 0
        samples.append((round(time.monotonic() - start, 2), tree_rss_bytes(process.pid), done))
        time.sleep(interval_s)
    stdout, stderr = process.communicate()
    return {
        "returncode": process.returncode,
        "wall_s": time.monotonic() - start,
        "stdout": stdout,
        "stderr": stderr,
        "samples": samples,
    }


def memory_summary(samples: list[tuple[float, int, int]], n_good: int) -> dict:
    """RSS against recordings done, over the processing phase (first to last file written)."""
    processing = [(t, rss, done) for t, rss, done in samples if 0 < done < n_good and rss > 0]
    if len(processing) < 8:
        return {"n_samples": len(processing), "note": "run too short to judge"}
    done = np.array([s[2] for s in processing], dtype=float)
    rss = np.array([s[1] for s in processing], dtype=float) / MIB
    slope, _ = np.polyfit(done, rss, 1)
    quarter = len(rss) // 4
    return {
        "n_samples": len(processing),
        "rss_mib_first_quarter_median": round(float(np.median(rss[:quarter])), 1),
        "rss_mib_last_quarter_median": round(float(np.median(rss[-quarter:])), 1),
        "rss_mib_min": round(float(rss.min()), 1),
        "rss_mib_max": round(float(rss.max()), 1),
        "slope_mib_per_100_recordings": round(float(slope) * 100, 2),
    }


def check_manifest(out: Path, good: list[Path], bad: list[Path]) -> dict:
    """Every good recording ok with its file, every bad one an error naming its file."""
    with open(out / "manifest.tsv", newline="") as handle:
        rows = {row["source_file"]: row for row in csv.DictReader(handle, delimiter="\t")}
    good_not_ok = [
        str(p)
        for p in good
        if rows.get(str(p), {}).get("status") != "ok"
        or not (out / rows[str(p)]["connectome"]).is_file()
    ]
    bad_errors = {p.name: rows.get(str(p), {}).get("error") for p in bad}
    bad_not_reported = [
        name
        for name, error in bad_errors.items()
        if not error or name not in error or "\n" in error
    ]
    return {
        "n_rows": len(rows),
        "good_not_ok": good_not_ok,
        "bad_not_reported": bad_not_reported,
        "bad_errors": bad_errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-recordings", type=int, default=500)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.5, help="RSS sampling period, s")
    parser.add_argument("--keep", action="store_true", help="keep the data and output folder")
    args = parser.parse_args()
    if args.n_recordings <= 2 * len(BAD_KINDS):
        parser.error(f"--n-recordings must be above {2 * len(BAD_KINDS)}")
    work = Path(tempfile.mkdtemp(prefix="eegformer-stress-"))
    try:
        started = time.monotonic()
        good, bad = write_dataset(work / "data", args.n_recordings)
        generate_s = time.monotonic() - started
        out = work / "out"
        command = [
            sys.executable,
            "-m",
            "eegformer_cli",
            "preprocess",
            str(work / "data"),
            "--out",
            str(out),
            "--n-jobs",
            str(args.n_jobs),
        ]
        print(f"stress: {' '.join(command[1:])}", file=sys.stderr)
        run = run_and_sample(command, out / "connectomes", args.interval)
        checks = check_manifest(out, good, bad) if (out / "manifest.tsv").is_file() else {}
        result = {
            "command": "eegformer " + " ".join(command[3:]),
            "n_recordings": args.n_recordings,
            "n_good": len(good),
            "n_bad": len(bad),
            "recording": f"19 channels, {SFREQ} Hz, {min(DURATIONS_S)}-{max(DURATIONS_S)} s, EDF",
            "n_jobs": args.n_jobs,
            "generate_s": round(generate_s, 1),
            "returncode": run["returncode"],
            "wall_s": round(run["wall_s"], 1),
            "recordings_per_s": round(args.n_recordings / run["wall_s"], 2),
            "traceback_in_output": "Traceback" in run["stdout"] + run["stderr"],
            "stderr_tail": run["stderr"].strip().splitlines()[-4:],
            "checks": checks,
            "ok": (
                run["returncode"] == 0
                and bool(checks)
                and not checks["good_not_ok"]
                and not checks["bad_not_reported"]
            ),
            "memory": memory_summary(run["samples"], len(good)),
            "rss_samples": [(t, round(rss / MIB, 1), done) for t, rss, done in run["samples"]],
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_average_1min_at_end": round(os.getloadavg()[0], 2),
            },
        }
        print(json.dumps(result, indent=1))
    finally:
        if args.keep:
            print(f"stress: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
