"""``eegformer predict``: a model file + recordings -> one row per recording on stdout."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import typer

from eegformer_cli import commands, provenance
from eegformer_cli.choices import DEFAULT_DEVICE, DEFAULT_PRECISION
from eegformer_cli.cli.arguments import expand_stdin
from eegformer_cli.errors import EegformerError, check_choice
from eegformer_cli.option_docs import PREDICT

FORMATS = ("csv", "json", "jsonl")


def predict(
    model: Path = typer.Argument(..., metavar="MODEL", help=PREDICT.help("model")),
    inputs: list[Path] = typer.Argument(..., metavar="INPUT...", help=PREDICT.help("inputs")),
    participants: Path | None = typer.Option(None, help=PREDICT.help("participants")),
    age: float | None = typer.Option(None, help=PREDICT.help("age")),
    sex: str | None = typer.Option(None, help=PREDICT.help("sex")),
    max_interpolated: int | None = typer.Option(None, help=PREDICT.help("max_interpolated")),
    output_format: str = typer.Option("csv", "--format", help="csv, json (one list) or jsonl."),
    device: str = typer.Option(DEFAULT_DEVICE, help=PREDICT.help("device")),
    precision: str = typer.Option(DEFAULT_PRECISION, help=PREDICT.help("precision")),
    coverage: float | None = typer.Option(
        None, "--coverage", metavar="SHARE", help=PREDICT.help("coverage")
    ),
    strict: bool = typer.Option(False, "--strict", help=PREDICT.help("strict")),
) -> None:
    """Predict the class of each recording with a trained model.

    Raw recordings are preprocessed with the settings and channel list stored in the model
    (other channel names or sampling rates are adapted as `preprocess` does, or the recording
    is rejected with the reason); a preprocess output folder is used as is when its channels,
    bands and preprocessing settings match the model's (else exit 3 naming what differs).
    --participants gives the demographics of raw recordings and, for the participants it
    lists, replaces those of a preprocess folder's manifest. Each recording's prediction
    averages the model's refined logits over its segments. Rows on stdout: recording_id,
    participant_id, the BIDS entities of a BIDS dataset's recordings (subject, session, task,
    acquisition, run: those any has), predicted, prob_LABEL per class (recalibrated when train
    found that this lowers the out-of-fold log-loss), prediction_set with --coverage, then
    where the row comes from and how trustworthy it is: source_file, n_segments (used),
    n_segments_rejected, channels_interpolated, age and sex with age_source / sex_source
    (flag, table, manifest or none), and warnings. A recording that fails gets one line on stderr and no row.

    Warnings (one line each on stderr and in the row's warnings): channels interpolated; a
    participants table that does not list the recording; an age, sex, sampling rate or length
    outside the model's training data; a recording or participant that was in the model's
    training data (then its prediction is optimistic: the run's oof_predictions.tsv has the
    honest ones). Of each kind, stderr shows the first three recordings and then one line
    counting the rest.

    Example:

        eegformer predict run/model.pt study/eeg --format jsonl

        find new-data -name '*.edf' | eegformer predict run/model.pt -

    Exit codes: 0 all predicted, 3 at least one recording failed (the others are printed),
    4 bad model file, 2 bad flags, 6 with --strict: a recording got a warning (all printed).
    """
    check_choice("--format", output_format, FORMATS)
    inputs = expand_stdin(inputs)
    printer = _RowPrinter(output_format)
    try:
        table = commands.predict(
            model,
            inputs,
            participants=participants,
            age=age,
            sex=sex,
            max_interpolated=max_interpolated,
            device=device,
            precision=precision,
            strict=strict,
            on_row=printer.row,
            coverage=coverage,
        )
    except EegformerError as exc:
        if exc.result is not None:  # rows of the recordings that worked: printed first
            printer.end(list(exc.result.columns))
        raise
    printer.end(list(table.columns))


class _RowPrinter:
    """Prints each row on stdout as it comes (CSV or JSON lines; ``--format json``: one list at
    the end); a CSV header before the first row, or at the end when no row came."""

    def __init__(self, output_format: str):
        self.output_format = output_format
        self.writer: csv.DictWriter[str] | None = None
        self.rows: list[dict] = []

    def _header(self, columns: list[str]) -> None:
        if self.writer is None and self.output_format == "csv":
            self.writer = csv.DictWriter(sys.stdout, columns, lineterminator="\n")
            self.writer.writeheader()

    def row(self, row: dict) -> None:
        self._header(list(row))
        if self.writer is not None:
            self.writer.writerow(provenance.flat_row(row))
        else:
            row = {key: ("n/a" if value is None else value) for key, value in row.items()}
            if self.output_format == "jsonl":
                typer.echo(json.dumps(row, ensure_ascii=False))
            else:
                self.rows.append(row)
        sys.stdout.flush()

    def end(self, columns: list[str]) -> None:
        self._header(columns)
        if self.output_format == "json":
            typer.echo(json.dumps(self.rows, indent=2, ensure_ascii=False))


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
