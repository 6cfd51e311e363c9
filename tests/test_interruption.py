"""Interrupted ``preprocess`` runs with parallel workers: Ctrl-C, then kill -9, then a rerun.

tests/test_preprocess.py (SIGTERM, one process) and tests/test_training.py (SIGTERM during
cross-validation) cover the single-process cases; this module covers what ``--n-jobs 2`` adds:
worker processes. Ctrl-C in a terminal sends SIGINT to every process of the foreground group,
workers included; the run must still end with one line and exit 130 (no worker traceback),
leave no worker behind, and a later run must finish the job without redoing finished
recordings, even after a kill -9 that gave nothing a chance to clean up.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eegformer_cli.preprocess import load_connectome
from eegformer_cli.simulation.simulate import simulate_dataset

#: The test here runs preprocess in another process: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow
N_RECORDINGS = 6


def start_preprocess(study: Path, out: Path) -> subprocess.Popen:
    """``eegformer preprocess --n-jobs 2`` in a process group of its own, with SIGINT handled
    as in a terminal's foreground job (a test run started in the background inherits it
    ignored)."""
    command = [
        sys.executable,
        "-m",
        "eegformer_cli",
        "preprocess",
        str(study),
        "--out",
        str(out),
        "--n-jobs",
        "2",
    ]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def finished(out: Path) -> dict[str, int]:
    """Connectome files written so far: name -> modification time (ns)."""
    return {f.name: f.stat().st_mtime_ns for f in (out / "connectomes").glob("*.npz")}


def wait_for_more_than(out: Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while len(finished(out)) <= count and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be interrupted"


def worker_pids(pid: int) -> list[int]:
    """The worker processes (forked pool) of process ``pid`` (Linux /proc)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


def ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT (the SigIgn mask of /proc/<pid>/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(status.split("SigIgn:")[1].split()[0], 16)
    return bool(mask & (1 << (signal.SIGINT - 1)))


def group_is_gone(pgid: int, timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_then_kill_9_then_rerun_finishes_the_job(tmp_path):
    study = tmp_path / "study"
    simulate_dataset(study, n_participants=N_RECORDINGS, duration_s=60, sfreq=128, seed=3)
    out = tmp_path / "prep"

    # Ctrl-C: SIGINT to the whole group, parent and workers
    run = start_preprocess(study, out)
    wait_for_more_than(out, 0, run)
    if sys.platform == "linux":  # deterministic: a worker hit between tasks would print a traceback
        workers = worker_pids(run.pid)
        assert len(workers) == 2 and all(map(ignores_sigint, workers))
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert "Traceback" not in err, err
    assert (
        err.strip().splitlines()[-1] == "eegformer: interrupted; rerun the same command to resume"
    )
    assert group_is_gone(run.pid), "worker processes outlived the interrupted run"
    after_ctrl_c = finished(out)
    assert 1 <= len(after_ctrl_c) < N_RECORDINGS
    for name in after_ctrl_c:
        load_connectome(out / "connectomes" / name)  # complete files only

    # kill -9 of a rerun: no handler runs, temporaries may stay, the lock dies with the process
    run = start_preprocess(study, out)
    wait_for_more_than(out, len(after_ctrl_c), run)
    os.killpg(run.pid, signal.SIGKILL)
    run.communicate(timeout=60)
    assert group_is_gone(run.pid)
    after_kill = finished(out)
    assert {name: after_kill[name] for name in after_ctrl_c} == after_ctrl_c  # not redone
    for name in after_kill:
        load_connectome(out / "connectomes" / name)

    # the rerun finishes the job, keeps the finished files and leaves nothing temporary
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eegformer_cli",
            "preprocess",
            str(study),
            "--out",
            str(out),
            "--n-jobs",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"({len(after_kill)} already done)" in done.stdout
    final = finished(out)
    assert len(final) == N_RECORDINGS
    assert {name: final[name] for name in after_kill} == after_kill
    rows = list(csv.DictReader(io.StringIO((out / "manifest.tsv").read_text()), delimiter="\t"))
    assert len(rows) == N_RECORDINGS and {row["status"] for row in rows} == {"ok"}
    assert not list(out.rglob(".tmp-*"))
