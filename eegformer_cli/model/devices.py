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


#: ``--device auto`` trains on CUDA only a transformer path of at least this many parameters.
#: Measured against 2 CPU cores (docs/benchmarks.md, "GPU and mixed precision"): the
#: ``default`` preset's path (tens of thousands of parameters in batches of 16 segments, whose
#: steps are bound by kernel launches, not arithmetic) trains several times faster on the
#: CPU, the ``paper`` preset's (millions) several times faster on the GPU; the threshold lies
#: between the two.
CUDA_MIN_PARAMETERS = 1_000_000


def resolve_train_device(name: str, n_parameters: int) -> torch.device:
    """The device a training run uses for ``--device name``: :func:`resolve_device`, except
    that ``auto`` stays on the CPU, GPU or not, for a transformer path of fewer than
    :data:`CUDA_MIN_PARAMETERS` parameters (``n_parameters``); ``cuda`` is always honoured."""
    device = resolve_device(name)
    if name == "auto" and device.type == "cuda" and n_parameters < CUDA_MIN_PARAMETERS:
        return torch.device("cpu")
    return device


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def one_cpu_thread():
    """Run torch's CPU ops on one thread for the duration (restored after; re-entrant).

    The model's operations are small (batches of 16-channel graphs), so intra-op parallelism
    costs more in synchronisation than it gains, most of all on cores shared with other jobs
    (docs/benchmarks.md, "Threads"). One thread also fixes the order of float reductions, which keeps CPU runs
    bit-reproducible whatever the machine's core count.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def resolve_precision(name: str) -> str:
    """``--precision`` -> ``"float32"``, ``"bfloat16"`` or ``"float16"``.

    ``auto``: float32 on every device and preset. On the CPU, bfloat16 is slower than float32
    without bfloat16 arithmetic. On CUDA it gains nothing at this model's sizes, which are
    bound by kernel launches, not arithmetic: the casts are extra launches, so the training
    step and ``predict`` are no faster under bfloat16 autocast, while bfloat16 moves the
    probabilities and, for ``paper`` (raw ages times queries and keys), switches the winning
    key in some attention rows (docs/benchmarks.md, "GPU and mixed precision"). ``bfloat16``
    and ``float16`` remain for a user who asks (the model keeps its attention, norms and
    explanations in float32 under them). Anything else -> UsageError.
    """
    check_choice("--precision", name, PRECISIONS)
    return "float32" if name == "auto" else name


def autocast(device: torch.device, precision: str):
    """The autocast context of a resolved ``precision`` on ``device`` (float32: none).

    The model keeps its attention, rotary angles, norms and explanations in float32 under it
    (``model/precision.py``).
    """
    if precision == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision])
