"""Small building blocks: GeGLU, the two RMS norms, the GeGLU MLP, LayerScale.

All non-linearities are functional (``F.gelu``), never ``nn.GELU``/``nn.Softmax`` modules:
captum's DeepLift applies its rescale rules to such modules, and the reference verified that the
official per-layer ``LayerDeepLift`` equals gradient x delta-activation only because none exist
(reference section 4.4). Keeping it that way is what makes the one-pass explanation exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eegformer_cli.errors import check_choice

NORMS = ("timm_rms", "rms")


class GeGLU(nn.Module):
    """Split the last dim in halves (value, gate) and return ``value * gelu(gate)`` (exact erf
    GELU). (..., 2h) -> (..., h)."""

    def forward(self, x: Tensor) -> Tensor:
        value, gate = x.chunk(2, dim=-1)
        return value * F.gelu(gate)


class TimmRmsNorm(nn.Module):
    """timm 0.9.5 ``RmsNorm``, as the official model used it: ``x * rsqrt(var(x) + eps) * weight``.

    The *unbiased variance* over the last dim (not the mean square) is used, without re-centring
    the output (timm bug #2380, fixed in later timm). Weight initialised to 1. (..., d) -> (..., d).
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # torch.var(x, dim=-1, keepdim=True), written out: the same value (two-pass, unbiased)
        # at 0.6x the time of torch.var's kernel, forward + backward, on the GNN's (B, F, C, d)
        centred = x - x.mean(dim=-1, keepdim=True)
        variance = (centred * centred).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)
        return x * torch.rsqrt(variance + self.eps) * self.weight


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    """``"timm_rms"`` (paper: :class:`TimmRmsNorm`) or ``"rms"`` (``torch.nn.RMSNorm``)."""
    check_choice("norm", kind, NORMS)
    if kind == "timm_rms":
        return TimmRmsNorm(dim, eps=eps)
    return nn.RMSNorm(dim, eps=eps)


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
