"""How the linear path's settings were chosen: its penalty, and when the transformer's residual
is kept. Run on screening studies only (msu split seeds 1-2, eegmat, simulated studies of other
seeds than ``bench_ground_truth.ACCEPTANCE_SEED``), never on the acceptance folds.

``--part penalty`` (scikit-learn only, seconds per fold): on every fold's training part (train
+ val participants, as the references), the recording means of the standardised entries and
the products of the pairs the interaction screen keeps (on the fold's training participants),
then a class-balanced logistic regression with each candidate penalty: ``l2`` (the built-in
reference's, grid ``reference.C_GRID``), ``l1`` (liblinear, ``linear_fit.L1_C_GRID``), ``auto``
(the better of the two by the inner CV), each with C scored by balanced accuracy (``_bac``, as
the references) or log-loss (``_ll``); the test folds' balanced accuracy and AUROC, and each
minus ``l2_bac`` paired over folds.

``--part residual``: every fold of the ``default`` preset with ``residual = "on"`` (the
transformer kept whatever validation says), in this process on 2 workers, no final model;
per fold the test BAC of the whole model and of its linear path alone, and the per-recording
validation losses the keep rule compares (each candidate's at its best temperature, the
selected epoch's), so that any rule can be evaluated afterwards: per margin, with and without
the standard error of the gain added to it, the mean test BAC when each fold keeps the
residual only where the rule says, and in how many folds it does.

``--segments``: either part with the linear path of earlier versions (``linear_means =
false``: each product formed per segment and averaged), for comparison.

Usage:
  python benchmarks/bench_linear_path.py --part penalty PREP LABEL --seed 1 --repeats 3
  python benchmarks/bench_linear_path.py --part residual PREP LABEL --seed 1 --repeats 1
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
#: The keep rule's margins evaluated after ``--part residual`` (nats).
MARGINS = (0.0, 0.01, 0.02, 0.05, 0.1)
#: Penalty candidates of ``--part penalty``: (penalties tried, inner-CV score).
PENALTIES = {
    "l2_bac": (("l2",), "balanced_accuracy"),
    "l2_ll": (("l2",), "neg_log_loss"),
    "l1_bac": (("l1",), "balanced_accuracy"),
    "l1_ll": (("l1",), "neg_log_loss"),
    "auto_bac": (("l2", "l1"), "balanced_accuracy"),
    "auto_ll": (("l2", "l1"), "neg_log_loss"),
}


def _plan(prep: str, label: str, seed: int, repeats: int, overrides: dict):
    from eegformer_cli.training.config import resolve_config
    from eegformer_cli.training.run_plan import plan_run

    config = resolve_config(
        "default",
        None,
        {"seed": seed, "repeats": repeats, "cv": 5, "device": "cpu", **overrides},
    )
    return plan_run(prep, label, config)


def _design(model, dataset) -> np.ndarray:
    """Recording means of the model's linear features (standardised entries, products)."""
    from eegformer_cli.training.transformer_keep import mean_linear_features

    return mean_linear_features(model, dataset)


def _penalty_fold(plan, fold) -> dict:
    """Every candidate of :data:`PENALTIES` on one fold: its test metrics and chosen C."""
    from sklearn.model_selection import GridSearchCV, StratifiedGroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    from eegformer_cli.evaluation.metrics import classification_metrics
    from eegformer_cli.evaluation.reference import C_GRID, inner_folds
    from eegformer_cli.training.dataset import ConnectomeDataset
    from eegformer_cli.training.fit import build_model, screen_fit, seed_of
    from eegformer_cli.training.linear_fit import L1_C_GRID, _classifier
    from eegformer_cli.training.run_plan import recordings_of
    from eegformer_cli.training.standardise import connectivity_stats

    data, seed = plan.data, seed_of(fold, plan.config.seed)
    train = recordings_of(data, fold.train)
    fit = train + recordings_of(data, fold.val)
    test = recordings_of(data, fold.test)
    sets = [
        ConnectomeDataset(r, data.label_names, data.channels, data.bands)
        for r in (train, fit, test)
    ]
    stats = connectivity_stats(sets[0].recording_arrays(r) for r in range(len(train)))
    ages = np.array([r.age for r in train])
    screen = screen_fit(data, sets[0], stats, ages, plan.config, seed)
    model = build_model(data, plan.config, ages, screen and screen.kept)
    model.set_stats(stats)
    x_fit, x_test = _design(model, sets[1]), _design(model, sets[2])
    y_fit, groups = sets[1].labels, np.array([r.participant_id for r in fit])
    n_classes, out = len(data.label_names), {"kept": len(screen.kept) if screen else 0}
    for name, (penalties, scoring) in PENALTIES.items():
        grid = [
            {
                "logisticregression": [_classifier(p, n_classes)],
                "logisticregression__C": list(L1_C_GRID if p == "l1" else C_GRID),
            }
            for p in penalties
        ]
        search = GridSearchCV(
            make_pipeline(StandardScaler(), _classifier("l2", n_classes)),
            grid,
            scoring=scoring,
            cv=StratifiedGroupKFold(inner_folds(y_fit, groups), shuffle=True, random_state=seed),
        )
        start = time.process_time()
        with warnings.catch_warnings(), threadpool_limits(limits=1):
            warnings.simplefilter("ignore")
            search.fit(x_fit, y_fit, groups=groups)
        probabilities = np.zeros((len(x_test), n_classes))
        probabilities[:, search.classes_] = search.predict_proba(x_test)
        scores = classification_metrics(sets[2].labels, probabilities, None)
        chosen = search.best_params_["logisticregression"]
        out[name] = {
            "bac": scores.bac,
            "auroc": scores.auroc,
            "penalty": "l2" if chosen.solver == "lbfgs" else "l1",
            "C": search.best_params_["logisticregression__C"],
            "cpu_s": time.process_time() - start,
        }
    return out


def _residual_fold(plan, fold) -> dict:
    """One fold with the residual always kept: test BAC of the model and its linear path,
    the validation losses of the keep rule."""
    from eegformer_cli.training.fold_job import run_fold

    features = _FEATURES[0]
    record, _ = run_fold(plan, fold, features)
    return {
        "fold": fold.name,
        "bac": {name: scores.bac for name, scores in record.metrics.items()},
        "linear": record.linear_path,
        "val_loss_calibrated": [h.get("val_loss_calibrated") for h in record.history],
        "seconds": record.seconds,
    }


_FEATURES: list = [None]


def _summarise_penalty(folds: list[dict]) -> dict:
    from eegformer_cli.evaluation.metrics import compare_folds
    from eegformer_cli.evaluation.run_metrics import FoldScores

    out = {"kept_per_fold": [f["kept"] for f in folds]}
    base = [FoldScores(bac=f["l2_bac"]["bac"]) for f in folds]
    for name in PENALTIES:
        scores = [FoldScores(bac=f[name]["bac"]) for f in folds]
        paired = compare_folds(scores, base, 0.25)
        out[name] = {
            "bac": float(np.mean([f[name]["bac"] for f in folds])),
            "auroc": float(np.mean([f[name]["auroc"] for f in folds])),
            "minus_l2_bac": paired["mean_difference"],
            "ci95": paired["ci95"],
            "chosen": [f"{f[name]['penalty']}:{f[name]['C']:g}" for f in folds],
            "cpu_s": float(sum(f[name]["cpu_s"] for f in folds)),
        }
    return out


def _summarise_residual(folds: list[dict]) -> dict:
    out = {name: float(np.mean([f["bac"][name] for f in folds])) for name in folds[0]["bac"]}
    gains = []
    for f in folds:
        losses = f["linear"]["val_losses"]
        gain = np.array(losses["static"]) - np.array(losses["transformer"])
        gains.append((gain.mean(), gain.std(ddof=1) / np.sqrt(len(gain))))
    out["rules"] = {}
    for margin in MARGINS:
        for with_error in (False, True):
            kept = [mean > margin + (error if with_error else 0) for mean, error in gains]
            chosen = [f["bac"]["xaiguiformer" if k else "linear_path"] for f, k in zip(folds, kept)]
            name = f"margin {margin}" + (" + SE" if with_error else "")
            out["rules"][name] = {"bac": float(np.mean(chosen)), "kept": int(sum(kept))}
    out["folds"] = folds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prep", help="a preprocess output folder")
    parser.add_argument("label", help="its label column")
    parser.add_argument("--part", choices=("penalty", "residual"), required=True)
    parser.add_argument("--seed", type=int, default=1, help="split seed (never msu's 0)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--segments",
        action="store_true",
        help="the linear path's products per segment, averaged (earlier versions), instead of "
        "the products of the recording means",
    )
    args = parser.parse_args()
    from eegformer_cli.training.fold_job import reference_features

    overrides = {"transformer_path": "on"} if args.part == "residual" else {}
    if args.segments:  # the linear path of earlier versions, for comparison
        overrides["linear_means"] = False
    plan = _plan(args.prep, args.label, args.seed, args.repeats, overrides)
    _FEATURES[0] = reference_features(plan.data) if args.part == "residual" else None
    one = _penalty_fold if args.part == "penalty" else _residual_fold
    start = time.time()
    if args.part == "penalty":  # scikit-learn alone, seconds a fold: in this process
        folds = [one(plan, fold) for fold in plan.folds]
    else:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            folds = pool.starmap(one, [(plan, fold) for fold in plan.folds])
    summary = _summarise_penalty(folds) if args.part == "penalty" else _summarise_residual(folds)
    print(
        json.dumps(
            {
                "prep": args.prep,
                "part": args.part,
                "seed": args.seed,
                "repeats": args.repeats,
                "wall_s": time.time() - start,
                **summary,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
