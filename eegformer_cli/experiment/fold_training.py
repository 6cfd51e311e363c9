"""Training a run's folds and its final model: in this process (an epoch bar each) or on
``--n-jobs`` worker processes (the final model queued behind the folds), each fold's model file
and then its record saved as it finishes and the summaries rewritten, so an interrupted run
leaves only whole files; the model files of a run (``folds/<name>.pt``, ``model.pt``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from eegformer_cli import console
from eegformer_cli.errors import EegformerWarning
from eegformer_cli.evaluation.metrics import MODEL_NAME
from eegformer_cli.experiment import run_folder
from eegformer_cli.experiment.summaries import write_summaries
from eegformer_cli.experiment.verdict import STOP_WORDS
from eegformer_cli.experiment.worker_progress import FINAL_NAME, shown_fields, worker_progress
from eegformer_cli.parallel import process_pool, report_progress
from eegformer_cli.preprocess.output import read_manifest
from eegformer_cli.training import distributed, splits
from eegformer_cli.training.dataset import ConnectomeDataset, RecordingInfo, recording_fingerprints
from eegformer_cli.training.fit import FitResult, deterministic_algorithms, fit_model
from eegformer_cli.training.fold_job import run_fold
from eegformer_cli.training.fold_record import FoldRecord
from eegformer_cli.training.model_file import demographic_stats, save_model_file
from eegformer_cli.training.run_plan import RunPlan, recordings_of
from eegformer_cli.training.standardise import connectivity_stats


def _interim_summaries(
    run_dir: Path, plan: RunPlan, results: list[FoldRecord], extra: dict | None
) -> None:
    """The summaries of the folds finished so far (an interrupted run keeps them), without
    their warnings: the run's final summaries say once what they find."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EegformerWarning)
        write_summaries(run_dir, plan, results, extra=extra)


def train_models(
    run_dir: Path,
    plan: RunPlan,
    folds: list[splits.Fold],
    results: dict[str, FoldRecord],
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
    model_file = run_folder.model_path(run_dir)
    train_final = fold_index is None and not holdout and not model_file.exists()
    if fold_index is None and not holdout and not train_final:
        console.log(f"train: final model reused: {model_file} of the earlier run")
    with (
        process_pool(min(n_workers, len(pending) + train_final), progress=True) as pool,
        console.progress_bar() as bar,
        worker_progress(pool, bar, plan.config.epochs) as shown,
    ):
        folds_task = bar.add_task("folds", total=len(folds), completed=len(results), status="")
        final_job = None
        # a final model that follows the folds' keep decisions waits for them
        follows = plan.config.final_follows_folds and plan.config.transformer_path == "auto"
        if pool is None:
            trained = _folds_here(plan, pending, features, bar)
        else:  # the final model is queued behind the folds, on the first free worker
            trained = _folds_on_workers(pool, plan, pending, features, run_dir)
            final_job = (
                pool.apply_async(_final_job, (plan,)) if train_final and not follows else None
            )
        for fold, result, model in trained:
            shown.finished(fold.name)
            _save_fold(run_dir, plan, fold, result, model)
            results[fold.name] = result
            bar.advance(folds_task)
            if distributed.is_writer() and fold_index is None:  # a fold job leaves them to --merge
                _interim_summaries(run_dir, plan, in_fold_order(results, folds), extra)
            _log_fold(fold, result)
        if fold_index is not None:
            return None
        if train_final:
            no_fold = follows and not any(_kept(r) for r in results.values())
            if pool is not None and follows:
                final_job = pool.apply_async(_final_job, (plan, no_fold))
            return _write_final(run_dir, plan, _final_model(plan, final_job, bar, shown, no_fold))
    return None if holdout else run_folder.read_final_history(run_dir)


def _save_fold(run_dir: Path, plan: RunPlan, fold: splits.Fold, result: FoldRecord, model) -> None:
    """On the writing process: a finished fold's model file (unless its worker saved it;
    ``model.pt`` too for a holdout), then its result file ``folds/<name>.json``."""
    if not distributed.is_writer():
        return
    if model is not None:
        save_fold_model(run_dir, plan, fold, model)
    if plan.scheme.get("kind") == "holdout":
        _save_model(
            run_folder.model_path(run_dir),
            model,
            plan,
            recordings_of(plan.data, fold.train),
            "holdout",
            recordings_of(plan.data, fold.train + fold.val),
        )
    run_folder.write_fold_record(run_dir, fold.name, result)


def _log_fold(fold: splits.Fold, record: FoldRecord) -> None:
    """One line per finished fold: the BAC of each model, the selected epoch, the time."""
    m = record.metrics
    references = ", ".join(
        f"{name.replace('_', ' ')} {m[name].bac:.3f}" for name in m if name != MODEL_NAME
    )
    console.log(
        f"fold {fold.name}: BAC {m[MODEL_NAME].bac:.3f} ({references}), "
        f"{transformer_words(record.best_epoch, record.linear_path)}, {record.seconds:.0f} s"
    )


def transformer_words(best_epoch: int | None, keep: dict | None) -> str:
    """What a fold's or the final model's line says of its transformer path: the selected
    epoch, or that it was not kept and where its training stopped (the fold record's
    ``transformer_stopped``)."""
    stopped = (keep or {}).get("transformer_stopped")
    if best_epoch or not keep:
        return f"best epoch {best_epoch}"
    if keep.get("transformer_path") == "off":
        return "transformer path off"
    if stopped and stopped["epoch"] == 0:
        _, why = STOP_WORDS.get(stopped["reason"], ("", stopped["reason"]))
        return f"transformer path not trained ({why})"
    if stopped:
        return f"transformer path not kept (stopped after epoch {stopped['epoch']})"
    return "transformer path not kept"


def _kept(record: FoldRecord) -> bool:
    """Whether a fold kept its transformer path (its record's ``linear_path``)."""
    return bool((record.linear_path or {}).get("transformer_kept"))


def _final_model(plan: RunPlan, final_job, bar, shown, kept_in_no_fold: bool) -> FitResult:
    """The final model: trained here with its own epoch bar (``final_job`` None), or the
    result of the worker it was queued on; ``kept_in_no_fold``: without its transformer path
    (``fit_model``)."""
    if final_job is None:
        final_task = bar.add_task(FINAL_NAME, total=plan.config.epochs, status="")
        return _fit_final(
            plan, lambda record: bar.update(final_task, completed=record["epoch"]), kept_in_no_fold
        )
    fit = final_job.get()
    shown.finished(FINAL_NAME)
    return fit


def in_fold_order(results: dict[str, FoldRecord], folds: list[splits.Fold]) -> list[FoldRecord]:
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


def _fold_job(job: tuple) -> tuple[str, FoldRecord]:
    """One fold in a worker process: (plan, fold, features, run_dir) -> (fold name, result);
    the fold's model file is written here, each epoch reported to the parent's bar."""
    plan, fold, features, run_dir = job
    with deterministic_algorithms(plan.device):  # a spawned worker does not inherit the flag
        result, model = run_fold(
            plan, fold, features, lambda record: report_progress((fold.name, shown_fields(record)))
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


def _final_job(plan: RunPlan, kept_in_no_fold: bool = False) -> FitResult:
    """The final model in a worker process, each epoch reported to the parent's bar."""
    return _fit_final(
        plan, lambda record: report_progress((FINAL_NAME, shown_fields(record))), kept_in_no_fold
    )


def _fit_final(plan: RunPlan, on_epoch=None, kept_in_no_fold: bool = False) -> FitResult:
    """The final model: all participants, the final split's inner validation for selection;
    ``kept_in_no_fold``: without its transformer path (``fit_model``)."""
    data, fold = plan.data, plan.final_split()
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
            kept_in_no_fold=kept_in_no_fold,
        )


def _write_final(run_dir: Path, plan: RunPlan, fit: FitResult) -> list[dict]:
    """``folds/final.json`` and ``model.pt`` of the final model; returns its history."""
    fold = plan.final_split()
    if distributed.is_writer():
        run_folder.write_final_record(
            run_dir,
            {
                "history": fit.history,
                "best_epoch": fit.best_epoch,
                "seconds": fit.seconds,
                "interaction_screen": fit.screen,
                "linear_path": fit.linear,
                "train": fold.train,
                "val": fold.val,
            },
        )
        seen = recordings_of(plan.data, fold.train) + recordings_of(plan.data, fold.val)
        _save_model(run_folder.model_path(run_dir), fit.model, plan, seen, "all", seen)
    console.log(
        f"final model: {transformer_words(fit.best_epoch, fit.linear)}, {fit.seconds:.0f} s -> "
        f"{run_folder.model_path(run_dir)}"
    )
    return fit.history


def _save_model(
    path: Path,
    model,
    plan: RunPlan,
    fit_recs: list[RecordingInfo],
    trained_on: str,
    seen_recs: list[RecordingInfo],
) -> None:
    """A model file (``model.pt``, ``folds/<name>.pt``): demographic scaling and the baseline
    connectome from ``fit_recs``; ``training_data`` describes ``seen_recs``, every recording
    that shaped the model (fit and epoch selection), and for ``model.pt`` holds their
    connectivity fingerprints (float16 tensors, :func:`provenance.training_fingerprints`)."""
    from eegformer_cli.provenance import describe_training_data

    data = plan.data
    manifest = {row["recording_id"]: row for row in read_manifest(data.data_dir)}
    if model.standardiser is not None:  # its input means are that mean connectome
        means = model.standardiser.coh_mean, model.standardiser.wpli_mean
        baseline = {"coh": means[0].cpu().numpy(), "wpli": means[1].cpu().numpy()}
    else:
        dataset = ConnectomeDataset(
            fit_recs, data.label_names, data.channels, data.bands, cache_bytes=0
        )
        stats = connectivity_stats(dataset.recording_arrays(r) for r in range(len(fit_recs)))
        baseline = {"coh": stats["coh_mean"], "wpli": stats["wpli_mean"]}
    training_data = describe_training_data(seen_recs, manifest, data.data_dir)
    if data.preprocess is not None and data.preprocess.bids_selection:
        training_data["bids_selection"] = data.preprocess.bids_selection  # predict's, on a root
    if trained_on != "fold":  # what predict recognises a changed copy of them by
        training_data.update(recording_fingerprints(data, seen_recs, baseline))
    save_model_file(
        path,
        model,
        label_names=data.label_names,
        label_column=data.label_column,
        positive_label=plan.positive_label,
        channels=data.channels,
        bands=data.bands,
        band_edges_hz=data.band_edges_hz,
        preprocess_settings=(data.preprocess.settings if data.preprocess else None) or {},
        demographic_stats=demographic_stats(np.array([r.age for r in fit_recs])),
        train_config=plan.config.to_dict(),
        trained_on=trained_on,
        training_data=training_data,
        baseline_connectome=baseline,
    )
