"""How much of one recording's logit each path of the model carries: its linear path, its
tangent-space path (``model/static_paths.py``, where it has one) and the transformer path
(``model/linear_path.py``).

The channel-pair attributions, band importance, head maps, contrast and interaction table are
of the whole model: its logit is the linear path's plus the transformer's, and Integrated
Gradients of that sum add up to the sum's change from the baseline connectome. This module
splits that change by path. The linear path's part is exact: its weights times the change of
its features from the baseline's (a linear function's attribution needs no integral): for a
model on recording means (``linear_path.uses_recording_means``) of the recording's means'
features, ``w . (features(mean) - features(baseline))`` (times the static mix's weight on it,
for a model with a tangent-space path), else the mean over the recording's segments of each
segment's; the tangent-space path's part is its mix weight times the change of its logits from
the mean point's; the transformer's part is the rest of the change of the segment-mean
logit. For a model whose transformer path was not kept the transformer's part is 0, and for a model
without a linear path there is no split (None).

The tangent-space path's attributions onto the band covariances (:func:`covariance_attributions`).
A model whose static stage mixes a tangent-space path in (``model/static_paths.py``: the mix's
weight on it not 0) moves a recording's logit by ``weight[1] * (ts(covariance) -
ts(baseline))`` beside what its connectivity does. That part is attributed by Integrated
Gradients through the matrix logarithm onto each channel's log variance and each pair's
correlation in each covariance band (``model/tangent_space_path.log_power_attributions``, as a
function of the average-referenced matrix), from those of the raw covariance whose shrunk matrix
is the path's mean point (the training recordings' Riemannian mean, average-referenced: the
covariance side of the baseline connectome), times the mix's weight, so that the connectivity's
attributions, the interactions', the transformer's and these add up to the logit's change from
the baseline.

``covariance_pairs`` (K, C, C), symmetric, logit units, K the covariance bands: entry (i, i)
what channel i's log band power (its log variance in the band) carries, (i, j) and (j, i)
together what the pair's correlation carries; the entries sum to the path's part. ``band_power``
(K, C): the diagonal, the report's head maps of band power. Log variance and correlation rather
than the raw entries: a gain on one channel's signal changes its log variance alone (its
correlations stay), so the map puts that channel's effect on its power, where on the raw entries
it would be split between the channel's variance and every covariance of its row (under the
average reference a row sums to zero, so those covariances move whenever its power does). Both
None for a model whose static stage reads no covariances.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from eegformer_cli.explain.segment_attributions import recording_token_products, segment_slices
from eegformer_cli.model.linear_path import recording_linear_logits, uses_recording_means
from eegformer_cli.model.static_paths import reads_covariance, tangent_space_of
from eegformer_cli.model.tangent_space_path import attribution_baseline, log_power_attributions


def path_logit_changes(
    model,
    coh: Tensor,
    wpli: Tensor,
    age: Tensor,
    sex: Tensor,
    target: int | tuple[int, int],
    baseline: tuple[Tensor, Tensor] | None,
    covariance: np.ndarray | Tensor | None = None,
) -> dict | None:
    """``{"total", "linear", "transformer"}`` (and ``"tangent_space"`` for a model whose
    static stage gives a tangent-space path a weight): the change of the explained output from the
    baseline to the recording (logit units, mean over segments), and each path's part of it;
    ``target`` a class index, or ``(a, b)`` for ``logit(b) - logit(a)``.

    ``coh``, ``wpli`` (S, T, C, C) and ``age``, ``sex`` (S,) on the model's device;
    ``baseline`` the baseline connectome (coh, wPLI) (T, C, C) (None: zero connectivity);
    ``covariance`` the recording's band covariances (K, C, C) (its baseline: the tangent-space
    path's mean point, ``tangent_space_path.attribution_baseline``). None for a model without a
    linear path."""
    if model.static is None:
        return None
    baselines = (
        (torch.zeros_like(coh), torch.zeros_like(wpli))
        if baseline is None
        else tuple(r.to(x.dtype).expand_as(x) for r, x in zip(baseline, (coh, wpli)))
    )
    recording = (coh, wpli, age, sex)
    static = (
        _static_changes(model, recording, baselines, covariance, target)
        if uses_recording_means(model)
        else None
    )
    ours_offset, theirs_offset = (None, None) if static is None else static.pop("offsets")

    # a token that reads whole recordings: its products of the recording and of the baseline
    # (one recording of constant connectivity)
    products = recording_token_products(model, coh, wpli, age, sex)
    token = (
        ()
        if products is None
        else (products, model.token_products(*baselines, float(age[0]), float(sex[0])))
    )

    def total(batch: tuple) -> Tensor:  # (coh, wpli, age, sex, baseline coh, wpli[, products])
        ours, theirs = batch[:4], (*batch[4:6], *batch[2:4])
        ours_products, theirs_products = batch[6:] if len(batch) > 6 else (None, None)
        return _refined(model, ours, target, ours_offset, ours_products) - _refined(
            model, theirs, target, theirs_offset, theirs_products
        )

    def linear(batch: tuple) -> Tensor:
        ours, theirs = batch[:4], (*batch[4:6], *batch[2:4])
        return _output(
            model.static.linear(model.linear_features(*ours))
            - model.static.linear(model.linear_features(*theirs)),
            target,
        )

    both = (*recording, *baselines, *token)
    if static is None:  # a model of an earlier version: its linear path per segment
        static = {"linear": _segment_mean(both, linear)}
    return _split(_segment_mean(both, total), static)


def _static_changes(model, recording: tuple, baseline: tuple, covariance, target) -> dict:
    """A model on recording means: each side's static logits (``"offsets"``: the recording's
    and the baseline's, every one of its segments' offset) and the change of the explained
    output they carry, the linear path's part (``"linear"``, times the mix's weight on it) and
    the tangent-space path's (``"tangent_space"``, for a model with one)."""
    coh, wpli, age, sex = recording
    path = tangent_space_of(model)
    ours = recording_linear_logits(model, coh, wpli, age, sex)
    theirs = recording_linear_logits(model, baseline[0][:1], baseline[1][:1], age, sex)
    if path is None or not reads_covariance(model):  # no tangent part: its weight is 0
        offsets = (
            (ours, theirs)
            if path is None
            else tuple(model.static.mix(c[None], None)[0].float() for c in (ours, theirs))
        )
        change = float(_output((offsets[0] - offsets[1])[None], target)[0])
        return {"offsets": offsets, "linear": change}
    covariances = (None, None)  # a recording without them: its static logits raised first
    if covariance is not None:
        matrix = torch.as_tensor(covariance, device=path.reference_invsqrt.device).double()
        with torch.no_grad():
            covariances = tuple(
                path.logits64(c[None]) for c in (matrix, attribution_baseline(path, matrix))
            )
    weight = model.static.mix.weight
    offsets = tuple(
        model.static.mix(c[None], t)[0].float() for c, t in zip((ours, theirs), covariances)
    )
    tangent = (
        0.0
        if covariances[0] is None
        else float(weight[1]) * float(_output(covariances[0] - covariances[1], target)[0])
    )
    return {
        "offsets": offsets,
        "linear": float(weight[0]) * float(_output((ours - theirs)[None], target)[0]),
        "tangent_space": tangent,
    }


def _refined(
    model, inputs: tuple, target, offset: Tensor | None, products: Tensor | None = None
) -> Tensor:
    """(B,) the explained output of the refined logits of ``inputs`` (coh, wpli, age, sex);
    ``offset`` (n_classes,): every segment's (a model on recording means: its recording's
    linear logits; None: the forward forms the linear path per segment); ``products`` (B, K)
    the forward's (None: the batch forms its own)."""
    rows = None if offset is None else offset.expand(len(inputs[0]), -1)
    return _output(model(*inputs, rows, products)[1], target)


def _segment_mean(inputs: tuple, output: Callable[[tuple], Tensor]) -> float:
    """The mean over the segments of ``output`` (a batch of ``inputs`` -> (B,)), computed
    ``segment_slices`` at a time (flat memory for a recording of any length), summed in
    float64."""
    n_segments = len(inputs[0])
    sum_ = 0.0
    with torch.no_grad():
        for part in segment_slices(n_segments):
            sum_ += float(output(tuple(x[part] for x in inputs)).double().sum())
    return sum_ / n_segments


def _split(total_change: float, static: dict) -> dict:
    """The change of the explained output and its paths' parts: ``static`` the static
    paths' (``"linear"``, and ``"tangent_space"`` where the model has one), the transformer
    the rest."""
    return {
        "total": total_change,
        **static,
        "transformer": total_change - sum(static.values()),
    }


def _output(logits: Tensor, target: int | tuple[int, int]) -> Tensor:
    """(S,) the explained output of (S, n_classes) logits."""
    if isinstance(target, tuple):
        return logits[:, target[1]] - logits[:, target[0]]
    return logits[:, target]


def covariance_attributions(
    model, covariance: np.ndarray | None, target: int | tuple[int, int], n_steps: int
) -> np.ndarray | None:
    """float64 (K, C, C), logit units: the tangent-space part's attributions (module
    docstring) of the explained output, onto each channel's log variance (the diagonal) and
    each pair's correlation (off it), times the mix's weight; ``target`` a class index or ``(a, b)`` for ``logit(b) - logit(a)``;
    None for a model that reads no covariances (or a recording without them: its static
    logits raised already)."""
    if covariance is None or not reads_covariance(model):
        return None
    path = tangent_space_of(model)
    weight = float(model.static.mix.weight[1])

    def of(k: int) -> np.ndarray:
        return log_power_attributions(path, covariance, k, n_steps)[0]

    attributions = of(target[1]) - of(target[0]) if isinstance(target, tuple) else of(target)
    return weight * attributions


def band_power(attributions: np.ndarray | None) -> np.ndarray | None:
    """(K, C) float64, logit units: the diagonal of ``attributions`` (K, C, C), what each
    channel's log power in each band carries (module docstring); None stays None."""
    return None if attributions is None else np.diagonal(attributions, axis1=-2, axis2=-1).copy()
