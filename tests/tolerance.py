"""Tolerances for float32 results whose summation order may change between two computations.

Batch composition, fused vs explicit kernels and the number of threads change the order in which
float32 sums are accumulated, so two mathematically equal results differ by rounding. A reordered
sum of n terms differs by about sqrt(n) * eps * sum|terms| (eps = 2**-23, float32's spacing at 1),
and the model's outputs pass through a few such sums (tokenizer, attention, MLP, readout), each
with n in the hundreds. 64 eps (7.6e-6) covers sqrt(1024) * eps through two layers of them, and
the absolute part scales with the result's magnitude, so values near zero do not need an
arbitrary atol. A real defect (a wrong mask, a dropped term) moves results by far more.
"""

from __future__ import annotations

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)
REORDERED_SUM_ULPS = 64


def assert_float32_close(actual, desired, *, ulps: int = REORDERED_SUM_ULPS) -> None:
    """Assert ``actual`` equals ``desired`` up to float32 rounding of reordered sums.

    ``rtol = ulps * eps``; ``atol = ulps * eps * max|desired|`` (the scale of the whole result).
    Accepts tensors (detached here) or arrays; ``desired`` is broadcast to ``actual``'s shape.
    """
    actual = _as_array(actual)
    desired = np.broadcast_to(_as_array(desired), actual.shape)
    tolerance = ulps * FLOAT32_EPS
    scale = float(np.max(np.abs(desired))) if desired.size else 0.0
    np.testing.assert_allclose(actual, desired, rtol=tolerance, atol=tolerance * max(scale, 1e-30))


def _as_array(value) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)
