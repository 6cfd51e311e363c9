"""Graph mixup / cutmix of the paper's code (reference-method.md, section 5), on dense
connectivity batches.

Per batch, with probability ``prob``: draw lambda ~ Beta(beta, beta) and a partner for every
sample (a random permutation of the batch); then, with probability ``cutmix_prob`` CutMix,
else Mixup. Labels (soft targets) and demographics are mixed with the same lambda.

- ``graphon`` (paper): both graphs are first replaced by their USVT graphon estimate
  (:func:`usvt`: singular values below 0.2·sqrt(N) zeroed, result clipped to the matrix's own
  [0, max] range, as G-Mixup's ``universal_svd``), for coherence and wPLI, band by band.
  Mixup: lambda·G_a + (1 - lambda)·G_b. CutMix: a square block of channel pairs (rows R x
  columns S, and its mirror S x R so the result stays symmetric) of the sample's own matrix is
  taken from the partner's graphon; lambda is then set to the fraction of entries kept.

Choices the paper's code leaves open, made here and documented: one lambda per batch (timm
style); the diagonal is set back to zero after the graphon step (the connectome contract);
a mixed demographic is NaN (unknown) when either partner's is unknown.

Random numbers come from a ``numpy.random.Generator`` the caller seeds, so runs repeat exactly.
"""

from __future__ import annotations

import numpy as np
import torch

USVT_THRESHOLD = 0.2


def usvt(matrices: torch.Tensor, threshold: float = USVT_THRESHOLD) -> torch.Tensor:
    """Universal singular value thresholding of symmetric matrices (..., N, N) -> same shape.

    Singular values below ``threshold * sqrt(N)`` are zeroed; the estimate is symmetrised,
    clipped to [0, max of the input matrix] and given a zero diagonal.
    """
    n = matrices.shape[-1]
    u, s, vh = torch.linalg.svd(matrices.double())
    s = torch.where(s < threshold * n**0.5, torch.zeros_like(s), s)
    estimate = (u * s.unsqueeze(-2)) @ vh
    estimate = 0.5 * (estimate + estimate.transpose(-1, -2))
    upper = matrices.double().amax(dim=(-2, -1), keepdim=True)
    estimate = torch.minimum(estimate.clamp(min=0.0), upper)
    estimate = estimate * (1.0 - torch.eye(n, dtype=estimate.dtype, device=estimate.device))
    return estimate.to(matrices.dtype)


def cut_block_mask(n: int, lam: float, rng: np.random.Generator) -> np.ndarray:
    """Boolean (N, N) mask of the entries replaced by CutMix for mixing weight ``lam``.

    A square block of side ``round(N * sqrt(1 - lam))`` at a random position (clipped to the
    matrix, as timm's ``rand_bbox``) plus its mirror image.
    """
    side = int(round(n * np.sqrt(1.0 - lam)))
    center_r, center_c = rng.integers(n), rng.integers(n)
    r0, r1 = np.clip([center_r - side // 2, center_r + side - side // 2], 0, n)
    c0, c1 = np.clip([center_c - side // 2, center_c + side - side // 2], 0, n)
    mask = np.zeros((n, n), dtype=bool)
    mask[r0:r1, c0:c1] = True
    return mask | mask.T


def _mix(a: torch.Tensor, b: torch.Tensor, lam: float) -> torch.Tensor:
    return lam * a + (1.0 - lam) * b


def mix_batch(
    coh: torch.Tensor,
    wpli: torch.Tensor,
    age: torch.Tensor,
    sex: torch.Tensor,
    targets: torch.Tensor,
    kind: str,
    prob: float,
    cutmix_prob: float,
    beta: float,
    rng: np.random.Generator,
):
    """Augment one batch; returns new ``(coh, wpli, age, sex, targets)``.

    ``coh``, ``wpli`` float32 (B, n_bands, C, C); ``age``, ``sex`` float32 (B,) (NaN = unknown);
    ``targets`` float32 (B, K) soft labels. ``kind`` "graphon" | "none".
    """
    if kind == "none" or len(coh) < 2 or rng.random() >= prob:
        return coh, wpli, age, sex, targets
    lam = float(rng.beta(beta, beta))
    perm = torch.from_numpy(rng.permutation(len(coh))).to(coh.device)
    use_cutmix = rng.random() < cutmix_prob
    source_coh, source_wpli = usvt(coh), usvt(wpli)
    if use_cutmix:
        mask_np = cut_block_mask(coh.shape[-1], lam, rng)
        lam = 1.0 - float(mask_np.mean())
        mask = torch.from_numpy(mask_np).to(coh.device)
        new_coh = torch.where(mask, source_coh[perm], coh)
        new_wpli = torch.where(mask, source_wpli[perm], wpli)
    else:
        new_coh = _mix(source_coh, source_coh[perm], lam)
        new_wpli = _mix(source_wpli, source_wpli[perm], lam)
    return (
        new_coh,
        new_wpli,
        _mix(age, age[perm], lam),
        _mix(sex, sex[perm], lam),
        _mix(targets, targets[perm], lam),
    )
