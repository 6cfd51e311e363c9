"""A model file's inputs: the recordings ``predict`` and ``explain`` are given, each ready for
the model (:class:`InputRecording`) or with the reason it is not; their predictions are
:mod:`.predictions`'.

Inputs are raw recordings (any format ``preprocess`` reads; each is preprocessed with the
settings and channel list stored in the model, so a recording with other channel names or
another sampling rate is adapted exactly as ``preprocess`` would, or rejected with its reason)
or ``preprocess`` output folders (their channels and bands must equal the model's).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eegformer_cli import provenance
from eegformer_cli.errors import EegformerError, InputDataError
from eegformer_cli.experiment import run_folder
from eegformer_cli.preprocess import output
from eegformer_cli.recordings import demographics


@dataclass
class InputRecording:
    """One recording ready for the model, or the reason it is not.

    ``coh``, ``wpli`` float32 (n_segments, n_bands, C, C) in the model's channel and band order;
    ``covariance`` float32 (n_covariance_bands, C, C), V^2, the band covariances (None when the
    connectome has none: ``model/static_paths.py``); ``onsets_s`` float64 (n_segments,) the
    segments' starts in the recording, s (None when the connectome file gives none);
    ``age`` years (NaN = unknown); ``sex`` 0 = male, 1 = female, NaN = unknown; ``error`` a
    one-line reason when the recording could not be used (then coh/wpli are None).

    Provenance (:mod:`eegformer_cli.provenance`): ``source`` the input given (a file, or the
    preprocess folder); ``source_file`` the recording file (for a preprocess folder, its
    manifest's); ``age_source`` / ``sex_source`` where the values came from (flag, table,
    manifest, none); ``table`` the participants table consulted (None: none) and
    ``table_lists_participant`` whether it lists the recording's participant; ``entities`` the
    BIDS entities of a recording of a BIDS dataset (``subject``, ``session``, ``task``,
    ``acquisition``, ``run``: its file name's, or its manifest row's); ``label`` the
    recording's class in the model's label column where its manifest row or the participants
    table gives one of the model's classes (None otherwise); ``channels_interpolated`` the
    channels filled by interpolation and ``channels_marked_bad`` those of them it has but marks
    bad (:mod:`eegformer_cli.recordings.channel_facts`); the recording's
    own ``source_sfreq`` (Hz) and ``duration_s`` (s), NaN when unknown; ``signal_sha256`` (None
    when unknown); ``shorter_than_crop_s`` the model's crop (s) when the recording is shorter
    and was analysed whole (None otherwise); ``warnings`` one line each, set by
    :func:`load_inputs` for usable ones.
    """

    recording_id: str
    participant_id: str | None
    source: str
    coh: np.ndarray | None = None
    wpli: np.ndarray | None = None
    covariance: np.ndarray | None = None
    onsets_s: np.ndarray | None = None
    age: float = math.nan
    sex: float = math.nan
    error: str | None = None
    source_file: str | None = None
    n_segments_rejected: int | None = None
    channels_interpolated: list[str] = field(default_factory=list)
    channels_marked_bad: list[str] = field(default_factory=list)
    source_sfreq: float = math.nan
    duration_s: float = math.nan
    signal_sha256: str | None = None
    age_source: str = "none"
    sex_source: str = "none"
    table: str | None = None
    table_lists_participant: bool | None = None
    label: str | None = None
    shorter_than_crop_s: float | None = None
    warnings: list[str] = field(default_factory=list)

    def recording_tuple(self) -> tuple:
        """``(coh, wpli, age, sex, covariance)``: what ``model/predict.recording_logits``
        reads of a usable recording."""
        return (self.coh, self.wpli, self.age, self.sex, self.covariance)

    entities: dict[str, str] = field(default_factory=dict)


class InputRecordings:
    """The recordings :func:`load_inputs` found, made one at a time when iterated (a raw one is
    preprocessed then); ``len()`` is their number, known before any is made.
    ``entity_columns``: the BIDS entities any of them has (``bids.ENTITIES`` order), known
    before too, so that every row of a call has the same columns."""

    def __init__(self, makers: list, entity_columns: Sequence[str] = ()):
        self._makers = makers
        self.entity_columns = tuple(entity_columns)

    def __len__(self) -> int:
        return len(self._makers)

    def __iter__(self) -> Iterator[InputRecording]:
        return (make() for make in self._makers)


def load_inputs(
    bundle,
    inputs: Sequence[str | Path],
    participants: str | Path | None = None,
    age: float | None = None,
    sex: str | None = None,
    max_interpolated: int | None = None,
) -> InputRecordings:
    """Per-recording connectomes for ``bundle``'s model from raw files and/or preprocess folders.

    Parameters
    ----------
    bundle : a loaded model file (channels, bands and preprocess settings are taken from it).
    inputs : recording files, folders of recordings, or ``preprocess`` output folders (a folder
        with ``manifest.tsv``).
    participants : a participants table for the demographics (default: the one found beside
        the raw inputs, as ``preprocess`` does). Given explicitly, it also replaces the
        demographics a preprocess folder's manifest holds for the participants it lists.
    age, sex : demographics for every recording (override the tables): years; M/F.
    max_interpolated : the most missing channels a raw recording may have filled by
        interpolation (default: the model's preprocessing setting).

    Returns the recordings in the order the inputs were given (a folder's recordings sorted; a
    recording named twice comes once); a recording that cannot be used comes with ``error``
    (the others go on), a usable one with its provenance and ``warnings``
    (:func:`provenance.recording_warnings` against the model's training data). What concerns
    the inputs as a whole is checked here, before any recording is read: bad ``age``, ``sex``
    or ``max_interpolated`` raise UsageError; an input that does not exist or holds no
    recording, a participants table that cannot be read, or a preprocess folder made with
    other channels, bands or preprocessing settings than the model's, InputDataError.
    """
    forced_age = demographics.age_flag(age)
    forced_sex = demographics.sex_flag(sex) if sex is not None else None
    settings = _raw_settings(bundle, max_interpolated)
    entries = [Path(entry) for entry in inputs]
    folders = {
        index: _checked_preprocess_folder(bundle, entry)
        for index, entry in enumerate(entries)
        if entry.is_dir() and (entry / output.MANIFEST_NAME).is_file()
    }
    paths_of, ids = _raw_recordings(bundle, entries, folders)
    table = _participants_table(
        participants, [entry for index, entry in enumerate(entries) if index not in folders]
    )
    call = _Call(bundle, settings, forced_age, forced_sex, table, bool(participants), ids)
    makers = []
    for index, entry in enumerate(entries):
        if index in folders:
            makers += [functools.partial(_from_folder, call, entry, row) for row in folders[index]]
        else:
            makers += [functools.partial(_from_raw, call, path) for path in paths_of[index]]
    return InputRecordings(makers, _entity_columns(call, folders))


def _entity_columns(call: _Call, folders: dict[int, list[dict]]) -> list[str]:
    """The BIDS entities of the call's raw recordings' file names and of its preprocess
    folders' manifest columns, in ``bids.ENTITIES`` order."""
    from eegformer_cli.recordings import bids

    present = {key for path in call.ids for key in bids.entities(path)}
    present.update(key for rows in folders.values() for row in rows[:1] for key in row)
    return [key for key in bids.ENTITIES if key in present]


@dataclass
class _Call:
    """What the recordings of one :func:`load_inputs` call share: the model, the settings for
    raw recordings, the checked ``--age`` / ``--sex`` (None: not given), the participants
    table (given, or found beside the raw inputs) with its rows, and the raw recordings' ids."""

    bundle: object
    settings: object
    age: float | None
    sex: float | None
    table: Path | None
    table_given: bool
    ids: dict[Path, str]
    table_rows: dict = field(init=False)

    def __post_init__(self) -> None:
        from eegformer_cli.recordings import metadata

        self.table_rows = metadata.load_participants(self.table) if self.table else {}


def _raw_recordings(
    bundle, entries: list[Path], folders: dict[int, list[dict]]
) -> tuple[dict[int, list[Path]], dict[Path, str]]:
    """Each raw input's recordings (by the input's index; a recording named by two inputs goes
    with the first; a BIDS root's, those :func:`_entry_recordings` selects) and every raw
    recording's id."""
    from eegformer_cli.recordings import reading

    paths_of: dict[int, list[Path]] = {}
    seen: set[Path] = set()
    for index, entry in enumerate(entries):
        if index not in folders:
            paths_of[index] = [
                path for path in _entry_recordings(bundle, entry) if path not in seen
            ]
            seen.update(paths_of[index])
    paths = [path for found in paths_of.values() for path in found]
    return paths_of, dict(zip(paths, reading.recording_ids(paths))) if paths else {}


def _entry_recordings(bundle, entry: Path) -> list[Path]:
    """The recordings of one raw input: a file, a folder's, or a BIDS root's that the model's
    preprocess folder selected (``training_data["bids_selection"]``, ``preprocess --task/
    --session/--run``: the recordings it was trained on are of those; all of them for a model
    without one).

    Raises InputDataError for a root with no recording of that selection (its files can still
    be given one by one), and as :func:`reading.find_recordings` does.
    """
    from eegformer_cli.errors import UsageError
    from eegformer_cli.recordings import bids, reading

    stored = (bundle.training_data or {}).get("bids_selection") or {}
    selection = bids.Selection.of(stored.get("task"), stored.get("session"), stored.get("run"))
    if not (selection and entry.is_dir() and bids.is_root(entry)):
        return reading.find_recordings([entry])
    try:
        selected = reading.find_recordings([entry], selection)
    except (UsageError, InputDataError):
        raise InputDataError(
            f"no recording of this BIDS root is of {selection.described()}, the selection of "
            "the recordings the model was trained on",
            path=entry,
            hint="give the recording files themselves to predict them with this model",
        ) from None
    every = reading.find_recordings([entry])
    if len(selected) < len(every):
        from eegformer_cli import console

        console.log(
            f"{entry}: its {len(selected)} recording(s) of {selection.described()} (of "
            f"{len(every)}), the selection the model was trained on"
        )
    return selected


def _participants_table(participants, raw_inputs: list[Path]) -> Path | None:
    """The participants table given, else the one found beside the raw inputs, as
    ``preprocess`` finds it (None: none)."""
    from eegformer_cli.recordings import metadata

    if participants:
        return Path(participants)
    return metadata.find_participants_file(raw_inputs) if raw_inputs else None


def _from_folder(call: _Call, folder: Path, row: dict) -> InputRecording:
    """One manifest row of a checked preprocess folder, as an input (a participants table
    given in the call replaces the manifest's demographics of the participants it lists)."""
    item = _preprocessed_input(
        call.bundle,
        folder,
        row,
        call.table if call.table_given else None,
        call.table_rows if call.table_given else {},
    )
    return _finish(call.bundle, item, call.age, call.sex)


def _from_raw(call: _Call, path: Path) -> InputRecording:
    """One raw recording, matched to the participants table and preprocessed with the model's
    settings, as an input."""
    item = _matched(call, call.ids[path], path)
    item = _preprocess_raw(call.bundle, call.settings, path, item)
    return _finish(call.bundle, item, call.age, call.sex)


def _matched(
    call: _Call, recording_id: str, file: Path | None, participant_id: str | None = None
) -> InputRecording:
    """A raw recording before it is preprocessed: its participant (``participant_id`` when
    given, else the one the name of its ``file`` gives, as ``preprocess`` finds it; None for a
    recording made in memory), with the label, age and sex the call's participants table
    gives that participant (the label from its BIDS entities first, as its manifest row
    would have them: a model of ``task``), and the table consulted."""
    from eegformer_cli.recordings import bids, metadata

    if participant_id is None and file is not None:
        participant_id, meta = metadata.match_participant(file, call.table_rows, None, None)
    else:
        meta = call.table_rows.get(participant_id, {})
    source = str(file) if file is not None else recording_id
    item = InputRecording(
        recording_id, participant_id, source, source_file=None if file is None else str(file)
    )
    if file is not None:
        item.entities = bids.entities(file)
    item.label = _known_label(call.bundle, {**meta, **item.entities})
    _set_demographics(item, meta.get("age"), meta.get("sex"), "table")
    if call.table is not None:
        item.table = str(call.table)
        item.table_lists_participant = participant_id in call.table_rows
    return item


def _finish(bundle, item: InputRecording, age: float | None, sex: float | None) -> InputRecording:
    """``item`` with ``age`` / ``sex`` (checked ``--age`` / ``--sex``, None: not given) over
    the table's or manifest's values, then the warnings of a usable recording."""
    if age is not None:
        item.age, item.age_source = age, "flag"
    if sex is not None:
        item.sex, item.sex_source = sex, "flag"
    if age is not None and sex is not None:
        item.table = None  # the table gave nothing used: no word about it
    if item.error is None:
        oof_file = run_folder.oof_path(Path(bundle.path).parent)  # the run beside the model
        item.warnings = provenance.recording_warnings(item, bundle.training_data, oof_file)
    return item


def _known_label(bundle, row: dict) -> str | None:
    """The value of the model's label column in ``row`` (a manifest or participants-table
    row) when it is one of the model's classes, else None."""
    value = row.get(bundle.label_column)
    return str(value) if value is not None and str(value) in bundle.label_names else None


def _raw_settings(bundle, max_interpolated: int | None):
    """The model's preprocessing settings for raw recordings, with ``max_interpolated`` (None:
    the model's) checked by :class:`~eegformer_cli.preprocess.settings.PreprocessSettings`, the
    owner of that check (UsageError before any recording is read)."""
    from eegformer_cli.preprocess.settings import PreprocessSettings

    settings = PreprocessSettings.from_dict(bundle.preprocess_settings)
    if max_interpolated is None:
        return settings
    return dataclasses.replace(settings, max_interpolated=max_interpolated)


def _set_demographics(item: InputRecording, age, sex, source: str) -> None:
    """``item``'s age and sex from table or manifest values (text, number or None), each with
    ``source`` where known and ``"none"`` where not."""
    item.age, item.sex = demographics.age_value(age), demographics.sex_value(sex)
    item.age_source = source if not math.isnan(item.age) else "none"
    item.sex_source = source if not math.isnan(item.sex) else "none"


def _preprocess_raw(bundle, settings, recording, item: InputRecording) -> InputRecording:
    """``item`` with the connectome of ``recording`` (a file's path, or an ``mne.io.Raw``),
    preprocessed with ``settings`` (:func:`_raw_settings`) and the model's channels, or with
    its ``error``. A recording shorter than the model's crop is preprocessed whole and keeps
    that crop in ``shorter_than_crop_s`` (its warning, :mod:`eegformer_cli.provenance`)."""
    from eegformer_cli.preprocess.recording import process_raw, process_recording
    from eegformer_cli.recordings.cleaning import ShorterThanCrop

    name = item.source_file or item.recording_id

    def connectome_with(settings):
        """As ``preprocess`` makes it: a file read as ``preprocess`` reads it (its BIDS
        ``channels.tsv`` and header included), a Raw as given."""
        if isinstance(recording, Path):
            return process_recording(recording, settings, bundle.channels)
        return process_raw(recording, settings, bundle.channels, path=name)

    try:
        try:
            connectome = connectome_with(settings)
        except ShorterThanCrop:
            item.shorter_than_crop_s = settings.crop_s
            connectome = connectome_with(dataclasses.replace(settings, crop_s=None))
    except EegformerError as exc:
        item.error = exc.one_line()
        return item
    if list(connectome.bands) != bundle.bands:
        item.error = (
            f"{item.source_file or item.recording_id}: bands {connectome.bands} differ "
            f"from the model's {bundle.bands}"
        )
        return item
    item.coh, item.wpli, item.covariance = connectome.coh, connectome.wpli, connectome.covariance
    item.onsets_s = output.read_onsets(connectome, len(connectome.coh))
    _set_recorded(item, {key: getattr(connectome, key) for key in output.RECORDED})
    item.signal_sha256 = _comparable_hash(bundle, recording, connectome.signal_sha256)
    return item


def _comparable_hash(bundle, recording, signal_sha256: str) -> str:
    """``signal_sha256``, or, for a model file whose training recordings were hashed by an
    earlier version (channel by channel), ``recording``'s hash made that way: what the model's
    training-data check (:mod:`eegformer_cli.provenance`) and ``explain``'s out-of-fold models
    compare with. It reads the recording again, once per channel, in bounded memory."""
    from eegformer_cli.recordings import reading

    hashes = (bundle.training_data or {}).get("signal_sha256", {})
    if not reading.needs_channel_major_hash(hashes):
        return signal_sha256
    if isinstance(recording, Path):
        recording = reading.read_recording(recording, preload=not reading.reads_lazily(recording))
    return reading.channel_major_sha256(recording)


def raw_inputs(
    bundle,
    raws: Sequence,
    ages: Sequence[float | None],
    sexes: Sequence[str | None],
    max_interpolated: int | None = None,
    participants: str | Path | None = None,
    participant_ids: Sequence[str | None] | None = None,
) -> InputRecordings:
    """:func:`load_inputs` for recordings held in memory (``mne.io.Raw`` objects), each
    preprocessed with the model's settings when iterated.

    A Raw read from a file gets what ``predict`` on the file gets: the file's recording id,
    ``source_file``, and its participant from the participants table (``participants``, else
    the one found beside the files) or the file's name; one made in memory is ``raw-<i>`` (its
    index) with no source file and no participant. ``participant_ids``: one per Raw (None:
    found as above), whose table rows give age and sex. ``ages`` / ``sexes``: one per Raw
    (years; M/F), None = the table's or unknown; a given value has the source ``flag``, as
    ``--age`` / ``--sex``.
    """
    from eegformer_cli.recordings import reading

    settings = _raw_settings(bundle, max_interpolated)
    files = [Path(raw.filenames[0]) if raw.filenames and raw.filenames[0] else None for raw in raws]
    named = [path for path in files if path is not None]
    file_ids = iter(reading.recording_ids(named) if named else [])
    ids = [
        next(file_ids) if path is not None else f"raw-{index}" for index, path in enumerate(files)
    ]
    checked_ages = [demographics.age_flag(age) for age in ages]
    checked_sexes = [None if sex is None else demographics.sex_flag(sex) for sex in sexes]
    table = _participants_table(participants, named)
    call = _Call(bundle, settings, None, None, table, bool(participants), {})
    given = [None if pid is None else str(pid) for pid in participant_ids or [None] * len(raws)]

    def from_raw(index: int) -> InputRecording:
        item = _matched(call, ids[index], files[index], given[index])
        return _finish(
            bundle,
            _preprocess_raw(bundle, settings, raws[index], item),
            checked_ages[index],
            checked_sexes[index],
        )

    return InputRecordings([functools.partial(from_raw, index) for index in range(len(raws))])


def _checked_preprocess_folder(bundle, folder: Path) -> list[dict]:
    """The manifest rows of a preprocess output folder, after checking that its tokens are
    what the model expects: the same channels and bands (from its first connectome) and the
    same preprocessing settings (``preprocess.json``; every setting that changes the tokens,
    :meth:`~eegformer_cli.preprocess.settings.PreprocessSettings.differences`) as the model's
    training data.

    Raises InputDataError naming the folder, each difference and the fix (the raw recordings,
    which are then preprocessed with the model's settings, or a folder made with them).
    """
    from eegformer_cli.preprocess.settings import PreprocessSettings

    hint = _other_settings_hint(bundle)
    rows = output.read_manifest(folder)
    ok_rows = [row for row in rows if row.get("status") == "ok"]
    if ok_rows:
        channels, bands, _ = output.read_layout(output.connectome_path(folder, ok_rows[0]))
        for what, found, expected in (
            ("channels", channels, bundle.channels),
            ("bands", bands, bundle.bands),
        ):
            if found != expected:
                raise InputDataError(
                    f"{what} of this preprocess output ({', '.join(found)}) "
                    f"differ from the model's ({', '.join(expected)})",
                    path=folder,
                    hint=hint,
                )
        _check_covariances(bundle, folder, output.connectome_path(folder, ok_rows[0]))
    settings = PreprocessSettings.of_folder(folder)
    if settings is None:
        raise InputDataError(
            "preprocess.json is missing or its settings unreadable, so they cannot "
            "be checked against the model's",
            path=folder,
            hint=hint,
        )
    differences = settings.differences(PreprocessSettings.from_dict(bundle.preprocess_settings))
    if differences:
        raise InputDataError(
            "made with other preprocessing settings than the model's: "
            + ", ".join(
                f"{name} {here} (model: {model})" for name, (here, model) in differences.items()
            ),
            path=folder,
            hint=hint,
        )
    return rows


def _check_covariances(bundle, folder: Path, connectome: Path) -> None:
    """InputDataError when the model's static stage reads band covariances
    (``static_paths.reads_covariance``) and the folder's connectomes hold none (preprocessed
    by an earlier eegformer)."""
    from eegformer_cli.model.static_paths import reads_covariance

    if reads_covariance(bundle.model) and not output.read_covariance_bands(connectome):
        raise InputDataError(
            "this preprocess output holds no band covariances (made by an earlier "
            "eegformer), which the model's tangent-space path reads",
            path=folder,
            hint=_other_settings_hint(bundle),
        )


def _other_settings_hint(bundle) -> str:
    """What to give instead of a preprocess folder the model cannot read."""
    trained_on = (bundle.training_data or {}).get("data_dir")
    return "pass the raw recordings instead: they are preprocessed with the model's settings" + (
        f"; or a folder preprocessed with them, as {trained_on} the model was trained on"
        if trained_on
        else ""
    )


def _table_demographics(table: dict, participant_id: str | None) -> dict | None:
    """The participants-table row of ``participant_id`` (with or without ``sub-``), or None."""
    if participant_id is None:
        return None
    for candidate in (participant_id, participant_id.removeprefix("sub-"), f"sub-{participant_id}"):
        if candidate in table:
            return table[candidate]
    return None


def _set_recorded(item: InputRecording, recorded: dict) -> None:
    """``item``'s provenance from ``recorded`` (keys of :data:`output.RECORDED`; a missing key
    is unknown)."""
    item.n_segments_rejected = recorded.get("n_segments_rejected")
    item.channels_interpolated = [c for c in recorded.get("channels_interpolated", []) if c]
    item.channels_marked_bad = [c for c in recorded.get("channels_marked_bad", []) if c]
    item.duration_s = recorded.get("duration_s", math.nan)
    item.source_sfreq = recorded.get("source_sfreq", math.nan)
    item.signal_sha256 = recorded.get("signal_sha256") or None


def _preprocessed_input(
    bundle, folder: Path, row: dict, table: Path | None, table_rows: dict
) -> InputRecording:
    """One manifest row of a checked preprocess folder; ``table_rows`` (the participants table
    ``table``'s rows, or {} with ``table`` None) replace the manifest's age and sex of the
    participants they list."""
    from eegformer_cli.recordings import bids

    participant = row.get("participant_id")
    participant = None if (participant or "n/a").lower() in ("n/a", "") else participant
    listed = _table_demographics(table_rows, participant)
    source_file = row.get("source_file")
    item = InputRecording(
        row["recording_id"],
        participant,
        str(folder),
        source_file=None if source_file in (None, "", "n/a") else source_file,
    )
    _set_demographics(item, row.get("age"), row.get("sex"), "manifest")
    item.entities = {
        key: row[key] for key in bids.ENTITIES if (row.get(key) or "n/a").lower() not in ("n/a", "")
    }
    item.label = _known_label(bundle, row) or _known_label(bundle, listed or {})
    if table is not None:
        item.table, item.table_lists_participant = str(table), listed is not None
    if listed is not None:
        _set_demographics(item, listed["age"], listed["sex"], "table")
    if row.get("status") != "ok":
        item.error = f"{folder}: {row['recording_id']}: preprocessing failed: {row.get('error')}"
        return item
    path, n_segments = output.connectome_path(folder, row), int(float(row["n_segments"]))
    try:
        item.coh, item.wpli = output.read_tokens(
            path, bundle.channels, bundle.bands, n_segments, row["recording_id"]
        )
        item.covariance = output.read_covariances(path, len(bundle.channels), row["recording_id"])
        item.onsets_s = output.read_onsets(path, n_segments)
    except InputDataError as exc:
        item.error = exc.one_line()
        return item
    _set_recorded(item, output.read_provenance(path))
    return item
