"""Band-wise connectivity tokens: coherence and wPLI per segment, with mne-connectivity.

One *segment* (an epoch of the cleaned recording, e.g. 30 s) is cut into 3 s *windows*; the
windows are the "epochs" over which :func:`mne_connectivity.spectral_connectivity_epochs`
averages the multitaper cross-spectra, exactly as the reference (section 2): ``mode="multitaper"``,
``faverage=True``, every other parameter at its default (half-bandwidth 4, i.e. 7 DPSS tapers for
3 s windows; both band edges inclusive). ``coh`` is magnitude coherence |E Sxy| / sqrt(E Sxx E Syy)
and ``wpli`` is |E Im Sxy| / E |Im Sxy|; both lie in [0, 1]. mne-connectivity returns the lower
triangle; it is mirrored, so every matrix is symmetric with a zero diagonal.

Ratio tokens (theta/beta) are the element-wise ratio of two band matrices with inf and NaN (the
diagonal 0/0 included) set to 0, as the reference's ``cal_tbr_con``; they are unbounded.
"""

from __future__ import annotations

import numpy as np
from mne_connectivity import spectral_connectivity_epochs

from eegformer_cli.connectivity.bands import RatioBand


def _frequency_ranges(bands) -> list[tuple[float, float]]:
    """The distinct (f_low, f_high) ranges the bands need, in first-use order."""
    ranges: list[tuple[float, float]] = []
    for band in bands:
        parts = (band.numerator, band.denominator) if isinstance(band, RatioBand) else (band,)
        for part in parts:
            if part.edges_hz not in ranges:
                ranges.append(part.edges_hz)
    return ranges


def segment_connectivity(windows: np.ndarray, sfreq: float, bands) -> tuple[np.ndarray, np.ndarray]:
    """Coherence and wPLI of one segment.

    Parameters
    ----------
    windows : float array (n_windows, n_channels, n_times)
        The segment's windows (volts; the scale does not matter), e.g. 10 windows of 3 s.
    sfreq : float
        Sampling rate in Hz.
    bands : sequence of Band | RatioBand
        Token order.

    Returns
    -------
    coh, wpli : float32 arrays (n_bands, n_channels, n_channels)
        Symmetric, zero diagonal.
    """
    ranges = _frequency_ranges(bands)
    # mne-connectivity logs a line per call; verbose=False keeps stderr clean.
    results = spectral_connectivity_epochs(
        np.asarray(windows, dtype=np.float64), method=["coh", "wpli"], sfreq=float(sfreq),
        mode="multitaper", fmin=tuple(low for low, _ in ranges),
        fmax=tuple(high for _, high in ranges), faverage=True, verbose=False)
    coh_by_range, wpli_by_range = (_symmetric_by_range(result.get_data("dense"))
                                   for result in results)
    return (_assemble_tokens(coh_by_range, ranges, bands),
            _assemble_tokens(wpli_by_range, ranges, bands))


def _symmetric_by_range(dense: np.ndarray) -> np.ndarray:
    """(C, C, n_ranges) lower-triangular -> (n_ranges, C, C) symmetric, zero diagonal."""
    lower = np.moveaxis(dense, -1, 0)
    return lower + lower.transpose(0, 2, 1)


def _assemble_tokens(by_range: np.ndarray, ranges, bands) -> np.ndarray:
    tokens = []
    for band in bands:
        if isinstance(band, RatioBand):
            numerator = by_range[ranges.index(band.numerator.edges_hz)]
            denominator = by_range[ranges.index(band.denominator.edges_hz)]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = numerator / denominator
            tokens.append(np.nan_to_num(ratio, nan=0.0, posinf=0.0, neginf=0.0))
        else:
            tokens.append(by_range[ranges.index(band.edges_hz)])
    return np.stack(tokens).astype(np.float32)


def recording_connectivity(segments, sfreq: float, bands) -> tuple[np.ndarray, np.ndarray]:
    """Coherence and wPLI of every segment of a recording.

    Parameters
    ----------
    segments : sequence of float arrays (n_windows, n_channels, n_times)
        One entry per segment (as :func:`eegformer_cli.recordings.cleaning.segment` returns).
    sfreq : float
        Sampling rate in Hz.
    bands : sequence of Band | RatioBand

    Returns
    -------
    coh, wpli : float32 arrays (n_segments, n_bands, n_channels, n_channels)
    """
    pairs = [segment_connectivity(windows, sfreq, bands) for windows in segments]
    return (np.stack([coh for coh, _ in pairs]), np.stack([wpli for _, wpli in pairs]))

