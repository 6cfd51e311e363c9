r"""Errors users can act on, each with its own exit code.

Every command maps an :class:`EegformerError` to one line on stderr and the exit code below;
anything else is an internal error (exit 1, traceback only with ``--debug``).

==============================  ====  ==============================================
class                           code  meaning
==============================  ====  ==============================================
(internal error)                1     a bug: please report it with ``--debug`` output
:class:`UsageError`             2     wrong flags or flag combinations (as Typer/Click)
:class:`InputDataError`         3     recordings or tables that cannot be used
:class:`ModelFileError`         4     a model file that is corrupt or from another version
:class:`OutputError`            5     an output that cannot be written (permissions, lock)
:class:`PartialFailure`         6     ``--strict`` and not every recording was clean: one
                                      failed (``preprocess``) or got a warning
                                      (``predict``, ``explain``); outputs are written
(interrupted)                   130   Ctrl-C / SIGINT; ``preprocess``, ``train`` and
                                      ``demo`` resume when rerun
==============================  ====  ==============================================

Warnings (something the user should know, the work goes on) are :class:`EegformerWarning`\ s,
issued with :func:`warnings.warn`, so Python code can filter, record or escalate them
(``warnings.simplefilter("ignore", eegformer_cli.EegformerWarning)``); the CLI shows each as
one ``warning: ...`` line on stderr (:func:`eegformer_cli.console.warnings_on_stderr`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path


class EegformerWarning(UserWarning):
    """A warning of eegformer: a recording outside the model's training range, one that failed
    while the others go on, a setting that is ignored... (module docs)."""


class EegformerError(Exception):
    """Base class: an error whose message is meant for the user, on one line."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        hint: str | None = None,
        result=None,
        printed: bool = False,
    ):
        self.path = None if path is None else str(path)
        self.hint = hint
        #: What the call produced before it failed (``predict``: the rows of the recordings that
        #: worked, a ``pandas.DataFrame``), or None.
        self.result = result
        #: The message is already on stderr (a recording's error line, printed as it failed):
        #: the CLI exits with :attr:`exit_code` without printing it again.
        self.printed = printed
        super().__init__(message)

    def one_line(self) -> str:
        """``<path>: <message> (<hint>)`` with newlines folded, as printed by the CLI."""
        text = str(self)
        if self.path and not text.startswith(self.path):
            text = f"{self.path}: {text}"
        if self.hint:
            text = f"{text} ({self.hint})"
        return " ".join(text.split())


class UsageError(EegformerError):
    exit_code = 2


class InputDataError(EegformerError):
    exit_code = 3


class RecordingError(InputDataError):
    """One recording cannot be used; ``preprocess`` records it and goes on with the others."""


class ModelFileError(EegformerError):
    exit_code = 4


class OutputError(EegformerError):
    exit_code = 5


class PartialFailure(EegformerError):
    exit_code = 6


def first_few(items: Sequence[str], n: int = 3) -> str:
    """The first ``n`` of ``items`` joined by commas, ``, ...`` after them when there are more:
    how a message names a list it cannot show whole."""
    return ", ".join(items[:n]) + (", ..." if len(items) > n else "")


def did_you_mean(value, allowed: Iterable) -> str:
    """``"; did you mean 'condition'?"`` naming the allowed value closest to ``value``: one
    that differs only in case, else :func:`difflib.get_close_matches`' best (case ignored);
    ``""`` when none is close."""
    import difflib

    names = [str(a) for a in allowed]
    text = str(value)
    by_lower = {name.lower(): name for name in names}
    close = difflib.get_close_matches(text.lower(), list(by_lower), n=1, cutoff=0.6)
    if text.lower() in by_lower:
        close = [text.lower()]
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


def check_choice(name: str, value, allowed: Iterable) -> None:
    """Raise :class:`UsageError` naming the parameter and listing allowed values (MNE style),
    with the closest one (:func:`did_you_mean`)."""
    allowed = list(allowed)
    if value not in allowed:
        listed = ", ".join(repr(a) for a in allowed)
        raise UsageError(
            f"invalid value {value!r} for {name}; allowed values are {listed}"
            + did_you_mean(value, allowed)
        )
