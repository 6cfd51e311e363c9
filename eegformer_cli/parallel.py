"""Where work runs: ``preprocess``'s recordings on local processes or a Dask cluster, and the
pieces every local worker pool shares (``--n-jobs``, signal handling in workers, the process
pool of ``train --n-jobs``: folds, the final model and permutations).

``preprocess`` spreads recordings over workers in one place
(:func:`eegformer_cli.preprocess.workers.recording_workers`). :func:`preprocess_backend` chooses
where for the duration of a run:

- ``local`` (default): ``--n-jobs`` worker processes on this machine (forked on Linux, joblib's
  loky pool elsewhere);
- ``dask``: joblib's Dask backend, on the cluster whose scheduler is at ``--scheduler`` (e.g.
  ``tcp://10.0.0.5:8786``), or, without an address, on a ``dask.distributed.LocalCluster`` of
  ``--n-jobs`` single-threaded worker processes listening on 127.0.0.1 only.

The recordings are computed by the same function in either case, so the connectome files and
the manifest are identical. Dask is an optional extra (``pip install eegformer-cli[dask]``) and
is imported only when asked for. On a remote cluster, every worker needs eegformer-cli installed
and must see the input recordings and the output folder under the same paths (a shared
filesystem): workers read the recordings and write the connectome files themselves. Start
remote workers with one thread each (``dask worker ADDRESS --nworkers N --nthreads 1``), as the
local cluster does: each recording then runs alone in its process with one BLAS thread, as in
a local run, so the numbers are the same bit for bit. joblib
uses every worker thread of the cluster whatever ``--n-jobs`` says (it only sizes a local
cluster); a cluster with a single worker thread in all runs the recordings in this process
(joblib's rule for one job).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator

from eegformer_cli.errors import UsageError, check_choice

BACKENDS = ("local", "dask")
DASK_MISSING = "the dask backend needs `pip install eegformer-cli[dask]`"
#: How long to wait for a remote scheduler before giving up, seconds.
CONNECT_TIMEOUT_S = 20


def worker_count(n_jobs: int) -> int:
    """Worker processes for ``--n-jobs`` (-1: every core); UsageError for 0 or below -1."""
    if n_jobs == 0 or n_jobs < -1:
        raise UsageError(f"invalid --n-jobs {n_jobs}; use a positive number or -1 for all cores")
    return (os.cpu_count() or 1) if n_jobs == -1 else n_jobs


def leave_interrupts_to_the_parent() -> None:
    """Worker process start: ignore Ctrl-C (SIGINT), which a terminal sends to every process of
    the group; the parent stops the workers itself, so no worker prints a traceback. A forked
    worker also gets SIGTERM's default action back (the CLI's handler, inherited with the fork,
    would turn the pool's terminate signal into an exception instead of an exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def process_pool(n_workers: int, progress: bool = False):
    """A pool of ``n_workers`` processes for ``train --n-jobs``, or None for fewer than 2.

    Forked on Linux without a CUDA device (workers start with this process's imports in
    milliseconds; create the pool before a progress bar's thread exists, and draw the bar
    after), spawned elsewhere (:func:`start_method`). Each worker runs torch on one thread, as a fold does in the parent, so the
    numbers are the same as in this process; the pool is terminated on leaving, also on
    Ctrl-C (what the workers finished is on disk). With ``progress`` the pool has a queue
    (``pool.progress``) that its workers' :func:`report_progress` messages arrive on.
    """
    if n_workers < 2:
        yield None
        return
    import multiprocessing
    import multiprocessing.pool
    import multiprocessing.queues

    class ProgressPool(multiprocessing.pool.Pool):
        progress: multiprocessing.queues.SimpleQueue | None = None

    context = multiprocessing.get_context(start_method())
    # inherited by the workers; a SimpleQueue writes each message before put returns, so a
    # worker's messages precede whatever the parent sends after the worker's result
    queue = context.SimpleQueue() if progress else None
    # what context.Pool(...) builds, as a class that carries the queue
    with ProgressPool(
        n_workers, initializer=_start_training_worker, initargs=(queue,), context=context
    ) as pool:
        pool.progress = queue
        yield pool


def start_method() -> str:
    """How :func:`process_pool` starts its workers: "fork" on Linux when torch sees no CUDA
    device, "spawn" otherwise.

    A fork is safe only before autograd has started its per-device threads. Where a CUDA
    device exists, the first backward pass in this process starts them (also for CPU tensors:
    an earlier fit in the same Python session or notebook), and every backward in a forked
    worker then fails ("Unable to handle autograd's threading in combination with fork-based
    multiprocessing"; seen on a GPU machine, docs/benchmarks.md); a forked worker cannot use CUDA once this
    process has, either. Spawned workers import torch anew, a few seconds each. macOS and
    Windows have no safe fork."""
    import torch

    return "fork" if sys.platform == "linux" and not torch.cuda.is_available() else "spawn"


#: In a worker of :func:`process_pool`: where :func:`report_progress` puts its messages.
_progress_queue = None


def report_progress(message) -> None:
    """Send ``message`` (picklable) to the parent's ``pool.progress`` queue, from a worker
    started with one; nothing elsewhere."""
    if _progress_queue is not None:
        _progress_queue.put(message)


def _start_training_worker(queue=None) -> None:
    """Worker process start: Ctrl-C left to the parent, torch on one thread, the progress
    queue kept for :func:`report_progress`."""
    global _progress_queue
    import torch  # here: preprocess imports this module without needing torch

    _progress_queue = queue
    leave_interrupts_to_the_parent()
    torch.set_num_threads(1)


@contextlib.contextmanager
def preprocess_backend(backend: str, scheduler: str | None, n_workers: int) -> Iterator[None]:
    """Run the enclosed ``preprocess`` on ``backend`` ("local" or "dask").

    ``scheduler``: a Dask scheduler address (only with "dask"; None starts a local cluster of
    ``n_workers`` workers, a count (:func:`worker_count`), closed on exit). Raises UsageError for an unknown backend, an address
    without the dask backend, a missing dask installation or an unreachable scheduler.
    """
    check_choice("--backend", backend, BACKENDS)
    if backend == "local":
        if scheduler is not None:
            raise UsageError("--scheduler needs --backend dask")
        yield
        return
    try:
        import distributed
        from joblib import parallel_config
    except ImportError:
        raise UsageError(DASK_MISSING) from None
    # The scheduler's and workers' INFO lines would bury the progress and the summary.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            cluster = stack.enter_context(
                distributed.LocalCluster(
                    n_workers=n_workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                )
            )
            stack.enter_context(distributed.Client(cluster))
        else:
            stack.enter_context(_connect(distributed, scheduler))
        # joblib's Dask backend submits to the client just made (the default client).
        stack.enter_context(parallel_config(backend="dask"))
        yield


def _connect(distributed, address: str):
    """A Client of the scheduler at ``address``, or UsageError naming it."""
    try:
        return distributed.Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise UsageError(
            f"cannot reach the Dask scheduler at --scheduler {address}: {message}",
            hint="check the address, e.g. tcp://HOST:8786 as printed by `dask scheduler`",
        ) from None
