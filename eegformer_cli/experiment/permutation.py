"""The permutation test of ``train --permutations N``: does the cross-validated BAC beat chance?

Under the null hypothesis (the label does not depend on the recordings), relabelling the
participants at random changes nothing, so the run's BAC is one draw of the BAC the same
procedure reaches on permuted labels. The test refits the cross-validation N times, each
time with permuted labels on the run's own participant-wise folds (same splits, same
per-fold seeds), and reports p = (1 + #{null BAC >= observed BAC}) / (1 + N) per model (the
smallest possible p is 1 / (N + 1)). BAC is the mean over folds, as ``metrics.json``'s.

Labels are permuted by :func:`null_labels.permuted_labels` (between participants, or among
each participant's recordings when those carry different labels).

Why not :func:`sklearn.model_selection.permutation_test_score`: with ``groups`` it shuffles
labels *within* each group (its only grouped mode, scikit-learn/scikit-learn#21543), which for one
recording per participant permutes nothing (p = 1 always); without ``groups`` it shuffles
recordings freely, breaking a participant's label over its recordings. It also cannot resume,
and the null must refit exactly the run's models (the reference's per-fold seeds, or the
whole XAIguiFormer recipe). The p-value rule is the same as scikit-learn's.

Null models (``--permutation-model``):

- ``reference`` (default, cheap): the logistic-regression reference is refit on each
  permutation; its p-value is exact, and XAIguiFormer's observed BAC is compared with the
  reference's null (an approximation: under the null both models' BAC centre on chance with a
  spread set mostly by the test sets' sizes; say so wherever it is shown);
- ``tangent_space``: the same with the tangent-space reference (:mod:`tangent_space`), for
  folders whose connectome files hold band covariances;
- ``xaiguiformer``: every fold of every model is retrained on each permutation (a full CV per
  permutation): every p-value is exact.

Each permutation's labels come from its own seeded stream (``seed``, index), so a permutation
is the same whatever N, order or worker computes it. Results are stored one file per
permutation, atomically, in ``RUN_DIR/permutations/<null model>/NNNNN.json``: a rerun (or a
larger N) computes only the missing ones. ``--n-jobs`` spreads permutations over processes.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from eegformer_cli import console
from eegformer_cli.errors import UsageError, check_choice
from eegformer_cli.evaluation.metrics import (
    MODEL_NAME,
    REFERENCE_NAME,
    TANGENT_SPACE_NAME,
    classification_metrics,
)
from eegformer_cli.evaluation.run_metrics import NullComparison, PermutationTest, RunMetrics
from eegformer_cli.experiment import run_folder
from eegformer_cli.experiment.above_chance import judged
from eegformer_cli.experiment.null_labels import describe_scheme, p_value, permuted_labels
from eegformer_cli.parallel import process_pool

#: ``--permutation-model`` choice -> the model refit on permuted labels: its metrics.json name.
NULL_MODELS = {
    "reference": REFERENCE_NAME,
    "tangent_space": TANGENT_SPACE_NAME,
    "xaiguiformer": MODEL_NAME,
}


def check_settings(n_permutations: int, null_model: str) -> None:
    """UsageError for a negative ``--permutations``, an unknown ``--permutation-model``, or
    permutations under torchrun (they run in one process and its ``--n-jobs`` workers)."""
    if n_permutations < 0:
        raise UsageError(
            f"invalid value {n_permutations} for --permutations; use 0 (no test) "
            "or a positive number, e.g. 100"
        )
    check_choice("--permutation-model", null_model, NULL_MODELS)
    from eegformer_cli.training import distributed

    if n_permutations and distributed.process_place().world_size > 1:
        raise UsageError(
            "--permutations cannot run under torchrun",
            hint="train without it, then add the test to the finished run: "
            "eegformer train --merge RUN_DIR --permutations N",
        )


def check_null_model_available(null_model: str, data) -> None:
    """UsageError when ``null_model`` is the tangent-space reference and ``data`` (a
    :class:`~eegformer_cli.training.dataset.TrainingData`) has no band covariances (judged on
    its first connectome file, before anything is written)."""
    from eegformer_cli.training.dataset import read_covariances

    if (
        NULL_MODELS[null_model] == TANGENT_SPACE_NAME
        and read_covariances(data.recordings[0], data.channels) is None
    ):
        raise UsageError(
            f"--permutation-model {null_model} needs band covariances, which "
            f"the connectome files of {data.data_dir} do not hold (preprocessed "
            "by an earlier eegformer)",
            hint="rerun `eegformer preprocess` with the same inputs and --out, "
            "or use --permutation-model reference",
        )


def null_scores(plan, features: dict[str, dict], index: int, null_model: str) -> dict:
    """Permutation ``index`` of ``plan`` (a :class:`~eegformer_cli.training.run_plan.RunPlan`):
    what its file holds,
    :func:`refit_scores` on its labels with ``index`` and the seconds it took. ``null_model``:
    a value of :data:`NULL_MODELS` (a model name)."""
    start = time.perf_counter()
    labels = permuted_labels(plan.data, plan.folds, plan.config.seed, index)
    return {
        "index": index,
        "null_model": null_model,
        **refit_scores(plan, features, labels, null_model),
        "seconds": time.perf_counter() - start,
    }


def refit_scores(plan, features: dict[str, dict], labels: list[str], null_model: str) -> dict:
    """The BAC of the models refit on the run's folds with ``labels`` (one per recording of
    ``plan.data``) instead of the real ones: ``{"bac": {model: mean over folds}, "per_fold":
    [...]}``. ``null_model`` :data:`~eegformer_cli.evaluation.metrics.MODEL_NAME` retrains both
    models exactly as the run's folds do; else that reference alone is refit. With the real
    labels this is the run's own BAC."""
    from eegformer_cli.training.fold_job import run_fold  # torch: only when training

    recordings = [
        dataclasses.replace(rec, label=label) for rec, label in zip(plan.data.recordings, labels)
    ]
    relabelled = dataclasses.replace(
        plan, data=dataclasses.replace(plan.data, recordings=recordings)
    )
    per_fold = []
    for fold in plan.folds:
        if null_model == MODEL_NAME:
            result, _ = run_fold(relabelled, fold, features)
            bac = {name: scores.bac for name, scores in result.metrics.items()}
        else:
            bac = {null_model: _reference_bac(relabelled, fold, features, null_model)}
        per_fold.append({"repeat": fold.repeat, "fold": fold.fold, "bac": bac})
    return {
        "bac": {
            name: float(np.mean([fold["bac"][name] for fold in per_fold]))
            for name in per_fold[0]["bac"]
        },
        "per_fold": per_fold,
    }


def _reference_bac(plan, fold, features: dict[str, dict], name: str) -> float:
    """BAC of reference ``name`` on ``fold``'s test recordings, fit as in the run
    (:func:`~eegformer_cli.training.fold_job.fit_fold_reference`)."""
    from eegformer_cli.training.fold_job import fit_fold_reference
    from eegformer_cli.training.run_plan import recordings_of

    _, probabilities = fit_fold_reference(plan, fold, features, name)
    test_labels = plan.data.label_indices(recordings_of(plan.data, fold.test))
    bac = classification_metrics(test_labels, probabilities, None).bac
    assert bac is not None  # classification_metrics always scores it
    return bac


def _null_job(job: tuple) -> dict:
    """One permutation: (plan, features, index, null model) -> its result, with torch's
    deterministic algorithms as in a fold (a spawned worker does not inherit the flag)."""
    from eegformer_cli.training.fit import deterministic_algorithms

    plan, features, index, null_model = job
    with deterministic_algorithms(plan.device):
        return null_scores(plan, features, index, null_model)


def run_permutation_test(
    run_dir: Path,
    plan,
    features: dict[str, dict],
    metrics: RunMetrics,
    n_permutations: int,
    null_model: str,
    n_workers: int,
) -> RunMetrics:
    """Compute the permutations not on disk yet (on ``n_workers`` processes), then add
    ``permutation_test`` to ``metrics`` (and ``above_chance`` by the rule that then follows
    it) and rewrite ``RUN_DIR/metrics.json``; returns metrics.

    ``null_model``: a key of :data:`NULL_MODELS`; ``metrics``: the run's metrics (the observed
    BAC of each model is its ``mean.bac``).
    """
    model_name = NULL_MODELS[null_model]
    results = run_folder.read_permutation_results(run_dir, model_name, n_permutations)
    pending = [index for index in range(n_permutations) if index not in results]
    if pending:
        console.log(
            f"permutation test: {len(pending)} of {n_permutations} permutations to "
            f"compute, null model {model_name}"
        )
    with process_pool(min(n_workers, len(pending))) as pool, console.progress_bar() as bar:
        task = bar.add_task("permutations", total=n_permutations, completed=len(results), status="")
        jobs = [(plan, features, index, model_name) for index in pending]
        finished = map(_null_job, jobs) if pool is None else pool.imap_unordered(_null_job, jobs)
        for result in finished:
            run_folder.write_permutation_result(run_dir, model_name, result)
            results[result["index"]] = result
            bar.advance(task)
    test = summarise(
        [results[index] for index in range(n_permutations)],
        metrics,
        model_name,
        describe_scheme(plan.data),
        plan.config.seed,
    )
    metrics = judged(replace(metrics, permutation_test=test))
    run_folder.write_metrics(run_dir, metrics)
    return metrics


def summarise(
    results: list[dict], metrics: RunMetrics, null_model: str, scheme: str, seed: int
) -> PermutationTest:
    """``metrics.json``'s ``permutation_test`` from the permutations' results (in index order):
    per model its observed BAC, its p-value and which model's null it is measured against."""
    null = {name: [result["bac"][name] for result in results] for name in results[0]["bac"]}
    n = len(results)
    models = {}
    for name, values in metrics.models.items():
        observed = values.mean.bac
        null_from = name if name in null else null_model
        models[name] = NullComparison(
            observed_bac=observed,
            p_value=None if observed is None else p_value(null[null_from], observed),
            null_from=null_from,
            null_mean=float(np.mean(null[null_from])),
            null_std=float(np.std(null[null_from], ddof=1)) if n > 1 else None,
        )
    return PermutationTest(
        n_permutations=n,
        null_model=null_model,
        metric="bac",
        permuted=scheme,
        seed=seed,
        p_value_rule="(1 + null values >= observed) / (1 + n_permutations)",
        seconds=float(sum(result["seconds"] for result in results)),
        models=models,
        null=null,
    )


def describe_permutation_test(test: PermutationTest) -> str:
    """One line for people: ``"permutation test (100 permutations, ...): xaiguiformer BAC
    0.884, p = 0.0099 (against the logistic_regression null); ..."``."""
    parts = []
    for name, model in test.models.items():
        against = (
            ""
            if model.null_from == name
            else f" (against the {model.null_from} null, an approximation)"
        )
        parts.append(f"{name} BAC {model.observed_bac:.3f}, p = {model.p_value:.2g}{against}")
    n = test.n_permutations
    return (
        f"permutation test ({n} permutations, {test.permuted}, null model "
        f"{test.null_model} refit on each; smallest possible p {1 / (n + 1):.2g}): "
        + "; ".join(parts)
    )
