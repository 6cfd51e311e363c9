"""Where torch runs and how reproducibly (shared by ``train``, ``predict`` and ``explain``):
the ``--device`` choice, seeding, one CPU thread for the model's small operations, and the
``--precision`` choice (mixed precision; what stays float32 under it is the model's precision
policy, ``model/precision.py``).

Kept apart from the trainer so that ``predict`` and ``explain`` do not import scikit-learn
and the training loop to pick a device.
"""

from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from eegformer_cli.choices import DEVICES, PRECISIONS
from eegformer_cli.errors import UsageError, check_choice

#: Autocast dtype of each ``--precision`` (float32: no autocast).
AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU or any other name ->
    UsageError (listing the allowed names)."""
    check_choice("--device", name, DEVICES)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no CUDA GPU is available", hint="use --device cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def one_cpu_thread():
    """Run torch's CPU ops on one thread for the duration (restored after; re-entrant).

    The model's operations are small (batches of 16-channel graphs), so intra-op parallelism
    costs more in synchronisation than it gains. Measured on this project's 2-core machine,
    shared with other jobs: a default-model training step took 0.15-0.37 s on 1 thread against
    0.68-1.8 s on 2. One thread also fixes the order of float reductions, which keeps CPU runs
    bit-reproducible whatever the machine's core count.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def resolve_precision(name: str, device: torch.device, preset: str) -> str:
    """``--precision`` -> ``"float32"``, ``"bfloat16"`` or ``"float16"``.

    ``auto``: float32 on CPU (CPU bfloat16 is slower than float32 on CPUs without bfloat16
    arithmetic); on CUDA bfloat16 (float16 where the GPU lacks it) for ``default`` and float32
    for ``paper``: the official model ran float32, and its dRoFE multiplies queries and keys by
    raw ages (attention logits of ~4800 in a small trained paper model, where bfloat16's
    rounding before the attention switched the winning key in 0.7 % of attention rows;
    docs/benchmarks.md), so it stays float32 until a fully trained paper model has been
    measured under bfloat16; a user may ask for ``bfloat16``, whose attention the policy keeps
    in float32. Anything else -> UsageError.
    """
    check_choice("--precision", name, PRECISIONS)
    if name != "auto":
        return name
    if device.type != "cuda" or preset == "paper":
        return "float32"
    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def autocast(device: torch.device, precision: str):
    """The autocast context of a resolved ``precision`` on ``device`` (float32: none).

    The model keeps its attention, rotary angles, norms and explanations in float32 under it
    (``model/precision.py``).
    """
    if precision == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision])
