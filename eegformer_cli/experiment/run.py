"""The training run: the run folder, its folds in this process or on workers
(:mod:`fold_training`), the summaries (:mod:`summaries`), the final model, resume, and folds as
separate jobs (``--fold``, ``--merge``).

``run_training`` does, in order:

1. :func:`run_plan.plan_run` (data, splits, settings: nothing is written for a run that cannot
   start); write ``config.json`` and ``splits.json`` (or check that the run folder holds the
   same run, to resume it);
2. for every fold not finished before, :func:`fold_job.run_fold`, in this process or on
   ``--n-jobs`` workers (:mod:`fold_training`); write the fold's model
   ``folds/<r{repeat}_f{fold}>.pt`` and then ``folds/<r{repeat}_f{fold}>.json``, atomically;
3. write ``history.jsonl``, ``oof_predictions.tsv`` and ``metrics.json`` from all fold files
   (:mod:`summaries`; with the shortcut audit and, on request, the permutation test and the
   learning curve, :mod:`.learning_curve`);
4. the model file ``model.pt``: with ``holdout`` it is the model evaluated on the held-out
   participants (so ``predict`` on them reproduces ``oof_predictions.tsv``); with CV it is a
   model retrained on all participants with the same recipe (an inner validation split for
   selection), since every fold model saw only part of the data.

An interrupted run (Ctrl-C, SIGTERM, a crash) leaves only whole files; its metrics.json (of
the folds finished so far) says ``"complete": false`` and why (:func:`summaries.completeness`);
rerunning the same command skips the finished folds.

Folds as separate jobs (``train --fold I``) and their merge (``train --merge RUN_DIR``): a fold
job is an ordinary ``train`` command restricted to fold ``I`` (0-based, in the order
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
a merge of a finished run adds them to it. The learning curve (``--learning-curve``) is made
here too, but its refits are per fold: a fold job given it refits its own fold's subsets
beside its record, and the merge computes only those missing. A merge (or a rerun) without
``--learning-curve`` keeps the curve a run already has (:func:`learning_curve.made_before`).

Locks: a whole run or a merge takes RUN_DIR's lock exclusively; fold jobs share it, so they run
side by side but never alongside a whole run or a merge.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from eegformer_cli import console
from eegformer_cli.atomic import ensure_dir, remove_stale_temporaries
from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.experiment import audit, permutation, run_folder
from eegformer_cli.experiment import learning_curve as learning_curve_module
from eegformer_cli.experiment.fold_training import in_fold_order, train_models
from eegformer_cli.experiment.run_folder import prepare_run_dir, run_folder_lock
from eegformer_cli.experiment.summaries import completeness, write_summaries
from eegformer_cli.overwrite_protection import claim_folder
from eegformer_cli.parallel import worker_count
from eegformer_cli.training import distributed, splits
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.fit import deterministic_algorithms
from eegformer_cli.training.fold_job import reference_features
from eegformer_cli.training.fold_record import FoldRecord
from eegformer_cli.training.run_plan import RunPlan, is_control_label, plan_run


def run_training(
    data_dir,
    run_dir,
    label_column: str,
    config: TrainConfig,
    splits_file=None,
    positive_label: str | None = None,
    overwrite: bool = False,
    fold_index: int | None = None,
    n_jobs: int = 1,
    confounds=(),
    permutations: int = 0,
    permutation_model: str = "reference",
    split_by: str = "participant",
    learning_curve: bool = False,
) -> RunMetrics | FoldRecord | None:
    """The whole ``eegformer train``; returns its metrics (also in ``metrics.json``).

    ``fold_index``: train only that fold (``train --fold``, a job of its own, merged later by
    ``train --merge``; see :func:`merge_run`) and return its result (``folds/<name>.json``).
    ``n_jobs``: folds trained side by side in that many worker processes on the CPU (-1: one
    per core; :func:`parallel.process_pool`), the final model queued behind them; every number
    is the same as with 1, since each fold is seeded on its own and runs on one thread either
    way.
    Under torchrun the processes share the work (:mod:`distributed`); only rank 0 writes,
    and the other processes return None.
    ``confounds``: manifest columns the shortcut audit (:mod:`audit`) checks beside the
    built-in nuisance variables; ``permutations``: refit the CV that many times on permuted
    labels, the null model being ``permutation_model`` (:mod:`permutation`). Both concern the
    whole run (and ``train --merge``), not a fold job. ``split_by``: ``"recording"`` accepts
    recordings without a participant id (:func:`splits.split_unit`). ``learning_curve``: refit
    nested participant subsets of every fold's training part (:mod:`.learning_curve`; a fold
    job refits its own fold's) and add the curve to ``sample_size``.

    Steps: :func:`_plan_request` (nothing written for a run that cannot start), then in the
    locked run folder :func:`_run_in_folder`.

    Raises UsageError (bad settings, a run folder holding another run), InputDataError (data
    that cannot make a classification task) and OutputError (run folder not writable/locked).
    """
    request = RunRequest(data_dir, label_column, config, positive_label, splits_file, split_by)
    job = _plan_request(
        request, fold_index, overwrite, n_jobs, confounds, (permutations, permutation_model)
    )
    job = replace(job, learning_curve=learning_curve)
    learning_curve_module.check_settings(learning_curve, len(job.plan.folds))
    run_dir = Path(run_dir)
    if distributed.is_writer():
        claim_folder(run_dir, "train", overwrite)
    ensure_dir(run_dir)
    with (
        distributed.process_group(job.plan.device),
        run_folder_lock(run_dir, fold_index),
        deterministic_algorithms(job.plan.device),
    ):
        return _run_in_folder(run_dir, job, overwrite, positive_label)


@dataclass(frozen=True)
class _Job:
    """One call of :func:`run_training`, checked and planned before anything is written."""

    plan: RunPlan
    audit_plan: audit.AuditPlan | None  # the shortcut audit's plan; None for a fold job
    folds: list[splits.Fold]  # the folds this call trains: all, or a --fold job's one
    fold_index: int | None
    n_workers: int  # parallel.worker_count of --n-jobs
    permutations: int
    permutation_model: str
    learning_curve: bool = False


def _run_in_folder(
    run_dir: Path, job: _Job, overwrite: bool, positive_label: str | None
) -> RunMetrics | FoldRecord | None:
    """The run inside its locked folder: :func:`_claim_run_dir`, the shortcut audit,
    :func:`_finished_folds` (resume), :func:`fold_training.train_models` (the folds left, then
    the final model), :func:`summaries.write_summaries`, the permutation test. Returns what
    :func:`run_training` returns."""
    plan, writer = job.plan, distributed.is_writer()
    if writer:
        _claim_run_dir(run_dir, plan, job.fold_index, overwrite, positive_label)
        if job.fold_index is None and learning_curve_module.made_before(run_dir):
            job = replace(job, learning_curve=True)  # a merge or rerun keeps the run's curve
    extra = (
        {"shortcut_audit": audit.run_audit(job.audit_plan, plan.positive_label).to_dict()}
        if writer and job.audit_plan is not None
        else None
    )
    distributed.barrier()  # the other processes read the folder once rank 0 prepared it
    features = reference_features(plan.data)
    results = _finished_folds(run_dir, plan, job.folds)
    final_history = train_models(
        run_dir, plan, job.folds, results, features, job.n_workers, job.fold_index, extra
    )
    if job.fold_index is not None:
        if writer and job.learning_curve:  # this fold's refits, beside its record
            learning_curve_module.compute_records(run_dir, plan, job.folds, features, job.n_workers)
        return results[job.folds[0].name] if writer else None
    pending = [
        what
        for what, asked in (
            ("the permutation test not finished", job.permutations),
            (learning_curve_module.PENDING, job.learning_curve),
        )
        if asked
    ]
    folds = in_fold_order(results, job.folds)
    metrics = (
        write_summaries(run_dir, plan, folds, final_history, extra, "; ".join(pending) or None)
        if writer
        else None
    )
    if metrics is not None and job.permutations:
        metrics = permutation.run_permutation_test(
            run_dir, plan, features, metrics, job.permutations, job.permutation_model, job.n_workers
        )
    if metrics is not None and job.learning_curve:
        metrics = learning_curve_module.run_learning_curve(
            run_dir, plan, features, metrics, folds, job.n_workers
        )
    if metrics is not None and pending:  # they are done ("complete" stays first)
        metrics = replace(metrics, **completeness(run_dir, plan, len(results)))
        run_folder.write_metrics(run_dir, metrics)
    return metrics


def _plan_request(
    request: RunRequest,
    fold_index: int | None,
    overwrite: bool,
    n_jobs: int,
    confounds,
    null_test: tuple[int, str],
) -> _Job:
    """Check :func:`run_training`'s arguments and plan the run before anything is written
    (``null_test``: ``--permutations`` and ``--permutation-model``)."""
    permutations, permutation_model = null_test
    n_workers = worker_count(n_jobs)
    permutation.check_settings(permutations, permutation_model)
    if fold_index is not None and (confounds or permutations):
        raise UsageError(
            "--confounds and --permutations concern the whole run: give them to "
            "`eegformer train --merge RUN_DIR` once the --fold jobs are done"
        )
    plan = plan_run(
        request.data_dir,
        request.label_column,
        request.config,
        request.splits_file,
        request.positive_label,
        request.split_by,
    )
    if permutations:
        permutation.check_null_model_available(permutation_model, plan.data)
    audit_plan = (
        None
        if fold_index is not None
        else audit.plan_audit(plan.data, plan.folds, plan.scheme, request.config, confounds)
    )
    folds = folds_to_run(plan.folds, fold_index, overwrite)
    if n_workers > 1 and plan.device.type == "cuda":
        raise UsageError(
            f"--n-jobs {n_jobs} trains folds in CPU worker processes, but the device is cuda",
            hint="use --device cpu, or --n-jobs 1 on the GPU",
        )
    if n_workers > 1 and distributed.process_place().world_size > 1:
        raise UsageError(
            f"--n-jobs {n_jobs} cannot be combined with torchrun (its processes "
            "already share every fold)",
            hint="use --n-jobs 1",
        )
    return _Job(plan, audit_plan, folds, fold_index, n_workers, permutations, permutation_model)


def _claim_run_dir(
    run_dir: Path,
    plan: RunPlan,
    fold_index: int | None,
    overwrite: bool,
    positive_label: str | None,
) -> None:
    """On the writing process: clear stale temporaries (not in a fold job: fold jobs run side
    by side), :func:`prepare_run_dir`, and say which class is the positive one when it was not
    given."""
    folds_dir = ensure_dir(run_dir / run_folder.FOLDS)
    if fold_index is None:
        remove_stale_temporaries(run_dir)
        remove_stale_temporaries(folds_dir)
        remove_stale_temporaries(folds_dir / run_folder.LEARNING_CURVE)
    prepare_run_dir(run_dir, plan, overwrite)
    if positive_label is None and plan.positive_label is not None:
        why = (
            "the class that is not control-like"
            if sum(map(is_control_label, plan.data.label_names)) == 1
            else "the last label in sorted order"
        )
        console.log(
            f"train: positive class for AUROC and AUC-PR: {plan.positive_label} "
            f"({why}; choose another with --positive-label)"
        )


def _finished_folds(
    run_dir: Path, plan: RunPlan, folds: list[splits.Fold]
) -> dict[str, FoldRecord]:
    """Fold name -> record of the ``folds`` an earlier, interrupted run (or a ``--fold`` job)
    finished: those with ``folds/<name>.json`` (and, for a holdout, ``model.pt``)."""
    holdout = plan.scheme.get("kind") == "holdout"
    results = {}
    for fold in folds:
        if run_folder.has_fold_record(run_dir, fold.name) and (
            not holdout or run_folder.has_final_model(run_dir)
        ):
            results[fold.name] = run_folder.read_fold_record(run_dir, fold.name)
    if results:
        console.log(
            f"train: {len(results)} of {len(folds)} folds already finished in "
            f"{run_dir} (an earlier run or --fold jobs): reused, not trained again"
        )
    return results


def folds_to_run(
    folds: list[splits.Fold], fold_index: int | None, overwrite: bool = False
) -> list[splits.Fold]:
    """All ``folds`` (``fold_index`` None), or the one fold a ``--fold`` job trains.

    Raises UsageError for an index outside the splits, or ``--overwrite`` with ``--fold``
    (a fold job would delete the results of the jobs running beside it).
    """
    if fold_index is None:
        return folds
    if overwrite:
        raise UsageError(
            "--overwrite cannot be combined with --fold (fold jobs share the run "
            "folder; replacing it would delete the other jobs' results)",
            hint="clear the folder once before starting the fold jobs",
        )
    if not 0 <= fold_index < len(folds):
        raise UsageError(
            f"invalid --fold {fold_index}; these splits have {len(folds)} folds, "
            f"so allowed values are 0 to {len(folds) - 1}"
        )
    return [folds[fold_index]]


@dataclass
class RunRequest:
    """The arguments of :func:`run_training` that made a run."""

    data_dir: Path
    label_column: str
    config: TrainConfig
    positive_label: str | None
    splits_file: Path | None  # None: the splits are remade from the config's seed
    split_by: str  # "recording" for a recording-wise run, else "participant"


def read_run_request(run_dir: str | Path) -> RunRequest:
    """What ``RUN_DIR/config.json`` and ``splits.json`` say the run was asked to do.

    Raises InputDataError naming the file when RUN_DIR is not a ``train`` run folder.
    """
    run_dir = Path(run_dir)
    request = run_folder.request_in_config(run_dir)
    if request is None:
        raise InputDataError(
            "no config.json: not a train run folder",
            path=run_dir,
            hint="pass the --out folder of the `eegformer train --fold` jobs",
        )
    data_dir, label_column, train_config, positive_label = request
    splits_path = run_dir / run_folder.SPLITS
    scheme, _ = splits.load_splits(splits_path)
    return RunRequest(
        data_dir,
        label_column,
        TrainConfig.from_dict(train_config),
        positive_label,
        splits_path if "from_file" in scheme else None,
        scheme.get("unit", "participant"),
    )


def missing_fold_indices(run_dir: str | Path) -> list[int]:
    """Indices (``--fold`` values) of the folds of ``splits.json`` without a result file."""
    _, folds = splits.load_splits(Path(run_dir) / run_folder.SPLITS)
    return [
        index
        for index, fold in enumerate(folds)
        if not run_folder.has_fold_record(run_dir, fold.name)
    ]


def merge_run(
    run_dir: str | Path,
    confounds=(),
    permutations: int = 0,
    permutation_model: str = "reference",
    n_jobs: int = 1,
    learning_curve: bool = False,
) -> RunMetrics | None:
    """``train --merge``: finish a run whose folds were trained by ``--fold`` jobs (or add the
    shortcut audit's ``confounds``, a permutation test or the learning curve to a finished
    run, also one of an earlier version).

    ``confounds``, ``permutations``, ``permutation_model``, ``n_jobs`` and ``learning_curve``: as
    :func:`run_training`'s (they are not part of the run's
    identity). Returns the metrics (also written to ``metrics.json``; None on torchrun
    processes other than rank 0). Raises InputDataError when RUN_DIR is not a run folder,
    UsageError when folds are missing, OutputError when a fold job still runs.
    """
    request = read_run_request(run_dir)
    missing = missing_fold_indices(run_dir)
    if missing:
        shown = ", ".join(str(i) for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise UsageError(
            f"{len(missing)} fold(s) not finished in {run_dir} (--fold {shown})",
            hint="run those `eegformer train --fold` jobs, then merge again",
        )
    metrics = run_training(
        request.data_dir,
        run_dir,
        request.label_column,
        request.config,
        splits_file=request.splits_file,
        positive_label=request.positive_label,
        n_jobs=n_jobs,
        confounds=confounds,
        permutations=permutations,
        permutation_model=permutation_model,
        split_by=request.split_by,
        learning_curve=learning_curve,
    )
    assert not isinstance(metrics, FoldRecord)  # only a --fold job returns a fold's record
    return metrics
