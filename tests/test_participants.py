"""Participants known, or the split says what it is: a study of two recordings per person
named ``Subject0N_1.edf`` / ``Subject0N_2.edf`` with a recordings table of conditions and no
participants table (what a new user had). Without a participant id ``train`` refuses
participant-wise splits, naming the ways out; ``--participant-pattern`` names the participants
(a rerun rewrites only the manifest) and then a person's two recordings never straddle a fold;
``--split-by recording`` trains and every output says recording-wise; the BIDS ``sub-``
entity names a participant without a table; the estimator without ``groups`` says so.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
from builders import SAMPLE_DATA, TINY_TOML, run_main

from eegformer_cli.console import warnings_on_stderr
from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.preprocess.output import read_manifest
from eegformer_cli.recordings.metadata import match_participant, participant_pattern
from eegformer_cli.training.config import resolve_config
from eegformer_cli.training.run_plan import plan_run, recordings_of

N_PEOPLE = 6
PATTERN = r"^(.+)_\d+"


def person(recording_id: str) -> str:
    return recording_id.rsplit("_", 1)[0]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """12 sample recordings as 6 people's rest and task recordings (symbolic links), a
    recordings table with the condition only, no participants table; preprocessed once
    without a pattern (``prep``) and that folder rerun with the pattern (``named``)."""
    root = tmp_path_factory.mktemp("two-per-person")
    eeg = root / "study" / "eeg"
    eeg.mkdir(parents=True)
    sources = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[: 2 * N_PEOPLE]
    lines = ["file\tcondition"]
    for index, source in enumerate(sources):
        name = f"Subject{index // 2:02d}_{index % 2 + 1}.edf"
        (eeg / name).symlink_to(source)
        lines.append(f"eeg/{name}\t{'rest' if index % 2 == 0 else 'task'}")
    (root / "study" / "recordings.tsv").write_text("\n".join(lines) + "\n")
    settings = PreprocessSettings.from_preset("default")
    prep, named = root / "prep", root / "named"
    with warnings_on_stderr():  # module scope: outside conftest's fixture
        run_preprocess([root / "study"], prep, settings, n_jobs=2)
        shutil.copytree(prep, named)
        summary = run_preprocess(
            [root / "study"], named, settings, n_jobs=2, participant_pattern=PATTERN
        )
    (root / "tiny.toml").write_text(TINY_TOML)
    return {"root": root, "prep": prep, "named": named, "skipped": summary.n_skipped}


def test_without_participants_train_refuses_participant_wise_splits(study, capsys):
    rows = read_manifest(study["prep"])
    assert len(rows) == 2 * N_PEOPLE and {row["participant_id"] for row in rows} == {"n/a"}
    code, output = run_main(
        capsys,
        "train",
        study["prep"],
        "--out",
        study["root"] / "refused",
        "--label-column",
        "condition",
    )
    assert code == InputDataError.exit_code, output
    error = output.strip().splitlines()[-1]
    assert error.startswith("eegformer: error: ") and "12 of 12 usable recordings" in error
    assert "--participant-pattern" in error and "--split-by recording" in error
    assert not (study["root"] / "refused").exists()


def test_a_pattern_names_the_participants_and_rewrites_only_the_manifest(study):
    rows = read_manifest(study["named"])
    assert [row["participant_id"] for row in rows] == [person(r["recording_id"]) for r in rows]
    assert study["skipped"] == 2 * N_PEOPLE  # nothing preprocessed again
    before = json.loads((study["prep"] / "preprocess.json").read_text())
    after = json.loads((study["named"] / "preprocess.json").read_text())
    assert after["participant_pattern"] == PATTERN and before["participant_pattern"] is None
    assert after["settings_hash"] == before["settings_hash"]


def test_two_recordings_of_one_person_never_straddle_a_fold(study):
    config = resolve_config("default", None, {"cv": 3, "repeats": 2, "val_fraction": 0.34})
    plan = plan_run(study["named"], "condition", config)
    assert plan.scheme["unit"] == "participant" and len(plan.folds) == 6
    for fold in plan.folds:
        sides = [
            {person(rec.recording_id) for rec in recordings_of(plan.data, part)}
            for part in (fold.train, fold.val, fold.test)
        ]
        assert sum(len(side) for side in sides) == N_PEOPLE, fold  # each person on one side
        assert (
            sum(len(recordings_of(plan.data, part)) for part in (fold.train, fold.val, fold.test))
            == 12
        )


def test_recording_wise_splits_when_asked_say_so_everywhere(study, capsys):
    run = study["root"] / "recording-wise"
    code, output = run_main(
        capsys,
        "train",
        study["prep"],
        "--out",
        run,
        "--label-column",
        "condition",
        "--config",
        study["root"] / "tiny.toml",
        "--holdout",
        "0.34",
        "--split-by",
        "recording",
    )
    assert code == 0, output
    assert "warning: recording-wise splits: 12 of 12 recordings have no participant id" in output
    assert "test recordings only, recording-wise" in output
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["scheme"]["unit"] == "recording"
    assert json.loads((run / "splits.json").read_text())["scheme"]["unit"] == "recording"
    assert "recording-wise" in metrics["shortcut_audit"]["folds"]
    from eegformer_cli.evaluation.run_metrics import RunMetrics
    from eegformer_cli.experiment.verdict import headline, verdict_lines

    assert "recording-wise" in headline(RunMetrics.from_dict(metrics))
    topic, text, tone = verdict_lines(RunMetrics.from_dict(metrics))[0]
    assert topic == "score" and "recording-wise splits" in text and tone == "warn"


def test_pattern_errors_name_the_pattern_and_the_ids(study, tmp_path):
    with pytest.raises(UsageError, match="no group"):
        participant_pattern("Subject")
    with pytest.raises(UsageError, match="invalid --participant-pattern"):
        participant_pattern("Subject(")
    settings = PreprocessSettings.from_preset("default")
    with pytest.raises(UsageError, match="matches none of the 12 file names"):
        run_preprocess(
            [study["root"] / "study"], tmp_path / "a", settings, participant_pattern="^x(.)"
        )
    table = tmp_path / "participants.tsv"
    table.write_text("participant_id\tage\nSubject00\t30\nSubject01\t31\n")
    with pytest.raises(InputDataError, match="does not list: Subject02, Subject03, Subject04"):
        run_preprocess(
            [study["root"] / "study"],
            tmp_path / "b",
            settings,
            participants=table,
            participant_pattern=PATTERN,
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_precedence_recordings_table_then_pattern_then_participants_table(tmp_path):
    participants = {"Subject15": {"age": 30.0, "sex": "F"}, "S15": {"age": 40.0, "sex": "M"}}
    path = tmp_path / "eeg" / "S15_Subject15_1.edf"
    recordings = {
        "eeg/S15_Subject15_1.edf": {"file": "eeg/S15_Subject15_1.edf", "participant_id": "P9"}
    }
    pattern = participant_pattern(r"(Subject\d+)_")
    from eegformer_cli.recordings.metadata import participant_named_by

    named = participant_named_by(path, pattern)
    assert named == "Subject15"
    assert match_participant(path, participants, recordings, tmp_path, named)[0] == "P9"
    identified, metadata = match_participant(path, participants, None, None, named)
    assert identified == "Subject15" and metadata["age"] == 30.0
    assert match_participant(path, participants, None, None)[0] == "S15"  # the table's names


def test_bids_subject_entity_names_the_participant_without_a_table(tmp_path):
    for name in ("sub-15_ses-1_task-rest_eeg.edf", "sub-15_ses-2_task-rest_eeg.edf"):
        assert match_participant(tmp_path / name, {}, None, None) == (
            "sub-15",
            {"age": None, "sex": None, "participant_id": "sub-15"},
        )
    # a table that lists neither spelling: the participant is still known
    assert match_participant(tmp_path / "sub-15_eeg.edf", {"01": {}}, None, None)[0] == "sub-15"
    assert match_participant(tmp_path / "Subject15_1.edf", {}, None, None)[0] is None


def test_the_estimator_without_groups_warns_naming_groups(study):
    from eegformer_cli import XAIguiFormerClassifier, read_preprocessed
    from eegformer_cli.errors import EegformerWarning

    with pytest.warns(EegformerWarning, match="no participant id"):
        X = read_preprocessed(study["prep"])
    one_class = np.array(["rest"] * len(X))  # fit stops at the labels, after the check
    estimator = XAIguiFormerClassifier(device="cpu")
    with pytest.warns(EegformerWarning, match="fit without groups.*pass groups="):
        with pytest.raises(InputDataError, match="only one class"):
            estimator.fit(X.drop(columns="participant_id"), one_class)
    named = read_preprocessed(study["named"])
    with pytest.raises(InputDataError, match="only one class"), warnings.catch_warnings():
        warnings.simplefilter("error", EegformerWarning)  # participants known: no warning
        estimator.fit(named, one_class)
