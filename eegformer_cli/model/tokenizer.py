"""Connectome tokenizer: GINE message passing over each band's graph, one token per band.

A sample is ``n_bands`` complete graphs over the C electrodes. Node (band f, electrode i) has the
coherence row ``coh[f, i, :]`` (C,) as features; edge j -> i carries the scalar ``wpli[f, j, i]``.
The official code (reference section 4.1) runs PyG ``GINEConv`` on a sparse edge list. The graphs
are small and complete, so we use dense batched tensors instead: the same numbers (tested against
an explicit loop) without torch_geometric, and vectorised over batch and bands.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from eegformer_cli.errors import UsageError, check_choice
from eegformer_cli.model.layers import GeGLU, make_norm
from eegformer_cli.model.rotary import apply_rose, rose_frequencies

EDGES = ("directed", "undirected")
SPATIAL_ENCODINGS = ("none", "rose")
#: Norm epsilon inside the GNN (timm's default, as in the official code).
GNN_NORM_EPS = 1e-6


def adjacency(n_channels: int, edges: str) -> Tensor:
    """Dense adjacency A (C, C) float32 with ``A[i, j] = 1`` when j sends a message to i.

    ``"directed"`` (paper): only j < i sends to i (the official upper-triangular edge list with
    PyG's source-to-target flow, so channel 0 hears nothing). ``"undirected"``: every j != i.
    No self loops either way.
    """
    check_choice("edges", edges, EDGES)
    ones = torch.ones(n_channels, n_channels)
    if edges == "directed":
        return torch.tril(ones, diagonal=-1)
    return ones - torch.eye(n_channels)


#: Graphs per chunk in :class:`GineAggregation`: sized so one chunk's (n, C, C, d) temporaries
#: stay in the CPU cache (about 4 MB at C = 19, d = 128). On CUDA the whole batch is one chunk.
CPU_CHUNK_ELEMENTS = 1 << 20


class GineAggregation(torch.autograd.Function):
    """GINE messages summed per target node, without materialising edge embeddings.

    ``m[n, i] = sum_j A[i, j] ReLU(u[n, j] + w[n, i, j] * a)``, i.e. PyG's
    ``sum_j ReLU(x_j + e_ji)`` with ``u = x + b`` and the edge embedding ``e_ji = w_ji a + b``
    (a Linear(1 -> d) of the scalar wPLI ``w``). Inputs: u (N, C, d), w (N, C, C) with
    ``w[n, i, j]`` the weight of edge j -> i, a (d,), adjacency A (C, C) of 0/1. Output (N, C, d).
    Gradients flow to u, w and a (first order only).

    Why our own autograd function: the plain version (broadcast add, relu, masked sum) writes and
    rereads several (N, C, C, d) tensors (106 MB each at batch 64, 9 bands, 19 channels, d 128)
    and keeps them for backward. Here forward and backward run chunk by chunk in cache, and the
    backward recomputes the pre-activations instead of storing them. Measured on this project's
    2-core CPU (forward + backward of one layer, batch 64, 1 thread): plain autograd 0.52 s,
    this 0.11-0.14 s; an edge-list (gather/index_add) variant 0.13-0.20 s. No (N, C, C, d)
    tensor is kept between forward and backward. Equality with an explicit loop over edges and
    with plain autograd is tested (tests/test_model.py).
    """

    @staticmethod
    def forward(ctx, u: Tensor, w: Tensor, a: Tensor, adjacency: Tensor) -> Tensor:
        ctx.save_for_backward(u, w, a, adjacency)
        w, a, mask = w.to(u.dtype), a.to(u.dtype), adjacency.to(u.dtype)[:, :, None]
        out = torch.empty_like(u)
        for chunk in _chunks(u):
            pre = torch.addcmul(u[chunk, None], w[chunk, :, :, None], a)      # (n, i, j, d)
            torch.sum(pre.relu_().mul_(mask), dim=2, out=out[chunk])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        u, w, a, adjacency = ctx.saved_tensors
        w_u, a_u, mask = w.to(u.dtype), a.to(u.dtype), adjacency.to(u.dtype)[:, :, None]
        grad_u = torch.empty_like(u)
        grad_w = torch.empty_like(w) if ctx.needs_input_grad[1] else None
        grad_a = torch.zeros(a.shape, dtype=torch.float32, device=a.device)
        for chunk in _chunks(u):
            pre = torch.addcmul(u[chunk, None], w_u[chunk, :, :, None], a_u)
            # ReLU's backward (grad where pre > 0, else 0) in one pass, without a bool mask
            grad_pre = torch.ops.aten.threshold_backward(grad_out[chunk, :, None, :] * mask, pre, 0)
            torch.sum(grad_pre, dim=1, out=grad_u[chunk])
            grad_a += (w_u[chunk].reshape(-1) @ grad_pre.reshape(-1, grad_pre.shape[-1])).float()
            if grad_w is not None:
                grad_w[chunk] = (grad_pre @ a_u).to(w.dtype)
        return grad_u, grad_w, grad_a.to(a.dtype), None


def _chunks(u: Tensor) -> list[slice]:
    """Slices of the first dim of u (N, C, d) for :class:`GineAggregation`."""
    n, c, d = u.shape
    per_chunk = n if u.is_cuda else max(1, CPU_CHUNK_ELEMENTS // (c * c * d))
    return [slice(start, start + per_chunk) for start in range(0, n, per_chunk)]


class DenseGINEConv(nn.Module):
    """GINE (PyG ``GINEConv``, ``train_eps=True``) on dense graphs.

    ``out_i = MLP((1 + eps) x_i + sum_j A_ij ReLU(x_j + e_ji))`` with MLP = Linear -> GELU -> Linear,
    eps a learnable scalar initialised to 0, and ``e_ji = edge_embedding(w_ji)``.

    forward(x (B, F, C, d), w (B, F, C, C) with ``w[..., i, j]`` the scalar of edge j -> i,
    edge_embedding Linear(1 -> d), adjacency (C, C)) -> (B, F, C, d).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, dim)

    def forward(self, x: Tensor, w: Tensor, edge_embedding: nn.Linear, adjacency: Tensor) -> Tensor:
        u = x + edge_embedding.bias
        messages = GineAggregation.apply(u.flatten(0, 1), w.flatten(0, 1),
                                         edge_embedding.weight[:, 0], adjacency)
        aggregated = messages.unflatten(0, x.shape[:2])
        return self.fc2(F.gelu(self.fc1((1 + self.eps) * x + aggregated)))


class GnnBlock(nn.Module):
    """Official GNN layer: ``x + Dropout(GeGLU(Linear(d -> 2d)(Norm(GINE(x)))))``; (B, F, C, d)."""

    def __init__(self, dim: int, norm: str, dropout: float):
        super().__init__()
        self.conv = DenseGINEConv(dim)
        self.norm = make_norm(norm, dim, eps=GNN_NORM_EPS)
        self.expand = nn.Linear(dim, 2 * dim)
        self.act = GeGLU()
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, w: Tensor, edge_embedding: nn.Linear, adjacency: Tensor) -> Tensor:
        return x + self.drop(self.act(self.expand(self.norm(self.conv(x, w, edge_embedding, adjacency)))))


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
        raise UsageError(f"channel_names {unknown} are not in MNE's standard_1005 montage",
                         hint='use 10-20 names or spatial_encoding="none"')
    metres = np.array([positions[name.lower()] for name in channel_names], dtype=np.float32)
    return torch.from_numpy(metres) * 100.0


class ElectrodeSelfAttention(nn.Module):
    """Pre-norm residual self-attention over the electrodes of each band graph, with RoSE.

    Queries and keys are rotated by the electrodes' 3-D montage positions (cm, a buffer, so a
    saved model does not need MNE to load), so scores depend on electrode *displacements*.
    forward(x (B, F, C, d)) -> (B, F, C, d).
    """

    def __init__(self, dim: int, n_heads: int, positions_cm: Tensor, norm: str):
        super().__init__()
        self.n_heads = n_heads
        self.norm = make_norm(norm, dim, eps=GNN_NORM_EPS)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("positions_cm", positions_cm.float().clone())
        self.register_buffer("theta", rose_frequencies(dim // n_heads, n_spatial=3), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(self.norm(x)).unflatten(-1, (3, self.n_heads, -1)).unbind(-3)
        q, k, v = (t.transpose(-2, -3) for t in (q, k, v))               # (B, F, H, C, Dh)
        q = apply_rose(q, self.positions_cm, 1.0, self.theta)
        k = apply_rose(k, self.positions_cm, 1.0, self.theta)
        out = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(out.transpose(-2, -3).flatten(-2))


class ConnectomeTokenizer(nn.Module):
    """Coherence/wPLI connectomes -> one token per band.

    ``node_embedding`` Linear(C -> d) of coherence rows, ``edge_embedding`` Linear(1 -> d) of the
    wPLI scalar (shared by all layers), ``n_layers`` x :class:`GnnBlock`, optional
    :class:`ElectrodeSelfAttention` (``spatial_encoding="rose"``), mean pool over electrodes,
    ``output_embedding`` Linear(d -> d), dropout. (The official code applies the output Linear
    per node before the mean; a Linear commutes with the mean, so we apply it once per band.)

    forward(coh, wpli): float32 (B, F, C, C) symmetric, zero diagonal -> tokens (B, F, d).
    """

    def __init__(self, n_channels: int, dim: int, n_layers: int, norm: str, edges: str,
                 dropout: float, spatial_encoding: str = "none",
                 channel_names: list[str] | None = None, n_heads: int = 4):
        super().__init__()
        check_choice("spatial_encoding", spatial_encoding, SPATIAL_ENCODINGS)
        self.n_channels = n_channels
        self.node_embedding = nn.Linear(n_channels, dim)
        self.edge_embedding = nn.Linear(1, dim)
        self.blocks = nn.ModuleList(GnnBlock(dim, norm, dropout) for _ in range(n_layers))
        self.register_buffer("adjacency", adjacency(n_channels, edges), persistent=False)
        self.spatial = None
        if spatial_encoding == "rose":
            if channel_names is None or len(channel_names) != n_channels:
                raise UsageError("spatial_encoding='rose' needs channel_names with one name per "
                                 f"channel ({n_channels})", hint="set ModelConfig.channel_names")
            self.spatial = ElectrodeSelfAttention(dim, n_heads, electrode_positions_cm(channel_names), norm)
        self.output_embedding = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, coh: Tensor, wpli: Tensor) -> Tensor:
        if coh.shape[-1] != self.n_channels:
            raise UsageError(f"connectomes have {coh.shape[-1]} channels, the model expects "
                             f"{self.n_channels}", hint="use data preprocessed like the training data")
        x = self.node_embedding(coh)                                      # (B, F, C, d)
        w = wpli.transpose(-1, -2)                                        # [..., i, j] = w_ji
        for block in self.blocks:
            x = block(x, w, self.edge_embedding, self.adjacency)
        if self.spatial is not None:
            x = self.spatial(x)
        return self.drop(self.output_embedding(x.mean(dim=-2)))
