"""A BIDS dataset as its users have it, written by mne-bids in the test from sample recordings:
5 participants at rest and doing arithmetic in session 1, two of them at rest again in session
2 (one in two runs); F3 marked bad ("broken") in sub-01's rest recording, C3, Cz and C4 in
sub-03's arithmetic one (more than ``--max-interpolated`` allows); the channel at Fp2 of sub-02's
arithmetic recording typed EOG; a ``derivatives/`` copy of one recording.

``preprocess`` reads it through mne-bids: bad channels interpolated (or the recording failed,
naming them), the EOG channel kept out of the EEG set, the entities as manifest columns, the
two tasks pooled with a warning or one chosen with ``--task``, the output a BIDS derivative;
``train --label-column task`` keeps each participant's sessions on one side of every split and
its shortcut audit checks ``task`` like a site; ``predict`` shows the entities.
"""

from __future__ import annotations

import csv
import json
import shutil
import warnings
from pathlib import Path

import mne
import mne_bids
import numpy as np
import pytest
from builders import SAMPLE_DATA, TINY_TOML, json_rows, run_main

from eegformer_cli.errors import InputDataError, RecordingError, UsageError
from eegformer_cli.experiment.audit import plan_audit, run_audit
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.preprocess.output import read_manifest
from eegformer_cli.preprocess.workers import read_header
from eegformer_cli.recordings import bids
from eegformer_cli.training.config import resolve_config
from eegformer_cli.training.run_plan import plan_run, recordings_of

N_PEOPLE = 5
#: (subject, session, task, run, sample recording number) of every recording written.
PLAN = [
    *(
        (f"{s:02d}", "1", task, None, s + N_PEOPLE * k)
        for s in range(1, 6)
        for k, task in enumerate(("rest", "arith"))
    ),
    ("01", "2", "rest", "01", 11),
    ("01", "2", "rest", "02", 12),
    ("02", "2", "rest", None, 13),
]
DIAGNOSES = ("healthy", "depression", "healthy", "depression", "depression")


def bids_path(root: Path, subject: str, task: str, session: str = "1") -> mne_bids.BIDSPath:
    return mne_bids.BIDSPath(
        subject=subject,
        session=session,
        task=task,
        datatype="eeg",
        suffix="eeg",
        extension=".edf",
        root=root,
    )


def mark_bad(
    root: Path, subject: str, task: str, electrodes: list[str], session: str = "1"
) -> None:
    """Mark the channels of ``electrodes`` bad in the recording's channels.tsv, as a lab does
    with mne-bids (the sample files spell them ``F3``, ``EEG F3-REF``, ``F3-LE`` ...)."""
    path = bids_path(root, subject, task, session)
    names = mne.io.read_raw_edf(path.fpath, verbose="error").ch_names
    picked = [name for name in names if bids_electrode(name) in electrodes]
    mne_bids.mark_channels(
        path, ch_names=picked, status="bad", descriptions="broken", verbose="error"
    )


def bids_electrode(name: str) -> str:
    from eegformer_cli.recordings.channels import canonical_channel_name

    return canonical_channel_name(name) or name


def write_dataset(root: Path) -> None:
    for subject, session, task, run, number in PLAN:
        source = SAMPLE_DATA / "eeg" / f"sub-{number:02d}_task-rest_eeg.edf"
        raw = mne.io.read_raw_edf(source, verbose="error")
        if (subject, task) == ("02", "arith"):
            raw.set_channel_types({raw.ch_names[1]: "eog"})  # the electrode at Fp2
        path = mne_bids.BIDSPath(
            subject=subject, session=session, task=task, run=run, datatype="eeg", root=root
        )
        mne_bids.write_raw_bids(raw, path, verbose="error")
    mark_bad(root, "01", "rest", ["F3"])
    mark_bad(root, "03", "arith", ["C3", "Cz", "C4"])
    rows = [f"sub-{s:02d}\t{d}" for s, d in zip(range(1, 6), DIAGNOSES)]
    (root / "participants.tsv").write_text("participant_id\tdiagnosis\n" + "\n".join(rows) + "\n")
    copy = root / "derivatives" / "cleaned" / "sub-01" / "ses-1" / "eeg"
    copy.mkdir(parents=True)
    shutil.copy(bids_path(root, "01", "rest").fpath, copy)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> dict:
    """The dataset, preprocessed whole (``pooled``, its warnings recorded) and with ``--task
    rest`` through the command line (``rest``)."""
    base = tmp_path_factory.mktemp("bids")
    root = base / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mne-bids' own notes on the sample files
        write_dataset(root)
    settings = PreprocessSettings.from_preset("default")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_preprocess([root], base / "pooled", settings, n_jobs=2)
    # 5 participants: a validation split of 1 in 2 of a fold's training participants
    (base / "tiny.toml").write_text(TINY_TOML.replace("val_fraction = 0.34", "val_fraction = 0.5"))
    return {
        "root": root,
        "base": base,
        "pooled": base / "pooled",
        "warnings": [str(w.message) for w in caught],
    }


def by_id(folder: Path) -> dict[str, dict]:
    return {row["recording_id"]: row for row in read_manifest(folder)}


def test_bad_channels_are_interpolated_or_fail_the_recording_naming_them(dataset):
    rows = by_id(dataset["pooled"])
    assert len(rows) == len(PLAN)  # the derivatives copy is not a recording of the dataset
    assert rows["sub-01_ses-1_task-rest_eeg"]["channels_interpolated"] == "F3"
    failed = rows["sub-03_ses-1_task-arith_eeg"]
    assert failed["status"] == "error" and "\n" not in failed["error"]
    assert (
        "missing channels C3, Cz, C4 (C3, Cz, C4 marked bad in "
        "sub-03_ses-1_task-arith_channels.tsv; allowed to interpolate at most 2" in failed["error"]
    )
    others = [row for rid, row in rows.items() if rid not in failed["recording_id"]]
    assert all(row["status"] == "ok" for row in others)
    assert sum(row["channels_interpolated"] != "n/a" for row in others) == 1


def test_a_channel_typed_eog_in_channels_tsv_is_not_an_eeg_channel(dataset):
    path = bids_path(dataset["root"], "02", "arith").fpath
    assert "Fp2" not in read_header(path).channels
    assert "Fp2" in read_header(bids_path(dataset["root"], "02", "rest").fpath).channels
    settings = json.loads((dataset["pooled"] / "preprocess.json").read_text())
    assert "Fp2" not in settings["channels"] and "F3" in settings["channels"]
    assert any("Fp2 left out" in text and path.name in text for text in dataset["warnings"])


def test_entities_are_columns_and_sessions_are_one_participant(dataset):
    rows = by_id(dataset["pooled"])
    first = next(iter(rows.values()))
    assert "acquisition" not in first  # no recording has one
    assert list(first)[list(first).index("sex") + 1 : list(first).index("sex") + 5] == [
        "subject",
        "session",
        "task",
        "run",
    ]
    run = rows["sub-01_ses-2_task-rest_run-02_eeg"]
    assert (run["subject"], run["session"], run["task"], run["run"]) == (
        "sub-01",
        "2",
        "rest",
        "02",
    )
    assert run["participant_id"] == "sub-01" and run["diagnosis"] == "healthy"
    assert rows["sub-02_ses-1_task-arith_eeg"]["run"] == "n/a"
    counts = "13 BIDS recordings of 2 tasks pooled into one study (arith: 5, rest: 8)"
    pooled = next(text for text in dataset["warnings"] if counts in text)
    # right whether the tasks are the label or pooled beside another one
    assert "`train --label-column task` tells the tasks apart" in pooled
    assert "to study one task alone, pass --task NAME" in pooled


def test_the_output_is_a_bids_derivative(dataset):
    description = json.loads((dataset["pooled"] / "dataset_description.json").read_text())
    settings = json.loads((dataset["pooled"] / "preprocess.json").read_text())
    assert description["DatasetType"] == "derivative" and description["BIDSVersion"]
    generated = description["GeneratedBy"][0]
    assert generated["Name"] == "eegformer" and generated["Version"]
    assert settings["settings_hash"] in generated["Description"]
    assert settings["bids_selection"] == {"task": [], "session": [], "run": []}


def test_task_selection_reads_only_that_task_without_the_pooling_warning(dataset, capsys):
    out = dataset["base"] / "rest"
    code, output = run_main(capsys, "preprocess", dataset["root"], "--out", out, "--task", "rest")
    assert code == 0, output
    rows = read_manifest(out)
    assert len(rows) == 8 and {row["task"] for row in rows} == {"rest"}
    assert "pooled" not in output
    selection = json.loads((out / "preprocess.json").read_text())["bids_selection"]
    assert selection == {"task": ["rest"], "session": [], "run": []}


def test_selection_errors_name_the_option_and_the_labels(dataset, capsys, tmp_path):
    root = dataset["root"]
    assert bids.Selection.of(runs=["1"]).resolved([root]).runs == ("01",)
    for flags, message in (
        (["--task", "rst"], "for --task; allowed values are 'arith', 'rest'"),
        (["--task", "re st"], "a BIDS label is letters and digits"),
        (["--session", "3"], "allowed values are '1', '2'"),
    ):
        code, output = run_main(capsys, "preprocess", root, "--out", tmp_path / "x", *flags)
        assert code == UsageError.exit_code and message in output, output
    code, output = run_main(
        capsys, "preprocess", SAMPLE_DATA, "--out", tmp_path / "x", "--task", "rest"
    )
    assert (
        code == UsageError.exit_code and "is not one (a folder with dataset_description" in output
    )
    code, output = run_main(
        capsys, "preprocess", root, "--out", tmp_path / "x", "--task", "arith", "--session", "2"
    )
    assert code == InputDataError.exit_code
    assert "no recording matches --task arith --session 2" in output
    assert not (tmp_path / "x").exists()
    # BIDS-like names without dataset_description.json: not a BIDS dataset, read as before
    assert bids.entities(SAMPLE_DATA / "eeg" / "sub-01_task-rest_eeg.edf") == {}


def test_train_on_task_keeps_each_participant_on_one_side_and_predict_shows_entities(
    dataset, capsys
):
    config = resolve_config("default", None, {"cv": 2, "repeats": 2, "val_fraction": 0.5})
    plan = plan_run(dataset["pooled"], "task", config)
    assert plan.scheme["unit"] == "participant" and plan.data.label_names == ["arith", "rest"]
    for fold in plan.folds:
        sides = [
            {rec.participant_id for rec in recordings_of(plan.data, part)}
            for part in (fold.train, fold.val, fold.test)
        ]
        assert sum(map(len, sides)) == N_PEOPLE, fold  # sub-01's three sessions on one side
    run_dir = dataset["base"] / "run"
    code, output = run_main(
        capsys,
        "train",
        dataset["pooled"],
        "--out",
        run_dir,
        "--label-column",
        "task",
        "--config",
        dataset["base"] / "tiny.toml",
        "--holdout",
        "0.4",
    )
    assert code == 0, output
    audit = json.loads((run_dir / "metrics.json").read_text())["shortcut_audit"]
    assert "task" not in {variable["name"] for variable in audit["variables"]}  # the label
    recording = bids_path(dataset["root"], "02", "rest", session="2").fpath
    code, output = run_main(
        capsys, "predict", run_dir / "model.pt", dataset["pooled"], recording, "--format", "json"
    )
    assert code == InputDataError.exit_code, output  # the recording that failed preprocessing
    assert "sub-03_ses-1_task-arith_eeg: preprocessing failed" in output
    rows = json_rows(output)
    assert list(rows[0])[:7] == [
        "recording_id",
        "participant_id",
        "subject",
        "session",
        "task",
        "run",
        "predicted",
    ]
    assert (rows[-1]["subject"], rows[-1]["session"], rows[-1]["task"]) == ("sub-02", "2", "rest")
    assert rows[-1]["run"] == "n/a"
    # explain's recordings.csv carries the same entity columns as predict's rows
    explained = dataset["base"] / "explained"
    code, output = run_main(
        capsys, "explain", run_dir / "model.pt", recording, "--out", explained, "--n-steps", "4"
    )
    assert code == 0, output
    with open(explained / "recordings.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0])[:6] == [  # the entities this recording's name has
        "recording_id",
        "participant_id",
        "subject",
        "session",
        "task",
        "true_class",
    ]
    assert (table[0]["subject"], table[0]["session"], table[0]["task"]) == ("sub-02", "2", "rest")
    assert table[0]["true_class"] == "rest"  # the model's label is the file's task entity


def test_the_shortcut_audit_checks_task_like_a_site(dataset):
    config = resolve_config("default", None, {"cv": 2, "val_fraction": 0.5})
    plan = plan_run(dataset["pooled"], "diagnosis", config)
    audit = run_audit(plan_audit(plan.data, plan.folds, plan.scheme, config), None)
    task = next(variable for variable in audit.variables if variable.name == "task")
    assert task.description == "BIDS task" and task.status in ("checked", "borderline", "flagged")


def test_a_changed_channels_tsv_remakes_its_recording_and_a_mismatch_fails_it(dataset, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(dataset["root"], root, ignore=shutil.ignore_patterns("derivatives"))
    settings = PreprocessSettings.from_preset("default")
    session_2 = bids.Selection.of(sessions=["2"])
    run_preprocess([root], tmp_path / "out", settings, selection=session_2)
    mark_bad(root, "02", "rest", ["O1"], session="2")
    renamed = root / "sub-01" / "ses-2" / "eeg" / "sub-01_ses-2_task-rest_run-01_channels.tsv"
    renamed.write_text(renamed.read_text().replace("\nFp1\t", "\nFp9\t", 1))
    summary = run_preprocess([root], tmp_path / "out", settings, selection=session_2)
    assert summary.n_skipped == 1  # run-02 of sub-01: its channels.tsv is unchanged
    rows = by_id(tmp_path / "out")
    assert rows["sub-02_ses-2_task-rest_eeg"]["channels_interpolated"] == "O1"
    error = rows["sub-01_ses-2_task-rest_run-01_eeg"]["error"]
    assert "channels.tsv names 1 channel(s) the recording lacks (Fp9)" in error


# --- every entry point reads a recording's channels as preprocess does ---------------------

#: The recordings the entry points are compared on: F3 marked bad; Fp2 typed EOG.
MARKED_BAD, TYPED_EOG = "sub-01_ses-1_task-rest_eeg", "sub-02_ses-1_task-arith_eeg"
#: Three channels marked bad, more than --max-interpolated allows.
TOO_MANY = "sub-03_ses-1_task-arith_eeg"
REFUSAL = (
    "missing channels C3, Cz, C4 (C3, Cz, C4 marked bad in "
    "sub-03_ses-1_task-arith_channels.tsv; allowed to interpolate at most 2; use "
    "--max-interpolated)"
)


@pytest.fixture(scope="module")
def every_channel(dataset, tmp_path_factory) -> dict:
    """The dataset preprocessed on the 19 channels of 10-20 (Fp2 among them, so that the
    recording where it is typed EOG fills it by interpolation) and a 2-fold run on its task."""
    from eegformer_cli.choices import STANDARD_1020

    base = tmp_path_factory.mktemp("every_channel")
    prep, run_dir = base / "prep", base / "run"
    settings = PreprocessSettings.from_preset("default", channels=list(STANDARD_1020))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_preprocess([dataset["root"]], prep, settings, n_jobs=2)
    return {"prep": prep, "run": run_dir, "root": dataset["root"], "base": base}


@pytest.fixture(scope="module")
def trained(every_channel, dataset) -> dict:
    """``every_channel`` with its run trained (``train --cv 2`` on the task)."""
    import io
    import sys

    from eegformer_cli.cli.app import main

    args = ["train", every_channel["prep"], "--out", every_channel["run"], "-l", "task"]
    args += ["--config", dataset["base"] / "tiny.toml", "--cv", "2"]
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = io.StringIO()
    try:
        with pytest.raises(SystemExit) as stopped:
            main([str(a) for a in args])
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    assert stopped.value.code == 0
    return every_channel


def entry_point_results(entry: str, trained: dict, capsys) -> dict[str, tuple]:
    """``{recording_id: (probabilities, channels_interpolated)}`` of the compared recordings
    and ``{TOO_MANY: the error line}``, as the entry point ``entry`` gives them."""
    from eegformer_cli import load_model
    from eegformer_cli.errors import EegformerError

    model_file, root, prep = trained["run"] / "model.pt", trained["root"], trained["prep"]
    files = recording_files(root)
    if entry in ("file", "root", "preprocess_folder"):
        inputs = {"file": list(files.values()), "root": [root], "preprocess_folder": [prep]}
        code, output = run_main(capsys, "predict", model_file, *inputs[entry], "--format", "json")
        assert (
            code == (InputDataError if entry == "preprocess_folder" else RecordingError).exit_code
        )
        rows = {row["recording_id"]: row for row in json_rows(output)}
        results = {
            rid: (
                [rows[rid][f"prob_{c}"] for c in ("arith", "rest")],
                rows[rid]["channels_interpolated"],
            )
            for rid in (MARKED_BAD, TYPED_EOG)
        }
        errors = [line for line in output.splitlines() if TOO_MANY in line and "error" in line]
        return {**results, TOO_MANY: errors[0] if errors else output}
    if entry == "explain":
        out = trained["base"] / "explained"
        code, output = run_main(
            capsys, "explain", trained["run"], *files.values(), "--out", out, "--n-steps", "4"
        )
        assert code == RecordingError.exit_code, output
        with open(out / "recordings.csv", newline="") as handle:
            rows = {row["recording_id"]: row for row in csv.DictReader(handle)}
        results = {
            rid: (
                [float(rows[rid][f"prob_{c}"]) for c in ("arith", "rest")],
                [c for c in rows[rid]["channels_interpolated"].split(",") if c],
            )
            for rid in (MARKED_BAD, TYPED_EOG)
        }
        errors = [line for line in output.splitlines() if TOO_MANY in line]
        return {**results, TOO_MANY: errors[0] if errors else output}
    raws = bids_raws(root)
    model = load_model(model_file, device="cpu")
    table = model.predict([raws[MARKED_BAD], raws[TYPED_EOG]]).set_index("recording_id")
    results = {
        rid: (
            [table.loc[rid, f"prob_{c}"] for c in ("arith", "rest")],
            list(table.loc[rid, "channels_interpolated"]),
        )
        for rid in (MARKED_BAD, TYPED_EOG)
    }
    try:
        model.predict([raws[TOO_MANY]])
    except EegformerError as exc:
        return {**results, TOO_MANY: exc.one_line()}
    return {**results, TOO_MANY: "no error"}


def recording_files(root: Path) -> dict[str, Path]:
    """The compared recordings' files, by recording id."""
    return {
        rid: Path(bids_path(root, rid[4:6], rid.split("task-")[1].split("_")[0]).fpath)
        for rid in (MARKED_BAD, TYPED_EOG, TOO_MANY)
    }


def bids_raws(root: Path) -> dict[str, mne.io.BaseRaw]:
    """The compared recordings as :func:`mne_bids.read_raw_bids` reads them (its bad channels
    and types from channels.tsv)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mne-bids' notes on the files
        raws = {
            rid: mne_bids.read_raw_bids(
                mne_bids.get_bids_path_from_fname(path, check=False).update(root=root),
                verbose="error",
            )
            for rid, path in recording_files(root).items()
        }
    assert [bids_electrode(name) for name in raws[MARKED_BAD].info["bads"]] == ["F3"]
    return raws


@pytest.mark.slow  # trains a model
def test_every_entry_point_reads_channels_tsv_as_preprocess_does(trained, capsys):
    """The same probabilities and interpolated channels, whichever way the recordings are
    given; the recording with too many bad channels refused with the same line; explain's
    out-of-fold probabilities those of oof_predictions.tsv."""
    manifest = by_id(trained["prep"])
    assert manifest[MARKED_BAD]["channels_interpolated"] == "F3"
    assert manifest[TYPED_EOG]["channels_interpolated"] == "Fp2"
    assert REFUSAL in manifest[TOO_MANY]["error"]
    results = {
        entry: entry_point_results(entry, trained, capsys)
        for entry in ("file", "root", "preprocess_folder", "python_api")
    }
    expected = results["preprocess_folder"]
    for entry, found in results.items():
        for rid in (MARKED_BAD, TYPED_EOG):
            np.testing.assert_allclose(found[rid][0], expected[rid][0], rtol=0, atol=1e-6)
            assert found[rid][1] == [manifest[rid]["channels_interpolated"]], (entry, rid)
        assert REFUSAL in found[TOO_MANY], (entry, found[TOO_MANY])
    # explain RUN: out of fold, as oof_predictions.tsv
    explained = entry_point_results("explain", trained, capsys)
    with open(trained["run"] / "oof_predictions.tsv", newline="") as handle:
        oof = {
            row["recording_id"]: [float(row["prob_arith"]), float(row["prob_rest"])]
            for row in csv.DictReader(handle, delimiter="\t")
            if row["model"] == "xaiguiformer"
        }
    for rid in (MARKED_BAD, TYPED_EOG):
        np.testing.assert_allclose(explained[rid][0], oof[rid], rtol=1e-5, atol=1e-6)
        assert explained[rid][1] == [manifest[rid]["channels_interpolated"]]
    assert REFUSAL in explained[TOO_MANY], explained[TOO_MANY]


@pytest.mark.slow  # trains a model
def test_preprocess_raw_and_the_estimator_read_a_raws_bad_channels_as_preprocess_does(trained):
    """An mne.io.Raw from mne-bids (its bad channel in ``info["bads"]``) or from MNE's own
    reader (channels.tsv found beside its file) gives the preprocess folder's connectome, so the
    estimator gives its probabilities; too many bad channels, the same refusal."""
    from eegformer_cli import XAIguiFormerClassifier, read_preprocessed
    from eegformer_cli.preprocess import load_connectome, preprocess_raw

    prep, root = trained["prep"], trained["root"]
    settings = PreprocessSettings.of_folder(prep)
    files, raws = recording_files(root), bids_raws(root)
    stored = load_connectome(prep / by_id(prep)[MARKED_BAD]["connectome"])
    given = {
        "read_raw_bids": raws[MARKED_BAD],
        "read_raw": mne.io.read_raw(files[MARKED_BAD], verbose="error"),
    }
    connectomes = {how: preprocess_raw(raw, settings) for how, raw in given.items()}
    for how, connectome in connectomes.items():
        assert connectome.channels_interpolated == ["F3"], how
        assert connectome.channels_marked_bad == ["F3"], how
        np.testing.assert_allclose(connectome.coh, stored.coh, rtol=0, atol=1e-6)
    for raw in (raws[TOO_MANY], mne.io.read_raw(files[TOO_MANY], verbose="error")):
        with pytest.raises(RecordingError) as refused:
            preprocess_raw(raw, settings)
        assert REFUSAL in refused.value.one_line()
    table = read_preprocessed(prep)
    estimator = XAIguiFormerClassifier(epochs=1, device="cpu", random_state=0)
    estimator.fit(table, table["task"], table["participant_id"])
    stored_file = prep / by_id(prep)[MARKED_BAD]["connectome"]
    probabilities = estimator.predict_proba([stored_file, *connectomes.values()])
    np.testing.assert_allclose(probabilities[1:], probabilities[[0, 0]], rtol=0, atol=1e-6)


@pytest.mark.slow  # trains a model
def test_predict_on_a_bids_root_reads_the_recordings_of_the_models_selection(dataset, capsys):
    """A model trained on ``preprocess --session 1`` predicts a BIDS root's session-1
    recordings, as its preprocess folder read them."""
    from eegformer_cli.training.model_file import load_model_file

    base, root = dataset["base"], dataset["root"]
    prep, run_dir = base / "session_1", base / "session_1_run"
    settings = PreprocessSettings.from_preset("default")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_preprocess([root], prep, settings, selection=bids.Selection.of(sessions=["1"]))
    args = ["train", prep, "--out", run_dir, "-l", "task", "--cv", "2"]
    code, output = run_main(capsys, *args, "--config", base / "tiny.toml")
    assert code == 0, output
    bundle = load_model_file(run_dir / "model.pt")
    assert bundle.training_data["bids_selection"] == {"task": [], "session": ["1"], "run": []}
    code, output = run_main(capsys, "predict", run_dir / "model.pt", root, "--format", "json")
    assert code == RecordingError.exit_code, output  # sub-03's arithmetic: too many bad channels
    rows = json_rows(output)
    assert {row["session"] for row in rows} == {"1"}
    assert "its 10 recording(s) of --session 1 (of 13), the selection the model" in output
    assert len(rows) == sum(row["status"] == "ok" for row in read_manifest(prep)) == 9


@pytest.mark.slow  # trains a model
def test_train_on_a_study_where_no_inner_split_holds_both_classes(dataset, capsys):
    """Three training participants, one of them the only one of its class: inner splits of the
    references' and the linear path's C search that train on one class give no model (the
    linear path's cross-fitted logits there are 0), and the run finishes."""
    base = dataset["base"]
    prep = base / "session_1"  # made by the selection test, or here
    if not (prep / "manifest.tsv").is_file():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_preprocess(
                [dataset["root"]],
                prep,
                PreprocessSettings.from_preset("default"),
                selection=bids.Selection.of(sessions=["1"]),
            )
    args = ["train", prep, "--out", base / "tiny_run", "-l", "diagnosis", "--holdout", "0.4"]
    code, output = run_main(capsys, *args, "--config", base / "tiny.toml")
    assert code == 0 and "internal error" not in output, output


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize("given", ["root", "preprocess_folder"])
def test_explain_of_the_run_gives_its_out_of_fold_probabilities_however_given(
    trained, capsys, given
):
    """``explain RUN`` on the BIDS root or on the preprocess folder: every training recording's
    probabilities are its out-of-fold ones (oof_predictions.tsv), bad channels or not."""
    inputs = {"root": trained["root"], "preprocess_folder": trained["prep"]}
    out = trained["base"] / f"explained_{given}"
    code, output = run_main(
        capsys, "explain", trained["run"], inputs[given], "--out", out, "--n-steps", "4"
    )
    refused = {"root": RecordingError, "preprocess_folder": InputDataError}[given]
    assert code == refused.exit_code and TOO_MANY in output, output  # the others explained
    with open(out / "recordings.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(trained["run"] / "oof_predictions.tsv", newline="") as handle:
        oof = {
            row["recording_id"]: [float(row["prob_arith"]), float(row["prob_rest"])]
            for row in csv.DictReader(handle, delimiter="\t")
            if row["model"] == "xaiguiformer"
        }
    assert len(rows) == len(oof) == 12
    for row in rows:
        found = [float(row["prob_arith"]), float(row["prob_rest"])]
        np.testing.assert_allclose(found, oof[row["recording_id"]], rtol=1e-5, atol=1e-6)
