"""Provenance and warnings of ``predict`` / ``explain`` rows (issue 23), on copies of the sample
recordings edited with MNE: a channel dropped, another sampling rate, a training recording
renamed, Unicode file names, participants tables that miss the recording, ``--strict``, an old
model file; the warning rules themselves on plain values; ids of earlier preprocess folders.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import mne
import numpy as np
import pytest
import torch
from builders import SAMPLE_DATA, json_rows, run_main

from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.preprocess.output import read_manifest
from eegformer_cli.provenance import FAR_FACTOR, WARNING_KINDS, recording_warnings
from eegformer_cli.recordings.reading import (
    SIGNAL_HASH_PREFIX,
    channel_major_sha256,
    recording_id,
)

EEG = SAMPLE_DATA / "eeg"
UNSEEN = EEG / "sub-13_task-rest_eeg.edf"  # not among the 12 recordings of the sample run


@pytest.fixture(scope="module")
def seen_run(sample_run) -> dict:
    """The sample run (12 recordings, 25 % holdout) and which of its participants shaped the
    model (train + validation) or were held out for test."""
    run = sample_run
    fold = json.loads((run["run"] / "splits.json").read_text())["folds"][0]
    return {**run, "seen": sorted(fold["train"] + fold["val"]), "held_out": sorted(fold["test"])}


def edited_copy(source: Path, target: Path, edit) -> Path:
    """``source`` read with MNE, changed by ``edit(raw)``, written as EDF to ``target``."""
    raw = mne.io.read_raw_edf(source, preload=True, verbose="error")
    edit(raw)
    mne.export.export_raw(target, raw, fmt="edf", verbose="error")
    return target


def test_a_dropped_channel_and_another_rate_are_named_warned_and_strict_exits_6(
    seen_run, tmp_path, capsys
):
    dropped = edited_copy(UNSEEN, tmp_path / "dropped.edf", lambda raw: raw.drop_channels(["F7"]))
    fast = edited_copy(
        UNSEEN,
        tmp_path / "fast.edf",
        lambda raw: raw.resample(128 * FAR_FACTOR * 2, verbose="error"),
    )
    # --age/--sex: the copies have no participants row (unknown demographics would warn too)
    code, output = run_main(
        capsys,
        "predict",
        seen_run["model"],
        dropped,
        fast,
        UNSEEN,
        "--age",
        50,
        "--sex",
        "M",
        "--format",
        "json",
    )
    assert code == 0, output
    rows = {row["recording_id"]: row for row in json_rows(output)}
    assert rows["dropped"]["channels_interpolated"] == ["F7"]
    assert rows["dropped"]["warnings"] == [
        "interpolated: channel(s) F7 missing from the recording, interpolated from their neighbours"
    ]
    assert rows["dropped"]["source_file"] == str(dropped)
    assert rows["dropped"]["n_segments"] >= 1 and rows["dropped"]["n_segments_rejected"] == 0
    assert [w.split(":")[0] for w in rows["fast"]["warnings"]] == ["sampling_rate"]
    assert "512 Hz is far outside the training recordings' 128 Hz" in rows["fast"]["warnings"][0]
    # the untouched original: no channel interpolated, nothing to warn about
    original = rows[UNSEEN.name.removesuffix(".edf")]
    assert original["channels_interpolated"] == [] and original["warnings"] == []
    stderr_warnings = [line for line in output.splitlines() if line.startswith("warning: ")]
    assert stderr_warnings == [
        f"warning: dropped: {rows['dropped']['warnings'][0]}",
        f"warning: fast: {rows['fast']['warnings'][0]}",
    ]

    code, output = run_main(
        capsys, "predict", seen_run["model"], dropped, "--age", 50, "--sex", "M", "--strict"
    )
    assert code == 6 and "--strict: 1 predicted recording(s) got warnings" in output
    rows = list(csv.DictReader(io.StringIO(output[output.index("recording_id,") :])))
    assert rows[0]["channels_interpolated"] == "F7"  # the row is printed all the same
    code, output = run_main(capsys, "predict", seen_run["model"], UNSEEN, "--strict")
    assert code == 0, output  # nothing to warn about: exit 0


def test_a_training_recording_warns_raw_renamed_or_from_the_preprocess_folder(
    seen_run, tmp_path, capsys
):
    seen = seen_run["seen"][0]
    training_edf = EEG / f"{seen}_task-rest_eeg.edf"
    renamed = tmp_path / "anonymous.edf"  # the same bytes under another name
    shutil.copyfile(training_edf, renamed)
    code, output = run_main(
        capsys, "predict", seen_run["model"], training_edf, renamed, "--format", "json"
    )
    assert code == 0, output
    rows = {row["recording_id"]: row for row in json_rows(output)}
    oof = seen_run["run"] / "oof_predictions.tsv"
    assert rows[f"{seen}_task-rest_eeg"]["warnings"] == [
        "in_training_data: the model was trained on this recording, so this prediction is "
        f"optimistic; honest out-of-fold ones: {oof}"
    ]
    assert rows["anonymous"]["participant_id"] == "n/a"  # no table names it: the hash does
    assert rows["anonymous"]["warnings"][0].startswith(
        f"in_training_data: the model was trained on this signal (training recording "
        f"{seen}_task-rest_eeg)"
    )
    assert "warning: anonymous: in_training_data:" in output

    # a preprocess folder: its training recordings warn, the held-out ones do not
    code, output = run_main(
        capsys, "predict", seen_run["model"], seen_run["prep"], "--format", "json"
    )
    assert code == 0, output
    warned = {
        row["participant_id"]
        for row in json_rows(output)
        if any(w.startswith("in_training_data:") for w in row["warnings"])
    }
    assert warned == set(seen_run["seen"])
    assert all(row["age_source"] in ("manifest", "none") for row in json_rows(output))


def test_a_filtered_copy_of_a_training_recording_is_recognised_by_its_fingerprint(
    seen_run, tmp_path, capsys
):
    """The signal hash misses a changed copy; its connectivity fingerprint, stored in
    model.pt, does not, and the same change of a recording the model never saw raises
    nothing (cropped copies: the test below, on real recordings)."""
    from eegformer_cli.provenance import FINGERPRINT_MATCH

    def change(raw):
        raw.filter(2, 30, verbose="error")

    seen = seen_run["seen"][0]
    copy = edited_copy(EEG / f"{seen}_task-rest_eeg.edf", tmp_path / "copy.edf", change)
    other = edited_copy(UNSEEN, tmp_path / "other.edf", change)
    code, output = run_main(
        capsys,
        "predict",
        seen_run["model"],
        copy,
        other,
        "--age",
        50,
        "--sex",
        "F",
        "--format",
        "json",
    )
    assert code == 0, output
    rows = {row["recording_id"]: row for row in json_rows(output)}
    warning = rows["copy"]["warnings"][0]
    assert warning.startswith(
        f"in_training_data: its connectivity matches training recording {seen}_task-rest_eeg's"
    ), warning
    similarity = float(warning.split("similarity ")[1].split(")")[0])
    assert FINGERPRINT_MATCH <= similarity <= 1
    assert not any(w.startswith("in_training_data") for w in rows["other"]["warnings"])


@pytest.mark.slow
def test_cropped_and_filtered_copies_of_real_recordings_keep_their_fingerprint(msu_dir):
    """24 msu-schizophrenia recordings as a training set (15 s segments, as `preprocess`
    chooses for them): a copy of eight, the middle 30 s of 60 band-passed 2-30 Hz, matches its
    original above FINGERPRINT_MATCH, and no other recording's; no two originals match."""
    import numpy as np

    from eegformer_cli.preprocess.recording import preprocess_raw
    from eegformer_cli.provenance import FINGERPRINT_MATCH, fingerprint, training_fingerprints
    from eegformer_cli.recordings.reading import read_recording

    settings = PreprocessSettings.from_preset("default", epoch_length=15.0)
    paths = sorted((msu_dir / "eeg").glob("*.edf"))[:24]
    originals = [preprocess_raw(read_recording(path, preload=True), settings) for path in paths]
    reference = {
        key: np.mean([getattr(c, key).mean(axis=0) for c in originals], axis=0)
        for key in ("coh", "wpli")
    }
    stored = training_fingerprints(((c.coh, c.wpli) for c in originals), reference)
    prints = stored["fingerprints"].astype(np.float32)
    similarity = prints @ prints.T
    assert np.max(similarity[~np.eye(len(paths), dtype=bool)]) < FINGERPRINT_MATCH
    for index, path in list(enumerate(paths))[::3]:
        raw = read_recording(path, preload=True).crop(15, 45).filter(2, 30, verbose="error")
        copy = preprocess_raw(raw, settings)
        matches = prints @ fingerprint(copy.coh, copy.wpli, stored["fingerprint_reference"])
        assert np.argmax(matches) == index and matches[index] >= FINGERPRINT_MATCH, matches


def test_unicode_file_names_give_distinct_readable_ids(seen_run, tmp_path, capsys):
    folder = tmp_path / "names"
    folder.mkdir()
    names = ["Pätient 1.edf", "Pötient 1.edf", "P tient 1.edf"]
    for name in names:
        shutil.copyfile(UNSEEN, folder / name)
    code, output = run_main(capsys, "predict", seen_run["model"], folder, "--format", "json")
    assert code == 0, output
    rows = json_rows(output)
    assert sorted(row["recording_id"] for row in rows) == ["P_tient_1", "Pätient_1", "Pötient_1"]
    assert {row["recording_id"]: Path(row["source_file"]).name for row in rows} == {
        "P_tient_1": "P tient 1.edf",
        "Pätient_1": "Pätient 1.edf",
        "Pötient_1": "Pötient 1.edf",
    }
    # a name written in decomposed form (macOS) gets the same id as the composed one
    assert recording_id(Path(unicodedata.normalize("NFD", "Pätient 1.edf"))) == "Pätient_1"


def test_preprocess_into_a_folder_made_with_the_old_ascii_ids(tmp_path):
    """Before Unicode letters were kept, the three files above were P_tient_1, P_tient_1-2 and
    P_tient_1-3. A rerun into such a folder lists each recording once, under its new id."""
    folder = tmp_path / "names"
    folder.mkdir()
    for name in ("Pätient 1.edf", "Pötient 1.edf", "P tient 1.edf"):
        shutil.copyfile(UNSEEN, folder / name)
    out = tmp_path / "prep"
    settings = PreprocessSettings.from_preset("default")
    run_preprocess([folder], out, settings)
    # rewrite the folder as the old id rule left it
    old_ids = {"P_tient_1": "P_tient_1", "Pätient_1": "P_tient_1-2", "Pötient_1": "P_tient_1-3"}
    manifest = (out / "manifest.tsv").read_text(encoding="utf-8")
    for new, old in sorted(old_ids.items(), key=lambda item: -len(item[0])):
        manifest = manifest.replace(new, old)
        if new != old:
            (out / "connectomes" / f"{new}.npz").rename(out / "connectomes" / f"{old}.npz")
    (out / "manifest.tsv").write_text(manifest, encoding="utf-8")
    run_preprocess([folder], out, settings)
    rows = read_manifest(out)
    assert sorted(row["recording_id"] for row in rows) == ["P_tient_1", "Pätient_1", "Pötient_1"]
    assert len({row["source_file"] for row in rows}) == 3


def test_a_participants_table_that_does_not_list_the_recording_warns(seen_run, tmp_path, capsys):
    table = tmp_path / "participants.tsv"
    table.write_text("participant_id\tage\tsex\nsub-99\t30\tF\n")
    code, output = run_main(
        capsys, "predict", seen_run["model"], UNSEEN, "--participants", table, "--format", "json"
    )
    assert code == 0, output
    row = json_rows(output)[0]
    assert row["warnings"][0] == (  # the file's BIDS sub- entity names its participant
        f"not_in_table: {table} does not list this recording (no "
        "row for sub-13); age and sex unknown unless given by "
        "--age / --sex"
    )
    # every training recording had an age: an unknown one is outside what the model saw
    assert row["warnings"][1].startswith("age: unknown, but every training recording had one")
    assert (row["age"], row["age_source"], row["sex_source"]) == ("n/a", "none", "none")
    # --age and --sex give what the table would have: nothing to warn about, sources "flag"
    code, output = run_main(
        capsys,
        "predict",
        seen_run["model"],
        UNSEEN,
        "--participants",
        table,
        "--age",
        40,
        "--sex",
        "F",
        "--format",
        "json",
    )
    row = json_rows(output)[0]
    assert code == 0 and row["warnings"] == [] and row["age_source"] == row["sex_source"] == "flag"
    # a preprocess folder keeps its manifest's demographics for the participants not listed
    code, output = run_main(
        capsys,
        "predict",
        seen_run["model"],
        seen_run["prep"],
        "--participants",
        table,
        "--format",
        "json",
    )
    held_out = [row for row in json_rows(output) if row["participant_id"] in seen_run["held_out"]]
    assert code == 0 and held_out
    for row in held_out:
        assert row["warnings"][0] == (
            f"not_in_table: {table} does not list this recording (no "
            f"row for {row['participant_id']}); age and sex from the "
            "preprocess manifest"
        )
    # an age outside the training recordings' ages
    code, output = run_main(
        capsys, "predict", seen_run["model"], UNSEEN, "--age", 5, "--format", "json"
    )
    assert code == 0
    assert json_rows(output)[0]["warnings"][0].startswith(
        "age: 5 years is outside the training recordings' ages ("
    )


def test_an_old_model_file_still_predicts_and_says_it_cannot_check(seen_run, tmp_path, capsys):
    bundle = torch.load(seen_run["model"], weights_only=True)
    del bundle["training_data"]
    old = tmp_path / "old-model.pt"
    torch.save(bundle, old)
    seen = EEG / f"{seen_run['seen'][0]}_task-rest_eeg.edf"
    code, output = run_main(capsys, "predict", old, seen, "--format", "json")
    assert code == 0, output
    assert json_rows(output)[0]["warnings"] == []  # no training data to compare with
    notes = [line for line in output.splitlines() if "does not describe its training data" in line]
    assert len(notes) == 1 and notes[0].startswith("warning: ")
    code, output = run_main(capsys, "predict", old, UNSEEN, "--strict")
    assert code == 6 and "could not be checked against it" in output


def test_a_model_file_with_earlier_channel_major_hashes_still_recognises_its_recordings(
    seen_run, tmp_path, capsys
):
    """A model file written before the hash was made in time order holds channel-major hashes:
    a renamed training recording is still recognised (its hash is then made that way too)."""
    bundle = torch.load(seen_run["model"], weights_only=True)
    hashes = bundle["training_data"]["signal_sha256"]
    assert all(value.startswith(SIGNAL_HASH_PREFIX) for value in hashes)
    bundle["training_data"]["signal_sha256"] = {
        channel_major_sha256(mne.io.read_raw_edf(EEG / f"{rid}.edf", verbose="error")): rid
        for rid in hashes.values()
    }
    old = tmp_path / "old-hashes.pt"
    torch.save(bundle, old)
    seen = seen_run["seen"][0]
    renamed = tmp_path / "anonymous.edf"
    shutil.copyfile(EEG / f"{seen}_task-rest_eeg.edf", renamed)
    code, output = run_main(capsys, "predict", old, renamed, UNSEEN, "--format", "json")
    assert code == 0, output
    rows = {row["recording_id"]: row for row in json_rows(output)}
    assert rows["anonymous"]["warnings"][0].startswith(
        f"in_training_data: the model was trained on this signal (training recording "
        f"{seen}_task-rest_eeg)"
    )
    assert rows[UNSEEN.name.removesuffix(".edf")]["warnings"] == []


def test_explain_rows_carry_provenance_and_the_report_says_where_explanations_come_from(
    seen_run, tmp_path, capsys
):
    seen = EEG / f"{seen_run['seen'][0]}_task-rest_eeg.edf"
    out = tmp_path / "explanations"
    code, output = run_main(capsys, "explain", seen_run["model"], seen, "--out", out, "--strict")
    assert code == 6 and "in_training_data" in output and (out / "recordings.csv").is_file()
    row = next(iter(csv.DictReader(open(out / "recordings.csv", encoding="utf-8"))))
    assert row["source_file"] == str(seen) and row["warnings"].startswith("in_training_data:")
    summary = json.loads((out / f"{seen.name.removesuffix('.edf')}.json").read_text())
    assert summary["provenance"]["warnings"][0].startswith("in_training_data:")
    code, output = run_main(
        capsys,
        "report",
        seen_run["run"],
        "--explanations",
        out,
        "--out",
        tmp_path / "report.html",
    )
    assert code == 0, output
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "The explained recording was in the training data of this model" in text
    assert "one recording only" in text  # a class mean of one recording


def test_warning_rules_on_plain_values(tmp_path):
    """msu-like training data (boys, no ages, 128 Hz, 60 s): an adult woman's 10-minute 500 Hz
    recording gets every kind of warning that depends on the training data; a recording like
    the training ones gets none."""
    training = {
        "n_recordings": 84,
        "participants": ["sub-001"],
        "signal_sha256": {"abc": "r1"},
        "age_years": {"range": None, "n_unknown": 84},
        "sex": {"M": 84, "F": 0, "n/a": 0},
        "source_sfreq_hz": [128.0, 128.0],
        "duration_s": [60.0, 60.0],
    }

    def item(**values):
        base = {
            "recording_id": "x",
            "participant_id": None,
            "signal_sha256": None,
            "age": float("nan"),
            "sex": 0.0,
            "source_sfreq": 128.0,
            "duration_s": 60.0,
            "channels_interpolated": [],
            "channels_marked_bad": [],
            "table": None,
            "table_lists_participant": None,
            "age_source": "none",
            "sex_source": "table",
            "shorter_than_crop_s": None,
        }
        return SimpleNamespace(**{**base, **values})

    oof = tmp_path / "oof_predictions.tsv"  # not there: the warning names the run's file
    assert recording_warnings(item(), training, oof) == []
    warnings = recording_warnings(
        item(age=35.0, sex=1.0, source_sfreq=500.0, duration_s=600.0, participant_id="sub-001"),
        training,
        oof,
    )
    assert [w.split(":")[0] for w in warnings] == [
        "in_training_data",
        "age",
        "sex",
        "sampling_rate",
        "duration",
    ]
    short = item(duration_s=50.0, shorter_than_crop_s=55.0, coh=np.zeros((3, 1, 2, 2)))
    assert recording_warnings(short, training, oof) == [
        "crop: 50.0 s long, shorter than the 55 s the model's training recordings were cropped "
        "to: analysed whole, 3 segment(s), so its score is noisier than theirs"
    ]
    assert {w.split(":")[0] for w in warnings} <= set(WARNING_KINDS)
    assert warnings[1] == (
        "age: 35 years given, but no training recording had an age (the model never used one)"
    )
    assert warnings[2] == "sex: F, which no training recording had (training: M 84)"
    assert "oof_predictions.tsv of the run that trained it" in warnings[0]
    assert recording_warnings(item(sex=float("nan")), training, oof) == [
        "sex: unknown, which no training recording had (training: M 84)"
    ]
    # a rate twice the training one is not "far outside" (it is resampled like them)
    assert recording_warnings(item(source_sfreq=256.0), training, oof) == []
    # an old model file (no training data): only the recording's own warnings
    assert recording_warnings(item(age=35.0, channels_interpolated=["F7"]), None, oof)[
        0
    ].startswith("interpolated: channel(s) F7 missing from the recording")
    # a channel marked bad is said to be, beside one the recording lacks
    both = item(channels_interpolated=["F7", "T7"], channels_marked_bad=["T7"])
    assert recording_warnings(both, None, oof) == [
        "interpolated: channel(s) T7 marked bad and F7 missing from the recording, "
        "interpolated from their neighbours"
    ]


def test_many_warnings_of_one_kind_show_three_and_count_the_rest(seen_run, capsys):
    """Predicting a preprocess folder of training recordings: every row keeps its
    ``in_training_data`` warning; stderr shows three of them and one line counting the rest."""
    code, output = run_main(
        capsys, "predict", seen_run["model"], seen_run["prep"], "--format", "json"
    )
    assert code == 0, output
    warned = [
        row
        for row in json_rows(output)
        if any(w.startswith("in_training_data:") for w in row["warnings"])
    ]
    assert len(warned) > 3
    lines = [
        line
        for line in output.splitlines()
        if "in_training_data" in line and line.startswith("warning:")
    ]
    assert len(lines) == 4
    assert lines[-1] == (
        f"warning: in_training_data on {len(warned) - 3} more recording(s), "
        "not repeated here; each row's warnings column lists it"
    )
