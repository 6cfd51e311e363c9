"""Rotary encodings, one family built on RoPE's rotation of feature pairs: RoSE (N-D real-world
coordinates) and dRoFE (frequency-band boundaries modulated by age and sex).

Every encoding is the same two steps, written as small pure functions:

1. *angles*: one angle (radians) per rotated pair of features, shape ``(..., T, D/2)``;
2. *rotation*: pair ``(x[2i], x[2i+1])`` is rotated by angle ``i`` (the interleaved layout of
   RoFormer and of the official XAIguiFormer code, ``rotate_every_two``), computed as a
   complex multiplication of the pair ``x[2i] + i x[2i+1]``.

The general map used by all of them is :func:`scaled_rotation`,
``x' = x * (scale * cos + offset) + rotate_every_two(x) * (scale * sin + offset)`` with
``rotate_every_two([x0, x1, x2, x3, ...]) = [-x1, x0, -x3, x2, ...]`` and cos, sin repeated
per pair; with
``scale = 1`` and ``offset = 0`` it is a true rotation (norm-preserving, relative: the score
``q(m) . k(n)`` depends only on the difference of the angles). The ``paper`` dRoFE uses
``scale = age`` (raw years) and ``offset = sex``, which is *not* a rotation
(reference-method.md, section 4.3).

Angles, cos and sin are always computed in (at least) float32, also under ``torch.autocast`` (the paper's
angles reach about 707 rad, where half precision has no significant digits left); the rotated
tensor is returned in the input's dtype.

The thin ``nn.Module`` at the bottom (:class:`BandRotaryEncoding`) holds the buffers and
parameters one transformer layer needs and calls these functions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from eegformer_cli.errors import UsageError

#: Default dRoFE: base of the geometric frequency schedule (radians per Hz run from 1 down to 1/100).
DROFE_DEFAULT_BASE = 100.0
#: Default dRoFE: initial value of the learnable age and sex frequency-modulation weights.
DROFE_DEFAULT_BETA_INIT = 0.1
#: Population used for z-scoring age when the training set gave no statistics (years).
FALLBACK_AGE_MEAN = 40.0
FALLBACK_AGE_STD = 20.0


# ----------------------------------------------------------------------------------------------
# rotation
# ----------------------------------------------------------------------------------------------


def _angle_dtype(*tensors: Tensor) -> torch.dtype:
    """float32, or float64 when any input is float64 (never half precision)."""
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype) if tensor.is_floating_point() else dtype
    return dtype


def rotation_factor(
    angles: Tensor, scale: Tensor | float = 1.0, offset: Tensor | float = 0.0
) -> Tensor:
    """Complex factor per feature pair: ``(scale cos + offset) + i (scale sin + offset)``.

    angles (..., T, D/2) radians; scale, offset float or Tensor broadcastable to (..., T, D/2)
    (e.g. (B, 1, 1, 1) per sample). Returns complex64 (complex128 if angles are float64)
    (..., T, D/2), computed with autocast off. ``scale = 1, offset = 0`` (the default) gives a
    true rotation.
    """
    with torch.autocast(device_type=angles.device.type, enabled=False):
        angles = angles.to(_angle_dtype(angles))
        return torch.complex(scale * torch.cos(angles) + offset, scale * torch.sin(angles) + offset)


def rotate(x: Tensor, factor: Tensor) -> Tensor:
    """Rotate (and, for the paper's dRoFE, scale and shift) the feature pairs of ``x``.

    x (..., T, D), any float dtype; factor from :func:`rotation_factor`. Pair
    ``(x[2i], x[2i+1])`` read as the complex number ``x[2i] + i x[2i+1]`` and multiplied by
    ``factor[i]``: the same four products and two sums as the official ``x * cos +
    rotate_every_two(x) * sin``, in one kernel instead of six (equal numbers,
    tests/test_rotary.py). Computed in the factor's
    precision (at least float32, also under autocast); returns x's shape and dtype.
    """
    with torch.autocast(device_type=x.device.type, enabled=False):
        real_dtype = torch.promote_types(x.dtype, factor.real.dtype)
        pairs = x.to(real_dtype).unflatten(-1, (-1, 2))
        if pairs.storage_offset() % 2 or any(stride % 2 for stride in pairs.stride()[:-1]):
            pairs = pairs.contiguous()  # view_as_complex needs whole complex numbers in memory
        rotated = torch.view_as_real(torch.view_as_complex(pairs) * factor).flatten(-2)
    return rotated.to(x.dtype)


def scaled_rotation(
    x: Tensor, angles: Tensor, scale: Tensor | float = 1.0, offset: Tensor | float = 0.0
) -> Tensor:
    """Rotate feature pairs of ``x`` (..., T, D) by ``angles`` (..., T, D/2), with the paper's
    optional scale and offset: ``x * (scale cos + offset) + rotate_every_two(x) * (scale sin +
    offset)``. Same shape and dtype as x; see :func:`rotation_factor`, :func:`rotate`."""
    return rotate(x, rotation_factor(angles, scale, offset))


# ----------------------------------------------------------------------------------------------
# RoSE: N-D real-world coordinates
# ----------------------------------------------------------------------------------------------


def rose_frequencies(dim: int, n_spatial: int, base: float = 100.0) -> Tensor:
    """Axial RoSE frequency matrix, float32 (dim/2, n_spatial), radians per coordinate unit.

    Pair i turns with axis ``i % n_spatial`` only, at ``base ** (-k / n_k)`` where k counts the
    pairs given to that axis (so every axis gets the full range from 1 down to about 1/base).
    """
    if dim % 2:
        raise UsageError(f"rotary dim must be even, got {dim}")
    n_pairs = dim // 2
    theta = torch.zeros(n_pairs, n_spatial)
    for axis in range(n_spatial):
        pairs = torch.arange(axis, n_pairs, n_spatial)
        steps = torch.arange(len(pairs), dtype=torch.float32)
        theta[pairs, axis] = base ** (-steps / max(len(pairs), 1))
    return theta


def rose_angles(coords: Tensor, spacing: Tensor | float, theta: Tensor) -> Tensor:
    """RoSE angles ``<coords * spacing, theta_i>``.

    coords (..., N, S) grid indices or positions; spacing scalar or (S,) physical size per unit
    (e.g. cm); theta (D/2, S) from :func:`rose_frequencies`. Returns (..., N, D/2) float32
    (float64 if coords or theta are).
    Angles are linear in the coordinates, so attention scores depend only on coordinate
    differences (translating every token leaves them unchanged).
    """
    dtype = _angle_dtype(coords, theta)
    scaled = coords.to(dtype) * spacing
    # elementwise, not a matmul: autocast would run a matmul in half precision
    return (scaled[..., None, :] * theta.to(dtype)).sum(dim=-1)


def apply_rose(x: Tensor, coords: Tensor, spacing: Tensor | float, theta: Tensor) -> Tensor:
    """RoSE: rotate x (..., N, D) by :func:`rose_angles`; returns the same shape and dtype."""
    return scaled_rotation(x, rose_angles(coords, spacing, theta))


# ----------------------------------------------------------------------------------------------
# dRoFE: frequency-band boundaries, age and sex
# ----------------------------------------------------------------------------------------------


def drofe_paper_frequencies(head_dim: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Official 'pixel' frequencies ``pi * linspace(1, 5, head_dim / 4)``; (head_dim/4,) in ``dtype``."""
    if head_dim % 4:
        raise UsageError(
            f"dRoFE needs a head dimension divisible by 4, got {head_dim}",
            hint="choose d_model / n_heads divisible by 4",
        )
    return math.pi * torch.linspace(1.0, 5.0, head_dim // 4, dtype=dtype)


def drofe_paper_angles(band_edges_hz: Tensor, theta: Tensor) -> Tensor:
    """Official dRoFE angles: band (f_l, f_u) in Hz (T, 2), theta (D/4,) -> (T, D/2) float32.

    For each theta_j the pair angles are ``[f_l theta_j, f_u theta_j]`` (feature layout
    ``[f_l, f_l, f_u, f_u]`` per theta_j, as in the official code).
    """
    edges = band_edges_hz.to(_angle_dtype(band_edges_hz, theta))
    return torch.stack((edges[:, :1] * theta, edges[:, 1:] * theta), dim=-1).flatten(-2)


def drofe_paper_demographics(age: Tensor, sex: Tensor, age_mean: Tensor | float) -> Tensor:
    """Paper dRoFE's demographic inputs (B, 2) = (age factor, sex addend), float32.

    Age stays raw years (the official code multiplies cos/sin by it); sex is 0 (M) or 1 (F).
    Rule for unknowns (ours, the official code has none): unknown age (NaN) -> the training-set
    mean age when known (``age_mean`` finite), else 1.0 (the neutral factor); unknown sex -> 0
    (the neutral addend). The explanation baseline is (0, 0), as in the official code.
    """
    age, sex = age.float(), sex.float()
    age_mean = torch.as_tensor(age_mean, dtype=torch.float32, device=age.device)
    fill = torch.where(torch.isfinite(age_mean), age_mean, torch.ones_like(age_mean))
    age = torch.where(torch.isnan(age), fill, age)
    sex = torch.nan_to_num(sex, nan=0.0)
    return torch.stack((age, sex), dim=-1)


def drofe_default_demographics(
    age: Tensor, sex: Tensor, age_mean: Tensor | float, age_std: Tensor | float
) -> Tensor:
    """Default dRoFE's demographic inputs (B, 2) = (z-scored age, centred sex), float32.

    ``z = (age - age_mean) / age_std`` with the training-set statistics (the fallback
    population 40 +- 20 years when they are unknown/NaN); ``s = +0.5`` female, ``-0.5`` male.
    Unknown age or sex (NaN) -> 0, the population average; (0, 0) is also the explanation
    baseline.
    """
    age, sex = age.float(), sex.float()
    age_mean = torch.as_tensor(age_mean, dtype=torch.float32, device=age.device)
    age_std = torch.as_tensor(age_std, dtype=torch.float32, device=age.device)
    age_mean = torch.where(
        torch.isfinite(age_mean), age_mean, torch.full_like(age_mean, FALLBACK_AGE_MEAN)
    )
    age_std = torch.where(
        torch.isfinite(age_std) & (age_std > 0), age_std, torch.full_like(age_std, FALLBACK_AGE_STD)
    )
    z_age = torch.nan_to_num((age - age_mean) / age_std, nan=0.0)
    s_sex = torch.nan_to_num(sex - 0.5, nan=0.0)
    return torch.stack((z_age, s_sex), dim=-1)


def drofe_default_frequencies(head_dim: int, base: float = DROFE_DEFAULT_BASE) -> Tensor:
    """Default dRoFE frequency matrix (head_dim/2, 2), radians per Hz: RoSE over (f_l, f_u).

    Half of the pairs turn with f_l, half with f_u, from 1 rad/Hz down to 1/base rad/Hz, so a
    45 Hz band edge gives at most 45 rad (the paper: 707 rad) and 1 Hz differences are resolved
    by the fast pairs while the slow pairs see the whole spectrum without wrapping.
    """
    return rose_frequencies(head_dim, n_spatial=2, base=base)


def drofe_default_angles(
    band_edges_hz: Tensor, theta: Tensor, demographics: Tensor, beta: Tensor
) -> Tensor:
    """Default dRoFE angles (B, T, D/2) float32: a true rotation whose speed depends on age/sex.

    ``angle = <(f_l, f_u), theta_i> * exp(beta_age * z_age + beta_sex * s_sex)``.
    band_edges_hz (T, 2), theta (D/2, 2), demographics (B, 2) from
    :func:`drofe_default_demographics`, beta (2,). Demographics scale the frequencies (a
    per-sample constant phase would cancel in q . k); the unknown/baseline demographics (0, 0)
    give factor 1.
    """
    dtype = _angle_dtype(demographics, beta, theta)
    speed = torch.exp((demographics.to(dtype) * beta.to(dtype)).sum(dim=-1))  # (B,)
    base_angles = rose_angles(band_edges_hz, 1.0, theta)  # (T, D/2)
    return speed[:, None, None] * base_angles


# ----------------------------------------------------------------------------------------------
# the thin module one transformer layer uses
# ----------------------------------------------------------------------------------------------


class BandRotaryEncoding(nn.Module):
    """Rotary encoding of the band tokens' queries and keys (one instance per transformer layer).

    ``encoding``:
      - ``"drofe_paper"``: official dRoFE (pixel theta, raw age multiplies, sex adds; not a rotation);
      - ``"drofe_default"``: a true rotation over (f_l, f_u) whose speed is modulated by z-scored
        age and centred sex with learnable weights ``beta`` (2,), initialised to 0.1 each;
      - ``"none"``: identity (ablation).

    ``forward(q, k, demographics)``: q, k (B, heads, T, head_dim); demographics (B, 2) as made by
    :func:`drofe_paper_demographics` / :func:`drofe_default_demographics`. Returns (q', k'),
    same shapes and dtypes.
    """

    band_edges_hz: Tensor
    theta: Tensor

    def __init__(self, encoding: str, head_dim: int, band_edges_hz: Tensor):
        super().__init__()  # ``encoding`` was checked once, by ModelConfig.validate
        self.encoding = encoding
        self.register_buffer("band_edges_hz", band_edges_hz.float().clone(), persistent=False)
        if encoding == "drofe_paper":
            self.register_buffer("theta", drofe_paper_frequencies(head_dim), persistent=False)
        elif encoding == "drofe_default":
            self.register_buffer("theta", drofe_default_frequencies(head_dim), persistent=False)
            self.beta = nn.Parameter(torch.full((2,), DROFE_DEFAULT_BETA_INIT))

    def forward(self, q: Tensor, k: Tensor, demographics: Tensor) -> tuple[Tensor, Tensor]:
        if self.encoding == "none":
            return q, k
        if self.encoding == "drofe_paper":
            angles = drofe_paper_angles(self.band_edges_hz, self.theta)  # (T, D/2)
            factor = rotation_factor(
                angles,
                scale=demographics[:, 0, None, None, None],
                offset=demographics[:, 1, None, None, None],
            )
        else:
            angles = drofe_default_angles(self.band_edges_hz, self.theta, demographics, self.beta)
            factor = rotation_factor(angles[:, None])  # (B, 1, T, D/2)
        return rotate(q, factor), rotate(k, factor)
