"""Argument conventions shared by subcommands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from eegformer_cli.errors import UsageError

#: The INPUT that stands for the paths on standard input, as for other shell tools.
STDIN = "-"


def expand_stdin(inputs: list[Path], stdin: TextIO | None = None) -> list[Path]:
    """``inputs`` with ``-`` replaced by the paths read from standard input, one per line, in
    order (surrounding blanks and empty lines skipped), so a pipeline can choose the
    recordings: ``find data -name '*.edf' | eegformer predict model.pt -``.

    Raises UsageError when ``-`` is given more than once, when standard input is a terminal
    (nothing was piped in), or when it holds no path.
    """
    if sum(str(item) == STDIN for item in inputs) == 0:
        return inputs
    if sum(str(item) == STDIN for item in inputs) > 1:
        raise UsageError("'-' (paths from standard input) may be given only once")
    stdin = sys.stdin if stdin is None else stdin
    if stdin.isatty():
        raise UsageError(
            "'-' reads the paths from standard input, but nothing is piped in",
            hint="e.g. find DATA -name '*.edf' | eegformer predict MODEL -",
        )
    piped = [Path(line.strip()) for line in stdin if line.strip()]
    if not piped:
        raise UsageError("'-' was given, but standard input holds no path (one per line)")
    index = [str(item) for item in inputs].index(STDIN)
    return inputs[:index] + piped + inputs[index + 1 :]
