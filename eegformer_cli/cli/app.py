"""The ``eegformer`` command: global options, error handling and the subcommands.

Each subcommand lives in its own module of this package and exposes ``register(app)``.
User errors (:class:`~eegformer_cli.errors.EegformerError`) become one line on stderr and the
exit code documented in :mod:`eegformer_cli.errors`; tracebacks appear only with ``--debug``.
"""

from __future__ import annotations

import os
import signal
import sys

import typer
from typer.core import TyperOption

import eegformer_cli
from eegformer_cli import console
from eegformer_cli.cli.arguments import belongs_elsewhere
from eegformer_cli.errors import EegformerError

#: Commands that an interrupted run resumes when given again (they keep finished work).
RESUMABLE_COMMANDS = ("preprocess", "train", "demo")


def _flags_show_no_type() -> None:
    """A boolean flag (``--strict``, ``--help``) takes no value, but Typer's rich help shows it
    as ``<bool>`` as if it did: make the help show no type for flags (every other option's
    display is Typer's own)."""
    typer_display = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        return None if self.is_flag else typer_display(self, ctx)

    # a deliberate patch of Typer's class (mypy refuses any assignment to a method)
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_type()

app = typer.Typer(
    name="eegformer",
    help="Explainable EEG brain-disorder classification (XAIguiFormer).\n\n"
    "Chain: preprocess -> train -> predict / explain -> report. Try `eegformer demo`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"eegformer {eegformer_cli.__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    """Global options (before the subcommand)."""


def _register_commands() -> None:
    import importlib

    for name in ("simulate", "preprocess", "train", "predict", "explain", "report", "demo"):
        try:
            module = importlib.import_module(f"eegformer_cli.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"eegformer_cli.cli.{name}":
                raise
            continue  # not implemented yet
        module.register(app)


_register_commands()


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; never lets a user error end in a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in args
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    stdout = sys.stdout
    try:
        with console.warnings_on_stderr():
            result = app(args=args, prog_name="eegformer", standalone_mode=False)
    except SystemExit:
        # Click answers a broken stdout pipe by swapping sys.stdout for a quiet wrapper and
        # exiting 1, which would read as an internal error
        if sys.stdout is not stdout:
            _reader_has_gone()
        raise
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print(_interrupted(args), file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as exc:  # Typer's own usage errors (bad flags): exit 2
        _point_to_the_owner(exc)
        if hasattr(exc, "show"):  # Click's exceptions; Typer's base class has no show()
            exc.show()
        else:
            print(f"Error: {exc.format_message()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except EegformerError as exc:
        if debug:
            raise
        if not exc.printed:
            print(f"eegformer: error: {exc.one_line()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print(_interrupted(args), file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        _reader_has_gone()
    except Exception as exc:  # a bug: keep the terminal clean unless asked
        if debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(
            f"eegformer: internal error: {type(exc).__name__}: {message} "
            "(rerun with --debug for the traceback and report it)",
            file=sys.stderr,
        )
        sys.exit(1)
    if result == 130:  # Typer turns Ctrl-C / SIGTERM inside a command into a returned 130
        print(_interrupted(args), file=sys.stderr)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_has_gone()
    sys.exit(result if isinstance(result, int) else 0)


def _point_to_the_owner(exc) -> None:
    """An unknown option that belongs to another command (``train --crop``): Click's "No such
    option" names that command (:func:`~eegformer_cli.cli.arguments.belongs_elsewhere`)
    instead of guessing options of similar spelling (``--cv, --lr``)."""
    option, context = getattr(exc, "option_name", None), getattr(exc, "ctx", None)
    pointer = belongs_elsewhere(context.info_name if context else None, option)
    if pointer:
        exc.message = f"No such option: {option}; {pointer}."
        exc.possibilities = None


def _interrupted(args: list[str]) -> str:
    """The line for an interrupted command: rerunning resumes only :data:`RESUMABLE_COMMANDS`
    (``predict``, ``explain``, ``report`` keep nothing to resume from)."""
    command = next((arg for arg in args if not arg.startswith("-")), None)
    if command in RESUMABLE_COMMANDS:
        return "eegformer: interrupted; rerun the same command to resume"
    return "eegformer: interrupted"


def _reader_has_gone() -> None:
    """stdout's reader closed the pipe (``eegformer predict ... | head``): stop quietly with
    141 = 128 + SIGPIPE, the status of every Unix tool in that case, not an internal error.
    stdout goes to /dev/null first so that Python's own flush at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)
