"""The band-token transformer: rotary attention, post-norm layers, and the encoder that runs
either the coarse pass or the XAI-guided refined pass with the same weights.

Shapes: B samples, T band tokens, d model width, H heads, Dh = d / H.
Demographics enter as the (B, 2) float32 tensor made by the rotary module's
``drofe_*_demographics`` functions; (0, 0) is the explanation baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor, nn

from eegformer_cli.errors import check_choice
from eegformer_cli.model.layers import GegluMLP, LayerScale, make_norm
from eegformer_cli.model.rotary import BandRotaryEncoding

ATTENTION_IMPLS = ("fused", "explicit")
#: Norm epsilon in the transformer (passed explicitly in the official code).
TRANSFORMER_NORM_EPS = 1e-5


class RotaryAttention(nn.Module):
    """Multi-head self-attention with rotary Q/K and the XAI-guided variant.

    ``qkv`` Linear(d -> 3d, bias), ``proj`` Linear(d -> d), scale Dh^-0.5, V never rotated.
    With ``explanation`` (B, T, d) given, Q and K are the Q/K parts of the *same* ``qkv`` Linear
    (bias included) applied to the explanation, V still comes from ``x`` (official refined pass).

    ``attention_impl``: ``"fused"`` (``F.scaled_dot_product_attention``, no weights returned) or
    ``"explicit"`` (softmax(QK^T) V written out, returns the weights (B, H, T, T)); equal numbers.
    The softmax is the tensor function, not ``nn.Softmax`` (see layers.py on captum).

    forward(x (B, T, d), demographics (B, 2), explanation=None) -> (out (B, T, d), weights or None).
    """

    def __init__(self, dim: int, n_heads: int, rotary: BandRotaryEncoding, attention_impl: str,
                 dropout: float):
        super().__init__()
        check_choice("attention_impl", attention_impl, ATTENTION_IMPLS)
        self.n_heads = n_heads
        self.attention_impl = attention_impl
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rotary = rotary
        self.dropout = dropout

    def _split_heads(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)       # (B, H, T, Dh)

    def forward(self, x: Tensor, demographics: Tensor, explanation: Tensor | None = None):
        dim = x.shape[-1]
        if explanation is None:
            q, k, v = self.qkv(x).split(dim, dim=-1)
        else:
            q, k = F.linear(explanation, self.qkv.weight[:2 * dim], self.qkv.bias[:2 * dim]).split(dim, dim=-1)
            v = F.linear(x, self.qkv.weight[2 * dim:], self.qkv.bias[2 * dim:])
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        q, k = self.rotary(q, k, demographics)
        drop = self.dropout if self.training else 0.0
        if self.attention_impl == "fused":
            out, weights = F.scaled_dot_product_attention(q, k, v, dropout_p=drop), None
        else:
            weights = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).softmax(dim=-1)
            out = F.dropout(weights, drop) @ v
        return self.proj(out.transpose(1, 2).flatten(-2)), weights


class PostNormLayer(nn.Module):
    """Official transformer layer (post-norm with LayerScale):

    ``x = Norm1(x + gamma1 * Attn(x)); x = Norm2(x + gamma2 * FFN(x))``, FFN = GeGLU MLP
    (d -> 2 mlp_ratio d -> GeGLU -> mlp_ratio d -> d).

    forward(x (B, T, d), demographics (B, 2), explanation=None) -> (x (B, T, d), attention
    weights (B, H, T, T) with explicit attention, else None). The explanation is passed as a
    keyword so captum's layer-input hooks see (x, demographics) only.
    """

    def __init__(self, dim: int, n_heads: int, mlp_ratio: float, layerscale_init: float,
                 norm: str, rotary: BandRotaryEncoding, attention_impl: str, dropout: float):
        super().__init__()
        self.attn = RotaryAttention(dim, n_heads, rotary, attention_impl, dropout)
        self.scale1 = LayerScale(dim, layerscale_init)
        self.norm1 = make_norm(norm, dim, eps=TRANSFORMER_NORM_EPS)
        self.ffn = GegluMLP(dim, int(dim * mlp_ratio), dim, dropout)
        self.scale2 = LayerScale(dim, layerscale_init)
        self.norm2 = make_norm(norm, dim, eps=TRANSFORMER_NORM_EPS)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, demographics: Tensor, explanation: Tensor | None = None):
        attended, weights = self.attn(x, demographics, explanation)
        x = self.norm1(x + self.scale1(self.drop(attended)))
        return self.norm2(x + self.scale2(self.drop(self.ffn(x)))), weights


@dataclass
class EncoderOutput:
    """One pass of :class:`BandTransformer`.

    logits (B, n_classes); layer_inputs: h_0 .. h_{L-1}, each (B, T, d) (h_0 = the tokens), kept
    when asked; attention: per layer (B, H, T, T) with explicit attention, else empty.
    """

    logits: Tensor
    layer_inputs: list[Tensor] = field(default_factory=list)
    attention: list[Tensor] = field(default_factory=list)


class BandTransformer(nn.Module):
    """L post-norm layers (each with its own rotary encoding module, as officially) and the
    head: mean over tokens -> GeGLU MLP (d -> 2d -> GeGLU -> d -> n_classes).

    ``forward(tokens (B, T, d), demographics (B, 2)) -> logits (B, n_classes)`` is the coarse
    pass (the function captum explains); :meth:`run` also does the refined pass and returns
    the layer inputs and attention maps.
    """

    def __init__(self, dim: int, n_heads: int, n_layers: int, n_classes: int, mlp_ratio: float,
                 layerscale_init: float, norm: str, frequency_encoding: str,
                 band_edges_hz: Tensor, attention_impl: str, dropout: float):
        super().__init__()
        head_dim = dim // n_heads
        self.layers = nn.ModuleList(
            PostNormLayer(dim, n_heads, mlp_ratio, layerscale_init, norm,
                          BandRotaryEncoding(frequency_encoding, head_dim, band_edges_hz),
                          attention_impl, dropout)
            for _ in range(n_layers))
        self.head = GegluMLP(dim, dim, n_classes, dropout)

    def forward(self, tokens: Tensor, demographics: Tensor) -> Tensor:
        return self.run(tokens, demographics).logits

    def run(self, tokens: Tensor, demographics: Tensor, explanations: list[Tensor] | None = None,
            keep_layer_inputs: bool = False) -> EncoderOutput:
        """One pass: coarse when ``explanations`` is None, else refined (Q/K from explanation i
        at layer i, each (B, T, d)); both start from the same tokens."""
        layer_inputs, attention = [], []
        x = tokens
        for i, layer in enumerate(self.layers):
            if keep_layer_inputs:
                layer_inputs.append(x)
            if explanations is None:
                x, weights = layer(x, demographics)
            else:
                x, weights = layer(x, demographics, explanation=explanations[i])
            if weights is not None:
                attention.append(weights)
        return EncoderOutput(self.head(x.mean(dim=1)), layer_inputs, attention)
