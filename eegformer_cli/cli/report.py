"""``eegformer report``: a run folder (+ explanations) -> one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import commands


def report(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="The --out folder of `eegformer train`."),
    explanations: Path | None = typer.Option(
        None, help="An `eegformer explain` output folder (adds the explanation figures)."),
    out: Path | None = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html)."),
) -> None:
    """Write one self-contained HTML report of a training run (figures embedded).

    Sections: dataset (recordings, participants, classes, age and sex, preprocessing
    failures), cross-validation metrics of every model, confusion matrix, ROC and
    precision-recall curves, training curves per fold, and with --explanations the band
    importance per class, the strongest channel pairs on the head and coarse
    versus refined attention. Prints the file's path on stdout.

    Example:

        eegformer report run --explanations explanations --out run/report.html

    Exit codes: 0 written, 3 RUN_DIR is not a run folder, 5 the file cannot be written.
    """
    typer.echo(str(commands.report(run_dir, explanations=explanations, out=out)))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
