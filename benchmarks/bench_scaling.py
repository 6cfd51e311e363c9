"""Preprocessing throughput on the same recordings: 1 and 2 local processes, and a 2-worker Dask
cluster (issue 8, "Scaling out").

Runs :func:`eegformer_cli.preprocess.run_preprocess` (default preset) into an empty folder
three times: ``n_jobs=1``, ``n_jobs=2`` (the local worker pool of
:func:`eegformer_cli.preprocess.recording_workers`; starting the workers is part of the time, as
in a user's run) and ``backend="dask"`` on a ``LocalCluster`` of 2 single-threaded
worker processes on 127.0.0.1 (:func:`eegformer_cli.parallel.preprocess_backend`; the cluster's
start-up is reported apart and included in the total). Each configuration runs ``--repeats``
times (fresh folders, interleaved) and the run with the median preprocessing time is reported.
Checks that the manifests and all token arrays are identical, and prints one JSON object on
stdout: recordings per second per configuration, the machine, and the 1-minute load average
before each run (the machine may be shared).

Usage::

    .venv/bin/python benchmarks/bench_scaling.py [--data ../shared/data/msu-schizophrenia]
        [--n 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import mne
import numpy as np
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

from eegformer_cli.parallel import preprocess_backend
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.recordings.reading import find_recordings

REPO = Path(__file__).resolve().parents[1]
MSU = REPO.parent / "shared" / "data" / "msu-schizophrenia"
CONFIGURATIONS = (
    ("local, n_jobs=1", "local", 1),
    ("local, n_jobs=2", "local", 2),
    ("dask LocalCluster, 2 workers", "dask", 2),
)


def timed_run(inputs: list[Path], backend: str, n_jobs: int, out: Path) -> dict:
    """Seconds to start the backend and to preprocess ``inputs`` into ``out``."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with preprocess_backend(backend, None, n_jobs):
        ready = time.perf_counter()
        summary = run_preprocess(
            inputs, out, PreprocessSettings.from_preset("default"), n_jobs=n_jobs
        )
        done = time.perf_counter()
    assert summary.n_error == 0 and summary.n_skipped == 0, summary
    return {
        "load_average_1min_before": round(load, 2),
        "backend_start_s": round(ready - started, 2),
        "preprocess_s": round(done - ready, 2),
        "total_s": round(done - started, 2),
        "recordings_per_s": round(len(inputs) / (done - ready), 3),
        "recordings_per_s_with_start": round(len(inputs) / (done - started), 3),
    }


def same_outputs(first: Path, other: Path) -> bool:
    """Identical manifest and identical arrays in every connectome file."""
    if (first / "manifest.tsv").read_bytes() != (other / "manifest.tsv").read_bytes():
        return False
    for path in sorted((first / "connectomes").glob("*.npz")):
        with np.load(path) as a, np.load(other / "connectomes" / path.name) as b:
            if set(a.files) != set(b.files) or not all(np.array_equal(a[k], b[k]) for k in a.files):
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=MSU, help="dataset folder (BIDS-like)")
    parser.add_argument("--n", type=int, default=40, help="recordings to use (the first n)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration")
    args = parser.parse_args()
    mne.set_log_level("ERROR")
    inputs = find_recordings([args.data])[: args.n]
    report = {
        "machine": machine(),
        "data": f"{args.data.name}: first {len(inputs)} recordings",
        "repeats": args.repeats,
        "runs": {},
    }
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in CONFIGURATIONS}
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        for repeat in range(args.repeats):
            for name, backend, n_jobs in CONFIGURATIONS:
                outs.append(Path(tmp) / f"{backend}-{n_jobs}-{repeat}")
                runs[name].append(timed_run(inputs, backend, n_jobs, outs[-1]))
                print(f"{name}: {runs[name][-1]}", file=sys.stderr)
        report["identical_outputs"] = all(same_outputs(outs[0], out) for out in outs[1:])
    for name, results in runs.items():
        report["runs"][name] = sorted(results, key=lambda r: r["preprocess_s"])[len(results) // 2]
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
