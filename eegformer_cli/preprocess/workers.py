"""Spreading a run's recordings over workers, and what a worker does with one: read its header
(:func:`read_header`), or process it and save its connectome (:func:`process_and_save`, the tokens
streamed to the file as they come). The worker functions are at module level, so that joblib can
send them to other processes."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import mne

from eegformer_cli import console
from eegformer_cli.errors import EegformerError
from eegformer_cli.parallel import leave_interrupts_to_the_parent
from eegformer_cli.preprocess.output import Connectome, TokenFiles
from eegformer_cli.preprocess.recording import process_recording
from eegformer_cli.preprocess.settings import PreprocessSettings
from eegformer_cli.recordings import reading
from eegformer_cli.recordings.channel_facts import channel_facts
from eegformer_cli.recordings.channels import normalise_channels

#: Signature of the ``map`` that :func:`recording_workers` yields.
RecordingMap = Callable[[Callable, Iterable], Iterator]


@contextlib.contextmanager
def recording_workers(n_workers: int) -> Iterator[RecordingMap]:
    """A ``map(func, items)`` over ``n_workers`` workers (a count, :func:`parallel.worker_count`
    of ``--n-jobs``), yielding results in completion order.

    The one place where recordings are spread over workers; ``func`` must be picklable
    (module level). Entered once per run, so the header pass and the processing share it:

    - a joblib backend chosen with ``joblib.parallel_config`` (e.g. Dask, see
      :mod:`eegformer_cli.parallel`): joblib's ``Parallel`` on it;
    - one worker: this process;
    - Linux: a ``multiprocessing`` pool of *forked* workers. Why not joblib's own pool (loky):
      loky starts every worker as a fresh interpreter that imports numpy, SciPy, MNE and this
      package again, which on a small dataset costs much of what a second worker gains
      (docs/benchmarks.md, "Preprocessing"). Forked workers start with the parent's imports in milliseconds
      (docs/benchmarks.md). The pool is forked here, before any progress-bar thread exists
      (fork copies only the calling thread), and terminated on leaving (also on Ctrl-C);
    - elsewhere (macOS, Windows: no safe fork): joblib's loky pool.
    """
    import multiprocessing

    from joblib import Parallel, delayed
    from joblib._parallel_backends import LokyBackend
    from joblib.parallel import get_active_backend

    joblib_default = isinstance(get_active_backend()[0], LokyBackend)
    if joblib_default and n_workers == 1:
        yield lambda func, items: map(func, items)
    elif joblib_default and sys.platform == "linux":
        _import_worker_modules()
        with multiprocessing.get_context("fork").Pool(
            n_workers, initializer=leave_interrupts_to_the_parent
        ) as pool:
            yield lambda func, items: pool.imap_unordered(func, items)
    else:
        # initializer: used by joblib's local process pool, ignored by the Dask backend
        parallel = Parallel(
            n_jobs=n_workers,
            return_as="generator_unordered",
            initializer=leave_interrupts_to_the_parent,
        )
        yield lambda func, items: parallel(delayed(func)(item) for item in items)


def _import_worker_modules() -> None:
    """Import in the parent what reading and processing a recording import lazily (MNE's
    readers, filters, epochs and montages, SciPy's signal), so that forked workers inherit it:
    paid once instead of in every worker."""
    import mne.channels
    import mne.epochs
    import mne.filter
    import mne.io  # noqa: F401
    import scipy.signal  # noqa: F401
    import threadpoolctl  # noqa: F401


def with_progress(results: Iterable, total: int, description: str) -> Iterator:
    """Yield ``results`` while advancing a progress bar (drawn only on a terminal)."""
    with console.progress_bar() as bar:
        progress = bar.add_task(description, total=total, status="")
        for result in results:
            yield result
            bar.update(progress, advance=1)


@dataclass(frozen=True)
class Header:
    """A recording file's header: its canonical EEG channels and length, or why it is unusable;
    ``channels_key``: :meth:`~eegformer_cli.recordings.channel_facts.ChannelFacts.key` of its channel facts (its BIDS ``channels.tsv``,
    the bad channels its header marks; None: neither)."""

    path: Path
    channels: frozenset[str] = frozenset()
    duration_s: float = 0.0
    error: str | None = None
    channels_key: str | None = None


def read_header(path: Path) -> Header:
    """Worker: read one header (no samples) and normalise its channel names; its EEG channels
    are those :func:`channel_facts` gives (in a BIDS dataset, those its ``channels.tsv`` types
    EEG; those marked bad are counted, the recording interpolates them)."""
    try:
        with warnings.catch_warnings(), mne.use_log_level("error"):
            warnings.simplefilter("ignore")
            raw = reading.read_recording(path, preload=False)
            facts = channel_facts(raw, path, in_memory=False)
            normalised, _ = normalise_channels(raw, path=path, eeg=facts.eeg)
    except EegformerError as exc:
        return Header(path, error=exc.one_line())
    except Exception as exc:  # as in _process_into: one odd file must not stop the run
        message = " ".join(str(exc).split()) or type(exc).__name__
        return Header(path, error=f"{path}: internal error: {type(exc).__name__}: {message}")
    return Header(
        path,
        frozenset(normalised.ch_names),
        raw.n_times / raw.info["sfreq"],
        channels_key=facts.key(),
    )


@dataclass(frozen=True)
class Task:
    """What a worker needs to process one recording and save its connectome; ``channels_key``:
    :meth:`~eegformer_cli.recordings.channel_facts.ChannelFacts.key` of its channel facts (None: nothing to key), kept in the
    connectome's record so that a rerun after they change makes it again."""

    recording_id: str
    path: Path
    out_file: Path
    settings: dict
    source_size: int
    source_mtime_ns: int
    channels_key: str | None = None


def process_and_save(task: Task) -> tuple[str, dict]:
    """Worker: process one recording, save its connectome; ``(recording_id, fields)``.

    ``fields`` are the recording's processing columns of the manifest. A bad recording never
    raises: its error becomes ``{"status": "error", "error": ...}`` so the others go on. One
    BLAS/OpenMP thread per worker, so that ``n_jobs`` workers use ``n_jobs`` cores. The tokens
    go to temporary files beside the connectome file as they are computed
    (:class:`TokenFiles`), so memory stays flat in the recording's length.
    """
    with TokenFiles(task.out_file) as token_files:
        connectome = _process_into(task, token_files)
        if isinstance(connectome, str):
            return task.recording_id, {"status": "error", "error": connectome}
        fields = _processing_fields(connectome)
        connectome.record = {
            "settings_hash": PreprocessSettings.from_dict(task.settings).settings_hash(),
            "source_size": task.source_size,
            "source_mtime_ns": task.source_mtime_ns,
            **({"channels_key": task.channels_key} if task.channels_key else {}),
            "fields": fields,
        }
        token_files.save(connectome, task.out_file)
    return task.recording_id, fields


def _process_into(task: Task, token_files: TokenFiles) -> Connectome | str:
    """The connectome of ``task``'s recording, its tokens in ``token_files``, or the one-line
    error that makes it a failed row (a bug included: it must not stop the other recordings)."""
    from threadpoolctl import threadpool_limits

    settings = PreprocessSettings.from_dict(task.settings)
    try:
        with threadpool_limits(limits=1), warnings.catch_warnings(), mne.use_log_level("error"):
            warnings.simplefilter("ignore")
            return process_recording(task.path, settings, token_store=token_files)
    except EegformerError as exc:
        return exc.one_line()
    except Exception as exc:  # a bug must not stop the other recordings; it is reported
        message = " ".join(str(exc).split()) or type(exc).__name__
        return f"{task.path}: internal error: {type(exc).__name__}: {message}"


def _processing_fields(connectome: Connectome) -> dict:
    """The recording's processing columns of the manifest."""
    return {
        "status": "ok",
        "error": None,
        "n_segments": connectome.n_segments,
        "n_segments_rejected": connectome.n_segments_rejected,
        "sfreq": connectome.sfreq,
        "source_sfreq": connectome.source_sfreq,
        "duration_s": round(connectome.duration_s, 3),
        "channels_interpolated": ",".join(connectome.channels_interpolated),
        "signal_sha256": connectome.signal_sha256,
    }
