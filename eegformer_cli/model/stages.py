"""The model's stages besides the transformer path: the standardiser and the static stage.

An :class:`~eegformer_cli.model.xaiguiformer.XAIguiFormer` is three stages, each a module of
its own whose state is tensors in the model file::

    coh, wpli (S, T, C, C) raw  --Standardiser-->  z-scored per (band, i, j) entry
        |                                             |
        | whole recording                             | segment by segment
        v                                             v
    StaticStage: one logit per recording          TransformerPath (model/transformer_path.py)
      linear path on its mean connectivity          the tokenizer, the coarse pass, DeepLIFT,
      (+ tangent-space path on its band             the refined pass: logits per segment
      covariances, mixed by StaticMix)
        |                                             |
        +------ static + kept * transformer ----------+   (B, n_classes), per segment

A recording's logit is the mean of its segments' (``model/predict.py``): the static logit plus
the transformer's segment mean when the transformer path is kept (``transformer_kept``, decided
on validation after training: ``training/transformer_keep.py``), the static logit alone when not.

:class:`Standardiser`: ``(coh - mean) / std`` and ``(wpli - mean) / std`` entry by entry, with
the training segments' statistics (``training/standardise.connectivity_stats``; std floored
so that the zero diagonal stays zero). Coherence and wPLI of different bands and pairs live on
different scales, and the class differences are small against them (docs/benchmarks.md,
"Accuracy"). The ``paper`` preset has none, as the paper's code (no normalisation anywhere).

:class:`StaticStage`: the convex fits on whole recordings (``training/linear_fit.py``,
``training/static_choice.py``): the linear path (``model/linear_path.py``) on the recording's
mean standardised connectivity, and where the data have band covariances the tangent-space
path (``model/tangent_space_path.py``), the two mixed by :class:`StaticMix`::

    static = weight[0] * connectivity + weight[1] * tangent_space + bias      (n_classes,)

The weights say which candidate the fit chose: (1, 0) the linear path on connectivity alone,
(0, 1) the tangent space alone, anything else a stacked fit of both. A path whose weight is 0
adds nothing, and a stage whose tangent-space weight is 0 does not need covariances
(:attr:`StaticStage.reads_covariance`). Model files of earlier versions map onto these stages
(``training/model_file.py``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import Tensor, nn

from eegformer_cli.model.linear_path import LinearPath, n_linear_features
from eegformer_cli.model.tangent_space_path import TangentSpacePath

#: The standardiser's buffers, in the order of ``training/standardise.connectivity_stats``.
STANDARDISER_BUFFERS = ("coh_mean", "coh_std", "wpli_mean", "wpli_std")


class Standardiser(nn.Module):
    """``(coh, wpli)`` raw (B, T, C, C) -> z-scored per entry, same shapes.

    Buffers ``coh_mean``, ``coh_std``, ``wpli_mean``, ``wpli_std`` float32 (T, C, C): mean 0
    and std 1 (the identity) until :meth:`set_stats`.
    """

    coh_mean: Tensor
    coh_std: Tensor
    wpli_mean: Tensor
    wpli_std: Tensor

    def __init__(self, n_bands: int, n_channels: int):
        super().__init__()
        for name in STANDARDISER_BUFFERS:
            value = 0.0 if name.endswith("mean") else 1.0
            self.register_buffer(name, torch.full((n_bands, n_channels, n_channels), value))

    def set_stats(self, stats: dict[str, np.ndarray]) -> None:
        """Store ``connectivity_stats`` output (float32 (T, C, C) arrays)."""
        for name, value in stats.items():
            getattr(self, name).copy_(torch.as_tensor(value))

    def forward(self, coh: Tensor, wpli: Tensor) -> tuple[Tensor, Tensor]:
        return (coh - self.coh_mean) / self.coh_std, (wpli - self.wpli_mean) / self.wpli_std


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

    def scale(self, factor: float) -> None:
        """Multiply the mixed logits by ``factor`` (weights and bias, the refit's and the inner
        folds' mixes)."""
        self.set_weights(self.weight * factor, self.bias * factor)
        if self._inner is not None:
            self.set_cross_fitted(self._inner[0] * factor, self._inner[1] * factor)

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


class StaticStage(nn.Module):
    """The static paths of a model (module docstring): ``linear`` (a
    :class:`~eegformer_cli.model.linear_path.LinearPath` on ``n_linear_features`` features),
    and with ``n_covariance_bands`` > 0 ``tangent_space`` (a
    :class:`~eegformer_cli.model.tangent_space_path.TangentSpacePath`) and ``mix``; both None
    without. ``on_means``: the linear path reads each recording's mean connectivity (every fit
    of this version); false, model files of earlier versions: each segment's own.
    """

    def __init__(
        self,
        n_channels: int,
        n_bands: int,
        n_products: int,
        n_classes: int,
        n_covariance_bands: int = 0,
        on_means: bool = True,
    ):
        super().__init__()
        self.on_means = on_means
        self.linear = LinearPath(n_linear_features(n_channels, n_bands, n_products), n_classes)
        self.tangent_space = (
            TangentSpacePath(n_covariance_bands, n_channels, n_classes)
            if n_covariance_bands
            else None
        )
        self.mix = StaticMix(n_classes) if n_covariance_bands else None

    @property
    def reads_covariance(self) -> bool:
        """Whether the stage's logits depend on band covariances: it has a tangent-space path
        and its mix gives that path a weight."""
        return self.mix is not None and float(self.mix.weight[1]) != 0.0

    def forward(self, features: Tensor, covariance: Tensor | None = None) -> Tensor:
        """(B, n_features) linear features and (B, K, C, C) band covariances (V^2; None: the
        input has none) -> (B, n_classes) static logits. RuntimeError when the stage reads
        covariances and none are given (its callers check first, ``model/static_paths.py``)."""
        connectivity = self.linear(features)
        if self.mix is None:
            return connectivity
        if covariance is None:
            if self.reads_covariance:
                raise RuntimeError(
                    "this static stage reads band covariances: give each recording's "
                    "(static_paths.recording_static_logits)"
                )
            return self.mix(connectivity, None)
        assert self.tangent_space is not None  # built with the mix
        device = self.tangent_space.reference_invsqrt.device
        return self.mix(connectivity, self.tangent_space(covariance.to(device)))

    @contextlib.contextmanager
    def inner(self, k: int):
        """Within the block every fitted part is inner fold ``k``'s (the linear path's model,
        the tangent space's and the mix): what a validation recording of that inner fold
        gets."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.linear.using_inner(k))
            if self.tangent_space is not None and self.mix is not None:
                stack.enter_context(self.tangent_space.classifier.using_inner(k))
                stack.enter_context(self.mix.using_inner(k))
            yield

    def scale(self, factor: float) -> None:
        """Multiply the stage's logits by ``factor``: the weights and bias of the part that
        gives them (the mix, the linear path without one), the refit's and the inner models'."""
        (self.linear if self.mix is None else self.mix).scale(factor)

    def clear_cross_fitted(self) -> None:
        """Forget the inner folds' models of every part: training is over."""
        self.linear.clear_cross_fitted()
        if self.tangent_space is not None and self.mix is not None:
            self.tangent_space.classifier.clear_cross_fitted()
            self.mix.clear_cross_fitted()
