"""What a run's number of participants resolves, by the interval the verdict uses.

The verdict's intervals come from the corrected resampled t-test (Nadeau & Bengio 2003,
"Inference for the generalization error"; :func:`metrics.compare_folds`): over J = k * r fold
scores with sample variance s^2 (of the paired BAC difference, or of the BAC itself against
chance), the variance of their mean is ``(1/J + rho) * s^2``, ``rho`` = n_test / n_train, and
the 95 % interval is the mean ± ``t(0.975, J-1) * sqrt(1/J + rho) * s``. From it, at the run's
own folds and repeats:

- ``half_width``: that ± at today's N (BAC, before clipping to [0, 1]);
- the smallest difference this N resolves at 80 % power: ``lambda * sqrt(1/J + rho) * s``,
  ``lambda`` the non-centrality at which a non-central t with J - 1 degrees of freedom exceeds
  ``t(0.975, J-1)`` with probability 0.8 (the power of the interval to lie above 0;
  Cohen 1988, ch. 2, with the t-test's variance replaced by the corrected one);
- the participants that would resolve the observed difference d at that power:
  ``N * (smallest / d)^2``, rounded to two significant figures.

Scaling assumption: at the same k and r, ``s^2`` is proportional to 1/N. A fold's test-set BAC
is a mean over n_test = N/k participants (variance ~ 1/n_test), and the part that comes from the
training set (how far each fold's model is from the others) shrinks like 1/n_train for a stable
learner; rho and J stay as they are. What this leaves out: a learner still improving with N (the
difference itself would change), and between-site heterogeneity that a larger sample adds.
``tests/test_sample_size.py`` checks the power at the predicted N by simulation.

Split seeds (:func:`split_seeds`): with few participants one CV's answer can hang on its split
seed. The test's own model reads a fold score as a part shared by every split of these
participants (the ``rho`` term) plus a part of the fold's own, variance ``sigma^2`` (the ``1/J``
term), which another seed draws anew. Another seed's mean then differs from this run's by
N(0, 2 sigma^2 / J) and its spread is ``sigma^2 * chi2(J-1) / (J-1)``, so the share of seeds
whose interval lies above ``c`` is ``P(T > t(0.975, J-1) * sqrt(1 + J * rho) / sqrt(2))``, T
non-central t with J - 1 degrees of freedom and non-centrality
``(mean - c) * sqrt(J) / (sigma * sqrt(2))``; ``sigma^2``, unknown, is averaged over the scaled
inverse chi-squared (J - 1 degrees of freedom) that this run's ``s^2`` leaves. ``--repeats r``
shrinks the 1/J term (J = k * r): a run of J' folds has the participants' own mean plus
N(0, sigma^2 / J'), sigma taken as this run's s; the r said is the smallest at which every part
of the headline keeps its most likely answer for all but :data:`FRAGILE_SHARE` of the seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from eegformer_cli.evaluation.learning_curve import describe_curves
from eegformer_cli.evaluation.run_metrics import (
    LINEAR_PATH_NAME,
    Comparison,
    RunMetrics,
    SampleSize,
    SplitSeeds,
    model_in_words,
)

#: The power at which the smallest resolved difference and the participants needed are given.
POWER = 0.8
#: Two-sided level of the verdict's intervals (95 %).
ALPHA = 0.05
#: A headline part whose answer another split seed changes this often or more is fragile.
FRAGILE_SHARE = 0.1
#: The most ``--repeats`` said; where even these leave the answer open it is the participants,
#: not the repeats, that are too few.
MAX_REPEATS = 20
#: A difference of BAC below this (half a point) is about zero: no N is given for it.
NEGLIGIBLE_DIFFERENCE = 0.005
#: Quantiles of the fold variance's uncertainty that :meth:`Spread.shares` averages over.
_QUANTILES = (np.arange(200) + 0.5) / 200
METHOD = (
    "corrected resampled t-test (Nadeau & Bengio 2003): variance of the mean "
    "(1/J + n_test/n_train) s^2 over J fold scores, s^2 taken to scale as 1/N at the same "
    "folds and repeats; power from the non-central t with J - 1 degrees of freedom; split "
    "seeds: another seed draws each fold's own part (the 1/J term) anew "
    "(docs/guide/results.md, 'What this N resolves')"
)


@dataclass(frozen=True)
class Spread:
    """Fold scores of one quantity: ``margin`` their mean minus the value tested against (0
    for a paired difference, chance for the score), ``std`` their sample standard deviation,
    ``n_folds`` J, ``ratio`` rho = n_test / n_train."""

    margin: float
    std: float
    n_folds: int
    ratio: float

    def factor(self) -> float:
        """``sqrt(1/J + rho)``: the interval's standard error over ``std``."""
        return math.sqrt(1 / self.n_folds + self.ratio)

    def half_width(self) -> float:
        """The 95 % interval's ± (unclipped)."""
        return critical(self.n_folds) * self.factor() * self.std

    def smallest_difference(self, power: float = POWER) -> float:
        """The true difference that this interval shows at ``power`` (its lower bound above 0)."""
        return noncentrality(self.n_folds - 1, power) * self.factor() * self.std

    def outcome(self) -> int:
        """This run's answer: 1 the interval lies above 0, -1 below, 0 it holds 0."""
        width = self.half_width()
        return 1 if self.margin > width else -1 if self.margin < -width else 0

    def shares(self, n_folds: int | None = None) -> dict[int, float]:
        """Share of split seeds of these participants whose interval lies above 0 (1), below
        (-1) or holds it (0) (module docstring). ``n_folds`` None: another seed with the run's
        J folds, whose mean differs from this run's by the split noise of both, averaged over
        the fold variance that this run's spread leaves uncertain (scaled inverse
        chi-squared, J - 1 degrees of freedom, at :data:`_QUANTILES`). ``n_folds`` J': a run
        of that many folds, whose mean differs from the participants' own by its own split
        noise, at this run's spread."""
        j, df = n_folds or self.n_folds, self.n_folds - 1
        if n_folds is None:
            noise = math.sqrt(2 / j)
            sigma = self.std * np.sqrt(df / stats.chi2.ppf(_QUANTILES, df))
        else:
            noise, sigma = math.sqrt(1 / j), np.array([self.std])
        threshold = critical(j) * math.sqrt(1 / j + self.ratio) / noise
        centre = self.margin / (sigma * noise)
        above = float(np.mean(stats.nct.sf(threshold, j - 1, centre)))
        below = float(np.mean(stats.nct.sf(threshold, j - 1, -centre)))
        return {1: above, -1: below, 0: max(1 - above - below, 0.0)}


def critical(n_folds: int) -> float:
    """``t(1 - ALPHA/2, J - 1)``: the interval's quantile."""
    return float(stats.t.ppf(1 - ALPHA / 2, n_folds - 1))


def noncentrality(df: int, power: float = POWER) -> float:
    """``lambda``: the non-centrality of a t with ``df`` degrees of freedom that exceeds
    ``t(1 - ALPHA/2, df)`` with probability ``power``."""
    crit = float(stats.t.ppf(1 - ALPHA / 2, df))
    high = 2 * crit + 10
    while stats.nct.sf(crit, df, high) < power:
        high *= 2
    return float(optimize.brentq(lambda nc: stats.nct.sf(crit, df, nc) - power, 0, high))


def about(value: float) -> int:
    """``value`` rounded to two significant figures (what "about" N participants says)."""
    if value < 10:
        return max(round(value), 1)
    return int(round(value, 1 - int(math.floor(math.log10(value)))))


def participants_needed(spread: Spread, n_participants: int) -> int | None:
    """The participants at which ``spread``'s observed difference (its margin) is resolved at
    :data:`POWER`: ``N * (smallest / d)^2``, about (:func:`about`); None when it is about zero
    or of the wrong sign (no N would be expected to show the model better)."""
    if spread.margin < NEGLIGIBLE_DIFFERENCE:
        return None
    return about(n_participants * (spread.smallest_difference() / spread.margin) ** 2)


def spread_of(
    mean: float | None, std: float | None, n_folds: int | None, ratio: float, centre: float
) -> Spread | None:
    """The :class:`Spread` of fold scores with this ``mean``, ``std`` and ``n_folds`` around
    ``centre``; None without an interval (one fold, or every fold the same)."""
    if mean is None or std is None or n_folds is None or n_folds < 2:
        return None
    if not (math.isfinite(mean) and math.isfinite(std)) or std <= 1e-9:
        return None
    return Spread(mean - centre, std, n_folds, ratio)


def split_seeds(
    parts: dict[str, Spread | None], folds_per_repeat: int | None, repeats: int
) -> SplitSeeds:
    """How often another split seed changes each of the headline's ``parts`` (name -> its
    spread; ``score`` is one-sided: above chance or not), and the ``--repeats`` (of
    ``folds_per_repeat`` folds; None: not a k-fold scheme) that settles them all."""
    known = {name: spread for name, spread in parts.items() if spread is not None}

    def unsettled(name: str, spread: Spread, n_folds: int | None, outcome: int | None) -> float:
        shares = spread.shares(n_folds)
        if name == "score":  # above chance or not: below and holding chance are one answer
            shares = {1: shares[1], 0: shares[0] + shares[-1], -1: 0.0}
        if outcome is None:
            return 1 - max(shares.values())
        return 1 - shares[max(outcome, 0) if name == "score" else outcome]

    flips = {name: unsettled(name, s, None, s.outcome()) for name, s in known.items()}
    fragile = any(share >= FRAGILE_SHARE for share in flips.values())
    needed = None
    if fragile and folds_per_repeat:
        needed = next(
            (
                r
                for r in range(repeats + 1, MAX_REPEATS + 1)
                if all(
                    unsettled(n, s, folds_per_repeat * r, None) < FRAGILE_SHARE
                    for n, s in known.items()
                )
            ),
            None,
        )
    return SplitSeeds(
        flip_share={name: flips.get(name) for name in parts},
        fragile=fragile,
        repeats=needed,
        statement=_seeds_statement(flips, fragile, needed, folds_per_repeat),
    )


def _seeds_statement(
    flips: dict[str, float], fragile: bool, repeats: int | None, folds_per_repeat: int | None
) -> str:
    if not flips:
        return "no interval, so no measure of how the answer moves with the split seed"
    worst = max(flips, key=lambda name: flips[name])
    share = flips[worst]
    part = (
        "the score against chance"
        if worst == "score"
        else f"the comparison with {model_in_words(worst)}"
    )
    how_often = f"another split seed would change {part} in about {share:.0%} of seeds"
    if not fragile:
        return f"stable over split seeds at this N: {how_often}"
    if repeats is not None:
        return (
            f"one split is fragile at this N: {how_often}; `--repeats {repeats}` brings that "
            f"below {FRAGILE_SHARE:.0%}"
        )
    if not folds_per_repeat:
        return f"one split is fragile at this N: {how_often}; cross-validate with `--repeats`"
    return (
        f"one split is fragile at this N: {how_often}, and up to `--repeats {MAX_REPEATS}` "
        "would still leave it open (the figures sit at the boundary): more participants, "
        "not more repeats, settle it"
    )


def _references(metrics: RunMetrics) -> list[Comparison]:
    """The comparisons with a reference model (not the model's own linear path)."""
    return [c for c in metrics.all_comparisons if c.reference and c.reference != LINEAR_PATH_NAME]


def assess(metrics: RunMetrics, n_participants: int, ratio: float) -> SampleSize:
    """metrics.json's ``sample_size`` of a run (module docstring): ``n_participants`` those
    of its splits, ``ratio`` its folds' n_test / n_train; the score's and each reference
    comparison's figures from ``metrics`` (its score, comparisons and scheme)."""
    score = metrics.score
    parts: dict[str, Spread | None] = {
        "score": spread_of(score.mean, score.std, score.n_folds, ratio, metrics.chance)
        if score
        else None
    }
    for comparison in _references(metrics):
        parts[comparison.reference or ""] = spread_of(
            comparison.mean_difference, comparison.std_difference, comparison.n_folds, ratio, 0.0
        )
    scheme = metrics.scheme or {}
    k_fold = scheme.get("kind") == "cv" and not scheme.get("from_file")
    seeds = split_seeds(parts, scheme.get("k") if k_fold else None, int(scheme.get("repeats") or 1))
    references = {name: spread for name, spread in parts.items() if name != "score"}
    score_spread = parts["score"]
    result = SampleSize(
        n_participants=n_participants,
        unit="recording" if metrics.recording_wise else "participant",
        n_folds=score.n_folds if score else metrics.n_folds,
        test_train_ratio=ratio,
        power=POWER,
        alpha=ALPHA,
        half_width=score_spread.half_width() if score_spread else None,
        difference_half_width={n: s.half_width() if s else None for n, s in references.items()},
        smallest_difference={
            n: s.smallest_difference() if s else None for n, s in references.items()
        },
        participants_needed={
            n: participants_needed(s, n_participants) if s else None for n, s in references.items()
        },
        split_seeds=seeds,
        method=METHOD,
    )
    result.statement = statement(result, metrics, references)
    return result


def statement(sample: SampleSize, metrics: RunMetrics, references: dict[str, Spread | None]) -> str:
    """The sentence to quote: ``"with 84 participants the balanced accuracy is 0.94 ± 0.07;
    telling it from the logistic regression's would take about 900 participants"``."""
    people = f"{sample.n_participants} {sample.unit}s"
    mean = metrics.score.mean if metrics.score else None
    if sample.half_width is None or mean is None:
        if (sample.n_folds or 0) <= 1:
            return (
                f"with {people} in one split there is no spread over folds to scale: "
                "cross-validate (`--cv 5 --repeats 3`) to learn what this N resolves"
            )
        return (
            f"with {people}, each of the {sample.n_folds} folds scored the same, so there is "
            "no spread over folds to scale: repeat the cross-validation (`--repeats 3`) to "
            "learn what this N resolves"
        )
    words = [
        f"with {people} the balanced accuracy is {mean:.2f} {_plus_minus(sample.half_width, 1, 2)}"
    ]
    for name, spread in references.items():
        words.append(_telling_apart(name, spread, sample.participants_needed.get(name), sample))
    return "; ".join(words)


def _telling_apart(name: str, spread: Spread | None, needed: int | None, sample: SampleSize) -> str:
    """One reference's clause of :func:`statement`."""
    whose = f"{model_in_words(name)}'s"
    if spread is None:
        return f"against {whose} there is no interval (every fold differs by the same amount)"
    if spread.outcome() == 1:
        return f"it is already told from {whose} at this N (better by {spread.margin:.3f})"
    if spread.outcome() == -1:
        return f"it is below {whose} at this N (by {-spread.margin:.3f})"
    if needed is None:
        return (
            f"no number of {sample.unit}s would be expected to show it better than {whose} "
            f"(observed difference {spread.margin:+.3f})"
        )
    return f"telling it from {whose} would take about {needed:,} {sample.unit}s"


def _plus_minus(width: float, whole: float, digits: int = 3) -> str:
    """``± width``, said to cover every possible value when it reaches ``whole`` (1 for a
    BAC, 2 for a difference of two)."""
    if width >= whole:
        return f"± {width:.{digits}f} (every possible value: too few folds)"
    return f"± {width:.{digits}f}"


def describe(sample: SampleSize) -> list[str]:
    """``train``'s lines, one per figure: the score's half-width, each reference's figures,
    the split seeds (the sentence to quote is the verdict's) and, with a learning curve, one
    line per model (:func:`learning_curve.describe_curves`)."""
    curves = describe_curves(sample.learning_curve)
    unit = f"{sample.unit}s"
    head = f"sample size: {sample.n_participants} {unit}, {sample.n_folds} test fold(s)"
    if sample.half_width is None:
        return [f"{head}; {sample.statement}", *curves]
    lines = [
        f"{head}: the balanced accuracy's 95 % interval is {_plus_minus(sample.half_width, 1)} "
        "(corrected resampled t-test)"
    ]
    for name, width in sample.difference_half_width.items():
        smallest, needed = (
            sample.smallest_difference.get(name),
            sample.participants_needed.get(name),
        )
        if width is None or smallest is None:
            lines.append(f"sample size, against {model_in_words(name)}: no interval")
            continue
        resolves = (
            f"this N resolves a difference of {smallest:.3f} at {sample.power:.0%} power"
            if smallest <= 1
            else f"this N resolves no possible difference at {sample.power:.0%} power"
        )
        if needed is None:
            observed = (
                "no N would be expected to show the model better (the observed difference "
                "is about zero or favours the reference)"
            )
        else:
            observed = f"the observed difference would take about {needed:,} {unit}" + (
                " (this N is enough)" if needed <= (sample.n_participants or 0) else ""
            )
        lines.append(
            f"sample size, against {model_in_words(name)}: interval {_plus_minus(width, 2)}; "
            f"{resolves}; "
            f"{observed}"
        )
    if sample.split_seeds:
        lines.append(f"split seeds: {sample.split_seeds.statement}")
    return lines + curves
