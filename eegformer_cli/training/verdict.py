"""The verdict: what a run's ``metrics.json`` says, in the few lines a clinician reads first.

One line per question, each ``(topic, text, tone)`` with tone ``good`` / ``neutral`` /
``warn`` (the report colours the line, ``train`` prints it):

- score: the transformer's balanced accuracy, its 95 % interval over folds (corrected resampled
  t-test against chance, ``metrics["score"]``) and the chance level (1 / number of classes);
  recording-wise splits (the scheme's ``unit``) are said there, as a warning;
- one line per reference model of ``metrics["comparisons"]`` (older runs:
  ``[metrics["comparison"]]``): "not distinguishable from", "better than" or "worse than" it,
  from whether the paired 95 % interval holds 0;
- shortcuts: flagged and borderline variables of the shortcut audit;
- the permutation test's p, when computed;
- calibration: the out-of-fold expected calibration error and Brier score, what ``predict``
  does about it (recalibration), and the out-of-fold coverage of 90 % prediction sets.

Plain data in, plain text out: no torch, no scikit-learn.
"""

from __future__ import annotations

import math

#: How a reference model is named in a sentence ("not distinguishable from ...").
REFERENCE_NAMES = {
    "logistic_regression": "the logistic regression",
    "tangent_space": "the Riemannian tangent-space reference",
}
#: Prediction-set level quoted in the verdict.
VERDICT_COVERAGE = 0.9


def _known(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def reference_name(name: str) -> str:
    return REFERENCE_NAMES.get(name, "the " + name.replace("_", " "))


def comparisons(metrics: dict) -> list[dict]:
    """Every comparison of the run with a reference model, the logistic regression's first."""
    return metrics.get("comparisons") or (
        [metrics["comparison"]] if metrics.get("comparison") else []
    )


def _above_chance(metrics: dict) -> bool:
    """Whether the transformer's mean BAC is above chance: the interval's lower bound is, or
    (no interval because every fold scored the same) that score is."""
    labels = metrics.get("labels") or []
    chance = 1 / len(labels) if labels else 0.5
    score = metrics.get("score") or {}
    mean = score.get("mean", metrics["models"]["xaiguiformer"]["mean"].get("bac"))
    low = (score.get("ci95") or [None])[0]
    if _known(low):
        return low > chance
    return _known(mean) and mean > chance and score.get("std") == 0


def recording_wise(metrics: dict) -> bool:
    """Whether the run's splits were recording-wise (``train --split-by recording`` with
    recordings whose participant is unknown)."""
    return (metrics.get("scheme") or {}).get("unit") == "recording"


def score_line(metrics: dict) -> tuple[str, str, str]:
    labels = metrics.get("labels") or []
    chance = 1 / len(labels) if labels else 0.5
    score = metrics.get("score") or {}
    mean = score.get("mean", metrics["models"]["xaiguiformer"]["mean"].get("bac"))
    auroc = metrics["models"]["xaiguiformer"]["mean"].get("auroc")
    low, high = score.get("ci95") or [None, None]
    interval = (
        f" (95 % CI {low:.2f} to {high:.2f})"
        if _known(low) and _known(high)
        else " (no interval: the folds agree, or too few)"
    )
    text = (
        f"balanced accuracy {mean:.3f}{interval}, chance {chance:.2f} "
        f"({len(labels)} classes)"
        + (f"; AUROC {auroc:.3f}" if _known(auroc) else "")
        + f"; {metrics.get('n_folds')} test folds, out of fold"
    )
    if recording_wise(metrics):
        text += (
            "; recording-wise splits (participants unknown): a person's recordings may be "
            "on both sides, so the score may be optimistic"
        )
        return "score", text, "warn"
    return "score", text, "good" if _above_chance(metrics) else "neutral"


def comparison_line(comparison: dict) -> tuple[str, str, str]:
    name = reference_name(comparison["reference"])
    mean, (low, high) = comparison.get("mean_difference"), comparison.get("ci95") or [None, None]
    metric = comparison.get("metric", "bac")
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


def shortcut_line(metrics: dict) -> tuple[str, str, str]:
    audit = metrics.get("shortcut_audit")
    if not audit:
        return (
            "shortcuts",
            "not audited (an older run: `eegformer train --merge RUN_DIR` adds the audit)",
            "neutral",
        )
    variables = audit.get("variables", [])

    def named(status: str) -> list[str]:
        return [
            entry["name"]
            + (
                f" (AUROC {entry['auroc']['mean']:.2f})"
                if entry.get("auroc") and _known(entry["auroc"].get("mean"))
                else ""
            )
            for entry in variables
            if entry["status"] == status
        ]

    flagged, borderline = named("flagged"), named("borderline")
    checked = sum(entry["status"] == "checked" for entry in variables)
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


def permutation_line(metrics: dict) -> tuple[str, str, str]:
    test = metrics.get("permutation_test")
    if not test:
        return "permutation test", "not computed (`--permutations 100` adds it)", "neutral"
    model = test["models"].get("xaiguiformer") or next(iter(test["models"].values()))
    p = model["p_value"]
    return (
        "permutation test",
        f"p = {p:.2g} for the balanced accuracy ({test['n_permutations']} permutations)",
        "good" if p < 0.05 else "warn",
    )


def calibration_line(metrics: dict) -> tuple[str, str, str]:
    calibration = metrics.get("calibration")
    if not calibration:
        return "calibration", "not measured (an earlier eegformer trained this run)", "neutral"
    model = calibration["models"].get("xaiguiformer", {})
    recalibration = calibration.get("recalibration") or {}
    parts = [f"out of fold ECE {model['ece']:.3f}, Brier {model['brier']:.3f}"]
    after = recalibration.get("after")
    if recalibration.get("method", "none") != "none" and after:
        parts.append(
            f"predict recalibrates ({recalibration['method']} scaling; cross-fitted "
            f"ECE {after['ece']:.3f})"
        )
    else:
        parts.append(
            "predict keeps the probabilities as they are"
            + (
                " (too few recordings to recalibrate)"
                if "too few" in recalibration.get("reason", "")
                else ""
            )
        )
    sets = next(
        (
            level
            for level in (metrics.get("prediction_sets") or {}).get("levels", [])
            if abs(level["coverage"] - VERDICT_COVERAGE) < 1e-9
        ),
        None,
    )
    if sets:
        parts.append(
            f"{VERDICT_COVERAGE:.0%} prediction sets cover "
            f"{sets['empirical_coverage']:.0%} out of fold, "
            f"{sets['share_ambiguous']:.0%} hold more than one class"
        )
    tone = "good" if model["ece"] <= 0.1 else "warn"
    return "calibration", "; ".join(parts), tone


def verdict_lines(metrics: dict) -> list[tuple[str, str, str]]:
    """The verdict of a run (module docstring), from its ``metrics.json``."""
    return (
        [score_line(metrics)]
        + [comparison_line(c) for c in comparisons(metrics)]
        + [shortcut_line(metrics), permutation_line(metrics), calibration_line(metrics)]
    )


def headline(metrics: dict) -> str:
    """One sentence: above chance or not (on recording-wise splits, if so), against the
    references, shortcuts."""
    lines = verdict_lines(metrics)
    words = ["above chance" if _above_chance(metrics) else "not shown to be above chance"]
    if recording_wise(metrics):
        words[0] += " on recording-wise splits"
    for topic, text, _ in lines:
        if topic == "reference":
            words.append(text.split(" (")[0])
    if any(topic == "shortcuts" and tone == "warn" for topic, _, tone in lines):
        words.append("a shortcut may explain the score")
    return "XAIguiFormer: " + "; ".join(words) + "."
