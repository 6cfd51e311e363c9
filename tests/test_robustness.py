"""Robustness of the command line (issue 7): every kind of bad input, and two runs at once.

Each bad input of issue 7 is one row of :data:`CASES`, run through the real command line
(``preprocess``, ``train``, ``predict``, ``explain``, ``report``) in a subprocess
(``python -m eegformer_cli ...``). Every row checks

* the exit code (:mod:`eegformer_cli.errors`: 3 bad data, 4 bad model file, 5 output not
  writable, 6 a recording failed under ``--strict``);
* exactly one error line on stderr, naming the file and the problem (the other stderr lines, if
  any, are the command's own log lines), and no traceback anywhere;
* that nothing else was lost: the good recording given beside the bad one is processed, and the
  outputs already in the folder are unchanged.

The data is a small simulated study (8 participants, 30 s EDF at 128 Hz, the project's own
simulator), preprocessed and used to train one tiny model once per module; the bad inputs are
derived from it. The subprocesses of all rows run two at a time in one module fixture
(:func:`outcomes`, about 25 interpreter start-ups, most of the module's time) and each test
checks its own row's outcome. Interruptions (a signal mid-run, then a rerun) are in
tests/test_interruption.py, tests/test_preprocess.py and tests/test_training.py.
"""

from __future__ import annotations

import ast
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import mne
import numpy as np
import pytest
import torch
from builders import TINY_TOML

from eegformer_cli.experiment.run import run_training
from eegformer_cli.preprocess import PreprocessSettings, load_connectome, run_preprocess
from eegformer_cli.simulation import simulate
from eegformer_cli.training.config import resolve_config
from eegformer_cli.training.model_file import FORMAT_VERSION

#: Every test here runs the CLI in another process: `make test-fast` leaves them out.
pytestmark = pytest.mark.slow
EEGFORMER = [sys.executable, "-m", "eegformer_cli"]
SEED = 11
N_PARTICIPANTS = 8
DURATION_S = 30
SFREQ = 128
# Channels and epoch length fixed, so that a rerun with other recordings beside keeps the
# settings hash and skips the recordings already done.
FIXED_SETTINGS = {"channels": simulate.CHANNELS, "epoch_length": 6.0}
FIXED_FLAGS = ["--channels", ",".join(simulate.CHANNELS), "--epoch-length", "6"]
TINY_TRAINING = {
    "epochs": 2,
    "batch_size": 8,
    "augmentation": "none",
    "device": "cpu",
    "holdout": 0.25,
    "val_fraction": 0.34,
    "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1},
}


@dataclass
class Workspace:
    """The shared data of the module (all paths absolute)."""

    root: Path
    study: Path  # simulate output: participants.tsv, eeg/*.edf
    good: Path  # one good recording of the study (participant sub-01)
    prep: Path  # preprocess output of the whole study (FIXED_SETTINGS)
    model: Path  # a tiny model trained on ``prep`` (holdout)
    bad: dict[str, Path] = field(default_factory=dict)  # name -> bad recording
    tables: dict[str, Path] = field(default_factory=dict)  # name -> bad participants table
    models: dict[str, Path] = field(default_factory=dict)  # name -> bad model file


def _participant_raw(duration_s: float = DURATION_S, sfreq: float = SFREQ) -> mne.io.RawArray:
    """The simulated recording of the study's first participant (plain 10-20 labels)."""
    return simulate.simulate_participant(
        simulate.draw_participants(N_PARTICIPANTS, SEED)[0], duration_s, sfreq
    )


def write_bad_recordings(folder: Path, good: Path) -> dict[str, Path]:
    """One file per bad recording of issue 7, derived from a good simulated one."""
    folder.mkdir()
    paths = {}

    def edf(name: str, raw: mne.io.BaseRaw) -> None:
        paths[name] = folder / f"{name}.edf"
        simulate.write_edf(raw, paths[name])

    paths["empty"] = folder / "empty.edf"
    paths["empty"].write_bytes(b"")
    paths["truncated"] = folder / "truncated.edf"
    content = good.read_bytes()
    paths["truncated"].write_bytes(content[: len(content) // 2])
    paths["text"] = folder / "text.edf"
    paths["text"].write_text("participant_id\tage\nsub-01\t30\n")
    edf("short", _participant_raw(duration_s=5))
    edf("flat", _participant_raw().apply_function(lambda x: x * 0.0, picks=["Cz"]))
    paths["nan"] = folder / "nan_raw.fif"  # EDF cannot store NaN; FIF can
    _participant_raw().apply_function(lambda x: np.full_like(x, np.nan)).save(
        paths["nan"], verbose="error"
    )
    edf("two_channels", _participant_raw().pick(["Fp1", "Fp2"]))
    numbered = _participant_raw()
    numbered.rename_channels({name: f"E{i + 1}" for i, name in enumerate(numbered.ch_names)})
    edf("numbered", numbered)
    edf("rate64", _participant_raw(sfreq=64))
    return paths


def write_bad_tables(folder: Path, participants: Path) -> dict[str, Path]:
    """participants.tsv variants with one defect each (the row of sub-01 edited)."""
    folder.mkdir()
    header, *rows = [line.split("\t") for line in participants.read_text().splitlines()]
    age, sex = header.index("age"), header.index("sex")

    def table(name: str, edited_rows: list[list[str]]) -> None:
        paths[name] = folder / f"{name}.tsv"
        paths[name].write_text("\n".join("\t".join(r) for r in [header, *edited_rows]) + "\n")

    def with_first(column: int, value: str) -> list[list[str]]:
        first = list(rows[0])
        first[column] = value
        return [first, *rows[1:]]

    paths: dict[str, Path] = {}
    table("duplicated_ids", [*rows, rows[0]])
    table("age_text", with_first(age, "forty"))
    table("age_negative", with_first(age, "-3"))
    table("sex_unknown", with_first(sex, "X"))
    return paths


def write_bad_models(folder: Path, model: Path) -> dict[str, Path]:
    """A truncated model file, a text file given as the model (the run's config.json), and one
    from a newer format version."""
    folder.mkdir()
    paths = {name: folder / f"{name}.pt" for name in ("corrupt", "text", "newer")}
    content = model.read_bytes()
    paths["corrupt"].write_bytes(content[: len(content) // 2])
    paths["text"].write_bytes((model.parent / "config.json").read_bytes())
    bundle = torch.load(model, weights_only=True)
    torch.save({**bundle, "format_version": bundle["format_version"] + 1}, paths["newer"])
    return paths


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    root = tmp_path_factory.mktemp("robust")
    study = root / "study"
    simulate.simulate_dataset(study, N_PARTICIPANTS, DURATION_S, SFREQ, SEED)
    prep = root / "prep"
    summary = run_preprocess(
        [study], prep, PreprocessSettings.from_preset("default", **FIXED_SETTINGS)
    )
    assert summary.n_ok == N_PARTICIPANTS
    run_training(prep, root / "run", "diagnosis", resolve_config("default", None, TINY_TRAINING))
    (root / "tiny.toml").write_text(TINY_TOML)
    good = study / "eeg" / "sub-01_task-rest_eeg.edf"
    ws = Workspace(root=root, study=study, good=good, prep=prep, model=root / "run" / "model.pt")
    ws.bad = write_bad_recordings(root / "bad", good)
    ws.tables = write_bad_tables(root / "tables", study / "participants.tsv")
    ws.models = write_bad_models(root / "models", ws.model)
    (root / "blocker").write_text("a file where a folder is expected\n")
    return ws


# ------------------------------------------------------------------------------------------
# helpers for the checks


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> content), the lock file left out."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def manifest_rows(folder: Path) -> dict[str, dict]:
    text = (folder / "manifest.tsv").read_text()
    return {row["recording_id"]: row for row in csv.DictReader(io.StringIO(text), delimiter="\t")}


def copy_with_labels(source: Path, target: Path, label: Callable[[dict], str]) -> Path:
    """A copy of a preprocess output whose ``diagnosis`` column is rewritten by ``label``."""
    shutil.copytree(source, target)
    rows = list(manifest_rows(source).values())
    for row in rows:
        row["diagnosis"] = label(row)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, list(rows[0]), delimiter="\t", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (target / "manifest.tsv").write_text(buffer.getvalue())
    return target


# ------------------------------------------------------------------------------------------
# the cases


@dataclass(frozen=True)
class Case:
    """One bad input: how to run it, what must come out, and what must stay intact.

    ``prepare(ws, folder)`` makes what the command needs in the case's own ``folder`` and returns
    the arguments after ``eegformer``; ``intact(ws, folder, result)`` asserts that nothing else
    was lost. ``fragments`` must all appear in the error line (the file and the problem).
    """

    name: str
    prepare: Callable[[Workspace, Path], list]
    exit_code: int
    fragments: Callable[[Workspace], tuple[str, ...]]
    intact: Callable[[Workspace, Path, subprocess.CompletedProcess], None]


# -- a bad recording beside a good one: preprocess --strict into a folder that holds the good
#    recording's connectome already (a copy of the study's output)

RECORDING_PROBLEMS = {
    "empty": "empty file (0 bytes)",
    "truncated": "truncated EDF file",
    "text": "not a valid EDF file: it starts like a text file",
    "short": "recording too short: 5.0 s",
    "flat": "flat channel Cz",
    "nan": "contains NaN or infinite values",
    "two_channels": "only 2 channel(s) recognised as 10-20 electrodes",
    "numbered": "numbered cap layout",
    "rate64": "sampling rate 64 Hz of the recording is too low for band 'gamma'",
}


def _preprocess_beside_good(name: str) -> Callable[[Workspace, Path], list]:
    def prepare(ws: Workspace, folder: Path) -> list:
        shutil.copytree(ws.prep, folder / "prep")
        return [
            "preprocess",
            ws.good,
            ws.bad[name],
            "--out",
            folder / "prep",
            "--strict",
            *FIXED_FLAGS,
        ]

    return prepare


def _good_kept_and_bad_listed(name: str):
    def intact(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
        out = folder / "prep"
        before, after = snapshot(ws.prep), snapshot(out)
        connectomes = [key for key in before if key.startswith("connectomes/")]
        assert {key: after[key] for key in connectomes} == {key: before[key] for key in connectomes}
        assert "1 recordings already done" in result.stderr  # the good one was not redone
        rows = manifest_rows(out)
        good_id, bad_id = ws.good.name[:-4], ws.bad[name].name.split(".")[0]
        assert rows[good_id]["status"] == "ok"
        assert rows[good_id]["age"] == manifest_rows(ws.prep)[good_id]["age"]  # metadata kept
        assert (
            rows[bad_id]["status"] == "error" and RECORDING_PROBLEMS[name] in rows[bad_id]["error"]
        )
        assert not (out / "connectomes" / f"{bad_id}.npz").exists()
        assert not list(out.rglob(".tmp-*"))

    return intact


CASES = [
    Case(
        f"preprocess-{name}",
        _preprocess_beside_good(name),
        6,
        lambda ws, name=name, problem=problem: (str(ws.bad[name]), problem),
        _good_kept_and_bad_listed(name),
    )
    for name, problem in RECORDING_PROBLEMS.items()
]


def _nothing_written(folder_name: str):
    def intact(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
        assert snapshot(folder / folder_name) == snapshot(ws.prep)

    return intact


def _prep_copy_then(args: Callable[[Workspace, Path], list]):
    def prepare(ws: Workspace, folder: Path) -> list:
        shutil.copytree(ws.prep, folder / "prep")
        return args(ws, folder)

    return prepare


# -- the only recording is bad: nothing can be preprocessed (exit 3), the error names it
def _failure_listed(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    assert manifest_rows(folder / "new")["flat"]["status"] == "error"
    assert not list((folder / "new" / "connectomes").iterdir())


CASES.append(
    Case(
        "preprocess-only-bad-recording",
        lambda ws, folder: ["preprocess", ws.bad["flat"], "--out", folder / "new"],
        3,
        lambda ws: ("no recording could be preprocessed", str(ws.bad["flat"]), "flat channel Cz"),
        _failure_listed,
    )
)

# -- a bad participants table: refused before anything is written into the output folder
TABLE_PROBLEMS = {
    "duplicated_ids": "duplicated participant ids: sub-01",
    "age_text": "participant sub-01: age 'forty' is not a number of years",
    "age_negative": "participant sub-01: age '-3' is negative",
    "sex_unknown": "unknown sex code 'X'",
}
CASES += [
    Case(
        f"preprocess-table-{name}",
        _prep_copy_then(
            lambda ws, folder, name=name: [
                "preprocess",
                ws.good,
                "--participants",
                ws.tables[name],
                "--out",
                folder / "prep",
                *FIXED_FLAGS,
            ]
        ),
        3,
        lambda ws, name=name, problem=problem: (str(ws.tables[name]), problem),
        _nothing_written("prep"),
    )
    for name, problem in TABLE_PROBLEMS.items()
]

# -- labels: all missing, or a single class (train refuses; the data folder is untouched)
LABEL_PROBLEMS = {
    "missing": (lambda row: "n/a", "every recording has a missing 'diagnosis' label"),
    "one_class": (lambda row: "healthy", "column 'diagnosis' has only one class ('healthy')"),
}


def _train_on_relabelled(name: str):
    def prepare(ws: Workspace, folder: Path) -> list:
        copy_with_labels(ws.prep, folder / "prep", LABEL_PROBLEMS[name][0])
        (folder / "manifest.before").write_bytes((folder / "prep" / "manifest.tsv").read_bytes())
        return [
            "train",
            folder / "prep",
            "--out",
            folder / "run",
            "--label-column",
            "diagnosis",
            "--config",
            ws.root / "tiny.toml",
            "--holdout",
            "0.25",
        ]

    return prepare


def _labels_intact(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    assert (folder / "prep" / "manifest.tsv").read_bytes() == (
        folder / "manifest.before"
    ).read_bytes()
    assert not (folder / "run" / "model.pt").exists()


CASES += [
    Case(
        f"train-labels-{name}",
        _train_on_relabelled(name),
        3,
        lambda ws, name=name: ("manifest.tsv", LABEL_PROBLEMS[name][1]),
        _labels_intact,
    )
    for name in LABEL_PROBLEMS
]

# -- settings that cannot work: refused before any folder is made (or, for a learning rate
#    that only shows itself by diverging, after the first epoch, with what to change)


def _train_with(*flags: str):
    def prepare(ws: Workspace, folder: Path) -> list:
        return [
            "train",
            ws.prep,
            "--out",
            folder / "run",
            "--label-column",
            "diagnosis",
            "--config",
            ws.root / "tiny.toml",
            "--holdout",
            "0.25",
            *flags,
        ]

    return prepare


def _no_run_folder(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    assert not (folder / "run").exists() and not (folder / "prep").exists()


CASES += [
    Case(
        "train-lr-nan",
        _train_with("--lr", "nan"),
        2,
        lambda ws: ("invalid value nan for lr", "finite"),
        _no_run_folder,
    ),
    Case(
        "train-seed-negative",
        _train_with("--seed", "-1"),
        2,
        lambda ws: ("invalid value -1 for seed", "[0, 4294967295]"),
        _no_run_folder,
    ),
    Case(
        "train-config-is-a-folder",
        lambda ws, folder: [
            "train",
            ws.prep,
            "--out",
            folder / "run",
            "--label-column",
            "diagnosis",
            "--config",
            ws.study,
        ],
        2,
        lambda ws: (str(ws.study), "config file not readable"),
        _no_run_folder,
    ),
    Case(
        "train-lr-diverges",
        _train_with("--lr", "1e30"),
        2,
        lambda ws: ("training diverged", "lower --lr"),
        lambda ws, folder, result: _no_model_written(ws, folder, result),
    ),  # defined below
    Case(
        "preprocess-sfreq-nan",
        lambda ws, folder: ["preprocess", ws.good, "--out", folder / "prep", "--sfreq", "nan"],
        2,
        lambda ws: ("invalid --sfreq nan; it must be a finite number",),
        _no_run_folder,
    ),
]


def _every_recording_fails_into_earlier_output(ws: Workspace, folder: Path) -> list:
    shutil.copytree(ws.prep, folder / "prep")
    # no --channels: with no readable header the run's settings differ from the earlier run's,
    # so writing its manifest would drop every earlier recording
    return ["preprocess", ws.bad["empty"], ws.bad["text"], "--out", folder / "prep"]


def _earlier_output_unchanged(
    ws: Workspace, folder: Path, result: subprocess.CompletedProcess
) -> None:
    assert snapshot(folder / "prep") == snapshot(ws.prep)


# -- a run in which nothing succeeds must not replace an earlier run's manifest with its errors
CASES.append(
    Case(
        "preprocess-nothing-ok-into-earlier-output",
        _every_recording_fails_into_earlier_output,
        3,
        lambda ws: (
            "no recording could be preprocessed",
            str(ws.bad["empty"]),
            "is left as the earlier run wrote it",
        ),
        _earlier_output_unchanged,
    )
)

# -- an output folder that cannot be created or written
BLOCKED_OUT = "cannot create folder: Not a directory"


def _blocker_intact(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    assert (ws.root / "blocker").read_text() == "a file where a folder is expected\n"


# (train into an unwritable --out: tests/test_training.py::test_cli_errors_have_distinct_exit_codes)
CASES.append(
    Case(
        "preprocess-out-not-writable",
        lambda ws, folder: ["preprocess", ws.good, "--out", ws.root / "blocker" / "prep"],
        5,
        lambda ws: (str(ws.root / "blocker" / "prep"), BLOCKED_OUT),
        _blocker_intact,
    )
)


def _read_only_out(ws: Workspace, folder: Path) -> list:
    (folder / "locked").mkdir()
    (folder / "locked").chmod(0o555)
    return ["preprocess", ws.good, "--out", folder / "locked"]


def _read_only_stays_empty(
    ws: Workspace, folder: Path, result: subprocess.CompletedProcess
) -> None:
    assert list((folder / "locked").iterdir()) == []


CASES.append(
    Case(
        "preprocess-out-read-only",
        _read_only_out,
        5,
        lambda ws: ("locked", "folder is not writable"),
        _read_only_stays_empty,
    )
)

# -- bad model files: predict refuses with exit 4 and prints no row


def _no_rows(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    assert result.stdout == ""


MODEL_PROBLEMS = {
    "corrupt": "not a readable model file (corrupt or truncated",
    "text": "not a model file (not a PyTorch archive)",
    "newer": f"model file format version {FORMAT_VERSION + 1} is not supported",
}
CASES += [
    Case(
        f"predict-model-{name}",
        lambda ws, folder, name=name: ["predict", ws.models[name], ws.good],
        4,
        lambda ws, name=name, problem=problem: (str(ws.models[name]), problem),
        _no_rows,
    )
    for name, problem in MODEL_PROBLEMS.items()
]


# -- a bad recording beside a good one in predict: the good one's row is printed
def _good_row_printed(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["recording_id"] for row in rows] == [ws.good.name[:-4]]
    assert abs(float(rows[0]["prob_healthy"]) + float(rows[0]["prob_depression"]) - 1) < 1e-6


CASES.append(
    Case(
        "predict-flat-recording",
        lambda ws, folder: ["predict", ws.model, ws.good, ws.bad["flat"]],
        3,
        lambda ws: (str(ws.bad["flat"]), "flat channel Cz"),
        _good_row_printed,
    )
)


# -- a connectome file cut short (a partial copy) in a preprocess output


def _with_cut_connectome(ws: Workspace, folder: Path, which: int) -> Path:
    """Copy the study's output into ``folder/prep`` and truncate its ``which``-th connectome."""
    shutil.copytree(ws.prep, folder / "prep")
    cut = sorted((folder / "prep" / "connectomes").glob("*.npz"))[which]
    cut.write_bytes(cut.read_bytes()[:3000])
    return cut


def _train_on_cut_connectome(ws: Workspace, folder: Path) -> list:
    _with_cut_connectome(ws, folder, 0)
    return [
        "train",
        folder / "prep",
        "--out",
        folder / "run",
        "--label-column",
        "diagnosis",
        "--config",
        ws.root / "tiny.toml",
        "--holdout",
        "0.25",
    ]


def _predict_on_cut_connectome(ws: Workspace, folder: Path) -> list:
    _with_cut_connectome(ws, folder, -1)
    return ["predict", ws.model, folder / "prep"]


def _no_model_written(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    assert not (folder / "run" / "model.pt").exists()


def _other_rows_printed(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == N_PARTICIPANTS - 1


CASES += [
    Case(
        "train-connectome-truncated",
        _train_on_cut_connectome,
        3,
        lambda ws: (
            "sub-01_task-rest_eeg.npz: cannot read connectome",
            "rerun `eegformer preprocess`",
        ),
        _no_model_written,
    ),
    Case(
        "predict-connectome-truncated",
        _predict_on_cut_connectome,
        3,
        lambda ws: (f"sub-{N_PARTICIPANTS:02d}_task-rest_eeg.npz: cannot read connectome",),
        _other_rows_printed,
    ),
]


# -- explain: bad model files, a bad recording beside a good one, an unwritable --out
CASES += [
    Case(
        f"explain-model-{name}",
        lambda ws, folder, name=name: [
            "explain",
            ws.models[name],
            ws.good,
            "--out",
            folder / "explanations",
        ],
        4,
        lambda ws, name=name: (str(ws.models[name]), MODEL_PROBLEMS[name]),
        lambda ws, folder, result: _nothing_in(folder / "explanations"),
    )
    for name in ("corrupt",)
]  # explain reads model files as predict does


def _nothing_in(folder: Path) -> None:
    assert not folder.exists() or not list(folder.iterdir())


def _good_explained(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    out, good_id = folder / "explanations", ws.good.name[:-4]
    assert (out / f"{good_id}.npz").is_file() and (out / f"{good_id}.json").is_file()
    assert (out / "class_summary.json").is_file() and not list(out.glob("flat.*"))


CASES += [
    Case(
        "explain-flat-recording",
        lambda ws, folder: [
            "explain",
            ws.model,
            ws.good,
            ws.bad["flat"],
            "--out",
            folder / "explanations",
            "--n-steps",
            "2",
        ],
        3,
        lambda ws: (str(ws.bad["flat"]), "flat channel Cz"),
        _good_explained,
    ),
    Case(
        "explain-out-not-writable",
        lambda ws, folder: ["explain", ws.model, ws.good, "--out", ws.root / "blocker" / "ex"],
        5,
        lambda ws: (str(ws.root / "blocker" / "ex"), BLOCKED_OUT),
        _blocker_intact,
    ),
]


# -- report: not a run folder, a damaged metrics.json, an unwritable --out
def _report_on_damaged_metrics(ws: Workspace, folder: Path) -> list:
    shutil.copytree(ws.model.parent, folder / "run")
    metrics = folder / "run" / "metrics.json"
    metrics.write_text(metrics.read_text()[:100])
    return ["report", folder / "run", "--out", folder / "report.html"]


def _no_report(ws: Workspace, folder: Path, result: subprocess.CompletedProcess) -> None:
    assert not (folder / "report.html").exists() and result.stdout == ""


CASES += [
    Case(
        "report-not-a-run-folder",
        lambda ws, folder: ["report", ws.prep, "--out", folder / "report.html"],
        3,
        lambda ws: (str(ws.prep), "not a run folder (no config.json)"),
        _no_report,
    ),
    Case(
        "report-metrics-damaged",
        _report_on_damaged_metrics,
        3,
        lambda ws: ("metrics.json: unreadable JSON",),
        _no_report,
    ),
    Case(
        "report-out-not-writable",
        lambda ws, folder: [
            "report",
            ws.model.parent,
            "--out",
            ws.root / "blocker" / "report.html",
        ],
        5,
        lambda ws: (str(ws.root / "blocker"), "cannot create folder"),
        _blocker_intact,
    ),
]


def _runs_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _skip_reason(case: Case) -> str | None:
    if case.name == "preprocess-out-read-only" and _runs_as_root():
        return "runs as root, who can write into a read-only folder"
    return None


def run_cli(args: list, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        EEGFORMER + [str(a) for a in args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def outcomes(workspace, tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Every case run once: name -> (its folder, the finished process); two at a time."""
    prepared = {}
    for case in CASES:
        if _skip_reason(case) is None:
            folder = tmp_path_factory.mktemp(case.name)
            prepared[case.name] = (folder, case.prepare(workspace, folder))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run_cli, args) for name, (_, args) in prepared.items()}
        return {name: (prepared[name][0], future.result()) for name, future in futures.items()}


#: How the commands' own log lines on stderr start (anything else beside the error is noise).
LOG_PREFIXES = ("preprocess: ", "train: ", "explain: ", "warning: ", "explained ")


def assert_one_error_line(result: subprocess.CompletedProcess) -> str:
    """The error line: the only stderr line starting ``eegformer: error:``; every other stderr
    line is one of the command's log lines. No traceback anywhere."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("eegformer: error: ")]
    assert len(errors) == 1, result.stderr
    for line in lines:
        assert line in errors or line.startswith(LOG_PREFIXES), result.stderr
    return errors[0]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_gives_one_line_error_and_distinct_exit_code(case, workspace, outcomes):
    if _skip_reason(case):
        pytest.skip(_skip_reason(case))
    folder, result = outcomes[case.name]
    assert result.returncode == case.exit_code, result.stderr
    error = assert_one_error_line(result)
    for fragment in case.fragments(workspace):
        assert fragment in error, (fragment, error)
    case.intact(workspace, folder, result)


def test_debug_shows_the_traceback_that_is_otherwise_hidden(workspace):
    """``--debug`` is the only way to a traceback (the checks above would catch one)."""
    result = run_cli(["--debug", "predict", workspace.models["corrupt"], workspace.good])
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ModelFileError" in result.stderr


def test_two_preprocess_runs_into_one_folder(workspace, tmp_path):
    """The second run is refused (exit 5, one line) while the first holds the folder, touches
    nothing, and the first then finishes a complete, uncorrupted output.

    The first run is paused (SIGSTOP) as soon as it has written a connectome, i.e. while it is
    surely inside its locked section, so the overlap does not depend on timing.
    """
    out = tmp_path / "prep"
    command = ["preprocess", workspace.study, "--out", out]
    first = subprocess.Popen(
        EEGFORMER + [str(a) for a in command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while (
            not list((out / "connectomes").glob("*.npz"))
            and first.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        first.send_signal(signal.SIGSTOP)
        assert first.poll() is None, "the first run ended before the second started"
        before = snapshot(out)
        second = run_cli(command)
        assert snapshot(out) == before
    finally:
        first.send_signal(signal.SIGCONT)
    _, first_err = first.communicate(timeout=300)
    assert second.returncode == 5, second.stderr
    error = assert_one_error_line(second)
    assert f"{out}: another eegformer preprocess run is writing into this folder" in error
    assert first.returncode == 0, first_err
    rows = manifest_rows(out)
    assert len(rows) == N_PARTICIPANTS and {row["status"] for row in rows.values()} == {"ok"}
    for row in rows.values():
        connectome = load_connectome(out / row["connectome"])
        assert connectome.coh.shape[0] == int(row["n_segments"])
    assert not list(out.rglob(".tmp-*"))


def test_a_reader_that_stops_early_is_not_an_error(workspace):
    """``eegformer predict ... | head -1``: the reader closes the pipe; the command stops quietly
    with 141 (128 + SIGPIPE) like any Unix tool, not with 1 (internal error)."""
    process = subprocess.Popen(
        EEGFORMER + ["predict", str(workspace.model), str(workspace.prep)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    process.stdout.close()  # gone before the first row is written
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGPIPE, err
    assert "error" not in err and "Traceback" not in err


def _modules_imported_by(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` a fresh interpreter has imported after running ``code``."""
    script = f"import sys\n{code}\nprint(sorted(m for m in {names!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


def test_help_starts_without_the_heavy_libraries():
    """`eegformer --help` (and every command's start) imports no PyTorch, scikit-learn, SciPy,
    pandas, captum or matplotlib: each command imports what it needs when it runs (1.7 s of
    start-up before, 0.3 s after, on the 2-core CI machine)."""
    code = (
        "from eegformer_cli.cli.app import app\ntry:\n    app(['--help'])\n"
        "except SystemExit:\n    pass"
    )
    heavy = ("torch", "sklearn", "scipy", "pandas", "captum", "matplotlib")
    assert _modules_imported_by(code, heavy) == []


def test_predict_does_not_import_the_training_libraries():
    """What `predict` imports (model file, inputs, device) leaves out scikit-learn and pandas
    (the trainer's; ~0.5 s of a 3.4-4.0 s prediction of one recording)."""
    code = (
        "from eegformer_cli.inference.inputs import load_inputs\n"
        "from eegformer_cli.inference.predictions import predict_recordings\n"
        "from eegformer_cli.training.model_file import load_model_file\n"
        "from eegformer_cli.model.devices import resolve_device"
    )
    assert _modules_imported_by(code, ("sklearn", "pandas", "matplotlib")) == []
