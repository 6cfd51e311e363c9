"""``eegformer simulate``: write a synthetic resting-state EEG dataset (how sample_data/ is made)."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import console
from eegformer_cli.errors import UsageError
from eegformer_cli.simulation.dynamic import DEFAULT_SEGMENT_S
from eegformer_cli.simulation.power import DEFAULT_GAIN, NATURAL_POWER_SD
from eegformer_cli.simulation.scenarios import (
    DEFAULT_STRENGTH,
    SOURCE_BANDS,
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
        help="A ground-truth study instead: linear, interaction, age, null, power or dynamic "
        "(the label is caused by planted channel-pair couplings, or for power by a "
        "gain on one channel's band power, which coherence and wPLI do not see, or for "
        "dynamic by whether two bursting couplings share segments; the "
        "truth goes to OUT.ground_truth.json beside --out) [default: none, the "
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
        help="With a coupling --scenario (not power): a present coupling's source amplitude "
        "over the background's in its band.",
    ),
    spread: float = typer.Option(
        0.0,
        "--spread",
        help="With a coupling --scenario (not power): volume conduction of the planted "
        "couplings: each planted "
        "channel's 3 nearest electrodes also get its source, times this weight in [0, 1) "
        "(e.g. 0.6), so one coupling is seen by many channel pairs; 0: off.",
    ),
    power_channel: str | None = typer.Option(
        None,
        "--power-channel",
        help="With --scenario power: the channel whose band power carriers have raised "
        "(any 10-20 channel but Fp1 and Fp2) [default: drawn from --layout-seed].",
    ),
    power_band: str | None = typer.Option(
        None,
        "--power-band",
        help=f"With --scenario power: the band of the gain: {', '.join(SOURCE_BANDS)} "
        "[default: drawn from --layout-seed].",
    ),
    gain: float = typer.Option(
        DEFAULT_GAIN,
        "--gain",
        help="With --scenario power: a carrier's typical amplitude gain on the channel's own "
        "signal in the band (power: its square), on top of every channel's natural "
        f"log-normal spread (sd {NATURAL_POWER_SD:g} in log amplitude).",
    ),
    segment_length: int = typer.Option(
        DEFAULT_SEGMENT_S,
        "--segment-length",
        help="With --scenario dynamic: the burst grid's segment length in seconds (a multiple "
        "of 3, from the recording's start); preprocess with --epoch-length of the same value "
        "so that its segments are the grid's.",
    ),
    burst_segments: int | None = typer.Option(
        None,
        "--burst-segments",
        help="With --scenario dynamic: a burst's length in segments; each coupling bursts in "
        "half the bursts the recording holds [default: 1 or 2, drawn from --layout-seed].",
    ),
) -> None:
    """Simulate a small EEG study: healthy vs depression, 19 channels of the 10-20 system, EDF.

    Signals: 1/f background, occipital alpha that slows with age, 50 Hz line noise, some blinks.
    The depression group has stronger fronto-parietal theta coupling on average (coh and wPLI).
    Channel labels are messy on purpose (EEG Fp1-REF, T3/T4/T5/T6, FP1-LE).
    With the defaults this regenerates the bundled sample_data/ byte for byte.

    With --scenario, a study whose label has a known cause (linear: a coupling; interaction: the
    xor of two couplings in two bands; age: a coupling that means the opposite above age 50;
    null: none; power: a gain on one channel's own signal in one band, invisible to coherence and
    wPLI, seen by the band covariances; dynamic: two couplings in bursts in everyone, together in
    patients and in turn in controls, so that no entry's mean or spread over segments tells the
    groups apart), to check what a model learns and whether its explanations point at the cause.
    --spread makes each planted source reach its channels' neighbours too (volume conduction),
    so that a coupling has proxies: the pairs of those neighbours.

    Example:

        eegformer simulate --out my_data --n-participants 40 --duration 60 --seed 1

        eegformer simulate --out xor_study --scenario interaction --n-participants 300 --duration 60

        eegformer simulate --out power_study --scenario power --power-channel Fz --power-band theta

        eegformer simulate --out burst_study --scenario dynamic --duration 120 --segment-length 12
    """
    if scenario is None:
        _check_no_scenario_options(
            (layout_seed, power_channel, power_band, burst_segments),
            (strength, spread, gain, segment_length),
        )
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
        _simulate_scenario(
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
            power_channel,
            power_band,
            gain,
            (segment_length, burst_segments),
        )
    console.stdout.print(str(out))


def _check_no_scenario_options(unset: tuple, defaults: tuple) -> None:
    """Raise :class:`UsageError` when an option of --scenario is given without one: ``unset``
    (--layout-seed, --power-channel, --power-band, --burst-segments) must be None and
    ``defaults`` (--strength, --spread, --gain, --segment-length) their defaults."""
    expected = (DEFAULT_STRENGTH, 0.0, DEFAULT_GAIN, DEFAULT_SEGMENT_S)
    if any(v is not None for v in unset) or defaults != expected:
        raise UsageError(
            "--layout-seed, --strength, --spread, --power-channel, --power-band, --gain, "
            "--segment-length and --burst-segments go with --scenario"
        )


def _simulate_scenario(
    out: Path,
    scenario: str,
    n_participants: int,
    duration: int,
    sfreq: int,
    seed: int,
    layout_seed: int | None,
    strength: float,
    overwrite: bool,
    spread: float,
    power_channel: str | None,
    power_band: str | None,
    gain: float,
    bursts: tuple[int, int | None],
) -> None:
    """``simulate --scenario``: the study, its truth, and a line saying what was planted;
    ``bursts``: the dynamic scenario's (--segment-length, --burst-segments)."""
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
        power_channel,
        power_band,
        gain,
        *bursts,
    )
    planted = "; ".join(
        f"{f['name']}: "
        + ", ".join(f"{'-'.join(c['channels'])} in {c['token_band']}" for c in f["couplings"])
        for f in truth["factors"]
    )
    if "power" in truth:
        power = truth["power"]
        planted = f"A: {power['channel']} in {power['token_band']}, gain {gain:g}"
    if "dynamic" in truth:
        grid = truth["dynamic"]
        planted += (
            f"; bursts of {grid['burst_segments']} x {grid['segment_s']:g} s segments, "
            f"{grid['n_segments']} segments"
        )
    console.log(
        f"wrote {n_participants} recordings ({duration} s, {sfreq} Hz) and "
        f"participants.tsv; {scenario}: {truth['rule']} ({planted})"
        + (f", spread {spread:g} to 3 neighbours" if spread else "")
        + "; ground truth in "
        f"{ground_truth_path(out)}"
    )


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
