"""The precision policy: what the model computes in float32 under mixed precision.

``train`` and ``predict`` may run the model under ``torch.autocast`` (bfloat16 or float16,
``--precision``; ``model/devices.py`` picks it). Autocast runs matrix products in the half type and
keeps some other operations in float32, but CPU and CUDA keep different ones: CUDA's autocast
computes softmax, exp, sums and norms in float32, CPU's leaves them in the input's dtype. So the
model casts explicitly, and a CPU bfloat16 run computes the sensitive operations in the same
dtypes as a CUDA run (what lets tests without a GPU check the policy):

- the transformer's attention, from the qkv projection to the output projection (the paper's
  dRoFE multiplies queries and keys by raw ages, so logits reach the thousands, where a
  bfloat16 step is 8 or more; at its size, (B, T=9, d), it is a small part of a step);
- the rotary angles, cos and sin (``rotary.py``; the paper's angles reach about 707 rad);
- every RMS norm (its output stays float32; the next Linear casts it again);
- the explanations (the transformer's layer inputs are norm outputs, and its first input is
  cast here, so DeepLIFT's products and gradients are float32).

What remains in the half type: the Linears of the tokenizer's message passing, of the
transformer's feed-forward and of the head. Outside autocast every function here leaves float32
and float64 tensors as they are.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import Tensor

HALF_DTYPES = (torch.float16, torch.bfloat16)
#: Whether the policy applies (:func:`policy_off` clears it for the duration).
_ENABLED = [True]


@contextlib.contextmanager
def policy_off():
    """Within the block the policy does nothing (the model runs as autocast alone would run
    it): how a test and ``benchmarks/bench_precision.py`` measure what the policy changes."""
    _ENABLED[0] = False
    try:
        yield
    finally:
        _ENABLED[0] = True


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` in float32 when it is float16/bfloat16, else ``x`` itself (float64 stays)."""
    return x.float() if x.dtype in HALF_DTYPES and _ENABLED[0] else x


def float32_forward(method):
    """Decorate a module's ``forward``: half-precision tensor arguments are cast to float32 and
    autocast is off inside, so the whole module computes in (at least) float32 and returns
    float32 under autocast. Outside autocast it changes nothing."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if not _ENABLED[0]:
            return method(self, *args, **kwargs)
        args = tuple(at_least_float32(a) if isinstance(a, Tensor) else a for a in args)
        kwargs = {k: at_least_float32(v) if isinstance(v, Tensor) else v for k, v in kwargs.items()}
        device = next((a.device.type for a in args if isinstance(a, Tensor)), "cpu")
        if not torch.is_autocast_enabled(device):
            return method(self, *args, **kwargs)
        with torch.autocast(device_type=device, enabled=False):
            return method(self, *args, **kwargs)

    return wrapper
