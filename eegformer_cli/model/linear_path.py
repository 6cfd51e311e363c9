"""The linear path: a logistic regression inside the model, beside the transformer.

With a few hundred people, a transformer trained by gradient descent on thousands of
connectivity entries overfits where a convex, cross-validated linear fit does not (training
loss at its floor within ~10 epochs while validation loss rises). The ``default`` model therefore
reads its inputs twice: a linear path, fitted first and convexly (``training/linear_fit.py``),
and the transformer, which is trained on top of it and so can only add what the linear path
misses (its residual). The model's logits are ``linear(x) + transformer(x)``; with the residual
off (validation did not improve by the chosen margin) they are the linear path's alone.

Its inputs, per segment (:func:`linear_features`): the standardised connectivity entries the
transformer sees, the upper triangle (i < j) of coherence, then wPLI, band by band (the order of
``interaction_screen.entry_table``), then the kept interactions' products (entry x entry, entry
x z-scored age). It is linear in these, so the mean of a recording's segment logits is the
logit of the recording's mean features: what the fit used.

Its weights are buffers (the model file stores them as tensors and loads with
``weights_only=True``): ``weight`` (n_classes, n_features) and ``bias`` (n_classes,), the
fitted logistic regression with its feature scaling folded in. A binary fit's decision
function z becomes the logits (-z/2, +z/2), so each class's logit moves by half of it and the
attributions of either class are the exact halves.
"""

from __future__ import annotations

import contextlib

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
