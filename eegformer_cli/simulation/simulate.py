"""A synthetic resting-state EEG dataset that looks like a small clinical study.

The bundled ``sample_data/`` folder is made by :func:`simulate_dataset` (``eegformer simulate``).
Every recording is the sum of

* :func:`background`: 1/f ("pink") noise, one source per electrode, spatially smeared so that
  neighbouring electrodes are correlated (volume conduction, zero phase lag);
* :func:`alpha`: a waxing-and-waning occipital alpha rhythm whose peak frequency slows with age
  (about 10.5 Hz at 20 years to 8.5 Hz at 80 years, plus individual scatter);
* :func:`coupling`: a theta (4.5-7.5 Hz) source shared by frontal (F3 Fz F4) and parietal
  (P3 Pz P4) electrodes, the parietal copy lagging by 60 degrees, so coherence and wPLI both rise.
  Its strength is drawn per participant: higher on average in the ``depression`` group than in
  the ``healthy`` group, with overlapping distributions (learnable, not trivial);
* :func:`artefacts`: 50 Hz line noise, blink-like frontal deflections in some participants and a
  DC offset per electrode.

Signals are in volts (MNE's unit) with shape (n_channels, n_times), float64, channels in
:data:`CHANNELS` order. The EDF files get realistically messy channel labels (``EEG Fp1-REF``,
old names T3/T4/T5/T6, ...) so the real pipeline has to normalise them. Everything is derived
from the seed: regenerating with the same arguments gives byte-identical files. The ground truth
(coupling strength, alpha peak) lives only in the returned :class:`SimulatedParticipant` records,
never in the dataset folder.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import mne
import numpy as np

from eegformer_cli import console
from eegformer_cli.atomic import atomic_path, ensure_dir, write_text
from eegformer_cli.choices import STANDARD_1020
from eegformer_cli.errors import OutputError, UsageError

#: The simulated channels: the 10-20 set in the order every run uses.
CHANNELS = STANDARD_1020
FRONTAL = ("F3", "Fz", "F4")
PARIETAL = ("P3", "Pz", "P4")
DIAGNOSES = ("healthy", "depression")
COUPLING_BAND_HZ = (4.5, 7.5)
COUPLING_LAG_RAD = np.pi / 3
LINE_FREQ_HZ = 50.0
# A fixed amplifier range (as Nihon Kohden's +-3200 uV) rather than one fitted to each file:
# real EDF files look like this, and 16-bit steps of 0.1 uV are far below the EEG's amplitude.
PHYSICAL_RANGE_UV = (-3200.0, 3200.0)
MEAS_DATE = dt.datetime(2021, 3, 1, 9, 0, 0, tzinfo=dt.timezone.utc)

DEFAULT_N_PARTICIPANTS = 24
DEFAULT_DURATION_S = 40
DEFAULT_SFREQ = 128
DEFAULT_SEED = 2025

_OLD_NAMES = {"T7": "T3", "T8": "T4", "P7": "T5", "P8": "T6"}
# How each EDF spells its channel labels; participant i uses style i % 4.
CHANNEL_STYLES = ("plain", "ref", "old", "old_le")


@dataclass(frozen=True)
class SimulatedParticipant:
    """One participant's demographics and the ground truth used to simulate their EEG.

    ``age`` and ``sex`` are the true values; ``age_listed`` / ``sex_listed`` say whether
    ``participants.tsv`` shows them (otherwise it says ``n/a``).
    """

    index: int
    participant_id: str
    diagnosis: str
    age: int  # years
    sex: str  # "M" or "F"
    age_listed: bool
    sex_listed: bool
    alpha_peak_hz: float
    alpha_amplitude_v: float  # peak-channel standard deviation, volts
    background_amplitude_v: float
    background_exponent: float  # power ~ 1 / f**exponent
    coupling_strength: float  # shared theta source std / background theta scale (0 = none)
    blink_rate_per_min: float
    line_amplitude_v: float
    channel_style: str
    seed: int

    @property
    def file_name(self) -> str:
        return f"{self.participant_id}_task-rest_eeg.edf"


def channel_positions() -> np.ndarray:
    """Electrode positions of :data:`CHANNELS` on the colin27 10-20 montage, (19, 3) metres."""
    positions = mne.channels.make_standard_montage("colin27_1020").get_positions()["ch_pos"]
    return np.array([positions[name] for name in CHANNELS])


def edf_channel_labels(style: str) -> list[str]:
    """The EDF signal labels of :data:`CHANNELS` written in ``style`` (see CHANNEL_STYLES)."""
    if style == "plain":
        return list(CHANNELS)
    if style == "ref":
        return [f"EEG {name}-REF" for name in CHANNELS]
    old = [_OLD_NAMES.get(name, name) for name in CHANNELS]
    if style == "old":
        return old
    if style == "old_le":
        return [f"{name.upper()}-LE" for name in old]
    raise ValueError(f"unknown channel style {style!r}")


def draw_participants(n_participants: int, seed: int) -> list[SimulatedParticipant]:
    """Demographics and simulation parameters of ``n_participants`` (ids sub-01, sub-02, ...).

    Groups are balanced and shuffled; ages are uniform in 20-80 years in both groups (so age
    does not give the diagnosis away); about one in ten ages and one in twenty sexes are
    unlisted (at least one of each).
    """
    table_rng = np.random.default_rng([seed, n_participants])
    diagnoses = table_rng.permutation(np.arange(n_participants) % 2)
    n_missing_age = int(np.ceil(n_participants / 10))
    n_missing_sex = int(np.ceil(n_participants / 20))
    missing_age = set(table_rng.choice(n_participants, n_missing_age, replace=False).tolist())
    missing_sex = set(table_rng.choice(n_participants, n_missing_sex, replace=False).tolist())
    width = max(2, len(str(n_participants)))
    participants = []
    for index in range(n_participants):
        rng = np.random.default_rng([seed, index])
        age = int(rng.integers(20, 81))
        patient = bool(diagnoses[index])
        strength_mean, strength_sd = (0.8, 0.3) if patient else (0.2, 0.2)
        participants.append(
            SimulatedParticipant(
                index=index,
                participant_id=f"sub-{index + 1:0{width}d}",
                diagnosis=DIAGNOSES[int(patient)],
                age=age,
                sex=str(rng.choice(["M", "F"])),
                age_listed=index not in missing_age,
                sex_listed=index not in missing_sex,
                alpha_peak_hz=float(10.5 - 2.0 * (age - 20) / 60 + rng.normal(0, 0.3)),
                alpha_amplitude_v=float(rng.uniform(8e-6, 20e-6)),
                background_amplitude_v=float(rng.uniform(8e-6, 14e-6)),
                background_exponent=float(rng.uniform(1.0, 1.6)),
                coupling_strength=float(max(0.0, rng.normal(strength_mean, strength_sd))),
                blink_rate_per_min=float(0.0 if rng.random() < 0.35 else rng.uniform(3, 12)),
                line_amplitude_v=float(rng.uniform(1e-6, 8e-6)),
                channel_style=CHANNEL_STYLES[index % len(CHANNEL_STYLES)],
                seed=seed,
            )
        )
    return participants


def _unit_std(signals: np.ndarray) -> np.ndarray:
    return signals / signals.std(axis=-1, keepdims=True)


def _shaped_noise(
    rng: np.random.Generator, n_signals: int, n_times: int, sfreq: float, gain_at
) -> np.ndarray:
    """White noise filtered in the frequency domain by ``gain_at(freqs_hz)``; unit std, (n, t)."""
    spectrum = np.fft.rfft(rng.standard_normal((n_signals, n_times)), axis=-1)
    spectrum *= gain_at(np.fft.rfftfreq(n_times, 1 / sfreq))
    return _unit_std(np.fft.irfft(spectrum, n=n_times, axis=-1))


def narrowband(
    rng: np.random.Generator, n_times: int, sfreq: float, low_hz: float, high_hz: float
) -> np.ndarray:
    """A waxing-and-waning rhythm: noise with a Gaussian spectrum over [low, high] Hz, (t,)."""
    centre, width = (low_hz + high_hz) / 2, (high_hz - low_hz) / 4
    return _shaped_noise(
        rng, 1, n_times, sfreq, lambda f: np.exp(-0.5 * ((f - centre) / width) ** 2)
    )[0]


def background(
    rng: np.random.Generator,
    positions: np.ndarray,
    n_times: int,
    sfreq: float,
    amplitude_v: float,
    exponent: float,
) -> np.ndarray:
    """1/f background, (n_channels, n_times) volts, each channel with std ``amplitude_v``.

    Independent pink sources (power ~ 1/f**exponent above 0.5 Hz) mixed by a Gaussian kernel of
    electrode distance (4 cm), so neighbours share part of their signal at zero lag.
    """
    sources = _shaped_noise(
        rng,
        len(positions),
        n_times,
        sfreq,
        lambda f: np.where(f > 0, np.maximum(f, 0.5) ** (-exponent / 2), 0.0),
    )
    distance = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    mixing = np.exp(-((distance / 0.04) ** 2))
    mixing /= np.linalg.norm(mixing, axis=1, keepdims=True)
    return amplitude_v * _unit_std(mixing @ sources)


def alpha(
    rng: np.random.Generator,
    positions: np.ndarray,
    n_times: int,
    sfreq: float,
    peak_hz: float,
    amplitude_v: float,
) -> np.ndarray:
    """Occipital alpha rhythm around ``peak_hz`` (+-0.5 Hz), (n_channels, n_times) volts.

    One source, weighted by distance from the midpoint of O1 and O2 (1 there, ~0.1 at Cz).
    """
    rhythm = narrowband(rng, n_times, sfreq, peak_hz - 0.5, peak_hz + 0.5)
    occiput = positions[[CHANNELS.index("O1"), CHANNELS.index("O2")]].mean(axis=0)
    weights = np.exp(-np.linalg.norm(positions - occiput, axis=1) / 0.05)
    return amplitude_v * (weights / weights.max())[:, None] * rhythm


def coupling(
    rng: np.random.Generator, n_times: int, sfreq: float, strength: float, amplitude_v: float
) -> np.ndarray:
    """A theta source shared by FRONTAL and PARIETAL electrodes, (n_channels, n_times) volts.

    The frontal copy is the source itself, the parietal copy is phase-shifted by
    COUPLING_LAG_RAD at every frequency (Hilbert rotation), so the coupling is not volume
    conduction: it raises both coherence and wPLI. Std per channel: ``strength * amplitude_v``
    times a per-channel gain in [0.8, 1.2].
    """
    source = narrowband(rng, n_times, sfreq, *COUPLING_BAND_HZ)
    lagged = phase_shifted(source, COUPLING_LAG_RAD)
    signals = np.zeros((len(CHANNELS), n_times))
    for names, copy in ((FRONTAL, source), (PARIETAL, lagged)):
        for name in names:
            signals[CHANNELS.index(name)] = rng.uniform(0.8, 1.2) * copy
    return strength * amplitude_v * signals


def phase_shifted(signal: np.ndarray, lag_rad: float) -> np.ndarray:
    """``signal`` (t,) with every frequency's phase shifted by ``lag_rad`` (Hilbert rotation)."""
    from scipy.signal import hilbert  # imported here: scipy.signal costs ~1 s at CLI start-up

    return np.cos(lag_rad) * signal + np.sin(lag_rad) * np.imag(hilbert(signal))


def _blink(times_s: np.ndarray, onset_s: float, rise_s: float) -> np.ndarray:
    """A blink-like pulse (t/rise)^2 exp(2 - 2t/rise): 0 at onset, 1 at onset + rise, (t,)."""
    t = np.clip(times_s - onset_s, 0, None) / rise_s
    return t**2 * np.exp(2 - 2 * t)


def artefacts(
    rng: np.random.Generator,
    positions: np.ndarray,
    n_times: int,
    sfreq: float,
    blink_rate_per_min: float,
    line_amplitude_v: float,
) -> np.ndarray:
    """Blinks, 50 Hz line noise and DC offsets, (n_channels, n_times) volts.

    Blinks: Poisson times at ``blink_rate_per_min``, 60-150 uV positive pulses peaking 0.1-0.15 s
    after onset, largest on Fp1/Fp2 and decaying with distance from them (~0.4 at F3/F4).
    Line noise: one 50 Hz phase for all channels, per-channel gain 0.5-1.5. DC: +-250 uV.
    """
    times = np.arange(n_times) / sfreq
    duration_s = n_times / sfreq
    eyes = positions[[CHANNELS.index("Fp1"), CHANNELS.index("Fp2")]].mean(axis=0)
    eye_weights = np.exp(-np.linalg.norm(positions - eyes, axis=1) / 0.05)
    eye_weights /= eye_weights[CHANNELS.index("Fp1")]
    n_blinks = rng.poisson(blink_rate_per_min * duration_s / 60)
    blinks = np.zeros(n_times)
    for onset in np.sort(rng.uniform(0, duration_s - 1, n_blinks)):
        blinks += rng.uniform(60e-6, 150e-6) * _blink(times, onset, rng.uniform(0.1, 0.15))
    line = np.sin(2 * np.pi * LINE_FREQ_HZ * times + rng.uniform(0, 2 * np.pi))
    line_gains = line_amplitude_v * rng.uniform(0.5, 1.5, len(CHANNELS))
    offsets = rng.uniform(-250e-6, 250e-6, len(CHANNELS))
    return eye_weights[:, None] * blinks + line_gains[:, None] * line + offsets[:, None]


def simulate_participant(
    participant: SimulatedParticipant,
    duration_s: float = DEFAULT_DURATION_S,
    sfreq: float = DEFAULT_SFREQ,
    planted=None,
    filtered=None,
) -> mne.io.RawArray:
    """The participant's recording: 19 EEG channels in volts, labelled as in their EDF file.

    ``planted``: None for this study's fronto-parietal theta :func:`coupling`, or a function
    ``(rng, n_times, sfreq) -> (n_channels, n_times)`` volts put in its place (the ground-truth
    scenarios, :mod:`eegformer_cli.simulation.scenarios`). ``filtered``: None, or a function
    ``(signals, sfreq) -> signals`` ((n_channels, n_times) volts) applied to the whole recording,
    artefacts included, so that a channel's gain scales all of its signal (the power scenario's
    per-channel band gains).
    The random numbers come from one Generator seeded with (seed, index, 1), so a participant's
    signal does not depend on how many others are simulated. ``meas_date`` is fixed
    (MEAS_DATE plus ``index`` days) so that exported files are byte-identical between runs.
    """
    rng = np.random.default_rng([participant.seed, participant.index, 1])
    positions = channel_positions()
    n_times = int(round(duration_s * sfreq))
    data = (
        background(
            rng,
            positions,
            n_times,
            sfreq,
            participant.background_amplitude_v,
            participant.background_exponent,
        )
        + alpha(
            rng, positions, n_times, sfreq, participant.alpha_peak_hz, participant.alpha_amplitude_v
        )
        + (
            coupling(
                rng,
                n_times,
                sfreq,
                participant.coupling_strength,
                participant.background_amplitude_v,
            )
            if planted is None
            else planted(rng, n_times, sfreq)
        )
        + artefacts(
            rng,
            positions,
            n_times,
            sfreq,
            participant.blink_rate_per_min,
            participant.line_amplitude_v,
        )
    )
    if filtered is not None:
        data = filtered(data, sfreq)
    info = mne.create_info(edf_channel_labels(participant.channel_style), sfreq, "eeg")
    raw = mne.io.RawArray(data, info, verbose="error")
    raw.set_meas_date(MEAS_DATE + dt.timedelta(days=participant.index))
    with raw.info._unlock():
        raw.info["subject_info"] = {"his_id": participant.participant_id}
    return raw


def write_edf(raw: mne.io.BaseRaw, path: str | Path) -> None:
    """Export ``raw`` to EDF (16 bit, PHYSICAL_RANGE_UV) atomically: temp name, then rename."""
    with atomic_path(path, suffix=".edf") as tmp:
        mne.export.export_raw(
            tmp,
            raw,
            fmt="edf",
            physical_range=PHYSICAL_RANGE_UV,
            add_ch_type=False,
            overwrite=True,
            verbose="error",
        )


def participants_table(participants: list[SimulatedParticipant]) -> str:
    """``participants.tsv`` text: participant_id, diagnosis, age, sex; ``n/a`` when unlisted."""
    lines = ["participant_id\tdiagnosis\tage\tsex"]
    for p in participants:
        age = str(p.age) if p.age_listed else "n/a"
        sex = p.sex if p.sex_listed else "n/a"
        lines.append(f"{p.participant_id}\t{p.diagnosis}\t{age}\t{sex}")
    return "\n".join(lines) + "\n"


def check_simulation_settings(n_participants: int, duration_s: float, sfreq: float) -> None:
    """Raise :class:`UsageError` naming the parameter when a setting cannot make a dataset."""
    if n_participants < 2:
        raise UsageError(
            f"--n-participants must be at least 2 (one per group), got {n_participants}"
        )
    if duration_s < 10 or not float(duration_s).is_integer():
        raise UsageError(f"--duration must be a whole number of seconds >= 10, got {duration_s}")
    if sfreq <= 2 * LINE_FREQ_HZ or not float(sfreq).is_integer():
        raise UsageError(
            f"--sfreq must be a whole number of Hz above {2 * LINE_FREQ_HZ:g} "
            f"(the 50 Hz line noise must be below Nyquist), got {sfreq}"
        )


def simulate_dataset(
    out_dir: str | Path,
    n_participants: int = DEFAULT_N_PARTICIPANTS,
    duration_s: float = DEFAULT_DURATION_S,
    sfreq: float = DEFAULT_SFREQ,
    seed: int = DEFAULT_SEED,
    overwrite: bool = False,
) -> list[SimulatedParticipant]:
    """Write ``out_dir/participants.tsv`` and ``out_dir/eeg/<id>_task-rest_eeg.edf``.

    Refuses (:class:`OutputError`) when ``out_dir`` already holds a dataset unless ``overwrite``;
    then stale EDF files of a larger earlier dataset are removed and other files (a README) kept.
    Returns the participants with their ground truth.
    """
    check_simulation_settings(n_participants, duration_s, sfreq)
    participants = draw_participants(n_participants, seed)
    write_dataset(out_dir, participants, duration_s, sfreq, overwrite)
    return participants


def write_dataset(
    out_dir: str | Path,
    participants: list[SimulatedParticipant],
    duration_s: float,
    sfreq: float,
    overwrite: bool,
    planted_of=None,
    filtered_of=None,
) -> None:
    """Write ``participants``' EDF files and ``participants.tsv`` into ``out_dir``.

    ``planted_of(participant)``: the ``planted`` argument of :func:`simulate_participant` for
    that participant (None: this study's theta coupling); ``filtered_of(participant)`` its
    ``filtered`` argument (None: none). Refuses (:class:`OutputError`) a
    folder that already holds a dataset unless ``overwrite``; then stale EDF files of a larger
    earlier dataset are removed and other files (a README) kept.
    """
    out_dir = Path(out_dir)
    eeg_dir = out_dir / "eeg"
    if not overwrite and ((out_dir / "participants.tsv").exists() or eeg_dir.exists()):
        raise OutputError(
            "folder already holds a dataset",
            path=out_dir,
            hint="pass --overwrite to replace it, or choose another --out",
        )
    ensure_dir(eeg_dir)
    keep = {p.file_name for p in participants}
    for stale in eeg_dir.glob("*_task-rest_eeg.edf"):
        if stale.name not in keep:
            stale.unlink()
    with console.progress_bar() as bar:
        task = bar.add_task("simulate", total=len(participants), status="")
        for participant in participants:
            planted = None if planted_of is None else planted_of(participant)
            filtered = None if filtered_of is None else filtered_of(participant)
            write_edf(
                simulate_participant(participant, duration_s, sfreq, planted, filtered),
                eeg_dir / participant.file_name,
            )
            bar.update(task, advance=1, status=participant.participant_id)
    write_text(out_dir / "participants.tsv", participants_table(participants))
