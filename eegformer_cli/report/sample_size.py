"""The report's item "What this N resolves" (in the cross-validation section): from
``metrics.json``'s ``sample_size`` (:mod:`eegformer_cli.evaluation.sample_size`), the sentence to
quote, one line per figure (the score's interval, each reference's smallest resolved difference
and the participants its observed difference needs, the split seeds) and the method with its
assumption. A run of an earlier version gets a line saying how to add it.
"""

from __future__ import annotations

from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.evaluation.sample_size import describe
from eegformer_cli.report.page import add_note, inline_code

TITLE = "What this N resolves"


def add_sample_size_section(report, metrics: RunMetrics, section: str) -> None:
    """Add the item (module docstring) to ``report`` in ``section``."""
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
    lines = describe(sample) if sample.half_width is not None else []  # else: the sentence
    items = "".join(f"<li>{inline_code(line)}</li>" for line in lines)
    report.add_html(
        f"<p><strong>{inline_code(sample.statement[:1].upper() + sample.statement[1:])}."
        f"</strong></p><ul>{items}</ul><p>How: {inline_code(sample.method)}.</p>",
        TITLE,
        section=section,
    )
