"""How far a probability can be trusted: calibration figures on probabilities whose
calibration is known, the recalibration that undoes a known distortion, split-conformal sets
whose coverage is measured on fresh draws, and the chain through a real run: metrics.json, the
model file, ``predict``'s recalibrated probabilities and ``--coverage`` sets, and the verdict.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from builders import TINY_TOML, exit_code, make_connectome_folder, metrics_of, run_main, tiny_config

from eegformer_cli.errors import EegformerWarning
from eegformer_cli.evaluation import calibration, conformal
from eegformer_cli.experiment import verdict
from eegformer_cli.training.run_plan import default_positive_label, is_control_label


def calibrated_draws(n: int, seed: int, n_classes: int = 2):
    """Probabilities (n, K) from a Dirichlet and labels drawn from them: calibrated by
    construction."""
    rng = np.random.default_rng(seed)
    probabilities = rng.dirichlet(np.full(n_classes, 0.7), size=n)
    labels = np.array([rng.choice(n_classes, p=p) for p in probabilities])
    return probabilities, labels


def sharpen(probabilities: np.ndarray, power: float) -> np.ndarray:
    """p^power renormalised: power > 1 makes calibrated probabilities over-confident."""
    out = probabilities**power
    return out / out.sum(axis=1, keepdims=True)


def test_calibrated_probabilities_score_as_calibrated_and_sharpened_ones_do_not():
    probabilities, labels = calibrated_draws(4000, 0)
    good = calibration.calibration_summary(labels, probabilities, 1)
    assert good["ece"] < 0.03 and good["slope"] == pytest.approx(1.0, abs=0.1)
    assert good["intercept"] == pytest.approx(0.0, abs=0.1)
    assert sum(b["n"] for b in good["bins"]) == 4000 and good["target"] == "P(positive class)"
    bad = calibration.calibration_summary(labels, sharpen(probabilities, 3.0), 1)
    assert bad["ece"] > 0.1 and bad["slope"] == pytest.approx(1 / 3, abs=0.06)
    assert bad["brier"] > good["brier"] and bad["log_loss"] > good["log_loss"]
    # three classes: the top label's confidence; Brier on the one-hot scale, halved
    probabilities, labels = calibrated_draws(3000, 1, n_classes=3)
    three = calibration.calibration_summary(labels, probabilities, None)
    assert three["target"] == "top-label confidence" and three["ece"] < 0.04
    assert 0 < three["brier"] < 0.5


def test_recalibration_undoes_overconfidence_and_is_kept_only_when_it_helps():
    probabilities, labels = calibrated_draws(600, 2)
    groups = np.arange(600) // 3  # participants of 3 recordings
    chosen = calibration.choose_recalibration(labels, sharpen(probabilities, 3.0), groups, 1)
    assert chosen["method"] in ("temperature", "platt")
    losses = chosen["cross_fitted_log_loss"]
    assert losses[chosen["method"]] < losses["none"] and "lowers" in chosen["reason"]
    if chosen["method"] == "temperature":
        assert chosen["params"]["temperature"] == pytest.approx(3.0, rel=0.25)
    # as calibrated as the undistorted probabilities are on these 600 draws (binning noise)
    truth = calibration.calibration_summary(labels, probabilities, 1)["ece"]
    before = calibration.calibration_summary(labels, sharpen(probabilities, 3.0), 1)["ece"]
    assert chosen["after"]["ece"] < truth + 0.02 < before
    back = calibration.recalibrate(chosen, sharpen(probabilities, 3.0))
    assert np.allclose(back.sum(axis=1), 1) and np.abs(back - probabilities).mean() < 0.05
    # the temperature of three classes
    probabilities3, labels3 = calibrated_draws(600, 3, n_classes=3)
    fitted = calibration.fit_recalibration(
        "temperature", labels3, sharpen(probabilities3, 2.0), None
    )
    assert fitted["params"]["temperature"] == pytest.approx(2.0, rel=0.25)
    # too few recordings: nothing is fitted
    few = calibration.choose_recalibration(labels[:12], probabilities[:12], groups[:12], 1)
    assert few["method"] == "none" and "too few" in few["reason"]
    assert calibration.recalibrate(few, probabilities[:3]) is not None


def test_a_steep_platt_scaling_of_a_confident_probability_gives_0_and_1_quietly():
    """A run whose out-of-fold probabilities separate the classes gets a steep Platt slope;
    a recording the model is sure of then has a logit far beyond exp's range: its recalibrated
    probabilities are 0 and 1, without numpy's overflow warning on the console."""
    steep = {"method": "platt", "params": {"a": 40.0, "b": 0.5, "positive_index": 1}}
    sure = np.array([[1 - 1e-11, 1e-11], [1e-11, 1 - 1e-11], [0.5, 0.5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = calibration.recalibrate(steep, sure)
    assert out[:2].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert out[2, 1] == pytest.approx(1 / (1 + np.exp(-0.5)))


def test_the_temperature_is_scikit_learn_s():
    """Our temperature fit and scikit-learn's CalibratedClassifierCV(method="temperature"),
    fitted on the same stored probabilities (a pass-through classifier, frozen), agree: the
    reason calibration.py keeps its own (see the comment there) is not a different result."""
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Stored(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.unique(y)
            return self

        def predict_proba(self, X):
            return np.asarray(X)

        def predict(self, X):
            return self.classes_[np.asarray(X).argmax(axis=1)]

    for n_classes, power in ((2, 3.0), (3, 0.5)):
        probabilities, labels = calibrated_draws(300, 4, n_classes=n_classes)
        distorted = sharpen(probabilities, power)
        ours = calibration.fit_recalibration("temperature", labels, distorted, None)
        theirs = CalibratedClassifierCV(
            FrozenEstimator(Stored().fit(distorted, labels)), method="temperature"
        ).fit(distorted, labels)
        beta = float(theirs.calibrated_classifiers_[0].calibrators[0].beta_)
        assert ours["params"]["temperature"] == pytest.approx(1 / beta, rel=1e-3)
        assert np.allclose(
            calibration.recalibrate(ours, distorted), theirs.predict_proba(distorted), atol=1e-4
        )


def test_split_conformal_sets_reach_their_coverage_on_fresh_recordings():
    calib, calib_labels = calibrated_draws(400, 4)
    fresh, fresh_labels = calibrated_draws(4000, 5)
    for coverage in (0.8, 0.9):
        sets = conformal.prediction_sets(calib, calib_labels, fresh, coverage)
        covered = sets[np.arange(len(fresh_labels)), fresh_labels].mean()
        assert coverage - 0.04 <= covered <= coverage + 0.05, (coverage, covered)
        assert sets.any(axis=1).all()  # never an empty set
        # a confident recording gets one class, an uncertain one may get both
        assert sets[fresh.max(axis=1) > 0.99].sum(axis=1).max() == 1
    out_of_fold = conformal.coverage_out_of_fold(calib, calib_labels, np.arange(400) // 2)
    level = next(x for x in out_of_fold["levels"] if x["coverage"] == 0.9)
    assert 0.85 <= level["empirical_coverage"] <= 0.95 and 1 <= level["mean_size"] <= 2
    with pytest.raises(Exception, match="needs at least 21 out-of-fold recordings"):
        conformal.check_coverage(0.95, 10)


def test_control_like_labels_are_the_negative_class_by_default():
    assert default_positive_label(["healthy", "schizophrenia"]) == "schizophrenia"
    assert default_positive_label(["ADHD", "control"]) == "ADHD"  # not the last in order
    assert default_positive_label(["HC", "MDD"]) == "MDD"
    assert default_positive_label(["Normal", "abnormal"]) == "abnormal"
    assert default_positive_label(["a", "b"]) == "b"  # neither: the last
    assert is_control_label("Healthy_Control") and not is_control_label("schizophrenia")


def test_the_verdict_speaks_of_every_reference_shortcuts_and_chance():
    lines = verdict.verdict_lines(
        metrics_of(
            comparisons=[
                {
                    "reference": "logistic_regression",
                    "metric": "bac",
                    "mean_difference": 0.017,
                    "ci95": [-0.072, 0.105],
                },
                {
                    "reference": "tangent_space",
                    "metric": "bac",
                    "mean_difference": 0.09,
                    "ci95": [0.02, 0.16],
                },
            ],
            shortcut_audit={
                "variables": [
                    {"name": "duration_s", "status": "borderline", "auroc": {"mean": 0.64}},
                    {"name": "age", "status": "checked", "auroc": {"mean": 0.5}},
                ]
            },
        )
    )
    text = {topic: [t for k, t, _ in lines if k == topic] for topic, _, _ in lines}
    assert text["score"][0].startswith(
        "balanced accuracy 0.750 (95 % CI 0.66 to 0.84), chance 0.50 (2 classes)"
    )
    assert text["reference"] == [
        "not distinguishable from the logistic regression (+0.017 bac, 95 % CI -0.072 to +0.105)",
        "better than the Riemannian tangent-space reference (+0.090 bac, 95 % CI +0.020 to +0.160)",
    ]
    assert text["shortcuts"] == [
        "borderline: duration_s (AUROC 0.64) (the score may come from them, not the EEG)"
    ]
    assert "not computed" in text["permutation test"][0]
    assert "not measured" in text["calibration"][0]
    three = verdict.verdict_lines(
        metrics_of(labels=["a", "b", "c"], score={"mean": 0.5, "ci95": [0.3, 0.7]})
    )
    assert "chance 0.33 (3 classes)" in three[0][1] and three[0][2] == "neutral"
    assert verdict.headline(metrics_of()).startswith(
        "XAIguiFormer: above chance (its 95 % interval, 0.66 to 0.84, lies above chance 0.50); "
        "not distinguishable from the logistic regression"
    )


def test_the_verdict_names_the_model_that_carries_the_score():
    """Kept in no fold, the transformer is named nowhere as the scorer: the model is its linear
    path, said in the headline, the transformer's line, metrics.json's ``scored_by`` and the
    attention's; kept in some folds, in how many; without a linear path, XAIguiFormer."""
    linear = {
        "reference": "linear_path",
        "metric": "bac",
        "mean_difference": 0.0,
        "ci95": [0.0, 0.0],
    }
    comparisons = [metrics_of().comparison.to_dict(), linear]
    nowhere = metrics_of(
        comparisons=comparisons, linear_path={"n_folds": 5, "transformer_kept": 0}, n_folds=5
    )
    headline = verdict.headline(nowhere)
    assert headline.startswith(
        "The model (its linear path; the transformer was not kept in any fold): above chance"
    )
    lines = verdict.verdict_lines(nowhere)
    said = [headline] + [text for _, text, _ in lines]
    assert not any("XAIguiFormer" in text or "the transformer adds" in text for text in said)
    transformer = {topic: text for topic, text, _ in lines}["transformer"]
    assert transformer.startswith("not kept in any of the 5 folds") and "static stage's" in (
        transformer
    )
    assert verdict.scored_by(nowhere) == {
        "model": "linear_path",
        "transformer_folds": 0,
        "n_folds": 5,
        "statement": verdict.LINEAR_PATH_SCORER,
    }
    assert verdict.attention_reach(nowhere).startswith("The attention did not reach the output")

    some = metrics_of(
        comparisons=comparisons, linear_path={"n_folds": 5, "transformer_kept": 2}, n_folds=5
    )
    assert verdict.headline(some).startswith(
        "XAIguiFormer (the transformer kept in 2 of 5 folds, its linear path alone in the other "
        "3): above chance"
    )
    transformer = {t: x for t, x, _ in verdict.verdict_lines(some)}["transformer"]
    assert transformer.endswith("; kept in 2 of 5 folds")
    assert verdict.scored_by(some)["model"] == "xaiguiformer"
    assert "in 2 of 5 folds only" in verdict.attention_reach(some)

    every = metrics_of(linear_path={"n_folds": 5, "transformer_kept": 5}, n_folds=5)
    assert verdict.headline(every).startswith(
        "XAIguiFormer (its linear path and the transformer, kept in every fold): "
    )
    assert verdict.attention_reach(every) is None and verdict.attention_reach(metrics_of()) is None
    assert verdict.scored_by(metrics_of())["statement"] == "XAIguiFormer"


def test_every_coloured_verdict_line_says_why():
    def calibration(ece: float) -> dict:
        summary = {"target": "P(positive class)", "n": 40, "brier": 0.2, "ece": ece}
        return {"models": {"xaiguiformer": summary}, "recalibration": {"reason": "x"}}

    amber = {
        t: (x, tone)
        for t, x, tone in verdict.verdict_lines(metrics_of(calibration=calibration(0.18)))
    }["calibration"]
    assert amber[1] == "warn" and "ECE 0.180, Brier 0.200 (above 0.10: the stated " in amber[0]
    assert "off by 18 percentage points on average" in amber[0]
    green = {
        t: (x, tone)
        for t, x, tone in verdict.verdict_lines(metrics_of(calibration=calibration(0.04)))
    }["calibration"]
    assert green[1] == "good" and "(at most 0.10: " in green[0]
    score = verdict.verdict_lines(metrics_of())[0]
    assert score[2] == "good" and score[1].endswith("; the interval lies above chance")
    agreeing = metrics_of(  # every fold the same score: no interval, and the line says so
        score={"mean": 0.875, "std": 0.0, "ci95": [None, None]}
    )
    _, text, tone = verdict.verdict_lines(agreeing)[0]
    rule = verdict.above_chance(agreeing)
    assert "the interval lies above" not in text
    assert text.endswith(f"; {rule.statement}") and tone == ("good" if rule.above else "neutral")


@pytest.fixture(scope="module")
def cv_run(tmp_path_factory) -> dict:
    """A 3-fold CV of a tiny model on 30 synthetic participants (their labels learnable)."""
    from eegformer_cli.experiment.run import run_training

    root = tmp_path_factory.mktemp("calibration")
    prep = make_connectome_folder(root / "prep", n_participants=30)
    run_dir = root / "run"
    metrics = run_training(prep, run_dir, "diagnosis", tiny_config(cv=3, epochs=3))
    return {"prep": prep, "run": run_dir, "metrics": metrics}


@pytest.mark.slow
def test_a_run_measures_calibration_and_predict_applies_it_with_prediction_sets(cv_run, capsys):
    from scipy.special import softmax

    from eegformer_cli.inference.inputs import load_inputs
    from eegformer_cli.model.predict import recording_logits
    from eegformer_cli.training.model_file import load_model_file

    metrics = json.loads((cv_run["run"] / "metrics.json").read_text())
    assert metrics["positive_label"] == "patient"
    assert (
        set(metrics["calibration"]["models"])
        == set(metrics["models"])
        == {"xaiguiformer", "logistic_regression", "tangent_space", "linear_path"}
    )  # every model, both references, the model's linear path alone
    for summary in metrics["calibration"]["models"].values():
        assert {"brier", "ece", "slope", "intercept", "bins"} <= set(summary)
    recalibration = metrics["calibration"]["recalibration"]
    assert recalibration["n"] == 30 and recalibration["method"] in calibration.METHODS
    levels = {level["coverage"]: level for level in metrics["prediction_sets"]["levels"]}
    assert 0.9 in levels and 0 <= levels[0.9]["empirical_coverage"] <= 1
    assert metrics["score"]["chance"] == 0.5 and metrics["score"]["n_folds"] == 3
    bundle = load_model_file(cv_run["run"] / "model.pt")
    assert bundle.recalibration == {
        "method": recalibration["method"],
        "params": recalibration["params"],
    }
    assert len(bundle.conformal["labels"]) == 30
    capsys.readouterr()
    assert (
        exit_code(
            "predict",
            cv_run["run"] / "model.pt",
            cv_run["prep"],
            "--coverage",
            "0.9",
            "--format",
            "json",
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert list(rows[0])[:6] == [
        "recording_id",
        "participant_id",
        "predicted",
        "prob_control",
        "prob_patient",
        "prediction_set",
    ]
    assert all(
        row["prediction_set"] and set(row["prediction_set"]) <= {"control", "patient"}
        for row in rows
    )
    assert all(row["predicted"] in row["prediction_set"] for row in rows)
    # predict's probabilities are the network's, through the stored recalibration
    items = list(load_inputs(bundle, [cv_run["prep"]]))[:4]
    import torch

    raw = softmax(
        recording_logits(
            bundle.model, [(i.coh, i.wpli, i.age, i.sex) for i in items], torch.device("cpu")
        ),
        axis=1,
    )
    expected = calibration.recalibrate(bundle.recalibration, raw)
    for item, probabilities in zip(items, expected):
        row = next(r for r in rows if r["recording_id"] == item.recording_id)
        assert row["prob_patient"] == pytest.approx(probabilities[1], abs=1e-6)
    # a coverage the run's 30 recordings cannot give: one line, exit 2
    assert (
        exit_code("predict", cv_run["run"] / "model.pt", cv_run["prep"], "--coverage", "0.99") == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs at least 101 out-of-fold recordings" in err


@pytest.mark.slow
def test_the_train_summary_opens_with_the_verdict(cv_run, capsys):
    from eegformer_cli.cli.train import _report

    _report(cv_run["metrics"], cv_run["run"], False)
    out = capsys.readouterr().out  # a result: on stdout
    assert out.lstrip().startswith("╭") and "Verdict" in out.splitlines()[0]
    for topic in ("score:", "reference:", "shortcuts:", "permutation test:", "calibration:"):
        assert topic in out
    assert out.index("Verdict") < out.index("test participants only")
    assert "chance: BAC 0.50 (2 classes)" in out


@pytest.mark.slow
def test_explain_of_new_recordings_reports_predict_s_recalibrated_probabilities(
    cv_run, tmp_path, capsys
):
    import csv
    import shutil

    from eegformer_cli.training.model_file import add_calibration

    model = tmp_path / "model.pt"  # a model file alone: the final model explains
    shutil.copy(cv_run["run"] / "model.pt", model)
    add_calibration(
        model, {"recalibration": {"method": "temperature", "params": {"temperature": 3.0}}}
    )
    capsys.readouterr()
    assert exit_code("predict", model, cv_run["prep"], "--format", "json") == 0
    predicted = {row["recording_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert (
        exit_code("explain", model, cv_run["prep"], "--out", tmp_path / "x", "--n-steps", "4") == 0
    )
    with open(tmp_path / "x" / "recordings.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 30 and {row["explained_by"] for row in rows} == {"model"}
    for row in rows:
        expected = predicted[row["recording_id"]]
        assert float(row["prob_patient"]) == pytest.approx(expected["prob_patient"], rel=1e-5)
        assert row["predicted"] == expected["predicted"]
    # the recalibration matters here: undone (temperature 1/3), the probabilities move
    calibrated = np.array([[1 - r["prob_patient"], r["prob_patient"]] for r in predicted.values()])
    raw = calibration.recalibrate(
        {"method": "temperature", "params": {"temperature": 1 / 3}}, calibrated
    )
    assert np.abs(raw - calibrated).max() > 1e-3


@contextlib.contextmanager
def third_party_warnings_fail():
    """Inside: a ``UserWarning`` of any library (scikit-learn's, MAPIE's ...) is an error, as
    ``python -W error::UserWarning`` makes it, so a command in which one would reach the console
    fails; eegformer's own warnings are shown, each time."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=UserWarning)
        warnings.filterwarnings("always", category=EegformerWarning)
        yield


def uneven_classes(root: Path, others: list[int]) -> Path:
    """24 participants, control and patient alternating, those at ``others`` of class other."""
    labels = ["control", "patient"] * 12
    for index in others:
        labels[index] = "other"
    prep = make_connectome_folder(root / "prep", n_participants=24, labels=labels)
    (root / "tiny.toml").write_text(TINY_TOML)
    return prep


@pytest.mark.slow
def test_a_class_in_one_participant_group_is_said_once_in_eegformer_s_words(tmp_path, capsys):
    """MAPIE warns, for every calibration part without a class, that 'your conformalization
    dataset has less labels than your training dataset'; train says once what it means."""
    prep = uneven_classes(tmp_path, others=[3])  # one participant: in one group of five
    with third_party_warnings_fail():
        code, output = run_main(
            capsys, "train", prep, "--out", tmp_path / "run", "-l", "diagnosis", "--cv", "2",
            "--epochs", "1", "--config", tmp_path / "tiny.toml",
        )  # fmt: skip
    assert code == 0, output
    assert "conformalization" not in output and "UserWarning" not in output
    said = "prediction sets: all the recordings of class 'other' (1 participant(s)) lie in one "
    assert output.count(said) == 1, output
    assert "of the 5 participant groups over which the run's coverage is cross-fitted" in output


def test_predict_coverage_says_once_that_the_calibration_recordings_lack_a_class(tmp_path, capsys):
    """A holdout whose test participants hold no 'other' leaves the model's calibration set
    without it (MAPIE's warning, once per recording, would say so in its words)."""
    prep = uneven_classes(tmp_path, others=[3, 8])
    run = tmp_path / "run"
    flags = ["--config", tmp_path / "tiny.toml", "--holdout", "0.25", "--seed", "0"]
    code, output = run_main(capsys, "train", prep, "--out", run, "-l", "diagnosis", *flags)
    assert code == 0, output
    test = json.loads((run / "splits.json").read_text())["folds"][0]["test"]
    assert len(test) == 6 and not {"sub-03", "sub-08"} & set(test)  # no 'other' among them
    with third_party_warnings_fail():
        code, output = run_main(capsys, "predict", run / "model.pt", prep, "--coverage", "0.8")
    assert code == 0, output
    assert "conformalization" not in output and "UserWarning" not in output
    said = (
        "--coverage 0.8: the model's 6 calibration recordings (its run's out-of-fold ones) "
        "include none of class 'other'"
    )
    assert output.count(said) == 1, output
