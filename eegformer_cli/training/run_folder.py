"""A train run folder as a whole: what identifies the run it holds (``config.json``), claiming
it for a run (:func:`prepare_run_dir`: resume, refuse another run, or replace it with
``--overwrite``), which files are the run's (the only ones replacing it deletes) and its lock.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from eegformer_cli.atomic import DirectoryLock, write_json
from eegformer_cli.devices import resolve_precision
from eegformer_cli.errors import UsageError
from eegformer_cli.ownership import remove_outputs
from eegformer_cli.training import distributed, splits
from eegformer_cli.training.config import current_train_fields
from eegformer_cli.training.folds import RunPlan
from eegformer_cli.versions import package_versions

RUN_FILES = (
    "config.json",
    "splits.json",
    "history.jsonl",
    "oof_predictions.tsv",
    "metrics.json",
    "model.pt",
    "report.html",
)  # report.html: `eegformer report`'s default output


def _identity(plan: RunPlan) -> dict:
    """What must be equal for a rerun to resume this run folder."""
    return {
        "train_config": plan.config.to_dict(),
        "data_dir": str(plan.data.data_dir),
        "label_column": plan.data.label_column,
        "labels": plan.data.label_names,
        "positive_label": plan.positive_label,
        "device": plan.device.type,
        "folds": [f.record() for f in plan.folds],
    }


def _stored_identity(config_path: Path) -> dict | None:
    """The identity a run folder's config.json holds (None when unreadable), its training
    config in this version's settings (``config.current_train_fields``), so a run started by an
    earlier version resumes when nothing but retired settings' surviving values differ."""
    try:
        previous = json.loads(config_path.read_text(encoding="utf-8")).get("identity")
    except (OSError, ValueError):
        return None
    if isinstance(previous, dict) and isinstance(previous.get("train_config"), dict):
        # A retired variant's value raises: it differs, and the message names it.
        with contextlib.suppress(UsageError):
            previous["train_config"] = current_train_fields(previous["train_config"])
    return previous


def prepare_run_dir(run_dir: Path, plan: RunPlan, overwrite: bool) -> None:
    """Create/claim the run folder: write config.json and splits.json, or check they match.

    A folder holding a different run is refused (UsageError) unless ``overwrite``, which
    deletes that run's files (:func:`_clear_run`: only those) first; a ``config.json`` that
    is no run's (a folder eegformer did not make, claimed with ``overwrite``) is replaced and
    nothing is deleted.
    """
    config_path = run_dir / "config.json"
    identity = _identity(plan)
    if config_path.exists():
        previous = _stored_identity(config_path)
        if previous != identity and not overwrite:
            changed = sorted(k for k in identity if (previous or {}).get(k) != identity[k])
            if "train_config" in changed and previous:
                old = previous["train_config"]
                changed += [
                    f"train_config.{k}"
                    for k in identity["train_config"]
                    if old.get(k) != identity["train_config"][k]
                ]
            raise UsageError(
                f"{run_dir} holds another run (different: {', '.join(changed)})",
                hint="use --overwrite to replace it, or choose another --out",
            )
        if previous is not None and previous != identity:
            _clear_run(run_dir)
    write_json(
        config_path,
        {
            "identity": identity,
            "preset": plan.config.preset,
            "train_config": plan.config.to_dict(),
            "model_config": plan.model_config,
            "data_dir": str(plan.data.data_dir),
            "label_column": plan.data.label_column,
            "labels": plan.data.label_names,
            "positive_label": plan.positive_label,
            "device": plan.device.type,
            "precision": resolve_precision(plan.config.precision, plan.device, plan.config.preset),
            "n_recordings": len(plan.data.recordings),
            "n_participants": len({r.participant_id for r in plan.data.recordings}),
            "versions": package_versions(),
        },
    )
    splits.save_splits(run_dir / "splits.json", plan.scheme, plan.folds)


#: The rest of a run's files (glob patterns below RUN_DIR): fold files, permutations.
RUN_FILE_PATTERNS = ("folds/r*_f*.*", "folds/final.json", "permutations/*/[0-9]*.json")


def _clear_run(run_dir: Path) -> None:
    """Delete an earlier run's files (:func:`ownership.remove_outputs`: no other file)."""
    remove_outputs(run_dir, (*RUN_FILES, *RUN_FILE_PATTERNS))


@contextlib.contextmanager
def run_folder_lock(run_dir: Path, fold_index: int | None) -> Iterator[None]:
    """RUN_DIR's lock for this process: exclusive for a whole run or a merge, shared for a
    fold job, and none on the processes of a torchrun job other than rank 0 (they write
    nothing). OutputError when another run holds it in a conflicting way."""
    if not distributed.is_writer():
        yield
        return
    what = (
        "eegformer train fold jobs or another eegformer train run"
        if fold_index is None
        else "another eegformer train run or merge"
    )
    with DirectoryLock(run_dir, what=what, shared=fold_index is not None):
        yield
