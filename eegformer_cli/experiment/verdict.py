"""The verdict: what a run's ``metrics.json`` says, in the few lines a clinician reads first.

First, which model carries the score (:func:`scorer`): where the transformer's residual was
kept in no fold, every out-of-fold prediction is the model's linear path's, so the headline,
``train``'s summary, ``metrics.json``'s ``scored_by`` and the report name that, never the
transformer; where it was kept in some folds, in how many. Then a headline, then one line
per question, each ``(topic, text, tone)`` with tone ``good`` /
``neutral`` / ``warn`` (the report colours the line, ``train`` prints it):

- score: the transformer's balanced accuracy, its 95 % interval over folds (corrected resampled
  t-test against chance, ``metrics.score``) and the chance level (1 / number of classes);
  recording-wise splits (the scheme's ``unit``) are said there, as a warning; where a
  permutation test decides otherwise than this interval, it says so;
- one line per reference model of ``metrics.all_comparisons``: "not distinguishable from",
  "better than" or "worse than" it, from whether the paired 95 % interval holds 0;
- transformer: what the transformer adds to the model's own linear path (the model minus its
  linear path alone, paired), and in how many folds the transformer path was kept (kept in none: that
  the model is its linear path, and no difference to quote);
- shortcuts: flagged and borderline variables of the shortcut audit;
- the permutation test's p, when computed, and whose null it is;
- calibration: the out-of-fold expected calibration error and Brier score, what ``predict``
  does about it (recalibration), and the out-of-fold coverage of 90 % prediction sets; the
  line says why it is coloured (ECE at most or above :data:`ECE_ACCEPTED`);
- sample size: what this N resolves (``metrics.sample_size``), and where one split is fragile
  at this N, the ``--repeats`` that settles it (also said in the headline).

Every coloured line says why in its text: a test, an interval or a threshold it passed or failed.

Above chance or not is :mod:`.above_chance`'s rule alone: the headline says its answer and the
test it follows, and the score and permutation lines are coloured by the same answer, so the
box never shows two.

A :class:`~eegformer_cli.evaluation.run_metrics.RunMetrics` in, plain text out: no torch, no
scikit-learn.
"""

from __future__ import annotations

import math
from typing import TypeGuard

from eegformer_cli.evaluation.run_metrics import (
    LINEAR_PATH_NAME,
    MODEL_NAME,
    AboveChance,
    Comparison,
    RunMetrics,
    model_in_words,
)
from eegformer_cli.experiment.above_chance import ALPHA, PERMUTATION_HINT, above_chance
from eegformer_cli.training.transformer_keep import NOTHING_TO_FIX_SHARE

#: Prediction-set level quoted in the verdict.
VERDICT_COVERAGE = 0.9
#: The out-of-fold expected calibration error the verdict accepts (green at most, amber
#: above): the stated probabilities off by at most 10 points on average.
ECE_ACCEPTED = 0.1
#: The model that carries the score where the transformer path was kept in no fold.
LINEAR_PATH_SCORER = "the model (its linear path; the transformer was not kept in any fold)"


def transformer_folds(metrics: RunMetrics) -> tuple[int, int] | None:
    """(folds whose transformer path was kept, folds with a linear path) from
    ``metrics.json``'s ``linear_path``; None for a model without a linear path (the ``paper``
    preset, a run of an earlier version), whose transformer is the whole model."""
    kept = metrics.linear_path
    if not kept or not kept.get("n_folds"):
        return None
    return int(kept["transformer_kept"]), int(kept["n_folds"])


def scorer(metrics: RunMetrics) -> str:
    """The model whose out-of-fold predictions the score is, in words: "XAIguiFormer" (no
    linear path), :data:`LINEAR_PATH_SCORER` (the transformer path kept in no fold), "XAIguiFormer
    (the transformer kept in K of N folds, its linear path alone in the other N - K)", or
    "XAIguiFormer (its linear path and the transformer, kept in every fold)"."""
    folds = transformer_folds(metrics)
    if folds is None:
        return "XAIguiFormer"
    kept, n = folds
    if kept == 0:
        return LINEAR_PATH_SCORER
    if kept < n:
        return (
            f"XAIguiFormer (the transformer kept in {kept} of {n} folds, its linear path alone "
            f"in the other {n - kept})"
        )
    every = "its one fold" if n == 1 else "every fold"
    return f"XAIguiFormer (its linear path and the transformer, kept in {every})"


#: The static candidates in words (``training/static_choice.py``).
STATIC_CANDIDATE_WORDS = {
    "connectivity": "the linear path on connectivity",
    "tangent_space": "the tangent space of the band covariances",
    "stacked": "both stacked",
}


def static_statement(metrics: RunMetrics) -> str | None:
    """Which static candidate carried the model in how many folds, in one line ("The model's
    static stage: the linear path on connectivity in K of N folds, both stacked in the
    others' count, ..."); None for a model without a tangent-space path."""
    counts = (metrics.linear_path or {}).get("static_candidates")
    if not counts:
        return None
    n = sum(counts.values())
    parts = [
        f"{STATIC_CANDIDATE_WORDS.get(name, name)} in {count}" + (f" of {n} folds" if not i else "")
        for i, (name, count) in enumerate(sorted(counts.items(), key=lambda kv: -kv[1]))
    ]
    return "The model's static stage: " + ", ".join(parts) + ", chosen by the inner CV."


#: Why folds stopped their transformer path early, in words (``TransformerKeep.stopped``):
#: what is said of the folds and why.
STOP_WORDS = {
    "keep_patience": (
        "stopped early",
        "it missed the keep rule on validation for keep_patience epochs in a row",
    ),
    "static_stage_made_no_error": (
        "not trained",
        "the static stage put no recording of the fold's fit in the wrong class",
    ),
    "static_stage_left_little": (
        "not trained",
        f"the static stage put at most {NOTHING_TO_FIX_SHARE:.0%} of the fold's fit in the wrong class",
    ),
    "kept_in_no_fold": ("not trained", "the cross-validation kept it in no fold"),
}


def transformer_statement(metrics: RunMetrics) -> str | None:
    """In how many folds the transformer path was kept and, where folds stopped its training
    early, how many and why, in one line; None without a static stage."""
    path = metrics.linear_path
    if not path or "transformer_kept" not in path:
        return None
    line = f"The transformer path: kept in {path['transformer_kept']} of {path['n_folds']} folds"
    for reason, count in (path.get("transformer_stopped") or {}).items():
        said, why = STOP_WORDS.get(reason, (reason, ""))
        line += f"; {said} in {count}" + (f" ({why})" if why else "")
    return line + "."


def scored_by(metrics: RunMetrics) -> dict:
    """``metrics.json``'s ``scored_by``: ``model`` (``linear_path`` where the transformer's
    residual was kept in no fold, else ``xaiguiformer``), ``transformer_folds`` (folds whose
    prediction the transformer reached), ``n_folds`` and ``statement`` (:func:`scorer`)."""
    folds = transformer_folds(metrics)
    kept, n = folds if folds else (metrics.n_folds, metrics.n_folds)
    return {
        "model": LINEAR_PATH_NAME if folds and kept == 0 else MODEL_NAME,
        "transformer_folds": kept,
        "n_folds": n,
        "statement": scorer(metrics),
    }


def attention_reach(metrics: RunMetrics) -> str | None:
    """Whether the transformer's attention reached the model's output, said where it did not
    in every fold (None where it did: no linear path, or the transformer path kept in every fold)."""
    folds = transformer_folds(metrics)
    if folds is None or folds[0] == folds[1]:
        return None
    kept, n = folds
    if kept == 0:
        return (
            "The attention did not reach the output: the transformer path was kept in no fold "
            "(it never beat the static stage alone on the validation participants, or was not "
            "trained), so every prediction is the static stage's: this attention is that of a "
            "transformer not used, and replacing it changes no logit (0)."
        )
    return (
        f"The attention reached the output in {kept} of {n} folds only, those whose "
        f"transformer path was kept; in the other {n - kept} the model is its static "
        "stage and replacing the attention changes no logit, so the means over folds mix "
        "folds where it does nothing with those where it acts."
    )


def _known(value: float | None) -> TypeGuard[float]:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _mean_bac(metrics: RunMetrics) -> float | None:
    """The model's mean BAC: the score's (an earlier version's: the model table's)."""
    return metrics.score.mean if metrics.score else metrics.transformer.mean.bac


def score_line(metrics: RunMetrics, rule: AboveChance) -> tuple[str, str, str]:
    """The score with its interval; green when ``rule`` (:func:`above_chance`) says above
    chance and the interval agrees, with a clause where a permutation test decides against
    the interval."""
    mean, auroc = _mean_bac(metrics), metrics.transformer.mean.auroc
    low, high = metrics.score.ci95 if metrics.score else (None, None)
    interval = (
        f" (95 % CI {low:.2f} to {high:.2f})"
        if _known(low) and _known(high)
        else " (no interval: the folds agree, or too few)"
    )
    text = (
        f"balanced accuracy {mean:.3f}{interval}, chance {metrics.chance:.2f} "
        f"({len(metrics.labels)} classes)"
        + (f"; AUROC {auroc:.3f}" if _known(auroc) else "")
        + f"; {metrics.n_folds} test fold{'s' if metrics.n_folds != 1 else ''}, out of fold"
    )
    if metrics.recording_wise:
        text += (
            "; recording-wise splits (participants unknown): a person's recordings may be "
            "on both sides, so the score may be optimistic"
        )
        return "score", text, "warn"
    if rule.interval_above != rule.above:
        text += (
            "; this interval lies above chance, but the permutation test does not confirm it"
            if rule.interval_above
            else "; this interval does not lie above chance, but the permutation test does"
        ) + " (the headline follows the permutation test)"
        return "score", text, "neutral"
    if rule.above:  # green: why, as the rule decided it
        if rule.follows == "permutation test":
            text += "; the permutation test confirms it"
        elif _known(low):
            text += "; the interval lies above chance"
        else:
            text += f"; {rule.statement}"
    return "score", text, "good" if rule.above else "neutral"


def comparison_line(
    comparison: Comparison, folds: tuple[int, int] | None = None
) -> tuple[str, str, str]:
    """The model against one reference (``folds``: :func:`transformer_folds`, for the line of
    the model's own linear path)."""
    if comparison.reference == LINEAR_PATH_NAME:
        return transformer_line(comparison, folds)
    name = model_in_words(comparison.reference or "reference")
    mean, (low, high), metric = comparison.mean_difference, comparison.ci95, comparison.metric
    if not _known(mean):
        return "reference", f"no fold to compare with {name}", "neutral"
    figure = (
        f"{mean:+.3f} {metric}, 95 % CI {low:+.3f} to {high:+.3f}"
        if _known(low)
        else f"{mean:+.3f} {metric}, no interval"
    )
    if _known(low) and low > 0:
        return "reference", f"better than {name} ({figure})", "good"
    if _known(high) and high < 0:
        return "reference", f"worse than {name} ({figure})", "warn"
    return "reference", f"not distinguishable from {name} ({figure})", "neutral"


def transformer_line(
    comparison: Comparison, folds: tuple[int, int] | None = None
) -> tuple[str, str, str]:
    """What the transformer adds to the model's own linear path (the full model minus the
    linear path alone, paired over folds) and in how many of them the transformer path was kept
    (``folds``: :func:`transformer_folds`): topic ``transformer``, never a warning (where it
    adds nothing, the model is its linear path); green where the interval lies above 0."""
    if folds is not None and folds[0] == 0:
        return (
            "transformer",
            f"not kept in {'its one fold' if folds[1] == 1 else f'any of the {folds[1]} folds'}"
            " (on the validation participants it "
            "never beat the static stage alone), so the model is its static stage: "
            "the scores above are the static stage's (its linear_path row)",
            "neutral",
        )
    mean, (low, high), metric = comparison.mean_difference, comparison.ci95, comparison.metric
    kept = "" if folds is None else f"; kept in {folds[0]} of {folds[1]} folds"
    if not _known(mean):
        return "transformer", "no fold to compare with the linear path alone" + kept, "neutral"
    interval = f", 95 % CI {low:+.3f} to {high:+.3f}" if _known(low) else ", no interval"
    text = f"the transformer adds {mean:+.3f} {metric} to the linear path alone{interval}{kept}"
    if _known(low) and low > 0:
        return "transformer", text + " (the interval lies above 0)", "good"
    return "transformer", text, "neutral"


def shortcut_line(metrics: RunMetrics) -> tuple[str, str, str]:
    audit = metrics.shortcut_audit
    if not audit:
        return (
            "shortcuts",
            "not audited (an older run: `eegformer train --merge RUN_DIR` adds the audit)",
            "neutral",
        )

    def named(status: str) -> list[str]:
        return [
            entry.name
            + (
                f" (AUROC {entry.auroc.mean:.2f})"
                if entry.auroc and _known(entry.auroc.mean)
                else ""
            )
            for entry in audit.variables
            if entry.status == status
        ]

    flagged, borderline = named("flagged"), named("borderline")
    checked = sum(entry.status == "checked" for entry in audit.variables)
    if flagged or borderline:
        parts = ([f"flagged: {', '.join(flagged)}"] if flagged else []) + (
            [f"borderline: {', '.join(borderline)}"] if borderline else []
        )
        return (
            "shortcuts",
            "; ".join(parts) + " (the score may come from them, not the EEG)",
            "warn",
        )
    return "shortcuts", f"none flagged or borderline ({checked} variables checked)", "good"


def permutation_line(metrics: RunMetrics, rule: AboveChance) -> tuple[str, str, str]:
    """The permutation test's p for the model's score and whose null it is (with a
    reference's null, the reference's own p), coloured by ``rule``'s answer when the rule
    follows it."""
    test = metrics.permutation_test
    if rule.follows != "permutation test" or not test:
        return "permutation test", f"not computed ({PERMUTATION_HINT})", "neutral"
    n, null_from = test.n_permutations, rule.null_from or MODEL_NAME
    if null_from == MODEL_NAME:
        whose = "XAIguiFormer's own null: XAIguiFormer retrained on each"
    else:
        reference, own = model_in_words(null_from), test.models.get(null_from)
        whose = (
            f"{reference}'s null: {reference} refit on each"
            + (f", its own p = {own.p_value:.2g}" if own and _known(own.p_value) else "")
            + "; not an exact test of XAIguiFormer, `--permutation-model xaiguiformer` "
            "gives one"
        )
    return (
        "permutation test",
        f"p = {rule.p_value:.2g} for the model's balanced accuracy ({n} permutations, "
        f"{whose}); {'below' if rule.above else 'not below'} {ALPHA:g}, and the headline "
        "follows this test",
        "good" if rule.above else "warn",
    )


def calibration_line(metrics: RunMetrics) -> tuple[str, str, str]:
    calibration = metrics.calibration
    if not calibration:
        return "calibration", "not measured (an earlier eegformer trained this run)", "neutral"
    model = calibration.models["xaiguiformer"]
    recalibration = calibration.recalibration
    parts = [f"out of fold ECE {model.ece:.3f}, Brier {model.brier:.3f}"]
    after = recalibration.after
    if recalibration.method != "none" and after:
        parts.append(
            f"predict recalibrates ({recalibration.method} scaling; cross-fitted "
            f"ECE {after.ece:.3f})"
        )
    else:
        parts.append(
            "predict keeps the probabilities as they are"
            + (" (too few recordings to recalibrate)" if "too few" in recalibration.reason else "")
        )
    levels = metrics.prediction_sets.levels if metrics.prediction_sets else []
    sets = next(
        (level for level in levels if abs(level.coverage - VERDICT_COVERAGE) < 1e-9),
        None,
    )
    if sets:
        parts.append(
            f"{VERDICT_COVERAGE:.0%} prediction sets cover "
            f"{sets.empirical_coverage:.0%} out of fold, "
            f"{sets.share_ambiguous:.0%} hold more than one class"
        )
    if model.ece is None:
        return "calibration", "; ".join(parts), "neutral"
    accepted = model.ece <= ECE_ACCEPTED
    parts[0] += (
        f" ({'at most' if accepted else 'above'} {ECE_ACCEPTED:.2f}: the stated probabilities "
        f"are off by {model.ece * 100:.0f} percentage points on average"
        + ("" if accepted else ", so read them with care")
        + ")"
    )
    return "calibration", "; ".join(parts), "good" if accepted else "warn"


def verdict_lines(metrics: RunMetrics) -> list[tuple[str, str, str]]:
    """The verdict of a run (module docstring), from its ``metrics.json``."""
    rule, folds = above_chance(metrics), transformer_folds(metrics)
    lines = [score_line(metrics, rule)] + [
        comparison_line(c, folds) for c in metrics.all_comparisons
    ]
    return lines + [
        shortcut_line(metrics),
        permutation_line(metrics, rule),
        calibration_line(metrics),
        *sample_size_lines(metrics),
    ]


def sample_size_lines(metrics: RunMetrics) -> list[tuple[str, str, str]]:
    """What this N resolves (``metrics.sample_size``, none in runs of earlier versions): the
    sentence to quote (with the model's learning curve when there is one), and where one split is fragile at this N, how often another split seed
    changes the headline and the ``--repeats`` that settles it (a warning then)."""
    sample = metrics.sample_size
    if sample is None:
        return []
    curve = sample.learning_curve_run  # with a learning curve, the sentence goes on with it
    statement = curve.statement if curve is not None and curve.statement else sample.statement
    seeds = sample.split_seeds
    if seeds and seeds.fragile:
        return [("sample size", f"{statement}; {seeds.statement}", "warn")]
    return [("sample size", statement, "neutral")]


def headline(metrics: RunMetrics) -> str:
    """One sentence: the model that carries the score (:func:`scorer`), above chance or not
    by :func:`above_chance` (the test it follows, and recording-wise splits, said), against
    the references, shortcuts."""
    lines = verdict_lines(metrics)
    words = [above_chance(metrics).statement]
    for topic, text, _ in lines:
        if topic == "reference":
            words.append(text.split(" (")[0])
    if any(topic == "shortcuts" and tone == "warn" for topic, _, tone in lines):
        words.append("a shortcut may explain the score")
    seeds = metrics.sample_size.split_seeds if metrics.sample_size else None
    if seeds and seeds.fragile:
        words.append(
            "one split is fragile at this N"
            + (f" (`--repeats {seeds.repeats}` settles it)" if seeds.repeats else "")
        )
    name = scorer(metrics)
    return name[0].upper() + name[1:] + ": " + "; ".join(words) + "."
