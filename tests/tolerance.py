"""Tolerances for results whose summation order may change between two computations: float32
tensors (:func:`assert_float32_close`) and the float64 numbers of a JSON file computed again
(:func:`assert_same_json`).

Batch composition, fused vs explicit kernels and the number of threads change the order in which
float32 sums are accumulated, so two mathematically equal results differ by rounding. A reordered
sum of n terms differs by about sqrt(n) * eps * sum|terms| (eps = 2**-23, float32's spacing at 1),
and the model's outputs pass through a few such sums (tokenizer, attention, MLP, readout), each
with n in the hundreds. 64 eps (7.6e-6) covers sqrt(1024) * eps through two layers of them, and
the absolute part scales with the result's magnitude, so values near zero do not need an
arbitrary atol. A real defect (a wrong mask, a dropped term) moves results by far more.
"""

from __future__ import annotations

import math

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)
REORDERED_SUM_ULPS = 64
#: Relative and absolute tolerance for float64 numbers computed again by the same code on
#: another CPU, with another BLAS kernel or thread count: vector widths and libm change the last
#: bits (a calibration slope differed in its 15th significant digit, 1e-15 relative, between two
#: x86 CPUs), iterative fits carry that on; a changed figure (another fold, another rounding of
#: a mean) moves it by far more than 1e-9.
RECOMPUTED_RTOL = 1e-9
RECOMPUTED_ATOL = 1e-12


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


def assert_same_json(
    actual, desired, *, rtol: float = RECOMPUTED_RTOL, atol: float = RECOMPUTED_ATOL
) -> None:
    """Assert two parsed JSON trees (``json.loads``) are the same document computed again:
    objects with the same keys in the same order, arrays of the same length, strings,
    booleans, None and integers equal, and floats equal up to ``rtol`` / ``atol`` (NaN equal to
    NaN). The AssertionError names the first place that differs (``calibration.models[0]``)."""
    _assert_same_json(actual, desired, rtol, atol, "")


def _assert_same_json(actual, desired, rtol: float, atol: float, where: str) -> None:
    place = where or "the document"
    if type(actual) is not type(desired):
        raise AssertionError(
            f"{place}: {type(actual).__name__} {actual!r} != {type(desired).__name__} {desired!r}"
        )
    if isinstance(desired, dict):
        if list(actual) != list(desired):
            raise AssertionError(f"{place}: keys {list(actual)} != {list(desired)}")
        for key in desired:
            _assert_same_json(actual[key], desired[key], rtol, atol, f"{where}.{key}".lstrip("."))
    elif isinstance(desired, list):
        if len(actual) != len(desired):
            raise AssertionError(f"{place}: {len(actual)} items != {len(desired)}")
        for index, (a, d) in enumerate(zip(actual, desired)):
            _assert_same_json(a, d, rtol, atol, f"{where}[{index}]")
    elif isinstance(desired, float):
        same = math.isclose(actual, desired, rel_tol=rtol, abs_tol=atol)
        if not (same or (math.isnan(actual) and math.isnan(desired))):
            raise AssertionError(f"{place}: {actual!r} != {desired!r} (rtol {rtol}, atol {atol})")
    elif actual != desired:
        raise AssertionError(f"{place}: {actual!r} != {desired!r}")
