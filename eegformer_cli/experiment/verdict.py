"""The verdict: what a run's ``metrics.json`` says, in the few lines a clinician reads first.

One line per question, each ``(topic, text, tone)`` with tone ``good`` / ``neutral`` /
``warn`` (the report colours the line, ``train`` prints it):

- score: the transformer's balanced accuracy, its 95 % interval over folds (corrected resampled
  t-test against chance, ``metrics.score``) and the chance level (1 / number of classes);
  recording-wise splits (the scheme's ``unit``) are said there, as a warning;
- one line per reference model of ``metrics.all_comparisons``: "not distinguishable from",
  "better than" or "worse than" it, from whether the paired 95 % interval holds 0;
- transformer: what the transformer adds to the model's own linear path (the model minus its
  linear path alone, paired), and in how many folds its residual was kept;
- shortcuts: flagged and borderline variables of the shortcut audit;
- the permutation test's p, when computed;
- calibration: the out-of-fold expected calibration error and Brier score, what ``predict``
  does about it (recalibration), and the out-of-fold coverage of 90 % prediction sets.

A :class:`~eegformer_cli.evaluation.run_metrics.RunMetrics` in, plain text out: no torch, no
scikit-learn.
"""

from __future__ import annotations

import math
from typing import TypeGuard

from eegformer_cli.evaluation.run_metrics import LINEAR_PATH_NAME, Comparison, RunMetrics

#: How a reference model is named in a sentence ("not distinguishable from ...").
REFERENCE_NAMES = {
    "logistic_regression": "the logistic regression",
    "tangent_space": "the Riemannian tangent-space reference",
}
#: Prediction-set level quoted in the verdict.
VERDICT_COVERAGE = 0.9


def _known(value: float | None) -> TypeGuard[float]:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def reference_name(name: str) -> str:
    return REFERENCE_NAMES.get(name, "the " + name.replace("_", " "))


def _mean_bac(metrics: RunMetrics) -> float | None:
    """The transformer's mean BAC: the score's (an earlier version's: the model table's)."""
    return metrics.score.mean if metrics.score else metrics.transformer.mean.bac


def _above_chance(metrics: RunMetrics) -> bool:
    """Whether the transformer's mean BAC is above chance: the interval's lower bound is, or
    (no interval because every fold scored the same) that score is."""
    mean, low = _mean_bac(metrics), metrics.score.ci95[0] if metrics.score else None
    if _known(low):
        return low > metrics.chance
    std = metrics.score.std if metrics.score else None
    return _known(mean) and mean > metrics.chance and std == 0


def score_line(metrics: RunMetrics) -> tuple[str, str, str]:
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
        + f"; {metrics.n_folds} test folds, out of fold"
    )
    if metrics.recording_wise:
        text += (
            "; recording-wise splits (participants unknown): a person's recordings may be "
            "on both sides, so the score may be optimistic"
        )
        return "score", text, "warn"
    return "score", text, "good" if _above_chance(metrics) else "neutral"


def comparison_line(comparison: Comparison) -> tuple[str, str, str]:
    if comparison.reference == LINEAR_PATH_NAME:
        return transformer_line(comparison)
    name = reference_name(comparison.reference or "reference")
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


def transformer_line(comparison: Comparison) -> tuple[str, str, str]:
    """What the transformer adds to the model's own linear path (the full model minus the
    linear path alone, paired over folds): topic ``transformer``, never a warning (where it
    adds nothing, the model is its linear path)."""
    mean, (low, high), metric = comparison.mean_difference, comparison.ci95, comparison.metric
    if not _known(mean):
        return "transformer", "no fold to compare with the linear path alone", "neutral"
    interval = f", 95 % CI {low:+.3f} to {high:+.3f}" if _known(low) else ", no interval"
    text = f"the transformer adds {mean:+.3f} {metric} to the linear path alone{interval}"
    return "transformer", text, "good" if _known(low) and low > 0 else "neutral"


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


def permutation_line(metrics: RunMetrics) -> tuple[str, str, str]:
    test = metrics.permutation_test
    if not test:
        return "permutation test", "not computed (`--permutations 100` adds it)", "neutral"
    model = test.models.get("xaiguiformer") or next(iter(test.models.values()))
    p = model.p_value
    return (
        "permutation test",
        f"p = {p:.2g} for the balanced accuracy ({test.n_permutations} permutations)",
        "good" if p < 0.05 else "warn",
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
    tone = "good" if model.ece <= 0.1 else "warn"
    return "calibration", "; ".join(parts), tone


def verdict_lines(metrics: RunMetrics) -> list[tuple[str, str, str]]:
    """The verdict of a run (module docstring), from its ``metrics.json``."""
    lines = [score_line(metrics)] + [comparison_line(c) for c in metrics.all_comparisons]
    for i, (topic, text, tone) in enumerate(lines):
        if topic == "transformer" and metrics.linear_path:
            kept = metrics.linear_path
            lines[i] = (
                topic,
                f"{text}; its residual kept in {kept['residual_kept']} of {kept['n_folds']} folds",
                tone,
            )
    return lines + [shortcut_line(metrics), permutation_line(metrics), calibration_line(metrics)]


def headline(metrics: RunMetrics) -> str:
    """One sentence: above chance or not (on recording-wise splits, if so), against the
    references, shortcuts."""
    lines = verdict_lines(metrics)
    words = ["above chance" if _above_chance(metrics) else "not shown to be above chance"]
    if metrics.recording_wise:
        words[0] += " on recording-wise splits"
    for topic, text, _ in lines:
        if topic == "reference":
            words.append(text.split(" (")[0])
    if any(topic == "shortcuts" and tone == "warn" for topic, _, tone in lines):
        words.append("a shortcut may explain the score")
    return "XAIguiFormer: " + "; ".join(words) + "."
