"""The connectome file: one recording's tokens, ``DIR/connectomes/<recording_id>.npz``.

The contract between ``preprocess`` and everything after it (training, inference, the Python
API): :class:`Connectome` (coherence and wPLI, float32 (n_segments, n_bands, C, C), with the
channel and band names, band edges, segment onsets, the band covariances and how the recording
was treated),
:meth:`Connectome.save` and :func:`load_connectome`. Keys: docs/architecture.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eegformer_cli import atomic


@dataclass
class Connectome:
    """The tokens of one recording and how they were made.

    Attributes
    ----------
    coh, wpli : float32 (n_segments, n_bands, n_channels, n_channels), symmetric, zero diagonal.
    channels : canonical channel names (n_channels,).
    bands : band names (n_bands,).
    band_edges_hz : float64 (n_bands, 2).
    sfreq : sampling rate after cleaning, Hz.
    segment_onsets_s : float64 (n_segments,), segment starts in the recording, s.
    duration_s : length of the recording, s.
    epoch_length_s : segment length, s.
    channels_interpolated : names of the channels filled by interpolation.
    n_segments_rejected : segments dropped by amplitude rejection.
    ica_excluded : ICLabel labels of the removed components (empty without ICA).
    source_sfreq : the recording's own sampling rate before resampling, Hz (NaN: not known, a
        file written before eegformer stored it).
    signal_sha256 : :func:`reading.signal_sha256` of the recording as read ("" when not known).
    record : bookkeeping stored with the file by :func:`run_preprocess` (settings hash, source
        size and mtime, processing fields of the manifest row); empty when not saved by a run.
    covariance : float32 (n_covariance_bands, n_channels, n_channels), the band-limited channel
        covariance over the kept segments, V^2 (``connectivity.tokens.recording_tokens``; rank
        C - 1 after the average reference), or None (a file written before eegformer stored it).
    covariance_bands : the bands of ``covariance`` (every band but the ratio tokens).
    """

    coh: np.ndarray
    wpli: np.ndarray
    channels: list[str]
    bands: list[str]
    band_edges_hz: np.ndarray
    sfreq: float
    segment_onsets_s: np.ndarray
    duration_s: float
    epoch_length_s: float
    channels_interpolated: list[str] = field(default_factory=list)
    n_segments_rejected: int = 0
    ica_excluded: list[str] = field(default_factory=list)
    record: dict = field(default_factory=dict)
    source_sfreq: float = math.nan
    signal_sha256: str = ""
    covariance: np.ndarray | None = None
    covariance_bands: list[str] = field(default_factory=list)

    @property
    def n_segments(self) -> int:
        return int(self.coh.shape[0])

    def save(self, path: str | Path) -> None:
        """Write an ``.npz`` atomically (keys of docs/architecture.md + ``record_json``)."""
        covariance = {} if self.covariance is None else {
            "covariance": np.asarray(self.covariance, dtype=np.float32),
            "covariance_bands": np.array(self.covariance_bands, dtype=str)}
        atomic.save_npz(
            path, coh=self.coh.astype(np.float32), wpli=self.wpli.astype(np.float32),
            channels=np.array(self.channels, dtype=str), bands=np.array(self.bands, dtype=str),
            band_edges_hz=np.asarray(self.band_edges_hz, dtype=np.float64),
            sfreq=np.float64(self.sfreq),
            segment_onsets_s=np.asarray(self.segment_onsets_s, dtype=np.float64),
            duration_s=np.float64(self.duration_s), epoch_length_s=np.float64(self.epoch_length_s),
            channels_interpolated=np.array(self.channels_interpolated, dtype=str),
            n_segments_rejected=np.int64(self.n_segments_rejected),
            ica_excluded=np.array(self.ica_excluded, dtype=str),
            record_json=np.array(json.dumps(self.record)),
            source_sfreq=np.float64(self.source_sfreq), signal_sha256=np.array(self.signal_sha256),
            **covariance)


def load_connectome(path: str | Path) -> Connectome:
    """Read a connectome file (``DIR/connectomes/RECORDING_ID.npz`` of ``eegformer
    preprocess``, or one written by :meth:`Connectome.save`).

    Parameters
    ----------
    path : str | os.PathLike
        The ``.npz`` file.

    Returns
    -------
    Connectome
        Its tokens (``coh``, ``wpli``), channels, bands and how the recording was treated.
    """
    with np.load(path, allow_pickle=False) as data:
        return Connectome(
            coh=data["coh"], wpli=data["wpli"], channels=data["channels"].tolist(),
            bands=data["bands"].tolist(), band_edges_hz=data["band_edges_hz"],
            sfreq=float(data["sfreq"]), segment_onsets_s=data["segment_onsets_s"],
            duration_s=float(data["duration_s"]), epoch_length_s=float(data["epoch_length_s"]),
            channels_interpolated=data["channels_interpolated"].tolist(),
            n_segments_rejected=int(data["n_segments_rejected"]),
            ica_excluded=data["ica_excluded"].tolist(),
            record=json.loads(str(data["record_json"])),
            # absent from files written before eegformer stored them
            source_sfreq=float(data["source_sfreq"]) if "source_sfreq" in data else math.nan,
            signal_sha256=str(data["signal_sha256"]) if "signal_sha256" in data else "",
            covariance=data["covariance"] if "covariance" in data else None,
            covariance_bands=data["covariance_bands"].tolist() if "covariance" in data else [])


def load_record(path: Path) -> dict | None:
    """The ``record_json`` of a connectome file, or None if it is missing or unreadable; with
    ``"has_covariance"`` added (False: written before eegformer stored the band covariances)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {**json.loads(str(data["record_json"])), "has_covariance": "covariance" in data}
    except Exception:  # a foreign or damaged file is simply recomputed
        return None
