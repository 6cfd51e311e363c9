"""``eegformer simulate``: write a synthetic resting-state EEG dataset (how sample_data/ is made)."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import console
from eegformer_cli.simulate import (DEFAULT_DURATION_S, DEFAULT_N_PARTICIPANTS, DEFAULT_SEED,
                                    DEFAULT_SFREQ, simulate_dataset)


def simulate(
    out: Path = typer.Option(..., "--out", help="Folder to write participants.tsv and eeg/*.edf into."),
    n_participants: int = typer.Option(DEFAULT_N_PARTICIPANTS, "--n-participants",
                                       help="Number of participants, split evenly into two groups."),
    duration: int = typer.Option(DEFAULT_DURATION_S, "--duration", help="Recording length in seconds."),
    sfreq: int = typer.Option(DEFAULT_SFREQ, "--sfreq", help="Sampling rate in Hz (above 100)."),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="Random seed; the same seed gives the same files."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a dataset already in --out."),
) -> None:
    """Simulate a small EEG study: healthy vs depression, 19 channels of the 10-20 system, EDF.

    Signals: 1/f background, occipital alpha that slows with age, 50 Hz line noise, some blinks.
    The depression group has stronger fronto-parietal theta coupling on average (coh and wPLI).
    Channel labels are messy on purpose (EEG Fp1-REF, T3/T4/T5/T6, FP1-LE).
    With the defaults this regenerates the bundled sample_data/ byte for byte.

    Example:

        eegformer simulate --out my_data --n-participants 40 --duration 60 --seed 1
    """
    participants = simulate_dataset(out, n_participants=n_participants, duration_s=duration,
                                    sfreq=sfreq, seed=seed, overwrite=overwrite)
    console.log(f"wrote {len(participants)} recordings ({duration} s, {sfreq} Hz) and "
                f"participants.tsv")
    console.stdout.print(str(out))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
