"""Participant-wise splits: no participant on two sides, stratification, reuse of splits.json."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.evaluation import reference
from eegformer_cli.training import splits


def _recordings(n_participants=30, recordings_per_participant=(1, 3), seed=0):
    """Recording-level groups and labels: participants with 1-3 recordings each, one label
    per participant, 2:1 class imbalance."""
    rng = np.random.default_rng(seed)
    groups, labels = [], []
    for p in range(n_participants):
        label = "patient" if p % 3 else "control"
        for _ in range(rng.integers(*recordings_per_participant, endpoint=True)):
            groups.append(f"sub-{p:03d}")
            labels.append(label)
    return np.array(groups), np.array(labels)


def test_cv_never_puts_a_participant_on_two_sides():
    groups, labels = _recordings()
    folds = splits.cross_validation_folds(
        groups, labels, n_splits=5, repeats=3, seed=1, val_fraction=0.2
    )
    assert len(folds) == 15
    everyone = set(groups)
    for fold in folds:
        train, val, test = set(fold.train), set(fold.val), set(fold.test)
        assert not (train & val) and not (train & test) and not (val & test)
        assert train | val | test == everyone
    for repeat in range(3):
        tests = [p for fold in folds if fold.repeat == repeat for p in fold.test]
        assert sorted(tests) == sorted(everyone), "each participant is tested once per repeat"


def test_repeats_shuffle_differently_and_seeds_reproduce():
    groups, labels = _recordings()
    a = splits.cross_validation_folds(groups, labels, 5, 2, seed=0, val_fraction=0.2)
    b = splits.cross_validation_folds(groups, labels, 5, 2, seed=0, val_fraction=0.2)
    assert a == b
    assert [f.test for f in a if f.repeat == 0] != [f.test for f in a if f.repeat == 1]


def test_folds_are_stratified_on_participants():
    groups, labels = _recordings(n_participants=60, recordings_per_participant=(1, 1))
    folds = splits.cross_validation_folds(groups, labels, 5, 1, seed=0, val_fraction=0.25)
    label_of = dict(zip(groups, labels))
    for fold in folds:
        controls = sum(label_of[p] == "control" for p in fold.test)
        assert controls == 4  # 20 controls / 5 folds
        val_controls = sum(label_of[p] == "control" for p in fold.val)
        assert 3 <= val_controls <= 5  # about a third of 12 validation participants


def test_participant_with_both_labels_stays_on_one_side():
    # e.g. rest vs task recordings of the same person (eegmat): labels vary within a participant
    groups = np.repeat([f"s{i}" for i in range(12)], 2)
    labels = np.tile(["rest", "task"], 12)
    for fold in splits.cross_validation_folds(groups, labels, 3, 1, 0, 0.25):
        assert not set(fold.test) & (set(fold.train) | set(fold.val))


def test_holdout_fraction_and_final_split():
    groups, labels = _recordings(n_participants=50)
    fold = splits.holdout_fold(groups, labels, fraction=0.2, seed=3, val_fraction=0.2)
    assert len(fold.test) == 10
    assert not set(fold.test) & (set(fold.train) | set(fold.val))
    final = splits.final_fit_split(groups, labels, seed=3, val_fraction=0.2)
    assert final.test == [] and set(final.train) | set(final.val) == set(groups)


def test_too_few_participants_is_a_clear_error():
    with pytest.raises(InputDataError, match="at least 5 participants"):
        splits.cross_validation_folds(
            np.array(["a", "b", "c", "d"]), np.array(["x", "y", "x", "y"]), 5, 1, 0, 0.2
        )


def test_save_load_and_check_against_data(tmp_path):
    groups, labels = _recordings()
    folds = splits.cross_validation_folds(groups, labels, 5, 1, 0, 0.2)
    path = tmp_path / "splits.json"
    splits.save_splits(path, {"kind": "cv", "k": 5}, folds)
    scheme, loaded = splits.load_splits(path)
    assert scheme == {"kind": "cv", "k": 5} and loaded == folds
    # a participant whose recordings are gone is dropped (warning), the rest is unchanged
    present = set(groups) - {folds[0].test[0]}
    checked = splits.check_folds(loaded, present, str(path))
    assert folds[0].test[0] not in checked[0].test
    # a participant the splits do not know cannot be placed: refuse
    with pytest.raises(InputDataError, match="does not cover participants sub-999"):
        splits.check_folds(loaded, set(groups) | {"sub-999"}, str(path))
    # overlapping sides are refused
    data = json.loads(path.read_text())
    data["folds"][0]["val"].append(data["folds"][0]["test"][0])
    path.write_text(json.dumps(data))
    with pytest.raises(InputDataError, match="two of train/val/test"):
        splits.check_folds(splits.load_splits(path)[1], set(groups), str(path))


def test_unreadable_splits_file(tmp_path):
    bad = tmp_path / "splits.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not a splits.json"):
        splits.load_splits(bad)
    with pytest.raises(UsageError, match="not found"):
        splits.load_splits(tmp_path / "missing.json")


def test_too_small_training_part_names_what_is_too_small():
    groups, labels = np.array([f"s{i}" for i in range(8)]), np.tile(["x", "y"], 4)
    with pytest.raises(InputDataError) as raised:  # 2 folds: 4 participants left for training
        splits.cross_validation_folds(groups, labels, 2, 1, 0, 0.2)
    assert str(raised.value) == (
        "the validation split (val_fraction 0.2: 1 participant in 5) needs at least 5 "
        "participants but the training part of CV fold 0 (all 8 participants but the 4 of its "
        "test fold) has 4"
    )
    assert "val_fraction" in raised.value.hint and "--cv" not in raised.value.hint
    with pytest.raises(
        InputDataError,
        match=r"the test set \(--holdout 0.05: 1 participant in "
        r"20\) needs at least 20 participants but the data "
        r"has 8",
    ):
        splits.holdout_fold(groups, labels, 0.05, 0, 0.2)


def test_small_classes_warn_once_instead_of_python_warnings(capsys):
    groups = np.array([f"s{i}" for i in range(12)])
    labels = np.array([0 if i % 3 == 0 else 1 for i in range(12)])  # 4 against 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        folds = splits.cross_validation_folds(groups, labels, 5, 1, 0, 0.2)
        assert reference.inner_folds(labels, groups) == 4
        reference.fit_reference(np.random.default_rng(0).normal(size=(12, 3)), labels, groups, 0)
    splits.warn_missing_classes(folds, groups, labels, ["F", "M"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "of 5 test set(s)" in err[0] and "'F', has 4 participants" in err[0]
    # a participant with two recordings counts once
    assert reference.inner_folds(np.array([0, 0, 0, 1, 1, 1]), np.array(list("aabcde"))) == 2
