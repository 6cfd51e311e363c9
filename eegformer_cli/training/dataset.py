"""A ``preprocess`` output folder as training data: manifest rows -> a lazy torch Dataset.

:func:`load_training_data` reads ``DIR/manifest.tsv`` (recordings with status ``ok``), the label
column and the demographics, and checks that the labels make a classification task.
:class:`ConnectomeDataset` indexes the (recording, segment) pairs of a subset of recordings and
reads each ``DIR/connectomes/<id>.npz`` only when a segment of it is asked for, keeping the most
recently used recordings in a cache bounded in bytes, so the dataset never needs more memory
than that bound plus one recording, whatever the size of the data.

Demographics as the model takes them: ``age`` float32 years (NaN = unknown), ``sex`` float32
0 = male, 1 = female, NaN = unknown.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from eegformer_cli.console import warn
from eegformer_cli.errors import InputDataError, UsageError, did_you_mean
from eegformer_cli.preprocess import output
from eegformer_cli.recordings import demographics


@dataclass
class RecordingInfo:
    """One usable recording of the manifest."""

    recording_id: str
    participant_id: str  # the recording id when the manifest has none (TrainingData says so)
    label: str
    age: float  # years, NaN = unknown
    sex: float  # 0 = male, 1 = female, NaN = unknown
    connectome: Path  # absolute path of the .npz, or a preprocess.Connectome in memory
    n_segments: int


@dataclass
class TrainingData:
    """What a preprocess folder offers for training."""

    data_dir: Path
    label_column: str
    recordings: list[RecordingInfo]
    label_names: list[str]  # sorted, index = class index
    channels: list[str]
    bands: list[str]
    band_edges_hz: np.ndarray  # float64 (n_bands, 2)
    preprocess: output.PreprocessFile | None  # DIR/preprocess.json (None: data in memory)
    #: ids of the recordings whose participant the manifest does not know (their
    #: ``participant_id`` is their recording id: splits of them are recording-wise)
    without_participant: list[str] = field(default_factory=list)
    _covariance_bands: list[str] | None = field(default=None, repr=False)

    def covariance_bands(self) -> list[str]:
        """The bands of the band covariances every recording's connectome holds (what a
        tangent-space path reads; read once, then kept); [] when any lacks them (preprocessed
        by an earlier eegformer) or they differ."""
        if self._covariance_bands is None:
            found = {tuple(output.read_covariance_bands(r.connectome)) for r in self.recordings}
            self._covariance_bands = list(found.pop()) if len(found) == 1 else []
        return self._covariance_bands

    def label_indices(self, recordings: list[RecordingInfo] | None = None) -> np.ndarray:
        """int64 class index per recording (all recordings by default)."""
        index = {name: i for i, name in enumerate(self.label_names)}
        return np.array([index[r.label] for r in (recordings or self.recordings)], dtype=np.int64)


def load_training_data(data_dir: str | Path, label_column: str) -> TrainingData:
    """Read the manifest and keep the recordings usable for training with ``label_column``.

    Recordings with status other than ``ok`` are skipped; recordings with a missing label are
    skipped with a warning naming them. Raises UsageError when the column does not exist or
    is a measure, not classes (:func:`check_not_a_measure`), and InputDataError when no
    recording has a label or only one class remains.
    """
    data_dir = Path(data_dir).resolve()
    ok_rows, labelled = _labelled_rows(data_dir, label_column)
    recordings = [_recording_info(data_dir, row, label_column) for row in labelled]
    label_names = sorted({r.label for r in recordings})
    if len(label_names) < 2:
        raise InputDataError(
            f"column {label_column!r} has only one class ({label_names[0]!r}) "
            "among the usable recordings; a classifier needs at least two",
            path=data_dir / output.MANIFEST_NAME,
        )
    channels, bands, band_edges = output.read_layout(recordings[0].connectome)
    preprocess = output.read_settings_file(data_dir)
    if preprocess is None:
        raise InputDataError(
            "missing or unreadable preprocess.json",
            path=data_dir / output.SETTINGS_NAME,
            hint="rerun `eegformer preprocess` into this folder",
        )
    known = {
        row["recording_id"]
        for row in ok_rows
        if not demographics.is_missing((row.get("participant_id") or "").strip())
    }
    return TrainingData(
        data_dir,
        label_column,
        recordings,
        label_names,
        channels,
        bands,
        band_edges,
        preprocess,
        [r.recording_id for r in recordings if r.recording_id not in known],
    )


#: A numeric label with more distinct values than this is a measure (age, a score), not classes.
MAX_NUMERIC_CLASSES = 10


def check_not_a_measure(labels: list[str], what: str, fix: str) -> None:
    """UsageError when every one of ``labels`` is a number and there are more than
    :data:`MAX_NUMERIC_CLASSES` distinct ones: a classifier would make each value a class
    (``train -l age``: one class per age). ``what`` names the labels, ``fix`` says how to
    make classes of them."""
    distinct = sorted(set(labels))
    if len(distinct) <= MAX_NUMERIC_CLASSES:
        return
    try:
        numbers = sorted(float(label) for label in distinct)
    except ValueError:
        return
    raise UsageError(
        f"{what} is numeric with {len(distinct)} distinct values ({numbers[0]:g} to "
        f"{numbers[-1]:g}), a measure: a classifier would make each value a class "
        f"({MAX_NUMERIC_CLASSES} numeric values or fewer are taken as class codes)",
        hint=fix,
    )


def _labelled_rows(data_dir: Path, label_column: str) -> tuple[list[dict], list[dict]]:
    """The manifest's rows with status ``ok``, and those of them with a ``label_column``
    label (:func:`load_training_data`'s errors and warning)."""
    rows = output.read_manifest(data_dir)
    if not rows:
        raise InputDataError("manifest.tsv has no recordings", path=data_dir)
    if label_column not in rows[0]:
        columns = [
            c for c in rows[0] if c not in ("status", "error", "connectome", "settings_hash")
        ]
        raise UsageError(
            f"label column {label_column!r} is not in {data_dir / output.MANIFEST_NAME}"
            f"{did_you_mean(label_column, columns)}; available columns are {', '.join(columns)}",
            hint="check --label-column",
        )
    ok_rows = [row for row in rows if row.get("status") == "ok"]
    if not ok_rows:
        raise InputDataError(
            "no recording in the manifest has status ok",
            path=data_dir,
            hint="see the error column of manifest.tsv",
        )
    unlabeled = [
        row["recording_id"] for row in ok_rows if demographics.is_missing(row.get(label_column))
    ]
    if unlabeled and len(unlabeled) == len(ok_rows):
        raise InputDataError(
            f"every recording has a missing {label_column!r} label",
            path=data_dir / output.MANIFEST_NAME,
            hint="fill the label column",
        )
    check_not_a_measure(
        [
            row[label_column].strip()
            for row in ok_rows
            if not demographics.is_missing(row.get(label_column))
        ],
        f"label column {label_column!r}",
        f"add a column of a few classes made from it to participants.tsv, e.g. "
        f"{label_column}_group with values low and high; rerun `eegformer preprocess` into "
        f"this folder, which rewrites only the manifest; then train with --label-column "
        f"{label_column}_group",
    )
    if unlabeled:
        shown = ", ".join(unlabeled[:10]) + (" ..." if len(unlabeled) > 10 else "")
        warn(
            f"{len(unlabeled)} recording(s) without a {label_column!r} label are left out: {shown}"
        )
    return ok_rows, [row for row in ok_rows if row["recording_id"] not in set(unlabeled)]


def _recording_info(data_dir: Path, row: dict, label_column: str) -> RecordingInfo:
    participant = (row.get("participant_id") or "").strip()
    if demographics.is_missing(participant):
        participant = row["recording_id"]
    try:
        n_segments = int(float(row["n_segments"]))
    except (KeyError, ValueError):
        raise InputDataError(
            f"recording {row['recording_id']!r} has no valid n_segments",
            path=data_dir / output.MANIFEST_NAME,
        ) from None
    return RecordingInfo(
        row["recording_id"],
        participant,
        row[label_column].strip(),
        demographics.age_value(row.get("age")),
        demographics.sex_value(row.get("sex")),
        output.connectome_path(data_dir, row),
        n_segments,
    )


#: Memory of the recording cache that a fit's training and validation sets share (bytes).
CACHE_BYTES = 512 * 2**20


class RecordingCache:
    """The most recently used recordings' (coh, wpli) arrays, at most ``max_bytes`` of them
    (beside the one being read), keyed by recording id: one may be shared by the datasets of a
    fit, so their recordings are bounded together, not per dataset. Their band covariances
    (a few kB each) are kept once read, outside the bound."""

    def __init__(self, max_bytes: int = CACHE_BYTES):
        self.max_bytes = max_bytes
        self._arrays: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._covariances: dict[str, np.ndarray | None] = {}

    def covariance(self, rec: RecordingInfo, channels: list[str]) -> np.ndarray | None:
        """The band covariances float32 (n_covariance_bands, C, C), V^2, of ``rec``
        (:func:`read_covariances`, read once), None when its connectome has none."""
        if rec.recording_id not in self._covariances:
            self._covariances[rec.recording_id] = read_covariances(rec, channels)
        return self._covariances[rec.recording_id]

    def get(self, rec: RecordingInfo, channels: list[str], bands: list[str]) -> tuple:
        """(coh, wpli) float32 (n_segments, n_bands, C, C) of ``rec``, read when not cached."""
        if rec.recording_id in self._arrays:
            self._arrays.move_to_end(rec.recording_id)
            return self._arrays[rec.recording_id]
        arrays = output.read_tokens(
            rec.connectome, channels, bands, rec.n_segments, rec.recording_id
        )
        size = arrays[0].nbytes + arrays[1].nbytes
        while self._arrays and self._bytes + size > self.max_bytes:
            _, old = self._arrays.popitem(last=False)
            self._bytes -= old[0].nbytes + old[1].nbytes
        self._arrays[rec.recording_id] = arrays
        self._bytes += size
        return arrays


class ConnectomeDataset(Dataset):
    """Segments of a list of recordings, read lazily from their connectome files.

    Item ``i`` is a dict of tensors: ``coh``, ``wpli`` float32 (n_bands, C, C), ``age``,
    ``sex`` float32 scalars, ``label`` int64 scalar, ``recording`` int64 scalar (index into
    ``recordings``). ``cache`` keeps the recordings read (a :class:`RecordingCache` that other
    datasets may share); without one, the dataset has its own of ``cache_bytes`` (default
    :data:`CACHE_BYTES`).

    ``segment_averaging`` (training augmentation, probability in [0, 1]): with this probability
    an item is the mean of its segment and a random subset of the *same recording's* other
    segments (subset size uniform in 1 .. n_segments - 1), drawn from ``rng`` (a seeded NumPy
    Generator). Why: one 15 s segment's coherence is a noisy estimate of the recording's; the
    mean over segments is what the evaluation's per-recording logit average approaches, and
    what the logistic-regression reference sees; the label cannot change, unlike mixup.

    ``products`` (set by :meth:`set_token_products`, for a model whose interaction token reads
    whole recordings): each recording's (S, K) token products; an item then has ``products``
    float32 (K,), its segment's, and is never an average of segments (the transformer path
    reads a recording's segments as they are).
    """

    def __init__(
        self,
        recordings: list[RecordingInfo],
        label_names: list[str],
        channels: list[str],
        bands: list[str],
        cache_bytes: int = CACHE_BYTES,
        segment_averaging: float = 0.0,
        rng: np.random.Generator | None = None,
        cache: RecordingCache | None = None,
    ):
        self.recordings = list(recordings)
        self.channels = list(channels)
        self.bands = list(bands)
        index = {name: i for i, name in enumerate(label_names)}
        self.labels = np.array([index[r.label] for r in self.recordings], dtype=np.int64)
        self.index = np.array(
            [(r, s) for r, rec in enumerate(self.recordings) for s in range(rec.n_segments)],
            dtype=np.int64,
        ).reshape(-1, 2)
        self.cache = cache if cache is not None else RecordingCache(cache_bytes)
        self.segment_averaging = segment_averaging
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.products: list[np.ndarray] | None = None

    def set_token_products(self, model) -> None:
        """Give every item its segment's interaction-token products from its whole recording
        (``model.token_products``; the model's standardiser statistics set) and stop
        averaging segments."""
        self.products = [
            model.token_products(*self.recording_tuple(r)[:4]).cpu().numpy()
            for r in range(len(self.recordings))
        ]
        self.segment_averaging = 0.0

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict:
        r, s = self.index[i]
        coh, wpli = self.recording_arrays(int(r))
        rec = self.recordings[r]
        segments = [s]
        # short-circuit: with averaging off nothing is drawn, so rng's stream stays as before
        averaging = self.segment_averaging and rec.n_segments > 1
        if averaging and self.rng.random() < self.segment_averaging:
            others = np.delete(np.arange(rec.n_segments), s)
            size = self.rng.integers(1, rec.n_segments)
            segments += self.rng.choice(others, size=size, replace=False).tolist()
        if len(segments) > 1:
            coh, wpli = coh[segments].mean(axis=0), wpli[segments].mean(axis=0)
        else:
            coh, wpli = coh[s], wpli[s]
        return {
            "coh": torch.from_numpy(coh),
            "wpli": torch.from_numpy(wpli),
            "age": torch.tensor(rec.age, dtype=torch.float32),
            "sex": torch.tensor(rec.sex, dtype=torch.float32),
            "label": torch.tensor(self.labels[r]),
            "recording": torch.tensor(r),
            **(
                {} if self.products is None else {"products": torch.from_numpy(self.products[r][s])}
            ),
        }

    def recording_arrays(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """(coh, wpli) float32 (n_segments, n_bands, C, C) of recording ``r`` (cached)."""
        return self.cache.get(self.recordings[r], self.channels, self.bands)

    def recording_covariance(self, r: int) -> np.ndarray | None:
        """The band covariances float32 (n_covariance_bands, C, C), V^2, of recording ``r``
        (in the shared cache: the inner folds' validation subsets read no file again), None
        when its connectome has none."""
        return self.cache.covariance(self.recordings[r], self.channels)

    def recording_tuple(self, r: int) -> tuple:
        """Recording ``r`` as ``model/predict.recording_logits`` reads it: ``(coh, wpli, age,
        sex, covariance)`` (``model/static_paths.py``)."""
        rec = self.recordings[r]
        return (*self.recording_arrays(r), rec.age, rec.sex, self.recording_covariance(r))


def read_covariances(recording: RecordingInfo, channels: list[str]) -> np.ndarray | None:
    """The band covariances of one recording's connectome (:func:`output.read_covariances`):
    float32 (n_covariance_bands, C, C), V^2, or None when its file has none."""
    return output.read_covariances(recording.connectome, len(channels), recording.recording_id)


def recording_fingerprints(
    data: TrainingData, recordings: list[RecordingInfo], mean_connectome: dict
) -> dict[str, torch.Tensor]:
    """The connectivity fingerprints of ``recordings`` against ``mean_connectome`` (the
    training mean connectome, ``{"coh", "wpli"}`` (n_bands, C, C)), as ``model.pt``'s
    ``training_data`` keeps them (:func:`provenance.training_fingerprints`, as tensors)."""
    from eegformer_cli.provenance import training_fingerprints

    dataset = ConnectomeDataset(
        recordings, data.label_names, data.channels, data.bands, cache_bytes=0
    )
    arrays = (dataset.recording_arrays(r) for r in range(len(recordings)))
    return {
        key: torch.from_numpy(value)
        for key, value in training_fingerprints(arrays, mean_connectome).items()
    }
