"""The linear path's fit (``model/linear_path.py``): convex, cross-validated, before the transformer.

On one fit's training part, train + val participants as the references are fitted, each
recording's mean of its segments' linear features (the standardised entries and the kept
interactions' products, as the model forms them per segment), then StandardScaler and a
class-balanced logistic regression whose strength C is chosen by an inner participant-wise CV
on those participants only (``reference.search_logistic_c``: the same folds, grid and score
as the built-in reference, so with the L2 penalty and nothing kept the path *is* the
built-in reference). The penalty (``linear_penalty``): ``l2`` the built-in reference's, ``l1``
sparse (liblinear; saga for more than two classes), ``auto`` the better of the two by the inner
CV (a tie keeps the built-in reference's L2).

Three sets of weights come out, each in the model's logit space (the scaling folded in):
the refit on all of the training part (what the model keeps and new recordings get), and each
inner fold's model with the held-out recordings it did not see, whose *cross-fitted* logits
train and select the transformer path (``fit.py``): the refit's logits on its own
training recordings are in-sample and would leave the transformer nothing honest to learn.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from eegformer_cli.evaluation.reference import (
    C_GRID,
    balanced_logistic_regression,
    inner_folds,
    search_logistic_c,
)

#: C grid of the L1 penalty: sparser than L2 at the same C, it needs larger values (on
#: standardised features, C = 1e-2 keeps almost nothing).
L1_C_GRID = (1e-2, 3e-2, 1e-1, 3e-1, 1.0, 3.0, 10.0)


@dataclass
class LinearFit:
    """A fitted linear path, every weight in logit space (n_classes outputs).

    weight (n_classes, n_features), bias (n_classes,): the refit; inner_weight (k, n_classes,
    n_features), inner_bias (k, n_classes): the inner folds' models; inner_fold (n,) the inner
    fold that held out each recording of the training part (the order it was given);
    cross_fitted (n, n_classes) those recordings' logits from the model that did not see them.
    """

    weight: np.ndarray
    bias: np.ndarray
    inner_weight: np.ndarray
    inner_bias: np.ndarray
    inner_fold: np.ndarray
    cross_fitted: np.ndarray
    penalty: str
    C: float
    seconds: float
    inner_scores: dict[str, float | None] | None = None  # each candidate penalty's inner-CV BAC

    def summary(self, n_products: int) -> dict:
        """JSON-ready record for a fold file: the chosen penalty and C, how many of the
        features (of which ``n_products`` trailing products) have a non-zero weight."""
        nonzero = np.abs(self.weight).max(axis=0) > 0
        return {
            "penalty": self.penalty,
            "C": self.C,
            "n_features": int(self.weight.shape[1]),
            "n_nonzero": int(nonzero.sum()),
            "n_products_nonzero": int(nonzero[len(nonzero) - n_products :].sum())
            if n_products
            else 0,
            "inner_scores": self.inner_scores,
            "seconds": self.seconds,
        }

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """(weight, bias, inner_weight, inner_bias) as float32 tensors."""
        return tuple(
            torch.tensor(a, dtype=torch.float32)
            for a in (self.weight, self.bias, self.inner_weight, self.inner_bias)
        )


def _classifier(penalty: str, n_classes: int) -> LogisticRegression:
    if penalty == "l2":
        return balanced_logistic_regression()
    solver = "liblinear" if n_classes == 2 else "saga"
    return LogisticRegression(l1_ratio=1.0, solver=solver, class_weight="balanced", max_iter=5000)


def _search(penalty: str, features, labels, groups, seed: int, n_classes: int):
    """The inner-CV search of one penalty (the references' folds and score)."""
    pipeline = make_pipeline(StandardScaler(), _classifier(penalty, n_classes))
    grid = C_GRID if penalty == "l2" else L1_C_GRID
    return search_logistic_c(pipeline, features, labels, groups, seed, grid)


def _logit_weights(pipeline, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """A fitted StandardScaler + LogisticRegression as logit weights on the raw features:
    (n_classes, n_features), (n_classes,). Binary: the decision z as (-z/2, +z/2); classes the
    fit never saw get a logit of -inf's stand-in, a large negative bias."""
    scaler, model = pipeline[0], pipeline[-1]
    coef = model.coef_ / scaler.scale_
    intercept = model.intercept_ - coef @ scaler.mean_
    if len(model.classes_) == 2:
        coef = np.concatenate([-coef / 2, coef / 2])
        intercept = np.concatenate([-intercept / 2, intercept / 2])
    weight = np.zeros((n_classes, coef.shape[1]))
    bias = np.full(n_classes, -30.0)
    weight[model.classes_], bias[model.classes_] = coef, intercept
    return weight, bias


def fit_linear_path(
    features: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    n_classes: int,
    seed: int,
    penalty: str,
) -> LinearFit:
    """Fit on the training part: ``features`` float64 (n, n_features) each recording's mean
    linear features, ``labels`` int (n,), ``groups`` the participant of each recording;
    ``seed`` fixes the inner folds (the fold's seed, as the references'); ``penalty`` one of
    ``config.LINEAR_PENALTIES``."""
    start = time.perf_counter()
    candidates = ("l2", "l1") if penalty == "auto" else (penalty,)
    searches = [_search(p, features, labels, groups, seed, n_classes) for p in candidates]
    # ties go to the first candidate, the references' L2: L1 only where the inner CV says it
    # is better (on a dozen people its tied choice was often the empty model, at chance)
    best = max(range(len(searches)), key=lambda i: (searches[i].best_score_, -i))
    chosen, search = candidates[best], searches[best]
    weight, bias = _logit_weights(search.best_estimator_, n_classes)
    splitter = StratifiedGroupKFold(inner_folds(labels, groups), shuffle=True, random_state=seed)
    k = splitter.get_n_splits()
    inner_weight = np.zeros((k, *weight.shape))
    inner_bias = np.zeros((k, n_classes))
    inner_fold = np.zeros(len(labels), dtype=np.int64)
    cross_fitted = np.zeros((len(labels), n_classes))
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"sklearn\.")
        for fold, (inside, held_out) in enumerate(splitter.split(features, labels, groups)):
            inner_fold[held_out] = fold
            if len(np.unique(labels[inside])) < 2:  # nothing to learn: logits 0, no evidence
                continue
            model = clone(search.best_estimator_).fit(features[inside], labels[inside])
            inner_weight[fold], inner_bias[fold] = _logit_weights(model, n_classes)
            cross_fitted[held_out] = features[held_out] @ inner_weight[fold].T + inner_bias[fold]
    return LinearFit(
        weight,
        bias,
        inner_weight,
        inner_bias,
        inner_fold,
        cross_fitted,
        chosen,
        float(search.best_params_["logisticregression__C"]),
        time.perf_counter() - start,
        {  # None: no inner split could score it (``reference.search_logistic_c``)
            p: None if np.isnan(s.best_score_) else float(s.best_score_)
            for p, s in zip(candidates, searches)
        },
    )
