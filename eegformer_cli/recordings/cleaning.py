"""Cleaning steps, MNE style: each function takes a Raw and returns a NEW object (input untouched).

Default preset, in order (see :mod:`eegformer_cli.preprocess`):

1. :func:`resample` to 128 Hz: the highest band ends at 45 Hz, so 128 Hz (Nyquist 64 Hz) loses
   nothing and makes every later step ~2-4x cheaper than 250-500 Hz.
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
Optional ICA (``--ica``; always in the ``paper`` preset): :func:`run_ica_iclabel`.
"""

from __future__ import annotations

import warnings

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


def resample(raw: mne.io.BaseRaw, sfreq: float) -> mne.io.BaseRaw:
    """A copy of ``raw`` at ``sfreq`` Hz (MNE's FFT resampling, with its anti-alias filter)."""
    raw = raw.copy()
    if raw.info["sfreq"] != sfreq:
        raw.resample(sfreq, verbose=False)
    return raw


def bandpass(
    raw: mne.io.BaseRaw, l_freq: float, h_freq: float, h_trans_bandwidth: float | str = "auto"
) -> mne.io.BaseRaw:
    """A copy of ``raw`` band-passed ``l_freq``-``h_freq`` Hz (MNE FIR defaults).

    ``h_trans_bandwidth`` (Hz) is MNE's parameter: ``"auto"`` (the reference) or e.g. 5.0 (the
    default preset, which puts 50 and 60 Hz line noise in the stop band).
    """
    raw = raw.copy()
    raw.filter(l_freq, h_freq, h_trans_bandwidth=h_trans_bandwidth, verbose=False)
    return raw


def average_reference(raw: mne.io.BaseRaw) -> mne.io.BaseRaw:
    """A copy of ``raw`` re-referenced to the average of its EEG channels (applied, no projector)."""
    raw = raw.copy()
    raw.set_eeg_reference("average", projection=False, verbose=False)
    return raw


def crop(raw: mne.io.BaseRaw, seconds: float) -> mne.io.BaseRaw:
    """The first ``seconds`` of ``raw`` (a copy); RecordingError when it is shorter."""
    duration = raw.n_times / raw.info["sfreq"]
    if duration < seconds - 1e-9:
        raise RecordingError(
            f"recording too short for --crop {seconds:g}: {duration:.1f} s",
            hint="give a --crop no longer than the shortest recording, or leave this one out",
        )
    return raw.copy().crop(tmin=0.0, tmax=seconds, include_tmax=False)


def auto_epoch_length(duration_s: float, window_s: float = WINDOW_S) -> float:
    """Epoch length (s) for a recording of ``duration_s`` seconds.

    30 s (the reference) when the recording holds at least 4 such epochs; otherwise the longest
    multiple of ``window_s`` giving 4 epochs, but never below 6 s (2 windows: wPLI over a single
    window is 1 everywhere). Examples: 60 s -> 15 s (4 segments of 5 windows), 182 s -> 30 s,
    20 s -> 6 s (3 segments).
    """
    longest = np.floor(duration_s / AUTO_MIN_SEGMENTS / window_s) * window_s
    return float(np.clip(longest, MIN_EPOCH_LENGTH_S, MAX_AUTO_EPOCH_LENGTH_S))


def segment(
    raw: mne.io.BaseRaw, epoch_length_s: float, window_s: float = WINDOW_S
) -> tuple[np.ndarray, np.ndarray]:
    """Cut the recording into consecutive, non-overlapping epochs of consecutive windows.

    Returns
    -------
    segments : float64 array (n_segments, n_windows, n_channels, n_times)
        ``n_windows = epoch_length_s / window_s``, ``n_times = round(window_s * sfreq)``; the data
        after the last whole epoch are dropped.
    onsets_s : float64 array (n_segments,)
        Start of each segment in the recording (s).

    Raises :class:`RecordingError` if the recording is shorter than one epoch.
    """
    n_windows = int(round(epoch_length_s / window_s))
    if n_windows < 1 or not np.isclose(n_windows * window_s, epoch_length_s):
        raise ValueError(f"epoch length {epoch_length_s} s is not a multiple of {window_s} s")
    sfreq = raw.info["sfreq"]
    window_samples = int(round(window_s * sfreq))
    data = raw.get_data()
    n_segments = data.shape[1] // (n_windows * window_samples)
    if n_segments == 0:
        raise RecordingError(
            f"recording too short: {raw.times[-1] + 1 / sfreq:.1f} s, one epoch needs "
            f"{epoch_length_s:g} s",
            hint="leave it out or give a shorter --epoch-length",
        )
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
            if absurd.any():
                parts.append(
                    "peak-to-peak above "
                    f"{absurd_ptp_v * 1e3:g} mV on " + ",".join(np.asarray(channel_names)[absurd])
                )
            reasons.append("; ".join(parts))
    return keep, reasons


def run_ica_iclabel(
    raw: mne.io.BaseRaw, n_components: int, random_state: int
) -> tuple[mne.io.BaseRaw, list[str]]:
    """A copy of ``raw`` with artefact components removed by ICA + ICLabel (reference section 1).

    ``mne.preprocessing.ICA(method="infomax", fit_params={"extended": True})`` with a fixed
    ``random_state`` (the reference sets none), ``n_components`` capped at the data's rank
    (interpolated channels and an average reference lower it), fitted on the whole continuous
    recording (the reference fits on its 30 s epochs, which cover the same data). ICLabel
    (``mne_icalabel.label_components``) labels each component; as in the reference (threshold
    0.0), every component whose top label is not "brain" or "other" is removed. ICLabel's
    warnings about the filter band and reference are silenced: the reference runs it on 1-45 Hz,
    not average-referenced data.

    Returns the cleaned copy and the labels of the removed components.
    """
    from mne_icalabel import label_components

    raw = raw.copy()
    if raw.get_montage() is None:
        raw.set_montage(MONTAGE_NAME, on_missing="ignore", verbose=False)
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
    ica.apply(raw, verbose=False)
    return raw, [labels[index] for index in ica.exclude]
