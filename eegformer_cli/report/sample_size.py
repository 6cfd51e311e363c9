"""The report's item "What this N resolves" (in the cross-validation section): from
``metrics.json``'s ``sample_size`` (:mod:`eegformer_cli.evaluation.sample_size`), the sentence to
quote, one line per figure (the score's interval, each reference's smallest resolved difference
and the participants its observed difference needs, the split seeds) and the method with its
assumption. A run of an earlier version gets a line saying how to add it.

With a learning curve (``train --learning-curve``,
:mod:`eegformer_cli.evaluation.learning_curve`) the sentence goes on with the model's projection,
and the item "Learning curve" plots the balanced accuracy against the study's participants:
every model's points (mean over folds, ± their standard deviation), its fitted curve (dashed
beyond today's N) and its projection's interval as a band, the references beside the model.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from eegformer_cli.evaluation.learning_curve import Fit, describe_curves
from eegformer_cli.evaluation.run_metrics import ModelCurve, ProjectedBac, RunMetrics, SampleSize
from eegformer_cli.evaluation.sample_size import describe
from eegformer_cli.report.figures import legend_below
from eegformer_cli.report.page import add_figure, add_note, inline_code

TITLE = "What this N resolves"
CURVE_TITLE = "Learning curve"


def add_sample_size_section(report, metrics: RunMetrics, section: str) -> None:
    """Add the item (module docstring) to ``report`` in ``section``, and the learning curve's
    plot when the run has one."""
    sample = metrics.sample_size
    if sample is None:
        add_note(
            report,
            TITLE,
            "not computed (an earlier eegformer trained this run): "
            "`eegformer train --merge RUN_DIR` adds it",
            section,
        )
        return
    # else the sentence says it; the curves' lines are the learning curve's
    lines = describe(sample) if sample.half_width is not None else []
    lines = lines or describe_curves(sample.learning_curve)
    items = "".join(f"<li>{inline_code(line)}</li>" for line in lines)
    run = sample.learning_curve_run
    quoted = run.statement if run is not None and run.statement else sample.statement
    how = sample.method + (f"; learning curve: {run.method}" if run is not None else "")
    report.add_html(
        f"<p><strong>{inline_code(quoted[:1].upper() + quoted[1:])}."
        f"</strong></p><ul>{items}</ul><p>How: {inline_code(how)}.</p>",
        TITLE,
        section=section,
    )
    if sample.learning_curve:
        caption = "; ".join(run.skipped) if run is not None and run.skipped else None
        add_figure(report, learning_curve_figure(sample), CURVE_TITLE, section, caption)


def _band(
    curve: ModelCurve, projection: list[ProjectedBac], n_now: float
) -> tuple[list[float], list[float], list[float]]:
    """The extrapolation band: x from today's N through the projected sizes, and the lower
    and upper bounds there (today's: the last point's spread, or for a flat curve its level's
    interval)."""
    last = float([p.bac for p in curve.points if p.bac is not None][-1])
    spread = float([p.std for p in curve.points if p.bac is not None][-1] or 0.0)
    xs, lows, highs = [n_now], [last - spread], [last + spread]
    low, high = projection[0].interval
    if curve.level is not None and low is not None and high is not None:
        lows[0], highs[0] = low, high
    for point in projection:
        low, high = point.interval
        if low is not None and high is not None:
            xs.append(point.n_participants)
            lows.append(low)
            highs.append(high)
    return xs, lows, highs


def learning_curve_figure(sample: SampleSize):
    """BAC against the study's participants (log scale), one colour per model (module
    docstring)."""
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    n_now = float(sample.n_participants or 1)
    projections = sample.projection or {}
    for k, (name, curve) in enumerate((sample.learning_curve or {}).items()):
        colour, known = colours[k % len(colours)], [p for p in curve.points if p.bac is not None]
        if not known:
            continue
        ax.errorbar(  # each model a little to the side, so that the error bars do not hide
            [p.n_participants * (1 + 0.012 * (k - 1.5)) for p in known],
            [float(p.bac or 0.0) for p in known],
            yerr=[p.std or 0.0 for p in known],
            fmt="o",
            color=colour,
            capsize=3,
            label=f"{name} ({curve.status.replace('_', ' ')})",
        )
        projection = projections.get(name, [])
        top = max([n_now] + [p.n_participants for p in projection])
        if curve.params is not None:
            fit = Fit(curve.params["a"], curve.params["b"], curve.params["c"])
            inside = np.geomspace(known[0].n_participants, n_now, 50)
            beyond = np.geomspace(n_now, top, 50)
            ax.plot(inside, fit.at(inside), color=colour)
            ax.plot(beyond, fit.at(beyond), color=colour, linestyle="--")
        elif curve.level is not None:
            ax.plot([known[0].n_participants, top], [curve.level] * 2, color=colour, linestyle=":")
        if projection:
            xs, lows, highs = _band(curve, projection, n_now)
            ax.fill_between(xs, lows, highs, color=colour, alpha=0.15, linewidth=0)
    ax.axvline(n_now, color="grey", linewidth=1, linestyle=":", label=f"this study ({n_now:.0f})")
    ax.set_xscale("log")  # ticks as numbers of participants, the minor ones at 2, 3 and 5
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(
        FuncFormatter(lambda value, _: f"{value:g}" if f"{value:g}"[0] in "235" else "")
    )
    ax.set(
        xlabel=f"{sample.unit}s in the study",
        ylabel="balanced accuracy (mean over folds)",
        title="learning curve: fitted inverse power law, dashed where projected",
    )
    legend_below(fig, ax, ncol=2)
    return fig
