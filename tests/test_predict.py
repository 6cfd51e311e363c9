"""``predict`` on real recordings: msu EDFs -> preprocess -> train (holdout) -> predict the raw
EDFs of the held-out participants, which must reproduce the run's own out-of-fold
probabilities; adapted and broken recordings; output formats.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import mne
import pytest
from builders import shared_dataset

from eegformer_cli.experiment.run import run_training
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.training.config import resolve_config

#: Every test here runs the CLI in another process on msu: `make test-fast` leaves them out.
pytestmark = pytest.mark.slow
EEGFORMER = [sys.executable, "-m", "eegformer_cli"]
N_PER_CLASS = 8


def run_cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        EEGFORMER + [str(a) for a in args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def msu_run(tmp_path_factory) -> dict:
    """16 msu recordings (8 per class) preprocessed, and a tiny model trained with a 25 %
    participant holdout (its model file is the model evaluated on the held-out people), its
    transformer's residual kept (so that demographics, which the linear path does not read
    here, reach its output)."""

    msu = shared_dataset("msu-schizophrenia")
    rows = list(csv.DictReader(open(msu / "participants.tsv"), delimiter="\t"))
    chosen = [r["participant_id"] for r in rows if r["diagnosis"] == "healthy"][:N_PER_CLASS] + [
        r["participant_id"] for r in rows if r["diagnosis"] == "schizophrenia"
    ][:N_PER_CLASS]
    edfs = [msu / "eeg" / f"{pid}_task-rest_eeg.edf" for pid in chosen]
    root = tmp_path_factory.mktemp("msu")
    prep = root / "prep"
    run_preprocess(
        edfs,
        prep,
        PreprocessSettings.from_preset("default"),
        participants=msu / "participants.tsv",
        n_jobs=2,
    )
    config = resolve_config(
        "default",
        None,
        {
            "epochs": 2,
            "batch_size": 8,
            "holdout": 0.25,
            "val_fraction": 0.25,
            "device": "cpu",
            "transformer_path": "on",
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1},
        },
    )
    run_dir = root / "run"
    run_training(prep, run_dir, "diagnosis", config)
    test_ids = json.loads((run_dir / "splits.json").read_text())["folds"][0]["test"]
    return {
        "msu": msu,
        "prep": prep,
        "run": run_dir,
        "model": run_dir / "model.pt",
        "test_edfs": [msu / "eeg" / f"{pid}_task-rest_eeg.edf" for pid in test_ids],
    }


def _oof(run_dir: Path) -> dict[str, dict]:
    text = (run_dir / "oof_predictions.tsv").read_text()
    return {
        row["recording_id"]: row
        for row in csv.DictReader(io.StringIO(text), delimiter="\t")
        if row["model"] == "xaiguiformer"
    }


def test_predict_on_raw_edfs_reproduces_the_out_of_fold_probabilities(msu_run):
    done = run_cli("predict", msu_run["model"], *msu_run["test_edfs"])
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [r["recording_id"] for r in rows] == [
        p.name.removesuffix(".edf") for p in msu_run["test_edfs"]
    ]
    assert list(rows[0]) == [
        "recording_id",
        "participant_id",
        "predicted",
        "prob_healthy",
        "prob_schizophrenia",
        "source_file",
        "n_segments",
        "n_segments_rejected",
        "channels_interpolated",
        "age",
        "age_source",
        "sex",
        "sex_source",
        "warnings",
    ]
    # the held-out participants were not the model's training data: nothing to warn about
    assert [row["source_file"] for row in rows] == [str(p) for p in msu_run["test_edfs"]]
    assert all(row["warnings"] == "" and row["sex_source"] == "table" for row in rows)
    assert "warning" not in done.stderr
    oof = _oof(msu_run["run"])
    assert set(oof) == {r["recording_id"] for r in rows}
    for row in rows:
        expected = oof[row["recording_id"]]
        assert row["participant_id"] == expected["participant_id"]
        for label in ("healthy", "schizophrenia"):
            assert float(row[f"prob_{label}"]) == pytest.approx(
                float(expected[f"prob_{label}"]), abs=1e-5
            )
        assert row["predicted"] == expected["predicted"]


def test_predict_on_a_preprocess_folder_and_json_formats(msu_run):
    done = run_cli("predict", msu_run["model"], msu_run["prep"], "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 2 * N_PER_CLASS
    for row in rows:
        assert row["prob_healthy"] + row["prob_schizophrenia"] == pytest.approx(1.0)
    oof = _oof(msu_run["run"])
    for row in rows:
        if row["recording_id"] in oof:
            assert row["prob_healthy"] == pytest.approx(
                float(oof[row["recording_id"]]["prob_healthy"]), abs=1e-5
            )


def test_other_names_and_rate_are_adapted_and_broken_files_reported(msu_run, tmp_path):
    source = msu_run["test_edfs"][0]
    raw = mne.io.read_raw_edf(source, preload=True, verbose="error")
    raw.rename_channels({name: f"EEG {name.upper()}-REF" for name in raw.ch_names})
    raw.resample(256, verbose="error")
    adapted = tmp_path / "adapted.edf"
    mne.export.export_raw(adapted, raw, fmt="edf", verbose="error")
    broken = tmp_path / "broken.edf"
    broken.write_bytes(source.read_bytes()[:1000])
    done = run_cli(
        "predict", msu_run["model"], adapted, broken, source, "--format", "jsonl", "--sex", "M"
    )
    assert done.returncode == 3, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["recording_id"] for r in rows] == ["adapted", source.name.removesuffix(".edf")]
    # the same EEG under other names and another rate gives nearly the same answer
    assert rows[0]["prob_healthy"] == pytest.approx(rows[1]["prob_healthy"], abs=0.05)
    errors = [line for line in done.stderr.splitlines() if "broken.edf" in line]
    assert len(errors) == 1 and "corrupt or truncated" in errors[0]


def test_bad_flags(msu_run):
    done = run_cli("predict", msu_run["model"], msu_run["prep"], "--format", "xml")
    assert done.returncode == 2 and "allowed values are 'csv', 'json', 'jsonl'" in done.stderr
    done = run_cli("predict", msu_run["model"], msu_run["prep"], "--sex", "robot")
    assert done.returncode == 2 and "invalid --sex 'robot'" in done.stderr
    assert done.stdout == ""  # flags are checked before the first output line
    done = run_cli("predict", msu_run["model"], msu_run["prep"], "--age", "-5")
    assert done.returncode == 2 and "invalid --age" in done.stderr and done.stdout == ""
    done = run_cli("predict", msu_run["model"], msu_run["prep"], "--device", "gpu")
    assert done.returncode == 2 and "'auto', 'cpu', 'cuda'" in done.stderr
    done = run_cli("predict", msu_run["model"], msu_run["prep"], "--max-interpolated", "-1")
    assert done.returncode == 2 and "invalid --max-interpolated -1" in done.stderr
    done = run_cli("predict", msu_run["model"], msu_run["test_edfs"][0], "/no/such/recording.edf")
    assert done.returncode == 3 and "no such file" in done.stderr and done.stdout == ""


def test_a_preprocess_folder_made_with_other_settings_is_refused(msu_run, tmp_path):
    edfs = msu_run["test_edfs"][:2]
    other = tmp_path / "six-second-epochs"
    run_preprocess(
        edfs,
        other,
        PreprocessSettings.from_preset("default", epoch_length=6.0),
        participants=msu_run["msu"] / "participants.tsv",
    )
    done = run_cli("predict", msu_run["model"], other)
    assert done.returncode == 3 and done.stdout == ""
    assert "epoch_length 6 (model: 15)" in done.stderr and str(other) in done.stderr
    assert "raw recordings" in done.stderr and "Traceback" not in done.stderr
    # the same recordings given raw are preprocessed with the model's settings
    done = run_cli("predict", msu_run["model"], *edfs)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3
    # a folder of an earlier version (settings stored before the resampling method: FFT)
    earlier = tmp_path / "earlier-version"
    run_preprocess(edfs, earlier, PreprocessSettings.from_preset("default", epoch_length=15.0))
    stored = json.loads((earlier / "preprocess.json").read_text())
    del stored["settings"]["resample_method"]
    (earlier / "preprocess.json").write_text(json.dumps(stored))
    done = run_cli("predict", msu_run["model"], earlier)
    assert done.returncode == 3 and "resample_method fft (model: polyphase)" in done.stderr


def _probabilities(done: subprocess.CompletedProcess) -> dict[str, float]:
    assert done.returncode == 0, done.stderr
    return {row["recording_id"]: row["prob_healthy"] for row in json.loads(done.stdout)}


def test_participants_table_replaces_a_preprocess_folders_demographics(msu_run, tmp_path):
    manifest = list(csv.DictReader(open(msu_run["prep"] / "manifest.tsv"), delimiter="\t"))
    table = tmp_path / "people.csv"
    table.write_text(
        "participant_id,age,sex\n" + "".join(f"{row['participant_id']},80,F\n" for row in manifest)
    )
    prep, model = msu_run["prep"], msu_run["model"]
    from_table = _probabilities(
        run_cli("predict", model, prep, "--participants", table, "--format", "json")
    )
    forced = _probabilities(
        run_cli("predict", model, prep, "--age", 80, "--sex", "F", "--format", "json")
    )
    own = _probabilities(run_cli("predict", model, prep, "--format", "json"))
    # this tiny model barely looks at demographics, but deterministically: any change shows
    assert from_table == pytest.approx(forced, abs=1e-12)
    assert max(abs(from_table[key] - own[key]) for key in own) > 0
    done = run_cli("predict", model, prep, "--participants", tmp_path / "nosuch.tsv")
    assert done.returncode == 3 and "nosuch.tsv" in done.stderr and done.stdout == ""


def test_max_interpolated_lets_a_recording_with_more_missing_channels_through(msu_run, tmp_path):
    raw = mne.io.read_raw_edf(msu_run["test_edfs"][0], preload=True, verbose="error")
    raw.drop_channels(raw.ch_names[:3])
    lacking = tmp_path / "three-missing.edf"
    mne.export.export_raw(lacking, raw, fmt="edf", verbose="error")
    done = run_cli("predict", msu_run["model"], lacking)
    assert (
        done.returncode == 3
        and "--max-interpolated" in done.stderr
        and done.stdout.count("\n") == 1
    )
    done = run_cli("predict", msu_run["model"], lacking, "--max-interpolated", 3)
    assert done.returncode == 0 and "three-missing" in done.stdout
