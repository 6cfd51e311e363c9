"""The power scenario's cause: a gain on one channel's own signal in one band.

``eegformer simulate --scenario power`` (:mod:`eegformer_cli.simulation.scenarios`) plants band
power, which coherence and wPLI do not see and the band covariances do: each carrier's recording
on the planted channel is multiplied by its gain in the planted band (:func:`power_filter`: a
real gain per frequency, flat inside the band, tapering to 1 over :data:`POWER_EDGE_HZ` on each
side by a raised cosine). A gain on one channel's own band-limited signal scales its
cross-spectra with every channel and the square root of its auto-spectrum alike, so its
coherence and wPLI are unchanged (adding an independent source of the same power instead would
lower its coherence with every channel by a factor 1 / gain). Two things keep it from being
exact, both small at :data:`DEFAULT_GAIN`: the multitaper estimate smooths the spectrum over
about +-1.3 Hz, so where the gain changes (its edges, hence their width) a bin mixes frequencies
of different gains; and ``preprocess``'s average reference passes 1/19 of the channel's change
to every other channel (no change of one channel escapes it), which moves the coherence of the
planted channel's pairs a little. The gain is kept small so that these traces stay below the
tokens' noise, and every participant's band power varies by channel and band (each channel a
log-normal gain, sd :data:`NATURAL_POWER_SD` in log amplitude, in each band, in both groups) so
that the gain is not read off trivially either (docs/benchmarks.md, "Ground truth", has the
measurements). The filter applies to the whole recording, artefacts included, so that the
channel's signal in the band is scaled whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from eegformer_cli.errors import InputDataError
from eegformer_cli.simulation.simulate import CHANNELS, SimulatedParticipant

#: A carrier's typical amplitude gain in the planted band (power: its square).
DEFAULT_GAIN = 1.2
#: Every channel's natural log-amplitude spread per band (log-normal), in both groups.
NATURAL_POWER_SD = 0.06
#: Width (Hz) of the raised-cosine edges of a band gain on each side of its band.
POWER_EDGE_HZ = 2.0

Bands = Mapping[str, tuple[float, float]]


@dataclass(frozen=True)
class PowerGain:
    """The power scenario's cause: a gain on ``channel``'s signal in ``band_hz`` (inside the
    token band ``token_band``)."""

    channel: str
    token_band: str
    band_hz: tuple[float, float]


def band_window(freqs_hz: np.ndarray, band_hz: tuple[float, float], edge_hz: float) -> np.ndarray:
    """1 inside ``band_hz``, a raised cosine down to 0 over ``edge_hz`` on each side, 0 beyond;
    same shape as ``freqs_hz``."""
    low, high = band_hz
    ramp = np.clip(
        np.minimum(freqs_hz - (low - edge_hz), high + edge_hz - freqs_hz) / edge_hz, 0, 1
    )
    return 0.5 - 0.5 * np.cos(np.pi * ramp)


def power_log_gains(
    power: PowerGain, log_gain: float, participant: SimulatedParticipant, bands: Bands
) -> np.ndarray:
    """One participant's log amplitude gains, (n_channels, len(bands)): the natural spread
    (N(0, :data:`NATURAL_POWER_SD`), drawn from the participant's seed and index alone, so it
    does not depend on whether they carry the gain) plus ``log_gain`` on the planted channel and
    band (0 for a non-carrier). ``bands``: name -> (low, high) Hz, ``power.token_band`` one of
    them."""
    rng = np.random.default_rng([participant.seed, participant.index, 3])
    log_gains = rng.normal(0.0, NATURAL_POWER_SD, (len(CHANNELS), len(bands)))
    log_gains[CHANNELS.index(power.channel), list(bands).index(power.token_band)] += log_gain
    return log_gains


def power_filter(log_gains: np.ndarray, bands: Bands):
    """The ``filtered`` function of :func:`simulate.simulate_participant`: each channel's
    spectrum multiplied by exp(sum over ``bands`` of its log gain times :func:`band_window`), a
    real gain per frequency (no phase change); ``log_gains`` (n_channels, len(bands))."""

    def filtered(signals: np.ndarray, sfreq: float) -> np.ndarray:
        n_times = signals.shape[-1]
        freqs = np.fft.rfftfreq(n_times, 1 / sfreq)
        windows = np.stack(
            [band_window(freqs, hz, POWER_EDGE_HZ) for hz in bands.values()]
        )  # (n_bands, n_freqs)
        gain = np.exp(log_gains @ windows)  # (n_channels, n_freqs)
        return np.fft.irfft(np.fft.rfft(signals, axis=-1) * gain, n=n_times, axis=-1)

    return filtered


class _BandCovariances(Protocol):
    """What :func:`relative_band_power` reads of a :class:`~eegformer_cli.preprocess.Connectome`."""

    @property
    def channels(self) -> Sequence[str]: ...
    @property
    def covariance(self) -> np.ndarray | None: ...
    @property
    def covariance_bands(self) -> Sequence[str]: ...


def relative_band_power(connectome: _BandCovariances, channel: str, band: str) -> float:
    """log of ``channel``'s power in ``band`` (its band covariance's diagonal, V^2) over the
    mean of the other channels' in that band: the gain in log power, free of what a participant's
    channels share (the background's amplitude and slope)."""
    if connectome.covariance is None:
        raise InputDataError(
            "the connectome holds no band covariances (made by an older preprocess)"
        )
    power = np.diag(connectome.covariance[list(connectome.covariance_bands).index(band)])
    k = list(connectome.channels).index(channel)
    return float(np.log(power[k]) - np.log(np.delete(power, k).mean()))


def power_record(power: PowerGain | None, bands: Bands) -> dict:
    """The ground truth's ``power``: the planted channel, its token band and source band (Hz),
    the natural spread, the gain's edges and every band that has a natural spread; nothing for
    the coupling scenarios (``power`` None)."""
    if power is None:
        return {}
    return {
        "power": {
            **dataclasses.asdict(power),
            "natural_log_amplitude_sd": NATURAL_POWER_SD,
            "edge_hz": POWER_EDGE_HZ,
            "bands_hz": {name: list(hz) for name, hz in bands.items()},
        }
    }
