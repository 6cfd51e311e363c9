"""The command-line interface: argument parsing only; the work lives in the other packages."""

from __future__ import annotations

import typer
from rich.markup import escape

from eegformer_cli import console
from eegformer_cli.errors import InputDataError, PartialFailure


def exit_for_failed_recordings(failed_ids: list[str], what: str) -> None:
    """End a command whose per-recording errors were already printed (one line each): exit 3.

    With one failure its own line says everything, so nothing more is printed; with several,
    one summary line names the first few (``what``: e.g. "predicted").
    """
    if len(failed_ids) == 1:
        raise typer.Exit(InputDataError.exit_code)
    if failed_ids:
        shown = ", ".join(failed_ids[:5]) + (" ..." if len(failed_ids) > 5 else "")
        raise InputDataError(f"{len(failed_ids)} recording(s) could not be {what}: {shown}")


def print_recording_warnings(recording_id: str, warnings: list[str]) -> None:
    """A usable recording's warnings on stderr, one line each: ``warning: ID: KIND: text``."""
    for line in warnings:
        console.warn(escape(f"{recording_id}: {line}"))


def note_unchecked_model(bundle, strict: bool) -> None:
    """One line when the model file does not describe its training data (written before
    eegformer kept it): no recording can be checked against it. Under ``--strict`` that is
    itself a reason for exit 6 (see :func:`exit_for_warnings`)."""
    if bundle.training_data is None:
        console.warn(escape(
            f"{bundle.path} does not describe its training data (written by eegformer "
            f"{bundle.eegformer_version}): no check whether a recording was in it or is outside "
            "its range of age, sex, sampling rate and length" + (
                "; --strict: exit 6" if strict else "; retrain to get these checks")))


def exit_for_warnings(strict: bool, warned_ids: list[str], bundle, what: str) -> None:
    """Under ``--strict``: exit 6 (:class:`PartialFailure`, every output written) when a
    recording got a warning or the model cannot be checked (:func:`note_unchecked_model`)."""
    if not strict:
        return
    if warned_ids:
        shown = ", ".join(warned_ids[:5]) + (" ..." if len(warned_ids) > 5 else "")
        raise PartialFailure(f"--strict: {len(warned_ids)} {what} recording(s) got warnings "
                             f"(on stderr and in the output): {shown}")
    if bundle.training_data is None:
        raise PartialFailure(f"--strict: {bundle.path} does not describe its training data, "
                             "so the recordings could not be checked against it",
                             hint="retrain with this eegformer version")
