"""Classification metrics per recording, and their mean and spread over folds (scikit-learn).

Definitions (class indices 0..K-1, probabilities (n, K) per recording):

- ``bac``: scikit-learn ``balanced_accuracy_score`` (mean recall over classes; chance = 1/K).
- ``paper_bac``: the official code's "BAC" = (macro specificity + macro recall) / 2; equals
  ``bac`` for two classes, inflated for more (chance = 0.5). Reported for comparison only.
- ``auroc``: two classes -> ``roc_auc_score`` of the positive class's probability; more ->
  macro one-vs-rest.
- ``auc_pr``: two classes -> ``average_precision_score`` of the positive class; more -> macro
  one-vs-rest average precision.
- ``accuracy`` and ``confusion_matrix`` (rows = true class, columns = predicted, in label order).

A metric that is undefined on a fold (e.g. AUROC with one class present) is NaN and is left
out of the mean and spread. Spread = sample standard deviation over folds (ddof 1).

:func:`compare_folds` compares two models on the same folds (paired): the per-fold differences,
how many folds each wins, and a 95 % confidence interval from the *corrected* resampled t-test
(Nadeau & Bengio 2003, "Inference for the generalization error"; Bouckaert & Frank 2004 for
repeated k-fold): folds share training participants, so the variance of the mean difference is
``(1/n + n_test/n_train) * s^2`` instead of the naive ``s^2 / n``, which would be far too
confident. Every metric here lies in [0, 1], so a difference lies in [-1, 1]; with few folds the
t-interval can reach past that, and is then clipped to it (``ci95_clipped``), which
:func:`describe_comparison` says.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy import stats
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    balanced_accuracy_score,
    confusion_matrix,
    roc_auc_score,
)
from sklearn.preprocessing import label_binarize

# the models' names belong to metrics.json's format; imported from here by the code computing them
from eegformer_cli.evaluation.run_metrics import LINEAR_PATH_NAME as LINEAR_PATH_NAME
from eegformer_cli.evaluation.run_metrics import MODEL_NAME as MODEL_NAME
from eegformer_cli.evaluation.run_metrics import REFERENCE_NAME as REFERENCE_NAME
from eegformer_cli.evaluation.run_metrics import TANGENT_SPACE_NAME as TANGENT_SPACE_NAME
from eegformer_cli.evaluation.run_metrics import Comparison, FoldScores

SCALAR_METRICS = ("bac", "auroc", "auc_pr", "accuracy", "paper_bac")


def classification_metrics(
    y_true: np.ndarray, probabilities: np.ndarray, positive_index: int | None
) -> FoldScores:
    """Metrics of one set of per-recording predictions.

    ``y_true`` int (n,) class indices; ``probabilities`` float (n, K) rows summing to 1;
    ``positive_index`` the positive class for two classes (None -> the last class; ignored
    for more classes).
    Returns their :class:`FoldScores` (``bac``, ``paper_bac``, ``auroc``, ``auc_pr``,
    ``accuracy``, ``n``, ``confusion_matrix``; NaN where undefined; no ``repeat``/``fold``).
    scikit-learn's warnings about a class missing from ``y_true`` (a small validation or test
    set) are not shown: :func:`splits.warn_missing_classes` says once, before the first fold,
    which sets lack a class and what that means.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"sklearn\.")
        return _classification_metrics(y_true, probabilities, positive_index)


def _classification_metrics(y_true, probabilities, positive_index) -> FoldScores:
    y_true = np.asarray(y_true, dtype=int)
    probabilities = np.asarray(probabilities, dtype=float)
    n_classes = probabilities.shape[1]
    if positive_index is None:
        positive_index = n_classes - 1
    classes = np.arange(n_classes)
    predicted = probabilities.argmax(axis=1)
    matrix = confusion_matrix(y_true, predicted, labels=classes)
    return FoldScores(
        bac=float(balanced_accuracy_score(y_true, predicted)),
        paper_bac=paper_balanced_accuracy(matrix),
        auroc=_auroc(y_true, probabilities, positive_index),
        auc_pr=_auc_pr(y_true, probabilities, positive_index),
        accuracy=float(accuracy_score(y_true, predicted)),
        n=len(y_true),
        confusion_matrix=matrix.tolist(),
    )


def selection_scores(y_true: np.ndarray, probabilities: np.ndarray) -> FoldScores:
    """The scores an epoch's selection reads, ``bac`` and ``paper_bac``, the values
    :func:`classification_metrics` gives (recall over the classes present in ``y_true``), and
    ``n``; the others (AUROC, AUC-PR, accuracy) left None: a fit's validation after every epoch
    needs none of them."""
    y_true = np.asarray(y_true, dtype=int)
    n_classes = np.asarray(probabilities).shape[1]
    predicted = np.asarray(probabilities).argmax(axis=1)
    matrix = np.bincount(y_true * n_classes + predicted, minlength=n_classes**2).reshape(
        n_classes, n_classes
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.diag(matrix) / matrix.sum(axis=1)
    return FoldScores(
        bac=float(np.mean(recall[~np.isnan(recall)])),
        paper_bac=paper_balanced_accuracy(matrix),
        n=len(y_true),
    )


def paper_balanced_accuracy(matrix: np.ndarray) -> float:
    """(macro specificity + macro recall) / 2 from a confusion matrix, over classes present."""
    matrix = np.asarray(matrix, dtype=float)
    total = matrix.sum()
    true_pos = np.diag(matrix)
    actual = matrix.sum(axis=1)
    predicted = matrix.sum(axis=0)
    present = actual > 0
    recall = true_pos[present] / actual[present]
    negatives = total - actual
    true_neg = total - actual - predicted + true_pos
    has_neg = negatives > 0
    specificity = true_neg[has_neg] / negatives[has_neg]
    return float((recall.mean() + specificity.mean()) / 2)


def _auroc(y_true, probabilities, positive_index) -> float:
    n_classes = probabilities.shape[1]
    if len(np.unique(y_true)) < 2:
        return float("nan")
    if n_classes == 2:
        return float(roc_auc_score(y_true == positive_index, probabilities[:, positive_index]))
    if len(np.unique(y_true)) < n_classes:
        return float("nan")
    return float(
        roc_auc_score(
            y_true, probabilities, multi_class="ovr", average="macro", labels=np.arange(n_classes)
        )
    )


def _auc_pr(y_true, probabilities, positive_index) -> float:
    n_classes = probabilities.shape[1]
    if n_classes == 2:
        positive = y_true == positive_index
        if not positive.any():
            return float("nan")
        return float(average_precision_score(positive, probabilities[:, positive_index]))
    onehot = label_binarize(y_true, classes=np.arange(n_classes))
    present = onehot.any(axis=0)
    if not present.all():
        return float("nan")
    return float(average_precision_score(onehot, probabilities, average="macro"))


def _values(per_fold: list[FoldScores], metric: str) -> np.ndarray:
    """``metric`` (a field of :class:`FoldScores`) of each fold, float, NaN where undefined."""
    return np.array([getattr(fold, metric) for fold in per_fold], dtype=float)


def summarise_folds(per_fold: list[FoldScores]) -> dict:
    """``{"mean": {...}, "std": {...}, "confusion_matrix": summed}`` over folds' scores.

    NaN values are skipped; std is the sample standard deviation (NaN with one value).
    """
    mean, std = {}, {}
    for name in SCALAR_METRICS:
        values = _values(per_fold, name)
        values = values[~np.isnan(values)]
        mean[name] = float(values.mean()) if len(values) else float("nan")
        std[name] = float(values.std(ddof=1)) if len(values) > 1 else float("nan")
    matrix = np.sum([np.asarray(fold.confusion_matrix) for fold in per_fold], axis=0)
    return {"mean": mean, "std": std, "confusion_matrix": matrix.tolist()}


def compare_folds(
    per_fold: list[FoldScores],
    per_fold_reference: list[FoldScores],
    test_train_ratio: float,
    metric: str = "bac",
) -> dict:
    """Paired comparison of a model with a reference on the same folds.

    ``per_fold`` / ``per_fold_reference``: the folds' scores in the same fold order;
    ``test_train_ratio``: test participants / training participants of a fold (``1 / (k - 1)``
    for k-fold CV); folds where either value is NaN are left out.
    Returns ``{"metric", "n_folds", "mean_difference", "std_difference", "folds_better",
    "folds_equal", "folds_worse", "ci95", "ci95_clipped", "p_value", "test"}``, difference =
    model - reference; ``ci95`` ([low, high]) and ``p_value`` (two-sided) are NaN with fewer
    than two folds or when every fold has the same difference (to 1e-9: rounding must not
    pass for certainty); ``ci95`` is clipped to the possible range [-1, 1] (``ci95_clipped``
    True when it reached past it: too few folds for an informative interval).
    """
    model, reference = _values(per_fold, metric), _values(per_fold_reference, metric)
    differences = (model - reference)[~(np.isnan(model) | np.isnan(reference))]
    n = len(differences)
    mean = float(differences.mean()) if n else float("nan")
    std = float(differences.std(ddof=1)) if n > 1 else float("nan")
    ci95, p_value, clipped = [float("nan"), float("nan")], float("nan"), False
    if n > 1 and np.ptp(differences) > 1e-9:
        standard_error = std * np.sqrt(1 / n + test_train_ratio)
        margin = float(stats.t.ppf(0.975, n - 1) * standard_error)
        clipped = mean - margin < -1 or mean + margin > 1
        ci95 = [max(mean - margin, -1.0), min(mean + margin, 1.0)]
        p_value = float(2 * stats.t.sf(abs(mean) / standard_error, n - 1))
    return {
        "metric": metric,
        "n_folds": n,
        "mean_difference": mean,
        "std_difference": std,
        "folds_better": int((differences > 0).sum()),
        "folds_equal": int((differences == 0).sum()),
        "folds_worse": int((differences < 0).sum()),
        "ci95": ci95,
        "ci95_clipped": clipped,
        "p_value": p_value,
        "test": "corrected resampled t-test (Nadeau & Bengio 2003), "
        f"variance x (1/n + {test_train_ratio:.3g})",
    }


def against_chance(per_fold: list[FoldScores], metric: str, chance: float, ratio: float) -> dict:
    """Mean, spread and 95 % interval over folds of ``metric``, tested against ``chance``.

    The interval is :func:`compare_folds`'s for the paired difference from a "model" that
    scores ``chance`` on every fold, i.e. the one-sample corrected resampled t (two-sided
    ``p_value``); both are n/a (NaN) when every fold gives the same value or with one fold.
    ``ratio``: test participants / training participants of a fold. The metric lies in
    [0, 1], and so does the interval (clipped to it).
    """
    scores_at_chance: dict[str, Any] = {metric: chance}  # the field named at run time
    chance_folds = [FoldScores(**scores_at_chance) for _ in per_fold]
    comparison = compare_folds(per_fold, chance_folds, ratio, metric)
    values = _values(per_fold, metric)
    values = values[np.isfinite(values)]
    mean, std = comparison["mean_difference"] + chance, comparison["std_difference"]
    low, high = comparison["ci95"]
    return {
        "mean": mean,
        "std": std,
        "ci95": [max(low + chance, 0.0), min(high + chance, 1.0)],
        "p_value": comparison["p_value"],
        "n_folds": len(values),
        "test": "corrected resampled t-test",
    }


def describe_comparison(comparison: Comparison) -> str:
    """One line for people, from a run's comparison (:func:`compare_folds`'s figures, None
    where unknown): ``"xaiguiformer - logistic_regression, bac: -0.029 (95 % CI -0.081 to
    +0.023, ...)"``."""

    def known(value) -> bool:
        return value is not None and not np.isnan(value)

    mean, (low, high) = comparison.mean_difference, comparison.ci95
    model, reference, metric = comparison.model, comparison.reference, comparison.metric
    if not known(mean):
        return f"{model} - {reference}, {metric}: no fold to compare"
    clipped = (
        ", clipped to the possible range: too few folds for an informative interval"
        if comparison.ci95_clipped
        else ""
    )
    interval = (
        f" (95 % CI {low:+.3f} to {high:+.3f}{clipped}, p = "
        f"{comparison.p_value:.2g}, corrected resampled t-test)"
        if known(low)
        else ""
    )
    return (
        f"{model} - {reference}, {metric}: {mean:+.3f}{interval}; better on "
        f"{comparison.folds_better}, equal on {comparison.folds_equal}, worse on "
        f"{comparison.folds_worse} of {comparison.n_folds} folds"
    )
