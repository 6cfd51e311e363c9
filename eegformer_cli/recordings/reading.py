"""Finding recordings on disk and reading them with MNE, with one-line errors for bad files.

Supported formats (:data:`RECORDING_SUFFIXES`): EDF/EDF+, BDF, GDF, BrainVision (``.vhdr``
with its ``.eeg``/``.vmrk``), EEGLAB (``.set``, data inside or in a ``.fdt``), FIF
(``.fif``/``.fif.gz``). Suffixes are matched case-insensitively (``.EDF`` from hospital
systems). Every file is read by :func:`mne.io.read_raw`; what MNE raises for a bad file (often a
long or cryptic message) becomes a :class:`RecordingError` with a short reason naming the file.

Most formats are read lazily: the header first, then any span of samples on demand, so a long
recording is never held in memory whole (:mod:`eegformer_cli.recordings.chunks`). Two are held
whole: a compressed FIF (``.fif.gz``: MNE would decompress from the file's start for every
span, so it is loaded once: :func:`reads_lazily`) and an EEGLAB ``.set`` holding its data (MNE
reads the whole MAT file; a ``.set`` with a ``.fdt`` is read lazily).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import mne
import numpy as np

from eegformer_cli.errors import InputDataError, RecordingError, UsageError
from eegformer_cli.recordings import bids

#: Suffixes of the recordings whose spans of samples cannot be read on their own (see the
#: module docstring): :func:`reads_lazily` is False for them.
LOADED_WHOLE_SUFFIXES = (".fif.gz",)
#: Suffix (lower case) -> format name, for every file treated as a recording. Companion files
#: (.eeg/.vmrk of BrainVision, .fdt of EEGLAB) are read through their header and are not listed.
FORMAT_BY_SUFFIX = {
    ".edf": "EDF",
    ".bdf": "BDF",
    ".gdf": "GDF",
    ".vhdr": "BrainVision",
    ".set": "EEGLAB",
    ".fif": "FIF",
    ".fif.gz": "FIF",
}
RECORDING_SUFFIXES: tuple[str, ...] = tuple(FORMAT_BY_SUFFIX)

#: Files that belong to a recording but are not one: suffix -> the header file to give instead.
COMPANION_SUFFIXES = {".eeg": ".vhdr", ".vmrk": ".vhdr", ".fdt": ".set"}

# The first bytes of each binary format (BrainVision headers are text and checked by MNE).
_MAGIC_BY_FORMAT = {
    "EDF": (b"0       ",),
    "BDF": (b"\xffBIOSEMI",),
    "GDF": (b"GDF",),
    "FIF": (b"\x00\x00\x00\x64", b"\x1f\x8b"),  # FIFF_FILE_ID tag, or gzip
    "EEGLAB": (b"MATLAB", b"\x89HDF"),
}  # MAT-file v5-v7, or v7.3 (HDF5)
# Values checked for NaN at a time (80 MB as float64), to bound the memory of the check.
_FINITE_CHECK_VALUES = 10_000_000


def recording_suffix(path: Path) -> str | None:
    """The recording suffix of ``path`` in lower case (``.fif.gz`` counts as one), or None."""
    name = path.name.lower()
    matches = [suffix for suffix in RECORDING_SUFFIXES if name.endswith(suffix)]
    return max(matches, key=len) if matches else None


def input_folder(path: str | Path) -> Path:
    """The folder an input of :func:`find_recordings` stands for, absolute: a folder resolved
    (its recordings' paths start with it), or a recording file's resolved folder."""
    path = Path(path)
    return path.absolute().parent.resolve() if recording_suffix(path) else path.resolve()


def _is_recording_file(path: Path) -> bool:
    return path.is_file() and not path.name.startswith(".") and recording_suffix(path) is not None


def _walk_recordings(folder: Path) -> list[Path]:
    """Recording files under ``folder``, skipping hidden and temporary entries (``.*``, which
    includes ``.tmp-*``)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found.extend(Path(dirpath) / f for f in filenames if _is_recording_file(Path(dirpath) / f))
    return found


def _folder_recordings(folder: Path, selection: bids.Selection) -> list[Path]:
    """The recording files of ``folder``: a BIDS root's as mne-bids finds them, with
    ``selection`` (:func:`bids.dataset_recordings`), any other folder's by walking it."""
    if bids.is_root(folder):
        return [
            path for path in bids.dataset_recordings(folder, selection) if _is_recording_file(path)
        ]
    return _walk_recordings(folder)


#: Continuation parts of a FIF recording split by MNE (``Raw.save(split_size=...)``): BIDS naming
#: ``..._split-02_eeg.fif`` and Neuromag naming ``..._raw-1.fif``.
_BIDS_SPLIT_PART = re.compile(r"^(?P<head>.*_split-)(?P<number>\d+)(?P<tail>_.*\.fif)$")
_NEUROMAG_SPLIT_PART = re.compile(r"^(?P<head>.*)-(?P<number>\d+)\.fif$")


def first_split_part(path: Path) -> Path | None:
    """The first file of the split FIF recording that ``path`` continues, or None when ``path``
    is not named as a continuation part. MNE reads every part when given the first one, so the
    other parts are not recordings of their own."""
    split = _BIDS_SPLIT_PART.match(path.name)
    if split and int(split["number"]) > 1:
        first = "1".zfill(len(split["number"]))
        return path.with_name(f"{split['head']}{first}{split['tail']}")
    neuromag = _NEUROMAG_SPLIT_PART.match(path.name)
    if neuromag:
        return path.with_name(f"{neuromag['head']}.fif")
    return None


def find_recordings(
    inputs: Sequence[str | Path], selection: bids.Selection | None = None
) -> list[Path]:
    """The recording files named by ``inputs``: files, folders (searched recursively), BIDS roots
    (the recordings of their ``sub-*`` folders, found by mne-bids: :mod:`.bids`).

    Returns absolute paths in the order the inputs were given (a folder's recordings sorted),
    each once (the first mention counts). A file given explicitly must have a recording suffix;
    hidden and temporary files (``.tmp-*``) inside folders are skipped, and so are the
    continuation parts of a split FIF recording whose first part is found too (MNE reads them
    with it: one recording). ``selection`` (``preprocess --task/--session/--run``) keeps the
    BIDS roots' recordings of those entities, before any is read.

    Raises
    ------
    InputDataError : an input does not exist, is a file of an unsupported format, or is a folder
        holding no recording (none that ``selection`` selects).
    UsageError : a ``selection`` with an input that is not a BIDS root, or a label that no
        recording of the roots has (the message lists those they have).
    """
    selection = _checked_selection(inputs, selection or bids.Selection())
    found: dict[Path, None] = {}  # insertion-ordered set
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            in_folder = _folder_recordings(path.resolve(), selection)
            if not in_folder:
                raise InputDataError(
                    f"no recording matches {selection.described()}"
                    if selection
                    else f"folder holds no recordings (looked for {', '.join(RECORDING_SUFFIXES)})",
                    path=path,
                )
            found.update(dict.fromkeys(sorted(in_folder)))
        elif recording_suffix(path) is None:
            raise _unsupported_format_error(path, InputDataError)
        else:  # the folder resolved, the file's own name kept, as for a folder's files: a
            # symlinked recording (DataLad / git-annex) keeps its name, not its annex key's
            found[path.absolute().parent.resolve() / path.name] = None
    return [path for path in found if first_split_part(path) not in found]


def _checked_selection(inputs: Sequence[str | Path], selection: bids.Selection) -> bids.Selection:
    """``selection`` in the labels of the inputs' BIDS roots (:meth:`bids.Selection.resolved`),
    after checking that every input exists and, with a selection, is a BIDS root."""
    for given in inputs:
        if not Path(given).exists():
            raise InputDataError(
                "no such file or folder", path=given, hint="check the recording paths given"
            )
    if not selection:
        return selection
    others = [
        Path(given) for given in inputs if not (Path(given).is_dir() and bids.is_root(Path(given)))
    ]
    if others:
        raise UsageError(
            f"{selection.described()} selects among the recordings of a BIDS root, and "
            f"{others[0]} is not one (a folder with {bids.DESCRIPTION_FILE})",
            hint="give the BIDS root, or leave out --task/--session/--run",
        )
    return selection.resolved([Path(given).resolve() for given in inputs])


def _unsupported_format_error(path: Path, error_class: type[InputDataError]) -> InputDataError:
    """A companion file (.vmrk, .eeg, .fdt) or a file of a format not read here."""
    header_suffix = COMPANION_SUFFIXES.get(path.suffix.lower())
    if header_suffix:
        return error_class(
            f"a companion file, not a recording: give the {header_suffix} file", path=path
        )
    return error_class(
        f"unsupported format ({''.join(path.suffixes) or 'no suffix'})",
        path=path,
        hint=f"supported: {', '.join(RECORDING_SUFFIXES)}",
    )


def _file_error(path: Path, reason: str, hint: str | None = None) -> RecordingError:
    return RecordingError(reason, path=path, hint=hint)


def _first_line(exc: BaseException, path: Path, limit: int = 120) -> str:
    """MNE's message on one line of at most ``limit`` characters, the file named only once."""
    text = " ".join(str(exc).replace(str(path), path.name).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_file_signature(path: Path, fmt: str) -> None:
    """Reject an empty file or one whose first bytes are not those of ``fmt``."""
    size = path.stat().st_size
    if size == 0:
        raise _file_error(path, "empty file (0 bytes)")
    magic = _MAGIC_BY_FORMAT.get(fmt)
    if magic is None:
        return
    with open(path, "rb") as handle:
        head = handle.read(8)
    if not head.startswith(magic):
        looks_like_text = all(32 <= b < 127 or b in b"\t\r\n" for b in head)
        what = "a text file" if looks_like_text else "binary data of another kind"
        raise _file_error(
            path,
            f"not a valid {fmt} file: it starts like {what}, without the {fmt} header signature",
        )


def _check_edf_record_count(path: Path, fmt: str) -> None:
    """Reject an EDF/BDF file holding fewer data records than its header announces.

    MNE only warns and reads what is there; a partly copied or downloaded file would then pass
    as a shorter recording. Header layout (EDF spec): bytes 184-192 header size, 236-244 number of
    data records (-1: unknown, allowed), 252-256 number of signals ns; then the ns signal headers
    (256 bytes each) stored field by field, the samples-per-record field (8 bytes per signal)
    starting at byte 256 + 216 * ns.
    """
    bytes_per_sample = 3 if fmt == "BDF" else 2
    try:
        with open(path, "rb") as handle:
            fixed = handle.read(256)
            n_signals = int(fixed[252:256])
            handle.seek(256 + 216 * n_signals)
            samples_per_record = [int(handle.read(8)) for _ in range(n_signals)]
        header_bytes, announced = int(fixed[184:192]), int(fixed[236:244])
    except ValueError:
        raise _file_error(path, f"truncated {fmt} file: the header is incomplete") from None
    record_bytes = sum(samples_per_record) * bytes_per_sample
    held = (path.stat().st_size - header_bytes) // record_bytes if record_bytes else 0
    if announced > 0 and held < announced:
        raise _file_error(
            path,
            f"truncated {fmt} file: the header announces {announced} data "
            f"records, the file holds {held}",
        )


def _missing_companion_reason(exc: FileNotFoundError, path: Path, fmt: str) -> str:
    """Name the companion file MNE could not find (``.eeg``/``.vmrk``/``.fdt``)."""
    if exc.filename:
        return f"missing companion file {Path(exc.filename).name} (the {fmt} header refers to it)"
    if fmt == "EEGLAB":
        return "missing companion data file (.fdt) next to the .set file"
    return f"missing companion file ({_first_line(exc, path)})"


def read_recording(path: Path, preload: bool = True) -> mne.io.BaseRaw:
    """Read one recording with :func:`mne.io.read_raw` (format chosen by the suffix).

    Parameters
    ----------
    path : a file with a suffix in :data:`RECORDING_SUFFIXES`.
    preload : load the samples now. Only with ``preload=True`` are corrupt data (as opposed to
        a corrupt header) and NaN/infinite values detected here.

    Returns
    -------
    The recording as MNE reads it: channel names and types as stored, data in volts.

    Raises
    ------
    RecordingError : one line naming the file and the reason: not found, unsupported format,
        empty file, not a file of its format (a text file named .edf), missing companion file,
        corrupt or truncated header or data, no samples, NaN or infinite values.
    """
    path = Path(path)
    suffix = recording_suffix(path)
    if suffix is None:
        raise _unsupported_format_error(path, RecordingError)
    fmt = FORMAT_BY_SUFFIX[suffix]
    if not path.is_file():
        raise _file_error(path, "no such file")
    _check_file_signature(path, fmt)
    try:
        raw = mne.io.read_raw(path, preload=False, verbose="error")
    except FileNotFoundError as exc:
        raise _file_error(path, _missing_companion_reason(exc, path, fmt)) from None
    except Exception as exc:  # MNE raises many kinds (ValueError, IndexError, OSError ...)
        raise _file_error(
            path, f"corrupt or truncated {fmt} header ({_first_line(exc, path)})"
        ) from None
    if fmt in ("EDF", "BDF"):
        _check_edf_record_count(path, fmt)  # after MNE, which has validated the header fields
    if raw.n_times == 0 or len(raw.ch_names) == 0:
        raise _file_error(path, "no samples or no channels (file truncated after the header?)")
    if preload:
        try:
            raw.load_data(verbose="error")
        except Exception as exc:
            raise _file_error(
                path, f"corrupt or truncated {fmt} data ({_first_line(exc, path)})"
            ) from None
        check_finite(raw, path)
    return raw


def reads_lazily(path: Path) -> bool:
    """Whether a recording is better read a span at a time (``read_recording(path,
    preload=False)``, then :func:`read_samples`) than loaded whole: False for the suffixes of
    :data:`LOADED_WHOLE_SUFFIXES`, where reading spans costs more than loading the file (a
    ``.fif.gz`` is decompressed from its start for every span; docs/benchmarks.md,
    "Preprocessing")."""
    return recording_suffix(Path(path)) not in LOADED_WHOLE_SUFFIXES


def check_finite(raw: mne.io.BaseRaw, path: Path) -> None:
    """Raise :class:`RecordingError` naming the channels that hold NaN or infinite values."""
    bad = np.zeros(len(raw.ch_names), dtype=bool)
    step = max(1, _FINITE_CHECK_VALUES // len(raw.ch_names))
    for start in range(0, raw.n_times, step):
        chunk = raw.get_data(start=start, stop=min(start + step, raw.n_times))
        bad |= ~np.isfinite(chunk).all(axis=1)
    if bad.any():
        names = [name for name, is_bad in zip(raw.ch_names, bad) if is_bad]
        shown = ", ".join(names[:5]) + (f", ... ({len(names)} channels)" if len(names) > 5 else "")
        raise _file_error(path, f"contains NaN or infinite values (channels {shown})")


def _safe_id_part(text: str) -> str:
    """``text`` (NFC-normalised) with every run of characters that are unsafe in a file name or
    awkward in a table replaced by one ``_``: ASCII characters other than letters, digits,
    ``.``, ``_`` and ``-`` (spaces, slashes, quotes, brackets ...), and non-ASCII characters
    other than letters, digits and combining marks (symbols, punctuation, emoji, controls).
    Unicode letters stay, so ``Pätient 1`` and ``Pötient 1`` keep distinct ids; ASCII names
    get the ids they always had."""

    def keep(char: str) -> bool:
        if char.isascii():
            return char.isalnum() or char in "._-"
        return char.isalnum() or unicodedata.category(char).startswith("M")

    runs = itertools.groupby(unicodedata.normalize("NFC", text), key=keep)
    return "".join("".join(chars) if kept else "_" for kept, chars in runs)


def recording_id(path: Path, root: Path | None = None) -> str:
    """A stable id for a recording, safe as a file name.

    Without ``root``: the file name without its recording suffix
    (``eeg/sub-001_task-rest_eeg.edf -> sub-001_task-rest_eeg``). With ``root``: the folders
    between ``root`` and the file are put in front, joined by ``__``
    (``site-a/sub-01_eeg.edf -> site-a__sub-01_eeg``); :func:`recording_ids` uses this form only
    for names that would otherwise collide. Unsafe characters become ``_``
    (:func:`_safe_id_part`: ``Subject 1 (rest).EDF -> Subject_1_rest_``, ``Pätient 1.edf ->
    Pätient_1``). A file outside ``root`` gets ``up`` for each ``..``.
    """
    path = Path(path)
    suffix = recording_suffix(path) or path.suffix
    stem = path.name[: len(path.name) - len(suffix)] if suffix else path.name
    parts = [stem]
    if root is not None:
        parts = [*Path(os.path.relpath(path.parent, root)).parts, stem]
        parts = [part for part in parts if part not in (".", "")]
        parts = [part if part != ".." else "up" for part in parts]
    return "__".join(_safe_id_part(part) for part in parts)


def recording_ids(paths: list[Path]) -> list[str]:
    """Unique ids for ``paths`` (same order): :func:`recording_id` of the file name where that is
    unique; files whose names collide are qualified by their folders below the deepest folder
    holding them all (``site-a__sub-01_eeg``, ``site-b__sub-01_eeg``). The result depends only on
    the set of paths, so reruns on the same input give the same ids."""
    paths = [Path(p) for p in paths]
    plain = [recording_id(p) for p in paths]
    ids = list(plain)
    for name in set(plain):
        group = [i for i, candidate in enumerate(plain) if candidate == name]
        if len(group) < 2:
            continue
        group_root = Path(os.path.commonpath([paths[i].parent for i in group]))
        for i in group:
            ids[i] = recording_id(paths[i], group_root)
    if len(set(ids)) < len(ids):  # e.g. "a b.edf" and "a_b.edf" after character replacement
        seen: dict[str, int] = {}
        for i, rid in sorted(enumerate(ids), key=lambda item: str(paths[item[0]])):
            seen[rid] = seen.get(rid, 0) + 1
            if seen[rid] > 1:
                ids[i] = f"{rid}-{seen[rid]}"
    return ids


#: What :func:`signal_sha256` puts before the digest: the version of the hash. A hash without
#: it (the files, manifests and model files of earlier versions) is :func:`channel_major_sha256`.
SIGNAL_HASH_PREFIX = "v2:"
#: Samples per channel read at a time when hashing a whole recording (8 MB at 19 channels).
_HASH_STEP = 2**16


class SignalHash:
    """SHA-256 of a recording's samples as MNE reads them, fed in time order, chunk by chunk:
    float64 volts, little-endian, sample after sample, each sample's channels in the file's
    order (the bytes of ``raw.get_data().T``). So it is made in the same pass that reads the
    recording for its cleaning, in bounded memory, and the same signal gives the same hash
    whatever the file's name, header text (patient name, date) or folder, so a training
    recording renamed or re-anonymised is still recognised (``model.pt``'s training data,
    :mod:`eegformer_cli.provenance`)."""

    def __init__(self):
        self._digest = hashlib.sha256()

    def update(self, samples: np.ndarray) -> None:
        """Add ``samples`` (n_channels, n_times), the next ones in time."""
        self._digest.update(np.ascontiguousarray(samples.T, dtype="<f8").tobytes())

    def hexdigest(self) -> str:
        """:data:`SIGNAL_HASH_PREFIX` and the hex digest."""
        return SIGNAL_HASH_PREFIX + self._digest.hexdigest()


def read_samples(raw: mne.io.BaseRaw, start: int, stop: int, path: Path) -> np.ndarray:
    """Samples ``start`` to ``stop`` of every channel of ``raw``: float64 (n_channels, n) volts,
    read from the file when ``raw`` is not loaded. RecordingError ("corrupt or truncated ...
    data") when MNE cannot read them."""
    try:
        return raw.get_data(start=start, stop=stop, verbose="error")
    except Exception as exc:  # MNE raises many kinds (ValueError, OSError, EOFError ...)
        suffix = recording_suffix(Path(path))
        fmt = f"{FORMAT_BY_SUFFIX[suffix]} " if suffix else ""
        raise _file_error(
            Path(path), f"corrupt or truncated {fmt}data ({_first_line(exc, Path(path))})"
        ) from None


def signal_sha256(raw: mne.io.BaseRaw) -> str:
    """The :class:`SignalHash` of a whole recording (read :data:`_HASH_STEP` samples at a
    time)."""
    signal_hash = SignalHash()
    for start in range(0, raw.n_times, _HASH_STEP):
        signal_hash.update(raw.get_data(start=start, stop=min(start + _HASH_STEP, raw.n_times)))
    return signal_hash.hexdigest()


def channel_major_sha256(raw: mne.io.BaseRaw) -> str:
    """The hash of earlier versions: SHA-256 (hex, no prefix) of the bytes of
    ``raw.get_data()``, one channel after the other, read one channel and
    :data:`_HASH_STEP` samples at a time (bounded memory; it reads the recording once per
    channel). Made only to recognise a recording in the training data of a model file written
    by those versions (:func:`needs_channel_major_hash`)."""
    digest = hashlib.sha256()
    for index in range(len(raw.ch_names)):
        for start in range(0, raw.n_times, _HASH_STEP):
            stop = min(start + _HASH_STEP, raw.n_times)
            samples = raw.get_data(picks=[index], start=start, stop=stop)
            digest.update(np.ascontiguousarray(samples, dtype="<f8").tobytes())
    return digest.hexdigest()


def needs_channel_major_hash(hashes) -> bool:
    """Whether ``hashes`` (a model's training recordings' hashes) were made by earlier
    versions (:func:`channel_major_sha256`): then a recording is compared with them by that
    hash."""
    return any(not str(value).startswith(SIGNAL_HASH_PREFIX) for value in hashes)
