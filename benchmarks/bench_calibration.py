"""Calibration and prediction sets, honestly: what ``train``'s recalibration and ``predict
--coverage`` do for people no part of the run saw (nested cross-validation).

Within one run, the recalibration is chosen and the conformal sets are calibrated on the same
out-of-fold probabilities they are judged on, and applied to a final model that was not among
the fold models. So here the whole ``train`` is the inner loop:

1. an outer participant-wise stratified ``--outer``-fold split (seed ``--seed``) of the data;
2. for each outer fold, ``train`` (the real function, ``default`` preset, ``--cv``-fold CV, its
   own seed) on the outer training participants only (a preprocess folder holding just their
   recordings): fold models, out-of-fold probabilities, recalibration and conformal set chosen
   from them, and the final model, all in ``model.pt``, as a user gets them;
3. that model predicts the outer test participants (the probabilities ``predict`` gives, and
   those before its recalibration), with ``--coverage`` sets at 0.8 / 0.9 / 0.95.

The outer test predictions, pooled over the outer folds (every participant once), give the
expected calibration error, Brier score and log-loss before and after recalibration (as
``predict`` applies it: only when the inner cross-fitting found that it helps), after each
recalibration forced (fitted on the inner out-of-fold probabilities whatever the inner
choice: what the rule guards against or gives up), and the empirical coverage and size of the
prediction sets (:mod:`eegformer_cli.evaluation.calibration`
and :mod:`~eegformer_cli.evaluation.conformal` define them).

Usage (from the repository root):
  python benchmarks/bench_calibration.py --data PREP --label-column diagnosis --out OUT
      [--outer 5] [--cv 5] [--seed 0] [--n-jobs 2] [--epochs N] [--reuse]
(--reuse: keep the inner runs already in OUT, recomputing only the outer figures)
Prints one JSON object (also written to OUT/bench_calibration.json).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine

LEVELS = (0.8, 0.9, 0.95)


def subset_folder(data: Path, participants: set[str], out: Path) -> Path:
    """A preprocess folder holding only ``participants``' recordings (their manifest rows; the
    connectomes and settings linked, not copied)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(data / "manifest.tsv", newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        rows = [row for row in reader if row["participant_id"] in participants]
        columns = reader.fieldnames
    with open(out / "manifest.tsv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    for name in ("connectomes", "preprocess.json"):
        if not (out / name).exists():
            (out / name).symlink_to((data / name).resolve())
    return out


def outer_test_predictions(model_file: Path, data: Path, test: set[str]):
    """(raw probabilities (n, K), class indices (n,), recording ids) of the outer test
    participants' recordings, by the model file's network (before its recalibration)."""
    from scipy.special import softmax

    from eegformer_cli.inference.inputs import load_inputs
    from eegformer_cli.model.predict import recording_logits
    from eegformer_cli.training.model_file import load_model_file

    bundle = load_model_file(model_file)
    with open(data / "manifest.tsv", newline="", encoding="utf-8") as manifest:
        labels = {
            row["recording_id"]: row[bundle.label_column]
            for row in csv.DictReader(manifest, delimiter="\t")
        }
    import torch

    probabilities, truth, ids = [], [], []
    for item in load_inputs(bundle, [data]):
        if item.participant_id not in test or item.error is not None:
            continue
        logits = recording_logits(
            bundle.model, [(item.coh, item.wpli, item.age, item.sex)], torch.device("cpu")
        )
        probabilities.append(softmax(logits, axis=1)[0])
        truth.append(bundle.label_names.index(labels[item.recording_id]))
        ids.append(item.recording_id)
    return bundle, np.array(probabilities), np.array(truth), ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a preprocess output folder")
    parser.add_argument("--label-column", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--outer", type=int, default=5)
    parser.add_argument("--cv", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()

    from eegformer_cli.evaluation import calibration, conformal
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.training.config import resolve_config
    from eegformer_cli.training.dataset import load_training_data
    from eegformer_cli.training.run_plan import default_positive_label
    from eegformer_cli.training.splits import cross_validation_folds

    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    data = load_training_data(args.data, args.label_column)
    groups = np.array([r.participant_id for r in data.recordings])
    outer = cross_validation_folds(groups, data.label_indices(), args.outer, 1, args.seed, 0.2)
    flags = {"cv": args.cv, "repeats": 1, "seed": args.seed, "device": "cpu"}
    if args.epochs:
        flags["epochs"] = args.epochs
    config = resolve_config("default", None, flags)
    positive = (
        None
        if len(data.label_names) != 2
        else data.label_names.index(default_positive_label(data.label_names))
    )
    pooled = {
        "raw": [],
        "recalibrated": [],
        "labels": [],
        "sets": {level: [] for level in LEVELS},
        "forced": {method: [] for method in ("temperature", "platt")},
    }
    per_fold = []
    for fold in outer:
        train_participants = set(fold.train) | set(fold.val)
        folder = subset_folder(
            args.data, train_participants, args.out / f"outer{fold.fold}" / "prep"
        )
        run_dir = args.out / f"outer{fold.fold}" / "run"
        if args.reuse and (run_dir / "model.pt").is_file():
            metrics = json.loads((run_dir / "metrics.json").read_text())
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
            metrics = run_training(folder, run_dir, args.label_column, config, n_jobs=args.n_jobs)
        bundle, raw, truth, ids = outer_test_predictions(
            run_dir / "model.pt", args.data, set(fold.test)
        )
        recalibrated = calibration.recalibrate(bundle.recalibration, raw)
        pooled["raw"].append(raw)
        pooled["recalibrated"].append(recalibrated)
        pooled["labels"].append(truth)
        inner = (np.asarray(bundle.conformal["probabilities"]), bundle.conformal["labels"])
        for method in pooled["forced"]:
            if method == "platt" and raw.shape[1] != 2:
                continue
            fitted = calibration.fit_recalibration(method, inner[1], inner[0], positive)
            pooled["forced"][method].append(calibration.recalibrate(fitted, raw))
        for level in LEVELS:
            cal = bundle.conformal
            pooled["sets"][level].append(
                conformal.prediction_sets(cal["probabilities"], cal["labels"], recalibrated, level)
                if len(cal["labels"]) >= conformal.fewest_recordings(level)
                else np.ones_like(recalibrated, dtype=bool)
            )
        per_fold.append(
            {
                "outer_fold": fold.fold,
                "n_test_recordings": len(ids),
                "inner_bac": metrics["models"]["xaiguiformer"]["mean"]["bac"],
                "recalibration": {k: bundle.recalibration[k] for k in ("method", "params")},
                "inner_reason": metrics["calibration"]["recalibration"]["reason"],
                "n_calibration": len(bundle.conformal["labels"]),
            }
        )
        print(json.dumps(per_fold[-1]), file=sys.stderr, flush=True)
    raw = np.concatenate(pooled["raw"])
    recalibrated = np.concatenate(pooled["recalibrated"])
    labels = np.concatenate(pooled["labels"])

    def summary(probabilities):
        s = calibration.calibration_summary(labels, probabilities, positive)
        return {k: s[k] for k in ("brier", "log_loss", "ece", "slope", "intercept", "n")}

    coverage = {}
    for level in LEVELS:
        sets = np.concatenate(pooled["sets"][level])
        sizes = sets.sum(axis=1)
        coverage[str(level)] = {
            "empirical_coverage": float(sets[np.arange(len(labels)), labels].mean()),
            "mean_size": float(sizes.mean()),
            "share_ambiguous": float((sizes > 1).mean()),
        }
    results = {
        "machine": {**machine(), "load_average": os.getloadavg()},
        "data": str(args.data),
        "label_column": args.label_column,
        "scheme": f"outer {args.outer}-fold (seed {args.seed}) x inner train "
        f"(--cv {args.cv}, default preset" + (f", epochs {args.epochs})" if args.epochs else ")"),
        "before_recalibration": summary(raw),
        "after_recalibration": summary(recalibrated),
        "forced_recalibration": {
            method: summary(np.concatenate(parts))
            for method, parts in pooled["forced"].items()
            if parts
        },
        "prediction_sets": coverage,
        "per_outer_fold": per_fold,
        "seconds": time.perf_counter() - start,
    }
    (args.out / "bench_calibration.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
