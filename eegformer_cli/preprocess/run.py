"""A whole input -> an output folder (the ``eegformer preprocess`` command): workers, resume,
recording ids, the manifest.

Into ``out_dir``::

    out_dir/connectomes/<recording_id>.npz   one per recording that succeeded (format:
                                             preprocess/output.py)
    out_dir/manifest.tsv                     one row per input recording, ok or error (plus
                                             earlier runs' ok rows with the same settings)
    out_dir/preprocess.json                  resolved settings, channels, bands, versions, counts

Each connectome file also stores ``record_json``: the settings hash, the source file's size and
modification time and the recording's processing fields, so a rerun skips recordings already
done with the same settings and rebuilds their manifest rows without recomputing anything.
A run into a folder that holds recordings of earlier runs keeps them in the manifest when they
were made with the same settings (:func:`_earlier_rows`), so a dataset can be preprocessed
folder by folder into one output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import mne
from rich.markup import escape

from eegformer_cli import atomic, console, ownership
from eegformer_cli.connectivity.bands import band_edges_hz, band_names
from eegformer_cli.errors import (
    EegformerError,
    InputDataError,
    PartialFailure,
    UsageError,
    first_few,
)
from eegformer_cli.parallel import (
    leave_interrupts_to_the_parent,
    preprocess_backend,
    worker_count,
)
from eegformer_cli.preprocess.output import (
    CONNECTOME_DIR,
    MANIFEST_ERRORS,
    MANIFEST_LEADING_COLUMNS,
    MANIFEST_NAME,
    MANIFEST_TRAILING_COLUMNS,
    SETTINGS_NAME,
    Connectome,
    TokenFiles,
    load_record,
    manifest_rows,
    read_settings_file,
    write_manifest,
)
from eegformer_cli.preprocess.recording import process_recording
from eegformer_cli.preprocess.settings import PreprocessSettings
from eegformer_cli.recordings import cleaning, metadata, reading
from eegformer_cli.recordings.channels import STANDARD_1020, normalise_channels, select_channel_set
from eegformer_cli.versions import package_versions

#: Signature of the ``map`` that :func:`recording_workers` yields.
RecordingMap = Callable[[Callable, Iterable], Iterator]


@contextlib.contextmanager
def recording_workers(n_workers: int) -> Iterator[RecordingMap]:
    """A ``map(func, items)`` over ``n_workers`` workers (a count, :func:`parallel.worker_count`
    of ``--n-jobs``), yielding results in completion order.

    The one place where recordings are spread over workers; ``func`` must be picklable
    (module level). Entered once per run, so the header pass and the processing share it:

    - a joblib backend chosen with ``joblib.parallel_config`` (e.g. Dask, see
      :mod:`eegformer_cli.parallel`): joblib's ``Parallel`` on it;
    - one worker: this process;
    - Linux: a ``multiprocessing`` pool of *forked* workers. Why not joblib's own pool (loky):
      loky starts every worker as a fresh interpreter that imports numpy, SciPy, MNE and this
      package again (about 1.5 s of CPU each); on a dataset of 84 one-minute recordings (about
      6 s of work on this project's 2-core CPU) that cost made ``--n-jobs 2`` only 1.40x faster
      than 1. Forked workers start with the parent's imports in milliseconds
      (docs/benchmarks.md). The pool is forked here, before any progress-bar thread exists
      (fork copies only the calling thread), and terminated on leaving (also on Ctrl-C);
    - elsewhere (macOS, Windows: no safe fork): joblib's loky pool.
    """
    import multiprocessing

    from joblib import Parallel, delayed
    from joblib._parallel_backends import LokyBackend
    from joblib.parallel import get_active_backend

    joblib_default = isinstance(get_active_backend()[0], LokyBackend)
    if joblib_default and n_workers == 1:
        yield lambda func, items: map(func, items)
    elif joblib_default and sys.platform == "linux":
        _import_worker_modules()
        with multiprocessing.get_context("fork").Pool(
            n_workers, initializer=leave_interrupts_to_the_parent
        ) as pool:
            yield lambda func, items: pool.imap_unordered(func, items)
    else:
        # initializer: used by joblib's local process pool, ignored by the Dask backend
        parallel = Parallel(
            n_jobs=n_workers,
            return_as="generator_unordered",
            initializer=leave_interrupts_to_the_parent,
        )
        yield lambda func, items: parallel(delayed(func)(item) for item in items)


def _import_worker_modules() -> None:
    """Import in the parent what reading and processing a recording import lazily (MNE's
    readers, filters, epochs and montages, SciPy's signal), so that forked workers inherit it:
    0.75 s once instead of about 0.9 s in every worker."""
    import mne.channels
    import mne.epochs
    import mne.filter
    import mne.io  # noqa: F401
    import scipy.signal  # noqa: F401
    import threadpoolctl  # noqa: F401


def _with_progress(results: Iterable, total: int, description: str) -> Iterator:
    """Yield ``results`` while advancing a progress bar (drawn only on a terminal)."""
    with console.progress_bar() as bar:
        progress = bar.add_task(description, total=total, status="")
        for result in results:
            yield result
            bar.update(progress, advance=1)


# Worker functions (module level, so that joblib can send them to other processes).


@dataclass(frozen=True)
class _Header:
    """A recording file's header: its canonical EEG channels and length, or why it is unusable."""

    path: Path
    channels: frozenset[str] = frozenset()
    duration_s: float = 0.0
    error: str | None = None


def _read_header(path: Path) -> _Header:
    """Worker: read one header (no samples) and normalise its channel names."""
    try:
        with warnings.catch_warnings(), mne.use_log_level("error"):
            warnings.simplefilter("ignore")
            raw = reading.read_recording(path, preload=False)
            normalised, _ = normalise_channels(raw, path=path)
    except EegformerError as exc:
        return _Header(path, error=exc.one_line())
    except Exception as exc:  # as in _process_and_save: one odd file must not stop the run
        message = " ".join(str(exc).split()) or type(exc).__name__
        return _Header(path, error=f"{path}: internal error: {type(exc).__name__}: {message}")
    return _Header(path, frozenset(normalised.ch_names), raw.n_times / raw.info["sfreq"])


@dataclass(frozen=True)
class _Task:
    """What a worker needs to process one recording and save its connectome."""

    recording_id: str
    path: Path
    out_file: Path
    settings: dict
    source_size: int
    source_mtime_ns: int


def _process_and_save(task: _Task) -> tuple[str, dict]:
    """Worker: process one recording, save its connectome; ``(recording_id, fields)``.

    ``fields`` are the recording's processing columns of the manifest. A bad recording never
    raises: its error becomes ``{"status": "error", "error": ...}`` so the others go on. One
    BLAS/OpenMP thread per worker, so that ``n_jobs`` workers use ``n_jobs`` cores. The tokens
    go to temporary files beside the connectome file as they are computed
    (:class:`TokenFiles`), so memory stays flat in the recording's length.
    """
    with TokenFiles(task.out_file) as token_files:
        connectome = _process_into(task, token_files)
        if isinstance(connectome, str):
            return task.recording_id, {"status": "error", "error": connectome}
        fields = _processing_fields(connectome)
        connectome.record = {
            "settings_hash": PreprocessSettings.from_dict(task.settings).settings_hash(),
            "source_size": task.source_size,
            "source_mtime_ns": task.source_mtime_ns,
            "fields": fields,
        }
        token_files.save(connectome, task.out_file)
    return task.recording_id, fields


def _process_into(task: _Task, token_files: TokenFiles) -> Connectome | str:
    """The connectome of ``task``'s recording, its tokens in ``token_files``, or the one-line
    error that makes it a failed row (a bug included: it must not stop the other recordings)."""
    from threadpoolctl import threadpool_limits

    settings = PreprocessSettings.from_dict(task.settings)
    try:
        with threadpool_limits(limits=1), warnings.catch_warnings(), mne.use_log_level("error"):
            warnings.simplefilter("ignore")
            return process_recording(task.path, settings, token_store=token_files)
    except EegformerError as exc:
        return exc.one_line()
    except Exception as exc:  # a bug must not stop the other recordings; it is reported
        message = " ".join(str(exc).split()) or type(exc).__name__
        return f"{task.path}: internal error: {type(exc).__name__}: {message}"


def _processing_fields(connectome: Connectome) -> dict:
    """The recording's processing columns of the manifest."""
    return {
        "status": "ok",
        "error": None,
        "n_segments": connectome.n_segments,
        "n_segments_rejected": connectome.n_segments_rejected,
        "sfreq": connectome.sfreq,
        "source_sfreq": connectome.source_sfreq,
        "duration_s": round(connectome.duration_s, 3),
        "channels_interpolated": ",".join(connectome.channels_interpolated),
        "signal_sha256": connectome.signal_sha256,
    }


# The run.


@dataclass
class _Recording:
    """One input recording as the run sees it: identity, metadata and header."""

    path: Path
    recording_id: str
    participant_id: str | None
    metadata: dict
    header: _Header


@dataclass(frozen=True)
class PreprocessSummary:
    """What :func:`run_preprocess` did."""

    n_recordings: int
    n_ok: int
    n_error: int
    n_skipped: int
    channels: list[str]
    epoch_length_s: float | str
    out_dir: Path
    manifest: Path
    settings_file: Path


def run_preprocess(
    inputs: Sequence[str | Path],
    out_dir: str | Path,
    settings: PreprocessSettings,
    participants: str | os.PathLike | None = None,
    recordings_table: str | os.PathLike | None = None,
    n_jobs: int = 1,
    strict: bool = False,
    overwrite: bool = False,
    participant_pattern: str | None = None,
    backend: str = "local",
    scheduler: str | None = None,
) -> PreprocessSummary:
    """Preprocess every recording under ``inputs`` into ``out_dir`` (see the module docstring).

    Steps: find recordings and their metadata -> read their headers (unreadable: error rows)
    -> choose the channels and epoch length -> lock ``out_dir`` (:func:`_update_folder`) ->
    skip recordings done before with the same settings from an unchanged file -> process the
    rest, each connectome saved atomically when ready -> ``manifest.tsv``, ``preprocess.json``.

    ``n_jobs`` (-1: one per core; counted here, once), ``backend``, ``scheduler``: the
    workers and where they run (:func:`parallel.preprocess_backend`).
    ``overwrite``: allow ``out_dir`` to hold recordings preprocessed with other settings (their
    rows leave the manifest, so it never mixes settings), or files eegformer did not write
    (:mod:`eegformer_cli.ownership`: they are kept); without it such a folder is refused.
    ``participant_pattern``: a regular expression whose first group, searched in a file name,
    is the recording's participant (:func:`metadata.participant_pattern`; after the
    recordings table's ``participant_id``, before the names of the participants table); kept
    in ``preprocess.json``, no setting (a rerun with another one rewrites only the manifest).

    Raises
    ------
    UsageError : ``out_dir`` holds recordings made with other settings, or files eegformer
        did not write, and not ``overwrite`` (exit 2; nothing is changed).
    InputDataError : no recording found, bad tables, too few common channels, or no recording
        could be preprocessed (exit 3; the manifest is written, unless that would drop an
        earlier run's ok recordings of other files: then ``out_dir`` is left as it was).
    OutputError : ``out_dir`` not writable or in use by another run (exit 5).
    PartialFailure : ``strict`` and at least one recording failed (exit 6; outputs written).
    """
    n_workers = worker_count(n_jobs)  # a bad --n-jobs is refused before anything is written
    pattern = metadata.participant_pattern(participant_pattern)
    out_dir = Path(out_dir)
    ownership.check_folder(out_dir, "preprocess", overwrite)  # before the headers are read
    sources = _Sources.find(inputs, participants, recordings_table, participant_pattern)
    with preprocess_backend(backend, scheduler, n_workers), recording_workers(n_workers) as workers:
        recordings = _gather_recordings(
            inputs, sources.participants_file, sources.recordings_file, workers, pattern
        )
        resolved = _resolve_settings(
            settings, [rec.header for rec in recordings if rec.header.error is None]
        )
        ownership.claim_folder(out_dir, "preprocess", overwrite)
        with atomic.DirectoryLock(out_dir, what="another eegformer preprocess run"):
            rows, summary = _update_folder(
                out_dir, recordings, resolved, workers, overwrite, sources
            )
    _name_failures(rows, summary.manifest)
    _raise_for_failures(rows, summary, strict)
    return summary


@dataclass(frozen=True)
class _Sources:
    """Where a run's recordings and their metadata come from (``preprocess.json`` keeps it)."""

    inputs: Sequence[str | Path]
    participants_file: Path | None
    recordings_file: Path | None
    participant_pattern: str | None

    @classmethod
    def find(cls, inputs, participants, recordings_table, participant_pattern) -> _Sources:
        """The tables given, else those found beside the inputs (:mod:`metadata`)."""
        return cls(
            inputs,
            Path(participants) if participants else metadata.find_participants_file(inputs),
            Path(recordings_table) if recordings_table else metadata.find_recordings_file(inputs),
            participant_pattern,
        )


def _update_folder(
    out_dir: Path,
    recordings: list[_Recording],
    settings: PreprocessSettings,
    workers: RecordingMap,
    overwrite: bool,
    sources: _Sources,
) -> tuple[list[dict], PreprocessSummary]:
    """Under the folder's lock: process the recordings not done before with ``settings``, then
    write ``manifest.tsv`` (the earlier runs' rows kept, :func:`_earlier_rows`, then this run's)
    and ``preprocess.json``. Returns this run's manifest rows and the summary."""
    connectome_dir = out_dir / CONNECTOME_DIR
    atomic.ensure_dir(connectome_dir)
    atomic.remove_stale_temporaries(out_dir)
    atomic.remove_stale_temporaries(connectome_dir)
    previous_rows = _read_earlier_manifest(out_dir)
    if not overwrite and any(rec.header.error is None for rec in recordings):
        # (with no readable recording the settings are not this run's choice: the
        # failures are said below, the folder left as it was)
        _refuse_other_settings(out_dir, previous_rows, settings)
    _avoid_earlier_ids(recordings, previous_rows, out_dir)
    settings_hash = settings.settings_hash()
    tasks, fields_by_id = _plan_tasks(recordings, connectome_dir, settings, settings_hash)
    n_skipped = sum(1 for rec in recordings if rec.header.error is None) - len(tasks)
    if n_skipped:
        console.log(f"preprocess: {n_skipped} recordings already done with these settings")
    fields_by_id.update(_with_progress(workers(_process_and_save, tasks), len(tasks), "preprocess"))
    rows = [_manifest_row(rec, fields_by_id[rec.recording_id], settings_hash) for rec in recordings]
    _keep_earlier_work_when_nothing_was_made(rows, previous_rows, settings_hash, out_dir)
    for row in rows:  # a connectome from earlier settings must not outlive a failure now
        if row["status"] == "error":
            (connectome_dir / f"{row['recording_id']}.npz").unlink(missing_ok=True)
    earlier = _earlier_rows(
        out_dir,
        previous_rows,
        {row["recording_id"] for row in rows},
        {str(rec.path.resolve()) for rec in recordings},
        settings_hash,
    )
    return rows, _write_outputs(out_dir, rows, earlier, settings, n_skipped, sources)


def _plan_tasks(
    recordings: list[_Recording],
    connectome_dir: Path,
    settings: PreprocessSettings,
    settings_hash: str,
) -> tuple[list[_Task], dict[str, dict]]:
    """The recordings to process, as tasks, and the manifest fields of the others by recording
    id: an unreadable header's error, or what a recording made before with these settings from
    the same source file recorded (:func:`_finished_fields`)."""
    fields_by_id = {
        rec.recording_id: {"status": "error", "error": rec.header.error}
        for rec in recordings
        if rec.header.error
    }
    tasks = []
    for rec in recordings:
        if rec.header.error is None:
            task = _task_for(rec, connectome_dir, settings)
            done = _finished_fields(task, settings_hash)
            if done is None:
                tasks.append(task)
            else:
                fields_by_id[rec.recording_id] = done
    return tasks, fields_by_id


def _keep_earlier_work_when_nothing_was_made(
    rows: list[dict], previous_rows: list[dict], settings_hash: str, out_dir: Path
) -> None:
    """InputDataError, before anything is written, when no recording of this run could be
    preprocessed and writing its manifest would drop an earlier run's ok recordings of other
    files (this run's settings differ, e.g. no channels from unreadable headers)."""
    current_ids = {row["recording_id"] for row in rows}
    if not any(row["status"] == "ok" for row in rows) and any(
        row.get("status") == "ok"
        and row.get("recording_id") not in current_ids
        and row.get("settings_hash") != settings_hash
        for row in previous_rows
    ):
        raise InputDataError(
            f"no recording could be preprocessed; first error: {_first_error(rows)}; "
            f"{out_dir} is left as the earlier run wrote it"
        )


def _raise_for_failures(rows: list[dict], summary: PreprocessSummary, strict: bool) -> None:
    """InputDataError when no recording could be preprocessed; with ``strict``,
    PartialFailure when one failed (the outputs are written either way)."""
    first_error = _first_error(rows)
    if summary.n_ok == 0:
        raise InputDataError(
            f"no recording could be preprocessed; first error: {first_error}; "
            f"see all errors in {summary.manifest}"
        )
    if strict and summary.n_error:
        raise PartialFailure(
            f"{summary.n_error} of {summary.n_recordings} recordings failed "
            f"(--strict); first error: {first_error}; see all errors in "
            f"{summary.manifest}"
        )


def _gather_recordings(
    inputs,
    participants_file: Path | None,
    recordings_file: Path | None,
    workers: RecordingMap,
    pattern: re.Pattern | None = None,
) -> list[_Recording]:
    """Every input recording with its id, participant, metadata and header (in path order);
    ``pattern``: the ``--participant-pattern`` (:func:`_named_participants`)."""
    paths = reading.find_recordings(inputs)
    participants_rows = metadata.load_participants(participants_file) if participants_file else {}
    recordings_rows = metadata.load_recordings_table(recordings_file) if recordings_file else {}
    table_root = recordings_file.parent if recordings_file else None
    _warn_shadowed_columns({"participants": participants_rows, "recordings": recordings_rows})
    named = _named_participants(paths, pattern, participants_file, participants_rows)
    headers = {
        header.path: header
        for header in _with_progress(workers(_read_header, paths), len(paths), "reading headers")
    }
    recordings = []
    for path, recording_id in zip(paths, reading.recording_ids(paths)):
        participant_id, merged = metadata.match_participant(
            path, participants_rows, recordings_rows, table_root, named.get(path)
        )
        recordings.append(_Recording(path, recording_id, participant_id, merged, headers[path]))
    _warn_unmatched(recordings, participants_file, participants_rows)
    return recordings


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


def _warn_shadowed_columns(tables: dict[str, dict]) -> None:
    """One warning for metadata columns named like the manifest's own (e.g. ``status``): the
    manifest keeps its own value there, so the table's would be lost without a word."""
    own = (set(MANIFEST_LEADING_COLUMNS) | set(MANIFEST_TRAILING_COLUMNS)) - {
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


def _refuse_other_settings(
    out_dir: Path, previous_rows: list[dict], settings: PreprocessSettings
) -> None:
    """UsageError when ``out_dir``'s manifest lists ok recordings made with settings other than
    ``settings`` (naming the settings that differ, from its ``preprocess.json``)."""
    current = settings.settings_hash()
    other = [
        row
        for row in previous_rows
        if row.get("status") == "ok" and row.get("settings_hash") not in (None, "", "n/a", current)
    ]
    if not other:
        return
    earlier = (read_settings_file(out_dir) or {}).get("settings")
    now = settings.to_dict()
    changed = (
        sorted(key for key in now if earlier.get(key) != now[key])
        if isinstance(earlier, dict)
        else []
    )
    raise UsageError(
        f"{out_dir} holds {len(other)} recordings preprocessed with other settings"
        + (f" (different: {', '.join(changed)})" if changed else ""),
        hint="use --overwrite to replace them (they leave the manifest), another "
        "--out, or the same settings (--channels, --epoch-length) to add "
        "recordings",
    )


def _name_failures(rows: list[dict], manifest: Path) -> None:
    """The failed recordings on stderr: the first three with their error, then how many more
    (the manifest has every error)."""
    failed = [row for row in rows if row["status"] == "error"]
    for row in failed[:3]:
        console.warn(escape(f"{row['recording_id']} failed: {row['error']}"))
    if len(failed) > 3:
        console.warn(f"{len(failed) - 3} more recording(s) failed; every error is in {manifest}")


def _first_error(rows: list[dict]) -> str | None:
    """The error of the first failed row (the terminal names one; the manifest has them all)."""
    return next((row["error"] for row in rows if row["status"] == "error"), None)


def _warn_unmatched(
    recordings: list[_Recording], participants_file: Path | None, participants_rows: dict
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


def _resolve_settings(settings: PreprocessSettings, readable: list[_Header]) -> PreprocessSettings:
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


def _warn_channels_dropped_for_a_few(readable: list[_Header], channels: list[str]) -> None:
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


def _task_for(rec: _Recording, connectome_dir: Path, settings: PreprocessSettings) -> _Task:
    stat = rec.path.stat()
    return _Task(
        recording_id=rec.recording_id,
        path=rec.path,
        out_file=connectome_dir / f"{rec.recording_id}.npz",
        settings=settings.to_dict(),
        source_size=stat.st_size,
        source_mtime_ns=stat.st_mtime_ns,
    )


def _finished_fields(task: _Task, settings_hash: str) -> dict | None:
    """The stored processing fields if ``task.out_file`` is done with these settings and an
    unchanged source file; None if it must be (re)computed."""
    if not task.out_file.is_file():
        return None
    record = load_record(task.out_file)
    if (
        record is None
        or record.get("settings_hash") != settings_hash
        or record.get("source_size") != task.source_size
        or record.get("source_mtime_ns") != task.source_mtime_ns
        # made before the signal hash or the band covariances were kept: made again, so
        # the manifest has the hash and training the tangent-space reference
        or "signal_sha256" not in record.get("fields", {})
        or not record["has_covariance"]
    ):
        return None
    return record.get("fields")


def _read_earlier_manifest(out_dir: Path) -> list[dict]:
    """The rows of ``out_dir``'s manifest from earlier runs ([] if none, or unreadable: warned)."""
    path = out_dir / MANIFEST_NAME
    if not path.is_file():
        return []
    try:
        return manifest_rows(path)
    except MANIFEST_ERRORS as exc:
        console.warn(f"{path}: earlier manifest not readable ({exc}); it is replaced")
        return []


def _avoid_earlier_ids(
    recordings: list[_Recording], previous_rows: list[dict], out_dir: Path
) -> None:
    """Give a recording another id where an earlier run into ``out_dir`` gave its id to another
    source file, so that its connectome never overwrites that one.

    ``preprocess site1/ --out prep`` then ``preprocess site2/ --out prep`` with ``sub-01.edf``
    in both: site2's becomes ``site2__sub-01`` (its folder in front, as :func:`reading.recording_ids`
    does within a run), or gets a number (``sub-01-2``) if that is taken too. Only ok rows with
    their connectome file count. The same file is the same resolved path, or the size and
    modification time its connectome recorded (a dataset moved or copied with ``cp -p``). The
    rule only depends on the inputs and the manifest, so a rerun finds its connectomes again.
    """
    owners = {
        row.get("recording_id"): row
        for row in previous_rows
        if row.get("status") == "ok" and (out_dir / str(row.get("connectome"))).is_file()
    }
    if not owners:
        return
    current = {rec.recording_id for rec in recordings}

    def free_for(candidate: str, path: Path) -> bool:
        owner = owners.get(candidate)
        return owner is None or _same_source(path, owner, out_dir)

    for rec in recordings:
        if free_for(rec.recording_id, rec.path):
            continue
        base = reading.recording_id(rec.path, rec.path.parent.parent)
        candidate, number = base, 1
        while candidate in current or not free_for(candidate, rec.path):
            number += 1
            candidate = f"{base}-{number}"
        console.warn(
            f"{rec.path}: recording id {rec.recording_id} belongs to "
            f"{owners[rec.recording_id].get('source_file')} in {out_dir}; "
            f"this recording is {candidate}"
        )
        current.add(candidate)
        rec.recording_id = candidate


def _same_source(path: Path, row: dict, out_dir: Path) -> bool:
    """Whether ``path`` is the source file of an earlier manifest ``row`` (see
    :func:`_avoid_earlier_ids`)."""
    if Path(str(row.get("source_file"))).resolve() == path.resolve():
        return True
    record = load_record(out_dir / str(row.get("connectome"))) or {}
    try:
        stat = path.stat()
    except OSError:  # gone since it was found: not the earlier file, and it will fail as a row
        return False
    return (record.get("source_size"), record.get("source_mtime_ns")) == (
        stat.st_size,
        stat.st_mtime_ns,
    )


def _earlier_rows(
    out_dir: Path,
    previous_rows: list[dict],
    current_ids: set[str],
    current_sources: set[str],
    settings_hash: str,
) -> list[dict]:
    """Rows of ``out_dir``'s manifest, from earlier runs (``previous_rows``), that this run's
    manifest keeps.

    A run into a folder that already holds other recordings (``preprocess site1/ --out prep``,
    then ``preprocess site2/ --out prep``) must not drop them from the manifest: an earlier row
    of a recording this run did not see is kept when it is ok, made with the same settings
    (channels and epoch length included) and its connectome file is there. The others are left
    out, with a log line, so the manifest never mixes settings; their files stay where they are.
    So is an earlier row whose source file (``current_sources``: resolved paths) this run has
    under another id (ids made before they kept Unicode letters: ``P_tient_1-2`` is now
    ``Pätient_1``), so that no recording is listed twice.
    """
    previous = [row for row in previous_rows if row.get("recording_id") not in current_ids]
    renamed = [
        row
        for row in previous
        if str(Path(str(row.get("source_file"))).resolve()) in current_sources
    ]
    if renamed:
        console.log(
            f"preprocess: {len(renamed)} recordings of earlier runs have new ids now "
            f"(e.g. {renamed[0].get('recording_id')}); their old rows are left out"
        )
        previous = [row for row in previous if row not in renamed]
    kept = [
        row
        for row in previous
        if row.get("status") == "ok"
        and row.get("settings_hash") == settings_hash
        and (out_dir / str(row.get("connectome"))).is_file()
    ]
    if kept:
        console.log(
            f"preprocess: the manifest keeps {len(kept)} recordings of earlier runs with "
            "these settings"
        )
    if len(previous) > len(kept):
        console.log(
            f"preprocess: {len(previous) - len(kept)} rows of earlier runs (other settings, "
            f"errors or missing files) left out of the manifest; use the same --channels "
            f"and --epoch-length to add recordings to {out_dir}"
        )
    return kept


def _write_outputs(
    out_dir: Path,
    rows: list[dict],
    earlier: list[dict],
    settings: PreprocessSettings,
    n_skipped: int,
    sources: _Sources,
) -> PreprocessSummary:
    """Write ``manifest.tsv`` (``earlier`` rows first, then this run's) and ``preprocess.json``
    (atomically); return the summary of this run's ``rows``."""
    n_ok = sum(row["status"] == "ok" for row in rows)
    summary = PreprocessSummary(
        n_recordings=len(rows),
        n_ok=n_ok,
        n_error=len(rows) - n_ok,
        n_skipped=n_skipped,
        channels=list(settings.channels or ()),
        epoch_length_s=settings.epoch_length,
        out_dir=out_dir,
        manifest=out_dir / MANIFEST_NAME,
        settings_file=out_dir / SETTINGS_NAME,
    )
    input_names = [str(Path(path).absolute()) for path in sources.inputs]  # as audit.py reads
    if earlier:
        previous = (read_settings_file(out_dir) or {}).get("inputs", [])
        input_names = list(dict.fromkeys([*previous, *input_names]))
    write_manifest(summary.manifest, earlier + rows)
    atomic.write_json(
        summary.settings_file,
        {
            "settings": settings.to_dict(),
            "settings_hash": settings.settings_hash(),
            "channels": summary.channels,
            "bands": band_names(settings.bands),
            "band_edges_hz": band_edges_hz(settings.bands),
            "epoch_length_s": settings.epoch_length,
            "inputs": input_names,
            "participants_file": _path_text(sources.participants_file),
            "recordings_file": _path_text(sources.recordings_file),
            "participant_pattern": sources.participant_pattern,
            "counts": {
                "recordings": summary.n_recordings,
                "ok": summary.n_ok,
                "error": summary.n_error,
                "skipped": n_skipped,
                "kept_from_earlier_runs": len(earlier),
            },
            "versions": package_versions(),
        },
    )
    return summary


def _path_text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _manifest_row(rec: _Recording, fields: dict, settings_hash: str) -> dict:
    """The manifest row of a recording: identity, processing ``fields``, then its metadata."""
    ok = fields.get("status") == "ok"
    row = {
        "recording_id": rec.recording_id,
        "participant_id": rec.participant_id,
        "source_file": str(rec.path),
        "status": fields.get("status", "error"),
        "error": fields.get("error"),
        "n_segments": fields.get("n_segments"),
        "n_segments_rejected": fields.get("n_segments_rejected"),
        "sfreq": fields.get("sfreq"),
        "source_sfreq": fields.get("source_sfreq"),
        "duration_s": fields.get("duration_s"),
        "channels_interpolated": fields.get("channels_interpolated"),
        "age": rec.metadata.get("age"),
        "sex": rec.metadata.get("sex"),
    }
    for key, value in rec.metadata.items():
        row.setdefault(key, value)
    row["signal_sha256"] = fields.get("signal_sha256")
    row["connectome"] = f"{CONNECTOME_DIR}/{rec.recording_id}.npz" if ok else None
    row["settings_hash"] = settings_hash if ok else None
    return row
