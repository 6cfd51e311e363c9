"""A run's summaries, rewritten from its fold results after every fold and at the end:
``history.jsonl``, ``oof_predictions.tsv`` and ``metrics.json`` (each model's scores per fold
and over folds, the comparisons with the references, the score against chance, the out-of-fold
calibration and prediction sets, attention, the interaction screens, what the number of
participants resolves), and whether the run is complete.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

from eegformer_cli.evaluation import oof_calibration
from eegformer_cli.evaluation.metrics import (
    LINEAR_PATH_NAME,
    MODEL_NAME,
    against_chance,
    compare_folds,
    summarise_folds,
)
from eegformer_cli.evaluation.run_metrics import FoldScores, RunMetrics
from eegformer_cli.evaluation.sample_size import assess
from eegformer_cli.experiment import run_folder
from eegformer_cli.experiment.above_chance import judged
from eegformer_cli.experiment.screen_outcomes import summarise_screens
from eegformer_cli.experiment.verdict import scored_by
from eegformer_cli.model.diagnostics import mean_diagnostics
from eegformer_cli.training import splits
from eegformer_cli.training.fold_job import REFERENCES
from eegformer_cli.training.fold_record import FoldRecord
from eegformer_cli.training.model_file import add_calibration, is_linear_path_alone
from eegformer_cli.training.run_plan import RunPlan


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


def _write_history_and_oof(
    run_dir: Path,
    label_names: list[str],
    results: list[FoldRecord],
    names: list[str],
    final_history: list[dict] | None,
) -> None:
    """history.jsonl (every fold's epochs, then the final model's) and oof_predictions.tsv
    (the rows of the models ``names``)."""
    history = [record for result in results for record in result.history]
    run_folder.write_history(run_dir, history + (final_history or []))
    run_folder.write_oof_predictions(
        run_dir,
        label_names,
        [row for result in results for row in result.oof if row["model"] in names],
    )


def write_summaries(
    run_dir: Path,
    plan: RunPlan,
    results: list[FoldRecord],
    final_history: list[dict] | None = None,
    extra: dict | None = None,
    pending: str | None = None,
) -> RunMetrics:
    """history.jsonl, oof_predictions.tsv and metrics.json from the fold results; returns metrics.

    ``extra``: more top-level entries of metrics.json (``shortcut_audit``). First, whether
    the run is complete (:func:`completeness`; ``pending``: a step still to come). Beside the
    models' metrics: ``score`` (the transformer's mean BAC over folds with its 95 % interval
    against chance), ``above_chance`` (:func:`above_chance.judged`), ``scored_by`` (the model
    that carries the score: :func:`verdict.scored_by`), the out-of-fold
    calibration and prediction-set coverage (:mod:`oof_calibration`), whose recalibration and
    calibration set go into ``model.pt`` when it exists, and what the interaction screens
    found (:func:`screen_outcomes.summarise_screens`), and what the run's number of
    participants resolves (:func:`sample_size.assess`)."""
    label_names = plan.data.label_names
    names = _model_names(results)
    _write_history_and_oof(run_dir, label_names, results, names, final_history)
    ratio = splits.test_train_ratio(plan.folds)
    per_fold = {name: [r.scores(name) for r in results] for name in names}
    models, comparisons = _models_and_comparisons(per_fold, ratio)
    oof_rows = [row for result in results for row in result.oof]
    calibration, prediction_sets, model_entry = oof_calibration.summarise(
        oof_rows, label_names, plan.positive_label, _shipped(run_dir, names)
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
            "cv_seconds": float(sum(r.seconds for r in results)),
            "models": models,
            "comparison": comparisons[0],
            "comparisons": comparisons,
            "score": _score(per_fold[MODEL_NAME], len(label_names), ratio),
            "calibration": calibration,
            "prediction_sets": prediction_sets,
            "attention": _attention_out_of_fold(results),
            "interaction_screens": summarise_screens(
                results,
                plan.config.interactions,
                plan.config.age_interactions,
                run_folder.read_final_screen(run_dir),
                plan.config.dynamic_pairs,
            ).to_dict(),
            "linear_path": linear_path_summary(results),
            **(extra or {}),
        }
    )
    metrics = judged(metrics)
    metrics = replace(metrics, scored_by=scored_by(metrics))
    metrics = replace(metrics, sample_size=assess(metrics, _n_participants(plan), ratio))
    run_folder.write_metrics(run_dir, metrics)
    if run_folder.has_final_model(run_dir):
        add_calibration(run_folder.model_path(run_dir), model_entry)
    return metrics


def _n_participants(plan: RunPlan) -> int:
    """The participants (recordings, on recording-wise splits) that the plan's folds split."""
    return len({unit for fold in plan.folds for unit in (*fold.train, *fold.val, *fold.test)})


def _model_names(results: list[FoldRecord]) -> list[str]:
    """The models every fold scored: XAIguiFormer, the references (folds of an earlier version,
    or a folder without band covariances, have only the logistic regression), then the model's
    linear path alone."""
    others = [*REFERENCES, LINEAR_PATH_NAME]
    return [MODEL_NAME, *[n for n in others if all(n in r.metrics for r in results)]]


def _shipped(run_dir: Path, names: list[str]) -> str:
    """Whose out-of-fold rows describe the model that ships (``model.pt``), for its
    recalibration and prediction sets: the linear path alone's when its transformer path was not kept
    (every fold scored the linear path alone too), else the transformer's."""
    model = run_folder.model_path(run_dir)
    if LINEAR_PATH_NAME in names and model.is_file() and is_linear_path_alone(model):
        return LINEAR_PATH_NAME
    return MODEL_NAME


def linear_path_summary(results: list[FoldRecord]) -> dict | None:
    """metrics.json's ``linear_path``: over the folds with one, how many kept the
    transformer path, which penalties and strengths the inner CV chose, how many
    features (and products) the path kept, its fit's time, and which static candidate carried
    each fold (a model with a tangent-space path); None without a linear path."""
    records = [r.linear_path for r in results if r.linear_path]
    if not records:
        return None
    return {
        "n_folds": len(records),
        "transformer_kept": sum(bool(r["transformer_kept"]) for r in records),
        "penalties": dict(Counter(r["penalty"] for r in records)),
        "C": [r["C"] for r in records],
        "n_features": records[0]["n_features"],
        "n_nonzero": [r["n_nonzero"] for r in records],
        "n_products_nonzero": [r["n_products_nonzero"] for r in records],
        "seconds": float(np.mean([r["seconds"] for r in records])),
        **_static_candidates(records),
        **_transformer_stops(records),
    }


def _transformer_stops(records: list[dict]) -> dict:
    """``transformer_stopped``: how many folds stopped the transformer path's training early,
    by reason (``transformer_keep.TransformerKeep.stopped``); empty when none did."""
    reasons = [r["transformer_stopped"]["reason"] for r in records if r.get("transformer_stopped")]
    return {"transformer_stopped": dict(Counter(reasons))} if reasons else {}


def _static_candidates(records: list[dict]) -> dict:
    """``static_candidates``: how many folds each static candidate carried
    (``static_choice.py``), for a model with a tangent-space path; {} without one."""
    chosen = [r["static"]["candidate"] for r in records if r.get("static")]
    return {"static_candidates": dict(Counter(chosen))} if chosen else {}


def _models_and_comparisons(
    per_fold: dict[str, list[FoldScores]], ratio: float
) -> tuple[dict[str, dict], list[dict]]:
    """metrics.json's ``models`` (each model's per-fold scores, ``per_fold``: model name ->
    its :class:`FoldScores` in fold order, and their summary over folds) and
    ``comparisons`` (the transformer against each reference, paired over folds; ``ratio``:
    the folds' test/train size ratio)."""
    models = {
        name: {"per_fold": [s.to_dict() for s in scores], **summarise_folds(scores)}
        for name, scores in per_fold.items()
    }
    comparisons = [
        {
            "model": MODEL_NAME,
            "reference": name,
            **compare_folds(per_fold[MODEL_NAME], per_fold[name], ratio),
        }
        for name in per_fold
        if name != MODEL_NAME
    ]
    return models, comparisons


def _score(per_fold: list[FoldScores], n_classes: int, ratio: float) -> dict:
    """metrics.json's ``score``: the transformer's mean BAC over its folds (``per_fold``, its
    :class:`FoldScores`), its 95 % interval and its test against chance
    (1 / ``n_classes``)."""
    return {
        "model": MODEL_NAME,
        "metric": "bac",
        "chance": 1 / n_classes,
        **against_chance(per_fold, "bac", 1 / n_classes, ratio),
    }


def _attention_out_of_fold(results: list[FoldRecord]) -> dict | None:
    """The folds' attention summaries (test recordings) and their mean over folds; None when
    no fold has one (a run folder of an earlier version)."""
    per_fold = [{"repeat": r.repeat, "fold": r.fold, **r.attention} for r in results if r.attention]
    mean = mean_diagnostics([r.attention for r in results if r.attention])
    if mean is None:
        return None
    return {
        "scope": "test recordings of every fold: mean over a fold's recordings, then over folds",
        **mean,
        "per_fold": per_fold,
    }
