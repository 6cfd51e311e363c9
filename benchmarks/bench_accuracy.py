"""Accuracy, training time and what attention does: XAIguiFormer variants vs the references.

Runs ``eegformer train`` (the real command, one process per variant, so the wall time is what a
user waits) on a ``preprocess`` output of ../shared/data/msu-schizophrenia (``--dataset msu``,
label ``diagnosis``) or ../shared/data/eegmat-subset (``--dataset eegmat``, label
``condition``: rest vs mental arithmetic), participant-wise stratified 5-fold CV, and collects
each run's metrics.json. Every variant uses the same ``--seed``, hence the same folds, so the
variants and the references (the logistic regression; the tangent space when the folder holds
band covariances) are compared on exactly the same folds.

Variants:
  default         ``--preset default``, 5 folds x 3 repeats; every run also scores the model's
                  linear path alone on the same folds (metrics.json's ``linear_path`` model),
                  so "linear path alone" and "+ transformer" come from one run
  no_linear_path  ``linear_path = false``, epochs selected by balanced accuracy: the
                  transformer alone (the default model of earlier versions)
  residual_always ``residual = "on"``: the transformer's residual kept in every fold, whatever
                  validation says (what the transformer does when it is not gated)
  coarse_only     ``--preset default --no-xai`` (ablation: no explanation-guided refinement)
  no_drofe        ``--preset default --frequency-encoding none`` (ablation)
  no_screens      ``--preset default --no-interactions --no-age-interactions``: without the
                  interaction screens (the default model of earlier versions)
  tokenizer_only  the default tokenizer and head without transformer layers (``n_layers = 0``,
                  no refinement): what the transformer adds over the tokenizer and readout
  rose            ``default`` with RoSE (``spatial_encoding = "rose"``): the tokenizer's
                  electrodes attend to each other with queries and keys rotated by their
                  montage positions (3-D, cm)
  paper           ``--preset paper``; the paper model (12 layers, d 128, batch 64) needs minutes
                  per fold on a 2-core CPU, so it runs 5 folds x 1 repeat with ``--paper-epochs``
                  epochs (default 20 instead of 100); say so when quoting it.

For every variant: mean +- std of each metric, the paired difference with each reference
(``metrics.json``'s comparisons), the paired BAC difference with ``default`` (corrected
resampled t-test over the same folds), and the out-of-fold attention diagnostics
(model/diagnostics.py; means over layers).

Usage:
  python benchmarks/bench_accuracy.py --out /tmp/bench-acc [--dataset msu] [--seed 0]
      [--data PREP] [--variants default,coarse_only] [--n-jobs 2]
Prints one JSON object (also written to OUT/bench_accuracy.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine  # benchmarks/machine.py (scripts run from this folder)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
DATASETS = {"msu": ("msu-schizophrenia", "diagnosis"), "eegmat": ("eegmat-subset", "condition")}
EEGFORMER = [sys.executable, "-m", "eegformer_cli"]
CV = ["--cv", "5", "--repeats", "3"]

VARIANTS = {
    "default": ["--preset", "default", *CV],
    "coarse_only": ["--preset", "default", *CV, "--no-xai"],
    "no_drofe": ["--preset", "default", *CV, "--frequency-encoding", "none"],
    "no_screens": ["--preset", "default", *CV, "--no-interactions", "--no-age-interactions"],
    "tokenizer_only": ["--preset", "default", *CV],  # + a config file, see main()
    "no_linear_path": ["--preset", "default", *CV],  # + a config file, see main()
    "residual_always": ["--preset", "default", *CV],  # + a config file, see main()
    "rose": ["--preset", "default", *CV],  # + a config file, see main()
    "paper": ["--preset", "paper", "--cv", "5", "--repeats", "1"],
}
#: The variants that change model settings the command line has no flag for: a ``--config`` file.
VARIANT_TOML = {
    "tokenizer_only": "[model]\nn_layers = 0\nxai_refinement = false\n",
    "rose": '[model]\nspatial_encoding = "rose"\n',
    "no_linear_path": 'linear_path = false\nselection_metric = "bac"\n',
    "residual_always": 'transformer_path = "on"\n',
}


def preprocessed(dataset: str, data: Path | None, out: Path) -> Path:
    """``data`` (a ``preprocess`` output of ``dataset``), or OUT/<dataset>-prep, made if absent."""
    data = data or out / f"{dataset}-prep"
    if not (data / "manifest.tsv").exists():
        subprocess.run(
            EEGFORMER
            + [
                "preprocess",
                str(SHARED / DATASETS[dataset][0]),
                "--out",
                str(data),
                "--n-jobs",
                "2",
            ],
            check=True,
        )
    return data


def timed_train(
    data: Path, run_dir: Path, flags: list[str], what: str, label_column: str = "diagnosis"
) -> tuple[str, float, dict]:
    """``eegformer train DATA --out RUN_DIR --label-column LABEL --json --overwrite FLAGS`` in
    its own process: (the command as typed, wall seconds, its metrics.json); exits naming
    ``what`` when it fails."""
    command = EEGFORMER + [
        "train",
        str(data),
        "--out",
        str(run_dir),
        "--label-column",
        label_column,
        "--json",
        "--overwrite",
        *flags,
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr}")
    return (
        " ".join(["eegformer"] + command[len(EEGFORMER) :]),
        wall,
        json.loads((run_dir / "metrics.json").read_text()),
    )


def attention_means(attention: dict | None) -> dict | None:
    """Per pass, each diagnostic's mean over layers (None when the run has no attention)."""
    if not attention:
        return None
    return {
        name: {key: sum(values) / len(values) for key, values in quantities.items()}
        for name, quantities in attention["passes"].items()
    }


def kept_interactions(run_dir: Path) -> dict:
    """What each fold's interaction screen kept (its fold record's ``interaction_screen``):
    the number per fold, the folds keeping any, and each kept interaction's fold count."""
    folds = sorted((run_dir / "folds").glob("r*_f*.json"))
    kept = [
        (json.loads(f.read_text()).get("interaction_screen") or {}).get("kept", []) for f in folds
    ]
    labels = [
        " x ".join(" ".join(side) if isinstance(side, list) else side for side in (k["a"], k["b"]))
        for fold in kept
        for k in fold
    ]
    return {
        "per_fold": [len(fold) for fold in kept],
        "folds_keeping_any": sum(bool(fold) for fold in kept),
        "counts": {label: labels.count(label) for label in sorted(set(labels))},
    }


def main() -> None:
    from eegformer_cli.evaluation.metrics import compare_folds
    from eegformer_cli.evaluation.run_metrics import FoldScores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs and JSON")
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="msu")
    parser.add_argument(
        "--data", type=Path, help="preprocess output of the dataset (made if absent)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="split seed (0: msu's acceptance folds)"
    )
    parser.add_argument("--variants", default="default,coarse_only,paper")
    parser.add_argument("--paper-epochs", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--n-jobs",
        type=int,
        default=1,
        help="train --n-jobs: folds at a time (same numbers, less wall time)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    label_column = DATASETS[args.dataset][1]
    data = preprocessed(args.dataset, args.data, args.out)
    results = {
        "machine": {**machine(), "load_average_start": os.getloadavg()},
        "dataset": args.dataset,
        "seed": args.seed,
        "data": str(data),
        "device": args.device,
        "n_jobs": args.n_jobs,
        "variants": {},
    }
    per_fold = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants.split(","):
            flags = list(VARIANTS[name])
            if name == "paper":
                flags += ["--epochs", str(args.paper_epochs)]
            if name in VARIANT_TOML:
                config = Path(tmp) / f"{name}.toml"
                config.write_text(VARIANT_TOML[name])
                flags += ["--config", str(config)]
            command, wall, metrics = timed_train(
                data,
                args.out / f"{name}-{args.dataset}-seed{args.seed}",
                [
                    "--seed",
                    str(args.seed),
                    "--device",
                    args.device,
                    "--n-jobs",
                    str(args.n_jobs),
                    *flags,
                ],
                name,
                label_column,
            )
            per_fold[name] = [
                FoldScores.from_dict(fold) for fold in metrics["models"]["xaiguiformer"]["per_fold"]
            ]
            run_dir = args.out / f"{name}-{args.dataset}-seed{args.seed}"
            results["variants"][name] = {
                "command": command,
                "wall_seconds": wall,
                "cv_seconds": metrics["cv_seconds"],
                "n_folds": metrics["n_folds"],
                "models": {
                    model: {"mean": values["mean"], "std": values["std"]}
                    for model, values in metrics["models"].items()
                },
                "vs_reference": metrics["comparison"],
                "vs_references": metrics.get("comparisons") or [metrics["comparison"]],
                "attention": attention_means(metrics.get("attention")),
                "kept_interactions": kept_interactions(run_dir),
                "linear_path": metrics.get("linear_path"),
                "load_average_end": os.getloadavg(),
            }
            references = ", ".join(
                f"{model} {values['mean']['bac']:.3f}"
                for model, values in metrics["models"].items()
                if model != "xaiguiformer"
            )
            print(
                f"{name}: {wall:.0f} s, BAC "
                f"{metrics['models']['xaiguiformer']['mean']['bac']:.3f} ({references})",
                file=sys.stderr,
            )
    if "default" in per_fold:
        for name, folds in per_fold.items():
            if name != "default" and len(folds) == len(per_fold["default"]):
                # 5-fold CV: test / training participants = 1 / 4
                results["variants"][name]["default_minus_this"] = compare_folds(
                    per_fold["default"], folds, test_train_ratio=0.25
                )
    (args.out / "bench_accuracy.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
