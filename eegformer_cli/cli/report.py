"""``eegformer report``: a run folder (+ explanations) -> one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import commands
from eegformer_cli.option_docs import REPORT


def report(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help=REPORT.help("run_dir")),
    explanations: Path | None = typer.Option(None, help=REPORT.help("explanations")),
    out: Path | None = typer.Option(None, "--out", help=REPORT.help("out")),
    band: str | None = typer.Option(None, "--band", help=REPORT.help("band")),
    overwrite: bool = typer.Option(False, "--overwrite", help=REPORT.help("overwrite")),
) -> None:
    """Write one self-contained HTML report of a training run (figures embedded).

    Sections: dataset (recordings, participants, classes, age and sex, preprocessing
    failures), preprocessing settings, cross-validation metrics of every model, confusion
    matrix, ROC and precision-recall curves, training curves per fold, and with
    --explanations the band importance per class, the strongest channel pairs of each chart's
    top band (or --band) on the head, the class contrast and coarse versus refined attention.
    Prints the file's path on stdout.

    Example:

        eegformer report run --explanations explanations --out run/report.html

    Exit codes: 0 written, 2 bad flags (a --band the explanations lack) or an --out file that
    is not a report eegformer wrote (without --overwrite), 3 RUN_DIR is not a run folder, 5
    the file cannot be written.
    """
    typer.echo(
        str(
            commands.report(
                run_dir, explanations=explanations, out=out, band=band, overwrite=overwrite
            )
        )
    )


def register(app: typer.Typer) -> None:
    app.command("report")(report)
