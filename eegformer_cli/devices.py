"""Where torch runs and how reproducibly (shared by ``train``, ``predict`` and ``explain``):
the ``--device`` choice, seeding, one CPU thread for the model's small operations, and mixed
precision on CUDA.

Kept apart from the trainer so that ``predict`` and ``explain`` do not import scikit-learn
and the training loop to pick a device.
"""

from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from eegformer_cli.errors import UsageError, check_choice
from eegformer_cli.training.config import DEVICES


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


def autocast(device: torch.device):
    """Mixed precision on CUDA (bfloat16 where supported, else float16), nothing on CPU.

    The model keeps its rotary angles in float32 under autocast.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)
