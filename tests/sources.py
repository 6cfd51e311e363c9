"""Readers of the project's own sources that several test modules use: the package's modules
by name (test_layout, test_run_folder) and an ``eegformer`` command line parsed by the CLI's
own parser (test_docs, test_option_docs).

A plain module, not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eegformer_cli"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def parse_command_line(line: str) -> None:
    """Parse an ``eegformer`` (or ``torchrun ... -m eegformer_cli``) command line with the
    CLI's own parser, without running it; Click's UsageError for an unknown option or a value
    of the wrong type. Shell variables stand for ``0`` (``--fold $i``)."""
    import typer.main

    from eegformer_cli.cli.app import app

    words = [re.sub(r"^\$\w+$", "0", word) for word in shlex.split(line, comments=True)]
    while words and re.match(r"^\w+=", words[0]):  # OMP_NUM_THREADS=4
        words.pop(0)
    if words[0] == "torchrun":
        start = words.index("-m")
        assert words[start + 1] == "eegformer_cli", line
        words = words[start + 2 :]
    else:
        assert words[0] == "eegformer", line
        words = words[1:]
    name, *args = words
    command = typer.main.get_command(app).commands[name]
    command.make_context(name, args)
