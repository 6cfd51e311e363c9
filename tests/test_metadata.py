"""Participants/recordings tables, age and sex codes, and matching recordings to participants."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eegformer_cli.errors import InputDataError
from eegformer_cli.recordings.demographics import MISSING_VALUES, parse_age, parse_sex
from eegformer_cli.recordings.metadata import (
    find_participants_file,
    find_recordings_file,
    load_participants,
    load_recordings_table,
    match_participant,
    read_table,
)
from eegformer_cli.recordings.reading import find_recordings

MALE = ["M", "male", "man", "boy", "1"]
FEMALE = ["F", "female", "woman", "girl", "2"]
UNKNOWN = ["n/a", "", "NA", "unknown", "0", "O", "other"]


def _write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_text(text, encoding=encoding)
    return path


# --- parse_age / parse_sex: properties ---------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0, max_value=130, allow_nan=False))
def test_age_round_trips_through_text_with_point_or_comma(age):
    assert parse_age(str(age)) == age
    assert parse_age(repr(age).replace(".", ",")) == age
    assert parse_age(f"  {age!r} ") == age
    assert parse_age(age) == age


@settings(max_examples=200, deadline=None)
@given(st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False))
def test_negative_ages_are_rejected(age):
    with pytest.raises(ValueError, match="negative"):
        parse_age(str(age))


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=130.001, allow_nan=False))
def test_ages_above_130_are_rejected(age):
    with pytest.raises(ValueError, match="above 130|not a finite"):
        parse_age(str(age))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz/?+ ", min_size=1, max_size=10))
def test_age_text_is_unknown_or_rejected(text):
    if text.strip().lower() in MISSING_VALUES:
        assert parse_age(text) is None
    else:
        with pytest.raises(ValueError):
            parse_age(text)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        [(s, "M") for s in MALE] + [(s, "F") for s in FEMALE] + [(s, None) for s in UNKNOWN]
    ),
    st.lists(st.booleans(), max_size=6),
    st.sampled_from(["", " ", "\t", "  "]),
    st.sampled_from(["", " ", "\t"]),
)
def test_every_documented_sex_spelling_in_any_case_with_blanks(
    spelling_and_code, flips, left, right
):
    spelling, code = spelling_and_code
    cased = "".join(
        c.swapcase() if f else c for c, f in zip(spelling, flips + [False] * len(spelling))
    )
    assert parse_sex(left + cased + right) == code


def test_sex_numbers_missing_values_and_errors():
    assert parse_sex(1) == "M" and parse_sex(2.0) == "F" and parse_sex(0) is None
    assert parse_sex(float("nan")) is None and parse_sex(None) is None
    with pytest.raises(ValueError, match=r"unknown sex code 'x'; accepted: M/F, male/female"):
        parse_sex("x")
    with pytest.raises(ValueError, match="unknown sex code '3'"):
        parse_sex("3")
    with pytest.raises(ValueError, match="ambiguous"):
        parse_sex("1", numeric_codes=False)
    assert parse_sex("female", numeric_codes=False) == "F"


def test_age_examples():
    assert parse_age("51,59") == 51.59 and parse_age("n/a") is None and parse_age(None) is None
    assert parse_age(float("nan")) is None and parse_age("0") == 0.0
    for bad in ("forty", "12 years", "1,000.5", "inf"):
        with pytest.raises(ValueError):
            parse_age(bad)


# --- read_table -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, text",
    [
        ("p.tsv", "participant_id\tage\tsex\nP1\t 30 \tF\n\nP2\t41,5\tM\n"),
        ("p.csv", "participant_id,age,sex\r\nP1,30,F\r\nP2,41.5,M\r\n"),
        ("p.csv", "participant_id;age;sex\nP1;30;F\nP2;41,5;M\n"),
        ("p.txt", "\ufeffparticipant_id\tage\tsex\nP1\t30\tF\nP2\t41.5\tM\n"),
    ],
)
def test_read_table_formats(tmp_path, name, text):
    rows = read_table(_write(tmp_path / name, text))
    assert [row["participant_id"] for row in rows] == ["P1", "P2"]
    assert rows[0]["age"] == "30" and rows[1]["sex"] == "M"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "table is empty"),
        ("\n\n", "table is empty"),
        ("participant_id\tage\n", "header but no rows"),
        ("participant_id\tage\nP1\t3\nP2\n", "line 3 has 1 fields, the header has 2"),
        ("participant_id\t\tage\nP1\tx\t3\n", "empty column name"),
        ("id\tage\tage\nP1\t1\t2\n", "repeats column"),
    ],
)
def test_malformed_tables(tmp_path, text, message):
    path = _write(tmp_path / "participants.tsv", text)
    with pytest.raises(InputDataError, match=message) as info:
        read_table(path)
    assert str(path) in info.value.one_line()


def test_non_utf8_table(tmp_path):
    path = _write(tmp_path / "participants.tsv", "participant_id\tname\nP1\tJosé\n", "latin-1")
    with pytest.raises(InputDataError, match="not UTF-8"):
        read_table(path)


# --- load_participants ----------------------------------------------------------------------


@pytest.mark.slow
def test_msu_participants_are_boys_of_unknown_age(msu_dir):
    participants = load_participants(msu_dir / "participants.tsv")
    assert len(participants) == 84
    assert {row["sex"] for row in participants.values()} == {"M"}
    assert all(row["age"] is None for row in participants.values())
    diagnoses = [row["diagnosis"] for row in participants.values()]
    assert (diagnoses.count("schizophrenia"), diagnoses.count("healthy")) == (45, 39)


@pytest.mark.slow
def test_eegmat_participants_carry_age_and_sex(eegmat_dir):
    path = eegmat_dir / "participants.tsv"
    participants = load_participants(path)
    with open(path, newline="") as handle:
        expected = list(csv.DictReader(handle, delimiter="\t"))
    assert len(participants) == len(expected) == 10
    for row in expected:
        parsed = participants[row["participant_id"]]
        assert parsed["age"] == float(row["age"]) and parsed["sex"] == row["sex"]
        assert parsed["participant_id"] == row["participant_id"]


def test_duplicate_ids_are_listed(tmp_path):
    path = _write(
        tmp_path / "participants.tsv", "participant_id\tage\nP2\t1\nP1\t2\nP2\t3\nP1\t4\nP3\t5\n"
    )
    with pytest.raises(InputDataError, match="duplicated participant ids: P1, P2$") as info:
        load_participants(path)
    assert info.value.one_line().startswith(str(path))


@pytest.mark.parametrize(
    "cell, message",
    [
        ("-3", r"participant P2: age '-3' is negative"),
        ("ten", r"participant P2: age 'ten' is not a number"),
        ("200", r"participant P2: age '200' is above 130"),
    ],
)
def test_bad_age_names_participant_and_value(tmp_path, cell, message):
    path = _write(
        tmp_path / "participants.tsv", f"participant_id\tage\tsex\nP1\t30\tF\nP2\t{cell}\tM\n"
    )
    with pytest.raises(InputDataError, match=message) as info:
        load_participants(path)
    assert str(path) in info.value.one_line()


def test_unknown_sex_names_participant_and_value(tmp_path):
    path = _write(tmp_path / "participants.tsv", "participant_id\tsex\nP1\tF\nP7\tq\n")
    with pytest.raises(InputDataError, match=r"participant P7, column sex: unknown sex code 'q'"):
        load_participants(path)


def test_numeric_gender_is_ambiguous_unless_levels_are_given(tmp_path):
    path = _write(
        tmp_path / "participants.tsv", "subject,gender,Age\nS1,0,50\nS2,1,60\nS3,male,n/a\n"
    )
    path.rename(path := tmp_path / "participants.csv")
    with pytest.raises(
        InputDataError, match=r"participant S1, column gender: numeric gender code '0' is ambiguous"
    ):
        load_participants(path)
    _write(
        tmp_path / "participants.json",
        json.dumps({"gender": {"Levels": {"0": "Female", "1": "Male"}}}),
    )
    participants = load_participants(path)
    assert [participants[s]["sex"] for s in ("S1", "S2", "S3")] == ["F", "M", "M"]
    assert [participants[s]["age"] for s in ("S1", "S2")] == [50.0, 60.0]
    assert participants["S3"]["age"] is None and participants["S1"]["gender"] == "0"


def test_id_column_aliases_and_missing_columns(tmp_path):
    participants = load_participants(_write(tmp_path / "a.tsv", "Subject\tgroup\nX1\tpatient\n"))
    assert participants == {
        "X1": {
            "Subject": "X1",
            "group": "patient",
            "participant_id": "X1",
            "age": None,
            "sex": None,
        }
    }
    with pytest.raises(
        InputDataError, match=r"no participant id column \(found columns: name, age\)"
    ):
        load_participants(_write(tmp_path / "b.tsv", "name\tage\nX1\t3\n"))


# --- recordings table, finding tables, matching -------------------------------------------------


@pytest.mark.slow
def test_eegmat_recordings_table(eegmat_dir):
    recordings = load_recordings_table(eegmat_dir / "recordings.tsv")
    assert len(recordings) == 20 and "eeg/Subject00_1.edf" in recordings
    assert {row["condition"] for row in recordings.values()} == {"rest", "arithmetic"}
    assert "age" not in recordings["eeg/Subject00_1.edf"]


def test_recordings_table_normalises_paths_and_rejects_repeats(tmp_path):
    table = load_recordings_table(
        _write(
            tmp_path / "recordings.tsv",
            "file\tparticipant_id\tage\n./eeg\\a.edf\tP1\tn/a\nb.edf\tP2\t7\n",
        )
    )
    assert set(table) == {"eeg/a.edf", "b.edf"} and table["b.edf"]["age"] == 7.0
    with pytest.raises(InputDataError, match="listed more than once: eeg/a.edf"):
        load_recordings_table(_write(tmp_path / "r2.tsv", "file\neeg/a.edf\n./eeg/a.edf\n"))
    with pytest.raises(InputDataError, match="no 'file' column"):
        load_recordings_table(_write(tmp_path / "r3.tsv", "path\nx.edf\n"))


@pytest.mark.slow
def test_tables_are_found_at_the_dataset_root(eegmat_dir, msu_dir, tmp_path):
    eegmat_file = eegmat_dir / "eeg" / "Subject00_1.edf"
    assert find_participants_file([eegmat_file]) == eegmat_dir / "participants.tsv"
    assert find_recordings_file([eegmat_dir / "eeg"]) == eegmat_dir / "recordings.tsv"
    assert find_recordings_file([msu_dir]) is None
    deep = tmp_path / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    _write(tmp_path / "a" / "participants.csv", "participant_id\nP1\n")
    assert find_participants_file([deep]) is None  # 4 levels up: out of reach
    assert find_participants_file([deep.parent]) == tmp_path / "a" / "participants.csv"


@pytest.mark.slow
def test_every_real_recording_matches_its_participant(msu_dir, eegmat_dir):
    msu = load_participants(msu_dir / "participants.tsv")
    for path in find_recordings([msu_dir]):
        participant_id, metadata = match_participant(path, msu, None, msu_dir)
        assert path.name.startswith(participant_id + "_")
        assert metadata["sex"] == "M" and metadata["diagnosis"] in ("schizophrenia", "healthy")
    eegmat = load_participants(eegmat_dir / "participants.tsv")
    recordings = load_recordings_table(eegmat_dir / "recordings.tsv")
    conditions = []
    for path in find_recordings([eegmat_dir]):
        participant_id, metadata = match_participant(path, eegmat, recordings, eegmat_dir)
        assert metadata["age"] == eegmat[participant_id]["age"] is not None
        assert metadata["sex"] in ("M", "F") and path.name.startswith(participant_id)
        conditions.append(metadata["condition"])
    assert conditions.count("rest") == conditions.count("arithmetic") == 10


def test_matching_rules(tmp_path):
    participants = {
        "01": {"age": 30.0, "sex": "F"},
        "sub-02": {"age": None, "sex": "M"},
        "S1": {"age": 5.0, "sex": None},
        "S1_b": {"age": 6.0, "sex": None},
    }
    assert (
        match_participant(tmp_path / "sub-01_task-rest_eeg.edf", participants, None, None)[0]
        == "01"
    )
    assert (
        match_participant(tmp_path / "sub-02_ses-1_eeg.vhdr", participants, None, None)[0]
        == "sub-02"
    )
    assert match_participant(tmp_path / "S1_b_rest.edf", participants, None, None)[0] == "S1_b"
    assert match_participant(tmp_path / "S1-eo.edf", participants, None, None)[0] == "S1"
    assert match_participant(tmp_path / "S1.fif.gz", participants, None, None)[0] == "S1"
    assert match_participant(tmp_path / "S10_rest.edf", participants, None, None) == (
        None,
        {"age": None, "sex": None},
    )
    recordings = {
        "eeg/x.edf": {
            "file": "eeg/x.edf",
            "participant_id": "01",
            "condition": "eo",
            "age": None,
            "sex": None,
        }
    }
    participant_id, metadata = match_participant(
        tmp_path / "eeg" / "x.edf", participants, recordings, tmp_path
    )
    assert participant_id == "01" and metadata["age"] == 30.0 and metadata["condition"] == "eo"
    assert (
        match_participant(tmp_path / "other" / "x.edf", participants, recordings, None)[0] == "01"
    )
