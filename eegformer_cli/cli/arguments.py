"""Argument conventions shared by subcommands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from eegformer_cli.errors import UsageError

#: The INPUT that stands for the paths on standard input, as for other shell tools.
STDIN = "-"

#: ``preprocess``'s options that choose the tokens (they are stored in the folder and the model).
_PREPROCESSING = ("--crop", "--epoch-length", "--sfreq", "--bands", "--channels", "--ica")
#: Options that belong to another command than the one given them: (the commands given them,
#: the options, the command they belong to, why), so that ``train --crop`` points to
#: ``preprocess --crop`` rather than to options of similar spelling (:func:`belongs_elsewhere`).
ELSEWHERE = (
    (
        ("train",),
        (*_PREPROCESSING, "--max-interpolated", "--participants", "--participant-pattern"),
        "preprocess",
        "train learns from a preprocess folder as it was made: preprocess into another "
        "--out with it, then train on that folder",
    ),
    (
        ("predict", "explain"),
        _PREPROCESSING,
        "preprocess",
        "a model preprocesses recordings as its training data was: preprocess with it, "
        "then train a model on that folder",
    ),
    (
        ("preprocess",),
        ("--label-column", "--epochs", "--cv", "--lr", "--holdout", "--device"),
        "train",
        "preprocess makes the folder train learns from",
    ),
    (
        ("predict",),
        ("--target", "--contrast", "--method", "--n-steps", "--all-heads", "--out"),
        "explain",
        "predict prints classes and probabilities, explain writes why into --out",
    ),
    (
        ("explain",),
        ("--format", "--coverage"),
        "predict",
        "explain writes its tables into --out, predict prints rows in a format",
    ),
)


def belongs_elsewhere(command: str | None, option: str | None) -> str | None:
    """What to say when ``option`` is given to ``command`` but belongs to another command
    (:data:`ELSEWHERE`), or None."""
    for given_to, options, owner, why in ELSEWHERE:
        if command in given_to and option in options:
            return f"it belongs to `eegformer {owner} {option}` ({why})"
    return None


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
