"""Ground-truth studies: simulated EEG whose label is caused by planted channel-pair couplings.

``eegformer simulate --scenario NAME`` writes a study like ``sample_data/`` (1/f background,
occipital alpha, blinks, line noise, messy EDF labels: :mod:`eegformer_cli.simulation.simulate`) in which
the fronto-parietal theta coupling is replaced by *planted factors*. A factor is one or two
band-limited sources, each shared by a named channel pair with a phase lag (so coherence and
wPLI both rise in that band), present or absent per participant. The label (``diagnosis``:
``control`` / ``patient``) follows the scenario's rule:

==============  ===========================================================================
``linear``      one factor, two couplings in one band; patient <=> factor present
``interaction`` factors A and B in two different bands on other pairs, drawn independently;
                patient <=> A xor B (neither factor alone says anything about the label)
``age``         one factor; patient <=> A xor (age > 50): the coupling means the opposite in
                the old and the young
``null``        one factor planted in half the participants, independent of the label
``power``       no coupling: factor A is a gain on one channel's own signal in one band;
                patient <=> A (:mod:`eegformer_cli.simulation.power`)
``dynamic``     factors A and B in two bands on two pairs, in bursts on a segment grid in
                everyone; patient <=> their bursts co-occur (controls: they alternate), each
                entry's recording mean and spread alike in both groups
                (:mod:`eegformer_cli.simulation.dynamic`)
==============  ===========================================================================

Pairs and bands are drawn from ``layout_seed`` (two studies with the same layout seed share
their planted cause, whatever their ``seed``); participants from ``seed``. With ``spread`` > 0
(``--spread``) the planted sources spread by volume conduction: each planted channel's
:data:`SPREAD_NEIGHBOURS` nearest electrodes receive its copy of the source times ``spread``,
so one coupling is seen by many channel pairs (about 16, each in its coherence and wPLI form)
besides its own, as a real source is; off by default. Every age (20-80
years) and sex is listed. A present factor's strength is drawn per participant around
``strength``, the ratio of the shared source's amplitude to the background's in the same band,
so a factor alone is detected from its pair's coherence with AUROC about 0.95-0.99, not 1.

The power scenario's channel and band are drawn from ``layout_seed`` too (:func:`draw_power`)
unless given (``--power-channel``, ``--power-band``); half the participants carry the gain, a
carrier's being ``gain`` ** exp(N(0, 0.35)) (the spread of a coupling's strength, on the log
gain).

The ground truth (the layout, the rule, and each participant's factors and strengths; for
``power`` the planted channel and band and each participant's gain) is written to
``<out>.ground_truth.json`` beside the dataset folder, never into ``participants.tsv``.
:func:`oracle_features` reads the planted pairs' coherence (``power``: the planted channel's
relative band power) back from a ``preprocess`` output.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from eegformer_cli.atomic import write_json
from eegformer_cli.errors import InputDataError, UsageError, check_choice
from eegformer_cli.simulation.dynamic import (
    DEFAULT_SEGMENT_S,
    BurstGrid,
    burst_envelope,
    burst_grid,
    draw_bursts,
    dynamic_record,
    segment_product,
)
from eegformer_cli.simulation.power import (
    DEFAULT_GAIN,
    PowerGain,
    power_filter,
    power_log_gains,
    power_record,
    relative_band_power,
)
from eegformer_cli.simulation.simulate import (
    CHANNELS,
    SimulatedParticipant,
    channel_positions,
    check_simulation_settings,
    draw_participants,
    narrowband,
    phase_shifted,
    write_dataset,
)

SCENARIOS = ("linear", "interaction", "age", "null", "power", "dynamic")
LABELS = ("control", "patient")
AGE_CUT = 50
DEFAULT_STRENGTH = 0.9
#: Where a planted source may sit: (token band of the default preset, source band in Hz inside
#: it with a margin). Alpha is left out: the occipital alpha rhythm would mask it.
SOURCE_BANDS = {"theta": (4.5, 7.5), "low_beta": (13.0, 17.0), "high_beta": (22.5, 28.5)}
#: Channels never planted: Fp1/Fp2 carry the blinks.
PLANTABLE = tuple(name for name in CHANNELS if name not in ("Fp1", "Fp2"))
MIN_PAIR_DISTANCE_M = 0.07  # no neighbours: volume conduction would blur them
LAG_RAD = np.pi / 3
#: With ``spread``: how many of a planted channel's nearest electrodes its source reaches.
SPREAD_NEIGHBOURS = 3


@dataclass(frozen=True)
class Coupling:
    """A source in ``band_hz`` shared by ``channels`` (the second lagging by ``lag_rad``)."""

    channels: tuple[str, str]
    token_band: str
    band_hz: tuple[float, float]
    lag_rad: float = LAG_RAD


@dataclass(frozen=True)
class Factor:
    """A planted cause: one or more couplings, present or absent together in a participant."""

    name: str
    couplings: tuple[Coupling, ...]


def draw_layout(scenario: str, layout_seed: int) -> tuple[Factor, ...]:
    """The scenario's factors with pairs and bands drawn from ``layout_seed``.

    Every planted channel is distinct, and the two channels of a pair are at least
    MIN_PAIR_DISTANCE_M apart. ``interaction`` and ``dynamic`` put their two factors in
    different bands.
    ``power`` has one factor without couplings (its cause: :func:`draw_power`).
    """
    check_choice("scenario", scenario, SCENARIOS)
    if scenario == "power":
        return (Factor("A", ()),)
    rng = np.random.default_rng([layout_seed, SCENARIOS.index(scenario), 27])
    n_couplings = {"linear": (2,), "interaction": (1, 1), "age": (1,), "null": (1,)}.get(
        scenario, (1, 1)
    )
    bands = rng.permutation(list(SOURCE_BANDS))
    pairs = _distinct_pairs(rng, sum(n_couplings))
    factors, used = [], 0
    for index, count in enumerate(n_couplings):
        band = str(bands[index])
        couplings = tuple(Coupling(pairs[used + k], band, SOURCE_BANDS[band]) for k in range(count))
        factors.append(Factor("AB"[index], couplings))
        used += count
    return tuple(factors)


def draw_power(layout_seed: int, channel: str | None = None, band: str | None = None) -> PowerGain:
    """The power scenario's planted channel (one of :data:`PLANTABLE`) and band (one of
    :data:`SOURCE_BANDS`): each the one given, else drawn from ``layout_seed``."""
    rng = np.random.default_rng([layout_seed, SCENARIOS.index("power"), 27])
    drawn_channel, drawn_band = str(rng.choice(PLANTABLE)), str(rng.choice(list(SOURCE_BANDS)))
    channel = drawn_channel if channel is None else channel
    band = drawn_band if band is None else band
    check_choice("power channel", channel, PLANTABLE)
    check_choice("power band", band, tuple(SOURCE_BANDS))
    return PowerGain(channel, band, SOURCE_BANDS[band])


def _distinct_pairs(rng: np.random.Generator, n_pairs: int) -> list[tuple[str, str]]:
    positions = dict(zip(CHANNELS, channel_positions()))
    free, pairs = list(PLANTABLE), list[tuple[str, str]]()
    while len(pairs) < n_pairs:
        first, second = (str(name) for name in rng.choice(free, 2, replace=False))
        if np.linalg.norm(positions[first] - positions[second]) >= MIN_PAIR_DISTANCE_M:
            a, b = sorted((first, second), key=CHANNELS.index)
            pairs.append((a, b))
            free = [name for name in free if name not in (first, second)]
    return pairs


def label_rule(scenario: str) -> str:
    """The scenario's rule in words (written to the ground-truth file)."""
    return {
        "linear": "patient <=> A",
        "interaction": "patient <=> A xor B",
        "age": f"patient <=> A xor (age > {AGE_CUT})",
        "null": "label independent of A",
        "power": "patient <=> A",
        "dynamic": "patient <=> A and B burst in the same segments (control: in turn)",
    }[scenario]


def draw_factors(
    scenario: str, participants: list[SimulatedParticipant], seed: int, strength: float
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Labels (n,) 0/1, each factor's presence (n,) 0/1 and strength (n,) (0 when absent).

    Factors are balanced (half the participants each, shuffled); a present factor's strength is
    ``strength`` times a log-normal spread (sd 0.35), so some carriers are hard to detect.
    ``dynamic``: both factors present in everyone (in bursts), the labels balanced apart.
    """
    n = len(participants)
    rng = np.random.default_rng([seed, n, 27])
    names = ("A", "B") if scenario in ("interaction", "dynamic") else ("A",)
    present = {name: rng.permutation(np.arange(n) % 2) for name in names}
    if scenario == "dynamic":
        present = {name: np.ones(n, dtype=int) for name in names}
    strengths = {name: present[name] * strength * np.exp(rng.normal(0, 0.35, n)) for name in names}
    if scenario in ("linear", "power"):
        labels = present["A"]
    elif scenario == "interaction":
        labels = present["A"] ^ present["B"]
    elif scenario == "age":
        labels = present["A"] ^ (np.array([p.age for p in participants]) > AGE_CUT)
    else:
        labels = rng.permutation(np.arange(n) % 2)
    return labels.astype(int), present, strengths


def band_fraction(exponent: float, band_hz: tuple[float, float], sfreq: float) -> float:
    """Share of the background's variance in ``band_hz`` (power ~ 1/f**exponent above 0.5 Hz)."""
    freqs = np.linspace(0, sfreq / 2, 4097)[1:]
    power = np.maximum(freqs, 0.5) ** (-exponent)
    inside = (freqs >= band_hz[0]) & (freqs <= band_hz[1])
    return float(power[inside].sum() / power.sum())


def spread_neighbours(coupling: Coupling) -> dict[str, tuple[str, ...]]:
    """Per channel of ``coupling``, the :data:`SPREAD_NEIGHBOURS` electrodes nearest to it
    (colin27 10-20 positions) other than the coupling's own two: where ``spread`` carries its
    copy of the source."""
    positions = dict(zip(CHANNELS, channel_positions()))
    out = {}
    for name in coupling.channels:
        others = [c for c in CHANNELS if c not in coupling.channels]
        distance = [np.linalg.norm(positions[c] - positions[name]) for c in others]
        out[name] = tuple(others[k] for k in np.argsort(distance)[:SPREAD_NEIGHBOURS])
    return out


def planted_signals(
    factors: tuple[Factor, ...],
    strengths: dict[str, float],
    participant: SimulatedParticipant,
    spread: float = 0.0,
    envelopes: Mapping[str, Callable[[int, float], np.ndarray]] | None = None,
):
    """The ``planted`` function of :func:`simulate.simulate_participant` for one participant:
    every coupling of every factor, each source with std ``strength`` x the background's std in
    its band, (n_channels, n_times) volts; with ``spread`` > 0 each planted channel's
    :func:`spread_neighbours` also get its copy times ``spread``; ``envelopes``: factor name ->
    ``envelope(n_times, sfreq)`` multiplying its sources (the dynamic scenario's bursts; None:
    always on). Sources are drawn even for absent factors (strength 0), so a participant's
    other signals do not depend on which factors they carry."""
    neighbours = {
        c: spread_neighbours(c) for factor in factors for c in factor.couplings if spread > 0
    }

    def planted(rng: np.random.Generator, n_times: int, sfreq: float) -> np.ndarray:
        signals = np.zeros((len(CHANNELS), n_times))
        for factor in factors:
            for coupling in factor.couplings:
                source = narrowband(rng, n_times, sfreq, *coupling.band_hz)
                in_band = participant.background_amplitude_v * np.sqrt(
                    band_fraction(participant.background_exponent, coupling.band_hz, sfreq)
                )
                amplitude = strengths[factor.name] * in_band
                if envelopes is not None:
                    amplitude = amplitude * envelopes[factor.name](n_times, sfreq)
                copies = (source, phase_shifted(source, coupling.lag_rad))
                for name, copy in zip(coupling.channels, copies):
                    signals[CHANNELS.index(name)] += amplitude * copy
                    for near in neighbours.get(coupling, {}).get(name, ()):
                        signals[CHANNELS.index(near)] += spread * amplitude * copy
        return signals

    return planted


def ground_truth_path(out_dir: str | Path) -> Path:
    """``<out>.ground_truth.json`` beside the dataset folder ``out``."""
    out_dir = Path(out_dir)
    return out_dir.parent / f"{out_dir.name}.ground_truth.json"


def simulate_scenario(
    out_dir: str | Path,
    scenario: str,
    n_participants: int,
    duration_s: float,
    sfreq: float,
    seed: int,
    layout_seed: int | None = None,
    strength: float = DEFAULT_STRENGTH,
    overwrite: bool = False,
    spread: float = 0.0,
    power_channel: str | None = None,
    power_band: str | None = None,
    gain: float = DEFAULT_GAIN,
    segment_s: float = DEFAULT_SEGMENT_S,
    burst_segments: int | None = None,
) -> dict:
    """Write a ground-truth study to ``out_dir`` and its truth to :func:`ground_truth_path`;
    returns the truth (what the JSON file holds). ``spread`` in [0, 1): the weight of a planted
    source on its channels' nearest electrodes (module docs; 0: off, earlier versions' files
    byte for byte; on, the truth's ``spread`` gives it and the electrodes each channel reaches).
    ``power_channel``, ``power_band``, ``gain``: the ``power`` scenario's planted channel and
    band (None: drawn from ``layout_seed``, :func:`draw_power`) and a carrier's typical
    amplitude gain in that band; the truth's ``power`` records them, and each participant's
    ``gains`` their gain (1 for a non-carrier). ``segment_s``, ``burst_segments``: the
    ``dynamic`` scenario's burst grid (:func:`dynamic.burst_grid`; None: the burst length drawn
    from ``layout_seed``); the truth's ``dynamic`` records it, and each participant's
    ``bursts`` each factor's 0/1 state per segment.
    """
    check_choice("scenario", scenario, SCENARIOS)
    check_simulation_settings(n_participants, duration_s, sfreq)
    _check_source_settings(strength, spread)
    _check_power_settings(scenario, power_channel, power_band, gain, strength, spread)
    layout_seed = seed if layout_seed is None else layout_seed
    grid = _dynamic_grid(scenario, layout_seed, duration_s, segment_s, burst_segments)
    factors = draw_layout(scenario, layout_seed)
    drawn = draw_participants(n_participants, seed)
    power = draw_power(layout_seed, power_channel, power_band) if scenario == "power" else None
    size = float(np.log(gain)) if power else strength  # power: the log gain is drawn
    labels, present, strengths = draw_factors(scenario, drawn, seed, size)
    participants = [
        dataclasses.replace(
            p,
            diagnosis=LABELS[labels[p.index]],
            age_listed=True,
            sex_listed=True,
            coupling_strength=0.0,
        )
        for p in drawn
    ]
    bursts = {
        p.participant_id: draw_bursts(grid, bool(labels[p.index]), seed, p.index)
        for p in participants
        if grid is not None
    }
    planted_of = _planted_of(factors, strengths, spread, grid, bursts)

    def filtered_of(participant: SimulatedParticipant):
        assert power is not None  # given to write_dataset for the power scenario only
        log_gain = float(strengths["A"][participant.index])
        log_gains = power_log_gains(power, log_gain, participant, SOURCE_BANDS)
        return power_filter(log_gains, SOURCE_BANDS)

    filters = filtered_of if power else None
    write_dataset(out_dir, participants, duration_s, sfreq, overwrite, planted_of, filters)
    effect = {"gain": gain} if power else {"strength": strength}
    truth = _truth(scenario, seed, layout_seed, effect, factors, spread, power)
    truth.update(dynamic_record(grid))
    sizes = {"gains": {n: np.exp(s) for n, s in strengths.items()}} if power else None
    truth["participants"] = _participant_records(
        participants, present, sizes or {"strengths": strengths}
    )
    for record in truth["participants"] if grid else ():
        record["bursts"] = {k: v.tolist() for k, v in bursts[record["participant_id"]].items()}
    write_json(ground_truth_path(out_dir), truth)
    return truth


def _dynamic_grid(
    scenario: str,
    layout_seed: int,
    duration_s: float,
    segment_s: float,
    burst_segments: int | None,
) -> BurstGrid | None:
    """The dynamic scenario's :func:`dynamic.burst_grid`, None for the others
    (:class:`UsageError` when they are given a grid's settings)."""
    if scenario == "dynamic":
        return burst_grid(layout_seed, duration_s, segment_s, burst_segments)
    if segment_s != DEFAULT_SEGMENT_S or burst_segments is not None:
        raise UsageError("--segment-length and --burst-segments go with --scenario dynamic")
    return None


def _planted_of(
    factors: tuple[Factor, ...],
    strengths: dict[str, np.ndarray],
    spread: float,
    grid: BurstGrid | None,
    bursts: dict[str, dict[str, np.ndarray]],
):
    """``planted_of(participant)`` for :func:`simulate.write_dataset`: their
    :func:`planted_signals`, each factor's sources on in its ``bursts`` (participant id ->
    factor -> 0/1 per segment of ``grid``) when ``grid`` is given, always on otherwise."""

    def planted_of(participant: SimulatedParticipant):
        own = {name: float(s[participant.index]) for name, s in strengths.items()}
        if grid is None:
            return planted_signals(factors, own, participant, spread)
        on = bursts[participant.participant_id]
        envelopes = {name: burst_envelope(on[name], grid.segment_s) for name in on}
        return planted_signals(factors, own, participant, spread, envelopes)

    return planted_of


def _participant_records(
    participants: list[SimulatedParticipant],
    present: dict[str, np.ndarray],
    sizes: dict[str, dict[str, np.ndarray]],
) -> list[dict]:
    """The ground truth's ``participants``: each one's table row, factors (0/1) and effect
    sizes (``sizes``: ``strengths`` or, for power, ``gains``, each factor name -> (n,))."""
    return [
        {
            "participant_id": p.participant_id,
            "diagnosis": p.diagnosis,
            "age": p.age,
            "sex": p.sex,
            "factors": {name: int(present[name][p.index]) for name in present},
            **{
                key: {name: float(v[p.index]) for name, v in values.items()}
                for key, values in sizes.items()
            },
        }
        for p in participants
    ]


def _truth(
    scenario: str,
    seed: int,
    layout_seed: int,
    effect: dict,
    factors: tuple[Factor, ...],
    spread: float,
    power: PowerGain | None,
) -> dict:
    """The ground truth of :func:`simulate_scenario` but its participants, in the file's key
    order; ``effect``: the planted effect's size (``strength``, or ``gain`` for power)."""
    return {
        "scenario": scenario,
        "rule": label_rule(scenario),
        "label_column": "diagnosis",
        "labels": list(LABELS),
        "seed": seed,
        "layout_seed": layout_seed,
        **effect,
        "age_cut": AGE_CUT,
        "factors": [
            {"name": f.name, "couplings": [dataclasses.asdict(c) for c in f.couplings]}
            for f in factors
        ],
        **_spread_record(factors, spread),
        **power_record(power, SOURCE_BANDS),
    }


def _check_source_settings(strength: float, spread: float) -> None:
    """Raise :class:`UsageError` naming the option when ``strength`` or ``spread`` cannot be
    simulated."""
    if not strength > 0:
        raise UsageError(f"--strength must be > 0, got {strength}")
    if not 0 <= spread < 1:
        raise UsageError(
            f"--spread must be in [0, 1) (a neighbour gets less than the planted channel), "
            f"got {spread}"
        )


def _check_power_settings(
    scenario: str,
    channel: str | None,
    band: str | None,
    gain: float,
    strength: float,
    spread: float,
) -> None:
    """Raise :class:`UsageError` when the power scenario's settings cannot be simulated, are
    given to another scenario, or a coupling's settings to it."""
    if scenario != "power":
        if channel is not None or band is not None or gain != DEFAULT_GAIN:
            raise UsageError("--power-channel, --power-band and --gain go with --scenario power")
        return
    if strength != DEFAULT_STRENGTH or spread:
        raise UsageError("--strength and --spread go with a coupling scenario, not power")
    if not (gain > 0 and gain != 1):
        raise UsageError(f"--gain must be > 0 and not 1 (an amplitude gain), got {gain}")
    if channel is not None:
        check_choice("--power-channel", channel, PLANTABLE)
    if band is not None:
        check_choice("--power-band", band, tuple(SOURCE_BANDS))


def _spread_record(factors: tuple[Factor, ...], spread: float) -> dict:
    """The ground truth's ``spread`` (its weight and, per planted channel, the electrodes its
    source reaches), or nothing when off (a ground-truth file of earlier versions)."""
    if spread == 0:
        return {}
    reaches = {
        name: list(near)
        for factor in factors
        for coupling in factor.couplings
        for name, near in spread_neighbours(coupling).items()
    }
    return {"spread": {"weight": spread, "reaches": reaches}}


def read_ground_truth(path: str | Path) -> dict:
    """The ground-truth JSON written by :func:`simulate_scenario`."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputDataError(f"cannot read the ground truth: {error}", path=path) from None


def planted_couplings(truth: dict) -> list[tuple[str, Coupling]]:
    """(factor name, coupling) of every planted coupling in a ground-truth dict."""
    return [
        (
            factor["name"],
            Coupling(tuple(c["channels"]), c["token_band"], tuple(c["band_hz"]), c["lag_rad"]),
        )
        for factor in truth["factors"]
        for c in factor["couplings"]
    ]


class _Connectome(Protocol):
    """What :func:`oracle_features` reads of a :class:`~eegformer_cli.preprocess.Connectome`."""

    @property
    def channels(self) -> Sequence[str]: ...
    @property
    def bands(self) -> Sequence[str]: ...
    @property
    def coh(self) -> np.ndarray: ...
    @property
    def covariance(self) -> np.ndarray | None: ...
    @property
    def covariance_bands(self) -> Sequence[str]: ...


def oracle_features(
    truth: dict, connectomes: Mapping[str, _Connectome], ages: dict[str, float]
) -> dict:
    """The oracle's inputs per recording: each planted coupling's coherence (mean over segments,
    in its token band), each factor the mean of its couplings, plus age (years) for ``age``;
    for ``power``, :func:`relative_band_power` of the planted channel and band.

    for ``dynamic``, :func:`dynamic.segment_product` of the two planted couplings (the mean
    per-segment product of their coherence, each standardised over the recording's segments).

    ``connectomes``: recording id -> :class:`~eegformer_cli.preprocess.Connectome`;
    ``ages``: recording id -> age. Returns recording id -> float array (n_features,).
    """
    if truth["scenario"] == "dynamic":
        couplings = [c for _, c in planted_couplings(truth)]
        return {
            recording_id: np.array([segment_product(connectome, couplings)])
            for recording_id, connectome in connectomes.items()
        }
    if truth["scenario"] == "power":
        planted = truth["power"]
        return {
            recording_id: np.array(
                [relative_band_power(connectome, planted["channel"], planted["token_band"])]
            )
            for recording_id, connectome in connectomes.items()
        }
    factors: dict[str, list[Coupling]] = {}
    for name, coupling in planted_couplings(truth):
        factors.setdefault(name, []).append(coupling)
    out = {}
    for recording_id, connectome in connectomes.items():
        channels, bands = list(connectome.channels), list(connectome.bands)
        values: list[float] = []
        for couplings in factors.values():
            values.append(
                float(
                    np.mean(
                        [
                            connectome.coh[
                                :,
                                bands.index(c.token_band),
                                channels.index(c.channels[0]),
                                channels.index(c.channels[1]),
                            ].mean()
                            for c in couplings
                        ]
                    )
                )
            )
        if truth["scenario"] == "age":
            values.append(float(ages[recording_id]))
        out[recording_id] = np.array(values, dtype=float)
    return out


def oracle_model(seed: int = 0):
    """The oracle: standardised planted features and their pairwise products (the interaction
    given: A x B, or A x age) -> logistic regression (L2, C = 1: two or three features need
    no tuning)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    return make_pipeline(
        StandardScaler(),
        PolynomialFeatures(2, interaction_only=True, include_bias=False),
        StandardScaler(),
        LogisticRegression(random_state=seed),
    )
