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
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import (accuracy_score, average_precision_score, balanced_accuracy_score,
                             confusion_matrix, roc_auc_score)
from sklearn.preprocessing import label_binarize

SCALAR_METRICS = ("bac", "auroc", "auc_pr", "accuracy", "paper_bac")


def classification_metrics(y_true: np.ndarray, probabilities: np.ndarray,
                           positive_index: int | None) -> dict:
    """Metrics of one set of per-recording predictions.

    ``y_true`` int (n,) class indices; ``probabilities`` float (n, K) rows summing to 1;
    ``positive_index`` the positive class for two classes (None -> the last class; ignored
    for more classes).
    Returns ``{"bac", "paper_bac", "auroc", "auc_pr", "accuracy", "n", "confusion_matrix"}``.
    """
    y_true = np.asarray(y_true, dtype=int)
    probabilities = np.asarray(probabilities, dtype=float)
    n_classes = probabilities.shape[1]
    if positive_index is None:
        positive_index = n_classes - 1
    classes = np.arange(n_classes)
    predicted = probabilities.argmax(axis=1)
    matrix = confusion_matrix(y_true, predicted, labels=classes)
    return {
        "bac": float(balanced_accuracy_score(y_true, predicted)),
        "paper_bac": paper_balanced_accuracy(matrix),
        "auroc": _auroc(y_true, probabilities, positive_index),
        "auc_pr": _auc_pr(y_true, probabilities, positive_index),
        "accuracy": float(accuracy_score(y_true, predicted)),
        "n": int(len(y_true)),
        "confusion_matrix": matrix.tolist(),
    }


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
    return float(roc_auc_score(y_true, probabilities, multi_class="ovr", average="macro",
                               labels=np.arange(n_classes)))


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


def summarise_folds(per_fold: list[dict]) -> dict:
    """``{"mean": {...}, "std": {...}, "confusion_matrix": summed}`` over folds' metric dicts.

    NaN values are skipped; std is the sample standard deviation (NaN with one value).
    """
    mean, std = {}, {}
    for name in SCALAR_METRICS:
        values = np.array([fold[name] for fold in per_fold], dtype=float)
        values = values[~np.isnan(values)]
        mean[name] = float(values.mean()) if len(values) else float("nan")
        std[name] = float(values.std(ddof=1)) if len(values) > 1 else float("nan")
    matrix = np.sum([np.asarray(fold["confusion_matrix"]) for fold in per_fold], axis=0)
    return {"mean": mean, "std": std, "confusion_matrix": matrix.tolist()}
