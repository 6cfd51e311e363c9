"""A whole input -> an output folder (the ``eegformer preprocess`` command): the run's steps in
order, which recordings to process, the manifest and ``preprocess.json``. The run's input
recordings (:mod:`.inputs`), the workers (:mod:`.workers`) and what earlier runs left in the folder
(:mod:`.earlier_runs`: resume, recording ids, kept rows) have their own modules.

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
were made with the same settings (:func:`earlier_rows`), so a dataset can be preprocessed
folder by folder into one output.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from eegformer_cli import atomic, console, ownership
from eegformer_cli.connectivity.bands import band_edges_hz, band_names
from eegformer_cli.errors import InputDataError, PartialFailure
from eegformer_cli.parallel import preprocess_backend, worker_count
from eegformer_cli.preprocess.earlier_runs import (
    avoid_earlier_ids,
    earlier_rows,
    finished_fields,
    read_earlier_manifest,
    refuse_other_settings,
)
from eegformer_cli.preprocess.inputs import Recording, Sources, gather_recordings, resolve_settings
from eegformer_cli.preprocess.output import (
    CONNECTOME_DIR,
    MANIFEST_NAME,
    SETTINGS_NAME,
    read_settings_file,
    write_manifest,
)
from eegformer_cli.preprocess.settings import PreprocessSettings
from eegformer_cli.preprocess.workers import (
    RecordingMap,
    Task,
    process_and_save,
    recording_workers,
    with_progress,
)
from eegformer_cli.recordings import metadata
from eegformer_cli.versions import package_versions


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
    sources = Sources.find(inputs, participants, recordings_table, participant_pattern)
    with preprocess_backend(backend, scheduler, n_workers), recording_workers(n_workers) as workers:
        recordings = gather_recordings(
            inputs, sources.participants_file, sources.recordings_file, workers, pattern
        )
        resolved = resolve_settings(
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


def _update_folder(
    out_dir: Path,
    recordings: list[Recording],
    settings: PreprocessSettings,
    workers: RecordingMap,
    overwrite: bool,
    sources: Sources,
) -> tuple[list[dict], PreprocessSummary]:
    """Under the folder's lock: process the recordings not done before with ``settings``, then
    write ``manifest.tsv`` (the earlier runs' rows kept, :func:`earlier_rows`, then this run's)
    and ``preprocess.json``. Returns this run's manifest rows and the summary."""
    connectome_dir = out_dir / CONNECTOME_DIR
    atomic.ensure_dir(connectome_dir)
    atomic.remove_stale_temporaries(out_dir)
    atomic.remove_stale_temporaries(connectome_dir)
    previous_rows = read_earlier_manifest(out_dir)
    if not overwrite and any(rec.header.error is None for rec in recordings):
        # (with no readable recording the settings are not this run's choice: the
        # failures are said below, the folder left as it was)
        refuse_other_settings(out_dir, previous_rows, settings)
    avoid_earlier_ids(recordings, previous_rows, out_dir)
    settings_hash = settings.settings_hash()
    tasks, fields_by_id = _plan_tasks(recordings, connectome_dir, settings, settings_hash)
    n_skipped = sum(1 for rec in recordings if rec.header.error is None) - len(tasks)
    if n_skipped:
        console.log(f"preprocess: {n_skipped} recordings already done with these settings")
    fields_by_id.update(with_progress(workers(process_and_save, tasks), len(tasks), "preprocess"))
    rows = [_manifest_row(rec, fields_by_id[rec.recording_id], settings_hash) for rec in recordings]
    _keep_earlier_work_when_nothing_was_made(rows, previous_rows, settings_hash, out_dir)
    for row in rows:  # a connectome from earlier settings must not outlive a failure now
        if row["status"] == "error":
            (connectome_dir / f"{row['recording_id']}.npz").unlink(missing_ok=True)
    earlier = earlier_rows(
        out_dir,
        previous_rows,
        {row["recording_id"] for row in rows},
        {str(rec.path.resolve()) for rec in recordings},
        settings_hash,
    )
    return rows, _write_outputs(out_dir, rows, earlier, settings, n_skipped, sources)


def _plan_tasks(
    recordings: list[Recording],
    connectome_dir: Path,
    settings: PreprocessSettings,
    settings_hash: str,
) -> tuple[list[Task], dict[str, dict]]:
    """The recordings to process, as tasks, and the manifest fields of the others by recording
    id: an unreadable header's error, or what a recording made before with these settings from
    the same source file recorded (:func:`finished_fields`)."""
    fields_by_id = {
        rec.recording_id: {"status": "error", "error": rec.header.error}
        for rec in recordings
        if rec.header.error
    }
    tasks = []
    for rec in recordings:
        if rec.header.error is None:
            task = _task_for(rec, connectome_dir, settings)
            done = finished_fields(task, settings_hash)
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


def _task_for(rec: Recording, connectome_dir: Path, settings: PreprocessSettings) -> Task:
    stat = rec.path.stat()
    return Task(
        recording_id=rec.recording_id,
        path=rec.path,
        out_file=connectome_dir / f"{rec.recording_id}.npz",
        settings=settings.to_dict(),
        source_size=stat.st_size,
        source_mtime_ns=stat.st_mtime_ns,
        channels_key=rec.header.channels_key,
    )


def _write_outputs(
    out_dir: Path,
    rows: list[dict],
    earlier: list[dict],
    settings: PreprocessSettings,
    n_skipped: int,
    sources: Sources,
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


def _manifest_row(rec: Recording, fields: dict, settings_hash: str) -> dict:
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
