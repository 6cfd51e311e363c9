"""The static stage's fit: which convex candidate carries the model (``model/static_paths.py``).

After the linear path on connectivity is fitted (``linear_fit.py``), a model with a
tangent-space path (``model/tangent_space_path.py``) fits that path on the same training part:
its mean point the per-band Riemannian mean of the recordings' shrunk band covariances
(pyRiemann's ``TangentSpace`` fit, ``evaluation.tangent_space.BandTangentSpace``), then
``fit_linear_path`` with the tangent-space reference's L2 penalty on the tangent vectors: the
same inner participant-wise folds, grid and score as that model, so that path *is* the
tangent-space reference, inside the model. For two classes a third candidate stacks them: a
class-balanced logistic regression on the two paths' cross-fitted decision values (C by the same
inner CV; a candidate only when neither weight is negative), cross-fitted in turn (each inner
fold's stacker fitted on the other folds' values), so that the transformer's offsets stay honest.

The choice (:func:`choose`): the connectivity path stays unless a candidate's inner-CV balanced
accuracy beats its own by more than :data:`CHOICE_MARGINS` (then the best such candidate). The
margins were fixed on screening studies (``benchmarks/bench_static_candidates.py``,
docs/benchmarks.md, "Static candidates"): small inner-CV differences are within the draw of a
few dozen people, and a switch that follows them costs accuracy where connectivity carries the
label.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from eegformer_cli.evaluation.calibration import logit_temperature
from eegformer_cli.evaluation.reference import balanced_logistic_regression, search_logistic_c
from eegformer_cli.evaluation.tangent_space import BandTangentSpace
from eegformer_cli.model.tangent_space_path import shrink
from eegformer_cli.training.linear_fit import LinearFit, fit_linear_path

#: Inner-CV balanced accuracy a candidate must beat the connectivity path's by to carry the
#: model (module docstring).
CHOICE_MARGINS = {"stacked": 0.01, "tangent_space": 0.05}
#: C grid of the stacker (two standardised columns).
STACK_GRID = (1e-2, 1e-1, 1.0, 10.0)


@dataclass
class StaticChoice:
    """The fitted static stage: the chosen ``candidate``, its mix (``weight`` (2,), ``bias``
    (n_classes,)) and the inner folds' mixes (``inner_weight`` (k, 2), ``inner_bias``
    (k, n_classes)); ``cross_fitted`` (n, n_classes) the training part's static logits, each
    from the inner fold that did not see it; ``inner_scores`` each candidate's inner-CV BAC."""

    candidate: str
    weight: np.ndarray
    bias: np.ndarray
    inner_weight: np.ndarray
    inner_bias: np.ndarray
    cross_fitted: np.ndarray
    inner_scores: dict[str, float | None]
    tangent_space: LinearFit

    def record(self) -> dict:
        """JSON-ready: the candidate, its mix, every candidate's inner score, and the
        tangent-space fit's penalty and C."""
        return {
            "candidate": self.candidate,
            "weight": self.weight.tolist(),
            "bias": self.bias.tolist(),
            "inner_scores": self.inner_scores,
            "tangent_space": {
                "C": self.tangent_space.C,
                "n_features": self.tangent_space.weight.shape[1],
            },
        }


def _score(fit: LinearFit) -> float | None:
    scores = [s for s in (fit.inner_scores or {}).values() if s is not None]
    return max(scores) if scores else None


def choose(inner_scores: dict[str, float | None], mode: str) -> str:
    """The candidate that carries the model: ``mode`` itself unless it is ``"auto"``; then
    ``"connectivity"`` unless a candidate of :data:`CHOICE_MARGINS` with a score beats its
    score by more than that candidate's margin (the best such; no connectivity score: it
    stays)."""
    if mode != "auto":
        return mode
    base = inner_scores.get("connectivity")
    if base is None:
        return "connectivity"
    better = [
        (score, name)
        for name, margin in CHOICE_MARGINS.items()
        if (score := inner_scores.get(name)) is not None and score > base + margin
    ]
    return max(better)[1] if better else "connectivity"


def fit_tangent_space_path(path, covariances: np.ndarray, labels, groups, n_classes, seed):
    """Fit ``path`` (a ``TangentSpacePath``) on the training part: ``covariances`` float
    (n, K, C, C) raw, V^2. Sets its mean point and its classifier's refit and inner
    models; returns the classifier's :class:`LinearFit` (its ``inner_fold`` the same folds as
    the linear path's, as both come from the same labels, participants and seed)."""
    raw = torch.from_numpy(np.asarray(covariances, dtype=np.float64))
    # the mean points: pyRiemann's mean, as the tangent-space reference's
    with threadpool_limits(limits=1):
        tangent = BandTangentSpace().fit(shrink(raw).numpy())
    path.set_reference(np.stack([band.reference_ for band in tangent.bands_]))
    with torch.no_grad():
        vectors = path.features(raw).double().numpy()
    fit = fit_linear_path(vectors, labels, groups, n_classes, seed, "l2")
    weight, bias, inner_weight, inner_bias = fit.tensors()
    path.classifier.set_weights(weight, bias)
    path.classifier.set_cross_fitted(inner_weight, inner_bias)
    return fit


def _decision(logits: np.ndarray) -> np.ndarray:
    """Binary logits (n, 2) -> the decision value logit(1) - logit(0) (n,)."""
    return logits[:, 1] - logits[:, 0]


def stacker_mix(pipeline) -> tuple[np.ndarray, np.ndarray]:
    """A fitted StandardScaler + LogisticRegression on the two decision values as a mix:
    ``weight`` (2,) on the paths' logits and ``bias`` (2,), so that the mix's logits are
    (-d/2, +d/2) of the stacker's decision d (each path's logits are (-z/2, +z/2))."""
    scaler, model = pipeline[0], pipeline[-1]
    coef = model.coef_[0] / scaler.scale_
    intercept = float(model.intercept_[0] - coef @ scaler.mean_)
    if list(model.classes_) != [0, 1]:  # a training part of one class: no evidence
        return np.zeros(2), np.zeros(2)
    return coef, np.array([-intercept / 2, intercept / 2])


def _stack(connectivity: LinearFit, tangent: LinearFit, labels, groups, seed):
    """The stacked candidate: (inner score, mix (weight, bias), inner mixes (k, 2), (k, 2),
    cross-fitted logits (n, 2))."""
    values = np.column_stack(
        [_decision(connectivity.cross_fitted), _decision(tangent.cross_fitted)]
    )
    pipeline = make_pipeline(StandardScaler(), balanced_logistic_regression())
    search = search_logistic_c(pipeline, values, labels, groups, seed, STACK_GRID)
    weight, bias = stacker_mix(search.best_estimator_)
    # a path's decision values move the stacked one its own way or not at all: a negative
    # weight is the stacker fitting noise (two anti-correlated cross-fitted scores on a few
    # dozen people), so such a fit is no candidate (non-negative stacking, Breiman's)
    eligible = not np.isnan(search.best_score_) and bool((weight >= 0).all())
    score = float(search.best_score_) if eligible else None
    folds = connectivity.inner_fold
    k = len(connectivity.inner_weight)
    inner_weight, inner_bias = np.zeros((k, 2)), np.zeros((k, 2))
    cross_fitted = np.zeros((len(labels), 2))
    paths = np.stack([connectivity.cross_fitted, tangent.cross_fitted], axis=1)  # (n, 2, 2)
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore")
        for fold in range(k):
            inside, held = folds != fold, folds == fold
            if len(np.unique(labels[inside])) < 2:
                continue
            model = clone(search.best_estimator_).fit(values[inside], labels[inside])
            inner_weight[fold], inner_bias[fold] = stacker_mix(model)
            cross_fitted[held] = (
                np.einsum("p,npc->nc", inner_weight[fold], paths[held]) + inner_bias[fold]
            )
    return score, (weight, bias), (inner_weight, inner_bias), cross_fitted


def fit_static_stage(
    model,
    connectivity: LinearFit,
    covariances: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    seed: int,
    mode: str,
) -> StaticChoice:
    """Fit ``model``'s tangent-space path and its static mix on the training part
    (``covariances`` (n, K, C, C) raw, in the order of ``connectivity``'s recordings), choose
    the candidate (:func:`choose` with ``mode``, one of ``config.STATIC_PATHS`` but
    "connectivity"; "stacked" needs two classes, else the rule), store the mix and its inner folds' mixes in the model."""
    n_classes = model.config.n_classes
    tangent = fit_tangent_space_path(
        model.static.tangent_space, covariances, labels, groups, n_classes, seed
    )
    if not np.array_equal(tangent.inner_fold, connectivity.inner_fold):
        raise RuntimeError("the static candidates were fitted on different inner folds")
    k = len(connectivity.inner_weight)
    one = {
        "connectivity": (np.array([1.0, 0.0]), connectivity.cross_fitted),
        "tangent_space": (np.array([0.0, 1.0]), tangent.cross_fitted),
    }
    scores = {"connectivity": _score(connectivity), "tangent_space": _score(tangent)}
    stacked = None
    if n_classes == 2:
        scores["stacked"], *stacked = _stack(connectivity, tangent, labels, groups, seed)
    candidate = choose(scores, mode if n_classes == 2 or mode != "stacked" else "auto")
    if candidate == "stacked" and stacked is not None:
        (weight, bias), (inner_weight, inner_bias), cross_fitted = stacked
    else:
        weight, cross_fitted = one[candidate]
        bias = np.zeros(n_classes)
        inner_weight, inner_bias = np.tile(weight, (k, 1)), np.zeros((k, n_classes))
    model.static.mix.set_weights(weight, bias)
    model.static.mix.set_cross_fitted(inner_weight, inner_bias)
    return StaticChoice(
        candidate, weight, bias, inner_weight, inner_bias, cross_fitted, scores, tangent
    )


def temper(stage, cross_fitted: np.ndarray, labels: np.ndarray) -> float:
    """Scale the static ``stage``'s logits (``StaticStage.scale``) by the inverse of the
    temperature that calibrates its cross-fitted logits ``cross_fitted`` (n, n_classes) of
    recordings of ``labels`` (n,) (``calibration.logit_temperature``, T in [0.05, 20]), taken
    as at least 1 so that the logits are never sharpened; the factor, in (0, 1]. Why: a stage
    that reads noise with confident logits (a study whose label no static summary holds) gives
    the transformer trained on its residual an offset per recording that only memorising the
    recordings could cancel; tempered, it adds next to nothing."""
    factor = 1.0 / max(logit_temperature(cross_fitted, labels), 1.0)
    stage.scale(factor)
    return factor
