"""``XAIguiFormerClassifier`` (issue 21): scikit-learn's estimator checks (those that cannot
pass listed with the reason), ``cross_val_score`` with ``GroupKFold`` against ``eegformer
train --splits`` on the same folds and seeds, connectomes in memory against files, bad input.
"""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from builders import write_connectome_folder
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GroupKFold, cross_val_predict, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from eegformer_cli import (
    InputDataError,
    UsageError,
    XAIguiFormerClassifier,
    commands,
    load_connectome,
    read_preprocessed,
)
from eegformer_cli.training.splits import inner_validation_split

#: A small model, for speed (20 epochs: enough for the folds' scores to differ, 1.0, 0.75, 0.5
#: and 0.75); the same settings for the estimator and `train`.
TINY = {
    "batch_size": 8,
    "val_fraction": 0.25,
    "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1},
}
EPOCHS = 20
SEED = 7

#: scikit-learn's checks (1.9) that cannot pass, with why. Each fits on a numeric array (iris-
#: like tables, blobs, sparse matrices, ...). One sample of XAIguiFormerClassifier is a
#: recording: a stack of connectivity matrices with its own number of segments, its channel and
#: band names and its age and sex (eegformer_cli/estimator.py), so a numeric X is refused with
#: an InputDataError saying what X must be. The other 15 checks (cloning, repr, parameters,
#: get_params/set_params, nothing set in __init__, NotFittedError before fit, tags, mixin order,
#: ...) pass; check_array_api_input is skipped by scikit-learn itself.
NUMERIC_X = "fits on a numeric array, which is not recordings: InputDataError"
WANTS_VALUE_ERROR = (
    "expects a ValueError about its numeric X or y; gets InputDataError (the "
    "CLI's exit-3 class), since a numeric X is not recordings"
)
EXPECTED_FAILED_CHECKS = {
    **dict.fromkeys(
        (
            "check_classifier_data_not_an_array",
            "check_classifiers_classes",
            "check_complex_data",
            "check_dict_unchanged",
            "check_dont_overwrite_parameters",
            "check_dtype_object",
            "check_estimators_dtypes",
            "check_estimators_fit_returns_self",
            "check_estimators_overwrite_params",
            "check_estimators_pickle",
            "check_f_contiguous_array_estimator",
            "check_fit1d",
            "check_fit2d_1feature",
            "check_fit2d_1sample",
            "check_fit2d_predict1d",
            "check_fit_check_is_fitted",
            "check_fit_idempotent",
            "check_fit_score_takes_y",
            "check_methods_sample_order_invariance",
            "check_methods_subset_invariance",
            "check_n_features_in",
            "check_n_features_in_after_fitting",
            "check_pipeline_consistency",
            "check_positive_only_tag_during_fit",
            "check_readonly_memmap_input",
            "check_requires_y_none",
            "check_supervised_y_2d",
        ),
        NUMERIC_X,
    ),
    **dict.fromkeys(
        (
            "check_classifiers_one_label",
            "check_classifiers_regression_target",
            "check_classifiers_train",
            "check_estimator_sparse_array",
            "check_estimator_sparse_matrix",
            "check_estimator_sparse_tag",
            "check_estimators_empty_data_messages",
            "check_estimators_nan_inf",
            "check_supervised_y_no_nan",
        ),
        WANTS_VALUE_ERROR,
    ),
}


@parametrize_with_checks(
    [XAIguiFormerClassifier(epochs=1, device="cpu")],
    expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS,
    xfail_strict=True,
)
def test_scikit_learn_checks(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def prep(sample_run):
    """The 12 preprocessed sample recordings of the sample run (6 per class)."""
    return sample_run["prep"]


def oof_probabilities(run_dir) -> dict[str, float]:
    with open(run_dir / "oof_predictions.tsv", newline="") as handle:
        return {
            row["recording_id"]: float(row["prob_healthy"])
            for row in csv.DictReader(handle, delimiter="\t")
            if row["model"] == "xaiguiformer"
        }


@pytest.mark.slow
def test_cross_val_score_with_group_k_fold_equals_train_on_the_same_splits_and_seed(prep, tmp_path):
    """Acceptance: ``cross_val_score(XAIguiFormerClassifier(), X, y, groups=..., cv=GroupKFold)``
    gives ``eegformer train``'s out-of-fold balanced accuracy, fold by fold, when ``train``
    runs ``--splits`` on a splits.json made from the GroupKFold folds: their test participants,
    the estimator's inner validation split of each training part (its ``val_participants_``:
    the same function of the same participants, labels and seed) and ``"seed": random_state``.
    The out-of-fold probabilities (``cross_val_predict``) are the run's oof_predictions.tsv."""
    X = read_preprocessed(prep)
    y, groups = X["diagnosis"].to_numpy(), X["participant_id"].to_numpy()
    estimator = XAIguiFormerClassifier(config=TINY, epochs=EPOCHS, random_state=SEED, device="cpu")
    cv = GroupKFold(4)
    scores = cross_val_score(estimator, X, y, groups=groups, cv=cv, scoring="balanced_accuracy")
    probabilities = cross_val_predict(estimator, X, y, groups=groups, cv=cv, method="predict_proba")
    labels = np.unique(y, return_inverse=True)[1]
    folds = []
    for k, (train_index, test_index) in enumerate(cv.split(X, y, groups)):
        train, val = inner_validation_split(
            groups[train_index], labels[train_index], TINY["val_fraction"], SEED
        )
        folds.append(
            {
                "repeat": 0,
                "fold": k,
                "train": train,
                "val": val,
                "test": sorted(set(groups[test_index])),
                "seed": SEED,
            }
        )
    splits = tmp_path / "splits.json"
    splits.write_text(
        json.dumps({"format": "eegformer-splits", "scheme": {"kind": "cv", "k": 4}, "folds": folds})
    )
    config = tmp_path / "tiny.toml"
    config.write_text(
        "batch_size = 8\nval_fraction = 0.25\n[model]\nd_model = 16\n"
        "n_heads = 2\nn_layers = 1\nn_gnn_layers = 1\n"
    )
    metrics = commands.train(
        prep,
        tmp_path / "run",
        "diagnosis",
        config=config,
        epochs=EPOCHS,
        splits=splits,
        device="cpu",
    )
    per_fold = [fold.bac for fold in metrics.models["xaiguiformer"].per_fold]
    assert per_fold == pytest.approx(scores, abs=1e-12), (per_fold, scores)
    assert len(set(scores)) > 1  # folds differ: a real comparison
    oof = oof_probabilities(tmp_path / "run")
    healthy = list(np.unique(y)).index("healthy")
    for recording_id, probability in zip(X["recording_id"], probabilities[:, healthy]):
        assert abs(oof[recording_id] - probability) < 1e-9, recording_id


def test_connectomes_in_memory_fit_and_predict_as_their_files(prep):
    X = read_preprocessed(prep)
    y = X["diagnosis"].to_numpy()
    estimator = XAIguiFormerClassifier(config=TINY, epochs=2, random_state=SEED, device="cpu")
    fitted = clone(estimator).fit(X, y)
    in_memory = X.assign(connectome=[load_connectome(path) for path in X["connectome"]])
    again = clone(estimator).fit(in_memory, y)
    assert np.array_equal(fitted.predict_proba(X), again.predict_proba(in_memory))
    assert set(fitted.predict(X)) <= set(fitted.classes_) == {"depression", "healthy"}
    labels = np.unique(y, return_inverse=True)[1]
    assert (fitted.train_participants_, fitted.val_participants_) == inner_validation_split(
        X["participant_id"].to_numpy(), labels, TINY["val_fraction"], SEED
    )
    assert fitted.best_epoch_ in (1, 2) and len(fitted.history_) == 2
    assert fitted.get_params()["random_state"] == SEED
    assert clone(fitted).set_params(epochs=5).get_params()["epochs"] == 5


def test_bad_input_is_named(prep):
    X = read_preprocessed(prep)
    y = X["diagnosis"].to_numpy()
    estimator = XAIguiFormerClassifier(config=TINY, epochs=1, device="cpu")
    with pytest.raises(NotFittedError):
        estimator.predict(X)
    with pytest.raises(InputDataError, match="not recordings; give a table with a 'connectome'"):
        estimator.fit(np.zeros((12, 4)), y)
    with pytest.raises(InputDataError, match="has no 'connectome' column"):
        estimator.fit(X.drop(columns="connectome"), y)
    with pytest.raises(InputDataError, match="y has only one class"):
        estimator.fit(X, ["healthy"] * len(X))
    with pytest.raises(InputDataError, match=r"y has shape \(3,\)"):
        estimator.fit(X, y[:3])
    ages = np.linspace(21.5, 74.0, len(X))  # a measure, as train refuses a label column of it
    with pytest.raises(UsageError, match=r"numeric with 12 distinct values \(21.5 to 74\)") as no:
        estimator.fit(X, ages)
    assert no.value.one_line().startswith("y is numeric") and "pandas.cut(y, bins" in no.value.hint


def test_read_preprocessed_gives_nan_for_every_missing_demographic(tmp_path):

    folder = write_connectome_folder(tmp_path / "prep", n_participants=8, n_segments=2)
    manifest = folder / "manifest.tsv"
    lines = manifest.read_text().splitlines()
    columns = lines[0].split("\t")
    cells = lines[2].split("\t")
    cells[columns.index("age")] = cells[columns.index("sex")] = "n/a"
    lines[2] = "\t".join(cells)
    manifest.write_text("\n".join(lines) + "\n")
    X = read_preprocessed(folder)
    assert X["sex"].tolist()[2:4] == ["M", "F"] and X["age"].tolist()[:3:2] == [20.0, 26.0]
    assert np.isnan(X["age"][1]) and isinstance(X["sex"][1], float) and np.isnan(X["sex"][1])
    assert X[["age", "sex"]].isna().sum().tolist() == [1, 1]
    # the estimator reads NaN as unknown, as the model does
    fitted = XAIguiFormerClassifier(config=TINY, epochs=1, device="cpu").fit(
        X, X["diagnosis"].to_numpy()
    )
    assert fitted.predict_proba(X).shape == (8, 2)


def test_recordings_preprocessed_otherwise_are_refused(prep, tmp_path):
    """The estimator compares the preprocessing settings of the folders its files come from,
    as ``predict`` does: a folder cropped otherwise is refused for predicting, naming the
    setting, and so is fitting on two folders that differ."""
    X = read_preprocessed(prep)
    y = X["diagnosis"].to_numpy()
    other = tmp_path / "cropped"
    shutil.copytree(prep, other)
    stored = json.loads((other / "preprocess.json").read_text())
    stored["settings"]["crop_s"] = 10.0
    (other / "preprocess.json").write_text(json.dumps(stored))
    X_other = read_preprocessed(other)
    fitted = XAIguiFormerClassifier(config=TINY, epochs=1, device="cpu").fit(X, y)
    assert fitted.preprocess_settings_.crop_s is None
    assert fitted.predict_proba(X).shape == (len(X), 2)
    with pytest.raises(
        InputDataError, match=r"in \S+cropped were .* fitted on: crop_s 10 \(not none\)"
    ):
        fitted.predict_proba(X_other)
    both = pd.concat([X, X_other], ignore_index=True)
    with pytest.raises(InputDataError, match="than those in .*: crop_s"):
        clone(fitted).fit(both, both["diagnosis"].to_numpy())
    # connectomes in memory carry no folder: nothing to compare
    in_memory = X_other.assign(connectome=[load_connectome(p) for p in X_other["connectome"]])
    assert fitted.predict_proba(in_memory).shape == (len(X), 2)


def test_a_dynamic_study_is_read_per_recording_and_predicted_as_predict_does(tmp_path):
    """On a dynamic study (the label in which two entries rise in the same segments) the
    estimator keeps the planted within pair, reads its products over each recording's own
    segments (``within_per_recording``), tells the held-out participants apart, and its
    ``predict_proba`` is what ``predict``'s ``recording_logits`` gives for the same model."""
    import torch
    from builders import PLANTED, dynamic_study
    from scipy.special import softmax

    from eegformer_cli.model.interactions import Interaction
    from eegformer_cli.model.predict import recording_logits

    X = read_preprocessed(dynamic_study(tmp_path / "dynamic", n=48))
    y = X["diagnosis"].to_numpy()
    held_out = X["participant_id"].isin(sorted(set(X["participant_id"]))[::4]).to_numpy()
    estimator = XAIguiFormerClassifier(
        config={**TINY, "transformer_path": "on"}, epochs=EPOCHS, random_state=SEED, device="cpu"
    ).fit(X[~held_out], y[~held_out])
    model = estimator.model_
    kept = [Interaction.from_dict(k) for k in model.config.interactions]
    assert model.config.within_per_recording
    assert any(k.within and {k.a, k.b} == set(PLANTED) for k in kept)
    probabilities = estimator.predict_proba(X[held_out])
    assert np.mean(estimator.predict(X[held_out]) == y[held_out]) >= 0.75  # 12 held out
    inputs = []
    for _, row in X[held_out].iterrows():
        with np.load(row["connectome"]) as saved:
            coh, wpli = saved["coh"], saved["wpli"]
        inputs.append((coh, wpli, float(row["age"]), {"M": 0.0, "F": 1.0}.get(row["sex"], np.nan)))
    logits = recording_logits(model, inputs, torch.device("cpu"))
    np.testing.assert_allclose(softmax(logits, axis=1), probabilities, rtol=1e-5, atol=1e-6)
