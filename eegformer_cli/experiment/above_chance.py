"""Whether a run's score is above chance: the one rule that the verdict (its headline and box),
``train``'s summary, ``metrics.json``'s ``above_chance`` and the report all follow.

The first that applies decides:

1. a permutation test (``train --permutations N``) with XAIguiFormer's own null
   (``--permutation-model xaiguiformer``): above chance when its p < :data:`ALPHA`. It retrains
   the whole procedure on every relabelling of the run's own folds, so it is exact for them;
2. a permutation test with a reference model's null (``--permutation-model reference``, the
   default, or ``tangent_space``): above chance when XAIguiFormer's p against that null is
   below :data:`ALPHA`. That shows XAIguiFormer's score beyond what the reference reaches on
   relabelled data on these folds (both centre on chance, with a spread set mostly by the test
   folds' sizes); it is not an exact test of XAIguiFormer, whose own null was not computed;
3. otherwise the 95 % interval of the score over the folds (``metrics.score``, a corrected
   resampled t-test): above chance when its lower bound is, or, when every fold scored the
   same (no interval), when that score is.

A permutation test decides over the interval because it assumes nothing about how the folds'
scores spread, which with a handful of folds the interval must; where the two disagree (a wide
interval from few folds, a null tight around chance) the interval's answer is said beside the
permutation test's. Neither says why the score beats chance: the shortcut audit does.

A :class:`~eegformer_cli.evaluation.run_metrics.RunMetrics` in, an
:class:`~eegformer_cli.evaluation.run_metrics.AboveChance` out (plain values: no torch, no
scikit-learn).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TypeGuard

from eegformer_cli.evaluation.run_metrics import (
    MODEL_NAME,
    AboveChance,
    RunMetrics,
    model_in_words,
)

#: A permutation p below this is above chance.
ALPHA = 0.05
#: The permutation test's follow-up for users, said where it has not been run.
PERMUTATION_HINT = "`--permutations 100` adds a permutation test, which the headline then follows"


def _known(value: float | None) -> TypeGuard[float]:
    return value is not None and not math.isnan(value)


def _interval(metrics: RunMetrics) -> tuple[bool, str]:
    """What the score's 95 % interval says: (above chance, in words)."""
    chance, score, model = metrics.chance, metrics.score, metrics.models.get(MODEL_NAME)
    mean = score.mean if score else model.mean.bac if model else None
    low, high = score.ci95 if score else (None, None)
    if _known(low) and _known(high):
        where = "lies above" if low > chance else "lies below" if high < chance else "includes"
        return (
            low > chance,
            f"its 95 % interval, {low:.2f} to {high:.2f}, {where} chance {chance:.2f}",
        )
    if _known(mean) and score is not None and score.std == 0:
        return mean > chance, f"every fold scored {mean:.3f} (no interval), chance {chance:.2f}"
    return False, "no interval (too few folds, or no score)"


def above_chance(metrics: RunMetrics) -> AboveChance:
    """The rule (module docstring) applied to ``metrics``."""
    interval_above, interval = _interval(metrics)
    where = " on recording-wise splits" if metrics.recording_wise else ""
    test = metrics.permutation_test
    own = test.models.get(MODEL_NAME) if test else None
    if test is None or own is None or not _known(own.p_value):
        answer = "above chance" if interval_above else "not shown to be above chance"
        return AboveChance(
            above=interval_above,
            follows="interval",
            statement=f"{answer}{where} ({interval})",
            interval_above=interval_above,
            interval=interval,
            meaning=(
                "The headline follows the 95 % interval of the balanced accuracy over the "
                "folds (a corrected resampled t-test: an approximation, rough with few folds); "
                f"{PERMUTATION_HINT}."
            ),
        )
    p, n, null_from = own.p_value, test.n_permutations, own.null_from
    above = p < ALPHA
    answer = "above chance" if above else "not shown to be above chance"
    whose = "" if null_from == MODEL_NAME else f", against {model_in_words(null_from)}'s null"
    return AboveChance(
        above=above,
        follows="permutation test",
        null_from=null_from,
        p_value=p,
        n_permutations=n,
        statement=f"{answer}{where} (permutation p = {p:.2g}, {n} permutations{whose})",
        interval_above=interval_above,
        interval=interval,
        meaning=_permutation_meaning(null_from, n, interval, interval_above, above),
    )


def _permutation_meaning(
    null_from: str, n: int, interval: str, interval_above: bool, above: bool
) -> str:
    """What the permutation test with ``null_from``'s null shows and does not, how low its p
    can go with ``n`` permutations, and what the ``interval`` says beside its answer
    (``above``)."""
    if null_from == MODEL_NAME:
        text = (
            "The headline follows the permutation test with XAIguiFormer's own null: the "
            f"whole training was repeated on {n} random relabellings of the run's own folds, "
            "and p is the share of them (counting the real labels) that reached the observed "
            "balanced accuracy, an exact test for these folds."
        )
    else:
        reference = model_in_words(null_from)
        text = (
            f"The headline follows the permutation test with {reference}'s null: "
            f"{reference} was refit on {n} random relabellings of the run's own folds, and p is "
            "the share of them (counting the real labels) whose balanced accuracy reached "
            "XAIguiFormer's. It shows that XAIguiFormer's score is beyond what chance gives on "
            "these folds; it is not an exact test of XAIguiFormer, whose own null was not "
            "computed (`--permutation-model xaiguiformer` retrains it on every relabelling)."
        )
    if 1 / (n + 1) >= ALPHA:
        text += (
            f" With {n} permutations p cannot go below {1 / (n + 1):.2g}, so it cannot show "
            "a score above chance: use 100."
        )
    text += (
        f" The interval agrees: {interval}."
        if interval_above == above
        else f" The interval disagrees ({interval}); the permutation test decides, as it "
        "assumes nothing about how the folds' scores spread."
    )
    return text + (
        " It says that the score beats chance, not why: see the shortcuts." if above else ""
    )


def judged(metrics: RunMetrics) -> RunMetrics:
    """``metrics`` with its ``above_chance`` by the rule, as ``metrics.json`` holds it."""
    return replace(metrics, above_chance=above_chance(metrics))
