"""Cleaning steps on arrays of samples ``(n_channels, n_times)`` in volts, MNE style: each
returns a NEW array (its input untouched), so that a recording can be cleaned chunk by chunk
(:mod:`eegformer_cli.recordings.chunks`).

Default preset, in order (see :mod:`eegformer_cli.preprocess`):

1. :func:`resample` to 128 Hz: the highest band ends at 45 Hz, so 128 Hz (Nyquist 64 Hz) loses
   nothing and makes every later step ~2-4x cheaper than 250-500 Hz. Polyphase resampling
   (an anti-alias FIR filter, each output sample made from its neighbours only), so a chunk of
   the recording is resampled exactly as the whole recording would be, away from its edges.
2. :func:`bandpass` 1-45 Hz with MNE's FIR defaults (firwin, hamming, zero-phase) except the
   upper transition band, narrowed from MNE's automatic 11.25 Hz to 5 Hz (``LINE_NOISE_H_TRANS_HZ``):
   the stop band then starts at 50 Hz, so 50 and 60 Hz line noise are both removed by the
   band-pass itself, without knowing the country's line frequency. Measured (tests/test_cleaning.py):
   a 50 Hz sine loses ~50 dB, against ~4 dB with MNE's automatic transition (whose -6 dB point is
   at 50.6 Hz), while 10-40 Hz pass unchanged (< 0.1 dB).
3. :func:`average_reference`.
4. :func:`segment` into epochs of ``epoch_length_s`` (a multiple of 3 s; :func:`auto_epoch_length`
   picks it from the recording length) made of consecutive 3 s windows.
5. :func:`reject_segments`, judged on the band-passed data *before* the average reference (which
   would spread a dead channel over the others): drop a segment when a channel is flat
   (peak-to-peak below ``FLAT_PTP_V`` = 0.5 uV in most of its 3 s windows) or absurd
   (peak-to-peak above ``ABSURD_PTP_V`` = 25 mV in any window). Chosen on the real data: over
   all recordings, the smallest / largest 3 s peak-to-peak after steps 1-2 is 556 uV / 7.6 mV
   for the benchmark's clinical set (stored with an unusually large gain) and 9.2 uV / 0.74 mV
   for its task set, so both keep every segment (margins 18x and 3.3x), while disconnected
   channels (~0 V) and unit errors (1000x or more) are caught.
Optional ICA (``--ica``; always in the ``paper`` preset): :func:`fit_ica_iclabel`, then
:func:`apply_ica` to every chunk.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import mne
import numpy as np

from eegformer_cli.errors import RecordingError
from eegformer_cli.recordings.channels import MONTAGE_NAME

LINE_NOISE_H_TRANS_HZ = 5.0
FLAT_PTP_V = 0.5e-6
ABSURD_PTP_V = 25e-3
WINDOW_S = 3.0
MIN_EPOCH_LENGTH_S = 6.0
MAX_AUTO_EPOCH_LENGTH_S = 30.0
AUTO_MIN_SEGMENTS = 4
ICLABEL_KEPT_LABELS = ("brain", "other")
#: Resampling methods: ``polyphase`` (local in time, the default) and ``fft`` (MNE's FFT
#: resampling, where every output sample depends on the whole recording: how connectomes were
#: made before, kept for the settings stored by those versions).
RESAMPLE_METHODS = ("polyphase", "fft")
#: The largest up or down factor of the polyphase resampler: a rate ratio that is no simple
#: fraction (199.99 Hz -> 128 Hz) is approximated by the nearest one with a denominator up to
#: this (relative error below 1e-8 for rates up to 10 kHz).
MAX_RESAMPLE_FACTOR = 2**14
#: How many seconds of a recording longer than this ICA is fitted on (:func:`ica_fit_spans`).
ICA_FIT_MAX_S = 1800.0
#: ... as this many blocks spread evenly over the recording.
ICA_FIT_BLOCKS = 30


def resample_factors(source_sfreq: float, sfreq: float) -> tuple[int, int]:
    """``(up, down)``: ``sfreq / source_sfreq`` as a fraction in lowest terms (approximated
    within :data:`MAX_RESAMPLE_FACTOR`): ``(1, 2)`` for 256 -> 128 Hz, ``(32, 125)`` for
    500 -> 128 Hz."""
    ratio = (Fraction(sfreq) / Fraction(source_sfreq)).limit_denominator(MAX_RESAMPLE_FACTOR)
    return ratio.numerator, ratio.denominator


def resampled_length(n_times: int, source_sfreq: float, sfreq: float, method: str) -> int:
    """Samples of a recording of ``n_times`` samples after :func:`resample`."""
    if source_sfreq == sfreq:
        return n_times
    if method == "fft":  # mne.filter.resample's rule
        return max(int(round(sfreq / source_sfreq * n_times)), 1)
    up, down = resample_factors(source_sfreq, sfreq)
    return -(-n_times * up // down)


def resample_reach(source_sfreq: float, sfreq: float) -> int:
    """Source samples on either side of an output sample's time that :func:`resample`
    (polyphase) reads: a chunk resampled with this margin gives the whole recording's samples."""
    if source_sfreq == sfreq:
        return 0
    up, down = resample_factors(source_sfreq, sfreq)
    return 10 * max(up, down) // up + 2  # scipy's filter: 10 * max(up, down) taps each side


def resample(data: np.ndarray, source_sfreq: float, sfreq: float, method: str) -> np.ndarray:
    """``data`` (..., n_times) at ``source_sfreq`` Hz -> at ``sfreq`` Hz (the same array when
    the rates are equal).

    ``polyphase``: :func:`scipy.signal.resample_poly` with the rates' ratio (Kaiser-windowed
    anti-alias filter, edges extended by reflection, as MNE's polyphase method). Why not
    ``mne.filter.resample(method="polyphase")``: it takes the ratio from the data's lengths
    (``round(n * ratio) / n``), so an odd number of samples or a chunk gives another filter
    (n = 153,601 at 256 -> 128 Hz: up 76,800, down 153,601, a 3-million-tap filter, an order of
    magnitude slower than the rates' ratio). ``fft``: MNE's FFT method (``Raw.resample``'s).
    """
    if source_sfreq == sfreq:
        return data
    if method == "fft":
        return mne.filter.resample(data, up=sfreq, down=source_sfreq, npad="auto", verbose=False)
    from scipy.signal import resample_poly  # as MNE does: SciPy's signal module loads slowly

    up, down = resample_factors(source_sfreq, sfreq)
    return resample_poly(data, up, down, axis=-1, padtype="reflect")


def bandpass_length(
    sfreq: float, l_freq: float, h_freq: float, h_trans_bandwidth: float | str = "auto"
) -> int:
    """Taps of :func:`bandpass`'s FIR filter (MNE's automatic length)."""
    kernel = mne.filter.create_filter(
        None, sfreq, l_freq, h_freq, h_trans_bandwidth=h_trans_bandwidth, verbose=False
    )
    return len(kernel)


def bandpass(
    data: np.ndarray,
    sfreq: float,
    l_freq: float,
    h_freq: float,
    h_trans_bandwidth: float | str = "auto",
) -> np.ndarray:
    """``data`` (..., n_times) band-passed ``l_freq``-``h_freq`` Hz (MNE FIR defaults, as
    ``Raw.filter``: :func:`mne.filter.filter_data`).

    ``h_trans_bandwidth`` (Hz) is MNE's parameter: ``"auto"`` (the paper's code) or e.g. 5.0 (the
    default preset, which puts 50 and 60 Hz line noise in the stop band).
    """
    return mne.filter.filter_data(
        data, sfreq, l_freq, h_freq, h_trans_bandwidth=h_trans_bandwidth, verbose=False
    )


def average_reference(data: np.ndarray) -> np.ndarray:
    """``data`` (n_channels, n_times) re-referenced to the average of its channels, what
    ``Raw.set_eeg_reference("average")`` does with no channel marked bad (a recording's bad
    channels are interpolated before: :mod:`.channel_facts`)."""
    return data - data.mean(axis=0, keepdims=True)


class ShorterThanCrop(RecordingError):
    """A recording shorter than the crop: ``preprocess`` records it as failed (the crop gives
    every recording one length), ``predict`` and ``explain`` score it whole, with a warning."""


def crop_length(n_times: int, sfreq: float, seconds: float) -> int:
    """Samples in the first ``seconds`` of a recording of ``n_times`` samples (as
    ``Raw.crop(0, seconds, include_tmax=False)``); :class:`ShorterThanCrop` when it is
    shorter."""
    duration = n_times / sfreq
    if duration < seconds - 1e-9:
        raise ShorterThanCrop(  # the same words for --crop and for Python's crop_s
            f"recording too short for a crop of {seconds:g} s: {duration:.1f} s long",
            hint="crop no longer than the shortest recording, or leave this one out",
        )
    return min(int(round(seconds * sfreq)), n_times)


def auto_epoch_length(duration_s: float, window_s: float = WINDOW_S) -> float:
    """Epoch length (s) for a recording of ``duration_s`` seconds.

    30 s (the paper's code) when the recording holds at least 4 such epochs; otherwise the
    longest multiple of ``window_s`` giving 4 epochs, but never below 6 s (2 windows: wPLI over a
    single window is 1 everywhere). Examples: 60 s -> 15 s (4 segments of 5 windows), 182 s -> 30 s,
    20 s -> 6 s (3 segments).
    """
    longest = np.floor(duration_s / AUTO_MIN_SEGMENTS / window_s) * window_s
    return float(np.clip(longest, MIN_EPOCH_LENGTH_S, MAX_AUTO_EPOCH_LENGTH_S))


def epoch_samples(
    epoch_length_s: float, sfreq: float, window_s: float = WINDOW_S
) -> tuple[int, int]:
    """``(n_windows, window_samples)`` of an epoch: ``epoch_length_s / window_s`` windows of
    ``round(window_s * sfreq)`` samples. ValueError when the epoch is no multiple of windows."""
    n_windows = int(round(epoch_length_s / window_s))
    if n_windows < 1 or not np.isclose(n_windows * window_s, epoch_length_s):
        raise ValueError(f"epoch length {epoch_length_s} s is not a multiple of {window_s} s")
    return n_windows, int(round(window_s * sfreq))


def check_holds_an_epoch(
    n_times: int, sfreq: float, epoch_length_s: float, window_s: float = WINDOW_S
) -> None:
    """RecordingError when ``n_times`` samples at ``sfreq`` Hz hold no epoch of
    ``epoch_length_s`` s."""
    n_windows, window_samples = epoch_samples(epoch_length_s, sfreq, window_s)
    if n_times < n_windows * window_samples:
        raise RecordingError(
            f"recording too short: {n_times / sfreq:.1f} s, one epoch needs {epoch_length_s:g} s",
            hint="leave it out or give a shorter --epoch-length",
        )


def segment(
    data: np.ndarray, sfreq: float, epoch_length_s: float, window_s: float = WINDOW_S
) -> tuple[np.ndarray, np.ndarray]:
    """Cut ``data`` (n_channels, n_times) into consecutive, non-overlapping epochs of
    consecutive windows.

    Returns
    -------
    segments : float64 array (n_segments, n_windows, n_channels, n_times)
        ``n_windows = epoch_length_s / window_s``, ``n_times = round(window_s * sfreq)``; the data
        after the last whole epoch are dropped (no segment at all from data shorter than an
        epoch: :func:`check_holds_an_epoch` says so for a recording).
    onsets_s : float64 array (n_segments,)
        Start of each segment from the start of ``data`` (s).
    """
    n_windows, window_samples = epoch_samples(epoch_length_s, sfreq, window_s)
    n_segments = data.shape[1] // (n_windows * window_samples)
    used = data[:, : n_segments * n_windows * window_samples]
    # (C, S*W*T) -> (C, S, W, T) -> (S, W, C, T)
    segments = used.reshape(data.shape[0], n_segments, n_windows, window_samples)
    segments = np.ascontiguousarray(segments.transpose(1, 2, 0, 3))
    onsets_s = np.arange(n_segments) * n_windows * window_samples / sfreq
    return segments, onsets_s


def reject_segments(
    segments: np.ndarray,
    channel_names,
    flat_ptp_v: float | None = FLAT_PTP_V,
    absurd_ptp_v: float | None = ABSURD_PTP_V,
) -> tuple[np.ndarray, list[str]]:
    """Which segments to keep, judged on the peak-to-peak amplitude of each window (volts).

    A segment is rejected when a channel's peak-to-peak is below ``flat_ptp_v`` in more than
    half of the segment's windows (flat), or above ``absurd_ptp_v`` in any window (absurd).
    ``None`` switches a test off.

    Parameters
    ----------
    segments : float array (n_segments, n_windows, n_channels, n_times)
    channel_names : sequence of str (n_channels,), used in the reasons

    Returns
    -------
    keep : bool array (n_segments,)
    reasons : list of str, one per rejected segment, e.g. ``"flat channel Cz"``
    """
    ptp = np.ptp(segments, axis=-1)  # (S, W, C)
    n_windows = segments.shape[1]
    keep = np.ones(len(segments), dtype=bool)
    reasons = []
    for index, window_ptp in enumerate(ptp):
        flat = (
            (window_ptp < flat_ptp_v).sum(axis=0) > n_windows / 2
            if flat_ptp_v is not None
            else np.zeros(window_ptp.shape[1], dtype=bool)
        )
        absurd = (
            (window_ptp > absurd_ptp_v).any(axis=0)
            if absurd_ptp_v is not None
            else np.zeros(window_ptp.shape[1], dtype=bool)
        )
        if flat.any() or absurd.any():
            keep[index] = False
            parts = []
            if flat.any():
                parts.append("flat channel " + ",".join(np.asarray(channel_names)[flat]))
            if absurd.any() and absurd_ptp_v is not None:  # only with a limit
                parts.append(
                    "peak-to-peak above "
                    f"{absurd_ptp_v * 1e3:g} mV on " + ",".join(np.asarray(channel_names)[absurd])
                )
            reasons.append("; ".join(parts))
    return keep, reasons


def ica_fit_spans(n_times: int, sfreq: float) -> list[tuple[int, int]]:
    """The samples ICA is fitted on, as ``(start, stop)`` spans of a cleaned recording of
    ``n_times`` samples: all of it up to :data:`ICA_FIT_MAX_S` seconds; beyond, that many
    seconds as :data:`ICA_FIT_BLOCKS` blocks of equal length spread evenly from its start to its
    end (the first block starts the recording, the last ends it), so that the fit sees every
    part of a long recording (sleep stages, a seizure, electrodes drying) in bounded memory."""
    longest = int(round(ICA_FIT_MAX_S * sfreq))
    if n_times <= longest:
        return [(0, n_times)]
    block = longest // ICA_FIT_BLOCKS
    starts = np.linspace(0, n_times - block, ICA_FIT_BLOCKS).round().astype(int)
    return [(int(start), int(start) + block) for start in starts]


def fit_ica_iclabel(
    raw: mne.io.BaseRaw, n_components: int, random_state: int
) -> tuple[mne.preprocessing.ICA, list[str]]:
    """ICA + ICLabel on ``raw`` (reference-method.md, section 1): the fitted ICA, its artefact
    components marked for exclusion (``ica.exclude``), and their labels.

    ``mne.preprocessing.ICA(method="infomax", fit_params={"extended": True})`` with a fixed
    ``random_state`` (the paper's code sets none), ``n_components`` capped at the data's rank
    (interpolated channels and an average reference lower it), fitted on ``raw`` as given: the
    whole continuous recording up to 30 minutes (the paper's code fits on its 30 s epochs, which
    cover the same data), :func:`ica_fit_spans` beyond. ICLabel
    (``mne_icalabel.label_components``) labels each component; as in the paper's code (threshold
    0.0), every component whose top label is not "brain" or "other" is excluded. ICLabel's
    warnings about the filter band and the average reference are silenced: the paper's code runs
    it on 1-45 Hz, not average-referenced data. :func:`apply_ica` removes the excluded components.
    """
    from mne_icalabel import label_components

    if raw.get_montage() is None:
        raw = raw.copy().set_montage(MONTAGE_NAME, on_missing="ignore", verbose=False)
    rank = mne.compute_rank(raw, rank=None, verbose=False).get("eeg", len(raw.ch_names))
    n_components = int(min(n_components, rank))
    if n_components < 2:
        raise RecordingError(
            f"ICA needs at least 2 components but the data's rank is {rank}",
            hint="run without --ica",
        )
    ica = mne.preprocessing.ICA(
        n_components=n_components,
        method="infomax",
        fit_params={"extended": True},
        random_state=random_state,
        max_iter="auto",
        verbose=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ica.fit(raw, verbose=False)
        labels = label_components(raw, ica, method="iclabel")["labels"]
    ica.exclude = [index for index, label in enumerate(labels) if label not in ICLABEL_KEPT_LABELS]
    return ica, [labels[index] for index in ica.exclude]


def apply_ica(ica: mne.preprocessing.ICA, data: np.ndarray, info: mne.Info) -> np.ndarray:
    """``data`` (n_channels, n_times; the channels of ``info``) without ``ica``'s excluded
    components (``ICA.apply``: a linear map of each sample, so chunk by chunk is exact)."""
    if not ica.exclude:
        return data
    raw = mne.io.RawArray(data, info, copy="data", verbose=False)
    return ica.apply(raw, verbose=False).get_data()
