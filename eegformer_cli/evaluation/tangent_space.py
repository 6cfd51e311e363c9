"""The second reference: the band covariances in pyRiemann's tangent space, logistic regression.

The reference the field reaches for on small EEG sets. Input of a recording: its band
covariances (the connectome file's ``covariance``, float32 (n_covariance_bands, C, C), V^2, rank
C - 1 after the average reference; ``connectivity.tokens.recording_tokens``), shrunk by
:func:`shrunk_covariances` (pyRiemann's ``Shrinkage``: 0.1 of the mean variance on the
diagonal, which makes them positive definite; per matrix, no fitted state, so it is done once
per recording). Pipeline, fitted on a fold's training part only: per band,
``TangentSpace(metric="riemann")`` at the Riemannian mean of the training recordings' matrices
(C(C+1)/2 numbers per band) -> the bands' vectors side by side -> StandardScaler -> the
logistic regression of :mod:`reference`, its C chosen by the same inner participant-wise CV
(:func:`reference.search_logistic_c`), so both references get the same tuning effort.

The tangent space (no labels) is fitted once on the whole training part and the inner CV chooses
C on its vectors; refitting it inside every inner fold and C (26 Riemannian means per band and
fold) made the reference an order of magnitude slower (docs/benchmarks.md, "The tangent-space
reference"), and the test participants never reach it either way.
"""

from __future__ import annotations

import numpy as np
from pyriemann.estimation import Shrinkage
from pyriemann.tangentspace import TangentSpace
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from eegformer_cli.evaluation.reference import balanced_logistic_regression, search_logistic_c

SHRINKAGE = 0.1


def shrunk_covariances(covariance: np.ndarray) -> np.ndarray:
    """float (n_bands, C, C) -> float64 (n_bands, C, C): pyRiemann's ``Shrinkage``
    (:data:`SHRINKAGE`) of each band's matrix."""
    return Shrinkage(shrinkage=SHRINKAGE).transform(np.asarray(covariance, dtype=np.float64))


class BandTangentSpace(TransformerMixin, BaseEstimator):
    """pyRiemann's ``TangentSpace(metric="riemann")`` per band: (n, n_bands, C, C) -> (n,
    n_bands * C(C+1)/2), each band's mean point the Riemannian mean of its matrices."""

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        self.bands_ = [TangentSpace(metric="riemann").fit(X[:, b]) for b in range(X.shape[1])]
        return self

    def transform(self, X):
        X = np.asarray(X, dtype=np.float64)
        return np.concatenate(
            [band.transform(X[:, b]) for b, band in enumerate(self.bands_)], axis=1
        )


def fit_tangent_space(covariances: np.ndarray, labels: np.ndarray, groups: np.ndarray, seed: int):
    """Fit the reference on one training part: a fitted Pipeline (``BandTangentSpace`` ->
    the GridSearchCV of :func:`reference.search_logistic_c`, refit on all).

    ``covariances`` (n_recordings, n_bands, C, C) from :func:`shrunk_covariances`; ``labels``
    int (n_recordings,); ``groups`` participant id per recording (inner folds are
    participant-wise).
    """
    with threadpool_limits(limits=1):
        tangent = BandTangentSpace().fit(covariances)
        vectors = tangent.transform(covariances)
    search = search_logistic_c(
        make_pipeline(StandardScaler(), balanced_logistic_regression()),
        vectors,
        labels,
        groups,
        seed,
    )
    return make_pipeline(tangent, search)
