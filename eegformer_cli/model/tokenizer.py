"""Connectome tokenizer: GINE message passing over each band's graph, one token per band.

A sample is ``n_bands`` complete graphs over the C electrodes. Node (band f, electrode i) has the
coherence row ``coh[f, i, :]`` (C,) as features; edge j -> i carries the scalar ``wpli[f, j, i]``.
The official code (reference-method.md, section 4.1) runs PyG ``GINEConv`` on a sparse edge list.
The graphs are small and complete, so we use dense batched tensors instead
(:class:`GineAggregation`): the same numbers (tested against an explicit loop over edges) without
torch_geometric, vectorised over batch, bands and senders.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from eegformer_cli.errors import UsageError
from eegformer_cli.model.layers import GeGLU, make_norm, norm_then_linear
from eegformer_cli.model.rotary import apply_rose, rose_frequencies

EDGES = ("directed", "undirected")
SPATIAL_ENCODINGS = ("none", "rose")
#: How a band's C node embeddings become its token (see :class:`ConnectomeTokenizer`).
READOUTS = ("mean", "channel_flatten_per_band")
#: What a node (band f, electrode i) starts from (see :class:`ConnectomeTokenizer`).
NODE_FEATURES = ("coherence", "coherence_wpli")
#: Norm epsilon inside the GNN (timm's default, as in the official code).
GNN_NORM_EPS = 1e-6


def message_sources(target: int, n_channels: int, edges: str) -> slice:
    """Channels that send a message to channel ``target``, as a slice of the channel axis.

    ``"directed"`` (paper): only j < target (the official upper-triangular edge list with PyG's
    source-to-target flow, so channel 0 hears nothing). ``"undirected"``: every channel; the
    caller drops the self term j = target (there are no self loops either way).
    """
    return slice(0, target) if edges == "directed" else slice(0, n_channels)


def message_targets(sender: int, n_channels: int, edges: str) -> slice:
    """Channels that receive a message from channel ``sender`` (the transpose of
    :func:`message_sources`): j > sender for ``"directed"``, every channel for ``"undirected"``
    (the caller drops the self term)."""
    return slice(sender + 1, n_channels) if edges == "directed" else slice(0, n_channels)


class GineAggregation(torch.autograd.Function):
    """GINE messages summed per target node, without materialising edge embeddings.

    ``m[n, i] = sum_{j -> i} ReLU(u[n, j] + w[n, i, j] * a)``, i.e. PyG's ``sum_j ReLU(x_j + e_ji)``
    with ``u = x + b`` and the edge embedding ``e_ji = w_ji a + b`` (a Linear(1 -> d) of the
    scalar wPLI). Inputs: u (N, C, d), w (N, C, C) with ``w[n, i, j]`` the weight of edge j -> i,
    a (d,), edges ``"directed"`` | ``"undirected"`` (see :func:`message_sources`). Output (N, C, d).
    Gradients flow to u, w and a (first order only).

    Why our own autograd function: the plain version (broadcast add, ReLU, masked sum over a
    dense adjacency) writes and rereads several (N, C, C, d) tensors (106 MB each at batch 64,
    9 bands, 19 channels, d 128) and keeps them for backward. Here the forward goes one target
    channel at a time over its senders only (half the pairs for directed edges, no mask; the
    sum over senders is written straight into the output), and the backward one sender at a
    time over its targets, recomputing the pre-activations instead of storing them: many times
    faster than plain autograd (docs/benchmarks.md, "Training step"). Equality with an
    explicit loop over edges and gradcheck are tested (tests/test_model.py).
    """

    @staticmethod
    def forward(ctx, u: Tensor, w: Tensor, a: Tensor, edges: str) -> Tensor:
        ctx.save_for_backward(u, w, a)
        ctx.edges = edges
        w, a = w.to(u.dtype), a.to(u.dtype)
        out = torch.zeros_like(u)
        for target in range(u.shape[1]):
            senders = message_sources(target, u.shape[1], edges)
            pre = torch.addcmul(u[:, senders], w[:, target, senders, None], a).relu_()
            if edges == "undirected":
                pre[:, target] = 0  # no self loop
            torch.sum(pre, dim=1, out=out[:, target])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        u, w, a = ctx.saved_tensors
        w_u, a_u = w.to(u.dtype), a.to(u.dtype)
        grad_u = torch.empty_like(u)  # every row is written below (an empty sum gives 0)
        grad_w = torch.zeros_like(w) if ctx.needs_input_grad[1] else None
        grad_a = torch.zeros(a.shape, dtype=torch.float32, device=a.device)
        for sender in range(u.shape[1]):
            targets = message_targets(sender, u.shape[1], ctx.edges)
            weights = w_u[:, targets, sender]  # (N, n_targets)
            pre = torch.addcmul(u[:, sender, None, :], weights[..., None], a_u)
            # ReLU's backward (the gradient where pre > 0, else 0) in one pass
            grad_pre = torch.ops.aten.threshold_backward(grad_out[:, targets], pre, 0)
            if ctx.edges == "undirected":
                grad_pre[:, sender] = 0  # no self loop
            torch.sum(grad_pre, dim=1, out=grad_u[:, sender])
            grad_a += (weights.reshape(-1) @ grad_pre.flatten(0, 1)).float()
            if grad_w is not None:
                grad_w[:, targets, sender] = (grad_pre @ a_u).to(w.dtype)
        return grad_u, grad_w, grad_a.to(a.dtype), None


class DenseGINEConv(nn.Module):
    """GINE (PyG ``GINEConv``, ``train_eps=True``) on dense graphs.

    ``out_i = MLP((1 + eps) x_i + sum_{j -> i} ReLU(x_j + e_ji))`` with MLP = Linear -> GELU ->
    Linear, eps a learnable scalar initialised to 0, and ``e_ji = edge_embedding(w_ji)``.

    forward(x (B, F, C, d), w (B, F, C, C) with ``w[..., i, j]`` the scalar of edge j -> i,
    edge_embedding Linear(1 -> d), edges "directed" | "undirected") -> (B, F, C, d).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, dim)

    def forward(self, x: Tensor, w: Tensor, edge_embedding: nn.Linear, edges: str) -> Tensor:
        u = x + edge_embedding.bias
        messages = GineAggregation.apply(
            u.flatten(0, 1), w.flatten(0, 1), edge_embedding.weight[:, 0], edges
        )
        aggregated = messages.unflatten(0, x.shape[:2])
        # (1 + eps) x + aggregated in one pass
        return self.fc2(F.gelu(self.fc1(torch.addcmul(aggregated, x, 1 + self.eps))))


class GnnBlock(nn.Module):
    """Official GNN layer: ``x + Dropout(GeGLU(Linear(d -> 2d)(Norm(GINE(x)))))``; (B, F, C, d).

    The norm's weight is applied inside the Linear (:func:`norm_then_linear`: the same function,
    equal up to float rounding), so ``norm``'s own forward (and a hook on it) is not called.
    """

    def __init__(self, dim: int, norm: str, dropout: float):
        super().__init__()
        self.conv = DenseGINEConv(dim)
        self.norm = make_norm(norm, dim, eps=GNN_NORM_EPS)
        self.expand = nn.Linear(dim, 2 * dim)
        self.act = GeGLU()
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, w: Tensor, edge_embedding: nn.Linear, edges: str) -> Tensor:
        expanded = norm_then_linear(self.norm, self.expand, self.conv(x, w, edge_embedding, edges))
        return x + self.drop(self.act(expanded))


def electrode_positions_cm(channel_names: list[str]) -> Tensor:
    """3-D positions (C, 3) float32 in cm of ``channel_names`` in MNE's 10-05 template montage
    (``standard_1005``, called ``colin27_1005`` since MNE 1.13; the name the recordings stage uses).

    Raises :class:`UsageError` naming the channels the montage does not know.
    """
    import mne

    from eegformer_cli.recordings.channels import MONTAGE_NAME

    montage = mne.channels.make_standard_montage(MONTAGE_NAME)
    positions = {name.lower(): xyz for name, xyz in montage.get_positions()["ch_pos"].items()}
    unknown = [name for name in channel_names if name.lower() not in positions]
    if unknown:
        raise UsageError(
            f"channel_names {unknown} are not in MNE's standard_1005 montage",
            hint='use 10-20 names or spatial_encoding="none"',
        )
    metres = np.array([positions[name.lower()] for name in channel_names], dtype=np.float32)
    return torch.from_numpy(metres) * 100.0


class ElectrodeSelfAttention(nn.Module):
    """Pre-norm residual self-attention over the electrodes of each band graph, with RoSE.

    Queries and keys are rotated by the electrodes' 3-D montage positions (cm; a buffer saved
    with the weights, so a model keeps the positions it was trained with), so scores depend on
    electrode *displacements* only.
    forward(x (B, F, C, d)) -> (B, F, C, d).
    """

    positions_cm: Tensor
    theta: Tensor

    def __init__(self, dim: int, n_heads: int, positions_cm: Tensor, norm: str):
        super().__init__()
        self.n_heads = n_heads
        self.norm = make_norm(norm, dim, eps=GNN_NORM_EPS)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("positions_cm", positions_cm.float().clone())
        self.register_buffer(
            "theta", rose_frequencies(dim // n_heads, n_spatial=3), persistent=False
        )

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(self.norm(x)).unflatten(-1, (3, self.n_heads, -1)).unbind(-3)
        q, k, v = (t.transpose(-2, -3) for t in (q, k, v))  # (B, F, H, C, Dh)
        q = apply_rose(q, self.positions_cm, 1.0, self.theta)
        k = apply_rose(k, self.positions_cm, 1.0, self.theta)
        out = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(out.transpose(-2, -3).flatten(-2))


class BandwiseLinear(nn.Module):
    """One Linear(in -> out) per band: (B, F, in) -> (B, F, out), weight (F, out, in), bias (F, out).

    Every band starts from the same weights (one ``nn.Linear`` initialisation copied F times),
    so at initialisation it is the shared readout; training lets the bands diverge.
    """

    def __init__(self, n_bands: int, in_features: int, out_features: int):
        super().__init__()
        shared = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(shared.weight.detach().expand(n_bands, -1, -1).clone())
        self.bias = nn.Parameter(shared.bias.detach().expand(n_bands, -1).clone())

    def forward(self, x: Tensor) -> Tensor:
        return torch.einsum("bfi,foi->bfo", x, self.weight) + self.bias


class ConnectomeTokenizer(nn.Module):
    """Coherence/wPLI connectomes -> one token per band.

    ``node_embedding`` Linear(C -> d) of coherence rows (paper; ``node_features="coherence"``) or
    Linear(2C -> d) of the coherence and wPLI rows side by side (``"coherence_wpli"``: wPLI then
    reaches the tokens linearly too, not only as GINE edge weights), optional learned
    ``channel_embedding`` (C, d) added to it, ``edge_embedding`` Linear(1 -> d) of the wPLI
    scalar (shared by all layers), ``n_layers`` x :class:`GnnBlock`, optional
    :class:`ElectrodeSelfAttention` (``spatial_encoding="rose"``), readout over electrodes,
    ``output_embedding``, dropout.

    Readouts: ``"mean"`` (paper) mean-pools the nodes, then ``output_embedding`` Linear(d -> d)
    (the official code applies the Linear per node before the mean; a Linear commutes with the
    mean, so we apply it once per band). ``"channel_flatten_per_band"`` (default) concatenates
    the C node embeddings in channel order and projects them with one Linear(C·d -> d) per band
    (:class:`BandwiseLinear`), so a token keeps which electrode carries what. Why: with the
    mean readout and no channel embedding, the first layer's token is a function of
    sum_i coh[f, i, :] = the node strengths, so which pair is coupled is pooled away; and the
    inputs are z-scored per band and pair, so to a projection shared by all bands the bands
    would look alike. ``channel_embedding`` is the standard positional embedding of graph
    transformers (initialised at 0.02 · N(0, 1)).

    ``n_bands`` (F) is needed by the per-band readout only.

    forward(coh, wpli): float32 (B, F, C, C) symmetric, zero diagonal -> tokens (B, F, d).
    """

    def __init__(
        self,
        *,
        n_channels: int,
        dim: int,
        n_layers: int,
        norm: str,
        edges: str,
        dropout: float,
        spatial_encoding: str = "none",
        channel_names: list[str] | None = None,
        n_heads: int = 4,
        readout: str = "mean",
        channel_embedding: bool = False,
        node_features: str = "coherence",
        n_bands: int | None = None,
    ):
        super().__init__()  # the choices were checked once, by ModelConfig.validate
        if readout == "channel_flatten_per_band" and not n_bands:
            # einsum would broadcast a single band's weights over all bands without a word
            raise UsageError(
                "readout='channel_flatten_per_band' needs n_bands (the number of bands, F)"
            )
        self.node_features = node_features
        width = 2 * n_channels if node_features == "coherence_wpli" else n_channels
        self.node_embedding = nn.Linear(width, dim)
        self.channel_embedding = (
            nn.Parameter(0.02 * torch.randn(n_channels, dim)) if channel_embedding else None
        )
        self.edge_embedding = nn.Linear(1, dim)
        self.blocks = nn.ModuleList(GnnBlock(dim, norm, dropout) for _ in range(n_layers))
        self.edges = edges
        self.spatial = None
        if spatial_encoding == "rose":
            if channel_names is None or len(channel_names) != n_channels:
                raise UsageError(
                    "spatial_encoding='rose' needs channel_names with one name per "
                    f"channel ({n_channels})",
                    hint="set ModelConfig.channel_names",
                )
            self.spatial = ElectrodeSelfAttention(
                dim, n_heads, positions_cm=electrode_positions_cm(channel_names), norm=norm
            )
        self.readout = readout
        self.output_embedding: nn.Linear | BandwiseLinear
        if readout == "mean":
            self.output_embedding = nn.Linear(dim, dim)
        else:
            assert n_bands is not None  # checked above
            self.output_embedding = BandwiseLinear(n_bands, n_channels * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, coh: Tensor, wpli: Tensor) -> Tensor:
        nodes = torch.cat((coh, wpli), dim=-1) if self.node_features == "coherence_wpli" else coh
        x = self.node_embedding(nodes)  # (B, F, C, d)
        if self.channel_embedding is not None:
            x = x + self.channel_embedding
        w = wpli.transpose(-1, -2)  # [..., i, j] = w_ji
        for block in self.blocks:
            x = block(x, w, self.edge_embedding, self.edges)
        if self.spatial is not None:
            x = self.spatial(x)
        pooled = x.mean(dim=-2) if self.readout == "mean" else x.flatten(-2)
        return self.drop(self.output_embedding(pooled))
