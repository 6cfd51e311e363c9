"""The training run: the run folder, its folds in this process or on workers, the summaries,
the final model, resume, and folds as separate jobs (``--fold``, ``--merge``).

``run_training`` does, in order:

1. :func:`folds.plan_run` (data, splits, settings: nothing is written for a run that cannot
   start); write ``config.json`` and ``splits.json`` (or check that the run folder holds the
   same run, to resume it);
2. for every fold not finished before, :func:`folds.run_fold`, in this process or on
   ``--n-jobs`` workers; write the fold's model ``folds/<r{repeat}_f{fold}>.pt`` and then
   ``folds/<r{repeat}_f{fold}>.json``, atomically;
3. write ``history.jsonl``, ``oof_predictions.tsv`` and ``metrics.json`` from all fold files
   (with the shortcut audit and, on request, the permutation test);
4. the model file ``model.pt``: with ``holdout`` it is the model evaluated on the held-out
   participants (so ``predict`` on them reproduces ``oof_predictions.tsv``); with CV it is a
   model retrained on all participants with the same recipe (an inner validation split for
   selection), since every fold model saw only part of the data.

An interrupted run (Ctrl-C, SIGTERM, a crash) leaves only whole files; its metrics.json (of
the folds finished so far) says ``"complete": false`` and why (:func:`completeness`);
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
a merge of a finished run adds them to it.

Locks: a whole run or a merge takes RUN_DIR's lock exclusively; fold jobs share it, so they run
side by side but never alongside a whole run or a merge.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from eegformer_cli import console
from eegformer_cli.atomic import ensure_dir, remove_stale_temporaries
from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.evaluation import oof_calibration
from eegformer_cli.evaluation.metrics import (
    MODEL_NAME,
    against_chance,
    compare_folds,
    summarise_folds,
)
from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.experiment import audit, permutation, run_folder
from eegformer_cli.experiment.run_folder import prepare_run_dir, run_folder_lock
from eegformer_cli.model.diagnostics import mean_diagnostics
from eegformer_cli.ownership import claim_folder
from eegformer_cli.parallel import process_pool, report_progress, worker_count
from eegformer_cli.preprocess.output import read_manifest
from eegformer_cli.training import distributed, splits
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.dataset import ConnectomeDataset, RecordingInfo, recording_fingerprints
from eegformer_cli.training.fit import FitResult, deterministic_algorithms, fit_model
from eegformer_cli.training.folds import (
    REFERENCES,
    RunPlan,
    is_control_label,
    plan_run,
    recordings_of,
    reference_features,
    run_fold,
)
from eegformer_cli.training.model_file import add_calibration, demographic_stats, save_model_file
from eegformer_cli.training.standardise import StandardisedModel, connectivity_stats


def _save_model(
    path: Path,
    model,
    plan: RunPlan,
    fit_recs: list[RecordingInfo],
    trained_on: str,
    seen_recs: list[RecordingInfo],
) -> None:
    """A model file (``model.pt``, ``folds/<name>.pt``): demographic scaling and the reference
    connectome from ``fit_recs``; ``training_data`` describes ``seen_recs``, every recording
    that shaped the model (fit and epoch selection), and for ``model.pt`` holds their
    connectivity fingerprints (float16 tensors, :func:`provenance.training_fingerprints`)."""
    from eegformer_cli.provenance import describe_training_data

    data = plan.data
    manifest = {row["recording_id"]: row for row in read_manifest(data.data_dir)}
    if isinstance(model, StandardisedModel):  # its input means are that mean connectome
        reference = {"coh": model.coh_mean.cpu().numpy(), "wpli": model.wpli_mean.cpu().numpy()}
    else:
        dataset = ConnectomeDataset(
            fit_recs, data.label_names, data.channels, data.bands, cache_bytes=0
        )
        stats = connectivity_stats(dataset.recording_arrays(r) for r in range(len(fit_recs)))
        reference = {"coh": stats["coh_mean"], "wpli": stats["wpli_mean"]}
    training_data = describe_training_data(seen_recs, manifest, data.data_dir)
    if trained_on != "fold":  # what predict recognises a changed copy of them by
        training_data.update(recording_fingerprints(data, seen_recs, reference))
    save_model_file(
        path,
        model,
        label_names=data.label_names,
        label_column=data.label_column,
        positive_label=plan.positive_label,
        channels=data.channels,
        bands=data.bands,
        band_edges_hz=data.band_edges_hz,
        preprocess_settings=data.preprocess.get("settings", {}),
        demographic_stats=demographic_stats(np.array([r.age for r in fit_recs])),
        train_config=plan.config.to_dict(),
        trained_on=trained_on,
        training_data=training_data,
        reference_connectome=reference,
    )


def completeness(run_dir: Path, plan: RunPlan, n_finished: int, pending: str | None = None) -> dict:
    """metrics.json's first entries: ``{"complete": False, "incomplete": why}`` while folds
    are missing (``n_finished`` of the plan's), ``model.pt`` is not written or ``pending``
    names a step still to come; else ``{"complete": True, "incomplete": None}``."""
    missing = []
    if n_finished < len(plan.folds):
        missing.append(f"{n_finished} of {len(plan.folds)} folds finished")
    if not run_folder.has_final_model(run_dir):
        missing.append("no final model (model.pt) yet")
    if pending:
        missing.append(pending)
    if not missing:
        return {"complete": True, "incomplete": None}
    return {
        "complete": False,
        "incomplete": "incomplete run: "
        + "; ".join(missing)
        + ", so these metrics are not the whole run's; rerun the same `eegformer train` "
        "command (or `eegformer train --merge` after --fold jobs) to finish it",
    }


def write_summaries(
    run_dir: Path,
    plan: RunPlan,
    results: list[dict],
    final_history: list[dict] | None = None,
    extra: dict | None = None,
    pending: str | None = None,
) -> RunMetrics:
    """history.jsonl, oof_predictions.tsv and metrics.json from the fold results; returns metrics.

    ``extra``: more top-level entries of metrics.json (``shortcut_audit``). First, whether
    the run is complete (:func:`completeness`; ``pending``: a step still to come). Beside the
    models' metrics: ``score`` (the transformer's mean BAC over folds with its 95 % interval
    against chance) and the out-of-fold calibration and prediction-set coverage
    (:mod:`oof_calibration`), whose recalibration and calibration set go into ``model.pt``
    when it exists."""
    history = [record for result in results for record in result["history"]]
    history += final_history or []
    run_folder.write_history(run_dir, history)
    label_names = plan.data.label_names
    # the references every fold has (folds of an earlier version, or a folder without band
    # covariances, have only the logistic regression)
    names = [MODEL_NAME, *[n for n in REFERENCES if all(n in r["metrics"] for r in results)]]
    run_folder.write_oof_predictions(
        run_dir,
        label_names,
        [row for result in results for row in result["oof"] if row["model"] in names],
    )
    models = {}
    for name in names:
        per_fold = [
            {"repeat": r["repeat"], "fold": r["fold"], **r["metrics"][name]} for r in results
        ]
        models[name] = {"per_fold": per_fold, **summarise_folds(per_fold)}
    ratio = splits.test_train_ratio(plan.folds)
    comparisons = [
        {
            "model": MODEL_NAME,
            "reference": name,
            **compare_folds(models[MODEL_NAME]["per_fold"], models[name]["per_fold"], ratio),
        }
        for name in models
        if name != MODEL_NAME
    ]
    oof_rows = [row for result in results for row in result["oof"]]
    calibration, prediction_sets, model_entry = oof_calibration.summarise(
        oof_rows, label_names, plan.positive_label
    )
    metrics = RunMetrics.from_dict(
        {
            **completeness(run_dir, plan, len(results), pending),
            "labels": label_names,
            "positive_label": plan.positive_label,
            "label_column": plan.data.label_column,
            "scheme": plan.scheme,
            "preset": plan.config.preset,
            "n_folds": len(results),
            "cv_seconds": float(sum(r["seconds"] for r in results)),
            "models": models,
            "comparison": comparisons[0],
            "comparisons": comparisons,
            "score": {
                "model": MODEL_NAME,
                "metric": "bac",
                "chance": 1 / len(label_names),
                **against_chance(
                    models[MODEL_NAME]["per_fold"], "bac", 1 / len(label_names), ratio
                ),
            },
            "calibration": calibration,
            "prediction_sets": prediction_sets,
            "attention": _attention_out_of_fold(results),
            **(extra or {}),
        }
    )
    run_folder.write_metrics(run_dir, metrics)
    if run_folder.has_final_model(run_dir):
        add_calibration(run_dir / "model.pt", model_entry)
    return metrics


def _attention_out_of_fold(results: list[dict]) -> dict | None:
    """The folds' attention summaries (test recordings) and their mean over folds; None when
    no fold has one (a run folder of an earlier version)."""
    per_fold = [
        {"repeat": r["repeat"], "fold": r["fold"], **r["attention"]}
        for r in results
        if r.get("attention")
    ]
    mean = mean_diagnostics([r["attention"] for r in results if r.get("attention")])
    if mean is None:
        return None
    return {
        "scope": "test recordings of every fold: mean over a fold's recordings, then over folds",
        **mean,
        "per_fold": per_fold,
    }


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
) -> RunMetrics | dict | None:
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
    recordings without a participant id (:func:`splits.split_unit`).

    Steps: :func:`_plan_request` (nothing written for a run that cannot start),
    :func:`_claim_run_dir`, the shortcut audit, :func:`_finished_folds` (resume),
    :func:`_train_models` (the folds left, then the final model), :func:`write_summaries`, the
    permutation test.

    Raises UsageError (bad settings, a run folder holding another run), InputDataError (data
    that cannot make a classification task) and OutputError (run folder not writable/locked).
    """
    n_workers = worker_count(n_jobs)
    plan, audit_plan, folds = _plan_request(
        data_dir,
        label_column,
        config,
        splits_file,
        positive_label,
        overwrite,
        fold_index,
        n_jobs,
        n_workers,
        confounds,
        permutations,
        permutation_model,
        split_by,
    )
    run_dir = Path(run_dir)
    if distributed.is_writer():
        claim_folder(run_dir, "train", overwrite)
    ensure_dir(run_dir)
    with (
        distributed.process_group(plan.device),
        run_folder_lock(run_dir, fold_index),
        deterministic_algorithms(plan.device),
    ):
        writer = distributed.is_writer()
        if writer:
            _claim_run_dir(run_dir, plan, fold_index, overwrite, positive_label)
        extra = (
            {"shortcut_audit": audit.run_audit(audit_plan, plan.positive_label).to_dict()}
            if writer and audit_plan is not None
            else None
        )
        distributed.barrier()  # the other processes read the folder once rank 0 prepared it
        features = reference_features(plan.data)
        results = _finished_folds(run_dir, plan, folds)
        final_history = _train_models(
            run_dir, plan, folds, results, features, n_workers, fold_index, extra
        )
        if fold_index is not None:
            return results[folds[0].name] if writer else None
        pending = "the permutation test not finished" if permutations else None
        metrics = (
            write_summaries(
                run_dir, plan, _in_fold_order(results, folds), final_history, extra, pending
            )
            if writer
            else None
        )
        if metrics is not None and permutations:
            metrics = permutation.run_permutation_test(
                run_dir, plan, features, metrics, permutations, permutation_model, n_workers
            )
            # the test is done ("complete" stays first)
            metrics = replace(metrics, **completeness(run_dir, plan, len(results)))
            run_folder.write_metrics(run_dir, metrics)
        return metrics


def _plan_request(
    data_dir,
    label_column: str,
    config: TrainConfig,
    splits_file,
    positive_label: str | None,
    overwrite: bool,
    fold_index: int | None,
    n_jobs: int,
    n_workers: int,
    confounds,
    permutations: int,
    permutation_model: str,
    split_by: str,
) -> tuple[RunPlan, audit.AuditPlan | None, list[splits.Fold]]:
    """Check :func:`run_training`'s arguments and plan the run before anything is written:
    (the plan, the shortcut audit's plan (None for a fold job), the folds this call trains).
    ``n_workers``: :func:`parallel.worker_count` of ``n_jobs``."""
    permutation.check_settings(permutations, permutation_model)
    if fold_index is not None and (confounds or permutations):
        raise UsageError(
            "--confounds and --permutations concern the whole run: give them to "
            "`eegformer train --merge RUN_DIR` once the --fold jobs are done"
        )
    plan = plan_run(data_dir, label_column, config, splits_file, positive_label, split_by)
    if permutations:
        permutation.check_null_model_available(permutation_model, plan.data)
    audit_plan = (
        None
        if fold_index is not None
        else audit.plan_audit(plan.data, plan.folds, plan.scheme, config, confounds)
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
    return plan, audit_plan, folds


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


def _finished_folds(run_dir: Path, plan: RunPlan, folds: list[splits.Fold]) -> dict[str, dict]:
    """Fold name -> result of the ``folds`` an earlier, interrupted run (or a ``--fold`` job)
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


def _train_models(
    run_dir: Path,
    plan: RunPlan,
    folds: list[splits.Fold],
    results: dict[str, dict],
    features: dict[str, dict],
    n_workers: int,
    fold_index: int | None,
    extra: dict | None,
) -> list[dict] | None:
    """Train the ``folds`` not in ``results`` (adding theirs, each saved as it finishes, with
    the summaries rewritten) and, for a whole cross-validation run without ``model.pt``, the
    final model, here or on ``n_workers`` workers. Returns the final model's history (None
    for a holdout or a fold job)."""
    holdout = plan.scheme.get("kind") == "holdout"
    pending = [fold for fold in folds if fold.name not in results]
    train_final = fold_index is None and not holdout and not (run_dir / "model.pt").exists()
    if fold_index is None and not holdout and not train_final:
        console.log(f"train: final model reused: {run_dir / 'model.pt'} of the earlier run")
    with (
        process_pool(min(n_workers, len(pending) + train_final), progress=True) as pool,
        console.progress_bar() as bar,
        _worker_progress(pool, bar, plan.config.epochs) as shown,
    ):
        folds_task = bar.add_task("folds", total=len(folds), completed=len(results), status="")
        final_job = None
        if pool is None:
            trained = _folds_here(plan, pending, features, bar)
        else:  # the final model is queued behind the folds, on the first free worker
            trained = _folds_on_workers(pool, plan, pending, features, run_dir)
            final_job = pool.apply_async(_final_job, (plan,)) if train_final else None
        for fold, result, model in trained:
            shown.finished(fold.name)
            _save_fold(run_dir, plan, fold, result, model)
            results[fold.name] = result
            bar.advance(folds_task)
            if distributed.is_writer() and fold_index is None:  # a fold job leaves them to --merge
                write_summaries(run_dir, plan, _in_fold_order(results, folds), extra=extra)
            _log_fold(fold, result)
        if fold_index is not None:
            return None
        if train_final:
            return _write_final(run_dir, plan, _final_model(plan, final_job, bar, shown))
    return None if holdout else run_folder.read_final_history(run_dir)


def _save_fold(run_dir: Path, plan: RunPlan, fold: splits.Fold, result: dict, model) -> None:
    """On the writing process: a finished fold's model file (unless its worker saved it;
    ``model.pt`` too for a holdout), then its result file ``folds/<name>.json``."""
    if not distributed.is_writer():
        return
    if model is not None:
        save_fold_model(run_dir, plan, fold, model)
    if plan.scheme.get("kind") == "holdout":
        _save_model(
            run_dir / "model.pt",
            model,
            plan,
            recordings_of(plan.data, fold.train),
            "holdout",
            recordings_of(plan.data, fold.train + fold.val),
        )
    run_folder.write_fold_record(run_dir, fold.name, result)


def _log_fold(fold: splits.Fold, result: dict) -> None:
    """One line per finished fold: the BAC of each model, the selected epoch, the time."""
    m = result["metrics"]
    references = ", ".join(
        f"{name.replace('_', ' ')} {m[name]['bac']:.3f}" for name in m if name != MODEL_NAME
    )
    console.log(
        f"fold {fold.name}: BAC {m[MODEL_NAME]['bac']:.3f} ({references}), "
        f"best epoch {result['best_epoch']}, {result['seconds']:.0f} s"
    )


def _final_model(plan: RunPlan, final_job, bar, shown) -> FitResult:
    """The final model: trained here with its own epoch bar (``final_job`` None), or the
    result of the worker it was queued on."""
    if final_job is None:
        final_task = bar.add_task(FINAL_NAME, total=plan.config.epochs, status="")
        return _fit_final(plan, lambda record: bar.update(final_task, completed=record["epoch"]))
    fit = final_job.get()
    shown.finished(FINAL_NAME)
    return fit


def _in_fold_order(results: dict[str, dict], folds: list[splits.Fold]) -> list[dict]:
    """The finished folds' results in the order of the splits (whatever order they ended in)."""
    return [results[fold.name] for fold in folds if fold.name in results]


def _folds_here(plan: RunPlan, folds: list[splits.Fold], features: dict[str, dict], bar):
    """Train ``folds`` in this process, one after the other, each with an epoch bar; yields
    (fold, result, selected model)."""
    for fold in folds:
        epoch_task = bar.add_task(f"fold {fold.name}", total=plan.config.epochs, status="")

        def on_epoch(record, task=epoch_task):
            bar.update(
                task,
                completed=record["epoch"],
                status=f"loss {record['train_loss']:.3f} val BAC {record['val_bac']:.3f}",
            )

        result, model = run_fold(plan, fold, features, on_epoch)
        bar.remove_task(epoch_task)
        yield fold, result, model


def _folds_on_workers(
    pool, plan: RunPlan, folds: list[splits.Fold], features: dict[str, dict], run_dir: Path
):
    """Queue ``folds`` on ``pool`` now; yields (fold, result, None) in the order they finish
    (each worker saves its fold's model file; a holdout run, whose model.pt is its fold's
    model, trains its one fold in this process)."""
    by_name = {fold.name: fold for fold in folds}
    finished = pool.imap_unordered(_fold_job, [(plan, fold, features, run_dir) for fold in folds])
    return ((by_name[name], result, None) for name, result in finished)


def _fold_job(job: tuple) -> tuple[str, dict]:
    """One fold in a worker process: (plan, fold, features, run_dir) -> (fold name, result);
    the fold's model file is written here, each epoch reported to the parent's bar."""
    plan, fold, features, run_dir = job
    with deterministic_algorithms(plan.device):  # a spawned worker does not inherit the flag
        result, model = run_fold(
            plan, fold, features, lambda record: report_progress((fold.name, _shown(record)))
        )
    save_fold_model(run_dir, plan, fold, model)
    return fold.name, result


def save_fold_model(run_dir: Path, plan: RunPlan, fold: splits.Fold, model) -> None:
    """``folds/<name>.pt``: the fold's selected model, a model file like ``model.pt`` (what
    ``explain RUN_DIR`` explains the fold's test recordings with), written before the fold's
    result file, so a finished fold always has it."""
    _save_model(
        run_folder.fold_model_path(run_dir, fold.name),
        model,
        plan,
        recordings_of(plan.data, fold.train),
        "fold",
        recordings_of(plan.data, fold.train + fold.val),
    )


#: The final model's name on the progress bar of a run on workers.
FINAL_NAME = "final model"


def _final_job(plan: RunPlan) -> FitResult:
    """The final model in a worker process, each epoch reported to the parent's bar."""
    return _fit_final(plan, lambda record: report_progress((FINAL_NAME, _shown(record))))


def _shown(record: dict) -> dict:
    """What the progress bar shows of an epoch's history record."""
    return {key: record.get(key) for key in ("epoch", "train_loss", "val_bac")}


class _WorkerProgress:
    """Each fold's epochs on the progress bar while workers train them (as ``_folds_here``
    shows them): a thread reads ``queue`` (``(name, record)`` from the workers) and keeps one
    task per running fold; :meth:`finished` removes a fold's task."""

    def __init__(self, queue, bar, epochs: int):
        self.queue, self.bar, self.epochs = queue, bar, epochs
        self.tasks: dict[str, int] = {}
        self.done: set[str] = set()
        self.thread = threading.Thread(target=self._show, daemon=True)
        self.thread.start()

    def _show(self) -> None:
        while (item := self.queue.get()) is not None:
            name, record = item
            if record is None:
                self.done.add(name)
                if name in self.tasks:
                    self.bar.remove_task(self.tasks.pop(name))
            elif name not in self.done:  # an epoch line may arrive after its fold's end
                if name not in self.tasks:
                    label = name if name == FINAL_NAME else f"fold {name}"
                    self.tasks[name] = self.bar.add_task(label, total=self.epochs, status="")
                val_bac = record.get("val_bac")
                self.bar.update(
                    self.tasks[name],
                    completed=record["epoch"],
                    status=f"loss {record.get('train_loss') or 0:.3f} val BAC "
                    + ("n/a" if val_bac is None else f"{val_bac:.3f}"),
                )

    def finished(self, name: str) -> None:
        self.queue.put((name, None))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


class _NoWorkers:
    """:class:`_WorkerProgress` of a run without workers: nothing to show."""

    def finished(self, name: str) -> None:
        pass


@contextlib.contextmanager
def _worker_progress(pool, bar, epochs: int):
    """A :class:`_WorkerProgress` for ``pool`` (closed on leaving), or :class:`_NoWorkers`."""
    if pool is None:
        yield _NoWorkers()
        return
    shown = _WorkerProgress(pool.progress, bar, epochs)
    try:
        yield shown
    finally:
        shown.close()


def _fit_final(plan: RunPlan, on_epoch=None) -> FitResult:
    """The final model: all participants, the final split's inner validation for selection."""
    data, fold = plan.data, plan.final
    with deterministic_algorithms(plan.device):
        return fit_model(
            data,
            recordings_of(data, fold.train),
            recordings_of(data, fold.val),
            plan.config,
            plan.device,
            plan.config.seed,
            {"repeat": -1, "fold": -1},
            on_epoch,
        )


def _write_final(run_dir: Path, plan: RunPlan, fit: FitResult) -> list[dict]:
    """``folds/final.json`` and ``model.pt`` of the final model; returns its history."""
    fold = plan.final
    if distributed.is_writer():
        run_folder.write_final_record(
            run_dir,
            {
                "history": fit.history,
                "best_epoch": fit.best_epoch,
                "seconds": fit.seconds,
                "interaction_screen": fit.screen,
                "train": fold.train,
                "val": fold.val,
            },
        )
        seen = recordings_of(plan.data, fold.train) + recordings_of(plan.data, fold.val)
        _save_model(run_dir / "model.pt", fit.model, plan, seen, "all", seen)
    console.log(
        f"final model: best epoch {fit.best_epoch}, {fit.seconds:.0f} s -> {run_dir / 'model.pt'}"
    )
    return fit.history


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
    request = run_folder.read_run_request(run_dir)
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
) -> RunMetrics | None:
    """``train --merge``: finish a run whose folds were trained by ``--fold`` jobs (or add the
    shortcut audit's ``confounds`` or a permutation test to a finished run).

    ``confounds``, ``permutations``, ``permutation_model`` and ``n_jobs``: as
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
    return run_training(
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
    )
