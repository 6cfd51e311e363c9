"""How far a stated probability can be trusted: calibration of the out-of-fold probabilities,
and the recalibration ``train`` fits on them for ``predict``.

Calibration (:func:`calibration_summary`), of one set of probabilities (n, K) against the true
classes; the probability looked at is, with two classes, the positive class's (a reliability
curve of "P(positive) = 0.8" against how often the recording was positive), with more, the
top-label confidence (the largest probability against how often that class was right):

- ``brier``: scikit-learn ``brier_score_loss`` (two classes: of the positive class, 0.25 for a
  constant 0.5; more: the multi-class score scaled by half), lower is better;
- ``log_loss``: mean -ln(probability of the true class), nats per recording (scikit-learn's
  ``log_loss`` without its check that rows sum to 1 to 1e-8, which rounding can miss);
- ``ece``: expected calibration error, sum over :data:`N_BINS` equal-width bins of
  (bin share) x |observed frequency - mean probability|; 0 is perfect;
- ``slope`` / ``intercept``: a logistic regression (no penalty, C = inf) of the outcome on the
  probability's logit (Cox 1958): slope 1 and intercept 0 for calibrated probabilities; a slope
  below 1 means too extreme probabilities (over-confidence), above 1 too timid ones;
- ``bins``: the reliability diagram's points (bin edges, counts, mean probability, observed
  frequency; empty bins left out).

Recalibration (:func:`choose_recalibration`), fitted on the out-of-fold probabilities of the
transformer: the probabilities' logarithms are its logits up to a constant per row (a softmax
ignores it), so no logit needs storing. Candidates: ``temperature`` (logits / T, one
parameter, any number of classes; Guo et al. 2017) and, for two classes, ``platt``
(sigmoid(a x logit difference + b); Platt 1999). Each is judged by its log-loss on participants
it was not fitted to (participant-wise :data:`CROSS_FIT_GROUPS`-fold cross-fitting over the
out-of-fold rows); the one with the lowest is kept, ``none`` when neither lowers the
log-loss of the probabilities as they are. The kept one is then refitted on every row and
stored in ``model.pt``; ``predict`` applies it (:func:`recalibrate`). Too few out-of-fold
recordings (fewer than :data:`MIN_RECORDINGS`) give ``none``.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit, softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss
from sklearn.model_selection import GroupKFold

#: Equal-width probability bins of the expected calibration error and the reliability diagram.
N_BINS = 10
#: Fewest out-of-fold recordings from which a recalibration is fitted.
MIN_RECORDINGS = 20
#: Participant groups of the cross-fitting that chooses the recalibration.
CROSS_FIT_GROUPS = 5
#: Probabilities are clipped to [EPSILON, 1 - EPSILON] before a logarithm or logit.
EPSILON = 1e-12
METHODS = ("none", "temperature", "platt")


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


def log_loss(y_true: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean -ln(probability of the true class) of (n, K) ``probabilities`` (clipped to
    :data:`EPSILON`), nats."""
    rows = np.arange(len(y_true))
    return float(
        -np.log(np.clip(np.asarray(probabilities, dtype=float)[rows, y_true], EPSILON, 1.0)).mean()
    )


def calibration_target(
    y_true: np.ndarray, probabilities: np.ndarray, positive_index: int | None
) -> tuple[np.ndarray, np.ndarray, str]:
    """(probability looked at (n,), outcome 0/1 (n,), what it is): with two classes the
    positive class's probability and whether the recording is of it, else the top-label
    confidence and whether the top class was right."""
    y_true = np.asarray(y_true, dtype=int)
    probabilities = np.asarray(probabilities, dtype=float)
    if probabilities.shape[1] == 2:
        positive = 1 if positive_index is None else positive_index
        return probabilities[:, positive], (y_true == positive).astype(int), "P(positive class)"
    top = probabilities.argmax(axis=1)
    return probabilities.max(axis=1), (top == y_true).astype(int), "top-label confidence"


def calibration_summary(
    y_true: np.ndarray, probabilities: np.ndarray, positive_index: int | None
) -> dict:
    """Brier score, log-loss, ECE, calibration slope and intercept and the reliability
    diagram's bins of ``probabilities`` (n, K) for the class indices ``y_true`` (n,) (module
    docstring); NaN where undefined (one outcome only: no slope)."""
    y_true = np.asarray(y_true, dtype=int)
    probabilities = np.asarray(probabilities, dtype=float)
    n_classes = probabilities.shape[1]
    score, outcome, target = calibration_target(y_true, probabilities, positive_index)
    if n_classes == 2:
        brier = brier_score_loss(outcome, score)
    else:  # scikit-learn's multi-class score (>= 1.7), written out for older ones
        onehot = np.eye(n_classes)[y_true]
        brier = ((probabilities - onehot) ** 2).sum(axis=1).mean() / 2
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    which = np.clip(np.digitize(score, edges[1:-1]), 0, N_BINS - 1)
    bins, ece = [], 0.0
    for b in range(N_BINS):
        members = which == b
        if not members.any():
            continue
        mean, observed = float(score[members].mean()), float(outcome[members].mean())
        ece += members.mean() * abs(observed - mean)
        bins.append(
            {
                "lower": float(edges[b]),
                "upper": float(edges[b + 1]),
                "n": int(members.sum()),
                "mean_predicted": mean,
                "observed": observed,
            }
        )
    slope, intercept = _slope_intercept(score, outcome)
    return {
        "target": target,
        "n": len(y_true),
        "brier": float(brier),
        "log_loss": log_loss(y_true, probabilities),
        "ece": float(ece),
        "slope": slope,
        "intercept": intercept,
        "bins": bins,
    }


def _slope_intercept(score: np.ndarray, outcome: np.ndarray) -> tuple[float, float]:
    if len(np.unique(outcome)) < 2:
        return float("nan"), float("nan")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        fit = LogisticRegression(C=np.inf, max_iter=1000).fit(_logit(score).reshape(-1, 1), outcome)
    return float(fit.coef_[0, 0]), float(fit.intercept_[0])


# ------------------------------------------------------------------------------------------
# recalibration


def recalibrate(recalibration: dict | None, probabilities: np.ndarray) -> np.ndarray:
    """``probabilities`` (n, K) through a stored recalibration (``{"method", "params"}``; None
    or method ``none``: unchanged)."""
    probabilities = np.asarray(probabilities, dtype=float)
    method = (recalibration or {}).get("method", "none")
    params = (recalibration or {}).get("params", {})
    logp = np.log(np.clip(probabilities, EPSILON, 1.0))
    if method == "temperature":
        return softmax(logp / params["temperature"], axis=1)
    if method == "platt":
        positive = params["positive_index"]
        z = params["a"] * (logp[:, positive] - logp[:, 1 - positive]) + params["b"]
        out = np.empty_like(probabilities)
        out[:, positive] = expit(z)  # 1 / (1 + exp(-z)), without numpy's overflow warning
        out[:, 1 - positive] = 1.0 - out[:, positive]
        return out
    if method != "none":
        raise ValueError(f"unknown recalibration method {method!r}")
    return probabilities


# Why not scikit-learn's CalibratedClassifierCV (1.9: method="temperature")? Its temperature is
# ours: fitted on the same out-of-fold probabilities (through a pass-through classifier whose
# predict_proba returns them, wrapped in FrozenEstimator, as there is no estimator to refit),
# it gives the same T to 4 decimals and the same cross-fitted log-loss to 5 on two- to
# four-class draws (tests/test_calibration.py checks the temperature). Using it would still
# take that wrapper class, and the model file stores T as a plain number that predict applies
# (:func:`recalibrate`), so the formula would live here anyway; our 1-D fit is also an
# order of magnitude faster. Its method="sigmoid" is not our Platt scaling:
# on probabilities it is a sigmoid of the probability itself (a higher in-sample log-loss on
# over-confident draws: 0.482 against 0.456), on a pass-through logit difference it fits Platt's
# smoothed targets instead of the labels (a = 0.32 against 0.36 by maximum likelihood).
def fit_recalibration(
    method: str, y_true: np.ndarray, probabilities: np.ndarray, positive_index: int | None
) -> dict:
    """``{"method", "params"}`` of ``method`` fitted on ``probabilities`` (n, K) by maximum
    likelihood (temperature: T in [0.05, 20] on a log scale; Platt: an unpenalised logistic
    regression on the logit difference)."""
    y_true = np.asarray(y_true, dtype=int)
    logp = np.log(np.clip(np.asarray(probabilities, dtype=float), EPSILON, 1.0))
    if method == "none":
        return {"method": "none", "params": {}}
    if method == "temperature":
        rows = np.arange(len(y_true))

        def loss(log_t: float) -> float:
            z = logp / np.exp(log_t)
            z = z - z.max(axis=1, keepdims=True)
            return float(-(z[rows, y_true] - np.log(np.exp(z).sum(axis=1))).mean())

        best = minimize_scalar(loss, bounds=(np.log(0.05), np.log(20.0)), method="bounded")
        return {"method": "temperature", "params": {"temperature": float(np.exp(best.x))}}
    if method == "platt":
        positive = 1 if positive_index is None else positive_index
        x = (logp[:, positive] - logp[:, 1 - positive]).reshape(-1, 1)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=ConvergenceWarning)
            fit = LogisticRegression(C=np.inf, max_iter=1000).fit(x, y_true == positive)
        return {
            "method": "platt",
            "params": {
                "a": float(fit.coef_[0, 0]),
                "b": float(fit.intercept_[0]),
                "positive_index": int(positive),
            },
        }
    raise ValueError(f"unknown recalibration method {method!r}")


def logit_temperature(logits: np.ndarray, y_true: np.ndarray) -> float:
    """The temperature T (in [0.05, 20]) that minimises the mean cross-entropy of
    ``softmax(logits / T)`` (``logits`` (n, K)) against ``y_true`` (n,): the
    :func:`fit_recalibration` temperature of their probabilities."""
    fitted = fit_recalibration("temperature", y_true, softmax(logits, axis=1), None)
    return fitted["params"]["temperature"]


def cross_fitted(
    method: str,
    y_true: np.ndarray,
    probabilities: np.ndarray,
    groups: np.ndarray,
    positive_index: int | None,
) -> np.ndarray:
    """``probabilities`` recalibrated by ``method`` fitted, for each participant group of a
    :data:`CROSS_FIT_GROUPS`-fold split, on the other groups only (n, K)."""
    y_true, probabilities = np.asarray(y_true, dtype=int), np.asarray(probabilities, dtype=float)
    out = probabilities.copy()
    n_splits = min(CROSS_FIT_GROUPS, len(np.unique(groups)))
    for fit_rows, held_out in GroupKFold(n_splits=n_splits).split(probabilities, y_true, groups):
        if len(np.unique(y_true[fit_rows])) < 2:
            continue  # nothing to fit on: left as they are
        fitted = fit_recalibration(
            method, y_true[fit_rows], probabilities[fit_rows], positive_index
        )
        out[held_out] = recalibrate(fitted, probabilities[held_out])
    return out


def choose_recalibration(
    y_true: np.ndarray, probabilities: np.ndarray, groups: np.ndarray, positive_index: int | None
) -> dict:
    """The recalibration ``predict`` uses (module docstring): ``{"method", "params",
    "cross_fitted_log_loss": {method: nats}, "n", "reason", "after"}``; ``after`` is the
    :func:`calibration_summary` of the kept method's cross-fitted probabilities (None for
    ``none``)."""
    y_true = np.asarray(y_true, dtype=int)
    probabilities = np.asarray(probabilities, dtype=float)
    n_classes = probabilities.shape[1]
    n_groups = len(np.unique(groups))
    if len(y_true) < MIN_RECORDINGS or n_groups < 2 or len(np.unique(y_true)) < 2:
        return {
            "method": "none",
            "params": {},
            "cross_fitted_log_loss": {},
            "n": len(y_true),
            "reason": f"too few out-of-fold predictions ({len(y_true)}; a recalibration "
            f"needs {MIN_RECORDINGS} of two classes or more)",
            "after": None,
        }
    methods = ["none", "temperature"] + (["platt"] if n_classes == 2 else [])
    candidates = {
        method: cross_fitted(method, y_true, probabilities, groups, positive_index)
        for method in methods
    }
    losses = {method: log_loss(y_true, p) for method, p in candidates.items()}
    best = min(methods, key=lambda m: (losses[m], methods.index(m)))
    if best == "none":
        reason = (
            "no recalibration lowers the out-of-fold log-loss (cross-fitted over "
            "participants), so predict gives the model's probabilities as they are"
        )
    else:
        reason = (
            f"{best} scaling lowers the cross-fitted out-of-fold log-loss from "
            f"{losses['none']:.3f} to {losses[best]:.3f}, so predict applies it"
        )
    fitted = fit_recalibration(best, y_true, probabilities, positive_index)
    return {
        **fitted,
        "cross_fitted_log_loss": losses,
        "n": len(y_true),
        "reason": reason,
        "after": (
            None
            if best == "none"
            else calibration_summary(y_true, candidates[best], positive_index)
        ),
    }


def describe_recalibration(recalibration: dict) -> str:
    """``"temperature 1.42"``, ``"Platt a = 0.61, b = -0.05"`` or ``"none"``."""
    params = recalibration.get("params") or {}
    if recalibration.get("method") == "temperature":
        return f"temperature scaling, T = {params['temperature']:.2f}"
    if recalibration.get("method") == "platt":
        return f"Platt scaling, a = {params['a']:.2f}, b = {params['b']:+.2f}"
    return "none"
