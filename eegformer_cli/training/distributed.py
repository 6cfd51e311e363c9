"""Training on several processes with PyTorch's own launcher (``torchrun``) and DDP.

``torchrun --nproc_per_node N -m eegformer_cli train ...`` starts N copies of ``train``; each
reads its place from the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``). Without torchrun there is one process and every function
here is a no-op, so the trainer has a single code path.

How the work is shared, and why the numbers equal a one-process run:

- Every process builds the same model, split and shuffling from the same seed, draws the same
  global batch and applies the same augmentation (same ``numpy`` generator), so the samples
  are bit-identical to the one-process run. :func:`shard_batch` then gives each process a
  contiguous slice of that batch; the model is wrapped in ``DistributedDataParallel``
  (:func:`wrap_for_training`), which averages the gradients over processes during backward.
  Each process scales its loss by ``n_slice * world_size / n_batch``, so the averaged gradient
  is the gradient of the whole batch's mean loss (the loss is a mean over samples of
  per-sample terms: nothing in the model mixes samples of a batch). Only the summation order
  differs: the gradients, hence the weights, agree to float32 rounding, which the
  optimiser and the epochs amplify little (tested below). With ``dropout > 0`` the
  dropout masks are drawn per process and the runs agree only in distribution.
- Evaluation (validation every epoch, test at the end of a fold) cuts the recordings into fixed
  chunks (:func:`evaluation_chunks`), gives chunk ``i`` to process ``i % world_size`` and
  gathers the per-recording logits on every process (:func:`map_gathered`): every process
  needs the validation metrics to take the same model-selection and early-stop decisions.
  The chunks do not depend on the number of processes: each goes through the same forward
  as in a one-process run.
- Only rank 0 writes files (:func:`is_writer`); the other processes log nothing
  (their stderr console is quiet) so the terminal shows one progress display.

tests/test_scaling.py runs 2 processes against 1 on CPU with gloo (a small model, 4 epochs,
uneven batch slices): the out-of-fold probabilities agree within the documented tolerance,
:data:`PROBABILITY_TOLERANCE`, and the predicted labels, confusion matrices and selected epochs
are the same (the measured difference: docs/benchmarks.md, "Stress and scaling out").

Backends: ``nccl`` for CUDA (one process per GPU, ``LOCAL_RANK`` picks the GPU), ``gloo`` for
CPU. Several nodes: every node must see the data folder and the run folder under the same path
(a shared filesystem).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from eegformer_cli import console
from eegformer_cli.errors import UsageError

#: Largest difference between the out-of-fold class probabilities of a 2-process and a
#: 1-process run on CPU (a few epochs, tests/test_scaling.py); see the module docstring.
PROBABILITY_TOLERANCE = 1e-4
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class ProcessPlace:
    """This process's place among the training processes (0, 1, 0 without torchrun)."""

    rank: int
    world_size: int
    local_rank: int


def process_place(environ: Mapping[str, str] | None = None) -> ProcessPlace:
    """Rank, world size and local rank from torchrun's environment variables.

    Raises UsageError when only some of them are set or they are not integers.
    """
    environ = os.environ if environ is None else environ
    present = [name for name in TORCHRUN_VARIABLES if name in environ]
    if not present:
        return ProcessPlace(0, 1, 0)
    if len(present) != len(TORCHRUN_VARIABLES):
        missing = ", ".join(n for n in TORCHRUN_VARIABLES if n not in present)
        raise UsageError(
            f"environment sets {', '.join(present)} but not {missing}",
            hint="start distributed training with torchrun",
        )
    try:
        rank, world_size, local_rank = (int(environ[name]) for name in TORCHRUN_VARIABLES)
    except ValueError:
        raise UsageError(
            "RANK, WORLD_SIZE and LOCAL_RANK must be integers",
            hint="start distributed training with torchrun",
        ) from None
    if not 0 <= rank < world_size:
        raise UsageError(
            f"RANK {rank} is outside 0..WORLD_SIZE-1 ({world_size - 1})",
            hint="start distributed training with torchrun",
        )
    return ProcessPlace(rank, world_size, local_rank)


def is_distributed() -> bool:
    """Whether this process is one of several joined in a process group."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_writer() -> bool:
    """Whether this process writes files (rank 0, or the only process)."""
    return rank() == 0


def barrier() -> None:
    """Wait for every process (nothing with one process)."""
    if is_distributed():
        dist.barrier()


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[None]:
    """Join torchrun's process group for the enclosed training (nothing without torchrun).

    ``nccl`` for a CUDA ``device`` (this process's GPU becomes ``cuda:LOCAL_RANK``), ``gloo``
    otherwise. Processes other than rank 0 have their stderr console quieted meanwhile.
    """
    place = process_place()
    if place.world_size == 1 or is_distributed():
        yield
        return
    if device.type == "cuda":
        if place.local_rank >= torch.cuda.device_count():
            raise UsageError(
                f"LOCAL_RANK {place.local_rank} but only {torch.cuda.device_count()} "
                "GPU(s) on this node",
                hint="use --nproc_per_node <= the GPU count",
            )
        torch.cuda.set_device(place.local_rank)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    was_quiet = console.stderr.quiet
    console.stderr.quiet = was_quiet or place.rank != 0
    try:
        yield
    finally:
        console.stderr.quiet = was_quiet
        dist.destroy_process_group()


def wrap_for_training(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in ``DistributedDataParallel`` when distributed, else ``model`` itself.

    Use the returned module for the training forward only; state dicts, evaluation and saving
    keep using ``model`` (the wrapper shares its parameters).
    """
    if not is_distributed():
        return model
    device_ids = [torch.cuda.current_device()] if next(model.parameters()).is_cuda else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def shard_bounds(n: int, n_parts: int, part: int) -> tuple[int, int]:
    """``[start, stop)`` of part ``part`` of ``n`` items cut into ``n_parts`` contiguous parts
    whose sizes differ by at most one (larger parts first, as ``numpy.array_split``)."""
    size, extra = divmod(n, n_parts)
    start = part * size + min(part, extra)
    return start, start + size + (part < extra)


def shard_batch(*tensors: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], float]:
    """This process's slice of a global batch, and its loss scale.

    ``tensors`` share their first dimension (the batch, n samples). Returns the slices and
    ``n_slice * world_size / n``: multiply the slice's mean loss by it so that DDP's gradient
    average equals the gradient of the mean loss over the whole batch. A process whose slice
    would be empty (n < world size) gets the first sample with scale 0, since every process
    must run forward and backward for DDP to average.
    """
    n = len(tensors[0])
    if not is_distributed():
        return tensors, 1.0
    start, stop = shard_bounds(n, world_size(), rank())
    if stop == start:
        return tuple(t[:1] for t in tensors), 0.0
    return tuple(t[start:stop] for t in tensors), (stop - start) * world_size() / n


def batch_mean_loss(scaled_loss: torch.Tensor) -> float:
    """The whole batch's mean loss from each process's scaled slice loss (all processes)."""
    value = scaled_loss.detach().float().clone()
    if is_distributed():
        dist.all_reduce(value)
        value /= world_size()
    return float(value)


def evaluation_chunks(n_segments: Sequence[int], max_segments: int) -> list[list[int]]:
    """Consecutive recordings grouped into chunks of at most ``max_segments`` segments.

    ``n_segments`` (n_recordings,) segments per recording -> lists of recording indices, in
    order; a recording longer than ``max_segments`` is a chunk of its own. The chunks bound the
    memory of an evaluation (one chunk at a time) and are the unit shared over processes.
    """
    chunks: list[list[int]] = []
    total = 0
    for index, count in enumerate(n_segments):
        if not chunks or total + count > max_segments:
            chunks.append([])
            total = 0
        chunks[-1].append(index)
        total += count
    return chunks


def map_gathered(func: Callable, items: Sequence) -> list:
    """``[func(item) for item in items]``, the items shared round-robin over the processes
    and the results gathered, in order, on every process."""
    mine = {index: func(items[index]) for index in range(rank(), len(items), world_size())}
    if not is_distributed():
        return [mine[index] for index in range(len(items))]
    gathered: list = [None] * world_size()
    dist.all_gather_object(gathered, mine)
    merged = {index: result for part in gathered for index, result in part.items()}
    return [merged[index] for index in range(len(items))]
