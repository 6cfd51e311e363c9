"""What a recording says about its channels before any sample is read: which are EEG and which
are bad, and where each bad one is marked. Every way a recording reaches the model asks
:func:`channel_facts` (``preprocess`` of a file, :func:`~eegformer_cli.preprocess.preprocess_raw`
of an ``mne.io.Raw``, ``predict`` and ``explain`` of a file or a BIDS root, the Python API and
the estimator through them), so a recording gives the same connectome however it is given.

The rules, those of :func:`mne_bids.read_raw_bids`, whose Raw therefore gives what its file
gives:

- **types**: the recording's own (its file's header, or the Raw's ``info``), with those of its
  BIDS ``channels.tsv`` over them (:mod:`.bids`): a channel typed EOG, ECG, MISC ... there is
  not EEG, whatever its name;
- **bad channels**: those its ``channels.tsv`` marks bad when it has a ``status`` column, else
  those the file's header marks (FIF keeps ``info["bads"]``); for a Raw given in memory, those
  its ``info["bads"]`` marks as well (a channel marked bad by hand counts).

A bad channel is treated as missing: filled by interpolation within ``max_interpolated`` and
listed in ``channels_interpolated``, else the recording fails naming it and where it is marked
(:func:`eegformer_cli.recordings.channels.channel_layout`). MNE keeps a bad channel's samples
and only leaves it out of the average reference; here its samples are not used at all.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import mne

from eegformer_cli.errors import RecordingError, first_few
from eegformer_cli.recordings import bids

#: Where a bad channel is marked when no ``channels.tsv`` marks it: a file's header, or a Raw's
#: ``info`` given in memory.
IN_HEADER = "the recording's header"
IN_RAW = "the Raw's info['bads']"


@dataclass(frozen=True)
class ChannelFacts:
    """A recording's channel facts (module docstring); names as in the recording.

    Attributes
    ----------
    eeg : its EEG channels, in its order.
    marked_bad : ``{channel: where it is marked}`` for its bad channels, in its order; where is
        the ``channels.tsv`` file name, :data:`IN_HEADER` or :data:`IN_RAW`.
    sidecar : its BIDS ``channels.tsv``, or None (not in a BIDS dataset, or none there).
    header_bads : the bad channels its file's header (or the Raw's ``info``) marks.
    """

    eeg: tuple[str, ...]
    marked_bad: dict[str, str] = field(default_factory=dict)
    sidecar: bids.ChannelsSidecar | None = None
    header_bads: tuple[str, ...] = ()

    def key(self) -> str | None:
        """A short hash of what the facts change in the recording's connectome, kept in its
        record so that a rerun makes it again when they change; None when nothing does (no
        ``channels.tsv``, no bad channel). A ``channels.tsv`` with no bad channel marked in the
        header keeps :meth:`bids.ChannelsSidecar.key`, the key of earlier versions, whose
        connectomes it leaves as they were; a header's bad channels, which earlier versions
        only left out of the average reference, give a new one."""
        if self.sidecar is None and not self.marked_bad:
            return None
        if self.sidecar is not None and not self.header_bads:
            return self.sidecar.key()
        text = json.dumps([self.sidecar.key() if self.sidecar else None, list(self.marked_bad)])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def channel_facts(raw: mne.io.BaseRaw, path: Path | None, in_memory: bool) -> ChannelFacts:
    """The :class:`ChannelFacts` of ``raw`` (its header only is read; it is not modified).

    Parameters
    ----------
    raw : the recording, as read from ``path`` or given in memory.
    path : its file (for a Raw in memory: the file MNE read it from), whose BIDS
        ``channels.tsv`` counts; None for a recording made in memory.
    in_memory : whether ``raw`` was given in memory, so that its ``info["bads"]`` counts beside
        a ``channels.tsv``'s (module docstring).

    Raises
    ------
    RecordingError : the ``channels.tsv`` cannot be read, or names channels the recording lacks.
    """
    sidecar = bids.channels_sidecar(path) if path is not None else None
    typed_eeg = {raw.ch_names[i] for i in mne.pick_types(raw.info, eeg=True, exclude=[])}
    header_bads = tuple(name for name in raw.ch_names if name in raw.info["bads"])
    marked: dict[str, str] = {}
    if sidecar is not None:
        _check_names(sidecar, raw, path)
        eeg = set(sidecar.eeg) | (typed_eeg - set(sidecar.not_eeg))
        if sidecar.has_status:
            marked.update(dict.fromkeys(sidecar.bad, Path(sidecar.file).name))
    else:
        eeg = typed_eeg
    if sidecar is None or not sidecar.has_status or in_memory:
        for name in header_bads:
            marked.setdefault(name, IN_RAW if in_memory else IN_HEADER)
    return ChannelFacts(
        eeg=tuple(name for name in raw.ch_names if name in eeg),
        marked_bad={name: marked[name] for name in raw.ch_names if name in marked},
        sidecar=sidecar,
        header_bads=header_bads,
    )


def _check_names(sidecar: bids.ChannelsSidecar, raw: mne.io.BaseRaw, path: Path | None) -> None:
    """RecordingError when ``sidecar`` names channels ``raw`` lacks (mne-bids' own rule,
    ``on_ch_mismatch="raise"``)."""
    lacking = [name for name in sidecar.names if name not in raw.ch_names]
    if lacking:
        raise RecordingError(
            f"{Path(sidecar.file).name} names {len(lacking)} channel(s) the recording lacks "
            f"({first_few(lacking, 5)}); its channels are {first_few(raw.ch_names, 5)}",
            path=path,
            hint="channels.tsv must list the file's channels by their names in the file",
        )
