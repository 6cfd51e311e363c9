"""The band-token transformer: rotary attention, post-norm layers, and the encoder that runs
either the coarse pass or the XAI-guided refined pass with the same weights.

Shapes: B samples, T band tokens, d model width, H heads, Dh = d / H.
Demographics enter as the (B, 2) float32 tensor made by the rotary module's
``drofe_*_demographics`` functions; (0, 0) is the explanation baseline.

With explicit attention (``RotaryAttention.fused_attn`` off) every layer also reports what its
attention did (:class:`AttentionTrace`: the weights, the share of the residual stream the
attention update carries, and in the refined pass the size of the explanation's part against
the rest); ``model/diagnostics.py`` turns these into the numbers ``train``, ``explain`` and the
report show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eegformer_cli.model.layers import GegluMLP, LayerScale, make_norm
from eegformer_cli.model.precision import at_least_float32, float32_forward
from eegformer_cli.model.rotary import BandRotaryEncoding

#: How the refined pass uses the explanation (see :class:`RotaryAttention`).
GUIDANCES = ("paper", "band_share")
#: The two passes of the XAI-guided transformer.
PASSES = ("coarse", "refined")
#: Added to mean squares before a square root (explanations reach 1e-8 at initialisation).
GUIDANCE_EPS = 1e-20
#: Norm epsilon in the transformer (passed explicitly in the official code).
TRANSFORMER_NORM_EPS = 1e-5


def rms(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Root mean square of ``x`` over ``dims`` (kept), computed in at least float32."""
    x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return torch.sqrt(x.square().mean(dim=dims, keepdim=True) + GUIDANCE_EPS)


def band_share_logits(explanation: Tensor) -> Tensor:
    """``band_share`` guidance: each band's share of the explanation, as an attention bias.

    explanation (B, T, d) -> (B, 1, 1, T) float32, added to the attention logits of every
    query for key band s: ``|c_s| / mean_s' |c_s'|`` with ``c_s = sum_d E_s``, band s's part of
    the explained logit (DeepLIFT's contributions sum to the logit's change from the
    baseline). Scale-free (the same for ``c * E``, c > 0). Linear rather than logarithmic in
    the share: a logarithm dives where a contribution crosses 0, which puts near-jumps into the
    model function and breaks the completeness of ``explain``'s Integrated Gradients.
    """
    contribution = explanation.float().sum(dim=-1).abs()  # (B, T)
    relative = contribution / (contribution.mean(dim=-1, keepdim=True) + GUIDANCE_EPS)
    return relative[:, None, None, :]


def _centred_rms(logits: Tensor) -> Tensor:
    """Per sample, the root mean square of attention logits (B, H, T, T) after removing each
    row's mean (which the softmax ignores) -> (B,)."""
    return rms((logits - logits.mean(dim=-1, keepdim=True)).flatten(1), (-1,))[:, 0]


@dataclass
class AttentionTrace:
    """What one attention layer did in one pass, per sample (explicit attention only).

    weights (B, H, T, T), each row sums to 1; residual_share (B,): ||gamma * attn(x)|| / ||x||
    over (T, d), the share of the residual stream the attention update carries;
    guidance_ratio (B,), refined pass only: how large the explanation's part of the refined
    attention is against the part that does not depend on it. ``paper`` guidance:
    ||W_qk E|| / ||b_qk|| over (T, 2d); ``band_share``: the centred RMS of the explanation's
    logit bias against that of the content logits q.k / sqrt(Dh) (None in the coarse pass).
    """

    weights: Tensor
    residual_share: Tensor | None = None
    guidance_ratio: Tensor | None = None

    def rows(self, index) -> AttentionTrace:
        """The same trace for the samples ``index`` (a slice or index tensor of the batch)."""

        def pick(value):
            return None if value is None else value[index]

        return AttentionTrace(
            self.weights[index], pick(self.residual_share), pick(self.guidance_ratio)
        )

    def detach(self) -> AttentionTrace:
        def cut(value):
            return None if value is None else value.detach()

        return AttentionTrace(
            self.weights.detach(), cut(self.residual_share), cut(self.guidance_ratio)
        )


def _norm_per_sample(x: Tensor) -> Tensor:
    """Frobenius norm of each sample of x (B, ...) -> (B,), in at least float32."""
    return rms(x.flatten(1), (-1,))[:, 0] * x[0].numel() ** 0.5


class RotaryAttention(nn.Module):
    """Multi-head self-attention with rotary Q/K and the XAI-guided variant.

    ``qkv`` Linear(d -> 3d, bias), ``proj`` Linear(d -> d), scale Dh^-0.5, V never rotated.
    With ``explanation`` (B, T, d) given (the refined pass), ``guidance`` says how it steers
    the attention. ``"paper"`` (official): Q and K are the Q/K parts of the *same* ``qkv``
    Linear (bias included) applied to the explanation; V still comes from ``x``.
    ``"band_share"``: Q, K and V come from ``x`` as in the coarse pass, and the logits get
    ``gain * band_share_logits(explanation)`` (a learned scalar, initialised to 1), so each
    key band's weight grows with its share of the explanation.

    ``fused_attn`` (True; ``model/diagnostics.py`` switches it off): the fused
    ``F.scaled_dot_product_attention``, no weights returned; False: softmax(QK^T) V written out,
    returning an :class:`AttentionTrace`; equal numbers. The softmax is the tensor function, not
    ``nn.Softmax`` (see layers.py on captum).

    forward(x (B, T, d), demographics (B, 2), explanation=None) -> (out (B, T, d), trace or None);
    computed in float32 under autocast (the precision policy, ``model/precision.py``).
    """

    def __init__(
        self,
        *,
        dim: int,
        n_heads: int,
        rotary: BandRotaryEncoding,
        dropout: float,
        guidance: str = "paper",
    ):
        super().__init__()  # ``guidance`` was checked once, by ModelConfig.validate
        self.n_heads = n_heads
        self.guidance = guidance
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rotary = rotary
        self.dropout = dropout
        self.guidance_gain = None if guidance == "paper" else nn.Parameter(torch.ones(()))
        self.fused_attn = True

    def _split_heads(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # (B, H, T, Dh)

    def _guided_qk(self, explanation: Tensor) -> tuple[Tensor, Tensor | None]:
        """``paper`` guidance's refined Q/K (B, T, 2d) and, with explicit attention, the
        guidance ratio (B,)."""
        dim = self.qkv.in_features
        weight, bias = self.qkv.weight[: 2 * dim], self.qkv.bias[: 2 * dim]
        if self.fused_attn:
            return F.linear(explanation, weight, bias), None
        guided = F.linear(explanation, weight)
        ratio = _norm_per_sample(guided) / (_norm_per_sample(bias.expand_as(guided)) + GUIDANCE_EPS)
        return guided + bias, ratio

    def project(self, x: Tensor, explanation: Tensor | None = None):
        """(q, k, v, logit_bias, ratio): queries, keys and values (B, H, T, Dh) before the
        rotary encoding; the explanation's logit bias (B, 1, 1, T) (``band_share``, refined
        pass; else None); ``paper`` guidance's ratio (B,) with explicit attention (else None)."""
        dim = x.shape[-1]
        ratio, logit_bias = None, None
        if explanation is None or self.guidance == "band_share":
            q, k, v = self.qkv(x).split(dim, dim=-1)
            if explanation is not None and self.guidance_gain is not None:  # band_share
                logit_bias = self.guidance_gain * band_share_logits(explanation)
        else:
            qk, ratio = self._guided_qk(explanation)
            q, k = qk.split(dim, dim=-1)
            v = F.linear(x, self.qkv.weight[2 * dim :], self.qkv.bias[2 * dim :])
        return self._split_heads(q), self._split_heads(k), self._split_heads(v), logit_bias, ratio

    @float32_forward
    def forward(self, x: Tensor, demographics: Tensor, explanation: Tensor | None = None):
        q, k, v, logit_bias, ratio = self.project(x, explanation)
        q, k = self.rotary(q, k, demographics)
        drop = self.dropout if self.training else 0.0
        if self.fused_attn:
            mask = None if logit_bias is None else logit_bias.to(q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
            trace = None
        else:
            logits = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
            if logit_bias is not None:
                ratio = _centred_rms(logit_bias.expand_as(logits)) / (
                    _centred_rms(logits) + GUIDANCE_EPS
                )
                logits = logits + logit_bias
            weights = logits.softmax(dim=-1)
            out = F.dropout(weights, drop) @ v
            trace = AttentionTrace(weights, guidance_ratio=ratio)
        return self.proj(out.transpose(1, 2).flatten(-2)), trace


class PostNormLayer(nn.Module):
    """Official transformer layer (post-norm with LayerScale):

    ``x = Norm1(x + gamma1 * Attn(x)); x = Norm2(x + gamma2 * FFN(x))``, FFN = GeGLU MLP
    (d -> 2 mlp_ratio d -> GeGLU -> mlp_ratio d -> d).

    forward(x (B, T, d), demographics (B, 2), explanation=None) -> (x (B, T, d), an
    :class:`AttentionTrace` with explicit attention, else None). The explanation is passed as a
    keyword so captum's layer-input hooks see (x, demographics) only.
    """

    def __init__(
        self,
        *,
        dim: int,
        n_heads: int,
        mlp_ratio: float,
        layerscale_init: float,
        norm: str,
        rotary: BandRotaryEncoding,
        dropout: float,
        guidance: str = "paper",
    ):
        super().__init__()
        self.attn = RotaryAttention(
            dim=dim, n_heads=n_heads, rotary=rotary, dropout=dropout, guidance=guidance
        )
        self.scale1 = LayerScale(dim, layerscale_init)
        self.norm1 = make_norm(norm, dim, eps=TRANSFORMER_NORM_EPS)
        self.ffn = GegluMLP(dim, int(dim * mlp_ratio), dim, dropout)
        self.scale2 = LayerScale(dim, layerscale_init)
        self.norm2 = make_norm(norm, dim, eps=TRANSFORMER_NORM_EPS)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, demographics: Tensor, explanation: Tensor | None = None):
        attended, trace = self.attn(x, demographics, explanation)
        update = self.scale1(self.drop(attended))
        if trace is not None:
            trace.residual_share = _norm_per_sample(update) / (_norm_per_sample(x) + GUIDANCE_EPS)
        x = self.norm1(x + update)
        return self.norm2(x + self.scale2(self.drop(self.ffn(x)))), trace


@dataclass
class EncoderOutput:
    """One pass of :class:`BandTransformer`.

    logits (B, n_classes); layer_inputs: h_0 .. h_{L-1}, each (B, T, d) (h_0 = the tokens), kept
    when asked; attention: one :class:`AttentionTrace` per layer with explicit attention, else
    empty.
    """

    logits: Tensor
    layer_inputs: list[Tensor] = field(default_factory=list)
    attention: list[AttentionTrace] = field(default_factory=list)


class BandTransformer(nn.Module):
    """L post-norm layers (each with its own rotary encoding module, as officially) and the
    head: mean over tokens -> GeGLU MLP (d -> 2d -> GeGLU -> d -> n_classes).

    ``forward(tokens (B, T, d), demographics (B, 2)) -> logits (B, n_classes)`` is the coarse
    pass (the function captum explains); :meth:`run` also does the refined pass and returns
    the layer inputs and attention maps.
    """

    def __init__(
        self,
        *,
        dim: int,
        n_heads: int,
        n_layers: int,
        n_classes: int,
        mlp_ratio: float,
        layerscale_init: float,
        norm: str,
        frequency_encoding: str,
        band_edges_hz: Tensor,
        dropout: float,
        guidance: str = "paper",
    ):
        super().__init__()
        head_dim = dim // n_heads
        self.layers = nn.ModuleList(
            PostNormLayer(
                dim=dim,
                n_heads=n_heads,
                mlp_ratio=mlp_ratio,
                layerscale_init=layerscale_init,
                norm=norm,
                rotary=BandRotaryEncoding(frequency_encoding, head_dim, band_edges_hz),
                dropout=dropout,
                guidance=guidance,
            )
            for _ in range(n_layers)
        )
        self.head = GegluMLP(dim, dim, n_classes, dropout)

    def forward(self, tokens: Tensor, demographics: Tensor) -> Tensor:
        return self.run(tokens, demographics).logits

    def run(
        self,
        tokens: Tensor,
        demographics: Tensor,
        explanations: list[Tensor] | None = None,
        keep_layer_inputs: bool = False,
    ) -> EncoderOutput:
        """One pass: coarse when ``explanations`` is None, else refined (Q/K from explanation i
        at layer i, each (B, T, d)); both start from the same tokens, in float32 under
        autocast (so the layer inputs and the explanations are float32: ``model/precision.py``)."""
        layer_inputs, attention = [], []
        x = at_least_float32(tokens)
        for i, layer in enumerate(self.layers):
            if keep_layer_inputs:
                layer_inputs.append(x)
            if explanations is None:
                x, trace = layer(x, demographics)
            else:
                x, trace = layer(x, demographics, explanation=explanations[i])
            if trace is not None:
                attention.append(trace)
        return EncoderOutput(self.head(x.mean(dim=1)), layer_inputs, attention)
