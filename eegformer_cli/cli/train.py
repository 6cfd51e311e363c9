"""``eegformer train``: participant-wise cross-validation (or holdout) and the final model file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from eegformer_cli import commands, console
from eegformer_cli.choices import DEFAULT_PRESET
from eegformer_cli.option_docs import TRAIN

if TYPE_CHECKING:
    from eegformer_cli.evaluation.run_metrics import Calibration, RunMetrics, ShortcutAudit
    from eegformer_cli.training.fold_record import FoldRecord


def _verdict_panel(metrics: RunMetrics) -> Panel:
    """The verdict box that opens the summary (:mod:`eegformer_cli.experiment.verdict`)."""
    from eegformer_cli.experiment.verdict import headline, verdict_lines

    colour = {"good": "green", "warn": "yellow", "neutral": "default"}
    text = Text(headline(metrics) + "\n", style="bold")
    for topic, line, tone in verdict_lines(metrics):
        text.append(f"{topic}: ", style="bold")
        text.append(line + "\n", style=colour[tone])
    text.rstrip()
    return Panel(text, title="Verdict", expand=False)


def _summary_table(metrics: RunMetrics) -> Table:
    """Every model's BAC, AUROC and AUC-PR, mean and std over folds; the caption names the
    model that carries the score (:func:`verdict.scorer`) where it is not the transformer in
    every fold."""
    from eegformer_cli.experiment.verdict import LINEAR_PATH_SCORER, scorer

    n_classes = len(metrics.labels)
    tested = (
        "test recordings only, recording-wise: a person's recordings may be on both sides"
        if metrics.recording_wise
        else "test participants only"
    )
    table = Table(
        title=f"{metrics.n_folds} fold(s), {tested}",
        caption=f"chance: BAC {1 / max(n_classes, 1):.2f} ({n_classes} classes), AUROC 0.50"
        + (
            "; xaiguiformer is "
            + scorer(metrics)
            + (": its row is linear_path's" if scorer(metrics) == LINEAR_PATH_SCORER else "")
            if metrics.linear_path
            else ""
        ),
    )
    table.add_column("model")
    for name in ("BAC", "AUROC", "AUC-PR"):
        table.add_column(name, justify="right")
    for model, values in metrics.models.items():
        cells = []
        for key in ("bac", "auroc", "auc_pr"):
            mean, std = getattr(values.mean, key), getattr(values.std, key)
            cells.append(
                "n/a" if mean is None else f"{mean:.3f}" + ("" if std is None else f" ± {std:.3f}")
            )
        table.add_row(model, *cells)
    return table


def _report(metrics: RunMetrics | None, out: Path, as_json: bool) -> None:
    """The summary: the verdict, the table of every model and what the comparisons, the
    sample size, the interaction screens, the shortcut audit and the permutation test say, on
    stdout (a result, as ``predict``'s rows), or with ``--json`` on stderr and the JSON alone
    on stdout; nothing on torchrun processes other than rank 0 (``metrics`` None: rank 0
    reports)."""
    if metrics is None:
        return
    from eegformer_cli.experiment import run_folder
    from eegformer_cli.experiment.verdict import static_statement, transformer_statement

    shown = console.stderr if as_json else console.stdout
    shown.print(_verdict_panel(metrics), soft_wrap=False)  # wrapped, not cut
    shown.print(_summary_table(metrics))
    if metrics.all_comparisons:
        # imported here: scikit-learn, not at every command's start-up
        from eegformer_cli.evaluation.metrics import describe_comparison

        for comparison in metrics.all_comparisons:
            shown.print(describe_comparison(comparison))
    for statement in (static_statement(metrics), transformer_statement(metrics)):
        if statement:
            shown.print(statement)
    if metrics.sample_size:
        from eegformer_cli.evaluation.sample_size import describe as describe_sample_size

        for line in describe_sample_size(metrics.sample_size):
            shown.print(line)
    if metrics.attention:
        from eegformer_cli.experiment.verdict import attention_reach
        from eegformer_cli.model.diagnostics import describe

        reach = attention_reach(metrics)
        shown.print(
            describe(metrics.attention, "out of fold") + ("" if reach is None else f". {reach}")
        )
    from eegformer_cli.experiment.screen_outcomes import describe_screens

    shown.print(
        "interaction screens: " + describe_screens(metrics.interaction_screens, metrics.preset)
    )
    if metrics.shortcut_audit:
        from eegformer_cli.experiment.audit import describe_audit

        shown.print(describe_audit(metrics.shortcut_audit))
    if metrics.permutation_test:
        from eegformer_cli.experiment.permutation import describe_permutation_test

        shown.print(describe_permutation_test(metrics.permutation_test))
    shown.print(f"run folder: {out} (model file: {run_folder.model_path(out)})")
    if as_json:
        typer.echo(json.dumps(_json_summary(metrics, out), indent=2))


def _json_summary(metrics: RunMetrics, out: Path) -> dict:
    """``--json``'s summary: metrics.json without the per-fold figures, reliability bins,
    null values and attention per fold (metrics.json has them)."""
    from eegformer_cli.experiment import run_folder

    def part(record):
        return None if record is None else record.to_dict()

    attention = {key: v for key, v in (metrics.attention or {}).items() if key != "per_fold"}
    test = part(metrics.permutation_test)
    return {
        "run_dir": str(out),
        "model_file": str(run_folder.model_path(out)),
        "preset": metrics.preset,
        "scheme": metrics.scheme,
        "n_folds": metrics.n_folds,
        "cv_seconds": metrics.cv_seconds,
        "labels": metrics.labels,
        "positive_label": metrics.positive_label,
        "models": {
            name: {"mean": values.mean.to_dict(), "std": values.std.to_dict()}
            for name, values in metrics.models.items()
        },
        "comparison": part(metrics.comparison),
        "comparisons": [c.to_dict() for c in metrics.all_comparisons],
        "score": part(metrics.score),
        "above_chance": part(metrics.above_chance),
        "scored_by": metrics.scored_by,
        "calibration": _calibration_summary(metrics.calibration),
        "prediction_sets": part(metrics.prediction_sets),
        "attention": attention or None,
        "interaction_screens": part(metrics.interaction_screens),
        "shortcut_audit": _audit_summary(metrics.shortcut_audit),
        "permutation_test": None if test is None else {k: test[k] for k in test if k != "null"},
        "sample_size": part(metrics.sample_size),
    }


def _audit_summary(audit: ShortcutAudit | None) -> dict | None:
    """The shortcut audit for ``--json``: what was flagged, and each variable's status and
    mean AUROC (metrics.json has the folds and intervals)."""
    if audit is None:
        return None
    return {
        "flagged": audit.flagged,
        "variables": {
            entry.name: {"status": entry.status, "auroc": entry.auroc and entry.auroc.mean}
            for entry in audit.variables
        },
    }


def _calibration_summary(calibration: Calibration | None) -> dict | None:
    """The calibration for ``--json`` without the reliability bins (metrics.json has them)."""
    if calibration is None:
        return None

    def without_bins(summary):
        return (
            None if summary is None else {k: v for k, v in summary.to_dict().items() if k != "bins"}
        )

    recalibration = calibration.recalibration
    return {
        "models": {name: without_bins(s) for name, s in calibration.models.items()},
        "recalibration": {**recalibration.to_dict(), "after": without_bins(recalibration.after)},
    }


#: The panels of ``train --help`` beyond the essentials (data, output, folds, seed, jobs).
RECIPE, ABLATIONS, TRUST, COMPUTE = (
    "Recipe",
    "Ablations",
    "Is the score real?",
    "Compute and scaling out",
)


def train(
    data_dir: Path | None = typer.Argument(None, metavar="DATA_DIR", help=TRAIN.help("data_dir")),
    out: Path | None = typer.Option(None, "--out", "-o", help=TRAIN.help("out")),
    label_column: str | None = typer.Option(
        None, "--label-column", "-l", help=TRAIN.help("label_column")
    ),
    preset: str = typer.Option(DEFAULT_PRESET, help=TRAIN.help("preset"), rich_help_panel=RECIPE),
    config: Path | None = typer.Option(
        None, "--config", help=TRAIN.help("config"), rich_help_panel=RECIPE
    ),
    cv: int | None = typer.Option(None, "--cv", help=TRAIN.help("cv")),
    repeats: int | None = typer.Option(None, help=TRAIN.help("repeats")),
    holdout: float | None = typer.Option(None, help=TRAIN.help("holdout")),
    split_by: str = typer.Option(
        "participant", "--split-by", help=TRAIN.help("split_by"), rich_help_panel=RECIPE
    ),
    splits: Path | None = typer.Option(
        None, "--splits", help=TRAIN.help("splits"), rich_help_panel=RECIPE
    ),
    epochs: int | None = typer.Option(None, help=TRAIN.help("epochs"), rich_help_panel=RECIPE),
    batch_size: int | None = typer.Option(
        None, "--batch-size", help=TRAIN.help("batch_size"), rich_help_panel=RECIPE
    ),
    lr: float | None = typer.Option(None, "--lr", help=TRAIN.help("lr"), rich_help_panel=RECIPE),
    patience: int | None = typer.Option(None, help=TRAIN.help("patience"), rich_help_panel=RECIPE),
    seed: int | None = typer.Option(None, help=TRAIN.help("seed")),
    device: str | None = typer.Option(None, help=TRAIN.help("device"), rich_help_panel=COMPUTE),
    precision: str | None = typer.Option(
        None, help=TRAIN.help("precision"), rich_help_panel=COMPUTE
    ),
    no_xai: bool = typer.Option(
        False, "--no-xai", help=TRAIN.help("no_xai"), rich_help_panel=ABLATIONS
    ),
    no_interactions: bool = typer.Option(
        False,
        "--no-interactions",
        help=TRAIN.help("no_interactions"),
        rich_help_panel=ABLATIONS,
    ),
    no_age_interactions: bool = typer.Option(
        False,
        "--no-age-interactions",
        help=TRAIN.help("no_age_interactions"),
        rich_help_panel=ABLATIONS,
    ),
    frequency_encoding: str | None = typer.Option(
        None,
        "--frequency-encoding",
        help=TRAIN.help("frequency_encoding"),
        rich_help_panel=ABLATIONS,
    ),
    positive_label: str | None = typer.Option(
        None, "--positive-label", help=TRAIN.help("positive_label"), rich_help_panel=RECIPE
    ),
    n_jobs: int = typer.Option(1, "--n-jobs", "-j", help=TRAIN.help("n_jobs")),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as JSON on stdout \\[default: off]."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=TRAIN.help("overwrite")),
    fold: int | None = typer.Option(
        None, "--fold", help=TRAIN.help("fold"), rich_help_panel=COMPUTE
    ),
    merge: Path | None = typer.Option(
        None, "--merge", metavar="RUN_DIR", help=TRAIN.help("merge"), rich_help_panel=COMPUTE
    ),
    confounds: str | None = typer.Option(
        None, "--confounds", metavar="COL,COL", help=TRAIN.help("confounds"), rich_help_panel=TRUST
    ),
    permutations: int = typer.Option(
        0, "--permutations", metavar="N", help=TRAIN.help("permutations"), rich_help_panel=TRUST
    ),
    permutation_model: str = typer.Option(
        "reference",
        "--permutation-model",
        help=TRAIN.help("permutation_model"),
        rich_help_panel=TRUST,
    ),
    learning_curve: bool = typer.Option(
        False, "--learning-curve", help=TRAIN.help("learning_curve"), rich_help_panel=TRUST
    ),
) -> None:
    """Train XAIguiFormer with participant-wise validation, beside two reference models.

    Splits are made on participants (stratified on the label): K-fold CV repeated R times, or
    a holdout fraction; inside every training part a participant-wise validation split selects
    the epoch, so test participants are never used for any choice. Class imbalance: the
    default preset weights the loss by inverse class frequency (the paper preset does not).
    The references run on the same folds: a logistic regression on the standardised
    upper-triangle coherence + wPLI means, and pyRiemann's tangent space of the band
    covariances + a logistic regression (when the preprocess folder holds covariances; older
    folders train without it, and say so), each with C chosen by inner CV. Writes to OUT:
    config.json, splits.json, history.jsonl, oof_predictions.tsv, metrics.json and model.pt
    (with CV: a model retrained on all participants; with --holdout: the evaluated model). Settings
    resolve as preset -> --config file -> flags; the resolved config is saved. Interrupted
    runs resume (finished folds are kept) when rerun with the same settings.

    Example:

        eegformer train prep --out run --label-column diagnosis --cv 5 --repeats 3 --n-jobs 2

        eegformer train prep --out run-paper --label-column diagnosis --preset paper --holdout 0.2

        torchrun --standalone --nproc_per_node 2 -m eegformer_cli train prep --out run -l diagnosis

        eegformer train prep --out run -l diagnosis --fold 0   (one job per fold, then:)
        eegformer train --merge run

    Is the score real? Every run also checks, on the same folds, whether a nuisance variable
    alone predicts the label (duration, segments, original sampling rate, interpolated
    channels, input folder, age, sex and the --confounds columns; a warning names each one
    that does), and --permutations N tests the BAC against chance. Both go into
    metrics.json and the report; add them to a finished run with --merge RUN_DIR.

        eegformer train prep --out run -l condition --confounds site --permutations 100 -j 2

        eegformer train --merge run --permutations 100 --permutation-model xaiguiformer

    Exit codes: 0 done, 2 bad flags, a different run in OUT or files eegformer did not write
    (without --overwrite), 3 unusable data (one class, no labels, recordings without a
    participant unless --split-by recording), 5 OUT not writable or in use, 130 interrupted
    (rerun to resume).
    """
    options = dict(locals())  # first: the parameters alone, each named as commands.train's
    del options["as_json"]  # --json: the CLI's own
    _print_result(commands.train(**options), out, fold, merge, as_json)


def _print_result(
    result: RunMetrics | FoldRecord | None,
    out: Path | None,
    fold: int | None,
    merge: Path | None,
    as_json: bool,
) -> None:
    """What ``train`` prints: the summary of a run or a merged run, or a fold's line (and its
    metrics with ``--json``) when ``--fold`` ran one fold."""
    from eegformer_cli.training.fold_record import FoldRecord

    if merge is None and fold is not None:  # this fold's record (None on torchrun ranks > 0)
        if isinstance(result, FoldRecord):
            console.log(f"fold {fold} done; when every fold is done: eegformer train --merge {out}")
            if as_json:
                typer.echo(json.dumps(result.to_dict()["metrics"], indent=2))
        return
    assert not isinstance(result, FoldRecord)  # a fold's record comes only with --fold
    folder = merge if merge is not None else out
    assert folder is not None  # commands.train refused a run without --out
    _report(result, folder, as_json)


def register(app: typer.Typer) -> None:
    app.command("train")(train)
