"""The built-in reference model: logistic regression on the same connectivity tokens.

Features of a recording: the mean over its segments of the upper triangle (i < j) of the
coherence and wPLI matrices of every band, i.e. 2 · n_bands · C(C-1)/2 numbers. Pipeline:
StandardScaler -> LogisticRegression (L2, ``class_weight="balanced"``, lbfgs). The inverse
regularisation C is chosen by an inner participant-wise 5-fold CV on the training part only
(grid 1e-4 ... 1, scored by balanced accuracy), so the reference never sees the test fold and
gets the same tuning effort everywhere. When the smallest class of a training part has fewer
than 5 participants, the inner CV has as many folds as that class has participants (at least
2), so that every inner test fold can hold each class. scikit-learn's warnings inside this
search (e.g. a class missing from an inner fold on tiny data) are not shown: they concern only
the choice of C. It runs on exactly the folds of XAIguiFormer
(train + val participants of a fold = its training part), so both columns of metrics.json
compare like with like.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedGroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

C_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
INNER_FOLDS = 5


def recording_features(coh: np.ndarray, wpli: np.ndarray) -> np.ndarray:
    """(coh, wpli) float32 (n_segments, n_bands, C, C) -> float64 (2 · n_bands · C(C-1)/2,)."""
    rows, cols = np.triu_indices(coh.shape[-1], k=1)
    coh_mean = coh.mean(axis=0, dtype=np.float64)[:, rows, cols]
    wpli_mean = wpli.mean(axis=0, dtype=np.float64)[:, rows, cols]
    return np.concatenate([coh_mean.ravel(), wpli_mean.ravel()])


def fit_reference(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, seed: int):
    """Fit the pipeline on one training part; returns the fitted GridSearchCV (refit on all).

    ``features`` (n_recordings, n_features); ``labels`` int (n_recordings,); ``groups``
    participant id per recording (inner folds are participant-wise).
    """
    return search_logistic_c(
        make_pipeline(StandardScaler(), balanced_logistic_regression()),
        features,
        labels,
        groups,
        seed,
    )


def balanced_logistic_regression() -> LogisticRegression:
    """The references' classifier: L2, ``class_weight="balanced"``, lbfgs."""
    return LogisticRegression(class_weight="balanced", max_iter=5000)


def search_logistic_c(
    pipeline,
    features: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    seed: int,
    grid: tuple[float, ...] = C_GRID,
):
    """Choose the C of ``pipeline``'s last step (``logisticregression``) by the inner
    participant-wise CV (``grid``, balanced accuracy) and refit on all of ``features`` (any
    array whose first axis is the recordings); the fitted GridSearchCV.

    When no inner split trains on two classes (a training part of a few participants, one of
    them the only one of its class), C cannot be chosen: scikit-learn's default, C = 1, is
    refitted on all, and ``best_score_`` is NaN (no inner score)."""
    # one BLAS thread, bit-identical results: on busy cores (other jobs, or the --n-jobs
    # workers, 2 threads each) OpenBLAS's threads made scipy's L-BFGS-B several times slower on these
    # small problems, and no faster on idle cores (docs/benchmarks.md, "Permutation test")
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.filterwarnings("ignore", category=UserWarning, module=r"sklearn\.")
        # an inner training split with one class: that fold scores nan for every C (tiny data)
        warnings.filterwarnings("ignore", category=FitFailedWarning)
        splitter = StratifiedGroupKFold(
            inner_folds(labels, groups), shuffle=True, random_state=seed
        )
        splits = list(splitter.split(features, labels, groups))
        chosen = any(len(np.unique(np.asarray(labels)[inside])) > 1 for inside, _ in splits)
        everything = np.arange(len(labels))
        search = GridSearchCV(
            pipeline,
            {"logisticregression__C": list(grid) if chosen else [1.0]},
            scoring="balanced_accuracy",
            cv=splits if chosen else [(everything, everything)],
        )
        search.fit(features, labels, groups=groups)
    if not chosen:
        search.best_score_ = float("nan")
    return search


def inner_folds(labels: np.ndarray, groups: np.ndarray) -> int:
    """Folds of the inner CV: :data:`INNER_FOLDS`, or fewer when the smallest class present
    has fewer participants (``groups``: participant id per recording), but at least 2."""
    participants = np.unique(
        np.stack([np.asarray(groups).astype(str), np.asarray(labels).astype(str)]), axis=1
    )
    smallest = int(np.unique(participants[1], return_counts=True)[1].min())
    return max(2, min(INNER_FOLDS, smallest))


def reference_probabilities(search, features: np.ndarray, n_classes: int) -> np.ndarray:
    """Class probabilities (n_recordings, n_classes) in class-index order."""
    probabilities = np.zeros((len(features), n_classes))
    probabilities[:, search.classes_] = search.predict_proba(features)
    return probabilities
