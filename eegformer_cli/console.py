"""Where messages go: results to stdout, progress and logs to stderr (Rich), warnings through
Python's :mod:`warnings` (:class:`~eegformer_cli.errors.EegformerWarning`; the CLI shows them
on stderr, :func:`warnings_on_stderr`).

Progress bars are drawn only when stderr is a terminal, and fit an 80-column one; in pipelines,
log files and CI a long step instead prints a plain line every
:data:`PLAIN_PROGRESS_INTERVAL_S` seconds with what is done of what and an estimate of the
time left (:class:`PlainProgress`), and nothing when it ends sooner.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

#: Seconds between two progress lines when stderr is not a terminal.
PLAIN_PROGRESS_INTERVAL_S = 30.0
#: Width of a progress bar's bar, in columns: with the longest description (``reading
#: headers``), done/total, both times and a status such as ``loss 0.693 BAC 0.500`` a line
#: stays within 80 columns (tests/test_console.py).
BAR_WIDTH = 12

stderr = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


def log(message: str) -> None:
    """One informational line on stderr."""
    stderr.print(message)


def warn(message: str) -> None:
    """Issue ``message`` (Rich markup, escaped where it quotes user text) as an
    :class:`~eegformer_cli.errors.EegformerWarning`."""
    from eegformer_cli.errors import EegformerWarning

    warnings.warn(message, EegformerWarning, stacklevel=2)


@contextlib.contextmanager
def warnings_on_stderr() -> Iterator[None]:
    """Inside: every :class:`~eegformer_cli.errors.EegformerWarning` is one ``warning: ...`` line
    on stderr, each time it is issued (how the CLI shows them); other warnings as Python
    shows them."""
    from eegformer_cli.errors import EegformerWarning

    with warnings.catch_warnings():
        warnings.simplefilter("always", EegformerWarning)
        shown_by_python = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, EegformerWarning):
                stderr.print(f"[yellow]warning:[/yellow] {message}")
            else:
                shown_by_python(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def progress_bar(transient: bool = False) -> Progress | PlainProgress:
    """A Rich progress bar on stderr when it is a terminal, else a :class:`PlainProgress`
    (the same calls: ``add_task``, ``update``, ``advance``, ``remove_task``).

    Use as ``with progress_bar() as bar: task = bar.add_task("preprocess", total=n)``; every
    task has a ``status`` field (text shown after the times, e.g. the last epoch's loss).
    """
    if not stderr.is_terminal:
        return PlainProgress()
    return rich_progress(stderr, transient)


def progress_lines() -> PlainProgress:
    """The progress of a command whose results stream to stdout as they come (``predict``'s
    rows): the plain lines of :class:`PlainProgress` when stderr is not a terminal, and nothing
    on a terminal, where the rows show the progress and a bar would be drawn over them."""
    return PlainProgress(silent=stderr.is_terminal)


def rich_progress(on: Console, transient: bool = False) -> Progress:
    """The progress bar of :func:`progress_bar` on the console ``on``: description, bar,
    done/total, elapsed and remaining time, status."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=BAR_WIDTH),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(compact=True),
        TextColumn("{task.fields[status]}"),
        console=on,
        transient=transient,
    )


def _duration(seconds: float) -> str:
    """``3725.2`` -> ``"1:02:05"``."""
    return str(datetime.timedelta(seconds=round(seconds)))


@dataclass
class _PlainTask:
    description: str
    total: float | None
    completed: float
    status: str
    started: float  # time.monotonic() when added
    completed_at_start: float  # done before this process (a resumed run's finished folds)


class PlainProgress:
    """Progress as plain lines on stderr, for when it is not a terminal: while any task is
    unfinished, every ``interval_s`` seconds (:data:`PLAIN_PROGRESS_INTERVAL_S` by default)
    one line, ``progress 0:01:00: folds 2/5, about 0:01:30 left; fold r0_f2 12/40 ...``,
    each task with what is done of its total and the time left at its rate so far. A thread
    prints them, so a line comes even while a fold or a recording takes longer than the
    interval; the calls are those of :class:`rich.progress.Progress` that the commands use.
    """

    def __init__(self, interval_s: float | None = None, silent: bool = False):
        self.interval_s = PLAIN_PROGRESS_INTERVAL_S if interval_s is None else interval_s
        self.silent = silent  # keeps count, prints nothing
        self._tasks: dict[int, _PlainTask] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._report, daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> PlainProgress:
        if not self.silent:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def add_task(
        self, description: str, total: float | None = None, completed: float = 0, **fields
    ) -> TaskID:
        """A new task's id: Rich's task id type, so one caller drives either kind of bar."""
        with self._lock:
            task_id = TaskID(next(self._ids))
            self._tasks[task_id] = _PlainTask(
                description,
                total,
                completed,
                str(fields.get("status", "")),
                time.monotonic(),
                completed,
            )
        return task_id

    def update(
        self,
        task_id: TaskID,
        *,
        completed: float | None = None,
        advance: float | None = None,
        total: float | None = None,
        description: str | None = None,
        **fields,
    ) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return
            if completed is not None:
                task.completed = completed
            if advance is not None:
                task.completed += advance
            if total is not None:
                task.total = total
            if description is not None:
                task.description = description
            if "status" in fields:
                task.status = str(fields["status"])

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def remove_task(self, task_id: TaskID) -> None:
        with self._lock:
            self._tasks.pop(task_id, None)

    def line(self) -> str | None:
        """The progress line now (None when every task is finished)."""
        now = time.monotonic()
        parts = []
        with self._lock:
            tasks = list(self._tasks.values())
        for task in tasks:
            if task.total is not None and task.completed >= task.total:
                continue
            done = task.completed - task.completed_at_start
            if task.total is None:
                left = ""
            elif done > 0:
                rate = (now - task.started) / done
                left = f", about {_duration(rate * (task.total - task.completed))} left"
            else:
                left = ", time left known after the first"
            of = "" if task.total is None else f"/{task.total:g}"
            status = f" ({task.status})" if task.status else ""
            parts.append(f"{task.description} {task.completed:g}{of}{left}{status}")
        if not parts:
            return None
        return f"progress {_duration(now - self._started)}: " + "; ".join(parts)

    def _report(self) -> None:
        while not self._stop.wait(self.interval_s):
            line = self.line()
            if line is not None:
                stderr.print(line, markup=False, highlight=False)
