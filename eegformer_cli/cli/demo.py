"""``eegformer demo``: the whole chain on the bundled ``sample_data/``, as a user would type it.

The demo runs the real subcommands in this process, in order, and prints each command line
before running it, so the output doubles as a tour of the tool.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path

import typer

import eegformer_cli
from eegformer_cli import console
from eegformer_cli.atomic import atomic_open
from eegformer_cli.errors import InputDataError
from eegformer_cli.overwrite_protection import claim_folder

#: Where a source checkout keeps the synthetic dataset (see sample_data/README.md).
SAMPLE_DATA = Path(eegformer_cli.__file__).resolve().parents[1] / "sample_data"


def _run(app: typer.Typer, args: list[str], stdout_file: Path | None = None) -> None:
    """Run ``eegformer ARGS`` in-process (stdout into ``stdout_file`` if given, atomically)."""
    line = "eegformer " + shlex.join(args)
    console.log(f"\n[bold cyan]$ {line}{f' > {stdout_file}' if stdout_file else ''}[/bold cyan]")
    started = time.perf_counter()
    if stdout_file is None:
        result = app(args=args, prog_name="eegformer", standalone_mode=False)
    else:
        with atomic_open(stdout_file, "w") as handle, contextlib.redirect_stdout(handle):
            result = app(args=args, prog_name="eegformer", standalone_mode=False)
    if isinstance(result, int) and result != 0:
        raise typer.Exit(result)
    console.log(f"[dim]({time.perf_counter() - started:.1f} s)[/dim]")


def demo(
    out: Path = typer.Option(
        Path("demo-output"),
        "--out",
        "-o",
        help="Folder for every output of the demo (created; a rerun "
        "resumes and reuses finished steps).",
    ),
    data: Path = typer.Option(
        SAMPLE_DATA,
        "--data",
        help="The dataset to run on (a folder "
        "with participants.tsv and EDF files, label column `diagnosis`).",
    ),
    n_jobs: int = typer.Option(
        min(2, os.cpu_count() or 1),
        "--n-jobs",
        help="Parallel jobs for preprocessing and (on the CPU) for the training folds.",
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Write into an --out folder holding files eegformer did not write (they are "
        "kept), and give --overwrite to every step [default: off: refused].",
    ),
) -> None:
    """Run preprocess, train, predict, explain and report on the bundled sample data.

    sample_data/ holds 24 simulated participants (healthy vs depression, 19 channels, 40 s
    each; see sample_data/README.md). Takes a few minutes on a 2-core CPU and prints where each
    output is.

    Example:

        eegformer demo --out demo-output
    """
    from eegformer_cli.cli.app import app
    from eegformer_cli.experiment import run_folder

    if not (data / "participants.tsv").is_file():
        raise InputDataError(
            "no participants.tsv here: the demo needs the sample_data/ folder of a source checkout",
            path=data,
            hint="pass --data DIR",
        )
    claim_folder(out, "demo", overwrite)
    again = ["--overwrite"] if overwrite else []
    prep, run, explanations = out / "preprocessed", out / "run", out / "explanations"
    predictions, report = out / "predictions.csv", out / "report.html"
    _run(app, ["preprocess", str(data), "--out", str(prep), "--n-jobs", str(n_jobs), *again])
    _run(app, _train_args(prep, run, n_jobs, again))
    # Predicting raw EDFs exercises the model file's stored preprocessing; these participants
    # were seen in training (each row's warning says so), so read the cross-validated
    # run/oof_predictions.tsv (and the report's per-recording table) for accuracy.
    _run(
        app,
        [
            "predict",
            str(run_folder.model_path(run)),
            str(data / "eeg"),
            "--participants",
            str(data / "participants.tsv"),
            "--format",
            "csv",
        ],
        stdout_file=predictions,
    )
    # the run folder: each recording explained by the fold model that did not train on it
    _run(app, ["explain", str(run), str(prep), "--out", str(explanations), *again])
    _run(
        app,
        ["report", str(run), "--explanations", str(explanations), "--out", str(report), *again],
    )
    _print_outputs(prep, run, predictions, explanations, report)


def _train_args(prep: Path, run: Path, n_jobs: int, again: list[str]) -> list[str]:
    """The demo's ``train`` arguments: 3-fold CV of ``prep`` into ``run``, ``n_jobs`` folds at
    once on the CPU (where ``--device auto`` trains the ``default`` preset's model, GPU or not:
    ``devices.resolve_train_device``)."""
    return [
        "train",
        str(prep),
        "--out",
        str(run),
        "--label-column",
        "diagnosis",
        "--cv",
        "3",
        "--n-jobs",
        str(n_jobs),
        *again,
    ]


def _print_outputs(prep: Path, run: Path, predictions: Path, explanations: Path, report: Path):
    """The closing lines: where each of the demo's outputs is."""
    from eegformer_cli.experiment import run_folder
    from eegformer_cli.preprocess.output import MANIFEST_NAME

    console.log("\n[bold green]Demo finished.[/bold green] Outputs:")
    for what, path in (
        ("connectomes + manifest", prep / MANIFEST_NAME),
        ("run folder (model, metrics)", run_folder.metrics_path(run)),
        ("predictions", predictions),
        ("explanations", explanations),
        ("HTML report", report),
    ):
        console.log(f"  {what:<28} {path}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
