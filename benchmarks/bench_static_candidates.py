"""Static candidates: which convex model should carry ``default`` (issue 54, point 4).

On a preprocess folder and its label, the folds ``eegformer train --cv 5 --repeats R --seed S``
makes (``run_plan.plan_run`` with the ``default`` preset's config: the same seed, the same
folds), and on every fold's training part (train + val participants, as the references):

  lr             the built-in reference (``reference.fit_reference``)
  ts             the tangent-space reference (``tangent_space.fit_tangent_space``)
  conn           the linear path as ``train`` fits it today: input statistics and the interaction
                 screen from the fold's *train* participants (``fit._setup``), each recording's
                 mean linear features (``residual.mean_linear_features``: the standardised
                 entries and the kept products), ``linear_fit.fit_linear_path`` (``auto``) on
                 train + val. Its test BAC is the ``linear_path`` column of a run; ``default``
                 adds the transformer's residual where the keep rule says (1-3 of 15 msu folds)
  conn_tv        the same with statistics and screen from train + val (as ``screen_l1`` of
                 ``bench_ground_truth.py`` does)
  conn_tv_stats  statistics from train + val, the screen's kept pairs from train (the two effects
                 apart)
  joint          ``conn``'s features beside the tangent-space vectors (``BandTangentSpace`` on the
                 training part) in one ``fit_linear_path`` (StandardScaler, L1 or L2 and C by the
                 inner CV); ``joint_tv`` the same on ``conn_tv``'s features
  stacked        a class-balanced logistic regression (C by the inner CV) on two columns (no
                 candidate where either weight is negative, as in ``train``): the
                 cross-fitted decision values of ``conn`` (the linear path's own inner folds,
                 ``LinearFit.cross_fitted``) and of ``ts`` (the same inner folds, its chosen C
                 refitted per inner fold); at test time the refits' decision values. ``stacked_tv``
                 on ``conn_tv``. The level-1 models' C and the screen were chosen on the whole
                 training part (as the linear path's cross-fitted offsets are), so the stacker's
                 inputs are slightly optimistic; binary labels only

Every candidate's *inner score* is the inner participant-wise CV balanced accuracy that chose
its C (``reference.search_logistic_c``, the references' folds: the best over the grid, and over
L1 / L2 for the linear fits). The selection rules "keep BASE unless a candidate of SET has an
inner score above BASE's by more than m (then the best of those)" are evaluated afterwards for
BASE in (conn, conn_tv), every SET of the others and m in :data:`MARGINS`.

Summary: mean BAC per candidate and rule, and each minus the better reference on that study
(the reference with the higher mean BAC, paired over the same folds; the corrected resampled
t-test of ``metrics.compare_folds``, 95 % interval). ``--combine A.json B.json ...`` puts the
studies of several runs side by side and checks the acceptance of issue 54 for every rule: on
each study >= the better reference - 0.005, and the mean over studies >= the best reference's
mean (the reference that has the best mean over the studies).

msu split seed 0 and the ground-truth acceptance seed confirm; select on msu seeds 1 and 2,
eegmat seeds 0 and 1, simulated studies of seeds 101, 202, 303.

Usage:
  python benchmarks/bench_static_candidates.py PREP LABEL --seed 1 --repeats 3 --out X.json
      [--n-jobs 2] [--name msu-s1]
  python benchmarks/bench_static_candidates.py --combine X.json Y.json ... [--out C.json]
``--rng-offset K``: NumPy's global generator seeded with the fold seed + K before each linear fit
(liblinear draws from it; 0, as ``train``). ``--power-gain G``: a power effect planted in the
stored covariances only (:func:`plant_power`), which the tangent space sees and the connectivity
tokens cannot: how the rules behave where the tangent space leads.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
#: Margins of the selection rule (balanced accuracy of the inner CV).
MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1)
#: The acceptance's tolerance below the better reference, per study.
TOLERANCE = 0.005
REFERENCES = ("lr", "ts")
#: Candidates a rule may switch to from each base.
ALTERNATIVES = {
    "conn": ("ts", "joint", "stacked"),
    "conn_tv": ("ts", "joint_tv", "stacked_tv"),
}
#: The rule chosen on the screening studies (msu seeds 1 and 2, eegmat seeds 0 and 1, the
#: simulated studies of seeds 101, 202, 303), fixed before msu seed 0 was run: the stacked
#: candidate where its inner score beats the linear path's by more than 0.01, the tangent space
#: where its inner score does by more than 0.05 (the best inner score where both do).
CHOSEN = {"stacked": 0.01, "ts": 0.05}
CHOSEN_NAME = "chosen: conn | stacked @ 0.01, ts @ 0.05"
#: ``--rng-offset``: added to the seed of NumPy's global generator before each linear fit (0:
#: as ``train``); another value measures how much liblinear's draw alone moves the figures.
RNG_OFFSET = [0]
#: ``--power-gain``: the band (index into the covariance bands) and channels of the planted
#: power effect.
POWER_BAND = 2
POWER_CHANNELS = (0, 1)


def _plan(prep: str, label: str, seed: int, repeats: int):
    from eegformer_cli.training.config import resolve_config
    from eegformer_cli.training.run_plan import plan_run

    config = resolve_config(
        "default", None, {"seed": seed, "repeats": repeats, "cv": 5, "device": "cpu"}
    )
    return plan_run(prep, label, config)


def _score(value: float) -> float | None:
    return None if value is None or np.isnan(value) else float(value)


def _decision(logits: np.ndarray) -> np.ndarray:
    """Binary logits (n, 2) -> the decision value (n,)."""
    return logits[:, 1] - logits[:, 0]


def _connectivity(data, config, train, fit, test, seed, stats_from, screen_from):
    """The linear path's features of ``fit`` and ``test`` (lists of recordings): statistics
    from ``stats_from`` recordings, the screen on ``screen_from``'s (each ``train`` or
    ``fit``); returns (x_fit, x_test, kept pairs)."""
    from eegformer_cli.training.dataset import ConnectomeDataset
    from eegformer_cli.training.fit import build_model, screen_fit
    from eegformer_cli.training.standardise import connectivity_stats
    from eegformer_cli.training.transformer_keep import mean_linear_features

    def dataset(recs):
        return ConnectomeDataset(recs, data.label_names, data.channels, data.bands)

    source = dataset(stats_from)
    stats = connectivity_stats(source.recording_arrays(r) for r in range(len(stats_from)))
    screened = dataset(screen_from)
    screen_ages = np.array([r.age for r in screen_from])
    # the screen standardises with the statistics of its own participants (as fit._setup does)
    screen_stats = (
        stats
        if screen_from is stats_from
        else connectivity_stats(screened.recording_arrays(r) for r in range(len(screen_from)))
    )
    screen = screen_fit(data, screened, screen_stats, screen_ages, config, seed)
    kept = None if screen is None else screen.kept
    model = build_model(data, config, np.array([r.age for r in stats_from]), kept)
    model.set_stats(stats)
    return (
        mean_linear_features(model, dataset(fit)),
        mean_linear_features(model, dataset(test)),
        [k.label() for k in kept or []],
    )


def _linear(x_fit, y_fit, groups, x_test, n_classes, seed):
    """``fit_linear_path`` (auto): (the fit, its test logits, its inner score). NumPy's global
    generator is seeded with ``seed`` first, as ``fit._setup`` leaves it when ``train`` fits
    the linear path: liblinear (the L1 fits) draws from it, and on these p >> n problems its
    solutions differ with the draw (0.07 BAC on one msu fold)."""
    from eegformer_cli.model.devices import seed_everything
    from eegformer_cli.training.linear_fit import fit_linear_path

    seed_everything(seed + RNG_OFFSET[0])
    fit = fit_linear_path(x_fit, y_fit, groups, n_classes, seed, "auto")
    scores = [s for s in (fit.inner_scores or {}).values() if s is not None]
    return fit, x_test @ fit.weight.T + fit.bias, max(scores) if scores else None


def _ts_cross_fitted(search, vectors, labels, inner_fold) -> np.ndarray:
    """The tangent space's decision values of the training part, each from the model (its
    chosen C) fitted on the other inner folds (the linear path's, ``inner_fold``)."""
    from sklearn.base import clone
    from threadpoolctl import threadpool_limits

    out = np.zeros(len(labels))
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore")
        for k in np.unique(inner_fold):
            inside, held = inner_fold != k, inner_fold == k
            if len(np.unique(labels[inside])) < 2:
                continue
            model = clone(search.best_estimator_).fit(vectors[inside], labels[inside])
            out[held] = model.decision_function(vectors[held])
    return out


def _stack(z_fit, y_fit, groups, z_test, seed):
    """The stacker on cross-fitted decision values: (test probabilities, inner score)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from eegformer_cli.evaluation.reference import (
        balanced_logistic_regression,
        reference_probabilities,
        search_logistic_c,
    )
    from eegformer_cli.training.static_choice import STACK_GRID, stacker_mix

    search = search_logistic_c(
        make_pipeline(StandardScaler(), balanced_logistic_regression()),
        z_fit,
        y_fit,
        groups,
        seed,
        STACK_GRID,
    )
    # as train's static stage: a stacker with a negative weight is no candidate
    weight, _ = stacker_mix(search.best_estimator_)
    score = _score(search.best_score_) if (weight >= 0).all() else None
    return reference_probabilities(search, z_test, 2), score


def run_fold(plan, fold, features) -> dict:
    """Every candidate on one fold: inner scores, test BAC, what the linear fits chose."""
    from scipy.special import softmax
    from threadpoolctl import threadpool_limits

    from eegformer_cli.evaluation.metrics import (
        REFERENCE_NAME,
        TANGENT_SPACE_NAME,
        classification_metrics,
    )
    from eegformer_cli.evaluation.reference import fit_reference, reference_probabilities
    from eegformer_cli.evaluation.tangent_space import BandTangentSpace, fit_tangent_space
    from eegformer_cli.training.fit import seed_of
    from eegformer_cli.training.run_plan import recordings_of

    start = time.process_time()
    data, config = plan.data, plan.config
    seed = seed_of(fold, config.seed)
    train, val, test = (recordings_of(data, p) for p in (fold.train, fold.val, fold.test))
    fit = train + val
    y_fit, y_test = data.label_indices(fit), data.label_indices(test)
    groups = np.array([r.participant_id for r in fit])
    n_classes = len(data.label_names)
    binary = n_classes == 2
    probabilities, inner, chosen = {}, {}, {}

    def stack(rows, name):
        return np.stack([features[name][r.recording_id] for r in rows])

    lr = fit_reference(stack(fit, REFERENCE_NAME), y_fit, groups, seed)
    probabilities["lr"] = reference_probabilities(lr, stack(test, REFERENCE_NAME), n_classes)
    inner["lr"] = _score(lr.best_score_)
    covariances_fit, covariances_test = (
        stack(fit, TANGENT_SPACE_NAME),
        stack(test, TANGENT_SPACE_NAME),
    )
    ts = fit_tangent_space(covariances_fit, y_fit, groups, seed)
    probabilities["ts"] = reference_probabilities(ts, covariances_test, n_classes)
    inner["ts"] = _score(ts[-1].best_score_)
    with threadpool_limits(limits=1):
        tangent = BandTangentSpace().fit(covariances_fit)
        v_fit, v_test = tangent.transform(covariances_fit), tangent.transform(covariances_test)
    z_ts_test = ts.decision_function(covariances_test) if binary else None

    variants = {
        "conn": (train, train),
        "conn_tv": (fit, fit),
        "conn_tv_stats": (fit, train),
    }
    kept = {}
    for name, (stats_from, screen_from) in variants.items():
        x_fit, x_test, kept[name] = _connectivity(
            data, config, train, fit, test, seed, stats_from, screen_from
        )
        linear, logits, inner[name] = _linear(x_fit, y_fit, groups, x_test, n_classes, seed)
        probabilities[name] = softmax(logits, axis=1)
        chosen[name] = f"{linear.penalty}:{linear.C:g}"
        if name == "conn_tv_stats":
            continue
        suffix = name[len("conn") :]
        joint, joint_logits, inner[f"joint{suffix}"] = _linear(
            np.hstack([x_fit, v_fit]), y_fit, groups, np.hstack([x_test, v_test]), n_classes, seed
        )
        probabilities[f"joint{suffix}"] = softmax(joint_logits, axis=1)
        chosen[f"joint{suffix}"] = f"{joint.penalty}:{joint.C:g}"
        if binary:
            z_fit = np.column_stack(
                [
                    _decision(linear.cross_fitted),
                    _ts_cross_fitted(ts[-1], v_fit, y_fit, linear.inner_fold),
                ]
            )
            z_test = np.column_stack([_decision(logits), z_ts_test])
            probabilities[f"stacked{suffix}"], inner[f"stacked{suffix}"] = _stack(
                z_fit, y_fit, groups, z_test, seed
            )
    bac = {
        name: float(classification_metrics(y_test, p, None).bac)
        for name, p in probabilities.items()
    }
    return {
        "fold": fold.name,
        "seed": seed,
        "n_fit": len(fit),
        "n_test": len(test),
        "inner": inner,
        "bac": bac,
        "chosen": chosen,
        "kept": kept,
        "cpu_s": time.process_time() - start,
    }


def rule_choice(
    record: dict, base: str, alternatives: tuple[str, ...], margin: float | dict[str, float]
) -> str:
    """The candidate the rule picks on one fold: ``base`` unless an alternative's inner score
    beats it by more than ``margin`` (one for all, or one per alternative; then the best such
    alternative)."""
    base_score = record["inner"].get(base)
    if base_score is None:
        return base
    margins = margin if isinstance(margin, dict) else dict.fromkeys(alternatives, margin)
    better = [
        (record["inner"][a], a)
        for a in alternatives
        if record["inner"].get(a) is not None and record["inner"][a] > base_score + margins[a]
    ]
    return max(better)[1] if better else base


def rules() -> list[tuple[str, str, tuple[str, ...], float | dict[str, float]]]:
    """(name, base, alternatives, margin) of every rule evaluated, :data:`CHOSEN` first."""
    out = [(CHOSEN_NAME, "conn", tuple(CHOSEN), CHOSEN)]
    for base, alternatives in ALTERNATIVES.items():
        for size in range(1, len(alternatives) + 1):
            for chosen in itertools.combinations(alternatives, size):
                for margin in MARGINS:
                    name = f"{base} | {'+'.join(chosen)} @ {margin:g}"
                    out.append((name, base, chosen, margin))
    return out


def fold_values(folds: list[dict]) -> dict[str, list[float]]:
    """Test BAC per fold of every candidate and rule (same fold order)."""
    values = {name: [f["bac"][name] for f in folds] for name in folds[0]["bac"]}
    for name, base, alternatives, margin in rules():
        if all(a in folds[0]["bac"] for a in alternatives):
            values[name] = [f["bac"][rule_choice(f, base, alternatives, margin)] for f in folds]
    return values


def summarise(folds: list[dict]) -> dict:
    """Mean BAC of every candidate and rule, and each minus the better reference (paired)."""
    from eegformer_cli.evaluation.metrics import compare_folds
    from eegformer_cli.evaluation.run_metrics import FoldScores

    values = fold_values(folds)
    means = {name: float(np.mean(v)) for name, v in values.items()}
    best_reference = max(REFERENCES, key=lambda r: means[r])
    reference = [FoldScores(bac=v) for v in values[best_reference]]
    out = {"best_reference": best_reference, "models": {}}
    for name, v in values.items():
        paired = compare_folds([FoldScores(bac=x) for x in v], reference, 0.25)
        switched = None
        if "|" in name:
            _, base, alternatives, margin = next(r for r in rules() if r[0] == name)
            switched = sum(rule_choice(f, base, alternatives, margin) != base for f in folds)
        out["models"][name] = {
            "bac": means[name],
            "sd": float(np.std(v, ddof=1)) if len(v) > 1 else None,
            "minus_best_reference": paired["mean_difference"],
            "ci95": paired["ci95"],
            "folds_switched": switched,
        }
    inner = {
        name: [f["inner"].get(name) for f in folds] for name in folds[0]["inner"]
    }  # the inner scores, for the margins' scale
    out["inner_mean"] = {
        name: float(np.mean([s for s in v if s is not None])) if any(v) else None
        for name, v in inner.items()
    }
    return out


def combine(paths: list[Path]) -> dict:
    """Several runs' studies side by side and the acceptance of every rule and candidate."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    # summarised again from the folds: the rules of this version (e.g. new margins)
    studies = {r["name"]: summarise(r["folds"])["models"] for r in runs}
    first = next(iter(studies.values()))
    names = [n for n in first if all(n in s for s in studies.values())]
    reference_means = {
        r: float(np.mean([s[r]["bac"] for s in studies.values()])) for r in REFERENCES
    }
    best_mean = max(reference_means.values())
    table = {}
    for name in names:
        gaps = {  # per study: minus the better reference there
            study: models[name]["bac"] - max(models[r]["bac"] for r in REFERENCES)
            for study, models in studies.items()
        }
        mean = float(np.mean([models[name]["bac"] for models in studies.values()]))
        table[name] = {
            "per_study": {study: models[name]["bac"] for study, models in studies.items()},
            "minus_better_reference": gaps,
            "worst_gap": min(gaps.values()),
            "mean": mean,
            "mean_minus_best_reference_mean": mean - best_mean,
            "accepted": min(gaps.values()) >= -TOLERANCE and mean >= best_mean,
        }
    switched = {
        name: {
            study: models[name]["folds_switched"]
            for study, models in studies.items()
            if models[name]["folds_switched"] is not None
        }
        for name in names
    }
    for name in names:
        table[name]["folds_switched"] = switched[name] or None
    return {"studies": list(studies), "reference_means": reference_means, "models": table}


def plant_power(plan, features, gain: float, spread: float, seed: int) -> None:
    """A power effect that only the tangent space can see, planted in the stored covariances
    (in memory; coherence and wPLI do not change with a channel's scale): every recording's
    :data:`POWER_CHANNELS` in band :data:`POWER_BAND` scaled in power by exp(N(0, spread)),
    times ``gain`` for the recordings of the second label (``--power-gain``)."""
    from eegformer_cli.evaluation.metrics import TANGENT_SPACE_NAME

    rng = np.random.default_rng(seed)
    covariances = features[TANGENT_SPACE_NAME]
    for rec in plan.data.recordings:
        label = int(plan.data.label_indices([rec])[0])
        scale = np.exp(0.5 * (rng.normal(0.0, spread) + np.log(gain) * label))
        matrix = covariances[rec.recording_id].copy()
        for channel in POWER_CHANNELS:
            matrix[POWER_BAND, channel, :] *= scale
            matrix[POWER_BAND, :, channel] *= scale
        covariances[rec.recording_id] = matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prep", nargs="?", help="a preprocess output folder")
    parser.add_argument("label", nargs="?", help="its label column")
    parser.add_argument("--seed", type=int, default=1, help="split seed (msu's 0 confirms)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=1, help="folds at a time (fork)")
    parser.add_argument("--name", help="the study's name in --combine (default: the folder's)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--rng-offset",
        type=int,
        default=0,
        help="added to the global NumPy seed before each linear fit (0: as train)",
    )
    parser.add_argument(
        "--power-gain",
        type=float,
        help="plant a power effect in the covariances only (plant_power): the second label's "
        "power gain in two channels of one band",
    )
    parser.add_argument("--power-spread", type=float, default=0.3, help="its log-normal sd")
    parser.add_argument("--combine", nargs="+", type=Path, help="JSON files of earlier runs")
    args = parser.parse_args()
    if args.combine:
        result = combine(args.combine)
    else:
        if not (args.prep and args.label):
            parser.error("PREP and LABEL are needed (or --combine)")
        from machine import machine  # benchmarks/machine.py

        from eegformer_cli.training.fold_job import reference_features

        RNG_OFFSET[0] = args.rng_offset
        start = time.time()
        plan = _plan(args.prep, args.label, args.seed, args.repeats)
        features = reference_features(plan.data)
        if args.power_gain:
            plant_power(plan, features, args.power_gain, args.power_spread, args.seed + 97)
        if args.n_jobs > 1:
            with multiprocessing.get_context("fork").Pool(args.n_jobs) as pool:
                folds = pool.starmap(run_fold, [(plan, f, features) for f in plan.folds])
        else:
            folds = [run_fold(plan, f, features) for f in plan.folds]
        result = {
            "name": args.name or Path(args.prep).name,
            "prep": args.prep,
            "label": args.label,
            "seed": args.seed,
            "repeats": args.repeats,
            "rng_offset": args.rng_offset,
            "power_gain": args.power_gain,
            "power_spread": args.power_spread if args.power_gain else None,
            "wall_s": time.time() - start,
            "machine": machine(),
            "summary": summarise(folds),
            "folds": folds,
        }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
