"""The report's section "Interactions", always present: what every fit's interaction screen found
(``metrics.json``'s ``interaction_screens``: what it kept, its best score and the gate it had to
beat, per fold and for the final model) and, with explanations, what each kept interaction
weighs in a prediction (``class_summary.json``'s ``interactions``, in logit units like the
channel pairs). A run that screens nothing says "not screened"; one whose screens kept nothing
says so with the best score against its gate.
"""

from __future__ import annotations

from pathlib import Path

from eegformer_cli.evaluation.run_metrics import InteractionScreens, RunMetrics, ScreenOutcome
from eegformer_cli.experiment.screen_outcomes import describe_screens
from eegformer_cli.report.explanation_notes import interactions_table_html
from eegformer_cli.report.page import add_note, inline_code
from eegformer_cli.report.tables import table_html

SECTION = "Interactions"
SCREEN_MEANING = (
    "A label can depend on a combination that no single pair shows: two couplings together, "
    "or a coupling whose meaning changes with age. So every fit of the default preset "
    "screens its own training recordings (never its test ones) for pairs of connectivity "
    "entries, and entries with age, whose correlation differs between the classes (the "
    "score, 0 to 2). A pair is kept only when its score beats the gate: the largest score "
    "the same screen finds with the labels permuted. Each kept pair's product is one more "
    "input of the model, beside the band tokens; a fit that keeps nothing is the model "
    "without them. The screen within recordings asks the same of each segment's deviation "
    "from its recording's mean: couplings that come and go together in one class and in "
    "turn in the other, which no recording's mean shows; the transformer path reads its "
    "pairs segment by segment."
)


def _score(score: float | None, gate: float | None, why: str) -> str:
    """A candidate set's best score against its gate, or why it has none (``why``)."""
    return why if gate is None else f"{score:.2f} (gate {gate:.2f})"


def screens_table_html(screens: InteractionScreens) -> str:
    """One row per fit (each fold, then the final model): the best entry pair's and entry-age
    pair's score against its gate, and what was kept."""

    def row(fit: ScreenOutcome) -> list[str]:
        if not fit.recorded:
            gates = ["not recorded"] * (2 + screens.within)
            return [fit.fit, *gates, "not recorded (an earlier version)"]
        return [
            fit.fit,
            _score(fit.top_pair_score, fit.pair_gate, "not screened"),
            _score(
                fit.top_age_score,
                fit.age_gate,
                "no age known" if screens.with_age else "not screened",
            ),
            *([_score(fit.top_within_score, fit.within_gate, "not screened")] * screens.within),
            ", ".join(fit.kept) or "nothing",
        ]

    fits = screens.per_fold + ([screens.final] if screens.final else [])
    return table_html(
        [
            "fit",
            "entry pairs: best score (gate)",
            "entries with age: best score (gate)",
            *(["within recordings: best score (gate)"] * screens.within),
            "kept",
        ],
        [row(fit) for fit in fits],
    )


def add_interactions_section(
    report, run_dir: Path, metrics: RunMetrics | None, explanations_dir: str | Path | None
) -> None:
    """Add the section to ``report`` (an :class:`mne.Report`): the screens of ``metrics``
    (None: a run without metrics.json) and, from ``explanations_dir`` (None: none given), the
    kept interactions' attributions."""
    if metrics is None:
        add_note(
            report, "What the screens found", "No metrics.json: the run did not finish.", SECTION
        )
        return
    screens = metrics.interaction_screens
    summary = describe_screens(screens, metrics.preset)
    table = screens_table_html(screens) if screens and (screens.per_fold or screens.final) else ""
    report.add_html(
        f"<p>{inline_code(SCREEN_MEANING)}</p><p><b>Interactions: "
        f"{inline_code(summary)}.</b></p>{table}",
        "What the screens found",
        section=SECTION,
    )
    kept = screens is not None and any(
        fit.kept for fit in screens.per_fold + ([screens.final] if screens.final else [])
    )
    from eegformer_cli.explain.class_summary import read_class_summary_json

    explained = read_class_summary_json(explanations_dir) if explanations_dir else None
    if explained and explained.get("interactions"):
        report.add_html(
            "<p>What each interaction the explained models keep weighs in their predictions: "
            "the attribution of its product (captum, like the channel pairs, in logit units), "
            "the mean over each class's recordings, and its push in the class contrast.</p>"
            + interactions_table_html(explained["interactions"], list(explained["classes"])),
            "Interactions the models use",
            section=SECTION,
        )
    elif kept and explained is None:
        add_note(
            report,
            "Interactions the models use",
            "What the kept interactions weigh in a prediction comes from explanations: "
            f"`eegformer explain {run_dir} DATA --out EXPLANATIONS`, then `eegformer report "
            f"{run_dir} --explanations EXPLANATIONS`.",
            SECTION,
        )
