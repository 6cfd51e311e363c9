"""Where messages go: results to stdout, progress and logs to stderr (Rich), warnings through
Python's :mod:`warnings` (:class:`~eegformer_cli.errors.EegformerWarning`; the CLI shows them
on stderr, :func:`warnings_on_stderr`).

Progress bars are drawn only when stderr is a terminal; in pipelines and CI nothing but
plain log lines reach stderr.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

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


def progress_bar(transient: bool = False) -> Progress:
    """A Rich progress bar on stderr, disabled (silent) when stderr is not a terminal.

    Use as ``with progress_bar() as bar: task = bar.add_task("preprocess", total=n)``.
    """
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=transient,
        disable=not stderr.is_terminal,
    )
