"""Band-wise connectivity tokens: coherence and wPLI per segment.

One *segment* (an epoch of the cleaned recording, e.g. 30 s) is cut into 3 s *windows*; the
windows are the "epochs" over which the multitaper cross-spectra are averaged, exactly as the
paper's code calls it (reference-method.md, section 2)::

    mne_connectivity.spectral_connectivity_epochs(windows, method=["coh", "wpli"], sfreq=sfreq,
        mode="multitaper", fmin=lows, fmax=highs, faverage=True)

with every other parameter at its default: DPSS tapers of half-bandwidth 4 with low-bias
selection (7 tapers), eigenvalue weights, no adaptive weighting, mean removed per window; band
bins inclusive at both ends; connectivity computed per frequency bin, then averaged over the
band's bins. ``coh`` is magnitude coherence |E Sxy| / sqrt(E Sxx E Syy) and ``wpli`` is
|E Im Sxy| / E |Im Sxy| (0 where the denominator is 0); both lie in [0, 1]. Matrices are
symmetric with a zero diagonal (mne-connectivity's lower triangle, mirrored).

Why not call mne-connectivity here: it computes one segment per call and one window at a time,
with fixed overhead (xarray containers) per call. :func:`recording_connectivity` computes the same
numbers with one FFT and one batched matrix product per segment, several times faster
(docs/benchmarks.md, "Preprocessing"), and equal to ``spectral_connectivity_epochs`` to 1e-15 (tests/test_connectivity.py compares them to 1e-6 on
every band, and tests/test_preprocess.py on a real recording).

Ratio tokens (theta/beta) are the element-wise ratio of two band matrices with inf and NaN (the
diagonal 0/0 included) set to 0, as the paper's code's ``cal_tbr_con``; they are unbounded.

Band covariances (what the tangent-space reference classifies, :func:`recording_tokens`): one
channel covariance per band (ratio tokens have none) and recording, from the same tapered spectra:
by Parseval, ``2 / (n_times * sum of taper weights)`` times the real part of the cross-spectrum
summed over the band's bins is the covariance of the window band-passed to the band (V^2), averaged
over every window of the kept segments. It is symmetric positive semi-definite, of rank C - 1 after
the average reference (the all-ones vector is in its null space). Why not MNE's FIR filter bank
and ``np.cov``: its 8 ``mne.filter.filter_data`` calls cost more CPU than the whole rest of
``preprocess`` (docs/benchmarks.md, "The tangent-space reference"); these sums cost nothing, and the band edges are the tokens' own
(no transition bands).
"""

from __future__ import annotations

import numpy as np
from mne.time_frequency import dpss_windows
from scipy.fft import rfft, rfftfreq

from eegformer_cli.connectivity.bands import RatioBand

#: mne-connectivity's default multitaper parameters (``mt_bandwidth=None``, ``mt_low_bias=True``).
HALF_BANDWIDTH = 4.0


def _frequency_ranges(bands) -> list[tuple[float, float]]:
    """The distinct (f_low, f_high) ranges the bands need, in first-use order."""
    ranges: list[tuple[float, float]] = []
    for band in bands:
        for part in band.ranges:
            if part.edges_hz not in ranges:
                ranges.append(part.edges_hz)
    return ranges


class _Spectra:
    """The multitaper set-up of windows of ``n_times`` samples at ``sfreq`` Hz: DPSS tapers,
    their weights, and the FFT bins of each frequency range."""

    def __init__(self, n_times: int, sfreq: float, ranges: list[tuple[float, float]]):
        self.n_times = n_times
        self.tapers, self.eigenvalues = dpss_windows(
            n_times, HALF_BANDWIDTH, int(2 * HALF_BANDWIDTH), sym=False, low_bias=True
        )
        self.weights = np.sqrt(self.eigenvalues)[:, None]  # (K, 1)
        freqs = rfftfreq(n_times, 1.0 / sfreq)
        self.used = np.zeros(freqs.shape, dtype=bool)
        for low, high in ranges:
            self.used |= (freqs >= low) & (freqs <= high)
        self.bins_per_range = [
            np.flatnonzero((freqs[self.used] >= low) & (freqs[self.used] <= high))
            for low, high in ranges
        ]
        empty = [r for r, bins in zip(ranges, self.bins_per_range) if bins.size == 0]
        if empty:
            raise ValueError(
                f"no frequency bin of {n_times / sfreq:g} s windows lies in {empty} Hz"
            )


def _range_connectivity(
    segments: np.ndarray, spectra: _Spectra
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coherence and wPLI per segment and frequency range, two float64 (S, n_ranges, C, C), and
    the real cross-spectrum summed over the segments' windows and each range's bins, float64
    (n_ranges, C, C)."""
    n_segments, _, n_channels, _ = segments.shape
    n_ranges = len(spectra.bins_per_range)
    coh = np.empty((n_segments, n_ranges, n_channels, n_channels))
    wpli = np.empty_like(coh)
    cospectrum = np.zeros((n_ranges, n_channels, n_channels))
    for index, windows in enumerate(segments):
        centred = windows - windows.mean(axis=-1, keepdims=True)
        # (W, C, K, F): tapered spectra at the used bins, weighted. mne's constant factors
        # (2 / sum of squared weights, DC/Nyquist scaling) cancel in both measures.
        tapered = rfft(centred[:, :, None, :] * spectra.tapers, axis=-1)
        tapered = tapered[..., spectra.used] * spectra.weights
        tapered = tapered.transpose(0, 3, 1, 2)  # (W, F, C, K)
        csd = tapered @ tapered.conj().transpose(0, 1, 3, 2)  # (W, F, C, C)
        csd_sum = csd.sum(axis=0)
        power = np.diagonal(csd_sum, axis1=1, axis2=2).real  # (F, C)
        with np.errstate(divide="ignore", invalid="ignore"):  # a silent channel gives NaN
            coh_per_bin = np.abs(csd_sum) / np.sqrt(power[:, :, None] * power[:, None, :])
        imaginary = csd.imag
        numerator = np.abs(imaginary.sum(axis=0))
        denominator = np.abs(imaginary).sum(axis=0)
        wpli_per_bin = np.divide(
            numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0
        )
        for r, bins in enumerate(spectra.bins_per_range):
            coh[index, r] = coh_per_bin[bins].mean(axis=0)
            wpli[index, r] = wpli_per_bin[bins].mean(axis=0)
            cospectrum[r] += csd_sum[bins].real.sum(axis=0)
    return _mirror_lower(coh), _mirror_lower(wpli), cospectrum


def _mirror_lower(matrices: np.ndarray) -> np.ndarray:
    """Keep the strict lower triangle and mirror it: exactly symmetric, zero diagonal."""
    lower = np.tril(matrices, k=-1)
    return lower + np.swapaxes(lower, -1, -2)


def _assemble_tokens(by_range: np.ndarray, ranges, bands) -> np.ndarray:
    """(S, n_ranges, C, C) -> float32 (S, n_bands, C, C) in band order, ratio tokens computed."""
    tokens = []
    for band in bands:
        if isinstance(band, RatioBand):
            numerator = by_range[:, ranges.index(band.numerator.edges_hz)]
            denominator = by_range[:, ranges.index(band.denominator.edges_hz)]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = numerator / denominator
            tokens.append(np.nan_to_num(ratio, nan=0.0, posinf=0.0, neginf=0.0))
        else:
            tokens.append(by_range[:, ranges.index(band.edges_hz)])
    return np.stack(tokens, axis=1).astype(np.float32)


class TokenArrays:
    """Coherence and wPLI rows of a recording kept in memory: float32 storage reserved for
    ``max_segments`` segments of ``n_bands`` x ``n_channels`` x ``n_channels`` (only the pages
    written take memory). What :class:`TokenAccumulator` stores its rows in unless it is given
    another store with the same two methods (e.g. one that writes them to files)."""

    def __init__(self, max_segments: int, n_bands: int, n_channels: int):
        shape = (max_segments, n_bands, n_channels, n_channels)
        self.coh = np.empty(shape, dtype=np.float32)
        self.wpli = np.empty(shape, dtype=np.float32)
        self.n_segments = 0

    def append(self, coh: np.ndarray, wpli: np.ndarray) -> None:
        """Store the float32 (n, B, C, C) rows of ``n`` more segments."""
        added = slice(self.n_segments, self.n_segments + len(coh))
        self.coh[added] = coh
        self.wpli[added] = wpli
        self.n_segments += len(coh)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coh, wpli)`` of the rows stored (views of the reserved storage, not copies)."""
        return self.coh[: self.n_segments], self.wpli[: self.n_segments]


class TokenAccumulator:
    """The tokens of a recording whose segments come a batch at a time (a long recording cleaned
    chunk by chunk): coherence and wPLI per segment, handed as float32 to ``store`` as they
    come, and the band covariances summed over every batch. The same numbers as
    :func:`recording_tokens` of all the segments at once (the covariance's sums in another
    order: 1e-15 relative).

    Parameters
    ----------
    sfreq : float
        Sampling rate in Hz.
    bands : sequence of Band | RatioBand
        Token order.
    max_segments : int
        The most segments that will be added (the default store reserves storage for them).
    n_channels, n_times : int
        Channels of a segment, samples of a window.
    store : TokenArrays-like | None
        Where the rows go (``append(coh, wpli)``, ``arrays()``); default a :class:`TokenArrays`.

    Attributes
    ----------
    finite : bool
        Whether every coherence and wPLI value added is finite (a silent channel gives NaN).
    """

    def __init__(
        self, sfreq: float, bands, max_segments: int, n_channels: int, n_times: int, store=None
    ):
        self.bands = list(bands)
        self.ranges = _frequency_ranges(self.bands)
        self.spectra = _Spectra(n_times, float(sfreq), self.ranges)
        self.store = (
            TokenArrays(max_segments, len(self.bands), n_channels) if store is None else store
        )
        self.cospectrum = np.zeros((len(self.ranges), n_channels, n_channels))
        self.n_segments = self.n_windows = 0
        self.finite = True

    def add(self, segments: np.ndarray) -> None:
        """Add ``segments`` float (n_segments, n_windows, n_channels, n_times), volts."""
        segments = np.asarray(segments, dtype=np.float64)
        if len(segments) == 0:
            return
        coh, wpli, cospectrum = _range_connectivity(segments, self.spectra)
        coh = _assemble_tokens(coh, self.ranges, self.bands)
        wpli = _assemble_tokens(wpli, self.ranges, self.bands)
        self.finite = self.finite and bool(np.isfinite(coh).all() and np.isfinite(wpli).all())
        self.store.append(coh, wpli)
        self.cospectrum += cospectrum
        self.n_segments += len(segments)
        self.n_windows += len(segments) * segments.shape[1]

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(coh, wpli, covariance)`` of the segments added, as :func:`recording_tokens`
        (coh and wpli as the store gives them: views of the reserved storage by default)."""
        spectra = self.spectra
        # Parseval: a window's variance is sum over all bins |X|^2 / n_times per unit-energy
        # taper; a positive bin stands for its negative twin too (x 2); tapers weighted by their
        # eigenvalues
        covariance = (
            self.cospectrum * 2.0 / (spectra.n_times * spectra.eigenvalues.sum() * self.n_windows)
        )
        covariance = (covariance + covariance.swapaxes(-1, -2)) / 2
        rows = [self.ranges.index(band.edges_hz) for band in covariance_bands(self.bands)]
        coh, wpli = self.store.arrays()
        return coh, wpli, covariance[rows].astype(np.float32)


def recording_tokens(
    segments: np.ndarray, sfreq: float, bands
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coherence and wPLI of every segment of a recording, and its band covariances.

    Parameters
    ----------
    segments : float array (n_segments, n_windows, n_channels, n_times)
        As :func:`eegformer_cli.recordings.cleaning.segment` returns (volts; scale-free).
    sfreq : float
        Sampling rate in Hz.
    bands : sequence of Band | RatioBand
        Token order.

    Returns
    -------
    coh, wpli : float32 arrays (n_segments, n_bands, n_channels, n_channels)
        Symmetric, zero diagonal.
    covariance : float32 array (n_covariance_bands, n_channels, n_channels)
        Band-limited channel covariance over all segments (V^2, squared units of ``segments``),
        one per band that is not a ratio token (:func:`covariance_bands`), in token order.
    """
    segments = np.asarray(segments, dtype=np.float64)
    n_segments, _, n_channels, n_times = segments.shape
    accumulator = TokenAccumulator(sfreq, bands, n_segments, n_channels, n_times)
    accumulator.add(segments)
    return accumulator.result()


def covariance_bands(bands) -> list:
    """The bands that have a covariance: every band but the ratio tokens, in token order."""
    return [band for band in bands if not isinstance(band, RatioBand)]


def recording_connectivity(
    segments: np.ndarray, sfreq: float, bands
) -> tuple[np.ndarray, np.ndarray]:
    """Coherence and wPLI of every segment of a recording: :func:`recording_tokens` without
    the covariances."""
    coh, wpli, _ = recording_tokens(segments, sfreq, bands)
    return coh, wpli


def segment_connectivity(windows: np.ndarray, sfreq: float, bands) -> tuple[np.ndarray, np.ndarray]:
    """Coherence and wPLI of one segment ``(n_windows, n_channels, n_times)``: two float32
    ``(n_bands, n_channels, n_channels)`` (see :func:`recording_connectivity`)."""
    coh, wpli = recording_connectivity(np.asarray(windows)[None], sfreq, bands)
    return coh[0], wpli[0]
