"""Preprocessing benchmark: throughput with 1 and 2 workers, and peak memory of one long recording.

Measures, and prints as JSON on stdout:

- ``throughput``: for each recording set (msu-schizophrenia from ../shared/data when present,
  and synthetic 19-channel 256 Hz EDF recordings), the wall time of a fresh
  :func:`eegformer_cli.preprocess.run_preprocess` (default preset) into an empty folder with
  ``n_jobs`` 1 and 2 (median of ``--repeats`` alternating runs), as seconds per
  recording-minute, and the speed-up (target: >= 1.7). The first n_jobs=2 run includes
  starting the worker processes, as a user's run does; joblib reuses them afterwards.
- ``peak_memory``: the peak resident memory (``ru_maxrss`` of a child process) of
  :func:`process_recording` on a synthetic 20-minute, 19-channel, 256 Hz EDF recording
  (target: < 1.5 GiB), next to the child's memory after the imports alone.

Usage::

    .venv/bin/python benchmarks/bench_preprocess.py [--synthetic 16 --minutes 5] > result.json

The machine is shared: run it when it is quiet, and record the CPU (``lscpu``) with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mne
import numpy as np

from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.recordings.channels import STANDARD_1020

REPO = Path(__file__).resolve().parents[1]
MSU = REPO.parent / "shared" / "data" / "msu-schizophrenia"

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
    raw = mne.io.RawArray(data * 1e-5, mne.create_info(list(STANDARD_1020), sfreq, "eeg"),
                          verbose=False)
    mne.export.export_raw(path, raw, fmt="edf", overwrite=True, verbose=False)
    return path


def timed_run(inputs: list[Path], n_jobs: int, workdir: Path) -> float:
    """Wall seconds of one fresh run into an empty folder."""
    out = Path(tempfile.mkdtemp(dir=workdir))
    started = time.perf_counter()
    summary = run_preprocess(inputs, out, PreprocessSettings.from_preset("default"), n_jobs=n_jobs)
    elapsed = time.perf_counter() - started
    assert summary.n_error == 0 and summary.n_skipped == 0, summary
    return elapsed


def throughput(name: str, inputs: list[Path], recording_minutes: float, workdir: Path,
               repeats: int) -> dict:
    """Median wall time of ``repeats`` runs per n_jobs (alternating 1, 2, 1, 2 ... so that a
    burst of load from other users hits both alike)."""
    samples: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeats):
        for n_jobs in samples:
            samples[n_jobs].append(timed_run(inputs, n_jobs, workdir))
    median = {n_jobs: float(np.median(times)) for n_jobs, times in samples.items()}
    return {"set": name, "recording_minutes": round(recording_minutes, 2),
            "seconds_median": {f"n_jobs_{n}": round(t, 2) for n, t in median.items()},
            "seconds_all": {f"n_jobs_{n}": [round(t, 2) for t in times]
                            for n, times in samples.items()},
            "seconds_per_recording_minute": {f"n_jobs_{n}": round(t / recording_minutes, 4)
                                             for n, t in median.items()},
            "speedup_2_vs_1": round(median[1] / median[2], 2)}


def peak_memory(workdir: Path) -> dict:
    path = write_synthetic_edf(workdir / "long_20min.edf", minutes=20, seed=99)
    result = subprocess.run([sys.executable, "-c", PEAK_MEMORY_CHILD, str(path)], check=True,
                            capture_output=True, text=True)
    after_imports_kib, peak_kib, n_segments = map(int, result.stdout.split())
    return {"recording": "synthetic 20 min, 19 channels, 256 Hz (EDF)",
            "segments": n_segments, "rss_after_imports_mib": round(after_imports_kib / 1024, 1),
            "peak_rss_mib": round(peak_kib / 1024, 1), "target_mib": 1536}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, default=16, help="synthetic recordings")
    parser.add_argument("--minutes", type=float, default=5.0, help="minutes per synthetic one")
    parser.add_argument("--repeats", type=int, default=3, help="runs per n_jobs (median)")
    parser.add_argument("--skip-msu", action="store_true", help="do not use msu-schizophrenia")
    args = parser.parse_args()
    mne.set_log_level("ERROR")
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                if line.startswith("Model name")), platform.processor())
    report = {"machine": {"cpu": cpu, "cores": len(os.sched_getaffinity(0)),
                          "python": platform.python_version()},
              "load_average_before": os.getloadavg(), "throughput": []}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if MSU.is_dir() and not args.skip_msu:
            report["throughput"].append(throughput("msu-schizophrenia (84 x 1 min, 16 ch, 128 Hz)",
                                                   [MSU], 84.0, workdir, args.repeats))
        synthetic = workdir / "synthetic"
        synthetic.mkdir()
        for seed in range(args.synthetic):
            write_synthetic_edf(synthetic / f"rec{seed:03d}.edf", args.minutes, seed)
        report["throughput"].append(throughput(
            f"synthetic ({args.synthetic} x {args.minutes:g} min, 19 ch, 256 Hz)", [synthetic],
            args.synthetic * args.minutes, workdir, args.repeats))
        report["peak_memory"] = peak_memory(workdir)
    report["load_average_after"] = os.getloadavg()
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
