"""One recording -> its connectome (nothing written).

Read (any MNE format; lazily where the format allows) -> keep the EEG channels under canonical
10-20 names -> give it the run's channels (interpolating at most ``max_interpolated`` missing
ones) -> clean (:mod:`eegformer_cli.recordings.cleaning`) -> segment -> reject -> coherence and
wPLI per band and segment and the band covariances (:mod:`eegformer_cli.connectivity.tokens`).
A recording goes through all of it a chunk at a time (:mod:`eegformer_cli.recordings.chunks`),
so memory stays flat in its length: only the tokens grow with it (23 kB per 30 s segment at 19
channels and 8 bands), and ``eegformer preprocess`` writes them to files as they come
(``token_store``, :class:`output.TokenFiles`). :func:`process_recording` reads a file,
:func:`process_raw` / :func:`preprocess_raw` take an ``mne.io.Raw`` held in memory.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path

import mne
import numpy as np

from eegformer_cli.connectivity.bands import band_edges_hz, band_names, check_bands_fit_rate
from eegformer_cli.connectivity.tokens import TokenAccumulator, TokenArrays, covariance_bands
from eegformer_cli.errors import RecordingError, UsageError
from eegformer_cli.preprocess.output import Connectome, TokenFiles
from eegformer_cli.preprocess.settings import PRESETS, PreprocessSettings
from eegformer_cli.recordings import chunks, cleaning, reading
from eegformer_cli.recordings.channel_facts import channel_facts
from eegformer_cli.recordings.channels import canonical_names, channel_layout, select_channel_set

#: Where a recording's coherence and wPLI rows can go (:class:`TokenAccumulator`'s ``store``).
TokenStore = TokenArrays | TokenFiles


def process_recording(
    path: str | Path,
    settings: PreprocessSettings,
    channels: Sequence[str] | None = None,
    chunk_s: float = chunks.CHUNK_S,
    token_store: TokenStore | None = None,
) -> Connectome:
    """Connectome of one recording file (reads ``path``; writes nothing but what
    ``token_store`` writes).

    Parameters
    ----------
    path : a recording in any format :func:`reading.read_recording` reads. In a BIDS dataset,
        its ``channels.tsv`` decides which channels are EEG and which are bad, else its header
        (bad ones are treated as missing: interpolated within ``settings.max_interpolated``):
        :mod:`eegformer_cli.recordings.channel_facts`.
    settings : the preprocessing settings; ``settings.epoch_length`` "auto" is resolved from this
        recording's length alone (a run resolves it once for all recordings instead).
    channels : the channels to give the recording, in order (any spelling
        :func:`select_channel_set` accepts); default ``settings.channels``, or else the standard
        10-20 channels the recording has.
    chunk_s : seconds of the cleaned recording processed at a time
        (:class:`chunks.ChunkedRecording`); the tokens do not depend on it beyond float
        rounding.
    token_store : where the coherence and wPLI rows go as they are computed, and where the
        Connectome's ``coh`` and ``wpli`` come from (:class:`TokenFiles`: temporary files
        beside the output file, so a long recording's tokens are never all in memory); default
        memory.

    Raises
    ------
    RecordingError : unreadable (including NaN data or its ``channels.tsv``), too few channels,
        too many missing (bad ones included), rate too low for the bands, too short, or every
        segment rejected; one line, naming the file.
    """
    path = Path(path)
    # samples read chunk by chunk, unless the format cannot be read in spans
    raw = reading.read_recording(path, preload=not reading.reads_lazily(path))
    return _process(raw, settings, channels, path, chunk_s, token_store, path, False)


def process_raw(
    raw: mne.io.BaseRaw,
    settings: PreprocessSettings,
    channels: Sequence[str] | None = None,
    path: str | Path | None = None,
    chunk_s: float = chunks.CHUNK_S,
) -> Connectome:
    """Connectome of one recording already in memory (``raw`` is not modified; nothing is
    written). What :func:`process_recording` does after reading the file, so a Raw read from a
    file gives the same numbers as the file (see :func:`preprocess_raw` for the parameters; a
    Raw that is not loaded is read chunk by chunk, as a file). The channels its ``info["bads"]``
    marks are treated as missing, and so are those the BIDS ``channels.tsv`` of the file MNE
    read it from marks (:mod:`eegformer_cli.recordings.channel_facts`).

    ``path``: the recording's file, named in errors (default: the file MNE read ``raw`` from,
    or ``"raw"`` for a recording made in memory).
    """
    source = Path(raw.filenames[0]) if raw.filenames and raw.filenames[0] else None
    path = Path(path) if path is not None else (source or Path("raw"))
    return _process(raw, settings, channels, path, chunk_s, None, source, True)


def _process(
    raw: mne.io.BaseRaw,
    settings: PreprocessSettings,
    channels: Sequence[str] | None,
    path: Path,
    chunk_s: float,
    token_store: TokenStore | None,
    source: Path | None,
    in_memory: bool,
) -> Connectome:
    """:func:`process_raw` (``raw`` lazy or loaded), the rows into ``token_store``; ``source``
    (the file whose ``channels.tsv`` counts) and ``in_memory`` as :func:`channel_facts` takes
    them, which says which channels are EEG and which are bad (treated as missing)."""
    signal_hash = reading.SignalHash()
    try:
        facts = channel_facts(raw, source, in_memory)
        source_sfreq = float(raw.info["sfreq"])
        renamed = canonical_names(raw, path, facts.eeg)
        requested = channels if channels is not None else settings.channels
        channels = select_channel_set(
            [set(renamed.values())], None if requested is None else list(requested)
        )
        layout = channel_layout(
            raw,
            renamed,
            list(channels),
            settings.max_interpolated,
            path,
            marked_bad=facts.marked_bad,
        )
        check_bands_fit_rate(settings.bands, source_sfreq)
        duration_s = raw.n_times / source_sfreq
        epoch_length_s = (
            cleaning.auto_epoch_length(
                min(duration_s, settings.crop_s or np.inf), settings.window_s
            )
            if settings.epoch_length == "auto"
            else float(settings.epoch_length)
        )
        recording = chunks.ChunkedRecording(raw, layout, _cleaning(settings), path, chunk_s)
        tokens = _clean_and_tokenise(recording, settings, epoch_length_s, signal_hash, token_store)
    except RecordingError as exc:
        if exc.path is None:
            exc.path = str(path)
        raise
    if not tokens.finite:
        raise RecordingError(
            "connectivity is undefined: a channel carries no signal in some segment",
            path=path,
            hint="check for flat channels",
        )
    return Connectome(
        coh=tokens.coh,
        wpli=tokens.wpli,
        channels=list(channels),
        bands=band_names(settings.bands),
        band_edges_hz=band_edges_hz(settings.bands),
        sfreq=settings.sfreq,
        segment_onsets_s=tokens.onsets_s,
        duration_s=duration_s,
        epoch_length_s=epoch_length_s,
        channels_interpolated=list(layout.missing),
        channels_marked_bad=list(layout.marked_bad),
        n_segments_rejected=tokens.n_rejected,
        ica_excluded=tokens.ica_excluded,
        source_sfreq=source_sfreq,
        signal_sha256=signal_hash.hexdigest(),
        covariance=tokens.covariance,
        covariance_bands=band_names(covariance_bands(settings.bands)),
    )


def _cleaning(settings: PreprocessSettings) -> chunks.Cleaning:
    return chunks.Cleaning(
        settings.sfreq,
        settings.l_freq,
        settings.h_freq,
        settings.h_trans_bandwidth,
        settings.resample_method,
    )


class _Tokens(
    collections.namedtuple("_Tokens", "coh wpli covariance onsets_s n_rejected ica_excluded finite")
):
    """What :func:`_clean_and_tokenise` gives: the kept segments' coherence and wPLI float32
    (S, B, C, C), the band covariances float32 (B', C, C), the kept segments' onsets (s), the
    number of segments rejected, the ICLabel labels of the components removed and whether
    every coherence and wPLI value is finite."""


def _clean_and_tokenise(
    recording: chunks.ChunkedRecording,
    settings: PreprocessSettings,
    epoch_length_s: float,
    signal_hash: reading.SignalHash,
    token_store: TokenStore | None,
) -> _Tokens:
    """Clean ``recording`` (its first ``settings.crop_s`` seconds when set) chunk by chunk, cut
    it into segments, reject and tokenise them as they come; ``signal_hash`` gets every sample
    of the recording, cropped or not; the coherence and wPLI rows go to ``token_store``
    (default memory).

    Rejection is judged before the average reference (a flat channel stops being flat after
    it); the tokens are computed on the referenced data. Raises :class:`RecordingError` when
    the recording is too short or no segment is kept.
    """
    sfreq, window_s = settings.sfreq, settings.window_s
    stop = recording.n_times
    if settings.crop_s is not None:  # cropped after the filter: no edge effect at the cut
        stop = cleaning.crop_length(recording.n_times, sfreq, settings.crop_s)
    cleaning.check_holds_an_epoch(stop, sfreq, epoch_length_s, window_s)
    ica, excluded = _fit_ica(recording, settings, stop) if settings.ica else (None, [])
    n_windows, window_samples = cleaning.epoch_samples(epoch_length_s, sfreq, window_s)
    epoch = n_windows * window_samples
    accumulator = TokenAccumulator(
        sfreq,
        settings.bands,
        stop // epoch,
        len(recording.layout.channels),
        window_samples,
        token_store,
    )
    reader = chunks.SourceReader(recording.raw, recording.path, signal_hash)
    onsets: list[np.ndarray] = []
    reasons: collections.Counter[str] = collections.Counter()
    n_rejected = 0
    carried = np.zeros((2, len(recording.layout.channels), 0))  # the last chunk's partial epoch
    carried_start = 0
    for chunk in recording.chunks(
        0, stop, reader, ica=ica, ica_before_reference=settings.ica_before_reference
    ):
        both = np.concatenate([carried, np.stack([chunk.filtered, chunk.referenced])], axis=2)
        n_segments = both.shape[2] // epoch
        unreferenced, chunk_onsets = cleaning.segment(both[0], sfreq, epoch_length_s, window_s)
        keep, chunk_reasons = cleaning.reject_segments(
            unreferenced, recording.layout.channels, settings.flat_ptp_v, settings.absurd_ptp_v
        )
        del unreferenced
        referenced, _ = cleaning.segment(both[1], sfreq, epoch_length_s, window_s)
        accumulator.add(referenced[keep])
        onsets.append(carried_start / sfreq + chunk_onsets[keep])
        reasons.update(chunk_reasons)
        n_rejected += int((~keep).sum())
        carried = both[:, :, n_segments * epoch :].copy()
        carried_start += n_segments * epoch
    reader.finish()
    if accumulator.n_segments == 0:
        reason, _ = reasons.most_common(1)[0]
        raise RecordingError(
            f"all {n_rejected} segments rejected ({reason})",
            hint="check the recording; amplitudes are judged in volts",
        )
    coh, wpli, covariance = accumulator.result()
    return _Tokens(
        coh, wpli, covariance, np.concatenate(onsets), n_rejected, excluded, accumulator.finite
    )


def _fit_ica(
    recording: chunks.ChunkedRecording, settings: PreprocessSettings, stop: int
) -> tuple[mne.preprocessing.ICA, list[str]]:
    """The ICA of ``recording``'s first ``stop`` cleaned samples (the whole up to 30 minutes,
    else blocks spread over it: :func:`cleaning.ica_fit_spans`) and the ICLabel labels of the
    components it removes (:func:`cleaning.fit_ica_iclabel`)."""
    fit_on = recording.cleaned(
        cleaning.ica_fit_spans(stop, settings.sfreq), referenced=not settings.ica_before_reference
    )
    return cleaning.fit_ica_iclabel(
        mne.io.RawArray(fit_on, recording.info, verbose=False),
        settings.ica_n_components,
        settings.ica_random_state,
    )


def preprocess_raw(
    raw: mne.io.BaseRaw,
    settings: PreprocessSettings | str | dict = "default",
    channels: Sequence[str] | None = None,
) -> Connectome:
    """Preprocess one recording held in memory into its connectivity tokens, touching no disk.

    The same steps as ``eegformer preprocess`` for one file (canonical 10-20 channels, missing
    ones interpolated up to ``settings.max_interpolated``, resampling, band-pass,
    average reference, segments, amplitude rejection, coherence and wPLI per band and segment),
    so an ``mne.io.Raw`` read from a file gives exactly the file's connectome.

    Parameters
    ----------
    raw : mne.io.BaseRaw
        The recording (any MNE reader, or made in memory). It is not modified nor copied; a
        Raw that is not preloaded is read from its file a chunk at a time (flat memory).
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
