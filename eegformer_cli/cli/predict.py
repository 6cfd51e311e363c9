"""``eegformer predict``: a model file + recordings -> one row per recording on stdout."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import typer

from eegformer_cli import console, provenance
from eegformer_cli.cli import (exit_for_failed_recordings, exit_for_warnings,
                               note_unchecked_model, print_recording_warnings)
from eegformer_cli.errors import check_choice

FORMATS = ("csv", "json", "jsonl")


def predict(
    model: Path = typer.Argument(..., metavar="MODEL", help="A model.pt written by `eegformer train`."),
    inputs: list[Path] = typer.Argument(..., metavar="INPUT...",
                                        help="Recordings (files or folders) or preprocess output folders."),
    participants: Path | None = typer.Option(
        None, help="participants table for age/sex (default: participants.tsv beside the inputs)."),
    age: float | None = typer.Option(None, help="Age in years for every recording (overrides tables)."),
    sex: str | None = typer.Option(None, help="Sex for every recording: M or F (overrides tables)."),
    max_interpolated: int | None = typer.Option(
        None, help="Most missing channels a raw recording may have interpolated "
                   "(default: the model's preprocessing setting)."),
    output_format: str = typer.Option("csv", "--format", help="csv, json (one list) or jsonl."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    strict: bool = typer.Option(False, "--strict",
                                help="Exit with code 6 when a recording got a warning (every "
                                     "row is still printed) \\[default: off]."),
) -> None:
    """Predict the class of each recording with a trained model.

    Raw recordings are preprocessed with the settings and channel list stored in the model
    (other channel names or sampling rates are adapted as `preprocess` does, or the recording
    is rejected with the reason); a preprocess output folder is used as is when its channels,
    bands and preprocessing settings match the model's (else exit 3 naming what differs).
    --participants gives the demographics of raw recordings and, for the participants it
    lists, replaces those of a preprocess folder's manifest. Each recording's prediction
    averages the model's refined logits over its segments. Rows on stdout: recording_id,
    participant_id, predicted, prob_LABEL per class, then where the row comes from and how
    trustworthy it is: source_file, n_segments (used), n_segments_rejected,
    channels_interpolated, age and sex with age_source / sex_source (flag, table, manifest or
    none), and warnings. A recording that fails gets one line on stderr and no row.

    Warnings (one line each on stderr and in the row's warnings): channels interpolated; a
    participants table that does not list the recording; an age, sex, sampling rate or length
    outside the model's training data; a recording or participant that was in the model's
    training data (then its prediction is optimistic: the run's oof_predictions.tsv has the
    honest ones).

    Example:

        eegformer predict run/model.pt ../shared/data/msu-schizophrenia/eeg --format jsonl

    Exit codes: 0 all predicted, 3 at least one recording failed (the others are printed),
    4 bad model file, 2 bad flags, 6 with --strict: a recording got a warning (all printed).
    """
    # imported here: torch takes seconds to import, which every other command (and --help)
    # would pay if this module imported it
    from eegformer_cli.devices import resolve_device
    from eegformer_cli.inference import load_inputs, predict_recordings
    from eegformer_cli.training.model_file import load_model_file

    check_choice("--format", output_format, FORMATS)
    torch_device = resolve_device(device)
    bundle = load_model_file(model, torch_device)
    # every check of the inputs as a whole comes before the first line on stdout
    items = load_inputs(bundle, inputs, participants=participants, age=age, sex=sex,
                        max_interpolated=max_interpolated)
    note_unchecked_model(bundle, strict)
    columns = (["recording_id", "participant_id", "predicted"]
               + [f"prob_{name}" for name in bundle.label_names]
               + list(provenance.PROVENANCE_COLUMNS))
    failures, warned, rows = [], [], []
    writer = csv.DictWriter(sys.stdout, columns, lineterminator="\n") if output_format == "csv" else None
    if writer is not None:
        writer.writeheader()
    for row in predict_recordings(bundle, items, torch_device):
        if "error" in row:
            failures.append(row["recording_id"])
            console.stderr.print(f"eegformer: error: {row['error']}", markup=False)
            continue
        print_recording_warnings(row["recording_id"], row["warnings"])
        if row["warnings"]:
            warned.append(row["recording_id"])
        if writer is not None:
            writer.writerow(provenance.flat_row(row))
        else:
            row = {key: ("n/a" if value is None else value) for key, value in row.items()}
            if output_format == "jsonl":
                typer.echo(json.dumps(row, ensure_ascii=False))
            else:
                rows.append(row)
        sys.stdout.flush()
    if output_format == "json":
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    exit_for_failed_recordings(failures, "predicted")
    exit_for_warnings(strict, warned, bundle, "predicted")

def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
