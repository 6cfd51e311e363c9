"""The command-line interface: argument parsing only; the work lives in the other packages."""

from __future__ import annotations

import typer

from eegformer_cli.errors import InputDataError


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
