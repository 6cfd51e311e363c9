"""The linear path: a logistic regression inside the model, beside the transformer.

With a few hundred people, a transformer trained by gradient descent on thousands of
connectivity entries overfits where a convex, cross-validated linear fit does not (training
loss at its floor within ~10 epochs while validation loss rises). The ``default`` model therefore
reads its inputs twice: a linear path, fitted first and convexly (``training/linear_fit.py``),
and the transformer, which is trained on top of it and so can only add what the linear path
misses (its residual). The model's logits are ``linear(x) + transformer(x)``; with the residual
off (validation did not improve by the chosen margin) they are the linear path's alone.

Its inputs (:func:`linear_features`): the standardised connectivity entries the transformer
sees, the upper triangle (i < j) of coherence, then wPLI, band by band (the order of
``interaction_screen.entry_table``), then the kept interactions' products (entry x entry, entry
x z-scored age).

Of what: a model with ``ModelConfig.linear_on_means`` (every fit of this version) reads them
from the *recording's mean* connectivity (:func:`recording_linear_logits`): the mean
standardised entries and the products of those means (mean entry x age_z). Its logit is one per
recording, added to every segment's logit of that recording as the forward's ``offset``, so the
mean of the segment logits (a recording's prediction, ``model/predict.py``) is the transformer's
segment mean plus the linear logit of the recording's means: what the fit used. (On the
screening studies, products of recording means beat the mean of per-segment products where
an interaction is planted; docs/benchmarks.md, "The linear path".) With
``ModelConfig.linear_segment_products`` the products are instead each recording's mean of its
segments' products (:func:`mean_segment_products`): two couplings that burst in the same
segments change that mean, not the product of the two means. A model
file of an earlier version (``linear_on_means`` false) forms the features per segment, and the
segment mean of their logits is the logit of the mean per-segment features, as before. Without
an ``offset`` the forward always uses each item's own features: a batch item is then a
recording of one segment.

Its weights are buffers (the model file stores them as tensors and loads with
``weights_only=True``): ``weight`` (n_classes, n_features) and ``bias`` (n_classes,), the
fitted logistic regression with its feature scaling folded in. A binary fit's decision
function z becomes the logits (-z/2, +z/2), so each class's logit moves by half of it and the
attributions of either class are the exact halves.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import Tensor, nn


def linear_features(coh: Tensor, wpli: Tensor, products: Tensor | None) -> Tensor:
    """(B, F, C, C) standardised ``coh`` and ``wpli`` and (B, K) ``products`` (None: none) ->
    (B, 2 F C(C-1)/2 + K): the upper triangles, coherence first, band-major, then the
    products."""
    rows, cols = torch.triu_indices(coh.shape[-1], coh.shape[-1], offset=1, device=coh.device)
    parts = [coh[..., rows, cols].flatten(1), wpli[..., rows, cols].flatten(1)]
    if products is not None:
        parts.append(products.to(coh.dtype))
    return torch.cat(parts, dim=1)


#: Segments summed at a time by :func:`segment_mean` (bounded float64 copies).
MEAN_SEGMENTS = 256


def uses_recording_means(model) -> bool:
    """Whether ``model`` (an ``XAIguiFormer``) has a static stage on its recordings' means
    (``ModelConfig.linear_on_means``): its callers pass each recording's static logits
    (``static_paths.recording_static_logits``) as the forward's ``offset``."""
    return model.static is not None and model.static.on_means


def segment_mean(values: np.ndarray | Tensor) -> Tensor:
    """The mean over axis 0 of ``values`` (S, ...) (numpy or a tensor), summed in float64
    :data:`MEAN_SEGMENTS` segments at a time: float32 (1, ...), on the tensor's device."""
    total = None
    for start in range(0, len(values), MEAN_SEGMENTS):
        block = values[start : start + MEAN_SEGMENTS]
        part = (
            block.double().sum(0)
            if isinstance(block, Tensor)
            else torch.from_numpy(np.asarray(block, dtype=np.float64).sum(0))
        )
        total = part if total is None else total + part
    if total is None:
        raise ValueError("segment_mean needs at least one segment")
    return (total / len(values)).float()[None]


def _scalar(value) -> float:
    """A recording's age or sex: a number, or the first of a per-segment array/tensor."""
    if isinstance(value, Tensor | np.ndarray) and value.ndim > 0:
        return float(value.reshape(-1)[0])
    return float(value)


def recording_features(model, coh, wpli, age, sex) -> Tensor:
    """(1, n_features) float32: the linear features of a recording's mean connectivity
    (``coh``, ``wpli`` raw, (S, T, C, C), numpy or tensors; ``age``, ``sex`` numbers or one per
    segment): the mean standardised entries and the products of those means (with
    ``ModelConfig.linear_segment_products`` the mean of the segments' products,
    :func:`mean_segment_products`), on the device of the model's linear path."""
    device = model.static.linear.weight.device
    mean_coh, mean_wpli = (segment_mean(x).to(device) for x in (coh, wpli))
    demographics = [torch.full((1,), _scalar(v), device=device) for v in (age, sex)]
    products = None
    if getattr(model.config, "linear_segment_products", False):
        products = mean_segment_products(model, coh, wpli, *demographics)
    with torch.no_grad():
        return model.linear_features(mean_coh, mean_wpli, *demographics, products).float()


def mean_segment_products(model, coh, wpli, age: Tensor, sex: Tensor) -> Tensor | None:
    """(1, K) float32: the mean over a recording's segments of the kept pairs' products
    (``model.interaction_products`` of each segment's raw ``coh``, ``wpli`` (S, T, C, C), numpy
    or tensors; ``age``, ``sex`` (1,) on the linear path's device), summed in float64
    :data:`MEAN_SEGMENTS` segments at a time; None for a model without kept pairs. A pair that
    acts within recordings (two couplings bursting in the same segments) moves this mean while
    the product of the two entries' means stays as it is; a recording's linear logit stays the
    mean of its segments' (the logit is linear in the products)."""
    device = model.static.linear.weight.device
    total = None
    with torch.no_grad():
        for start in range(0, len(coh), MEAN_SEGMENTS):
            block = [
                torch.as_tensor(x[start : start + MEAN_SEGMENTS]).to(device) for x in (coh, wpli)
            ]
            n = len(block[0])
            products = model.interaction_products(*block, age.expand(n), sex.expand(n))
            if products is None:
                return None
            part = products.double().sum(0)
            total = part if total is None else total + part
    if total is None:
        raise ValueError("mean_segment_products needs at least one segment")
    return (total / len(coh)).float()[None]


def recording_linear_logits(model, coh, wpli, age, sex) -> Tensor:
    """(n_classes,) float32: the linear path's logits of one recording's means
    (:func:`recording_features`), what every segment of it gets as ``offset``."""
    with torch.no_grad():
        return model.static.linear(recording_features(model, coh, wpli, age, sex))[0].float()


def feature_attributions(
    weight: Tensor, features: Tensor, baseline: Tensor, n_bands: int, n_channels: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact attribution of a linear output ``weight`` (n_features,) . features to each
    feature, from ``baseline`` (n_features,) to ``features``: (coh, wpli) float64 (T, C, C),
    symmetric, each pair's value at (i, j) and (j, i) (the channel-pair maps' convention), and
    the products' float64 (K,)."""
    values = (weight.double() * (features.double() - baseline.double())).cpu().numpy()
    rows, cols = np.triu_indices(n_channels, k=1)
    n_pairs = len(rows)
    maps = []
    for part in range(2):
        block = values[part * n_bands * n_pairs : (part + 1) * n_bands * n_pairs]
        full = np.zeros((n_bands, n_channels, n_channels))
        full[:, rows, cols] = block.reshape(n_bands, n_pairs)
        maps.append(full + np.swapaxes(full, -1, -2))
    return maps[0], maps[1], values[2 * n_bands * n_pairs :]


def n_linear_features(n_channels: int, n_bands: int, n_products: int) -> int:
    """Width of :func:`linear_features` for C channels, F bands and K products."""
    return 2 * n_bands * n_channels * (n_channels - 1) // 2 + n_products


class LinearPath(nn.Module):
    """``features (B, n_features) -> logits (B, n_classes)`` with stored weights.

    The weights start at zero (the path adds nothing until :meth:`set_weights`). During
    training, :meth:`cross_fitted` holds the inner-CV models (:meth:`set_cross_fitted`): each
    training recording's offset comes from the inner model that did not see its participant,
    so the transformer learns from honest linear logits, not from the refit's in-sample ones.
    """

    weight: Tensor
    bias: Tensor

    def __init__(self, n_features: int, n_classes: int):
        super().__init__()
        self.register_buffer("weight", torch.zeros(n_classes, n_features))
        self.register_buffer("bias", torch.zeros(n_classes))
        self._inner: tuple[Tensor, Tensor] | None = None  # (k, n_classes, n_features), (k, n)

    def forward(self, features: Tensor) -> Tensor:
        return features.to(self.weight.dtype) @ self.weight.T + self.bias

    def set_weights(self, weight: Tensor, bias: Tensor) -> None:
        """Store the refit's logit weights (n_classes, n_features) and bias (n_classes,)."""
        self.weight.copy_(weight)
        self.bias.copy_(bias)

    def set_cross_fitted(self, weight: Tensor, bias: Tensor) -> None:
        """The inner-CV models' logit weights (k, n_classes, n_features) and biases
        (k, n_classes), kept for training only (not in the state dict)."""
        self._inner = (weight, bias)

    def clear_cross_fitted(self) -> None:
        """Forget the inner-CV models (:meth:`set_cross_fitted`): training is over."""
        self._inner = None

    def scale(self, factor: float) -> None:
        """Multiply the path's logits by ``factor``: the refit's and the inner models' weights
        and biases."""
        self.set_weights(self.weight * factor, self.bias * factor)
        if self._inner is not None:
            self.set_cross_fitted(self._inner[0] * factor, self._inner[1] * factor)

    def _inner_models(self) -> tuple[Tensor, Tensor]:
        if self._inner is None:
            raise RuntimeError("the linear path holds no inner-CV models (set_cross_fitted)")
        return self._inner

    def cross_fitted(self, features: Tensor, inner_fold: Tensor) -> Tensor:
        """(B, n_features) features of samples whose participants are in inner folds
        ``inner_fold`` (B,) -> (B, n_classes): each through the model that did not see it."""
        weight, bias = (t.to(features.device) for t in self._inner_models())
        return (
            torch.einsum("bf,bcf->bc", features.to(weight.dtype), weight[inner_fold])
            + bias[inner_fold]
        )

    @contextlib.contextmanager
    def using_inner(self, k: int):
        """Within the block the path is inner model ``k`` (for a whole validation recording);
        the refit's weights are restored after."""
        saved = self.weight.clone(), self.bias.clone()
        inner_weight, inner_bias = self._inner_models()
        self.set_weights(inner_weight[k], inner_bias[k])
        try:
            yield
        finally:
            self.set_weights(*saved)
