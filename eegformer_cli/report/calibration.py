"""The report's section "How far to trust a probability": calibration and prediction sets.

From ``metrics.json``: ``calibration`` (:mod:`eegformer_cli.evaluation.calibration`: Brier score, expected
calibration error, calibration slope and intercept of each model's out-of-fold probabilities,
and the recalibration ``predict`` applies) as a table and a reliability diagram; and
``prediction_sets`` (:mod:`eegformer_cli.evaluation.conformal`) as a table of the empirical
coverage of the split-conformal sets at each level. A run without them gets a line saying why.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from eegformer_cli.evaluation.calibration import describe_recalibration
from eegformer_cli.evaluation.run_metrics import (
    Calibration,
    CalibrationSummary,
    PredictionSets,
    RunMetrics,
)
from eegformer_cli.report.figures import coinciding, legend_below, same_curve_name
from eegformer_cli.report.page import inline_code

SECTION = "How far to trust a probability"
CALIBRATION_MEANING = (
    "A probability is calibrated when, of the recordings given 0.8, about 80 % are of that "
    "class. Out-of-fold probabilities, pooled over folds (each fold model on its own test "
    "participants). Brier score: mean squared error of the probability (0 is perfect; a "
    "constant 0.5 gives 0.25 with two classes). ECE (expected calibration error): the mean gap, "
    "over 10 equal-width probability bins weighted by the predictions they hold, between the "
    "stated probability and how often it was right. Slope and intercept: a logistic "
    "regression of the outcome on the probability's logit; 1 and 0 when calibrated, a slope "
    "below 1 means over-confident probabilities. With two classes the probability shown is "
    "the positive class's; with more, the top class's (how often the predicted class was "
    "right)."
)
SETS_MEANING = (
    "With `eegformer predict --coverage 0.9`, each recording gets a prediction set: the "
    "classes that hold its true class with probability 0.9 (split-conformal prediction on the "
    "run's out-of-fold probabilities, MAPIE): one class when the model is sure enough, several "
    "when it cannot tell. Below, the coverage the run's own recordings get when each group of "
    "participants is given sets calibrated on the others only; the guarantee assumes new "
    "recordings resemble the training ones (same population, same site)."
)


def add_calibration_section(report, metrics: RunMetrics) -> None:
    """The calibration table, reliability diagram and prediction-set coverage of ``metrics``."""
    calibration = metrics.calibration
    if not calibration:
        report.add_html(
            "<p>No calibration figures: an earlier eegformer trained this run; "
            "train it again to get them.</p>",
            "Calibration",
            section=SECTION,
        )
        return
    report.add_html(
        f"<p>{inline_code(CALIBRATION_MEANING)}</p>" + calibration_table_html(calibration),
        "Calibration (out of fold)",
        section=SECTION,
    )
    figure = reliability_figure(calibration)
    report.add_figure(figure, "Reliability diagram", section=SECTION, image_format="png")
    plt.close(figure)
    sets = metrics.prediction_sets
    if sets:
        report.add_html(
            f"<p>{inline_code(SETS_MEANING)}</p>" + prediction_sets_html(sets),
            "Prediction sets: coverage",
            section=SECTION,
        )


def _number(value, fmt: str = ".3f") -> str:
    return "n/a" if value is None or not np.isfinite(value) else format(value, fmt)


def predictions_of(n_predictions: int, n_recordings: int | None) -> str:
    """A count of out-of-fold predictions named for what it counts: "156 predictions of 52
    recordings" (each tested 3 times), "52 predictions, one per recording", or "156
    predictions" (a run of an earlier version, which did not count the recordings)."""
    if n_recordings is None:
        return f"{n_predictions} predictions"
    if n_predictions == n_recordings:
        return f"{n_predictions} predictions, one per recording"
    return f"{n_predictions} predictions of {n_recordings} recordings"


def _curves(calibration: Calibration, recalibrated: str) -> list[tuple[str, CalibrationSummary]]:
    """(name, summary) per model, then the transformer recalibrated (named ``recalibrated``,
    where ``{method}`` stands for the method) when ``predict`` recalibrates."""
    rows = list(calibration.models.items())
    after = calibration.recalibration.after
    if after:
        rows.append((recalibrated.format(method=calibration.recalibration.method), after))
    return rows


def calibration_table_html(calibration: Calibration) -> str:
    """One row per model (and the transformer after recalibration, cross-fitted), then what
    ``predict`` does."""
    rows = _curves(calibration, "xaiguiformer, recalibrated ({method}; cross-fitted)")
    recalibration = calibration.recalibration
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "model",
            "probability",
            "Brier",
            "log-loss",
            "ECE",
            "slope",
            "intercept",
            "out-of-fold predictions",
        )
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{inline_code(str(c))}</td>"
            for c in (
                name,
                s.target,
                _number(s.brier),
                _number(s.log_loss),
                _number(s.ece),
                _number(s.slope, ".2f"),
                _number(s.intercept, "+.2f"),
                predictions_of(s.n, s.n_recordings),
            )
        )
        + "</tr>"
        for name, s in rows
    )
    what = (
        f"<p><b>predict</b>: {inline_code(describe_recalibration(recalibration.to_dict()))}"
        f" &mdash; {inline_code(recalibration.reason)}.</p>"
    )
    return (
        f'<table class="table table-sm"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>{what}"
    )


def prediction_sets_html(sets: PredictionSets) -> str:
    """One row per coverage level: target, empirical coverage, mean set size, share of sets
    holding more than one class."""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("target coverage", "empirical coverage", "mean set size", "more than one class")
    )
    body = "".join(
        f"<tr><td>{level.coverage:.0%}</td><td>{level.empirical_coverage:.1%}</td>"
        f"<td>{level.mean_size:.2f}</td><td>{level.share_ambiguous:.0%}</td></tr>"
        for level in sets.levels
    )
    if not body:
        body = '<tr><td colspan="4">too few recordings for any level</td></tr>'
    return (
        f"<p>{inline_code(sets.method)}; {sets.n} recordings.</p>"
        f'<table class="table table-sm" id="eeg-prediction-sets"><thead><tr>{head}</tr>'
        f"</thead><tbody>{body}</tbody></table>"
    )


def reliability_figure(calibration: Calibration):
    """Observed frequency against mean stated probability per bin, one line per model (and the
    recalibrated transformer; models with the same bins share one line, its legend naming each:
    :func:`.figures.coinciding`), marker area by the bin's predictions; the diagonal is perfect
    calibration. Below: how many out-of-fold predictions each bin holds; the legend under
    both, over no data."""
    everything = _curves(calibration, "xaiguiformer, recalibrated (cross-fitted)")
    summaries = dict(everything)
    curves = [
        (same_curve_name(names), summaries[names[0]])
        for names in coinciding(
            {name: [b.to_dict() for b in summary.bins] for name, summary in everything}
        )
    ]
    fig, (ax, ax_count) = plt.subplots(
        2,
        1,
        figsize=(6.5, 7.5),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 1]},
        layout="constrained",
    )
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfectly calibrated")
    width = 0.1 / (len(curves) + 1)
    for k, (name, summary) in enumerate(curves):
        bins = summary.bins
        if not bins:
            continue
        x = [b.mean_predicted for b in bins]
        y = [b.observed for b in bins]
        n = np.array([b.n for b in bins], dtype=float)
        line = ax.plot(x, y, marker="o", label=f"{name}: ECE {_number(summary.ece)}")[0]
        ax.scatter(x, y, s=20 + 180 * n / n.max(), color=line.get_color(), alpha=0.35)
        ax_count.bar(
            [(b.lower or 0.0) + (k + 0.5) * width for b in bins],  # every bin has its edges
            n,
            width=width,
            color=line.get_color(),
            align="edge",
        )
    target = curves[0][1].target if curves else "probability"
    ax.set(
        ylabel="observed frequency",
        xlim=(0, 1),
        ylim=(-0.02, 1.02),
        title=f"Reliability diagram (out of fold): {target}",
    )
    ax_count.set(xlabel=f"stated {target} (mean per bin)", ylabel="predictions")
    legend_below(fig, ax)
    return fig
