"""Connectome tokenizer: GINE message passing over each band's graph, one token per band.

A sample is ``n_bands`` complete graphs over the C electrodes. Node (band f, electrode i) has the
coherence row ``coh[f, i, :]`` (C,) as features; edge j -> i carries the scalar ``wpli[f, j, i]``.
The official code (reference section 4.1) runs PyG ``GINEConv`` on a sparse edge list. The graphs
are small and complete, so we use dense batched tensors instead: the same numbers (tested against
an explicit loop) without torch_geometric, and vectorised over batch and bands.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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


class DenseGINEConv(nn.Module):
    """GINE (PyG ``GINEConv``, ``train_eps=True``) on dense graphs.

    ``out_i = MLP((1 + eps) x_i + sum_j A_ij ReLU(x_j + e_ji))`` with MLP = Linear -> GELU -> Linear
    and eps a learnable scalar initialised to 0.

    forward(x (B, F, C, d), edge (B, F, C, C, d) with ``edge[..., i, j, :] = e_ji``,
    adjacency (C, C)) -> (B, F, C, d).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, dim)

    def forward(self, x: Tensor, edge: Tensor, adjacency: Tensor) -> Tensor:
        messages = torch.relu(x.unsqueeze(-3) + edge)                 # [..., i, j, :] = x_j + e_ji
        aggregated = torch.einsum("ij,bfijd->bfid", adjacency, messages)
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

    def forward(self, x: Tensor, edge: Tensor, adjacency: Tensor) -> Tensor:
        return x + self.drop(self.act(self.expand(self.norm(self.conv(x, edge, adjacency)))))


def electrode_positions_cm(channel_names: list[str]) -> Tensor:
    """3-D positions (C, 3) float32 in cm of ``channel_names`` in MNE's ``standard_1005`` montage.

    Raises :class:`UsageError` naming the channels the montage does not know.
    """
    import mne

    montage = mne.channels.make_standard_montage("standard_1005")
    positions = {name.lower(): xyz for name, xyz in montage.get_positions()["ch_pos"].items()}
    unknown = [name for name in channel_names if name.lower() not in positions]
    if unknown:
        raise UsageError(f"channel_names {unknown} are not in MNE's standard_1005 montage",
                         hint='use 10-20 names or spatial_encoding="none"')
    return torch.tensor([positions[name.lower()] for name in channel_names],
                        dtype=torch.float32) * 100.0


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
    wPLI scalar (embedded once, shared by all layers), ``n_layers`` x :class:`GnnBlock`, optional
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
        edge = self.edge_embedding(wpli.transpose(-1, -2).unsqueeze(-1))  # [.., i, j, :] = e_ji
        for block in self.blocks:
            x = block(x, edge, self.adjacency)
        if self.spatial is not None:
            x = self.spatial(x)
        return self.drop(self.output_embedding(x.mean(dim=-2)))
