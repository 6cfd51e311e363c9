"""A recording cleaned chunk by chunk, in memory bounded whatever its length.

:class:`ChunkedRecording` reads a recording (lazily where its format allows,
:func:`eegformer_cli.recordings.reading.read_recording`) a chunk of about :data:`CHUNK_S`
seconds at a time, with a margin on either side, and cleans each chunk as
:mod:`eegformer_cli.recordings.cleaning` says: the run's channels (:class:`ChannelLayout`,
interpolation included), resampling, band-pass, optional ICA, average reference. Every step is
local in time (the polyphase resampler and the FIR band-pass read a few seconds around each
sample, the average reference and ICA one sample), so each chunk's samples away from its margins are
the whole recording's, up to the rounding of the filters' FFTs (1e-15 relative); the margins
are as wide as both filters reach, and a chunk that starts or ends the recording is extended
there as the whole recording would be. The resampler's factors (``up``/``down``) fix where a
chunk may start: at a multiple of ``down`` samples of the recording, which is ``up`` samples
of the cleaned one.

Memory: one chunk and its margins, in a few copies (~60 MB at 19 channels, 256 Hz, 5 minutes).
Formats MNE cannot read lazily (a ``.fif.gz``, an EEGLAB ``.set`` holding its data) are held
in memory as read, and only their cleaning is chunked.

While reading, :class:`SourceReader` checks that every sample is finite and feeds the
recording's hash (:class:`eegformer_cli.recordings.reading.SignalHash`) each sample once, in
time order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mne
import numpy as np

from eegformer_cli.recordings import cleaning, reading
from eegformer_cli.recordings.channels import ChannelLayout

#: Seconds of the cleaned recording per chunk (margins excluded). Longer chunks cost memory,
#: shorter ones the margins' repeated work (about 5 s on either side at 1 Hz high-pass).
CHUNK_S = 300.0


@dataclass(frozen=True)
class Cleaning:
    """The parameters of the cleaning steps (a preprocessing settings' cleaning part).

    ``sfreq``: the cleaned rate, Hz; ``l_freq``, ``h_freq``, ``h_trans_bandwidth``:
    :func:`cleaning.bandpass`'s; ``resample_method``: one of :data:`cleaning.RESAMPLE_METHODS`
    (``fft`` needs the whole recording: one chunk).
    """

    sfreq: float
    l_freq: float
    h_freq: float
    h_trans_bandwidth: float | str
    resample_method: str = "polyphase"


@dataclass
class CleanedChunk:
    """Consecutive samples of the cleaned recording.

    ``start``: the first one's index in the cleaned recording (at ``Cleaning.sfreq``);
    ``filtered``: float64 (C, n) volts, band-passed (and without the ICA components when ICA
    comes before the average reference); ``referenced``: the same samples after the
    average reference (and ICA when it comes after).
    """

    start: int
    filtered: np.ndarray
    referenced: np.ndarray


class SourceReader:
    """Reads spans of a recording's samples (every channel, as MNE reads them), checking that
    they are finite and hashing each sample once, in time order, into ``signal_hash`` (a
    :class:`reading.SignalHash`, or None)."""

    def __init__(self, raw: mne.io.BaseRaw, path: Path, signal_hash=None):
        self.raw, self.path, self.signal_hash = raw, path, signal_hash
        self.hashed_until = 0

    def read(self, start: int, stop: int) -> np.ndarray:
        """float64 (n_channels, stop - start) volts. RecordingError for unreadable data, or
        naming every channel holding NaN or infinite values (the whole file is checked then)."""
        samples = reading.read_samples(self.raw, start, stop, self.path)
        if not np.isfinite(samples).all():
            reading.check_finite(self.raw, self.path)  # raises, naming every such channel
        if self.signal_hash is not None and start <= self.hashed_until < stop:
            self.signal_hash.update(samples[:, self.hashed_until - start :])
            self.hashed_until = stop
        return samples

    def finish(self) -> None:
        """Read what is left after the last span read (a chunk's length at a time), so that the
        hash and the check cover the whole recording (a cropped one too)."""
        step = max(1, int(CHUNK_S * self.raw.info["sfreq"]))
        while self.hashed_until < self.raw.n_times:
            self.read(self.hashed_until, min(self.hashed_until + step, self.raw.n_times))


class ChunkedRecording:
    """A recording (an ``mne.io.Raw``, lazy or loaded) cleaned chunk by chunk.

    Parameters
    ----------
    raw : the recording as read; only its header is read here.
    layout : its channels for the run (:func:`channel_layout`).
    steps : the cleaning parameters.
    path : the recording's file, named in errors.
    chunk_s : seconds of cleaned recording per chunk (rounded to the resampler's alignment);
        ``inf``: the whole recording at once (as ``fft`` resampling needs).

    Attributes: ``n_times`` (samples of the cleaned recording), ``info`` (its channels at the
    cleaned rate and montage set).
    """

    def __init__(
        self,
        raw: mne.io.BaseRaw,
        layout: ChannelLayout,
        steps: Cleaning,
        path: Path,
        chunk_s: float = CHUNK_S,
    ):
        self.raw, self.layout, self.steps, self.path = raw, layout, steps, path
        self.source_sfreq = float(raw.info["sfreq"])
        self.n_source = raw.n_times
        self.n_times = cleaning.resampled_length(
            self.n_source, self.source_sfreq, steps.sfreq, steps.resample_method
        )
        self.info = layout.info(steps.sfreq)
        if self.source_sfreq == steps.sfreq:
            self.up = self.down = 1
        else:
            self.up, self.down = cleaning.resample_factors(self.source_sfreq, steps.sfreq)
        whole = steps.resample_method == "fft" or not np.isfinite(chunk_s)
        core = max(self.up, int(chunk_s * steps.sfreq) // self.up * self.up) if not whole else 0
        self.core = self.n_times if whole or core >= self.n_times else core
        # cleaned samples a chunk's edge disturbs: the band-pass's whole length (so that a chunk
        # is never shorter than the filter, whose edge padding then equals the whole
        # recording's) plus the resampler's reach, in recording samples a multiple of ``down``
        reach = (
            cleaning.bandpass_length(
                steps.sfreq, steps.l_freq, steps.h_freq, steps.h_trans_bandwidth
            )
            + (cleaning.resample_reach(self.source_sfreq, steps.sfreq) * self.up) // self.down
            + 2
        )
        self.margin = -(-reach * self.down // self.up) // self.down * self.down + self.down

    def _source_index(self, index: int) -> int:
        """The recording's sample at cleaned sample ``index`` (a multiple of ``up``, or the end)."""
        if index >= self.n_times:
            return self.n_source
        return index * self.down // self.up

    def chunks(
        self,
        start: int = 0,
        stop: int | None = None,
        reader: SourceReader | None = None,
        ica: mne.preprocessing.ICA | None = None,
        ica_before_reference: bool = False,
    ) -> Iterator[CleanedChunk]:
        """The cleaned samples ``start`` to ``stop`` (default: to the end), chunk by chunk, in
        order, read through ``reader`` (default: a new one that hashes nothing), without
        ``ica``'s excluded components (applied before the average reference with
        ``ica_before_reference``, else after it)."""
        stop = self.n_times if stop is None else min(stop, self.n_times)
        reader = reader or SourceReader(self.raw, self.path)
        steps = self.steps
        first = start // self.up * self.up
        for core_start in range(first, stop, self.core):
            core_stop = min(core_start + self.core, stop)
            low = max(0, self._source_index(core_start) - self.margin)
            high = min(self.n_source, -(-core_stop * self.down // self.up) + self.margin)
            if core_stop >= self.n_times or self.core >= self.n_times:
                high = self.n_source
            if core_start == 0 or self.core >= self.n_times:
                low = 0
            samples = self.layout.conform(reader.read(low, high))
            resampled = cleaning.resample(
                samples, self.source_sfreq, steps.sfreq, steps.resample_method
            )
            del samples
            filtered = cleaning.bandpass(
                resampled, steps.sfreq, steps.l_freq, steps.h_freq, steps.h_trans_bandwidth
            )
            del resampled
            offset = low * self.up // self.down
            kept = slice(max(core_start, start) - offset, core_stop - offset)
            filtered = filtered[:, kept]
            if ica is not None and ica_before_reference:
                filtered = cleaning.apply_ica(ica, filtered, self.info)
            referenced = cleaning.average_reference(filtered)
            if ica is not None and not ica_before_reference:
                referenced = cleaning.apply_ica(ica, referenced, self.info)
            yield CleanedChunk(max(core_start, start), filtered, referenced)

    def cleaned(self, spans: list[tuple[int, int]], referenced: bool) -> np.ndarray:
        """The cleaned samples of ``spans`` (``(start, stop)`` pairs), joined: float64
        (C, total), after the average reference or before it (no ICA)."""
        parts = [
            chunk.referenced if referenced else chunk.filtered
            for start, stop in spans
            for chunk in self.chunks(start, stop)
        ]
        return np.concatenate(parts, axis=1)
