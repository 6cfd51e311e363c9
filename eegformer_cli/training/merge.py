"""Cross-validation folds as independent jobs (``train --fold I``) and their merge
(``train --merge RUN_DIR``).

A fold job is an ordinary ``train`` command restricted to fold ``I`` (0-based, in the order
of ``splits.json``: repeat ``r`` fold ``k`` is ``I = r * cv + k``). All fold jobs of a run use
the same data, options and ``--out RUN_DIR``, and may run at the same time on different
machines that share RUN_DIR (e.g. a SLURM array). Each writes ``config.json`` and
``splits.json`` (identical for every job) and its own ``folds/<r{repeat}_f{fold}>.json``;
no job writes the run's summaries.

``train --merge RUN_DIR`` then does what a single run does after its last fold: it reads the
fold files, trains the final model on all participants (cross-validation only; with a
holdout the fold job saved it) and writes ``history.jsonl``, ``oof_predictions.tsv``,
``metrics.json`` and ``model.pt``. The data, label column, settings and splits come from
RUN_DIR's ``config.json`` and ``splits.json``, so the merged folder equals the folder of a
single run with the same settings (timings aside). A merge with folds missing names them and
changes nothing. The shortcut audit and the permutation test concern the whole run, so they
run here (``--confounds``, ``--permutations``, with ``--n-jobs`` workers), never in a fold job;
a merge of a finished run adds them to it.

Locks: a whole run or a merge takes RUN_DIR's lock exclusively; fold jobs share it, so they run
side by side but never alongside a whole run or a merge.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from eegformer_cli.atomic import DirectoryLock
from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.training import distributed, splits
from eegformer_cli.training.config import TrainConfig


def folds_to_run(folds: list[splits.Fold], fold_index: int | None,
                 overwrite: bool = False) -> list[splits.Fold]:
    """All ``folds`` (``fold_index`` None), or the one fold a ``--fold`` job trains.

    Raises UsageError for an index outside the splits, or ``--overwrite`` with ``--fold``
    (a fold job would delete the results of the jobs running beside it).
    """
    if fold_index is None:
        return folds
    if overwrite:
        raise UsageError("--overwrite cannot be combined with --fold (fold jobs share the run "
                         "folder; replacing it would delete the other jobs' results)",
                         hint="clear the folder once before starting the fold jobs")
    if not 0 <= fold_index < len(folds):
        raise UsageError(f"invalid --fold {fold_index}; these splits have {len(folds)} folds, "
                         f"so allowed values are 0 to {len(folds) - 1}")
    return [folds[fold_index]]


@contextlib.contextmanager
def run_folder_lock(run_dir: Path, fold_index: int | None) -> Iterator[None]:
    """RUN_DIR's lock for this process: exclusive for a whole run or a merge, shared for a
    fold job, and none on the processes of a torchrun job other than rank 0 (they write
    nothing). OutputError when another run holds it in a conflicting way."""
    if not distributed.is_writer():
        yield
        return
    what = ("eegformer train fold jobs or another eegformer train run"
            if fold_index is None else "another eegformer train run or merge")
    with DirectoryLock(run_dir, what=what, shared=fold_index is not None):
        yield


@dataclass
class RunRequest:
    """The arguments of :func:`~eegformer_cli.training.trainer.run_training` that made a run."""

    data_dir: Path
    label_column: str
    config: TrainConfig
    positive_label: str | None
    splits_file: Path | None    # None: the splits are remade from the config's seed


def read_run_request(run_dir: str | Path) -> RunRequest:
    """What ``RUN_DIR/config.json`` and ``splits.json`` say the run was asked to do.

    Raises InputDataError naming the file when RUN_DIR is not a ``train`` run folder.
    """
    run_dir = Path(run_dir)
    config_path, splits_path = run_dir / "config.json", run_dir / "splits.json"
    try:
        stored = json.loads(config_path.read_text(encoding="utf-8"))
        data_dir, label_column = Path(stored["data_dir"]), stored["label_column"]
        train_config, positive_label = stored["train_config"], stored["positive_label"]
    except FileNotFoundError:
        raise InputDataError("no config.json: not a train run folder", path=run_dir,
                         hint="pass the --out folder of the `eegformer train --fold` jobs") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise InputDataError("unreadable config.json", path=config_path,
                         hint="rerun the fold jobs into a fresh folder") from None
    scheme, _ = splits.load_splits(splits_path)
    return RunRequest(data_dir, label_column, TrainConfig.from_dict(train_config),
                      positive_label, splits_path if "from_file" in scheme else None)


def missing_fold_indices(run_dir: str | Path) -> list[int]:
    """Indices (``--fold`` values) of the folds of ``splits.json`` without a result file."""
    _, folds = splits.load_splits(Path(run_dir) / "splits.json")
    return [index for index, fold in enumerate(folds)
            if not (Path(run_dir) / "folds" / f"{fold.name}.json").is_file()]


def merge_run(run_dir: str | Path, confounds=(), permutations: int = 0,
              permutation_model: str = "reference", n_jobs: int = 1) -> dict | None:
    """``train --merge``: finish a run whose folds were trained by ``--fold`` jobs (or add the
    shortcut audit's ``confounds`` or a permutation test to a finished run).

    ``confounds``, ``permutations``, ``permutation_model`` and ``n_jobs``: as
    :func:`~eegformer_cli.training.trainer.run_training`'s (they are not part of the run's
    identity). Returns the metrics dict (also written to ``metrics.json``; None on torchrun
    processes other than rank 0). Raises InputDataError when RUN_DIR is not a run folder,
    UsageError when folds are missing, OutputError when a fold job still runs.
    """
    from eegformer_cli.training.trainer import run_training  # the trainer imports this module

    request = read_run_request(run_dir)
    missing = missing_fold_indices(run_dir)
    if missing:
        shown = ", ".join(str(i) for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise UsageError(f"{len(missing)} fold(s) not finished in {run_dir} (--fold {shown})",
                         hint="run those `eegformer train --fold` jobs, then merge again")
    return run_training(request.data_dir, run_dir, request.label_column, request.config,
                        splits_file=request.splits_file, positive_label=request.positive_label,
                        n_jobs=n_jobs, confounds=confounds, permutations=permutations,
                        permutation_model=permutation_model)
