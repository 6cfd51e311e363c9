"""Where messages go: results to stdout, progress and logs to stderr (Rich).

Progress bars are drawn only when stderr is a terminal; in pipelines and CI nothing but
plain log lines reach stderr.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

stderr = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


def log(message: str) -> None:
    """One informational line on stderr."""
    stderr.print(message)


def warn(message: str) -> None:
    stderr.print(f"[yellow]warning:[/yellow] {message}")


def progress_bar(transient: bool = False) -> Progress:
    """A Rich progress bar on stderr, disabled (silent) when stderr is not a terminal.

    Use as ``with progress_bar() as bar: task = bar.add_task("preprocess", total=n)``.
    """
    return Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=stderr,
                    transient=transient, disable=not stderr.is_terminal)
