"""XAIguiFormer as a scikit-learn classifier, fitted by the trainer's own code.

One sample is one recording. ``X`` is a table of recordings (a ``pandas.DataFrame``, one row
per recording, as :func:`read_preprocessed` gives for a ``preprocess`` folder) or a sequence of
connectomes; why not a numeric array: a recording is a stack of segments (n_segments, n_bands,
C, C) of coherence and of wPLI, the number of segments differs between recordings, and its
prediction averages its segments' logits, so flattening it into a fixed-length row would lose
either the segments or the recording; the model also needs the channel and band names and band
edges (dRoFE rotates by frequency) and the age and sex of each recording, which a
:class:`~eegformer_cli.preprocess.Connectome` and the table's columns carry.

``fit`` is one fold of ``eegformer train``: the participant-wise inner validation split
(:func:`splits.inner_validation_split`, seeded with ``random_state``), then
:func:`fit.fit_model` (the epoch loop, selection on the validation participants) seeded
with ``random_state``; ``predict_proba`` is the trainer's per-recording evaluation
(:func:`fit.evaluate`: segment-mean refined logits, softmax). So a ``cross_val_score`` with
a ``GroupKFold`` gives the out-of-fold numbers of ``eegformer train --splits`` on a splits file
holding the same test participants, the estimator's validation participants
(``val_participants_``) and its seed (a fold's ``seed``), as tests/test_estimator.py checks.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from eegformer_cli.choices import DEFAULT_DEVICE, DEFAULT_PRESET
from eegformer_cli.console import warn
from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.option_docs import ESTIMATOR, document

#: Columns of ``X`` the estimator reads (the others are ignored).
CONNECTOME_COLUMN = "connectome"
OPTIONAL_COLUMNS = ("recording_id", "participant_id", "age", "sex", "n_segments")


def read_preprocessed(data_dir: str | os.PathLike):
    """The recordings of a ``preprocess`` output folder as a table, one row per recording.

    Parameters
    ----------
    data_dir : str | os.PathLike
        A folder written by ``eegformer preprocess`` (``manifest.tsv``, ``connectomes/``).

    Returns
    -------
    pandas.DataFrame
        The manifest's recordings with status ``ok``, in its order: ``recording_id``,
        ``participant_id`` (the recording id where the manifest has none, as ``train
        --split-by recording`` counts it: a warning says how many, since groups from it are
        then recording-wise), ``connectome`` (the absolute path of its ``.npz``, read when needed),
        ``n_segments`` (int), ``age`` (years, NaN = unknown), ``sex`` (``"M"``, ``"F"`` or
        NaN = unknown, as age), then every other manifest column (the participants and recordings tables'
        included, e.g. the labels) as text, None for ``n/a``. ``X`` for
        :class:`XAIguiFormerClassifier`; ``y`` and ``groups`` are two of its columns.

    Raises
    ------
    InputDataError
        Not a ``preprocess`` folder, or no recording with status ``ok``.
    """
    import pandas as pd

    from eegformer_cli.preprocess import output

    data_dir = Path(data_dir).resolve()
    rows = [row for row in output.read_manifest(data_dir) if row.get("status") == "ok"]
    if not rows:
        raise InputDataError(
            "no recording in the manifest has status ok",
            path=data_dir,
            hint="see the error column of manifest.tsv",
        )
    _warn_anonymous(rows, data_dir)
    return pd.DataFrame([_recording_record(row, data_dir) for row in rows])


def _warn_anonymous(rows: list[dict], data_dir: Path) -> None:
    """A warning naming the manifest ``rows`` without a participant id (their recording id
    stands in, so groups made from it are recording-wise)."""
    from eegformer_cli.recordings.demographics import is_missing

    anonymous = [
        row["recording_id"] for row in rows if is_missing((row.get("participant_id") or "").strip())
    ]
    if anonymous:
        warn(
            f"{len(anonymous)} of {len(rows)} recordings of {data_dir} have no participant id "
            f"({', '.join(anonymous[:3])}{', ...' if len(anonymous) > 3 else ''}): their "
            "participant_id is their recording id, so groups made from it are recording-wise "
            "(two recordings of one person may fall on both sides); rerun eegformer preprocess "
            "with --participant-pattern REGEX or a participant_id column in recordings.tsv"
        )


def _recording_record(row: dict, data_dir: Path) -> dict:
    """One manifest row as :func:`read_preprocessed`'s record: the estimator's columns first
    (typed), then the manifest's other columns as text (None for ``n/a``)."""
    from eegformer_cli.preprocess import output
    from eegformer_cli.provenance import SEX_NAMES
    from eegformer_cli.recordings.demographics import age_value, is_missing, sex_value

    participant = (row.get("participant_id") or "").strip()
    record = {
        "recording_id": row["recording_id"],
        "participant_id": row["recording_id"] if is_missing(participant) else participant,
        CONNECTOME_COLUMN: output.connectome_path(data_dir, row),
        "n_segments": int(float(row["n_segments"])),
        "age": age_value(row.get("age")),
        "sex": SEX_NAMES.get(sex_value(row.get("sex"))) or math.nan,
    }
    record.update(
        {
            key: None if is_missing(value) else value
            for key, value in row.items()
            if key not in record
        }
    )
    return record


@document(ESTIMATOR)
class XAIguiFormerClassifier(ClassifierMixin, BaseEstimator):
    """XAIguiFormer as a scikit-learn classifier of recordings (one sample = one recording).

    Each ``fit`` is one fold of ``eegformer train``: a participant-wise inner validation split
    of the training recordings selects the epoch, with the trainer's own code and seeds.

    Attributes
    ----------
    classes_ : numpy.ndarray
        The class labels (sorted), the columns of :meth:`predict_proba`.
    model_ : torch.nn.Module
        The fitted model (the selected epoch's weights), in eval mode.
    history_ : list of dict
        One record per epoch: ``train_loss``, ``val_loss``, ``val_bac``, ``lr``, ...
    best_epoch_ : int
        The selected epoch (1-based).
    train_participants_, val_participants_ : list of str
        The participants the model was fitted on and those that selected the epoch.
    channels_, bands_ : list of str
        The channels and bands of the connectomes it was fitted on (every ``X`` must have
        them).
    config_ : dict
        The resolved training settings (``train``'s ``config.json`` ``train_config``).
    preprocess_settings_ : PreprocessSettings | None
        The preprocessing settings of the connectome files it was fitted on (their ``preprocess``
        folder's ``preprocess.json``); ``predict_proba`` refuses files made with other settings
        that change the tokens. None when ``X`` held Connectome objects or files outside a
        ``preprocess`` folder: nothing to compare then.

    Notes
    -----
    ``X`` is one of

    - a ``pandas.DataFrame`` with a ``connectome`` column (a
      :class:`~eegformer_cli.preprocess.Connectome`, e.g. from :func:`preprocess_raw
      <eegformer_cli.preprocess.preprocess_raw>`, or the path of a connectome ``.npz`` file)
      and optionally ``participant_id`` (the groups of the inner validation split; default:
      each recording its own participant), ``age`` (years, NaN = unknown), ``sex`` (``"M"`` /
      ``"F"`` / None), ``recording_id``; :func:`read_preprocessed` gives one for a
      ``preprocess`` folder;
    - a sequence of connectomes (Connectome objects or paths): no demographics, one
      participant per recording.

    Numeric arrays are refused (see the module's docstring for why), so scikit-learn's
    ``check_estimator`` checks that fit on them cannot pass; tests/test_estimator.py lists
    each with the reason.
    """

    def __init__(
        self,
        preset: str = DEFAULT_PRESET,
        config=None,
        epochs: int | None = None,
        batch_size: int | None = None,
        lr: float | None = None,
        patience: int | None = None,
        val_fraction: float | None = None,
        no_xai: bool = False,
        no_interactions: bool = False,
        no_age_interactions: bool = False,
        frequency_encoding: str | None = None,
        random_state: int = 0,
        device: str = DEFAULT_DEVICE,
    ):
        self.preset = preset
        self.config = config
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.patience = patience
        self.val_fraction = val_fraction
        self.no_xai = no_xai
        self.no_interactions = no_interactions
        self.no_age_interactions = no_age_interactions
        self.frequency_encoding = frequency_encoding
        self.random_state = random_state
        self.device = device

    def fit(self, X, y, groups=None):
        """Fit on the recordings ``X`` with labels ``y``.

        Parameters
        ----------
        X : pandas.DataFrame | sequence of Connectome or paths
            The recordings (see the class's Notes).
        y : array-like of shape (n_recordings,)
            Class labels (at least two classes).
        groups : array-like of shape (n_recordings,) | None
            Participant of each recording, for the inner validation split (default: ``X``'s
            ``participant_id`` column, else one participant per recording: recording-wise,
            which a warning names).

        Returns
        -------
        self : XAIguiFormerClassifier
            The fitted estimator.

        Raises
        ------
        InputDataError
            ``X`` is not a table of recordings, ``y`` has one class or another length, the
            connectomes differ in channels or bands, or too few participants for the inner
            validation split.
        UsageError
            Invalid settings (named as ``train`` names them), or ``y`` is a measure, not
            classes: numbers with more than 10 distinct values (as ``train`` refuses such a
            label column).
        """
        from eegformer_cli.model.devices import resolve_precision, resolve_train_device
        from eegformer_cli.training.fit import build_model
        from eegformer_cli.training.run_plan import transformer_parameters

        config = self._train_config()
        table = _rows(X)
        recordings, channels, bands, edges = _recordings(table, groups, _labels(y, len(table)))
        settings = _preprocess_settings(recordings, None)
        if groups is None:
            _warn_without_participants(table)
        classes = _classes(y)
        data = _training_data(recordings, [str(c) for c in classes], channels, bands, edges)
        train_ids, val_ids = self._inner_split(data, recordings, config)
        size = transformer_parameters(build_model(data, config, np.array([np.nan])))
        device = resolve_train_device(config.device, size)
        fit = self._fit_model(data, recordings, set(train_ids), set(val_ids), config, device)
        self.classes_ = classes
        self.model_ = fit.model
        self.history_ = fit.history
        self.best_epoch_ = fit.best_epoch
        self.train_participants_, self.val_participants_ = list(train_ids), list(val_ids)
        self.channels_, self.bands_ = channels, bands
        self.config_ = config.to_dict()
        self.preprocess_settings_ = settings
        self._device = device
        self._precision = resolve_precision(config.precision)
        return self

    def _inner_split(self, data, recordings: list, config):
        """The participant-wise inner validation split of ``recordings`` (stratified on the
        label, seeded with ``random_state``): ``(train participant ids, validation ids)``."""
        from eegformer_cli.training import splits

        participants = np.array([r.participant_id for r in recordings])
        return splits.inner_validation_split(
            participants,
            data.label_indices(),
            config.val_fraction,
            self.random_state,
            where=f"X ({len(set(participants))} participants)",
        )

    def _fit_model(self, data, recordings: list, train_ids: set, val_ids: set, config, device):
        """The epoch loop of one ``train`` fold on the recordings of the ``train_ids``
        participants, selecting the epoch on those of ``val_ids`` (seeded with
        ``random_state``)."""
        from eegformer_cli.training.fit import deterministic_algorithms, fit_model

        with deterministic_algorithms(device):
            return fit_model(
                data,
                [r for r in recordings if r.participant_id in train_ids],
                [r for r in recordings if r.participant_id in val_ids],
                config,
                device,
                self.random_state,
                {"repeat": 0, "fold": 0},
            )

    def predict_proba(self, X):
        """Class probabilities per recording: softmax of the segment-mean refined logits (as
        ``train``'s out-of-fold predictions and ``predict``).

        Parameters
        ----------
        X : pandas.DataFrame | sequence of Connectome or paths
            The recordings, with the fitted channels and bands.

        Returns
        -------
        numpy.ndarray of shape (n_recordings, n_classes)
            Columns in the order of ``classes_``.
        """
        from scipy.special import softmax

        from eegformer_cli.training.dataset import ConnectomeDataset
        from eegformer_cli.training.fit import deterministic_algorithms, evaluate

        check_is_fitted(self, "model_")
        names = [str(c) for c in self.classes_]
        table = _rows(X)
        # labels are not used to predict: every recording gets the first class as a placeholder
        recordings, channels, bands, _ = _recordings(table, None, [names[0]] * len(table))
        if channels != self.channels_ or bands != self.bands_:
            raise InputDataError(
                f"X has channels {', '.join(channels)} and bands "
                f"{', '.join(bands)}; the estimator was fitted on "
                f"{', '.join(self.channels_)} and {', '.join(self.bands_)}"
            )
        _preprocess_settings(recordings, self.preprocess_settings_)
        dataset = ConnectomeDataset(recordings, names, channels, bands)
        with deterministic_algorithms(self._device):
            return softmax(evaluate(self.model_, dataset, self._device, self._precision), axis=1)

    def predict(self, X):
        """The most probable class of each recording.

        Parameters
        ----------
        X : pandas.DataFrame | sequence of Connectome or paths
            The recordings.

        Returns
        -------
        numpy.ndarray of shape (n_recordings,)
            Labels from ``classes_``.
        """
        probabilities = self.predict_proba(X)  # checks first that it is fitted
        return self.classes_[np.argmax(probabilities, axis=1)]

    def _train_config(self):
        """The resolved ``TrainConfig``: preset -> ``config`` -> the other parameters."""
        from eegformer_cli.training.config import ablation_flags, resolve_config

        if self.config is not None and not isinstance(self.config, (str, os.PathLike, dict)):
            raise UsageError(
                f"invalid config {self.config!r}; give a TOML file or a dict of training settings"
            )
        return resolve_config(
            self.preset,
            self.config,
            {
                "epochs": self.epochs,
                "batch_size": self.batch_size,
                "lr": self.lr,
                "patience": self.patience,
                "val_fraction": self.val_fraction,
                "seed": self.random_state,
                "device": self.device,
                **ablation_flags(
                    self.no_xai,
                    self.no_interactions,
                    self.no_age_interactions,
                    self.frequency_encoding,
                ),
            },
        )


def _rows(X):
    """``X`` as a DataFrame with a ``connectome`` column (a sequence of connectomes becomes
    one); InputDataError for anything else (a numeric array)."""
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        if CONNECTOME_COLUMN not in X.columns:
            raise InputDataError(
                f"X has no {CONNECTOME_COLUMN!r} column (columns: "
                f"{', '.join(map(str, X.columns))}); give a table of "
                "recordings, e.g. eegformer_cli.read_preprocessed(folder)"
            )
        return X
    from eegformer_cli.preprocess.output import Connectome

    entries = list(X) if isinstance(X, (list, tuple, np.ndarray)) else None
    if (
        entries is None
        or not entries
        or not all(isinstance(entry, (Connectome, str, os.PathLike)) for entry in entries)
    ):
        shape = f" of shape {np.shape(X)}" if hasattr(X, "shape") else ""
        raise InputDataError(
            f"X is a {type(X).__name__}{shape}, not recordings; give a table with a "
            f"{CONNECTOME_COLUMN!r} column (eegformer_cli.read_preprocessed(folder)) or a list "
            "of connectomes (Connectome objects or .npz paths): a recording is a stack of "
            "connectivity matrices with its own number of segments, not a row of numbers"
        )
    return pd.DataFrame({CONNECTOME_COLUMN: entries})


def _warn_without_participants(table) -> None:
    """A warning naming ``groups`` when ``fit`` got none and ``table`` lacks the participant of
    some recordings: each then counts as a participant of its own (recording-wise)."""
    if "participant_id" in table.columns:
        missing = sum(
            value is None or (isinstance(value, float) and math.isnan(value))
            for value in table["participant_id"]
        )
    else:
        missing = len(table)
    if missing:
        warn(
            f"fit without groups: {missing} of {len(table)} recordings have no participant_id, "
            "so each counts as a participant of its own in the inner validation split "
            "(recording-wise: one person's recordings may be on both sides of it); pass "
            "groups=participant ids, or a participant_id column in X"
        )


def _classes(y) -> np.ndarray:
    """The sorted class labels of ``y``; InputDataError for fewer than two."""
    classes = np.unique(np.asarray(y))
    if len(classes) < 2:
        raise InputDataError(
            f"y has only one class ({classes[0]!r}); a classifier needs at least two"
        )
    return classes


def _labels(y, n: int) -> list[str]:
    """``y`` as the label text of each recording (InputDataError for another length;
    UsageError for a measure, as ``train`` refuses its label column:
    :func:`~eegformer_cli.training.dataset.check_not_a_measure`)."""
    from eegformer_cli.training.dataset import check_not_a_measure

    values = np.asarray(y)
    if values.ndim != 1 or len(values) != n:
        raise InputDataError(f"y has shape {values.shape}; expected one label per recording ({n})")
    labels = [str(value) for value in values]
    check_not_a_measure(
        labels, "y", "make classes of it first, e.g. pandas.cut(y, bins, labels=[...])"
    )
    return labels


def _recordings(table, groups, labels: list[str]):
    """The recordings of ``table`` (:func:`_rows`) as the trainer's ``RecordingInfo`` (in its
    order), with the channels, bands and band edges (Hz) of the first one (the dataset checks
    every other against them when it reads it)."""
    from eegformer_cli.preprocess.output import Connectome
    from eegformer_cli.recordings.demographics import age_input, sex_input
    from eegformer_cli.training.dataset import RecordingInfo

    n = len(table)
    groups = None if groups is None else list(groups)
    if groups is not None and len(groups) != n:
        raise InputDataError(f"groups has {len(groups)} values; expected one per recording ({n})")
    column = {
        name: (list(table[name]) if name in table.columns else [None] * n)
        for name in OPTIONAL_COLUMNS
    }
    recordings = []
    for i, connectome in enumerate(table[CONNECTOME_COLUMN]):
        recording_id = str(
            column["recording_id"][i] if column["recording_id"][i] is not None else i
        )
        participant = groups[i] if groups is not None else column["participant_id"][i]
        if participant is None or (isinstance(participant, float) and math.isnan(participant)):
            participant = recording_id
        if not isinstance(connectome, Connectome):
            connectome = Path(connectome).absolute()
        n_segments = column["n_segments"][i]
        if n_segments is None or isinstance(connectome, Connectome):
            n_segments = _n_segments(connectome)
        recordings.append(
            RecordingInfo(
                recording_id,
                str(participant),
                labels[i],
                age_input(column["age"][i]),
                sex_input(column["sex"][i]),
                connectome,
                int(n_segments),
            )
        )
    channels, bands, edges = _layout(recordings[0].connectome)
    return recordings, channels, bands, edges


def _preprocess_settings(recordings, fitted):
    """The one set of preprocessing settings of the ``preprocess`` folders that hold the
    recordings' connectome files (``connectomes/NAME.npz`` beside ``preprocess.json``), or
    None when no recording is such a file (Connectome objects, loose files).

    Raises InputDataError naming each setting that changes the tokens
    (:meth:`PreprocessSettings.differences`) where two folders differ, or where a folder
    differs from ``fitted`` (the settings the estimator was fitted on, None: not known)."""
    from eegformer_cli.preprocess.settings import PreprocessSettings

    folders = {r.connectome.parent.parent for r in recordings if isinstance(r.connectome, Path)}
    found = {
        folder: settings
        for folder in sorted(folders)
        if (settings := PreprocessSettings.of_folder(folder)) is not None
    }
    expected, against = fitted, "the estimator was fitted on"
    if expected is None and found:
        first = next(iter(found))
        expected, against = found[first], f"those in {first}"
    for folder, settings in found.items():
        differences = settings.differences(expected)
        if differences:
            raise InputDataError(
                f"X's recordings in {folder} were preprocessed with other settings than "
                f"{against}: "
                + ", ".join(
                    f"{name} {here} (not {other})" for name, (here, other) in differences.items()
                ),
                hint="give recordings preprocessed with one set of settings",
            )
    return expected


def _n_segments(connectome) -> int:
    """Segments of a Connectome or of a connectome file."""
    from eegformer_cli.preprocess.output import read_segment_count

    if not isinstance(connectome, Path):
        return connectome.n_segments
    return read_segment_count(connectome)


def _layout(connectome) -> tuple[list[str], list[str], np.ndarray]:
    """(channels, bands, band edges (n_bands, 2) Hz) of a Connectome or connectome file."""
    from eegformer_cli.preprocess.output import read_layout

    if not isinstance(connectome, Path):
        return (
            list(map(str, connectome.channels)),
            list(map(str, connectome.bands)),
            np.asarray(connectome.band_edges_hz, dtype=np.float64),
        )
    return read_layout(connectome)


def _training_data(recordings, label_names, channels, bands, edges):
    """The trainer's ``TrainingData`` for recordings held in a table, not a folder."""
    from eegformer_cli.training.dataset import TrainingData

    return TrainingData(
        data_dir=Path.cwd(),
        label_column="y",
        recordings=recordings,
        label_names=label_names,
        channels=channels,
        bands=bands,
        band_edges_hz=edges,
        preprocess=None,
    )
