"""Rotary encodings: the worked RoPE example, RoSE translation invariance, dRoFE paper against a
direct transcription of the official formula, the default dRoFE's rotation properties, and the
demographic rules for unknown values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eegformer_cli.errors import UsageError
from eegformer_cli.model.rotary import (
    FALLBACK_AGE_MEAN,
    FALLBACK_AGE_STD,
    BandRotaryEncoding,
    apply_rose,
    drofe_default_angles,
    drofe_default_demographics,
    drofe_default_frequencies,
    drofe_paper_demographics,
    drofe_paper_frequencies,
    rose_frequencies,
    scaled_rotation,
)

PAPER_EDGES = torch.tensor(
    [[2, 4], [4, 8], [8, 10], [10, 12], [12, 18], [18, 21], [21, 30], [30, 45], [4 / 12, 8 / 30]],
    dtype=torch.float64,
)
finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False)


def vectors(dim: int, n: int = 1):
    return st.lists(st.floats(-10, 10, allow_nan=False), min_size=dim * n, max_size=dim * n).map(
        lambda values: torch.tensor(values, dtype=torch.float64).reshape(n, dim)
    )


# ---------------------------------------------------------------------------------------------
# RoPE: the rotation every encoding uses, at 1-D positions
# ---------------------------------------------------------------------------------------------


def rope_frequencies(dim: int, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's ``theta_i = base ** (-2 i / dim)``, (dim/2,) float64."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """RoPE: pair i of the token at position p rotated by ``p * theta_i``."""
    return scaled_rotation(x, positions.to(theta.dtype)[..., None] * theta)


def test_rope_worked_example():
    """../shared/seeds/002: x2 at position 2 and x3 at position 3, theta = (1, 0.01)."""
    theta = rope_frequencies(4)
    np.testing.assert_allclose(theta, [1.0, 0.01], rtol=1e-6)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 3.5, 4.5]], dtype=torch.float64)
    rotated = apply_rope(x, torch.tensor([2, 3]), theta)
    np.testing.assert_allclose(rotated[0], [-2.2347, 0.0770, 2.9194, 4.0592], atol=5e-5)
    np.testing.assert_allclose(rotated[1], [-1.8378, -2.2633, 3.3634, 4.6030], atol=5e-5)
    # The seed prints 32.4604 for the score, but its last two products are arithmetic slips
    # (2.9194 * 3.3634 = 9.8191, not 9.8252; 4.0592 * 4.6030 = 18.6845, not 18.7025): the dot
    # product of its own rotated vectors is 32.4363, which we check.
    score = float(rotated[0] @ rotated[1])
    assert round(score, 4) == pytest.approx(32.4363, abs=1e-4)
    # relative: the same score with both tokens moved to positions 0 and 1
    shifted = apply_rope(x, torch.tensor([0, 1]), theta)
    assert float(shifted[0] @ shifted[1]) == pytest.approx(score, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    q=vectors(8),
    k=vectors(8),
    m=st.integers(-100, 100),
    n=st.integers(-100, 100),
    shift=st.integers(-100, 100),
)
def test_rope_score_depends_only_on_position_difference(q, k, m, n, shift):
    theta = rope_frequencies(8).double()

    def score(pos_q, pos_k):
        return float(
            apply_rope(q, torch.tensor([pos_q]), theta)
            @ apply_rope(k, torch.tensor([pos_k]), theta).T
        )

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), rel=1e-6, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(x=vectors(8, 3), angles=st.lists(finite, min_size=12, max_size=12))
def test_true_rotation_preserves_norm(x, angles):
    rotated = scaled_rotation(x, torch.tensor(angles, dtype=torch.float64).reshape(3, 4))
    np.testing.assert_allclose(rotated.norm(dim=-1), x.norm(dim=-1), rtol=1e-9, atol=1e-9)


def _official_rotation(x, angles, scale, offset):
    """The official code's written-out form: x * cos + rotate_every_two(x) * sin, cos/sin repeated per pair."""
    cos = (scale * torch.cos(angles) + offset).repeat_interleave(2, dim=-1)
    sin = (scale * torch.sin(angles) + offset).repeat_interleave(2, dim=-1)
    pairs = x.unflatten(-1, (-1, 2))
    every_two = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return x * cos + every_two * sin


@pytest.mark.parametrize("scale, offset", [(1.0, 0.0), (37.0, 1.0)])
def test_complex_rotation_equals_the_official_written_out_form(scale, offset):
    """Values and gradients, on the strided head view the attention passes (q of a fused qkv)."""
    generator = torch.Generator().manual_seed(0)
    qkv = torch.randn(3, 9, 3 * 16, dtype=torch.float64, generator=generator, requires_grad=True)
    q = qkv[..., 16:32].unflatten(-1, (2, 8)).transpose(1, 2)  # (B, H, T, Dh), strided
    angles = 10 * torch.rand(3, 1, 9, 4, dtype=torch.float64, generator=generator)
    ours = scaled_rotation(q, angles, scale, offset)
    official = _official_rotation(q, angles, scale, offset)
    torch.testing.assert_close(ours, official, rtol=0, atol=1e-12)
    weights = torch.randn(ours.shape, dtype=torch.float64, generator=generator)
    (grad_ours,) = torch.autograd.grad((ours * weights).sum(), qkv)
    (grad_official,) = torch.autograd.grad((official * weights).sum(), qkv)
    torch.testing.assert_close(grad_ours, grad_official, rtol=0, atol=1e-12)
    odd_start = torch.randn(3, 9, 17, dtype=torch.float64)[..., 1:]  # storage offset 1
    pair_angles = torch.rand(3, 9, 8, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(
        scaled_rotation(odd_start, pair_angles),
        _official_rotation(odd_start, pair_angles, 1.0, 0.0),
    )


def test_odd_rotary_dim_is_refused():
    with pytest.raises(UsageError, match="even"):
        rose_frequencies(5, n_spatial=2)


def test_angles_stay_float32_under_autocast():
    """Half-precision angles near 700 rad would be off by more than 0.1 rad."""
    x = torch.randn(2, 9, 8)
    angles = torch.full((9, 4), 707.3)
    expected = scaled_rotation(x, angles)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = scaled_rotation(x.bfloat16(), angles)
    assert got.dtype == torch.bfloat16
    np.testing.assert_allclose(got.float(), expected, atol=0.05)
    crude = scaled_rotation(x.bfloat16(), angles.bfloat16().float())  # what bf16 angles would give
    assert (crude.float() - expected).abs().max() > 0.1


# ---------------------------------------------------------------------------------------------
# RoSE
# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    q=vectors(12, 5),
    k=vectors(12, 5),
    coords=st.lists(finite, min_size=15, max_size=15),
    translation=st.lists(finite, min_size=3, max_size=3),
    spacing=st.floats(0.1, 3.0),
)
def test_rose_scores_invariant_to_translation(q, k, coords, translation, spacing):
    theta = rose_frequencies(12, n_spatial=3).double()
    coords = torch.tensor(coords, dtype=torch.float64).reshape(5, 3)
    moved = coords + torch.tensor(translation, dtype=torch.float64)

    def scores(c):
        return apply_rose(q, c, spacing, theta) @ apply_rose(k, c, spacing, theta).T

    np.testing.assert_allclose(scores(moved), scores(coords), rtol=1e-6, atol=1e-6)


def test_rose_depends_on_spacing_and_every_axis():
    theta = rose_frequencies(12, n_spatial=3)
    assert theta.shape == (6, 3) and (theta > 0).sum(dim=0).tolist() == [2, 2, 2]
    q = torch.randn(2, 12)
    coords = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    assert not torch.allclose(apply_rose(q, coords, 1.0, theta), apply_rose(q, coords, 2.0, theta))
    for axis in range(3):
        moved = coords.clone()
        moved[1, axis] += 1.0
        assert not torch.allclose(
            apply_rose(q, coords, 1.0, theta), apply_rose(q, moved, 1.0, theta)
        )


# ---------------------------------------------------------------------------------------------
# dRoFE, paper
# ---------------------------------------------------------------------------------------------


def official_drofe_transcription(x, band_edges, age, sex):
    """Reference section 4.3 written out pair by pair with loops (independent of rotary.py).

    theta_j = pi * linspace(1, 5, D/4); per theta_j the angle layout is [f_l, f_l, f_u, f_u];
    q'_2i = q_2i (a cos phi_2i + g) - q_2i+1 (a sin phi_2i + g),
    q'_2i+1 = q_2i+1 (a cos phi_2i+1 + g) + q_2i (a sin phi_2i+1 + g).
    x (B, H, T, D) float64, band_edges (T, 2), age, sex (B,).
    """
    batch, heads, tokens, dim = x.shape
    theta = [math.pi * (1 + 4 * j / (dim // 4 - 1)) for j in range(dim // 4)]
    out = torch.empty_like(x)
    for b in range(batch):
        a, g = float(age[b]), float(sex[b])
        for t in range(tokens):
            f_l, f_u = float(band_edges[t, 0]), float(band_edges[t, 1])
            phi = []
            for th in theta:
                phi += [f_l * th, f_l * th, f_u * th, f_u * th]
            for h in range(heads):
                for i in range(dim // 2):
                    q0, q1 = float(x[b, h, t, 2 * i]), float(x[b, h, t, 2 * i + 1])
                    out[b, h, t, 2 * i] = q0 * (a * math.cos(phi[2 * i]) + g) - q1 * (
                        a * math.sin(phi[2 * i]) + g
                    )
                    out[b, h, t, 2 * i + 1] = q1 * (a * math.cos(phi[2 * i + 1]) + g) + q0 * (
                        a * math.sin(phi[2 * i + 1]) + g
                    )
    return out


def test_drofe_paper_equals_official_formula():
    torch.manual_seed(0)
    encoding = BandRotaryEncoding("drofe_paper", head_dim=16, band_edges_hz=PAPER_EDGES)
    # exact (float64) frequencies and band edges, so the comparison can be tight
    encoding.theta = drofe_paper_frequencies(16, dtype=torch.float64)
    encoding.band_edges_hz = PAPER_EDGES
    np.testing.assert_allclose(
        drofe_paper_frequencies(32),
        [3.1416, 4.9368, 6.7320, 8.5272, 10.3224, 12.1176, 13.9128, 15.7080],
        atol=1e-4,
    )  # the 8 values listed in reference section 4.3
    q, k = (
        torch.randn(2, 2, 9, 16, dtype=torch.float64),
        torch.randn(2, 2, 9, 16, dtype=torch.float64),
    )
    age, sex = torch.tensor([34.0, 71.5]), torch.tensor([1.0, 0.0])
    demographics = drofe_paper_demographics(age, sex, age_mean=float("nan"))
    q_rot, k_rot = encoding(q, k, demographics.double())
    np.testing.assert_allclose(
        q_rot, official_drofe_transcription(q, PAPER_EDGES, age, sex), rtol=1e-9, atol=1e-9
    )
    np.testing.assert_allclose(
        k_rot, official_drofe_transcription(k, PAPER_EDGES, age, sex), rtol=1e-9, atol=1e-9
    )


def test_drofe_paper_is_not_a_rotation_with_female_sex():
    """Documents the defect: sex is added to cos and sin, so norms change (section 8, bug 2)."""
    encoding = BandRotaryEncoding("drofe_paper", head_dim=16, band_edges_hz=PAPER_EDGES)
    q = torch.randn(1, 1, 9, 16, dtype=torch.float64)
    male = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # age factor 1, sex 0: a rotation
    female = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    np.testing.assert_allclose(encoding(q, q, male)[0].norm(dim=-1), q.norm(dim=-1), rtol=1e-5)
    ratio = encoding(q, q, female)[0].norm(dim=-1) / q.norm(dim=-1)
    assert (ratio - 1).abs().max() > 0.1


def test_drofe_paper_unknown_demographics_rule():
    age = torch.tensor([50.0, float("nan")])
    sex = torch.tensor([float("nan"), 1.0])
    without_stats = drofe_paper_demographics(age, sex, age_mean=float("nan"))
    np.testing.assert_array_equal(without_stats, [[50.0, 0.0], [1.0, 1.0]])
    with_stats = drofe_paper_demographics(age, sex, age_mean=torch.tensor(38.5))
    np.testing.assert_array_equal(with_stats, [[50.0, 0.0], [38.5, 1.0]])


def test_drofe_paper_needs_head_dim_divisible_by_4():
    with pytest.raises(UsageError, match="divisible by 4"):
        drofe_paper_frequencies(18)


# ---------------------------------------------------------------------------------------------
# dRoFE, default
# ---------------------------------------------------------------------------------------------


def test_drofe_default_demographics_rule():
    age = torch.tensor([60.0, float("nan"), 20.0])
    sex = torch.tensor([1.0, 0.0, float("nan")])
    z = drofe_default_demographics(
        age, sex, age_mean=torch.tensor(40.0), age_std=torch.tensor(10.0)
    )
    np.testing.assert_allclose(z, [[2.0, 0.5], [0.0, -0.5], [-2.0, 0.0]])
    fallback = drofe_default_demographics(age, sex, float("nan"), float("nan"))
    assert fallback[0, 0] == pytest.approx((60.0 - FALLBACK_AGE_MEAN) / FALLBACK_AGE_STD)


@settings(max_examples=30, deadline=None)
@given(
    q=vectors(16, 9),
    z_age=st.floats(-4, 4),
    sex=st.sampled_from([-0.5, 0.0, 0.5]),
    beta=st.lists(st.floats(-1, 1), min_size=2, max_size=2),
)
def test_drofe_default_is_a_rotation_for_any_demographics(q, z_age, sex, beta):
    theta = drofe_default_frequencies(16).double()
    demographics = torch.tensor([[z_age, sex]], dtype=torch.float64)
    angles = drofe_default_angles(
        PAPER_EDGES, theta, demographics, torch.tensor(beta, dtype=torch.float64)
    )
    rotated = scaled_rotation(q[None], angles)
    np.testing.assert_allclose(rotated[0].norm(dim=-1), q.norm(dim=-1), rtol=1e-9)


def test_drofe_default_demographics_change_the_angles_and_unknown_is_neutral():
    theta = drofe_default_frequencies(16)
    beta = torch.tensor([0.1, 0.1])
    base = drofe_default_angles(PAPER_EDGES, theta, torch.zeros(1, 2), beta)
    np.testing.assert_allclose(base[0], PAPER_EDGES.float() @ theta.T, rtol=1e-6)
    older = drofe_default_angles(PAPER_EDGES, theta, torch.tensor([[1.0, 0.0]]), beta)
    np.testing.assert_allclose(older, base * math.exp(0.1), rtol=1e-6)
    assert float(base.abs().max()) <= 45.0 + 1e-4  # 1 rad/Hz at most: 45 Hz -> 45 rad


def test_unknown_frequency_encoding_lists_allowed_values():
    from eegformer_cli.model import ModelConfig

    with pytest.raises(UsageError, match="drofe_paper"):  # checked where it enters: the config
        ModelConfig(4, ["theta"], [(4.0, 8.0)], 2, frequency_encoding="sinusoidal")
