"""One recording -> its connectome (nothing written).

Read (any MNE format) -> keep the EEG channels under canonical 10-20 names -> give it the run's
channels (interpolating at most ``max_interpolated`` missing ones) -> clean
(:mod:`eegformer_cli.recordings.cleaning`) -> segment -> coherence and wPLI per band and segment
and the band covariances (:mod:`eegformer_cli.connectivity.tokens`). :func:`process_recording`
reads a file, :func:`process_raw` / :func:`preprocess_raw` take an ``mne.io.Raw`` held in memory.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path

import mne
import numpy as np

from eegformer_cli.connectivity.bands import band_edges_hz, band_names, check_bands_fit_rate
from eegformer_cli.connectivity.tokens import covariance_bands, recording_tokens
from eegformer_cli.errors import RecordingError, UsageError
from eegformer_cli.preprocess.output import Connectome
from eegformer_cli.preprocess.settings import PRESETS, PreprocessSettings
from eegformer_cli.recordings import cleaning, reading
from eegformer_cli.recordings.channels import (
    conform_channels,
    normalise_channels,
    select_channel_set,
)


def clean_segments(
    raw: mne.io.BaseRaw, settings: PreprocessSettings, epoch_length_s: float
) -> tuple[np.ndarray, np.ndarray, int, list[str]]:
    """Clean a conformed recording (its first ``settings.crop_s`` seconds when set) and cut it
    into kept segments.

    Returns ``(segments (n_kept, n_windows, C, n_times) float64 volts, onsets_s (n_kept,),
    n_rejected, ica_excluded_labels)``. Raises :class:`RecordingError` when no segment is kept.
    Rejection is judged before the average reference (a flat channel stops being flat after
    it); the tokens are computed on the referenced data.
    """
    filtered = cleaning.bandpass(
        cleaning.resample(raw, settings.sfreq),
        settings.l_freq,
        settings.h_freq,
        settings.h_trans_bandwidth,
    )
    if settings.crop_s is not None:  # after the filter: no edge effect at the cut
        filtered = cleaning.crop(filtered, settings.crop_s)
    excluded: list[str] = []
    if settings.ica and settings.ica_before_reference:
        filtered, excluded = cleaning.run_ica_iclabel(
            filtered, settings.ica_n_components, settings.ica_random_state
        )
    referenced = cleaning.average_reference(filtered)
    if settings.ica and not settings.ica_before_reference:
        referenced, excluded = cleaning.run_ica_iclabel(
            referenced, settings.ica_n_components, settings.ica_random_state
        )
    segments, onsets = cleaning.segment(referenced, epoch_length_s, settings.window_s)
    unreferenced, _ = cleaning.segment(filtered, epoch_length_s, settings.window_s)
    keep, reasons = cleaning.reject_segments(
        unreferenced, raw.ch_names, settings.flat_ptp_v, settings.absurd_ptp_v
    )
    if not keep.any():
        reason, _ = collections.Counter(reasons).most_common(1)[0]
        raise RecordingError(
            f"all {len(keep)} segments rejected ({reason})",
            hint="check the recording; amplitudes are judged in volts",
        )
    return segments[keep], onsets[keep], int((~keep).sum()), excluded


def process_recording(
    path: str | Path, settings: PreprocessSettings, channels: Sequence[str] | None = None
) -> Connectome:
    """Connectome of one recording file (pure: reads ``path``, writes nothing).

    Parameters
    ----------
    path : a recording in any format :func:`reading.read_recording` reads.
    settings : the preprocessing settings; ``settings.epoch_length`` "auto" is resolved from this
        recording's length alone (a run resolves it once for all recordings instead).
    channels : the channels to give the recording, in order (any spelling
        :func:`select_channel_set` accepts); default ``settings.channels``, or else the standard
        10-20 channels the recording has.

    Raises
    ------
    RecordingError : unreadable (including NaN data), too few channels, too many missing, rate
        too low for the bands, too short, or every segment rejected; one line, naming the file.
    """
    path = Path(path)
    raw = reading.read_recording(path, preload=True)  # loaded, its values checked finite
    return _process_loaded(raw, settings, channels, path)


def process_raw(
    raw: mne.io.BaseRaw,
    settings: PreprocessSettings,
    channels: Sequence[str] | None = None,
    path: str | Path | None = None,
) -> Connectome:
    """Connectome of one recording already in memory (``raw`` is not modified; nothing is
    written). What :func:`process_recording` does after reading the file, so a Raw read from a
    file gives the same numbers as the file (see :func:`preprocess_raw` for the parameters).

    ``path``: the recording's file, named in errors (default: the file MNE read ``raw`` from,
    or ``"raw"`` for a recording made in memory).
    """
    path = (
        Path(path)
        if path is not None
        else Path(raw.filenames[0] if raw.filenames and raw.filenames[0] else "raw")
    )
    if not raw.preload:  # a copy: the caller's Raw stays as it was
        raw = raw.copy().load_data(verbose="error")
    reading.check_finite(raw, path)
    return _process_loaded(raw, settings, channels, path)


def _process_loaded(
    raw: mne.io.BaseRaw, settings: PreprocessSettings, channels: Sequence[str] | None, path: Path
) -> Connectome:
    """:func:`process_raw` of a loaded ``raw`` whose values are known to be finite (as
    :func:`reading.read_recording` leaves a file's)."""
    try:
        source_sfreq, signal_sha256 = float(raw.info["sfreq"]), reading.signal_sha256(raw)
        raw, _ = normalise_channels(raw, path=path)
        requested = channels if channels is not None else settings.channels
        channels = select_channel_set(
            [set(raw.ch_names)], None if requested is None else list(requested)
        )
        raw, interpolated = conform_channels(
            raw, list(channels), settings.max_interpolated, path=path
        )
        check_bands_fit_rate(settings.bands, raw.info["sfreq"])
        duration_s = raw.n_times / raw.info["sfreq"]
        epoch_length_s = (
            cleaning.auto_epoch_length(
                min(duration_s, settings.crop_s or np.inf), settings.window_s
            )
            if settings.epoch_length == "auto"
            else float(settings.epoch_length)
        )
        segments, onsets, n_rejected, excluded = clean_segments(raw, settings, epoch_length_s)
    except RecordingError as exc:
        if exc.path is None:
            exc.path = str(path)
        raise
    coh, wpli, covariance = recording_tokens(segments, settings.sfreq, settings.bands)
    if not (np.isfinite(coh).all() and np.isfinite(wpli).all()):
        raise RecordingError(
            "connectivity is undefined: a channel carries no signal in some segment",
            path=path,
            hint="check for flat channels",
        )
    return Connectome(
        coh=coh,
        wpli=wpli,
        channels=list(channels),
        bands=band_names(settings.bands),
        band_edges_hz=band_edges_hz(settings.bands),
        sfreq=settings.sfreq,
        segment_onsets_s=onsets,
        duration_s=duration_s,
        epoch_length_s=epoch_length_s,
        channels_interpolated=list(interpolated),
        n_segments_rejected=n_rejected,
        ica_excluded=excluded,
        source_sfreq=source_sfreq,
        signal_sha256=signal_sha256,
        covariance=covariance,
        covariance_bands=band_names(covariance_bands(settings.bands)),
    )


def preprocess_raw(
    raw: mne.io.BaseRaw,
    settings: PreprocessSettings | str | dict = "default",
    channels: Sequence[str] | None = None,
) -> Connectome:
    """Preprocess one recording held in memory into its connectivity tokens, touching no disk.

    The same steps as ``eegformer preprocess`` for one file (canonical 10-20 channels, missing
    ones interpolated up to ``settings.max_interpolated``, resampling, band-pass, average
    reference, segments, amplitude rejection, coherence and wPLI per band and segment), so an
    ``mne.io.Raw`` read from a file gives exactly the file's connectome.

    Parameters
    ----------
    raw : mne.io.BaseRaw
        The recording (any MNE reader, or made in memory). It is not modified; a Raw that is
        not preloaded is loaded into a copy.
    settings : PreprocessSettings | str | dict
        The settings: a :class:`PreprocessSettings`, a preset name (``"default"`` or
        ``"paper"``), or a dict as :meth:`PreprocessSettings.to_dict` gives (a model's stored
        settings, ``TrainedModel.preprocess_settings``). An ``epoch_length`` of ``"auto"`` is
        resolved from this recording's length alone.
    channels : sequence of str | None
        The channels to give the recording, in order; default ``settings.channels``, or else
        the standard 10-20 channels the recording has.

    Returns
    -------
    Connectome
        ``coh`` and ``wpli`` float32 (n_segments, n_bands, n_channels, n_channels), the channel
        and band names, band edges (Hz), segment onsets (s) and how the recording was treated;
        :meth:`Connectome.save` writes the file ``eegformer preprocess`` writes.

    Raises
    ------
    RecordingError
        The recording cannot be used (NaN values, too few 10-20 channels, too many missing,
        a rate too low for the bands, too short, every segment rejected), with the message
        ``eegformer preprocess`` puts in its manifest.
    UsageError
        Invalid settings.
    """
    if isinstance(settings, str):
        settings = PreprocessSettings.from_preset(settings)
    elif isinstance(settings, dict):
        settings = PreprocessSettings.from_dict(settings)
    elif not isinstance(settings, PreprocessSettings):
        raise UsageError(
            f"invalid settings {settings!r}; give a PreprocessSettings, a preset "
            f"name ({', '.join(map(repr, PRESETS))}) or a dict of settings"
        )
    if not isinstance(raw, mne.io.BaseRaw):
        raise UsageError(f"invalid raw of type {type(raw).__name__}; give an mne.io.Raw")
    return process_raw(raw, settings, channels)
