"""The static stage: one logit per recording from convex fits, given to every segment as ``offset``.

A model with a linear path (``model/linear_path.py``) reads each recording's mean
connectivity; a model that also has a tangent-space path (``model/tangent_space_path.py``,
``ModelConfig.tangent_space_bands``) reads the recording's band covariances too, and its static
logits are :class:`StaticMix`'s weighted sum of the two paths' logits::

    static = weight[0] * connectivity + weight[1] * tangent_space + bias      (n_classes,)

The weights say which candidate the fit chose (``training/static_choice.py``): (1, 0) the
linear path on connectivity alone, (0, 1) the tangent space alone, and anything else a stacked
fit of both (a logistic regression on the two paths' cross-fitted decision values). A path
whose weight is 0 adds nothing, and a model whose tangent-space weight is 0 does not need
covariances: :func:`reads_covariance`.

A recording is a tuple ``(coh, wpli, age, sex[, covariance])``: ``covariance`` float32
(n_covariance_bands, C, C), V^2, the connectome file's (None or absent: the input has none).
:func:`recording_static_logits` is the one function every caller with a whole recording uses
(``model/predict.py``, explanations, training's validation).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import Tensor, nn

from eegformer_cli.errors import InputDataError
from eegformer_cli.model.linear_path import recording_linear_logits, uses_recording_means


class StaticMix(nn.Module):
    """``(connectivity, tangent_space) logits (B, n_classes) each -> (B, n_classes)``.

    Buffers ``weight`` (2,) and ``bias`` (n_classes,), connectivity alone (1, 0) until
    :meth:`set_weights`; during training :meth:`set_cross_fitted` holds the inner folds' mixes,
    as :class:`~eegformer_cli.model.linear_path.LinearPath` holds its inner models.
    """

    weight: Tensor
    bias: Tensor

    def __init__(self, n_classes: int):
        super().__init__()
        self.register_buffer("weight", torch.tensor([1.0, 0.0]))
        self.register_buffer("bias", torch.zeros(n_classes))
        self._inner: tuple[Tensor, Tensor] | None = None

    def forward(self, connectivity: Tensor, tangent_space: Tensor | None) -> Tensor:
        out = self.weight[0] * connectivity.to(self.weight.dtype) + self.bias
        if tangent_space is not None:
            out = out + self.weight[1] * tangent_space.to(self.weight.dtype)
        return out

    def set_weights(self, weight, bias) -> None:
        """Store the chosen mix: ``weight`` (2,), ``bias`` (n_classes,)."""
        self.weight.copy_(torch.as_tensor(weight, dtype=self.weight.dtype))
        self.bias.copy_(torch.as_tensor(bias, dtype=self.bias.dtype))

    def set_cross_fitted(self, weight, bias) -> None:
        """The inner folds' mixes, (k, 2) and (k, n_classes), for training only."""
        self._inner = (torch.as_tensor(weight).float(), torch.as_tensor(bias).float())

    def clear_cross_fitted(self) -> None:
        self._inner = None

    @contextlib.contextmanager
    def using_inner(self, k: int):
        """Within the block the mix is inner fold ``k``'s (the refit's restored after)."""
        if self._inner is None:
            raise RuntimeError("the static mix holds no inner-fold mixes (set_cross_fitted)")
        saved = self.weight.clone(), self.bias.clone()
        self.set_weights(self._inner[0][k], self._inner[1][k])
        try:
            yield
        finally:
            self.set_weights(*saved)


def tangent_space_of(model):
    """``model``'s tangent-space path (an ``XAIguiFormer`` or one behind standardisation), or
    None without one."""
    return getattr(model, "tangent_space", None)


def reads_covariance(model) -> bool:
    """Whether ``model``'s static logits depend on band covariances: it has a tangent-space
    path and its mix gives that path a weight."""
    return tangent_space_of(model) is not None and float(model.static_mix.weight[1]) != 0.0


def covariance_of(recording: tuple):
    """The covariance of a recording tuple (module docstring), None when it has none."""
    return recording[4] if len(recording) > 4 else None


def recording_static_logits(model, recording: tuple) -> Tensor:
    """(n_classes,) float32: the static stage's logits of one recording (module docstring), on
    the device of the model's linear path. Raises :class:`InputDataError` when the model reads
    covariances and the recording has none (a preprocess folder of an earlier version)."""
    coh, wpli, age, sex = recording[:4]
    connectivity = recording_linear_logits(model, coh, wpli, age, sex)
    path = tangent_space_of(model)
    if path is None:
        return connectivity
    covariance = covariance_of(recording)
    if covariance is None:
        if reads_covariance(model):
            raise InputDataError(
                "this model's tangent-space path reads band covariances, which this "
                "recording's connectome lacks (preprocessed by an earlier eegformer)",
                hint="rerun `eegformer preprocess` with this version",
            )
        return model.static_mix(connectivity[None], None)[0].float()
    with torch.no_grad():
        device = path.reference_invsqrt.device
        covariance = torch.as_tensor(np.asarray(covariance), device=device)[None]
        return model.static_mix(connectivity[None], path(covariance))[0].float()


def recording_offset(model, recording: tuple) -> Tensor | None:
    """:func:`recording_static_logits` for a model on recording means, else None (the forward
    forms the linear path per segment, as earlier versions did)."""
    if not uses_recording_means(model):
        return None
    return recording_static_logits(model, recording)


@contextlib.contextmanager
def static_inner(model, k: int):
    """Within the block every fitted part of ``model``'s static stage is inner fold ``k``'s
    (the linear path's model, the tangent space's and the mix): what a validation recording
    of that inner fold gets."""
    path = tangent_space_of(model)
    with contextlib.ExitStack() as stack:
        stack.enter_context(model.linear.using_inner(k))
        if path is not None:
            stack.enter_context(path.classifier.using_inner(k))
            stack.enter_context(model.static_mix.using_inner(k))
        yield


def clear_cross_fitted(model) -> None:
    """Forget the inner folds' models of every static part: training is over."""
    model.linear.clear_cross_fitted()
    path = tangent_space_of(model)
    if path is not None:
        path.classifier.clear_cross_fitted()
        model.static_mix.clear_cross_fitted()
