"""The report's verdict box, its first item: the verdict of ``metrics.json``
(:mod:`eegformer_cli.experiment.verdict`), a headline and one row per question, each coloured by
its tone and saying why in its text."""

from __future__ import annotations

from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.experiment.verdict import headline, verdict_lines
from eegformer_cli.report.page import inline_code

VERDICT_CSS = """
.eeg-verdict { border: 2px solid #4a6fa5; border-radius: 6px; padding: .8em 1.2em;
               margin: .5em 0 1em 0; background: #fbfcfe; }
.eeg-verdict .eeg-headline { font-size: 1.15em; font-weight: 600; margin-bottom: .4em; }
.eeg-verdict th { white-space: nowrap; padding-right: 1em; vertical-align: top; }
.eeg-verdict .eeg-good { color: #1b6e20; }
.eeg-verdict .eeg-warn { color: #8a5a00; font-weight: 600; }
"""


def verdict_html(metrics: RunMetrics) -> str:
    """The verdict box: a headline and one row per question, coloured by tone; first, when
    metrics.json says the run is incomplete, why."""
    lines = verdict_lines(metrics)
    if metrics.complete is False:
        lines = [("incomplete run", metrics.incomplete or "incomplete run", "warn"), *lines]
    rows = "".join(
        f'<tr><th scope="row">{inline_code(topic)}</th>'
        f'<td class="eeg-{tone}">{inline_code(text)}</td></tr>'
        for topic, text, tone in lines
    )
    return (
        f'<div class="eeg-verdict" id="eeg-verdict"><div class="eeg-headline">'
        f"{inline_code(headline(metrics))}</div>"
        f'<table class="table table-sm"><tbody>{rows}</tbody></table></div>'
    )


def add_verdict(report, metrics: RunMetrics | None) -> None:
    """The report's first item (an :class:`mne.Report`)."""
    report.add_custom_css(VERDICT_CSS)
    body = (
        verdict_html(metrics)
        if metrics is not None
        else '<div class="eeg-verdict" id="eeg-verdict">No verdict: the run has no metrics.json '
        "(the training did not finish).</div>"
    )
    report.add_html(body, "Verdict", section="Verdict")
