"""Accuracy and training time on msu-schizophrenia: XAIguiFormer presets vs logistic regression.

Runs ``eegformer train`` (the real command, one process per variant, so the wall time is what a
user waits) on a ``preprocess`` output of ../shared/data/msu-schizophrenia, participant-wise
stratified 5-fold CV, and collects each run's metrics.json. Every variant uses the same seed,
hence the same folds, so the logistic-regression reference of each run is computed on exactly
the folds of that variant.

Variants:
  default      ``--preset default``, 5 folds x 3 repeats
  coarse_only  ``--preset default --no-xai`` (ablation: no explanation-guided refinement)
  no_drofe     ``--preset default --frequency-encoding none`` (ablation)
  paper        ``--preset paper``; the paper model (12 layers, d 128, batch 64) needs minutes
               per fold on a 2-core CPU, so it runs 5 folds x 1 repeat with ``--paper-epochs``
               epochs (default 20 instead of 100); say so when quoting it.

Usage:
  python benchmarks/bench_accuracy.py --out /tmp/bench-acc [--data PREP] [--variants default,paper]
      [--n-jobs 2]
Prints one JSON object (also written to OUT/bench_accuracy.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from machine import machine  # benchmarks/machine.py (scripts run from this folder)

REPO = Path(__file__).resolve().parents[1]
MSU = REPO.parent / "shared" / "data" / "msu-schizophrenia"
EEGFORMER = [sys.executable, "-m", "eegformer_cli"]

VARIANTS = {
    "default": ["--preset", "default", "--cv", "5", "--repeats", "3"],
    "coarse_only": ["--preset", "default", "--cv", "5", "--repeats", "3", "--no-xai"],
    "no_drofe": ["--preset", "default", "--cv", "5", "--repeats", "3",
                 "--frequency-encoding", "none"],
    "paper": ["--preset", "paper", "--cv", "5", "--repeats", "1"],
}


def preprocessed_msu(data: Path | None, out: Path) -> Path:
    """``data`` (a ``preprocess`` output of msu-schizophrenia), or OUT/msu-prep, made if absent."""
    data = data or out / "msu-prep"
    if not (data / "manifest.tsv").exists():
        subprocess.run(EEGFORMER + ["preprocess", str(MSU), "--out", str(data), "--n-jobs", "2"],
                       check=True)
    return data


def timed_train(data: Path, run_dir: Path, flags: list[str], what: str) -> tuple[str, float, dict]:
    """``eegformer train DATA --out RUN_DIR --label-column diagnosis --json --overwrite FLAGS``
    in its own process: (the command as typed, wall seconds, its metrics.json); exits naming
    ``what`` when it fails."""
    command = EEGFORMER + ["train", str(data), "--out", str(run_dir), "--label-column",
                           "diagnosis", "--json", "--overwrite", *flags]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr}")
    return (" ".join(["eegformer"] + command[len(EEGFORMER):]), wall,
            json.loads((run_dir / "metrics.json").read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs and JSON")
    parser.add_argument("--data", type=Path, help="msu preprocess output (made if absent)")
    parser.add_argument("--variants", default="default,coarse_only,paper")
    parser.add_argument("--paper-epochs", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n-jobs", type=int, default=1,
                        help="train --n-jobs: folds at a time (same numbers, less wall time)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = preprocessed_msu(args.data, args.out)
    results = {"machine": {**machine(), "load_average_start": os.getloadavg()},
               "data": str(data), "device": args.device, "n_jobs": args.n_jobs, "variants": {}}
    for name in args.variants.split(","):
        flags = list(VARIANTS[name])
        if name == "paper":
            flags += ["--epochs", str(args.paper_epochs)]
        command, wall, metrics = timed_train(data, args.out / name, [
            "--device", args.device, "--n-jobs", str(args.n_jobs), *flags], name)
        results["variants"][name] = {
            "command": command,
            "wall_seconds": wall, "cv_seconds": metrics["cv_seconds"],
            "n_folds": metrics["n_folds"],
            "models": {model: {"mean": values["mean"], "std": values["std"]}
                       for model, values in metrics["models"].items()},
            "load_average_end": os.getloadavg(),
        }
        print(f"{name}: {wall:.0f} s, BAC "
              f"{metrics['models']['xaiguiformer']['mean']['bac']:.3f} (logistic regression "
              f"{metrics['models']['logistic_regression']['mean']['bac']:.3f})", file=sys.stderr)
    (args.out / "bench_accuracy.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
