"""Ground truth: what XAIguiFormer learns when the cause of the label is known.

For each scenario of ``eegformer simulate --scenario`` (linear, interaction, age, null;
eegformer_cli/scenarios.py) this simulates a study, preprocesses it with the real command, and
trains every model on the same participant-wise 5-fold CV (one ``train --fold k`` process per
fold, two side by side; no final model):

  oracle            logistic regression on the planted pairs' coherence in the planted bands,
                    with the interaction given (products; age for ``age``): the practical limit
  logistic_regression  the built-in reference (every fold of every run; reported from default's)
  default           ``--preset default``
  no_xai            ``--no-xai`` (coarse pass only)
  tokenizer_only    the tokenizer and head, no transformer layer
  no_drofe          ``--frequency-encoding none`` (age scenario)
  age_withheld      default on the same connectomes with every age set to n/a (age scenario)

Per scenario at ``--n`` (default 300), so that the whole benchmark fits a working session on 2
cores: linear default, no_xai, tokenizer_only; interaction default, tokenizer_only (does
attention between band tokens carry the interaction); age default, no_drofe, age_withheld (does
the age rotation carry the age effect); null default (``--variants`` runs any list instead).
At ``--n-large`` participants (default 1000) only interaction and age run, with ``default`` and
the ablation that answers each (tokenizer alone; without dRoFE). ``--skip-small`` runs only
those, so two processes can share the work.

Paired differences (variant minus default, and default minus the logistic regression) use the
corrected resampled t-test over the same folds. The null scenario also runs the shortcut audit
and a 100-permutation test (``train --permutations 100``, which also fits a final model: the
only one).

Explanations (``--explain``): a model trained on 80 % of the linear / interaction study
(``train --holdout 0.2``) explains a fresh study of the same layout (other participants, same
planted pairs): how often the planted band ranks first by |band importance| in recordings that
carry the coupling, the AUROC of the planted cells' mean |channel-pair attribution| against
every other (pair, band) cell, and the rank of the planted bands in mean |band importance|.

The acceptance seed is ACCEPTANCE_SEED: it confirms, it is never used to choose a design.
Screen on other seeds (``--seed``).

Usage:
  python benchmarks/bench_ground_truth.py --out /tmp/gt [--seed 2711] [--n 300] [--n-large 1000]
      [--scenarios linear,interaction,age,null] [--skip-large] [--explain] [--n-jobs 2]
Prints one JSON object (also OUT/bench_ground_truth.json).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
EEGFORMER = [sys.executable, "-m", "eegformer_cli"]
ACCEPTANCE_SEED = 2711
CV_FOLDS = 5
TOKENIZER_ONLY_TOML = "[model]\nn_layers = 0\nxai_refinement = false\n"
VARIANTS = {
    "default": [],
    "no_xai": ["--no-xai"],
    "tokenizer_only": ["--config", "{tokenizer_only_toml}"],
    "no_drofe": ["--frequency-encoding", "none"],
    "age_withheld": [],  # default on a copy of the data without ages
}
SMALL = {
    "linear": ["default", "no_xai", "tokenizer_only"],
    "interaction": ["default", "tokenizer_only"],
    "age": ["default", "no_drofe", "age_withheld"],
    "null": ["default"],
}
LARGE = {"interaction": ["default", "tokenizer_only"], "age": ["default", "no_drofe"]}


def run(command: list[str], log: Path) -> None:
    with open(log, "a") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}; see {log}")


def study(
    out: Path, scenario: str, n: int, seed: int, layout_seed: int, n_jobs: int, log: Path
) -> tuple[Path, Path]:
    """Simulate and preprocess one study (reused when already there); (study dir, prep dir)."""
    name = f"{scenario}-n{n}-seed{seed}-layout{layout_seed}"
    data, prep = out / "studies" / name, out / "prep" / name
    if not (prep / "manifest.tsv").exists():
        run(
            EEGFORMER
            + [
                "simulate",
                "--out",
                str(data),
                "--scenario",
                scenario,
                "--n-participants",
                str(n),
                "--duration",
                "60",
                "--seed",
                str(seed),
                "--layout-seed",
                str(layout_seed),
                "--overwrite",
            ],
            log,
        )
        run(EEGFORMER + ["preprocess", str(data), "--out", str(prep), "--n-jobs", str(n_jobs)], log)
    return data, prep


def without_ages(prep: Path) -> Path:
    """A preprocess folder sharing ``prep``'s connectomes with every age set to n/a."""
    copy = prep.parent / f"{prep.name}-noage"
    if not (copy / "manifest.tsv").exists():
        copy.mkdir(parents=True, exist_ok=True)
        if not (copy / "connectomes").exists():
            (copy / "connectomes").symlink_to((prep / "connectomes").resolve())
        shutil.copy(prep / "preprocess.json", copy / "preprocess.json")
        with open(prep / "manifest.tsv", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        for row in rows:
            row["age"] = "n/a"
        with open(copy / "manifest.tsv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
            writer.writeheader()
            writer.writerows(rows)
    return copy


def cross_validate(prep: Path, run_dir: Path, variant: str, n_jobs: int, log: Path) -> float:
    """``train --fold k`` for every fold (``n_jobs`` side by side); returns the wall time (s)."""
    flags = [
        f.format(tokenizer_only_toml=run_dir.parent / "tokenizer_only.toml")
        for f in VARIANTS[variant]
    ]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    (run_dir.parent / "tokenizer_only.toml").write_text(TOKENIZER_ONLY_TOML)
    base = EEGFORMER + [
        "train",
        str(prep),
        "--out",
        str(run_dir),
        "--label-column",
        "diagnosis",
        "--cv",
        str(CV_FOLDS),
        "--seed",
        "0",
        *flags,
    ]
    started = time.time()
    pending = [k for k in range(CV_FOLDS) if not (run_dir / "folds" / f"r0_f{k}.json").exists()]
    if pending:
        run(base + ["--fold", str(pending[0])], log)  # the first job makes the run folder
        with ThreadPoolExecutor(n_jobs) as pool:
            list(pool.map(lambda k: run(base + ["--fold", str(k)], log), pending[1:]))
    return time.time() - started


def fold_results(run_dir: Path) -> list[dict]:
    results = [
        json.loads(p.read_text()) for p in (run_dir / "folds").glob("*.json") if p.stem != "final"
    ]
    return sorted(results, key=lambda r: (r["repeat"], r["fold"]))


def oracle_per_fold(truth: dict, prep: Path, run_dir: Path) -> list[dict]:
    """The oracle's metrics per fold, on the run's own splits."""
    from eegformer_cli.preprocess import load_connectome
    from eegformer_cli.scenarios import LABELS, oracle_features, oracle_model
    from eegformer_cli.training.metrics import classification_metrics
    from eegformer_cli.training.splits import load_splits

    with open(prep / "manifest.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["status"] == "ok"]
    by_participant = {r["participant_id"]: r for r in rows}
    truth_age = {p["participant_id"]: p["age"] for p in truth["participants"]}
    connectomes = {r["participant_id"]: load_connectome(prep / r["connectome"]) for r in rows}
    features = oracle_features(truth, connectomes, truth_age)
    labels = {pid: LABELS.index(r["diagnosis"]) for pid, r in by_participant.items()}
    _, folds = load_splits(run_dir / "splits.json")
    out = []
    for fold in folds:
        fit = fold.train + fold.val
        model = oracle_model(fold.fold).fit(
            np.stack([features[p] for p in fit]), [labels[p] for p in fit]
        )
        probs = model.predict_proba(np.stack([features[p] for p in fold.test]))
        out.append(classification_metrics(np.array([labels[p] for p in fold.test]), probs, 1))
    return out


def summary(per_fold: list[dict]) -> dict:
    from eegformer_cli.training.metrics import summarise_folds

    summarised = summarise_folds(per_fold)
    return {
        "bac": summarised["mean"]["bac"],
        "bac_std": summarised["std"]["bac"],
        "auroc": summarised["mean"]["auroc"],
        "per_fold_bac": [round(float(m["bac"]), 4) for m in per_fold],
    }


def paired(a: list[dict], b: list[dict]) -> dict:
    from eegformer_cli.training.metrics import compare_folds

    c = compare_folds(a, b, 1 / (CV_FOLDS - 1))
    return {
        "mean_difference": c["mean_difference"],
        "ci95": c["ci95"],
        "p_value": c["p_value"],
        "better_equal_worse": [c["folds_better"], c["folds_equal"], c["folds_worse"]],
    }


def evaluate_scenario(
    out: Path, scenario: str, n: int, seed: int, variants: list[str], n_jobs: int, log: Path
) -> dict:
    from eegformer_cli.scenarios import ground_truth_path, read_ground_truth
    from eegformer_cli.training.metrics import against_chance

    data, prep = study(out, scenario, n, seed, seed, n_jobs, log)
    truth = read_ground_truth(ground_truth_path(data))
    result = {
        "n": n,
        "seed": seed,
        "rule": truth["rule"],
        "factors": truth["factors"],
        "models": {},
        "paired_vs_default": {},
        "seconds": {},
    }
    per_fold = {}
    for variant in variants:
        source = without_ages(prep) if variant == "age_withheld" else prep
        run_dir = out / "runs" / f"{prep.name}-{variant}"
        result["seconds"][variant] = round(cross_validate(source, run_dir, variant, n_jobs, log), 1)
        folds = fold_results(run_dir)
        per_fold[variant] = [f["metrics"]["xaiguiformer"] for f in folds]
        if variant == "default":
            per_fold["logistic_regression"] = [f["metrics"]["logistic_regression"] for f in folds]
            per_fold["oracle"] = oracle_per_fold(truth, prep, run_dir)
    for name, folds in per_fold.items():
        result["models"][name] = summary(folds)
        if scenario == "null":
            result["models"][name]["bac_ci95"] = against_chance(
                folds, "bac", 0.5, 1 / (CV_FOLDS - 1)
            )["ci95"]
    for name in per_fold:
        if name != "default":
            result["paired_vs_default"][name] = paired(per_fold["default"], per_fold[name])
    oracle = result["models"]["oracle"]["bac"]
    result["default_over_oracle"] = result["models"]["default"]["bac"] / oracle
    return result


def null_trust(out: Path, seed: int, n: int, n_jobs: int, log: Path) -> dict:
    """The null study's shortcut audit and permutation test (a full ``train`` run)."""
    _, prep = study(out, "null", n, seed, seed, n_jobs, log)
    run_dir = out / "runs" / f"{prep.name}-permutations"
    run(
        EEGFORMER
        + [
            "train",
            str(prep),
            "--out",
            str(run_dir),
            "--label-column",
            "diagnosis",
            "--cv",
            str(CV_FOLDS),
            "--seed",
            "0",
            "--permutations",
            "100",
            "--n-jobs",
            str(n_jobs),
        ],
        log,
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    test = metrics["permutation_test"]
    return {
        "flagged": metrics["shortcut_audit"]["flagged"],
        "p_values": {name: m["p_value"] for name, m in test["models"].items()},
        "observed_bac": {name: m["observed_bac"] for name, m in test["models"].items()},
    }


def explanation_check(out: Path, scenario: str, n: int, seed: int, n_jobs: int, log: Path) -> dict:
    """Train on one study (80 %), explain a fresh study of the same layout; see module docs."""
    from sklearn.metrics import roc_auc_score

    from eegformer_cli.scenarios import ground_truth_path, planted_couplings, read_ground_truth

    _, prep = study(out, scenario, n, seed, seed, n_jobs, log)
    fresh_data, fresh = study(out, scenario, 100, seed + 1, seed, n_jobs, log)
    truth = read_ground_truth(ground_truth_path(fresh_data))
    run_dir = out / "runs" / f"{prep.name}-holdout"
    if not (run_dir / "model.pt").exists():
        run(
            EEGFORMER
            + [
                "train",
                str(prep),
                "--out",
                str(run_dir),
                "--label-column",
                "diagnosis",
                "--holdout",
                "0.2",
                "--seed",
                "0",
            ],
            log,
        )
    explained = out / "explain" / f"{prep.name}-on-{fresh.name}"
    if not (explained / "recordings.csv").exists():
        shutil.rmtree(explained, ignore_errors=True)  # an interrupted earlier try
        run(
            EEGFORMER + ["explain", str(run_dir / "model.pt"), str(fresh), "--out", str(explained)],
            log,
        )
    participants = {p["participant_id"]: p for p in truth["participants"]}
    with open(explained / "recordings.csv", newline="") as handle:
        recordings = list(csv.DictReader(handle))
    planted = planted_couplings(truth)
    importance, pairs, carries = [], [], {name: [] for name, _ in planted}
    bands = channels = None
    for row in recordings:
        with np.load(explained / f"{row['recording_id']}.npz") as saved:
            importance.append(np.abs(saved["band_importance"]))
            pairs.append(np.abs(saved["channel_pairs"]))
            bands = [str(b) for b in saved["bands"]] if "bands" in saved else bands
            channels = [str(c) for c in saved["channels"]] if "channels" in saved else channels
        for name in carries:
            carries[name].append(participants[row["participant_id"]]["factors"][name] == 1)
    importance, pairs = np.stack(importance), np.stack(pairs)  # (n, T), (n, T, C, C)
    result = {"n_fresh": len(recordings)}
    order = np.argsort(-importance.mean(axis=0))
    result["band_rank_by_mean_abs_importance"] = [bands[i] for i in order]
    planted_bands = sorted({c.token_band for _, c in planted}, key=bands.index)
    result["planted_bands"] = planted_bands
    result["planted_band_ranks"] = {
        b: int(list(order).index(bands.index(b))) + 1 for b in planted_bands
    }
    carriers = np.array(carries[planted[0][0]])
    top = importance[carriers].argmax(axis=1)
    result["carriers"] = int(carriers.sum())
    result["planted_band_first_share"] = float(np.mean([bands[t] in planted_bands for t in top]))
    mean_pairs = pairs[carriers].mean(axis=0)  # (T, C, C)
    upper = np.triu_indices(len(channels), 1)
    cells = mean_pairs[:, upper[0], upper[1]]  # (T, n_pairs)
    positive = np.zeros_like(cells, dtype=bool)
    for _, coupling in planted:
        i, j = sorted(channels.index(c) for c in coupling.channels)
        k = list(zip(*upper)).index((i, j))
        positive[bands.index(coupling.token_band), k] = True
    result["planted_cell_auroc"] = float(roc_auc_score(positive.ravel(), cells.ravel()))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--seed",
        type=int,
        default=ACCEPTANCE_SEED,
        help=f"simulation seed (acceptance: {ACCEPTANCE_SEED}; screen on others)",
    )
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--n-large", type=int, default=1000)
    parser.add_argument("--scenarios", default="linear,interaction,age,null")
    parser.add_argument("--variants", default=None, help="comma list instead of each scenario's")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-small", action="store_true", help="only the --n-large runs")
    parser.add_argument("--skip-null-trust", action="store_true")
    parser.add_argument("--explain", action="store_true", help="the explanation checks too")
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "bench_ground_truth.log"
    os.environ.setdefault("PYTHONPATH", str(REPO))
    started = time.time()
    scenarios = args.scenarios.split(",")
    chosen = args.variants.split(",") if args.variants else None
    report = {
        "benchmark": "ground_truth",
        "machine": machine(),
        "seed": args.seed,
        "acceptance_seed": ACCEPTANCE_SEED,
        "small": {},
        "large": {},
    }
    for scenario in [] if args.skip_small else scenarios:
        report["small"][scenario] = evaluate_scenario(
            args.out, scenario, args.n, args.seed, chosen or SMALL[scenario], args.n_jobs, log
        )
        print(json.dumps({scenario: report["small"][scenario]["models"]}), file=sys.stderr)
    if "null" in scenarios and not (args.skip_null_trust or args.skip_small):
        report["null_trust"] = null_trust(args.out, args.seed, args.n, args.n_jobs, log)
    if args.explain and not args.skip_small:
        report["explanations"] = {
            s: explanation_check(args.out, s, args.n, args.seed, args.n_jobs, log)
            for s in ("linear", "interaction")
            if s in scenarios
        }
    if not args.skip_large:
        for scenario in (s for s in scenarios if s in LARGE):
            report["large"][scenario] = evaluate_scenario(
                args.out,
                scenario,
                args.n_large,
                args.seed,
                chosen or LARGE[scenario],
                args.n_jobs,
                log,
            )
    report["wall_seconds"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=2)
    (args.out / "bench_ground_truth.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
