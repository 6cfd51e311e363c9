"""What an output folder holds from earlier runs, and how a run into it treats that: recordings
done before with the same settings from an unchanged file are skipped (:func:`finished_fields`),
a folder of other settings is refused without ``--overwrite`` (:func:`refuse_other_settings`), a
recording never takes an id an earlier run gave to another file (:func:`avoid_earlier_ids`), and
the manifest keeps the earlier rows made with the same settings (:func:`earlier_rows`)."""

from __future__ import annotations

from pathlib import Path

from eegformer_cli import console
from eegformer_cli.errors import UsageError
from eegformer_cli.preprocess.inputs import Recording
from eegformer_cli.preprocess.output import (
    MANIFEST_ERRORS,
    MANIFEST_NAME,
    load_record,
    manifest_rows,
)
from eegformer_cli.preprocess.settings import PreprocessSettings
from eegformer_cli.preprocess.workers import Task
from eegformer_cli.recordings import reading


def refuse_other_settings(
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
    earlier = PreprocessSettings.of_folder(out_dir)
    changed = [] if earlier is None else list(settings.differences(earlier, tokens_only=False))
    raise UsageError(
        f"{out_dir} holds {len(other)} recordings preprocessed with other settings"
        + (f" (different: {', '.join(changed)})" if changed else ""),
        hint="use --overwrite to replace them (they leave the manifest), another "
        "--out, or the same settings (--channels, --epoch-length) to add "
        "recordings",
    )


def finished_fields(task: Task, settings_hash: str) -> dict | None:
    """The stored processing fields if ``task.out_file`` is done with these settings from an
    unchanged source file (and BIDS ``channels.tsv``); None if it must be (re)computed."""
    if not task.out_file.is_file():
        return None
    record = load_record(task.out_file)
    if (
        record is None
        or record.get("settings_hash") != settings_hash
        or record.get("source_size") != task.source_size
        or record.get("source_mtime_ns") != task.source_mtime_ns
        or record.get("channels_key") != task.channels_key
        # made before the signal hash or the band covariances were kept: made again, so
        # the manifest has the hash and training the tangent-space reference
        or "signal_sha256" not in record.get("fields", {})
        or not record["has_covariance"]
    ):
        return None
    return record.get("fields")


def read_earlier_manifest(out_dir: Path) -> list[dict]:
    """The rows of ``out_dir``'s manifest from earlier runs ([] if none, or unreadable: warned)."""
    path = out_dir / MANIFEST_NAME
    if not path.is_file():
        return []
    try:
        return manifest_rows(path)
    except MANIFEST_ERRORS as exc:
        console.warn(f"{path}: earlier manifest not readable ({exc}); it is replaced")
        return []


def avoid_earlier_ids(
    recordings: list[Recording], previous_rows: list[dict], out_dir: Path
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
    :func:`avoid_earlier_ids`)."""
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


def earlier_rows(
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
