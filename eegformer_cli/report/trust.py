"""The report's section "Is the score real?": above chance by which test, the shortcut audit and
the permutation test.

First the rule the verdict's headline follows (:mod:`eegformer_cli.experiment.above_chance`):
its answer, the test it follows and what that test does and does not show. Then, from
``metrics.json``'s ``shortcut_audit`` (:mod:`eegformer_cli.experiment.audit`) and
``permutation_test`` (:mod:`eegformer_cli.experiment.permutation`): a table of the nuisance
variables (flagged first) with a sentence on what a flag means, and a histogram of the null
BAC with each model's observed BAC. A run without them gets a line saying how to add them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from eegformer_cli.evaluation.run_metrics import PermutationTest, RunMetrics, ShortcutAudit
from eegformer_cli.experiment.above_chance import above_chance
from eegformer_cli.experiment.audit import (
    AUROC_FLAG,
    describe_by_class,
    describe_figure,
)
from eegformer_cli.experiment.permutation import describe_permutation_test
from eegformer_cli.experiment.verdict import scorer
from eegformer_cli.report.figures import legend_below
from eegformer_cli.report.page import inline_code

SECTION = "Is the score real?"
AUDIT_MEANING = (
    "Each variable below was given alone to a small model (a logistic regression) on the "
    "same folds as the models. A flagged variable predicts the label by "
    f"itself (AUROC >= {AUROC_FLAG} and beyond chance): the models' score may come from it "
    "rather than from the brain, so compare like with like (e.g. recordings cropped to the "
    "same length, sites or ages balanced) before trusting the score. A borderline variable "
    f"predicts the label beyond chance too, but with AUROC below {AUROC_FLAG}: weaker, not "
    "cleared. Checked: no evidence that it predicts the label. Constant or unknown "
    "variables cannot carry the label here."
)
PERMUTATION_MEANING = (
    "The cross-validation was refit on labels permuted at random; p is the share of "
    "permutations whose BAC reached the observed one (counting the observed labels). A small "
    "p says the score beats chance; it does not say why (see the audit above)."
)


def add_trust_section(report, run_dir: Path, metrics: RunMetrics) -> None:
    """Add the section to ``report`` (an :class:`mne.Report`) from the run's ``metrics``
    (``RUN_DIR/metrics.json``; ``run_dir`` is named in the commands that add what is missing)."""
    audit, test = metrics.shortcut_audit, metrics.permutation_test
    rule, name = above_chance(metrics), scorer(metrics)
    report.add_html(
        f"<p><b>{inline_code(name[0].upper() + name[1:])}: {inline_code(rule.statement)}.</b> "
        f"{inline_code(rule.meaning)}</p>",
        "Above chance: the test the verdict follows",
        section=SECTION,
    )
    if audit is None:
        body = (
            "<p>This run has no shortcut audit (it was trained before eegformer had one): "
            f"<code>eegformer train --merge {inline_code(str(run_dir))}</code> adds it.</p>"
        )
    else:
        body = (
            f"<p>{inline_code(AUDIT_MEANING)}</p><p>Folds: "
            f"{inline_code(audit.folds)}; interval: {inline_code(audit.interval)}.</p>"
            + audit_table_html(audit)
        )
    report.add_html(body, "Shortcut audit", section=SECTION)
    if test is None:
        report.add_html(
            "<p>No permutation test: <code>eegformer train --merge "
            f"{inline_code(str(run_dir))} --permutations 100</code> adds one "
            "(the logistic regression refit 100 times by default).</p>",
            "Permutation test",
            section=SECTION,
        )
        return
    report.add_html(
        f"<p>{inline_code(PERMUTATION_MEANING)}</p><p>"
        f"{inline_code(describe_permutation_test(test))}.</p>",
        "Permutation test",
        section=SECTION,
    )
    figure = null_distribution_figure(test)
    report.add_figure(
        figure, "Permutation test: null distribution", section=SECTION, image_format="png"
    )
    plt.close(figure)


def audit_table_html(audit: ShortcutAudit) -> str:
    """HTML table of the audited variables in the audit's order (flagged first), flagged and
    borderline rows highlighted, each with the reason for its status."""
    head = "".join(
        f"<th>{name}</th>"
        for name in ("variable", "meaning", "status", "why", "per class", "AUROC, BAC (alone)")
    )
    rows = []
    for entry in audit.variables:
        cells = [
            entry.name,
            entry.description,
            entry.status,
            entry.reason or "",
            describe_by_class(entry),
            describe_figure(entry),
        ]
        style = {"flagged": ' class="table-warning"', "borderline": ' class="table-info"'}.get(
            entry.status, ""
        )
        rows.append(
            f"<tr{style}>" + "".join(f"<td>{inline_code(str(c))}</td>" for c in cells) + "</tr>"
        )
    return (
        f'<table class="table table-sm"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def null_distribution_figure(test: PermutationTest):
    """Histogram of the null BAC (one per null model computed) with a line at each model's
    observed BAC, labelled with its p-value; the legend below the plot, over no bar."""
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    values = np.concatenate([np.asarray(v, dtype=float) for v in test.null.values()])
    bins = np.linspace(min(values.min(), 0.0), 1.0, 41)
    for name, null in test.null.items():
        ax.hist(null, bins=bins.tolist(), alpha=0.5, label=f"null: {name} on permuted labels")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, model) in enumerate(test.models.items()):
        if model.observed_bac is None:  # a model without a mean BAC has no line
            continue
        ax.axvline(
            model.observed_bac,
            color=colours[(k + 2) % len(colours)],
            linewidth=2,
            label=f"{name}: BAC {model.observed_bac:.3f}, p = {model.p_value:.2g}"
            + ("" if model.null_from == name else f" (vs the {model.null_from} null)"),
        )
    ax.set(
        xlabel="balanced accuracy (mean over folds)",
        ylabel="permutations",
        title=f"{test.n_permutations} permutations ({test.permuted})",
    )
    legend_below(fig, ax)
    return fig
