"""Pipelines: ``eegformer train PREP ... > out.txt`` leaves the summary in out.txt and the
progress on stderr, ``--json`` leaves only the JSON on stdout; with stderr not a terminal a long
step prints a plain line every interval with done/total and an estimate of the time left; the
progress bar of a terminal fits 80 columns.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time

import pytest
from builders import TINY_TOML, make_connectome_folder
from rich.console import Console

from eegformer_cli import console
from eegformer_cli.console import PlainProgress, rich_progress

EEGFORMER = [sys.executable, "-m", "eegformer_cli"]


def run_main(capsys, *args) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr)."""
    from eegformer_cli.cli.app import main

    with pytest.raises(SystemExit) as stopped:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return stopped.value.code, out, err


@pytest.mark.slow
def test_train_results_go_to_stdout_and_progress_to_stderr(tmp_path, capsys):
    data = make_connectome_folder(tmp_path / "prep", n_participants=12)
    (tmp_path / "tiny.toml").write_text(TINY_TOML.replace("epochs = 2", "epochs = 1"))
    run = tmp_path / "run"
    command = [
        *EEGFORMER,
        "train",
        str(data),
        "--out",
        str(run),
        "--label-column",
        "diagnosis",
        "--config",
        str(tmp_path / "tiny.toml"),
        "--holdout",
        "0.34",
    ]
    with open(tmp_path / "out.txt", "w") as out:  # eegformer train ... > out.txt
        done = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "out.txt").read_text()
    for result in (
        "Verdict",
        "score:",
        "1 fold(s), test participants only",
        "xaiguiformer - logistic_regression, bac:",
        "shortcut audit:",
        "interaction screens:",
        f"run folder: {run}",
    ):
        assert result in summary and result not in done.stderr, result
    assert "fold r0_f0: BAC" in done.stderr and "fold r0_f0: BAC" not in summary
    # --json: stdout holds the JSON alone (a rerun in this process: the fold is reused)
    code, out, err = run_main(capsys, *command[len(EEGFORMER) :], "--json")
    assert code == 0, err
    assert json.loads(out)["run_dir"] == str(run) and "Verdict" in err
    # the answer of the above-chance rule and the interaction screens, in the JSON too
    assert json.loads(out)["above_chance"]["follows"] == "interval"
    assert json.loads(out)["interaction_screens"]["n_folds"] == 1


def test_without_a_terminal_long_steps_print_done_total_and_time_left(capsys):
    with PlainProgress(interval_s=0.05) as bar:
        folds = bar.add_task("folds", total=4, completed=1, status="")
        epochs = bar.add_task("fold r0_f1", total=40, status="")
        time.sleep(0.12)  # nothing done yet in this process: no estimate yet
        bar.advance(folds)
        bar.update(epochs, completed=10, status="loss 0.693 val BAC 0.500")
        time.sleep(0.12)
        bar.remove_task(epochs)
        bar.update(folds, completed=4)
        time.sleep(0.12)  # every task finished: silent
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith("progress 0:00:00: folds ") for line in lines), lines
    assert "folds 1/4, time left known after the first; fold r0_f1 0/40" in lines[0]
    last = lines[-1]  # rates so far: about 0.24 s a fold, 0.024 s an epoch
    assert re.search(r"folds 2/4, about 0:00:0\d left; fold r0_f1 10/40, about 0:00:0\d left", last)
    assert last.endswith("(loss 0.693 val BAC 0.500)")
    assert all("folds 4/4" not in line for line in lines)


def test_progress_lines_are_plain_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    assert not console.stderr.is_terminal  # under pytest
    assert isinstance(console.progress_bar(), PlainProgress)
    assert not console.progress_lines().silent  # predict's lines, as every long step's
    # on a terminal predict's rows are the progress: its lines stay silent
    monkeypatch.setattr(type(console.stderr), "is_terminal", property(lambda self: True))
    with console.progress_lines() as quiet:
        quiet.interval_s = 0.01
        quiet.add_task("predict", total=3, status="")
        time.sleep(0.05)
    assert quiet.silent and capsys.readouterr().err == ""


def test_the_progress_bar_fits_80_columns():
    screen = Console(file=io.StringIO(), width=80, force_terminal=True, record=True)
    bar = rich_progress(screen)
    for description, total, completed, status in (
        ("reading headers", 1000, 1000, ""),
        ("folds", 15, 3, ""),
        ("fold r0_f10", 100, 37, "loss 0.693 val BAC 0.500"),
        ("final model", 100, 100, "loss 0.693 val BAC 0.500"),
        ("permutations", 1000, 10, ""),
        ("explain", 84, 12, "sub-001_task-rest_eeg"),
    ):
        bar.add_task(description, total=total, completed=completed, status=status)
    screen.print(bar.get_renderable())
    text = screen.export_text()
    assert "…" not in text
    lines = text.rstrip("\n").splitlines()
    assert len(lines) == 6 and all(len(line.rstrip()) <= 80 for line in lines), text
    for shown in (
        "1000/1000",
        "3/15",
        "37/100",
        "loss 0.693 val BAC 0.500",
        "sub-001_task-rest_eeg",
    ):
        assert shown in text
