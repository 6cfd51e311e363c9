"""The learning curve of ``train --learning-curve``: the balanced accuracy against the study's
participants, an inverse power law fitted to it, and its projection to larger studies.

Points: each outer fold's training part (its train + val participants) is cut to nested,
stratified participant subsets (:func:`nested_subsets`: the same draw for every model), each
refit and scored on the fold's own test participants; the whole training part is the run
itself. A point's x is the study it stands for: its training participants over the share of the
study a fold trains on ((k - 1) / k in k-fold CV), so the last point is the run's N and a
projection reads "a study of N participants". Its y is the mean BAC over folds, its spread the
standard deviation over folds.

Fit: ``BAC(n) = a - b n^-c`` (``a`` <= 1 the asymptote, ``b`` >= 0, ``c`` in
[:data:`C_BOUNDS`]), by weighted least squares (:func:`scipy.optimize.curve_fit`, each point
weighted by its standard error, floored at :data:`SIGMA_FLOOR`), then evaluated at
round study sizes up to :data:`PROJECTION_FACTOR` times today's (:func:`round_sizes`).

Uncertainty: a bootstrap over participants (:data:`N_BOOTSTRAP` draws, :func:`bootstrap_draws`):
the folds drawn with replacement (each fold's models stand for another training set), then
each fold's test participants (one draw for every fraction and model, so the points move
together), every point's BAC recomputed from the stored predictions and the curve refitted; the
interval is the 2.5 and 97.5 percentiles of the refits' projections (widened to hold the
fitted value, where it is not inside them).

A point's standard error is the larger of its standard error over folds and its standard
deviation over the draws of the test participants. What is said instead of a projection to
quote (:data:`STATUSES`): fewer than :data:`MIN_POINTS` points (the smaller subsets too small for the validation split); a
curve that is not monotone (a point below the one before it by more than twice their
difference's standard error): the fit is unreliable; a flat curve (the rise from the smallest
subset to the whole run is below :data:`NEGLIGIBLE_RISE`, or not above zero in 95 % of the
draws of the test participants alone, which move every point's alike): its level, the run's
own BAC (the last point), is the projection, with that point's interval. A model whose last
point is not told from chance (that interval starts at or below one over the classes) has a
flat curve too, whatever its smaller subsets did: points that are noise around chance (or
below it, as cross-validation on a label without a cause can fall) show neither a rise to fit
nor a fall to warn about, for every model alike.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from eegformer_cli.evaluation.run_metrics import (
    MODEL_NAME,
    CurvePoint,
    ModelCurve,
    ProjectedBac,
    model_in_words,
)

N_BOOTSTRAP = 200
#: Bounds of the exponent ``c``: learning curves seldom fall faster than 1/n^2.
C_BOUNDS = (0.05, 2.0)
#: A point's standard error is at least this (BAC), so no point alone decides the fit.
SIGMA_FLOOR = 0.01
MIN_POINTS = 3
#: A rise of the BAC below this (one point) over the whole curve is about zero: flat.
NEGLIGIBLE_RISE = 0.01
PROJECTION_FACTOR = 5
STATUSES = ("fitted", "flat", "non_monotone", "too_few_points", "fit_failed")
METHOD = (
    "nested stratified participant subsets of each outer training part, refit with the run's "
    "settings and scored on the fold's test participants; BAC(n) = a - b n^-c by weighted "
    "least squares (scipy.optimize.curve_fit); interval: 2.5-97.5 percentiles over a "
    "bootstrap of the folds and their test participants, the curve refitted on each draw "
    "(docs/guide/results.md, 'Learning curve')"
)


def nested_subsets(
    participants: list[str], labels: list[str], fractions, seed: int
) -> dict[float, list[str]]:
    """Fraction -> its subset of ``participants`` (sorted), each participant's class
    (``labels``, one per participant) kept in proportion: each class shuffled once with
    ``seed``, and a fraction takes the first ``round(fraction * n_class)`` (at least one) of
    every class, so a smaller fraction's subset lies inside every larger one's."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[str]] = {}
    for participant, label in sorted(zip(participants, labels)):
        by_class.setdefault(label, []).append(participant)
    order = {label: rng.permutation(members).tolist() for label, members in by_class.items()}
    return {
        fraction: sorted(
            p
            for members in order.values()
            for p in members[: max(1, round(fraction * len(members)))]
        )
        for fraction in fractions
    }


def round_sizes(n: int, factor: int = PROJECTION_FACTOR) -> list[int]:
    """The round study sizes (1, 2, 3 or 5 times a power of ten) above ``n`` and at most
    ``factor`` times it: ``[100, 200, 300]`` for 84."""
    return [
        mantissa * 10**power
        for power in range(8)
        for mantissa in (1, 2, 3, 5)
        if n < mantissa * 10**power <= factor * n
    ]


def power_law(n, a: float, b: float, c: float):
    """``a - b n^-c``."""
    return a - b * np.power(n, -c)


@dataclass(frozen=True)
class Fit:
    """An inverse power law in participants (``a - b n^-c``)."""

    a: float
    b: float
    c: float

    def at(self, n) -> np.ndarray:
        return power_law(np.asarray(n, dtype=float), self.a, self.b, self.c)


def fit_power_law(n, bac, sigma, start: Fit | None = None) -> Fit | None:
    """The weighted least-squares fit of ``a - b n^-c`` to ``bac`` (BAC at ``n`` participants,
    standard errors ``sigma``), from ``start`` or from a few exponents; None when it fails.
    Fitted on ``n / max(n)`` (well conditioned), returned in participants."""
    n, bac, sigma = (np.asarray(v, dtype=float) for v in (n, bac, sigma))
    scale = float(n.max())
    x, sigma = n / scale, np.maximum(sigma, SIGMA_FLOOR)
    bounds = ([0.0, 0.0, C_BOUNDS[0]], [1.0, np.inf, C_BOUNDS[1]])
    if start is not None:
        starts = [(start.a, start.b * scale**-start.c, start.c)]
    else:
        top = min(float(bac.max()) + 0.02, 1.0)
        starts = [(top, max(top - float(bac.min()), 1e-3) * x.min() ** c, c) for c in (0.3, 0.7)]
    best, best_cost = None, math.inf
    for p0 in starts:
        try:
            with warnings.catch_warnings():  # no covariance with as many points as parameters
                warnings.simplefilter("ignore", optimize.OptimizeWarning)
                params, _ = optimize.curve_fit(
                    power_law, x, bac, p0=p0, sigma=sigma, absolute_sigma=True, bounds=bounds
                )
        except (RuntimeError, ValueError):
            continue
        cost = float(np.sum(((power_law(x, *params) - bac) / sigma) ** 2))
        if cost < best_cost:
            best, best_cost = params, cost
    if best is None:
        return None
    a, b, c = (float(v) for v in best)
    return Fit(a, b * scale**c, c)


@dataclass(frozen=True)
class FoldPredictions:
    """One model's predictions on one fold's test recordings at one fraction: ``bac`` the
    fold's recorded score, ``n_training`` its training participants (train + val);
    ``participants``, ``truth`` and ``predicted`` per test recording (class indices)."""

    fold: str
    n_training: int
    bac: float | None
    participants: np.ndarray
    truth: np.ndarray
    predicted: np.ndarray


@dataclass(frozen=True)
class Draws:
    """The bootstrap's draws: ``folds`` (names, in order) and their multiplicities in each
    draw (``fold_counts``, (n_draws, n_folds)); per fold, its test participants (sorted) and
    their multiplicities in each draw (``participants``: name -> (ids, (n_draws, n_ids)))."""

    folds: list[str]
    fold_counts: np.ndarray
    participants: dict[str, tuple[np.ndarray, np.ndarray]]

    def mean_over_folds(self, per_fold: dict[str, np.ndarray], folds_drawn: bool) -> np.ndarray:
        """Each draw's mean of ``per_fold`` (fold name -> a value per draw): the folds
        weighted by their multiplicities (``folds_drawn``), or each once."""
        values = np.stack([per_fold[name] for name in self.folds], axis=1)  # (draws, folds)
        counts = self.fold_counts if folds_drawn else np.ones_like(self.fold_counts)
        weights = np.where(np.isfinite(values), counts, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.nansum(weights * np.nan_to_num(values), axis=1) / weights.sum(axis=1)


def bootstrap_draws(folds: dict[str, np.ndarray], n_draws: int, seed: int) -> Draws:
    """``n_draws`` two-stage draws: the folds with replacement (their models stand for other
    training sets), then each fold's test participants (``folds``: name -> ids) with
    replacement."""
    rng = np.random.default_rng(seed)
    names = sorted(folds)
    fold_counts = rng.multinomial(len(names), np.full(len(names), 1 / len(names)), n_draws)
    participants = {}
    for name in names:
        people = np.unique(folds[name])
        counts = rng.multinomial(len(people), np.full(len(people), 1 / len(people)), n_draws)
        participants[name] = (people, counts.astype(float))
    return Draws(names, fold_counts.astype(float), participants)


def weighted_bac(prediction: FoldPredictions, draws: Draws) -> np.ndarray:
    """The BAC of ``prediction`` in each bootstrap draw (:func:`bootstrap_draws`): the mean
    over the classes present of each class's weighted recall."""
    people, counts = draws.participants[prediction.fold]
    weights = counts[:, np.searchsorted(people, prediction.participants)]
    recalls = []
    for label in np.unique(prediction.truth):
        own = prediction.truth == label
        with np.errstate(invalid="ignore", divide="ignore"):
            recalls.append((weights @ (own & (prediction.predicted == label))) / (weights @ own))
    with np.errstate(invalid="ignore"):
        return np.nanmean(np.stack(recalls), axis=0)


def curve_points(
    by_fraction: dict[float, list[FoldPredictions]], train_share: float
) -> list[CurvePoint]:
    """The points of one model (fraction -> its folds, fold order the same for every
    fraction), in fraction order; ``train_share``: the mean share of the study a fold trains
    on."""
    points = []
    for fraction in sorted(by_fraction):
        folds = by_fraction[fraction]
        scores = [f.bac for f in folds]
        known = np.array([s for s in scores if s is not None], dtype=float)
        n_training = float(np.mean([f.n_training for f in folds]))
        points.append(
            CurvePoint(
                fraction=fraction,
                n_participants=round(n_training / train_share, 1),
                n_training=n_training,
                bac=float(known.mean()) if len(known) else None,
                std=float(known.std(ddof=1)) if len(known) > 1 else None,
                n_folds=len(known),
                per_fold=scores,
            )
        )
    return points


def point_errors(points: list[CurvePoint], boot: np.ndarray) -> np.ndarray:
    """Each point's standard error: the larger of its standard error over folds and its
    bootstrap standard deviation (``boot``: (points, draws) BAC), :data:`SIGMA_FLOOR` at
    least, so that a point whose folds happen to agree does not decide the fit alone."""
    over_folds = np.array(
        [p.std / math.sqrt(p.n_folds) if p.std is not None and p.n_folds else 0.0 for p in points]
    )
    with np.errstate(invalid="ignore"):
        drawn = np.nan_to_num(np.nanstd(boot, axis=1))
    return np.maximum(np.maximum(over_folds, drawn), SIGMA_FLOOR)


def non_monotone_drop(
    points: list[CurvePoint], sigma: np.ndarray
) -> tuple[CurvePoint, CurvePoint] | None:
    """The first pair of consecutive points where the BAC falls by more than twice the
    standard error of their difference (``sigma``: each point's); None when it never does."""
    for k, (before, after) in enumerate(itertools.pairwise(points)):
        if before.bac is None or after.bac is None:
            continue
        if before.bac - after.bac > 2 * math.hypot(sigma[k], sigma[k + 1]):
            return before, after
    return None


def rises(points: list[CurvePoint], boot: np.ndarray) -> bool:
    """Whether the BAC rises from the first point to the last: by at least
    :data:`NEGLIGIBLE_RISE`, and in all but 5 % of the draws of the test participants
    (``boot``: (points, draws); a draw moves every point's test participants alike, so the rise
    is paired). Where the curve is truly flat (no model beats chance, or every one has
    levelled off) two fixed models differ on a test set by its sampling alone, which these
    draws measure."""
    first, last = points[0].bac, points[-1].bac
    if first is None or last is None or last - first < NEGLIGIBLE_RISE:
        return False
    paired = boot[-1] - boot[0]
    paired = paired[np.isfinite(paired)]
    return bool(len(paired)) and float(np.mean(paired <= 0)) < 0.05


def _percentiles(values: np.ndarray, centre: float) -> list[float | None]:
    """The 95 % percentile interval of ``values`` (non-finite ones left out), widened to hold
    ``centre``; [None, None] without values."""
    values = values[np.isfinite(values)]
    if not len(values):
        return [None, None]
    low, high = np.percentile(values, [2.5, 97.5])
    return [float(min(low, centre)), float(max(high, centre))]


def model_curve(
    by_fraction: dict[float, list[FoldPredictions]],
    train_share: float,
    n_participants: int,
    draws: Draws,
    unit: str = "participant",
    chance: float = 0.5,
) -> tuple[ModelCurve, list[ProjectedBac]]:
    """One model's curve (its points, status, fit and statement) and its projection at
    :func:`round_sizes` of ``n_participants`` (module docstring); ``draws``:
    :func:`bootstrap_draws` of the folds and their test participants; ``chance``: the BAC of
    a guess (one over the classes)."""
    points = curve_points(by_fraction, train_share)
    known = [p for p in points if p.bac is not None]
    sizes = round_sizes(n_participants)
    if len(known) < MIN_POINTS:
        curve = ModelCurve(points=points, status="too_few_points")
        return _said(curve, [], unit), []
    per_fold = [{f.fold: weighted_bac(f, draws) for f in by_fraction[p.fraction]} for p in known]
    # (points, draws): test participants drawn (the noise of a point, of a rise), and folds too
    tested = np.stack([draws.mean_over_folds(values, False) for values in per_fold])
    boot = np.stack([draws.mean_over_folds(values, True) for values in per_fold])
    n = np.array([p.n_participants for p in known])
    bac = np.array([p.bac for p in known], dtype=float)
    sigma = point_errors(known, tested)
    drop = non_monotone_drop(known, sigma)
    level = float(bac[-1])  # the run itself: where flat, a larger study is expected to measure it
    interval = _percentiles(boot[-1], level)
    at_chance = interval[0] is not None and interval[0] <= chance
    if at_chance or (drop is None and not rises(known, tested)):
        curve = ModelCurve(points=points, status="flat", level=level)
        projection = [ProjectedBac(n_participants=s, bac=level, interval=interval) for s in sizes]
        return _said(curve, projection, unit, chance=chance if at_chance else None), projection
    fit = fit_power_law(n, bac, sigma)
    if fit is None:
        curve = ModelCurve(points=points, status="fit_failed")
        return _said(curve, [], unit), []
    refits = [fit_power_law(n, boot[:, d], sigma, fit) for d in range(boot.shape[1])]
    projected = np.array([r.at(sizes) for r in refits if r is not None]).reshape(-1, len(sizes))
    projection = [
        ProjectedBac(
            n_participants=s, bac=float(centre), interval=_percentiles(projected[:, k], centre)
        )
        for k, (s, centre) in enumerate(zip(sizes, fit.at(sizes)))
    ]
    curve = ModelCurve(
        points=points,
        status="fitted" if drop is None else "non_monotone",
        params={"a": fit.a, "b": fit.b, "c": fit.c},
    )
    return _said(curve, projection, unit, drop), projection


def _said(
    curve: ModelCurve,
    projection: list[ProjectedBac],
    unit: str,
    drop: tuple[CurvePoint, CurvePoint] | None = None,
    chance: float | None = None,
) -> ModelCurve:
    """``curve`` with its ``statement`` (in words, by its status; ``chance``: a flat curve's
    level not told from chance, the BAC of a guess)."""
    known = [p for p in curve.points if p.bac is not None]
    units = f"{unit}s"
    if curve.status == "too_few_points":
        text = (
            f"too few points for a learning curve ({len(known)}, at least {MIN_POINTS} needed: "
            "the smaller subsets were too small for the validation split)"
        )
    elif curve.status == "fit_failed":
        text = "the inverse power law could not be fitted to the learning curve: no projection"
    elif curve.status == "flat" and chance is not None:
        low, high = projection[0].interval if projection else (None, None)
        text = (
            f"the learning curve is flat at chance: from {known[0].n_participants:.0f} to "
            f"{known[-1].n_participants:.0f} {units} the balanced accuracy is not told from "
            f"chance ({known[0].bac:.2f} to {curve.level:.2f}; at "
            f"{known[-1].n_participants:.0f} its 95 % interval, {_interval([low, high])}, "
            f"is not above chance, {chance:.2f}), so the curve shows no rise to project"
        )
    elif curve.status == "flat":
        text = (
            f"the learning curve is flat: from {known[0].n_participants:.0f} to "
            f"{known[-1].n_participants:.0f} {units} the balanced accuracy does not rise "
            f"beyond its noise ({known[0].bac:.2f} to {curve.level:.2f}), so more {units} of "
            "this kind are not expected to raise it"
        )
    else:
        first, *rest = projection
        text = (
            f"by its learning curve a study of {first.n_participants:,} {units} would reach a "
            f"balanced accuracy of about {first.bac:.2f} (95 % interval "
            f"{_interval(first.interval)})"
            + "".join(
                f", of {p.n_participants:,} about {p.bac:.2f} ({_interval(p.interval)})"
                for p in rest
            )
        )
        if drop is not None:
            before, after = drop
            text = (
                f"the learning curve is not monotone (the balanced accuracy falls from "
                f"{before.bac:.2f} at {before.n_participants:.0f} to {after.bac:.2f} at "
                f"{after.n_participants:.0f} {units}), so its fit is unreliable and not to be "
                f"quoted ({text})"
            )
    curve.statement = text
    return curve


def _interval(interval: list[float | None]) -> str:
    low, high = interval
    return "no interval" if low is None or high is None else f"{low:.2f} to {high:.2f}"


def quoted_sentence(statement: str, curves: dict[str, ModelCurve]) -> str:
    """The run's sentence to quote (``sample_size.statement``) with the model's learning curve
    after it: ``"with 84 participants the balanced accuracy is 0.94 ± 0.07; ...; by its
    learning curve a study of 200 participants would reach a balanced accuracy of about 0.96
    (95 % interval 0.93 to 0.98), of 300 about 0.97 (0.94 to 0.99)"``."""
    curve = curves.get(MODEL_NAME)
    return statement if curve is None else f"{statement}; {curve.statement}"


def describe_curves(curves: dict[str, ModelCurve] | None) -> list[str]:
    """``train``'s lines, one per model: its points and what its curve says."""
    lines = []
    for name, curve in (curves or {}).items():
        points = ", ".join(
            f"{p.bac:.2f} at {p.n_participants:.0f}" for p in curve.points if p.bac is not None
        )
        lines.append(
            f"learning curve, {model_in_words(name)}: BAC {points or 'none'}; {curve.statement}"
        )
    return lines
