"""A train run folder: its files, in the one module that reads and writes them (with its
typed ``metrics.json``, :mod:`~eegformer_cli.evaluation.run_metrics`); what identifies the run it holds, claiming it for
a run (:func:`prepare_run_dir`: resume, refuse another run, or replace it with
``--overwrite``), which files are the run's (the only ones replacing it deletes) and its lock.

The layout of ``RUN_DIR`` (every file written atomically):

- ``config.json``: ``identity`` (what must be equal for a rerun to resume: training config,
  data folder, label column, labels, positive label, device, folds), then the resolved
  ``preset``, ``train_config``, ``model_config``, ``data_dir``, ``label_column``, ``labels``,
  ``positive_label``, ``device``, ``precision``, ``n_recordings``, ``n_participants`` and
  package ``versions`` (:func:`prepare_run_dir`, :func:`read_config_file`); it marks the folder as
  a run folder;
- ``splits.json``: the scheme and every fold's participants; its format belongs to
  :mod:`splits` (``train --splits`` reads one from anywhere), which this module calls;
- ``folds/<r{repeat}_f{fold}>.json``: a finished fold's record
  (:class:`~eegformer_cli.training.fold_record.FoldRecord`, :func:`write_fold_record`):
  its ``metrics`` per model, out-of-fold rows ``oof``, ``history``, ``best_epoch``,
  ``seconds``, ``attention`` and ``interaction_screen`` (:mod:`interaction_screen`'s
  ``ScreenResult.summary``, null when the config screens nothing; an earlier version's records
  may lack the last two), beside its model file ``folds/<name>.pt`` (:mod:`model_file`);
- ``folds/final.json``: the final model's ``history``, ``best_epoch``, ``seconds``,
  ``interaction_screen``, ``train`` and ``val`` participants (CV runs only);
- ``history.jsonl``: one JSON record per epoch of every fold, then of the final model:
  ``repeat``, ``fold`` (-1 for the final model), ``epoch``, ``train_loss``, ``val_loss``,
  ``val_bac``, ``lr``, ``seconds``, ``attention`` (per pass and layer on the validation
  participants, :mod:`model.diagnostics`);
- ``oof_predictions.tsv``: one row per model and test recording of every fold: ``model``,
  ``repeat``, ``fold``, ``recording_id``, ``participant_id``, ``label``, ``predicted``,
  ``prob_<label>`` per class (:func:`write_oof_predictions`, :func:`read_oof_predictions`);
- ``metrics.json``: :class:`run_metrics.RunMetrics` (its keys are documented there);
- ``folds/learning_curve/<r{repeat}_f{fold}>_<percent>pct.json``: one refit of a fold's
  nested participant subset for the learning curve (``repeat``, ``fold``, ``fraction``, its
  ``train`` and ``val`` participants, ``metrics`` per model, ``oof`` rows, ``seconds``;
  :mod:`learning_curve`), written beside the fold's by a whole run or by its ``--fold`` job;
- ``permutations/<null model>/NNNNN.json``: one permutation's result (``index``, ``bac`` per
  model refit, ``seconds``; :mod:`permutation`);
- ``model.pt``: the model file (its format belongs to :mod:`model_file`).
"""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from eegformer_cli.atomic import DirectoryLock, ensure_dir, read_json, write_json, write_text
from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.evaluation.run_metrics import RunMetrics, nan_to_none
from eegformer_cli.overwrite_protection import remove_outputs
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.fold_record import FoldRecord
from eegformer_cli.versions import package_versions

if TYPE_CHECKING:  # run_plan imports torch and splits scikit-learn, which predict's reading
    # of a model's run folder (model_path, oof_path) does not need: imported where used
    from eegformer_cli.training import splits
    from eegformer_cli.training.run_plan import RunPlan

CONFIG, SPLITS, HISTORY = "config.json", "splits.json", "history.jsonl"
OOF, METRICS, MODEL = "oof_predictions.tsv", "metrics.json", "model.pt"
FOLDS, FINAL, PERMUTATIONS = "folds", "final.json", "permutations"
LEARNING_CURVE = "learning_curve"  # below FOLDS
RUN_FILES = (
    CONFIG,
    SPLITS,
    HISTORY,
    OOF,
    METRICS,
    MODEL,
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
    config in this version's settings (``TrainConfig.from_dict``: retired settings' surviving
    values dropped, the settings it lacks at the values that give an earlier version's run),
    so a run started by an earlier version resumes when nothing else differs."""
    try:
        previous = json.loads(config_path.read_text(encoding="utf-8")).get("identity")
    except (OSError, ValueError):
        return None
    if isinstance(previous, dict) and isinstance(previous.get("train_config"), dict):
        # A retired variant's value or an unknown setting raises: it differs, and the message
        # names it.
        with contextlib.suppress(UsageError):
            previous["train_config"] = TrainConfig.from_dict(previous["train_config"]).to_dict()
    return previous


def prepare_run_dir(run_dir: Path, plan: RunPlan, overwrite: bool) -> None:
    """Create/claim the run folder: write config.json and splits.json, or check they match.

    A folder holding a different run is refused (UsageError) unless ``overwrite``, which
    deletes that run's files (:func:`_clear_run`: only those) first; a ``config.json`` that
    is no run's (a folder eegformer did not make, claimed with ``overwrite``) is replaced and
    nothing is deleted.
    """
    from eegformer_cli.model.devices import resolve_precision  # imports torch

    config_path = run_dir / CONFIG
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
            "precision": resolve_precision(plan.config.precision),
            "n_recordings": len(plan.data.recordings),
            "n_participants": len({r.participant_id for r in plan.data.recordings}),
            "versions": package_versions(),
        },
    )
    from eegformer_cli.training import splits

    splits.save_splits(run_dir / SPLITS, plan.scheme, plan.folds)


#: The rest of a run's files (glob patterns below RUN_DIR): fold files, learning-curve refits,
#: permutations.
RUN_FILE_PATTERNS = (
    "folds/r*_f*.*",
    "folds/final.json",
    "folds/learning_curve/r*_f*_*pct.json",
    "permutations/*/[0-9]*.json",
)


def _clear_run(run_dir: Path) -> None:
    """Delete an earlier run's files (:func:`overwrite_protection.remove_outputs`: no other file)."""
    remove_outputs(run_dir, (*RUN_FILES, *RUN_FILE_PATTERNS))


@contextlib.contextmanager
def run_folder_lock(run_dir: Path, fold_index: int | None) -> Iterator[None]:
    """RUN_DIR's lock for this process: exclusive for a whole run or a merge, shared for a
    fold job, and none on the processes of a torchrun job other than rank 0 (they write
    nothing). OutputError when another run holds it in a conflicting way."""
    from eegformer_cli.training import distributed  # imports torch

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


# ------------------------------------------------------------------------------------------
# reading and writing the run's files


def is_run_folder(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a run's ``config.json``."""
    return (Path(run_dir) / CONFIG).is_file()


def read_config_file(run_dir: str | Path) -> dict:
    """``config.json`` (module docstring) as a dict; InputDataError when ``run_dir`` is not a
    run folder (no ``config.json``) or the file is damaged."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise InputDataError(
            "not a run folder (no config.json)",
            path=run_dir,
            hint="pass the --out folder of `eegformer train`",
        )
    config = read_json(path)
    if not isinstance(config, dict):
        raise InputDataError(
            "unreadable config.json", path=path, hint="rerun the command that wrote it"
        )
    return config


def request_in_config(run_dir: str | Path) -> tuple[Path, str, dict, str | None] | None:
    """(data folder, label column, training config dict, positive label) that ``config.json``
    says the run was asked for; None without a ``config.json``, InputDataError when it lacks
    them."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        return (
            Path(stored["data_dir"]),
            stored["label_column"],
            stored["train_config"],
            stored["positive_label"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        raise InputDataError(
            "unreadable config.json", path=path, hint="rerun the fold jobs into a fresh folder"
        ) from None


def read_planned_folds(run_dir: str | Path) -> tuple[dict, list[splits.Fold]] | None:
    """(scheme, folds) of ``splits.json`` (:func:`splits.load_splits`), None without one."""
    from eegformer_cli.training import splits

    path = Path(run_dir) / SPLITS
    return splits.load_splits(path) if path.is_file() else None


def model_path(run_dir: str | Path) -> Path:
    """``model.pt``: the final model file (written by :mod:`model_file`)."""
    return Path(run_dir) / MODEL


def has_final_model(run_dir: str | Path) -> bool:
    return model_path(run_dir).is_file()


def oof_path(run_dir: str | Path) -> Path:
    """``oof_predictions.tsv``: every recording's out-of-fold probabilities."""
    return Path(run_dir) / OOF


def metrics_path(run_dir: str | Path) -> Path:
    """``metrics.json``: the run's scores (:func:`read_metrics` reads it typed)."""
    return Path(run_dir) / METRICS


def write_metrics(run_dir: str | Path, metrics: RunMetrics) -> None:
    write_json(Path(run_dir) / METRICS, metrics.to_dict())


def read_metrics(run_dir: str | Path) -> RunMetrics | None:
    """``metrics.json`` (of this or an earlier version), None when the run has none yet;
    InputDataError when it is damaged."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise InputDataError(
            "not a metrics.json written by eegformer train (no models)",
            path=path,
            hint="rerun the same `eegformer train` command",
        )
    return RunMetrics.from_dict(data)


def metrics_time(run_dir: str | Path) -> float | None:
    """When ``metrics.json`` was last written (seconds since the epoch), None without one."""
    path = Path(run_dir) / METRICS
    return path.stat().st_mtime if path.is_file() else None


def write_history(run_dir: str | Path, records: list[dict]) -> None:
    """``history.jsonl``: one line per epoch record (NaN as null)."""
    write_text(Path(run_dir) / HISTORY, "".join(json.dumps(nan_to_none(r)) + "\n" for r in records))


def read_history(run_dir: str | Path) -> list[dict]:
    """The epoch records of ``history.jsonl`` (empty without one); InputDataError when a line
    is damaged."""
    path = Path(run_dir) / HISTORY
    if not path.is_file():
        return []
    try:
        return [
            json.loads(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    except ValueError as exc:
        raise InputDataError(
            f"unreadable JSON lines ({exc})", path=path, hint="rerun the command that wrote it"
        ) from None


def oof_columns(label_names: list[str]) -> list[str]:
    """The columns of ``oof_predictions.tsv`` for these classes."""
    return ["model", "repeat", "fold", "recording_id", "participant_id", "label", "predicted"] + [
        f"prob_{name}" for name in label_names
    ]


def write_oof_predictions(run_dir: str | Path, label_names: list[str], rows: list[dict]) -> None:
    """``oof_predictions.tsv`` from the folds' out-of-fold rows (floats as ``repr``: exact)."""
    columns = oof_columns(label_names)
    lines = ["\t".join(columns)] + [
        "\t".join(repr(row[c]) if isinstance(row[c], float) else str(row[c]) for c in columns)
        for row in rows
    ]
    write_text(Path(run_dir) / OOF, "\n".join(lines) + "\n")


def has_oof_predictions(run_dir: str | Path) -> bool:
    return (Path(run_dir) / OOF).is_file()


def read_oof_predictions(run_dir: str | Path) -> list[dict[str, str]]:
    """The rows of ``oof_predictions.tsv`` as strings by column (empty without one);
    InputDataError when the table is damaged."""
    path = Path(run_dir) / OOF
    if not path.is_file():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle, delimiter="\t"))
    except (KeyError, TypeError, ValueError) as exc:
        raise damaged_oof_predictions(run_dir, exc) from None


def damaged_oof_predictions(run_dir: str | Path, exc: Exception) -> InputDataError:
    """The error for an ``oof_predictions.tsv`` whose rows cannot be used."""
    return InputDataError(
        f"damaged out-of-fold predictions ({type(exc).__name__}: {exc})",
        path=Path(run_dir) / OOF,
        hint="rerun the same `eegformer train` command",
    )


def fold_model_path(run_dir: str | Path, name: str) -> Path:
    """``folds/<name>.pt``: a fold's model file (written by :mod:`model_file`)."""
    return Path(run_dir) / FOLDS / f"{name}.pt"


def _fold_record_path(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / FOLDS / f"{name}.json"


def has_fold_record(run_dir: str | Path, name: str) -> bool:
    return _fold_record_path(run_dir, name).is_file()


def write_fold_record(run_dir: str | Path, name: str, record: FoldRecord) -> None:
    """``folds/<name>.json``: a finished fold's record (module docstring; NaN as null)."""
    write_json(_fold_record_path(run_dir, name), record.to_dict())


def read_fold_record(run_dir: str | Path, name: str) -> FoldRecord:
    return FoldRecord.from_dict(read_json(_fold_record_path(run_dir, name)))


def write_final_record(run_dir: str | Path, record: dict) -> None:
    """``folds/final.json``: the final model's history and participants (module docstring)."""
    write_json(Path(run_dir) / FOLDS / FINAL, nan_to_none(record))


def read_final_history(run_dir: str | Path) -> list[dict] | None:
    """The final model's epoch records from ``folds/final.json``, None without one."""
    path = Path(run_dir) / FOLDS / FINAL
    return read_json(path)["history"] if path.is_file() else None


def read_final_screen(run_dir: str | Path) -> dict | None:
    """The final model's interaction screen record from ``folds/final.json`` (``ScreenResult.summary``),
    None without one (no final model yet, a holdout run, nothing screened, or an earlier
    version's file)."""
    path = Path(run_dir) / FOLDS / FINAL
    return read_json(path).get("interaction_screen") if path.is_file() else None


def _permutation_path(run_dir: str | Path, null_model: str, index: int) -> Path:
    return Path(run_dir) / PERMUTATIONS / null_model / f"{index:05d}.json"


def read_permutation_results(run_dir: str | Path, null_model: str, n: int) -> dict[int, dict]:
    """Index -> result of the permutations ``0 .. n - 1`` of ``null_model`` already on disk."""
    paths = {index: _permutation_path(run_dir, null_model, index) for index in range(n)}
    return {index: read_json(path) for index, path in paths.items() if path.is_file()}


def write_permutation_result(run_dir: str | Path, null_model: str, result: dict) -> None:
    """``permutations/<null model>/NNNNN.json`` of one permutation (``result["index"]``)."""
    path = _permutation_path(run_dir, null_model, result["index"])
    ensure_dir(path.parent)
    write_json(path, result)


def _subset_path(run_dir: str | Path, fold_name: str, fraction: float) -> Path:
    return Path(run_dir) / FOLDS / LEARNING_CURVE / f"{fold_name}_{round(fraction * 100)}pct.json"


def read_subset_record(run_dir: str | Path, fold_name: str, fraction: float) -> dict | None:
    """The learning curve's refit of fold ``fold_name`` at ``fraction`` (module docstring),
    None when it is not on disk (or unreadable: refit)."""
    path = _subset_path(run_dir, fold_name, fraction)
    if not path.is_file():
        return None
    try:
        record = read_json(path)
    except InputDataError:
        return None
    return record if isinstance(record, dict) else None


def write_subset_record(run_dir: str | Path, fold_name: str, record: dict) -> None:
    """``folds/learning_curve/<fold>_<percent>pct.json`` of one refit (``record["fraction"]``)."""
    path = _subset_path(run_dir, fold_name, record["fraction"])
    ensure_dir(path.parent)
    write_json(path, nan_to_none(record))
