"""Small building blocks: GeGLU, the two RMS norms, the GeGLU MLP, LayerScale.

All non-linearities are functional (``F.gelu``), never ``nn.GELU``/``nn.Softmax`` modules:
captum's DeepLift applies its rescale rules to such modules, and reference-method.md (section
4.4) verified that the official per-layer ``LayerDeepLift`` equals gradient x delta-activation
only because none exist. Keeping it that way is what makes the one-pass explanation exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from eegformer_cli.model.precision import float32_forward

NORMS = ("timm_rms", "rms")


class GeGLU(nn.Module):
    """Split the last dim in halves (value, gate) and return ``value * gelu(gate)`` (exact erf
    GELU). (..., 2h) -> (..., h)."""

    def forward(self, x: Tensor) -> Tensor:
        value, gate = x.chunk(2, dim=-1)
        return value * F.gelu(gate)


class _TimmRmsScale(torch.autograd.Function):
    """``x * rsqrt(var(x) + eps)`` over the last dim (unbiased variance, no weight), with a
    hand-written first-order backward. (..., d) -> (..., d), on x's device.

    Why our own backward: autograd's backward of the written-out formula makes ~12 passes over
    x; this one makes 5 (``r g - (r^3 / (n - 1)) (sum_k g_k x_k) (x - mean)``, r = rsqrt(var +
    eps)), about a third less time at the GNN's sizes; the forward is the same formula.
    Equality with autograd in float64 is tested (tests/test_model.py). First order only: no
    training path differentiates a gradient (the explanations' gradient factor has no graph, as
    in captum); where one does (``explain``'s Integrated Gradients through the explanation),
    :class:`TimmRmsNorm` uses :func:`timm_rms_scale` instead.
    """

    @staticmethod
    def forward(ctx, x: Tensor, eps: float) -> Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        centred = x - mean
        # two-pass unbiased variance (the same value as torch.var, faster than its kernel here)
        variance = (centred * centred).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)
        rstd = torch.rsqrt(variance + eps)
        ctx.save_for_backward(x, centred, rstd)
        return x * rstd

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        x, centred, rstd = ctx.saved_tensors
        # d rstd / d x = -rstd^3 (x - mean) / (n - 1), weighted by sum_k grad_k x_k. As in
        # autograd's backward of the formula, the rounded centred x is re-centred (its mean is
        # 0 only in exact arithmetic), so float32 gradients stay as accurate as autograd's when
        # the mean is large against the spread.
        coefficient = rstd.pow(3) * (grad * x).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)
        grad_x = torch.addcmul(grad * rstd, centred, coefficient, value=-1)
        return grad_x.add_(coefficient * centred.mean(dim=-1, keepdim=True)), None


def timm_rms_scale(x: Tensor, eps: float) -> Tensor:
    """``x * rsqrt(var(x) + eps)`` over the last dim (unbiased variance) written out, so autograd
    differentiates it to any order. (..., d) -> (..., d)."""
    return x * torch.rsqrt(x.var(dim=-1, keepdim=True) + eps)


class TimmRmsNorm(nn.Module):
    """timm 0.9.5 ``RmsNorm``, as the official model used it: ``x * rsqrt(var(x) + eps) * weight``.

    The *unbiased variance* over the last dim (not the mean square) is used, without re-centring
    the output (a timm bug, huggingface/pytorch-image-models#2380, fixed in later timm). Weight
    initialised to 1. (..., d) -> (..., d), float32 under autocast (the precision policy,
    ``model/precision.py``).

    ``differentiable_explanations`` (set by
    :func:`~eegformer_cli.model.deeplift.differentiable_explanations`): the norm is
    :func:`timm_rms_scale`, twice differentiable, instead of the faster first-order
    :class:`_TimmRmsScale`, so a gradient taken through the explanations keeps its
    second-order terms.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.differentiable_explanations = False

    @float32_forward
    def normalise(self, x: Tensor) -> Tensor:
        """The norm without its weight: ``x * rsqrt(var(x) + eps)``."""
        if self.differentiable_explanations:
            return timm_rms_scale(x, self.eps)
        return _TimmRmsScale.apply(x, self.eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.normalise(x) * self.weight


class RmsNorm(nn.RMSNorm):
    """``torch.nn.RMSNorm`` over the last dim, with :meth:`normalise` like :class:`TimmRmsNorm`.
    (..., d) -> (..., d), float32 under autocast (``model/precision.py``)."""

    @float32_forward
    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x)

    @float32_forward
    def normalise(self, x: Tensor) -> Tensor:
        """The norm without its weight: ``x * rsqrt(mean(x^2) + eps)``."""
        return F.rms_norm(x, self.normalized_shape, None, self.eps)


def make_norm(kind: str, dim: int, eps: float) -> TimmRmsNorm | RmsNorm:
    """``"timm_rms"`` (paper: :class:`TimmRmsNorm`) or ``"rms"`` (:class:`RmsNorm`); ``kind``
    was checked once, by ``ModelConfig.validate``."""
    if kind == "timm_rms":
        return TimmRmsNorm(dim, eps=eps)
    return RmsNorm(dim, eps=eps)


def norm_then_linear(norm: TimmRmsNorm | RmsNorm, linear: nn.Linear, x: Tensor) -> Tensor:
    """``linear(norm(x))`` with the norm's weight g folded into the Linear's: ``(W diag(g))
    x_hat + b``. The same function and parameters (equal up to float rounding; equality in
    float64 is tested); the scaling by g happens on the small (out, in) weight instead of on
    every row of x, which saves a pass over x forward and two backward. The norm must have a weight
    (:func:`make_norm`'s always do). (..., in) -> (..., out).
    """
    return F.linear(norm.normalise(x), linear.weight * norm.weight, linear.bias)


class GegluMLP(nn.Module):
    """``Linear(in -> 2 hidden) -> GeGLU -> Dropout -> Linear(hidden -> out)``; (..., in) -> (..., out).

    The paper's feed-forward (128 -> 1024 -> GeGLU -> 512 -> 128) and classification head
    (128 -> 256 -> GeGLU -> 128 -> n_classes).
    """

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, 2 * hidden_dim)
        self.act = GeGLU()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden_dim, out_dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))


class LayerScale(nn.Module):
    """Per-channel learnable scale ``x * gamma``, gamma (d,) initialised to ``init_value``."""

    def __init__(self, dim: int, init_value: float):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_value)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma
