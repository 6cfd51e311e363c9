"""``eegformer preprocess``: recordings -> connectome tokens, a manifest and the settings."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import commands, console


def preprocess(
    inputs: list[Path] = typer.Argument(..., metavar="INPUT...",
                                        help="Recording files, folders or a BIDS root."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created; reruns resume)."),
    participants: Path | None = typer.Option(
        None, help="participants table (TSV or CSV); default: participants.tsv at the dataset root."),
    recordings: Path | None = typer.Option(
        None, help="recordings table (file, participant_id, per-recording columns); default: "
                   "recordings.tsv at the dataset root, if any."),
    preset: str = typer.Option(
        "default", help="Settings preset: default (128 Hz, 1-45 Hz, line noise removed, "
                        "amplitude rejection, 8 bands) or paper (the reference's steps: 250 Hz, "
                        "ICA + ICLabel, 30 s epochs, 8 bands + theta/beta ratio)."),
    channels: str | None = typer.Option(
        None, help="Comma-separated channels, in order (e.g. Fp1,Fp2,F3); default: the standard "
                   "10-20 channels every recording has."),
    max_interpolated: int | None = typer.Option(
        None, help="Most missing channels a recording may have interpolated \\[default: 2]."),
    bands: str | None = typer.Option(
        None, help="Bands as NAME:LOW-HIGH (Hz), ratio tokens as NAME:LOW-HIGH/LOW-HIGH, "
                   "comma-separated; default: the preset's."),
    epoch_length: str | None = typer.Option(
        None, help="Segment length in s (a multiple of 3, at least 6) or 'auto': one length "
                   "for the run, 30 s or shorter so the shortest recording gives 4 segments "
                   "\\[default: auto; paper: 30]."),
    sfreq: float | None = typer.Option(
        None, help="Sampling rate after cleaning, Hz \\[default: 128; paper: 250]."),
    ica: bool | None = typer.Option(
        None, "--ica/--no-ica", help="Remove artefact components with ICA + ICLabel "
                                     "\\[default: off; paper: on]."),
    crop: float | None = typer.Option(
        None, "--crop", metavar="SECONDS",
        help="Analyse only the first SECONDS of every recording, so recordings of different "
             "lengths give the same segments (the remedy when train's shortcut audit flags "
             "duration_s or n_segments); a shorter recording fails \\[default: all of it]."),
    n_jobs: int = typer.Option(1, "--n-jobs", "-j", help="Recordings processed in parallel "
                                                         "(-1: all cores)."),
    strict: bool = typer.Option(False, help="Exit with code 6 if any recording fails."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="OUT may hold recordings preprocessed with other settings: "
                                   "they leave the manifest \\[default: off: refused]."),
    backend: str = typer.Option(
        "local", help="Where recordings run: local (--n-jobs processes here) or dask (a Dask "
                      "cluster; needs `pip install eegformer-cli\\[dask]`)."),
    scheduler: str | None = typer.Option(
        None, help="Dask scheduler address, e.g. tcp://10.0.0.5:8786 (with --backend dask); "
                   "default: a local cluster of --n-jobs workers."),
) -> None:
    """Turn EEG recordings into band-wise connectivity tokens (coherence and wPLI).

    Reads EDF, BDF, GDF, BrainVision, EEGLAB and FIF files; keeps the 10-20 EEG channels under
    canonical names; resamples, band-passes 1-45 Hz, re-references to the average, cuts
    segments of 3 s windows, drops flat or absurd segments, and computes multitaper coherence
    and wPLI per band and segment (mne-connectivity's spectral_connectivity_epochs estimator).
    Writes OUT/connectomes/RECORDING_ID.npz, OUT/manifest.tsv (one row per recording, status ok or
    error) and OUT/preprocess.json. A failed recording gets a one-line error in the manifest
    and the others go on (the first three named on stderr); a rerun skips recordings already
    done with the same settings, and a folder made with other settings needs --overwrite.

    Example:

        eegformer preprocess ../shared/data/msu-schizophrenia --out prep --n-jobs 2

        eegformer preprocess archive/ --out prep --backend dask --scheduler tcp://10.0.0.5:8786

    Exit codes: 0 done (failures listed in the manifest), 2 OUT holds other settings (without
    --overwrite), 3 no usable recording,
    5 OUT locked or not writable, 6 a recording failed and --strict was given.
    """
    summary = commands.preprocess(
        inputs, out, participants=participants, recordings=recordings, preset=preset,
        channels=channels, max_interpolated=max_interpolated, bands=bands,
        epoch_length=epoch_length, sfreq=sfreq, ica=ica, n_jobs=n_jobs, strict=strict,
        backend=backend, scheduler=scheduler, overwrite=overwrite, crop=crop)
    console.log(f"preprocess: {summary.n_ok} ok, {summary.n_error} errors "
                f"({summary.n_skipped} already done) of {summary.n_recordings} recordings")
    console.log(f"connectomes: {summary.out_dir / 'connectomes'}")
    console.log(f"manifest: {summary.manifest}")
    console.log(f"settings: {summary.settings_file}")


def register(app: typer.Typer) -> None:
    app.command("preprocess")(preprocess)
