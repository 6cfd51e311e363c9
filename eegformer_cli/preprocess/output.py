"""The output folder of ``eegformer preprocess``, the one module that reads and writes its
manifest and connectome files (training, inference, the estimator, the audit and ``preprocess``
itself go through it)::

    DIR/manifest.tsv                      one row per input recording (:data:`MANIFEST_NAME`)
    DIR/connectomes/<recording_id>.npz    one recording's tokens (:data:`CONNECTOME_DIR`)
    DIR/preprocess.json                   the run's resolved settings (:data:`SETTINGS_NAME`,
                                          written by ``preprocess/run.py``)

Connectome file (``numpy.savez``, no pickles; :meth:`Connectome.save`, :func:`load_connectome`):

=========================  ==================================  ===================================
key                        dtype, shape                        meaning
=========================  ==================================  ===================================
``coh``, ``wpli``          float32 (S, B, C, C)                coherence, weighted phase-lag index
                                                               of S segments, B bands, C channels;
                                                               symmetric, zero diagonal
``channels``               str (C,)                            canonical channel names, run order
``bands``                  str (B,)                            band names in token order
``band_edges_hz``          float64 (B, 2)                      (low, high) per band, Hz
``sfreq``                  float64 ()                          rate after cleaning, Hz
``segment_onsets_s``       float64 (S,)                        segment starts, s
``duration_s``             float64 ()                          recording length, s
``epoch_length_s``         float64 ()                          segment length, s
``channels_interpolated``  str (n,)                            channels filled by interpolation
``n_segments_rejected``    int64 ()                            segments dropped by amplitude
``ica_excluded``           str (n,)                            ICLabel labels of removed components
``record_json``            str ()                              JSON: settings hash, source size and
                                                               mtime, the manifest row's fields
``source_sfreq``           float64 ()                          the recording's own rate, Hz
``signal_sha256``          str ()                              hash of the samples as read
``covariance``             float32 (B', C, C)                  band covariances, V^2
``covariance_bands``       str (B',)                           their bands (all but ratio tokens)
``channels_marked_bad``    str (n,)                            those of ``channels_interpolated``
                                                               the recording has but marks bad
=========================  ==================================  ===================================

The last five may be absent (files written before eegformer stored them): read as NaN, "",
None, [] and []. Manifest: tab-separated, ``n/a`` for unknown (:data:`MISSING`); columns
:data:`MANIFEST_LEADING_COLUMNS`, every metadata column of the participants and recordings
tables, then :data:`MANIFEST_TRAILING_COLUMNS` (``connectome``: the file's path relative to
DIR). Its ``age`` (years) and ``sex`` (``M``/``F``) are the model's inputs through
:func:`~eegformer_cli.recordings.demographics.age_value` and
:func:`~eegformer_cli.recordings.demographics.sex_value`. docs/architecture.md gives the same contract.

A truncated or damaged connectome file raises InputDataError "cannot read connectome: ..."
naming the file, whoever reads it (:func:`load_connectome`, the public reader, keeps NumPy's
own exceptions).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eegformer_cli import atomic
from eegformer_cli.errors import InputDataError, OutputError

#: The output folder's parts.
CONNECTOME_DIR = "connectomes"
MANIFEST_NAME = "manifest.tsv"
SETTINGS_NAME = "preprocess.json"
#: How the manifest writes an unknown value.
MISSING = "n/a"
#: Manifest columns before the metadata columns.
MANIFEST_LEADING_COLUMNS = (
    "recording_id",
    "participant_id",
    "source_file",
    "status",
    "error",
    "n_segments",
    "n_segments_rejected",
    "sfreq",
    "source_sfreq",
    "duration_s",
    "channels_interpolated",
    "age",
    "sex",
)
#: Manifest columns after the metadata columns.
MANIFEST_TRAILING_COLUMNS = ("signal_sha256", "connectome", "settings_hash")
#: What reading a damaged manifest raises (beside FileNotFoundError, an OSError).
MANIFEST_ERRORS = (OSError, csv.Error, UnicodeDecodeError)
#: What a connectome file records about its recording that a prediction's provenance carries,
#: with the type of each key (:func:`read_provenance`).
RECORDED = {
    "n_segments_rejected": int,
    "channels_interpolated": list,
    "channels_marked_bad": list,
    "duration_s": float,
    "source_sfreq": float,
    "signal_sha256": str,
}
#: What NumPy raises for a truncated, damaged or foreign ``.npz``.
_NPZ_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


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
    channels_marked_bad : those of ``channels_interpolated`` that the recording has but marks
        bad (:mod:`eegformer_cli.recordings.channel_facts`); the others it lacks.
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
    channels_marked_bad: list[str] = field(default_factory=list)

    @property
    def n_segments(self) -> int:
        return int(self.coh.shape[0])

    def save(self, path: str | Path) -> None:
        """Write an ``.npz`` atomically (the keys of the module's table)."""
        _write_npz(Path(path), self._members(), {})

    def _members(self) -> dict[str, np.ndarray]:
        """The arrays of the file, by key, in the file's order."""
        covariance = (
            {}
            if self.covariance is None
            else {
                "covariance": np.asarray(self.covariance, dtype=np.float32),
                "covariance_bands": np.array(self.covariance_bands, dtype=str),
            }
        )
        return dict(
            coh=np.asarray(self.coh, dtype=np.float32),  # no copy of a long recording's tokens
            wpli=np.asarray(self.wpli, dtype=np.float32),
            channels=np.array(self.channels, dtype=str),
            bands=np.array(self.bands, dtype=str),
            band_edges_hz=np.asarray(self.band_edges_hz, dtype=np.float64),
            sfreq=np.float64(self.sfreq),
            segment_onsets_s=np.asarray(self.segment_onsets_s, dtype=np.float64),
            duration_s=np.float64(self.duration_s),
            epoch_length_s=np.float64(self.epoch_length_s),
            channels_interpolated=np.array(self.channels_interpolated, dtype=str),
            n_segments_rejected=np.int64(self.n_segments_rejected),
            ica_excluded=np.array(self.ica_excluded, dtype=str),
            record_json=np.array(json.dumps(self.record)),
            source_sfreq=np.float64(self.source_sfreq),
            signal_sha256=np.array(self.signal_sha256),
            **covariance,
            channels_marked_bad=np.array(self.channels_marked_bad, dtype=str),
        )


class TokenFiles:
    """Coherence and wPLI rows of one recording written, as they are computed, to two
    temporary files beside its connectome file, so that a long recording's tokens are never
    all in memory (a 24-hour recording's are 64 MiB).

    A context manager: the files (``.tmp-`` names) are removed on leaving the block, or by the
    next run into the folder after a kill (``atomic.remove_stale_temporaries``). The store
    :class:`connectivity.tokens.TokenAccumulator` writes to (``append``, ``arrays``);
    :meth:`save` writes the connectome file, copying the rows from the files in blocks.

    Parameters
    ----------
    out_file : the connectome file the rows are for; the temporary files go in its folder.
    """

    def __init__(self, out_file: str | Path):
        self.out_file = Path(out_file)
        self.paths: dict[str, Path] = {}
        self._handles: dict = {}
        self.n_segments = 0
        self._row_shape: tuple[int, ...] = ()

    def __enter__(self) -> TokenFiles:
        folder = atomic.ensure_dir(self.out_file.parent)
        try:
            for key in _TOKEN_KEYS:
                handle = tempfile.NamedTemporaryFile(
                    "wb", prefix=f"{atomic.TMP_PREFIX}{self.out_file.name}.{key}.", dir=folder
                )
                self._handles[key], self.paths[key] = handle, Path(handle.name)
        except OSError as exc:
            self.__exit__()
            raise OutputError(f"cannot write: {exc.strerror}", path=self.out_file) from None
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles.values():
            handle.close()  # removes the file
        self._handles.clear()

    def append(self, coh: np.ndarray, wpli: np.ndarray) -> None:
        """Write the float32 (n, B, C, C) rows of ``n`` more segments."""
        for key, rows in zip(_TOKEN_KEYS, (coh, wpli)):
            self._handles[key].write(np.ascontiguousarray(rows, dtype=np.float32).tobytes())
        self._row_shape = tuple(coh.shape[1:])
        self.n_segments += len(coh)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coh, wpli)`` float32 (S, B, C, C) of the rows written, mapped read-only from the
        files (np.memmap: read from disk where they are used)."""
        shape = (self.n_segments, *self._row_shape)
        mapped = []
        for key in _TOKEN_KEYS:
            self._handles[key].flush()
            mapped.append(np.memmap(self.paths[key], dtype=np.float32, mode="r", shape=shape))
        return mapped[0], mapped[1]

    def save(self, connectome: Connectome, path: str | Path) -> None:
        """Write ``connectome`` (whose ``coh`` and ``wpli`` are :meth:`arrays`) as
        :meth:`Connectome.save` does, its token members copied from the files in blocks."""
        members = connectome._members()
        for key in _TOKEN_KEYS:
            if members[key].shape != (self.n_segments, *self._row_shape):
                raise ValueError(f"connectome {key} is not the {key} of these files")
        _write_npz(Path(path), members, self.paths)


#: The members of a connectome file that grow with the recording's length.
_TOKEN_KEYS = ("coh", "wpli")
#: Bytes copied at a time from a token file into a connectome file.
_COPY_BYTES = 1 << 20


def _write_npz(path: Path, members: dict[str, np.ndarray], copied_from: dict[str, Path]) -> None:
    """Write ``members`` as a compressed ``.npz``, atomically: the file ``np.savez_compressed``
    writes (the same ``.npy`` members, deflated). The members named in ``copied_from`` take
    their header from the array (its shape and dtype) and their bytes from that file, read in
    blocks (the array's raw C-order bytes, as :class:`TokenFiles` writes them)."""
    with (
        atomic.atomic_open(path, "wb") as handle,
        zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive,
    ):
        for key, value in members.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                if key not in copied_from:
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
                    continue
                header = np.lib.format.header_data_from_array_1_0(value)
                np.lib.format.write_array_header_1_0(member, header)
                with open(copied_from[key], "rb") as source:
                    copied = 0
                    while block := source.read(_COPY_BYTES):
                        member.write(block)
                        copied += len(block)
                if copied != value.nbytes:
                    raise ValueError(f"{copied_from[key]} holds {copied} bytes, not {value.nbytes}")


def load_connectome(path: str | Path) -> Connectome:
    """Read a whole connectome file (``DIR/connectomes/RECORDING_ID.npz`` of ``eegformer
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
            coh=data["coh"],
            wpli=data["wpli"],
            channels=data["channels"].tolist(),
            bands=data["bands"].tolist(),
            band_edges_hz=data["band_edges_hz"],
            sfreq=float(data["sfreq"]),
            segment_onsets_s=data["segment_onsets_s"],
            duration_s=float(data["duration_s"]),
            epoch_length_s=float(data["epoch_length_s"]),
            channels_interpolated=data["channels_interpolated"].tolist(),
            n_segments_rejected=int(data["n_segments_rejected"]),
            ica_excluded=data["ica_excluded"].tolist(),
            record=json.loads(str(data["record_json"])),
            # absent from files written before eegformer stored them (module docstring)
            source_sfreq=float(data["source_sfreq"]) if "source_sfreq" in data else math.nan,
            signal_sha256=str(data["signal_sha256"]) if "signal_sha256" in data else "",
            covariance=data.get("covariance", None),
            covariance_bands=data["covariance_bands"].tolist() if "covariance" in data else [],
            channels_marked_bad=(
                data["channels_marked_bad"].tolist() if "channels_marked_bad" in data else []
            ),
        )


def load_record(path: Path) -> dict | None:
    """The ``record_json`` of a connectome file, or None if it is missing or unreadable; with
    ``"has_covariance"`` added (False: written before eegformer stored the band covariances)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {**json.loads(str(data["record_json"])), "has_covariance": "covariance" in data}
    except Exception:  # a foreign or damaged file is simply recomputed
        return None


@contextlib.contextmanager
def _opened(path: str | Path) -> Iterator:
    """The open ``.npz`` at ``path``; any read error inside the block (a truncated or damaged
    file, a missing key) becomes InputDataError naming the file."""
    try:
        with np.load(path, allow_pickle=False) as data:
            yield data
    except _NPZ_ERRORS as exc:
        raise InputDataError(
            f"cannot read connectome: {exc}", path=path, hint="rerun `eegformer preprocess`"
        ) from None


def read_covariance_bands(source) -> list[str]:
    """The bands of the band covariances of a connectome file (``source`` a path) or of a
    :class:`Connectome` in memory; [] when it has none (written before eegformer stored
    them)."""
    if not isinstance(source, (str, Path)):
        return list(source.covariance_bands) if source.covariance is not None else []
    with _opened(source) as data:
        return [str(b) for b in data["covariance_bands"]] if "covariance" in data else []


def read_layout(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """(channels, bands, band edges float64 (B, 2) Hz) of a connectome file, without its
    arrays; InputDataError when it is unreadable."""
    with _opened(path) as data:
        return (
            [str(c) for c in data["channels"]],
            [str(b) for b in data["bands"]],
            np.asarray(data["band_edges_hz"], dtype=np.float64),
        )


def read_segment_count(path: Path) -> int:
    """The number of segments of a connectome file (reads its coherence array)."""
    with _opened(path) as data:
        return int(data["coh"].shape[0])


def read_tokens(
    source, channels: list[str], bands: list[str], n_segments: int, name: str
) -> tuple[np.ndarray, np.ndarray]:
    """(coh, wpli) float32 (n_segments, B, C, C) of a connectome file (``source`` a path) or of
    a :class:`Connectome` held in memory, checked against the expected ``channels``, ``bands``
    and ``n_segments`` (the manifest's).

    Raises InputDataError naming the file (``name``, e.g. the recording id, for one in memory)
    when it is unreadable or does not match.
    """
    if not isinstance(source, (str, Path)):
        coh = np.ascontiguousarray(source.coh, dtype=np.float32)
        wpli = np.ascontiguousarray(source.wpli, dtype=np.float32)
        file_channels = [str(c) for c in source.channels]
        file_bands = [str(b) for b in source.bands]
        where: str | Path = name
    else:
        with _opened(source) as data:
            coh = np.ascontiguousarray(data["coh"], dtype=np.float32)
            wpli = np.ascontiguousarray(data["wpli"], dtype=np.float32)
            file_channels = [str(c) for c in data["channels"]]
            file_bands = [str(b) for b in data["bands"]]
        where = source
    if file_channels != channels or file_bands != bands:
        raise InputDataError(
            "channels or bands differ from the other recordings of the folder",
            path=where,
            hint="preprocess all recordings in one run",
        )
    expected = (n_segments, len(bands), len(channels), len(channels))
    if coh.shape != expected or wpli.shape != expected:
        raise InputDataError(
            f"connectome has shape {coh.shape}, expected {expected} from the manifest",
            path=where,
            hint="rerun `eegformer preprocess`",
        )
    return coh, wpli


def read_covariances(source, n_channels: int, name: str) -> np.ndarray | None:
    """The band covariances float32 (B', C, C), V^2, of a connectome file (``source`` a path)
    or of a :class:`Connectome` in memory; None when it has none (written before eegformer
    stored them). InputDataError naming the file (``name`` for one in memory) when it is
    unreadable or not ``n_channels`` x ``n_channels``."""
    if not isinstance(source, (str, Path)):
        covariance = source.covariance
        where: str | Path = name
    else:
        with _opened(source) as data:
            covariance = data.get("covariance", None)
        where = source
    if covariance is None:
        return None
    covariance = np.asarray(covariance, dtype=np.float32)
    if covariance.ndim != 3 or covariance.shape[1:] != (n_channels, n_channels):
        raise InputDataError(
            f"band covariances have shape {covariance.shape}, expected "
            f"(bands, {n_channels}, {n_channels})",
            path=where,
            hint="rerun `eegformer preprocess`",
        )
    return covariance


def read_onsets(source, n_segments: int) -> np.ndarray | None:
    """The segments' starts float64 (n_segments,), s, of a connectome file (``source`` a path)
    or of a :class:`Connectome` in memory; None when it holds none or not ``n_segments`` (a
    file written by hand, without ``segment_onsets_s``)."""
    if not isinstance(source, (str, Path)):
        onsets = source.segment_onsets_s
    else:
        with _opened(source) as data:
            onsets = data.get("segment_onsets_s", None)
    if onsets is None or np.shape(onsets) != (n_segments,):
        return None
    return np.asarray(onsets, dtype=np.float64)


def read_provenance(path: Path) -> dict:
    """What a connectome file records about its recording (keys of :data:`RECORDED`, those
    absent from older files left out); {} if it is unreadable (reading its arrays then reports
    the file)."""
    try:
        with _opened(path) as data:
            return {
                key: (data[key].tolist() if kind is list else kind(data[key]))
                for key, kind in RECORDED.items()
                if key in data.files
            }
    except InputDataError:
        return {}


def connectome_path(data_dir: Path, row: dict) -> Path:
    """The connectome file of a manifest ``row`` of ``data_dir`` (its ``connectome`` column,
    else where ``preprocess`` puts it)."""
    relative = row.get("connectome") or f"{CONNECTOME_DIR}/{row['recording_id']}.npz"
    return Path(data_dir) / relative


def manifest_rows(path: Path) -> list[dict]:
    """The rows of a manifest file as dicts of strings; raises :data:`MANIFEST_ERRORS`."""
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def read_manifest(data_dir: Path) -> list[dict]:
    """Rows of ``DIR/manifest.tsv`` as dicts of strings; InputDataError when absent/unreadable."""
    path = Path(data_dir) / MANIFEST_NAME
    try:
        return manifest_rows(path)
    except FileNotFoundError:
        raise InputDataError(
            "no manifest.tsv: not a preprocess output folder",
            path=data_dir,
            hint="run `eegformer preprocess` first and pass its --out folder",
        ) from None
    except MANIFEST_ERRORS as exc:
        raise InputDataError(f"cannot read the manifest: {exc}", path=path) from None


def write_manifest(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as a manifest, atomically: the leading columns, every other key of the
    rows in order of appearance, then the trailing columns; :data:`MISSING` for None, "", NaN
    and absent values, floats in ``%g``."""
    extra = []
    for row in rows:
        for key in row:
            if (
                key not in MANIFEST_LEADING_COLUMNS
                and key not in MANIFEST_TRAILING_COLUMNS
                and key not in extra
            ):
                extra.append(key)
    columns = [*MANIFEST_LEADING_COLUMNS, *extra, *MANIFEST_TRAILING_COLUMNS]
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_format_value(row.get(column)) for column in columns])
    atomic.write_text(path, buffer.getvalue())


def _format_value(value) -> str:
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class PreprocessFile:
    """``DIR/preprocess.json`` as read (:func:`read_settings_file`): ``entries`` every entry as
    stored (the report lists them all); :attr:`settings` the stored settings
    (``PreprocessSettings.from_dict`` types them, ``PreprocessSettings.of_folder`` reads and
    types them at once), :attr:`crop_s` their crop, :attr:`inputs` what the runs read."""

    entries: dict

    @property
    def settings(self) -> dict | None:
        """The stored settings as a dict (None when the file holds none)."""
        settings = self.entries.get("settings")
        return settings if isinstance(settings, dict) else None

    @property
    def crop_s(self) -> float | None:
        """The crop (s) every recording was cut to; None: analysed whole."""
        crop = (self.settings or {}).get("crop_s")
        return crop if isinstance(crop, int | float) and not isinstance(crop, bool) else None

    @property
    def inputs(self) -> list[str]:
        """The inputs the folder's runs read (absolute; relative in older folders)."""
        return [str(path) for path in self.entries.get("inputs") or []]

    @property
    def bids_selection(self) -> dict[str, list[str]]:
        """``preprocess --task/--session/--run``: ``{"task": [...], "session": [...], "run":
        [...]}`` as the dataset writes the labels (``bids.Selection.to_json``); {} when it
        selected nothing (or the folder is of a version that did not keep it)."""
        stored = self.entries.get("bids_selection")
        if not isinstance(stored, dict):
            return {}
        selection = {str(key): [str(v) for v in values or []] for key, values in stored.items()}
        return selection if any(selection.values()) else {}


def read_settings_file(data_dir: str | Path) -> PreprocessFile | None:
    """``DIR/preprocess.json``, or None when it is missing, unreadable or not an object (each
    reader says what that means for it). The one reader of the file."""
    try:
        stored = json.loads((Path(data_dir) / SETTINGS_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return PreprocessFile(stored) if isinstance(stored, dict) else None
