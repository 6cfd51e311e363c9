"""Prediction sets with a coverage guarantee: split-conformal prediction (MAPIE) on the
out-of-fold probabilities.

``predict --coverage 0.9`` gives each recording the set of classes that, over recordings
exchangeable with the run's out-of-fold ones, holds the true class at least 90 % of the time:
one class when the model is sure enough, several ("cannot tell") when it is not. The
conformity score is MAPIE's ``lac`` (1 - the probability of the true class; Sadinle et al.
2019), calibrated on one probability vector per training recording: its out-of-fold
probabilities (recalibrated as ``predict`` gives them, the mean over repeats), with its true
class. A set ``lac`` leaves empty (no class reaches the threshold) gets the predicted class: a
set only grows, so the guarantee holds.

MAPIE conformalizes a fitted scikit-learn classifier on features; here the scores are
probabilities computed beforehand (by fold models for the training recordings, by the final
model for new ones), so the "classifier" handed to it is :class:`_GivenProbabilities`, whose
``predict_proba`` returns its input: MAPIE's conformalization and set rule are used unchanged.

:func:`coverage_out_of_fold` measures the coverage the run's own recordings get: each
participant group of a participant-wise :data:`CROSS_FIT_GROUPS`-fold split is given sets
calibrated on the other groups only; when a class's recordings all lie in one group, that
group's sets are calibrated without any recording of the class, which one warning says.

MAPIE warns (``UserWarning``) whenever the calibration recordings lack a class; its warning is
caught where :func:`prediction_sets` conformalizes, and the callers say it in eegformer's words
once: :func:`coverage_out_of_fold` for ``train``, ``predict --coverage`` for a model file
(:func:`absent_classes`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import GroupKFold

from eegformer_cli import console
from eegformer_cli.errors import UsageError

#: Coverage levels whose out-of-fold coverage ``train`` measures (the report shows them).
LEVELS = (0.8, 0.9, 0.95)
CROSS_FIT_GROUPS = 5
SCORE = "lac"


class _GivenProbabilities(ClassifierMixin, BaseEstimator):
    """A fitted "classifier" whose features are already class probabilities (n, K)."""

    def __init__(self, n_classes: int = 2):
        self.n_classes = n_classes

    def __sklearn_is_fitted__(self) -> bool:
        return True

    @property
    def classes_(self) -> np.ndarray:
        return np.arange(self.n_classes)

    def fit(self, X, y):
        return self

    def predict_proba(self, X) -> np.ndarray:
        return np.asarray(X, dtype=float)

    def predict(self, X) -> np.ndarray:
        return np.asarray(X, dtype=float).argmax(axis=1)


def fewest_recordings(coverage: float) -> int:
    """Calibration recordings a split-conformal set of ``coverage`` needs: more than
    1 / (1 - coverage) and 1 / coverage (MAPIE's rule; (n + 1) x coverage must not exceed n)."""
    return math.floor(max(1 / (1 - coverage), 1 / coverage) + 1e-9) + 1


def check_coverage(coverage: float, n_calibration: int) -> None:
    """UsageError unless ``coverage`` is in (0, 1) and ``n_calibration`` recordings can give it."""
    if not 0 < coverage < 1:
        raise UsageError(f"invalid --coverage {coverage}; give a share in (0, 1), e.g. 0.9")
    needed = fewest_recordings(coverage)
    if n_calibration < needed:
        most = math.floor(100 * n_calibration / (n_calibration + 1)) / 100
        raise UsageError(
            f"--coverage {coverage} needs at least {needed} out-of-fold recordings, the model's "
            f"run has {n_calibration}",
            hint=f"ask for at most {most:.2f}, or train on more recordings"
            if n_calibration
            else "retrain with this eegformer version (the model file has no out-of-fold scores)",
        )


#: The start of MAPIE's warning for calibration recordings that lack a class.
_MAPIE_ABSENT_CLASS = "WARNING: your conformalization dataset has less labels"


def absent_classes(labels: np.ndarray, n_classes: int) -> list[int]:
    """The class indices in ``range(n_classes)`` that none of ``labels`` is."""
    return sorted(set(range(n_classes)) - {int(label) for label in labels})


def prediction_sets(
    calibration_probabilities: np.ndarray,
    calibration_labels: np.ndarray,
    probabilities: np.ndarray,
    coverage: float,
) -> np.ndarray:
    """bool (n, K): the classes in each recording's set, from ``calibration_probabilities``
    (m, K) with their true class indices ``calibration_labels`` (m,), for ``probabilities``
    (n, K) at ``coverage`` (module docstring)."""
    from mapie.classification import SplitConformalClassifier

    calibration_probabilities = np.asarray(calibration_probabilities, dtype=float)
    probabilities = np.asarray(probabilities, dtype=float)
    check_coverage(coverage, len(calibration_labels))
    conformal = SplitConformalClassifier(
        _GivenProbabilities(calibration_probabilities.shape[1]),
        confidence_level=coverage,
        conformity_score=SCORE,
        prefit=True,
    )
    with warnings.catch_warnings():  # a class without calibration recordings: said by callers
        warnings.filterwarnings("ignore", message=_MAPIE_ABSENT_CLASS, category=UserWarning)
        conformal.conformalize(calibration_probabilities, np.asarray(calibration_labels, dtype=int))
    _, sets = conformal.predict_set(probabilities)
    sets = np.asarray(sets[:, :, 0], dtype=bool)
    empty = ~sets.any(axis=1)
    sets[empty, probabilities[empty].argmax(axis=1)] = True
    return sets


def coverage_out_of_fold(
    probabilities: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    levels=LEVELS,
    label_names: Sequence[str] | None = None,
) -> dict:
    """Empirical coverage of cross-fitted prediction sets on the run's recordings:
    ``{"method", "n", "levels": [{"coverage", "empirical_coverage", "mean_size",
    "share_ambiguous"}]}`` (levels the recordings cannot give are left out). One warning
    names the classes whose recordings all lie in one participant group, by ``label_names``
    (their indices without it)."""
    probabilities, labels = np.asarray(probabilities, dtype=float), np.asarray(labels, dtype=int)
    groups = np.asarray(groups)
    n_splits = min(CROSS_FIT_GROUPS, len(np.unique(groups)))
    results = []
    uncalibrated: set[int] = set()
    for level in levels:
        if n_splits < 2:
            break
        sets = np.zeros_like(probabilities, dtype=bool)
        usable = np.ones(len(labels), dtype=bool)
        for fit_rows, held_out in GroupKFold(n_splits=n_splits).split(
            probabilities, labels, groups
        ):
            if len(fit_rows) < fewest_recordings(level):
                usable[held_out] = False
                continue
            uncalibrated.update(set(labels[held_out].tolist()) - set(labels[fit_rows].tolist()))
            sets[held_out] = prediction_sets(
                probabilities[fit_rows], labels[fit_rows], probabilities[held_out], level
            )
        if not usable.all():
            continue
        sizes = sets.sum(axis=1)
        results.append(
            {
                "coverage": level,
                "empirical_coverage": float(sets[np.arange(len(labels)), labels].mean()),
                "mean_size": float(sizes.mean()),
                "share_ambiguous": float((sizes > 1).mean()),
            }
        )
    if uncalibrated:
        _warn_uncalibrated(sorted(uncalibrated), labels, groups, n_splits, label_names)
    return {
        "method": f"split-conformal (MAPIE, {SCORE} score), cross-fitted over "
        f"{n_splits} participant groups of the out-of-fold probabilities",
        "n": len(labels),
        "levels": results,
    }


def _warn_uncalibrated(
    classes: list[int],
    labels: np.ndarray,
    groups: np.ndarray,
    n_splits: int,
    label_names: Sequence[str] | None,
) -> None:
    """The warning of :func:`coverage_out_of_fold` for ``classes`` found in one participant
    group only."""
    named = ", ".join(
        f"{label_names[k] if label_names is not None else k!r} "
        f"({len(np.unique(groups[labels == k]))} participant(s))"
        for k in classes
    )
    console.warn(
        f"prediction sets: all the recordings of class {named} lie in one of the {n_splits} "
        "participant groups over which the run's coverage is cross-fitted, so their sets were "
        "calibrated without that class and the coverage measured for them is not guaranteed "
        "(more participants of the class fix it)"
    )
