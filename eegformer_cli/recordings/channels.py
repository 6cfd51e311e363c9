"""Channel names: from whatever a recording calls its electrodes to one canonical 10-20 set.

Recordings name the same electrode in many ways: ``EEG Fp1-REF`` (TUH), ``FP1``, ``Fp1-LE``,
``EEG Fp1`` (PhysioNet), ``Fp1.`` (BCI2000), and with old or new 10-20 names (T3 = T7,
T4 = T8, T5 = P7, T6 = P8). :func:`canonical_channel_name` maps each to the name it has in
MNE's 10-05 template montage (``colin27_1005``, formerly called ``standard_1005``), with the new
names as canonical. :func:`normalise_channels` applies it to a recording,
:func:`select_channel_set` chooses the channels of a run, and :func:`conform_channels` gives
every recording exactly those channels (interpolating a few missing ones from the montage).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import mne
import numpy as np

from eegformer_cli.choices import STANDARD_1020
from eegformer_cli.errors import InputDataError, RecordingError, UsageError

#: The template montage giving electrode positions (MNE's ``standard_1005``, renamed in MNE 1.13;
#: identical positions).
MONTAGE_NAME = "colin27_1005"

#: Old 10-20 names and the electrode they now go by.
OLD_TO_NEW_NAMES = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}

#: Parts after a hyphen (what the electrode was recorded against) that still denote a single
#: (referenced) electrode:
#: ``REF``/``Ref``, linked ears ``LE``, average ``AR``/``AVG``/``CAR``, ears/mastoids.
#: A scalp electrode after the hyphen (``Fp1-F7``) is a bipolar derivation and is not accepted.
REFERENCE_SUFFIXES = frozenset(
    {
        "REF",
        "LE",
        "RE",
        "AR",
        "AV",
        "AVG",
        "AVERAGE",
        "CAR",
        "A1",
        "A2",
        "A1A2",
        "A12",
        "M1",
        "M2",
        "M1M2",
        "M12",
    }
)

#: The fewest 10-20 channels a recording must have to be usable at all.
MIN_RECORDING_CHANNELS = 3

_EEG_PREFIX = re.compile(r"^EEG[\s_:]+", re.IGNORECASE)
# A numbered-cap name such as BioSemi's A1..H32 or EGI's E1..E256: a letter that no 10-20 name
# starts with alone, then a number.
_NUMBERED_CAP_NAME = re.compile(r"^[BDEGH]\d{1,3}$", re.IGNORECASE)


@cache
def montage_channel_names() -> tuple[str, ...]:
    """Every electrode name of the 10-05 template montage, in MNE's spelling (343 names)."""
    return tuple(mne.channels.make_standard_montage(MONTAGE_NAME).ch_names)


@cache
def _canonical_by_upper_name() -> dict[str, str]:
    """``"FP1" -> "Fp1"``, ``"T3" -> "T7"``: upper-case name to canonical montage name."""
    lookup = {name.upper(): name for name in montage_channel_names()}
    for old, new in OLD_TO_NEW_NAMES.items():
        lookup[old.upper()] = new
    return lookup


def canonical_channel_name(name: str) -> str | None:
    """The canonical electrode name of a recorded channel name, or None if it is not one.

    Strips an ``EEG`` type prefix (``EEG Fp1``, ``EEG_Fp1``), a suffix of what it was recorded
    against (``-REF``, ``-LE``, ``-A1``, ``-AVG``, see :data:`REFERENCE_SUFFIXES`), trailing dots
    and surrounding blanks; matches case-insensitively against the 10-05 montage; maps the old
    names T3/T4/T5/T6 to T7/T8/P7/P8. Returns the montage spelling (``"FP1" -> "Fp1"``).

    Ear and mastoid electrodes (A1, A2, M1, M2) are valid montage names and are returned as such
    (``"EEG A2-A1" -> "A2"``); they are not in :data:`STANDARD_1020`, so the default channel set
    leaves them out. Non-EEG channels (``ECG ECG``, ``Status``, ``STI 014``, ``EOG``,
    ``Photic``), numbered channels (``1``, ``EEG 001``) and bipolar derivations (``Fp1-F7``)
    give None.
    """
    core = _EEG_PREFIX.sub("", name.strip()).strip()
    if "-" in core:
        electrode, _, suffix = core.partition("-")
        if suffix.strip().upper() not in REFERENCE_SUFFIXES:
            return None
        core = electrode
    core = core.strip().rstrip(".").strip()
    return _canonical_by_upper_name().get(core.upper())


def _looks_like_numbered_cap(names: list[str]) -> bool:
    """True when names follow a numbered cap layout (B1, D7, E12 ...), where "C3" or "F7" is a
    cap position, not the 10-20 electrode of that name."""
    return sum(bool(_NUMBERED_CAP_NAME.match(name.strip())) for name in names) >= 4


def _listed(names, limit: int = 8) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _data_file(raw: mne.io.BaseRaw) -> str | None:
    """The file MNE read the data from (for BrainVision the .eeg, not the .vhdr)."""
    return str(raw.filenames[0]) if raw.filenames and raw.filenames[0] else None


def canonical_names(
    raw: mne.io.BaseRaw, path: str | Path | None = None, eeg: Sequence[str] | None = None
) -> dict[str, str]:
    """``{original name: canonical name}`` for the EEG channels of ``raw`` with 10-20/10-05
    names, in the recording's order (reads the header only: ``raw`` is not copied). ``eeg``:
    its EEG channels (:attr:`.channel_facts.ChannelFacts.eeg`; default those typed EEG in
    ``raw``).

    Raises
    ------
    RecordingError : two channels are the same electrode (``T3`` and ``T7``); the channel names
        follow a numbered cap layout (BioSemi/EGI); no channel name is a 10-20 electrode; fewer
        than :data:`MIN_RECORDING_CHANNELS` are. ``path`` is the recording's file named in them
        (default: the file MNE read the data from, which for BrainVision is the .eeg rather
        than the .vhdr).
    """
    path = path or _data_file(raw)
    typed = mne.pick_types(raw.info, eeg=True, exclude=[])
    eeg_set = set(eeg) if eeg is not None else {raw.ch_names[i] for i in typed}
    eeg_names = [name for name in raw.ch_names if name in eeg_set]
    if _looks_like_numbered_cap(eeg_names):
        raise RecordingError(
            f"channel names follow a numbered cap layout ({_listed(eeg_names, 4)}), not 10-20 "
            "electrode names",
            path=path,
            hint="rename the channels to 10-20 names (e.g. with mne.rename_channels) first",
        )
    renamed: dict[str, str] = {}
    original_of: dict[str, str] = {}
    for name in eeg_names:
        canonical = canonical_channel_name(name)
        if canonical is None:
            continue
        if canonical in original_of:
            raise RecordingError(
                f"channels {original_of[canonical]!r} and {name!r} are both electrode {canonical}",
                path=path,
                hint="drop one of them from the file",
            )
        original_of[canonical] = name
        renamed[name] = canonical
    if not renamed:
        raise RecordingError(
            f"no channel names recognised as 10-20 electrodes (found: {_listed(raw.ch_names)})",
            path=path,
            hint="name the channels Fp1, F3, ... or EEG Fp1-REF style",
        )
    if len(renamed) < MIN_RECORDING_CHANNELS:
        raise RecordingError(
            f"only {len(renamed)} channel(s) recognised as 10-20 electrodes "
            f"({', '.join(renamed.values())}); at least "
            f"{MIN_RECORDING_CHANNELS} are needed",
            path=path,
        )
    return renamed


def normalise_channels(
    raw: mne.io.BaseRaw, path: Path | None = None, eeg: Sequence[str] | None = None
) -> tuple[mne.io.BaseRaw, dict[str, str]]:
    """Keep the EEG channels with 10-20/10-05 names, renamed to their canonical names.

    Parameters
    ----------
    raw : the recording as read (preloaded or not; it is not modified).
    path : the recording's file, named in errors (see :func:`canonical_names`).
    eeg : its EEG channels (default: those typed EEG), as in :func:`canonical_names`.

    Returns
    -------
    normalised : a new Raw holding only the recognised EEG channels (channel type ``eeg``),
        renamed, in the recording's order.
    renamed : ``{original name: canonical name}`` for the channels kept.

    Raises
    ------
    RecordingError : as :func:`canonical_names`.
    """
    renamed = canonical_names(raw, path, eeg)
    normalised = raw.copy().pick(list(renamed))
    normalised.rename_channels(renamed)
    normalised.set_channel_types(dict.fromkeys(normalised.ch_names, "eeg"), on_unit_change="ignore")
    return normalised, renamed


def select_channel_set(
    available_per_recording: list[set[str]], requested: list[str] | None, min_channels: int = 3
) -> list[str]:
    """The channels of a run.

    Parameters
    ----------
    available_per_recording : the canonical channel names of each readable recording.
    requested : an explicit channel list (``--channels``), any spelling
        :func:`canonical_channel_name` accepts; or None for the default rule.
    min_channels : the fewest channels a run may have.

    Returns
    -------
    The requested channels (canonical names, in the order given), or by default the channels of
    :data:`STANDARD_1020` that every recording has, in :data:`STANDARD_1020` order.

    Raises
    ------
    UsageError : an explicit name is not an electrode name, is given twice, or the list is
        shorter than ``min_channels``.
    InputDataError : the default rule leaves fewer than ``min_channels`` channels.
    """
    if requested is not None:
        return _validated_channel_list(requested, min_channels)
    if not available_per_recording:
        raise InputDataError("no readable recording to choose the channel set from")
    common = set.intersection(*map(set, available_per_recording))
    channels = [name for name in STANDARD_1020 if name in common]
    if len(channels) < min_channels:
        raise InputDataError(
            f"only {len(channels)} of the 19 standard 10-20 channels ({', '.join(channels) or 'none'}) "
            f"are present in every recording; at least {min_channels} are needed",
            hint="pass --channels with the channels you need and --max-interpolated to fill gaps, "
            "or leave out the recordings with few channels",
        )
    return channels


def _validated_channel_list(requested: list[str], min_channels: int) -> list[str]:
    known = [canonical_channel_name(name) for name in requested]
    unknown = [name for name, canon in zip(requested, known) if canon is None]
    if unknown:
        raise UsageError(
            f"unknown channel name(s) for --channels: {', '.join(map(repr, unknown))}; "
            f"valid names are the 10-20 channels {', '.join(STANDARD_1020)} or any "
            "10-05 name of MNE's standard_1005 montage (e.g. AF3, FC1, CPz, POz, Oz)"
        )
    canonical = [name for name in known if name is not None]  # all of them
    repeated = sorted({name for name in canonical if canonical.count(name) > 1})
    if repeated:
        raise UsageError(
            f"--channels names the same electrode twice: {', '.join(repeated)} "
            "(old and new names such as T3/T7 are the same electrode)"
        )
    if len(canonical) < min_channels:
        raise UsageError(
            f"--channels lists {len(canonical)} channel(s); at least {min_channels} are needed"
        )
    return canonical


def conform_channels(
    raw: mne.io.BaseRaw, channels: list[str], max_interpolated: int, path: Path | None = None
) -> tuple[mne.io.BaseRaw, list[str]]:
    """Give a normalised recording exactly ``channels``, in that order, with montage positions.

    Missing channels are added and filled by spherical-spline interpolation
    (:meth:`mne.io.Raw.interpolate_bads`, head origin fitted to the montage) when there are at most
    ``max_interpolated`` of them. The result has the 10-05 template montage set (replacing any
    positions stored in the file, so that every recording uses the same geometry), so later
    steps (bad-channel interpolation, ICLabel) have positions.

    Parameters
    ----------
    raw : a recording from :func:`normalise_channels` (canonical names); loaded if it is not yet
        and a channel must be interpolated. It is not modified.
    channels : the run's canonical channel names.
    max_interpolated : the most channels that may be interpolated.
    path : the recording's file, named in errors (as in :func:`normalise_channels`).

    Returns
    -------
    conformed : a new Raw with ``channels`` in order.
    interpolated : the names of the interpolated channels, in ``channels`` order.

    Raises
    ------
    RecordingError : more than ``max_interpolated`` channels are missing.
    """
    missing = [name for name in channels if name not in raw.ch_names]
    if len(missing) > max_interpolated:
        raise RecordingError(
            f"missing channels {', '.join(missing)} (allowed to interpolate at "
            f"most {max_interpolated}; use --max-interpolated)",
            path=path or _data_file(raw),
        )
    conformed = raw.copy().pick([name for name in channels if name in raw.ch_names])
    if missing:
        conformed.load_data()
        placeholders = mne.io.RawArray(
            np.zeros((len(missing), conformed.n_times)),
            mne.create_info(missing, conformed.info["sfreq"], "eeg"),
            verbose="error",
        )
        conformed.add_channels([placeholders], force_update_info=True)
    conformed.reorder_channels(list(channels))
    conformed.set_montage(MONTAGE_NAME, verbose="error")
    if missing:
        recorded_bads = [name for name in conformed.info["bads"] if name not in missing]
        conformed.info["bads"] = list(missing)
        conformed.interpolate_bads(reset_bads=True, origin="auto", verbose="error")
        conformed.info["bads"] = recorded_bads
    return conformed, missing


@dataclass(frozen=True)
class ChannelLayout:
    """How a recording's samples become the run's channels, without reading them
    (:func:`channel_layout`); :meth:`conform` applies it to a chunk of samples.

    Attributes
    ----------
    channels : the run's canonical channel names, in order (C,).
    rows : int (n_present,), the row in the recording (its channels as read) of each channel it
        has, in ``channels`` order.
    present : int (n_present,), the positions of those channels in ``channels``.
    missing : the channels filled by interpolation (absent from the recording, or marked bad:
        :mod:`.channel_facts`), in ``channels`` order.
    interpolation : float64 (n_missing, n_present), each missing channel as a weighted sum of
        the present ones (MNE's spherical splines on the template montage).
    marked_bad : those of ``missing`` that the recording has but marks bad, in ``channels``
        order.
    """

    channels: tuple[str, ...]
    rows: np.ndarray
    present: np.ndarray
    missing: tuple[str, ...]
    interpolation: np.ndarray
    marked_bad: tuple[str, ...] = ()

    def conform(self, samples: np.ndarray) -> np.ndarray:
        """The run's channels float64 (C, n) from ``samples`` (n_recording_channels, n), the
        recording's channels as read."""
        present = samples[self.rows]
        if not self.missing:
            return present
        out = np.empty((len(self.channels), samples.shape[1]))
        out[self.present] = present
        out[[self.channels.index(name) for name in self.missing]] = self.interpolation @ present
        return out

    def info(self, sfreq: float) -> mne.Info:
        """An ``mne.Info`` of the run's channels at ``sfreq`` Hz: EEG, the template montage."""
        info = mne.create_info(list(self.channels), sfreq, "eeg")
        info.set_montage(MONTAGE_NAME, verbose="error")
        return info


def channel_layout(
    raw: mne.io.BaseRaw,
    renamed: dict[str, str],
    channels: list[str],
    max_interpolated: int,
    path: Path | None = None,
    marked_bad: Mapping[str, str] | None = None,
) -> ChannelLayout:
    """The :class:`ChannelLayout` giving a recording exactly ``channels``, reading no sample.

    ``renamed``: :func:`canonical_names` of ``raw``. Missing channels are interpolated as
    :func:`conform_channels` does (at most ``max_interpolated`` of them, else RecordingError):
    its interpolation is linear in the present channels' samples, so it is found once, by
    conforming an identity matrix (one sample per present channel), and applied to every chunk.
    ``marked_bad``: ``{channel (name as in raw): where it is marked bad}``
    (:attr:`.channel_facts.ChannelFacts.marked_bad`): they count as missing, and the error
    names them and where they are marked.
    """
    canonical_of = dict(renamed)
    marked_bad = marked_bad or {}
    marked_in = {
        canonical_of[name]: where for name, where in marked_bad.items() if name in canonical_of
    }
    row_of = {
        canonical_of[name]: index
        for index, name in enumerate(raw.ch_names)
        if name in canonical_of and canonical_of[name] not in marked_in
    }
    missing = [name for name in channels if name not in row_of]
    marked = [name for name in missing if name in marked_in]
    if len(missing) > max_interpolated:
        because = "".join(
            f"{', '.join(name for name in marked if marked_in[name] == where)} marked bad in "
            f"{where}; "
            for where in dict.fromkeys(marked_in[name] for name in marked)
        )
        raise RecordingError(
            f"missing channels {', '.join(missing)} ({because}allowed to interpolate at "
            f"most {max_interpolated}; use --max-interpolated)",
            path=path or _data_file(raw),
        )
    present = [name for name in channels if name in row_of]
    interpolation = np.zeros((0, len(present)))
    if missing:
        identity = mne.io.RawArray(
            np.eye(len(present)),
            mne.create_info(present, raw.info["sfreq"], "eeg"),
            verbose="error",
        )
        conformed, _ = conform_channels(identity, list(channels), max_interpolated)
        interpolation = conformed.get_data(picks=missing)
    return ChannelLayout(
        channels=tuple(channels),
        rows=np.array([row_of[name] for name in present], dtype=int),
        present=np.array([channels.index(name) for name in present], dtype=int),
        missing=tuple(missing),
        interpolation=interpolation,
        marked_bad=tuple(marked),
    )
