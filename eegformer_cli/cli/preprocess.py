"""``eegformer preprocess``: recordings -> connectome tokens, a manifest and the settings."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import commands, console
from eegformer_cli.choices import DEFAULT_PRESET
from eegformer_cli.option_docs import PREPROCESS


def preprocess(
    inputs: list[Path] = typer.Argument(..., metavar="INPUT...", help=PREPROCESS.help("inputs")),
    out: Path = typer.Option(..., "--out", "-o", help=PREPROCESS.help("out")),
    participants: Path | None = typer.Option(None, help=PREPROCESS.help("participants")),
    recordings: Path | None = typer.Option(None, help=PREPROCESS.help("recordings")),
    preset: str = typer.Option(DEFAULT_PRESET, help=PREPROCESS.help("preset")),
    channels: str | None = typer.Option(None, help=PREPROCESS.help("channels")),
    max_interpolated: int | None = typer.Option(None, help=PREPROCESS.help("max_interpolated")),
    bands: str | None = typer.Option(None, help=PREPROCESS.help("bands")),
    epoch_length: str | None = typer.Option(None, help=PREPROCESS.help("epoch_length")),
    sfreq: float | None = typer.Option(None, help=PREPROCESS.help("sfreq")),
    ica: bool | None = typer.Option(None, "--ica/--no-ica", help=PREPROCESS.help("ica")),
    crop: float | None = typer.Option(
        None, "--crop", metavar="SECONDS", help=PREPROCESS.help("crop")
    ),
    participant_pattern: str | None = typer.Option(
        None,
        "--participant-pattern",
        metavar="REGEX",
        help=PREPROCESS.help("participant_pattern"),
    ),
    task: list[str] | None = typer.Option(
        None, "--task", metavar="LABEL", help=PREPROCESS.help("task")
    ),
    session: list[str] | None = typer.Option(
        None, "--session", metavar="LABEL", help=PREPROCESS.help("session")
    ),
    run: list[str] | None = typer.Option(
        None, "--run", metavar="LABEL", help=PREPROCESS.help("run")
    ),
    n_jobs: int = typer.Option(1, "--n-jobs", "-j", help=PREPROCESS.help("n_jobs")),
    strict: bool = typer.Option(False, help=PREPROCESS.help("strict")),
    overwrite: bool = typer.Option(False, "--overwrite", help=PREPROCESS.help("overwrite")),
    backend: str = typer.Option("local", help=PREPROCESS.help("backend")),
    scheduler: str | None = typer.Option(None, help=PREPROCESS.help("scheduler")),
) -> None:
    """Turn EEG recordings into band-wise connectivity tokens (coherence and wPLI).

    Reads EDF, BDF, GDF, BrainVision, EEGLAB and FIF files; keeps the 10-20 EEG channels under
    canonical names; resamples, band-passes 1-45 Hz, re-references to the average, cuts
    segments of 3 s windows, drops flat or absurd segments, and computes multitaper coherence
    and wPLI per band and segment (mne-connectivity's spectral_connectivity_epochs estimator).
    Writes OUT/connectomes/RECORDING_ID.npz, OUT/manifest.tsv (one row per recording, status ok or
    error), OUT/preprocess.json and OUT/dataset_description.json (a BIDS derivative). In a BIDS
    root, channels.tsv decides which channels are EEG and which are bad (interpolated like
    missing ones), the file names' entities become manifest columns (subject, session, task,
    acquisition, run), and --task/--session/--run choose the recordings read. A failed recording gets a one-line error in the manifest
    and the others go on (the first three named on stderr); a rerun skips recordings already
    done with the same settings, and a folder made with other settings needs --overwrite.

    Example:

        eegformer simulate --out study   (a synthetic study, as sample_data/)

        eegformer preprocess study --out prep --n-jobs 2

        eegformer preprocess bids-root --task rest --out bids-root/derivatives/eegformer

        eegformer preprocess archive/ --out prep --backend dask --scheduler tcp://10.0.0.5:8786

    Exit codes: 0 done (failures listed in the manifest), 2 OUT holds other settings or
    files eegformer did not write (without --overwrite), 3 no usable recording,
    5 OUT locked or not writable, 6 a recording failed and --strict was given.
    """
    summary = commands.preprocess(
        inputs,
        out,
        participants=participants,
        recordings=recordings,
        preset=preset,
        channels=channels,
        max_interpolated=max_interpolated,
        bands=bands,
        epoch_length=epoch_length,
        sfreq=sfreq,
        ica=ica,
        n_jobs=n_jobs,
        strict=strict,
        backend=backend,
        scheduler=scheduler,
        overwrite=overwrite,
        crop=crop,
        participant_pattern=participant_pattern,
        task=task,
        session=session,
        run=run,
    )
    # the result, on stdout (progress and warnings went to stderr)
    console.stdout.print(
        f"preprocess: {summary.n_ok} ok, {summary.n_error} errors "
        f"({summary.n_skipped} already done) of {summary.n_recordings} recordings"
    )
    console.stdout.print(f"connectomes: {summary.connectome_dir}")
    console.stdout.print(f"manifest: {summary.manifest}")
    console.stdout.print(f"settings: {summary.settings_file}")


def register(app: typer.Typer) -> None:
    app.command("preprocess")(preprocess)
