"""Wall time of ``train --permutations 100`` on msu-schizophrenia (target: < 5 min on 2 cores).

Runs the real command, one process, into a fresh run folder (``--overwrite``): participant-wise
5-fold CV of XAIguiFormer and the logistic-regression reference, the final model, the shortcut
audit and N permutations with the default null model (the reference refit on each), all with
``--n-jobs``; then collects metrics.json. The wall time is what a user waits for the whole
``train`` command, the permutations included.

Usage:
  python benchmarks/bench_permutations.py --out /tmp/bench-perm [--data PREP] [--permutations 100]
      [--n-jobs 2] [--permutation-model reference]
Prints one JSON object (also written to OUT/bench_permutations.json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bench_accuracy import preprocessed, timed_train  # scripts run from this folder
from machine import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the run and JSON")
    parser.add_argument("--data", type=Path, help="msu preprocess output (made if absent)")
    parser.add_argument("--permutations", type=int, default=100)
    parser.add_argument("--permutation-model", default="reference")
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = preprocessed("msu", args.data, args.out)
    load_start = os.getloadavg()
    command, wall, metrics = timed_train(
        data,
        args.out / "run",
        [
            "--device",
            "cpu",
            "--n-jobs",
            str(args.n_jobs),
            "--permutations",
            str(args.permutations),
            "--permutation-model",
            args.permutation_model,
        ],
        "train --permutations",
    )
    test = metrics["permutation_test"]
    results = {
        "machine": {
            **machine(),
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        },
        "command": command,
        "wall_seconds": wall,
        "cv_seconds": metrics["cv_seconds"],  # XAIguiFormer fits of the folds
        "permutation_seconds": test["seconds"],  # summed over the workers
        "n_permutations": test["n_permutations"],
        "null_model": test["null_model"],
        "p_values": {name: model["p_value"] for name, model in test["models"].items()},
        "observed_bac": {name: model["observed_bac"] for name, model in test["models"].items()},
        "shortcut_audit_flagged": metrics["shortcut_audit"]["flagged"],
        "shortcut_audit_status": {
            entry["name"]: entry["status"] for entry in metrics["shortcut_audit"]["variables"]
        },
    }
    (args.out / "bench_permutations.json").write_text(json.dumps(results, indent=2))
    print(
        f"{wall:.0f} s for train --permutations {args.permutations} (target < 300 s)",
        file=sys.stderr,
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
