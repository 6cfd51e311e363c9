"""A run's input recordings: found under the inputs (a BIDS root's, with ``--task``,
``--session``, ``--run``), given ids, matched to their participants and metadata (the tables,
``--participant-pattern``, the BIDS entities), their headers read (:func:`gather_recordings`),
and the run's channels and epoch length chosen from those headers (:func:`resolve_settings`),
with a warning for each thing the user may not expect."""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from eegformer_cli import console
from eegformer_cli.choices import STANDARD_1020
from eegformer_cli.errors import InputDataError, UsageError, first_few
from eegformer_cli.preprocess.output import MANIFEST_LEADING_COLUMNS, MANIFEST_TRAILING_COLUMNS
from eegformer_cli.preprocess.settings import PreprocessSettings
from eegformer_cli.preprocess.workers import Header, RecordingMap, read_header, with_progress
from eegformer_cli.recordings import bids, cleaning, metadata, reading
from eegformer_cli.recordings.channels import select_channel_set


@dataclass
class Recording:
    """One input recording as the run sees it: identity, metadata, header and, in a BIDS
    dataset, the entities of its file name (:func:`bids.entities`: the manifest's columns
    ``subject``, ``session``, ``task``, ``acquisition``, ``run``)."""

    path: Path
    recording_id: str
    participant_id: str | None
    metadata: dict
    header: Header
    entities: dict[str, str]


@dataclass(frozen=True)
class Sources:
    """Where a run's recordings and their metadata come from, and which of a BIDS root's
    recordings it reads (``preprocess.json`` keeps it)."""

    inputs: Sequence[str | Path]
    participants_file: Path | None
    recordings_file: Path | None
    participant_pattern: str | None
    selection: bids.Selection

    @classmethod
    def find(
        cls, inputs, participants, recordings_table, participant_pattern, selection
    ) -> Sources:
        """The tables given, else those found beside the inputs (:mod:`metadata`)."""
        return cls(
            inputs,
            Path(participants) if participants else metadata.find_participants_file(inputs),
            Path(recordings_table) if recordings_table else metadata.find_recordings_file(inputs),
            participant_pattern,
            selection,
        )


def gather_recordings(
    sources: Sources, workers: RecordingMap, pattern: re.Pattern | None = None
) -> list[Recording]:
    """Every input recording of ``sources`` (a BIDS root's that ``sources.selection`` selects)
    with its id, participant, metadata, BIDS entities and header (in path order); ``pattern``:
    the ``--participant-pattern`` (:func:`_named_participants`)."""
    paths = reading.find_recordings(list(sources.inputs), sources.selection)
    participants_file, recordings_file = sources.participants_file, sources.recordings_file
    participants_rows = metadata.load_participants(participants_file) if participants_file else {}
    recordings_rows = metadata.load_recordings_table(recordings_file) if recordings_file else {}
    table_root = recordings_file.parent if recordings_file else None
    entities = {path: bids.entities(path) for path in paths}
    _warn_shadowed_columns(
        {"participants": participants_rows, "recordings": recordings_rows},
        {key for found in entities.values() for key in found},
    )
    named = _named_participants(paths, pattern, participants_file, participants_rows)
    headers = {
        header.path: header
        for header in with_progress(workers(read_header, paths), len(paths), "reading headers")
    }
    recordings = []
    for path, recording_id in zip(paths, reading.recording_ids(paths)):
        participant_id, merged = metadata.match_participant(
            path, participants_rows, recordings_rows, table_root, named.get(path)
        )
        recordings.append(
            Recording(path, recording_id, participant_id, merged, headers[path], entities[path])
        )
    _warn_unmatched(recordings, participants_file, participants_rows)
    if not sources.selection.tasks:
        _warn_pooled_tasks(recordings)
    return recordings


def entity_columns(recordings: list[Recording]) -> list[str]:
    """The BIDS entities some of ``recordings`` have, in :data:`bids.ENTITIES` order: the
    manifest's entity columns."""
    return [key for key in bids.ENTITIES if any(key in rec.entities for rec in recordings)]


def _warn_pooled_tasks(recordings: list[Recording]) -> None:
    """One warning when the BIDS recordings of a run without ``--task`` are of several tasks,
    with the count of each: pooling them may be meant, or may not."""
    counts = collections.Counter(
        rec.entities["task"] for rec in recordings if "task" in rec.entities
    )
    if len(counts) < 2:
        return
    console.warn(
        escape(
            f"{sum(counts.values())} BIDS recordings of {len(counts)} tasks pooled into one "
            f"study ({', '.join(f'{task}: {n}' for task, n in sorted(counts.items()))}); "
            "task is a manifest column: `train --label-column task` tells the tasks apart, and "
            "with another label train's shortcut audit checks whether the task predicts it; to "
            "study one task alone, pass --task NAME"
        )
    )


def _named_participants(
    paths: list[Path],
    pattern: re.Pattern | None,
    participants_file: Path | None,
    participants_rows: dict,
) -> dict[Path, str]:
    """The participant ``pattern`` finds in each file name (:func:`metadata.participant_named_by`),
    for the files it matches ({} without a pattern).

    Raises UsageError when it matches no file name, InputDataError when it captures ids that
    the participants table lacks (naming them); warns about the files it does not match.
    """
    if pattern is None:
        return {}
    named = {
        path: found
        for path in paths
        if (found := metadata.participant_named_by(path, pattern)) is not None
    }
    if not named:
        raise UsageError(
            f"--participant-pattern '{pattern.pattern}' matches none of the {len(paths)} file "
            f"names (e.g. {paths[0].name})",
            hint="its first group (...) must capture the participant in names such as that",
        )
    if participants_file is not None:
        lacking = sorted(set(named.values()) - set(participants_rows))
        if lacking:
            shown = first_few(lacking, 5)
            raise InputDataError(
                f"--participant-pattern '{pattern.pattern}' captured {len(lacking)} "
                f"participant id(s) that the participants table does not list: {shown}",
                path=participants_file,
                hint="change the pattern so it captures the table's ids, or add them to the table",
            )
    unmatched = [path.name for path in paths if path not in named]
    if unmatched:
        shown = first_few(unmatched)
        console.warn(
            escape(
                f"--participant-pattern '{pattern.pattern}' does not match {len(unmatched)} "
                f"of {len(paths)} file names ({shown}); their participant comes from the "
                "tables or the BIDS sub- entity, if any"
            )
        )
    return named


def _warn_shadowed_columns(tables: dict[str, dict], entity_columns: set[str]) -> None:
    """One warning for metadata columns named like the manifest's own (e.g. ``status``, or
    ``task`` in a run of BIDS recordings: ``entity_columns``): the manifest keeps its own value
    there, so the table's would be lost without a word."""
    own = (set(MANIFEST_LEADING_COLUMNS) | set(MANIFEST_TRAILING_COLUMNS) | entity_columns) - {
        "participant_id",
        "age",
        "sex",
    }
    for name, rows in tables.items():
        shadowed = sorted({key for row in rows.values() for key in row} & own)
        if shadowed:
            console.warn(
                f"{name} table: column(s) {', '.join(shadowed)} are also manifest "
                "columns; the manifest keeps its own values there (rename them to keep "
                "yours)"
            )


def _warn_unmatched(
    recordings: list[Recording], participants_file: Path | None, participants_rows: dict
) -> None:
    """One warning for the recordings without a participant id (``train`` refuses
    participant-wise splits of them), one for those processed without a participants row."""
    anonymous = [rec.path.name for rec in recordings if rec.participant_id is None]
    if anonymous:
        shown = first_few(anonymous)
        console.warn(
            escape(
                f"{len(anonymous)} of {len(recordings)} recordings have no participant id "
                f"({shown}), so train cannot keep a person's recordings on one side of a split; "
                "name them with --participant-pattern REGEX (e.g. '^(.+)_\\d+' for "
                "Subject15_1.edf), a participant_id column in recordings.tsv, or BIDS sub- "
                "file names"
            )
        )
    if participants_file is None:
        console.warn(
            "no participants table found (participants.tsv at the dataset root or "
            "--participants); age and sex are n/a for every recording"
        )
        return
    unmatched = [
        rec.recording_id
        for rec in recordings
        if rec.participant_id is None or rec.participant_id not in participants_rows
    ]
    if unmatched:
        shown = first_few(unmatched, 5)
        console.warn(
            f"{len(unmatched)} recordings have no row in {participants_file} ({shown}); "
            "their demographics are n/a"
        )


def resolve_settings(settings: PreprocessSettings, readable: list[Header]) -> PreprocessSettings:
    """``settings`` with the run's channels and epoch length filled in (and logged).

    Channels: ``settings.channels`` in canonical spelling, or the standard 10-20 channels every
    readable recording has. Epoch length "auto": :func:`cleaning.auto_epoch_length` of the
    shortest readable recording that can hold 4 minimum-length epochs (shorter ones then fail
    as too short instead of shrinking everybody's epochs), so that all recordings of a run get
    the same estimator. With no readable recording nothing is resolved.
    """
    if not readable:
        return settings
    channels = select_channel_set(
        [set(header.channels) for header in readable],
        None if settings.channels is None else list(settings.channels),
    )
    if settings.channels is None:
        _warn_channels_dropped_for_a_few(readable, channels)
    epoch_length = settings.epoch_length
    if epoch_length == "auto":
        usable = [
            min(header.duration_s, settings.crop_s or math.inf)
            for header in readable
            if header.duration_s >= cleaning.AUTO_MIN_SEGMENTS * cleaning.MIN_EPOCH_LENGTH_S
        ]
        epoch_length = (
            cleaning.auto_epoch_length(min(usable), settings.window_s)
            if usable
            else cleaning.MIN_EPOCH_LENGTH_S
        )
    console.log(
        f"preprocess: {len(readable)} readable recordings, {len(channels)} channels "
        f"({', '.join(channels)}), {len(settings.bands)} bands, epochs of {epoch_length:g} s"
    )
    return dataclasses.replace(settings, channels=tuple(channels), epoch_length=float(epoch_length))


def _warn_channels_dropped_for_a_few(readable: list[Header], channels: list[str]) -> None:
    """Warn when the default channel rule (every recording's standard channels) drops channels
    that most recordings have, because a few lack them: the user may rather keep the channels
    and interpolate or reject those few (``--channels``)."""
    dropped = [
        name
        for name in STANDARD_1020
        if name not in channels
        and 2 * sum(name in header.channels for header in readable) > len(readable)
    ]
    if not dropped:
        return
    lacking = [header.path.name for header in readable if not set(dropped) <= header.channels]
    shown = first_few(lacking)
    console.warn(
        f"{', '.join(dropped)} left out of every recording because {len(lacking)} of "
        f"{len(readable)} lack them ({shown}); to keep them, pass --channels with them: "
        "the recordings that lack them are then interpolated (--max-interpolated) or "
        "rejected"
    )
