"""``eegformer simulate``: write a synthetic resting-state EEG dataset (how sample_data/ is made)."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import console
from eegformer_cli.errors import UsageError
from eegformer_cli.simulation.scenarios import (
    DEFAULT_STRENGTH,
    ground_truth_path,
    simulate_scenario,
)
from eegformer_cli.simulation.simulate import (
    DEFAULT_DURATION_S,
    DEFAULT_N_PARTICIPANTS,
    DEFAULT_SEED,
    DEFAULT_SFREQ,
    simulate_dataset,
)


def simulate(
    out: Path = typer.Option(
        ..., "--out", help="Folder to write participants.tsv and eeg/*.edf into."
    ),
    n_participants: int = typer.Option(
        DEFAULT_N_PARTICIPANTS,
        "--n-participants",
        help="Number of participants, split evenly into two groups.",
    ),
    duration: int = typer.Option(
        DEFAULT_DURATION_S, "--duration", help="Recording length in seconds."
    ),
    sfreq: int = typer.Option(DEFAULT_SFREQ, "--sfreq", help="Sampling rate in Hz (above 100)."),
    seed: int = typer.Option(
        DEFAULT_SEED, "--seed", help="Random seed; the same seed gives the same files."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a dataset already in --out."
    ),
    scenario: str | None = typer.Option(
        None,
        "--scenario",
        help="A ground-truth study instead: linear, interaction, age or null "
        "(the label is caused by planted channel-pair couplings; the truth "
        "goes to OUT.ground_truth.json beside --out) [default: none, the "
        "sample study].",
    ),
    layout_seed: int | None = typer.Option(
        None,
        "--layout-seed",
        help="With --scenario: seed of the planted pairs and bands; studies "
        "with the same layout seed share their cause [default: --seed].",
    ),
    strength: float = typer.Option(
        DEFAULT_STRENGTH,
        "--strength",
        help="With --scenario: a present coupling's source amplitude "
        "over the background's in its band.",
    ),
    spread: float = typer.Option(
        0.0,
        "--spread",
        help="With --scenario: volume conduction of the planted couplings: each planted "
        "channel's 3 nearest electrodes also get its source, times this weight in [0, 1) "
        "(e.g. 0.6), so one coupling is seen by many channel pairs; 0: off.",
    ),
) -> None:
    """Simulate a small EEG study: healthy vs depression, 19 channels of the 10-20 system, EDF.

    Signals: 1/f background, occipital alpha that slows with age, 50 Hz line noise, some blinks.
    The depression group has stronger fronto-parietal theta coupling on average (coh and wPLI).
    Channel labels are messy on purpose (EEG Fp1-REF, T3/T4/T5/T6, FP1-LE).
    With the defaults this regenerates the bundled sample_data/ byte for byte.

    With --scenario, a study whose label has a known cause (linear: a coupling; interaction: the
    xor of two couplings in two bands; age: a coupling that means the opposite above age 50;
    null: none), to check what a model learns and whether its explanations point at the cause.
    --spread makes each planted source reach its channels' neighbours too (volume conduction),
    so that a coupling has proxies: the pairs of those neighbours.

    Example:

        eegformer simulate --out my_data --n-participants 40 --duration 60 --seed 1

        eegformer simulate --out xor_study --scenario interaction --n-participants 300 --duration 60
    """
    if scenario is None:
        if layout_seed is not None or strength != DEFAULT_STRENGTH or spread:
            raise UsageError("--layout-seed, --strength and --spread go with --scenario")
        participants = simulate_dataset(
            out,
            n_participants=n_participants,
            duration_s=duration,
            sfreq=sfreq,
            seed=seed,
            overwrite=overwrite,
        )
        console.log(
            f"wrote {len(participants)} recordings ({duration} s, {sfreq} Hz) and participants.tsv"
        )
    else:
        truth = simulate_scenario(
            out,
            scenario,
            n_participants,
            duration,
            sfreq,
            seed,
            layout_seed,
            strength,
            overwrite,
            spread,
        )
        planted = "; ".join(
            f"{f['name']}: "
            + ", ".join(f"{'-'.join(c['channels'])} in {c['token_band']}" for c in f["couplings"])
            for f in truth["factors"]
        )
        console.log(
            f"wrote {n_participants} recordings ({duration} s, {sfreq} Hz) and "
            f"participants.tsv; {scenario}: {truth['rule']} ({planted})"
            + (f", spread {spread:g} to 3 neighbours" if spread else "")
            + "; ground truth in "
            f"{ground_truth_path(out)}"
        )
    console.stdout.print(str(out))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
