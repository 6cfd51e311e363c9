"""The learning curve of ``train --learning-curve`` (evaluation/learning_curve.py,
experiment/learning_curve.py): the inverse power law's fit and what it says on simulated
points and predictions, the nested participant subsets of a run's folds, and end to end a run
with the curve, its fold jobs, its merge into a finished run (also of an earlier version),
resume, metrics.json and the report's plot.

Simulated predictions (:func:`simulated`): folds of test participants of two balanced classes,
one recording each; at each fraction a model gets a given share of each class right.
"""

from __future__ import annotations

import json
import shutil
from math import nan
from pathlib import Path

import numpy as np
import pytest
from builders import EARLIER_RUN, TINY_TOML, make_connectome_folder, run_main, tiny_config

from eegformer_cli.errors import UsageError
from eegformer_cli.evaluation import learning_curve as lc
from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.experiment import learning_curve as experiment_curve
from eegformer_cli.experiment import run_folder
from eegformer_cli.training.config import TrainConfig, apply_overrides, resolve_config
from eegformer_cli.training.run_plan import plan_run

# ------------------------------------------------------------------------------------------
# the fit and what it says


def test_the_power_law_fit_recovers_known_parameters():
    true = lc.Fit(0.9, 3.0, 0.6)
    n = np.array([15.0, 30.0, 45.0, 60.0])
    rng = np.random.default_rng(0)
    fitted = lc.fit_power_law(n, true.at(n) + rng.normal(0, 0.001, len(n)), np.full(4, 0.01))
    assert fitted is not None
    assert abs(fitted.a - true.a) < 0.03 and abs(fitted.c - true.c) < 0.15
    assert np.allclose(fitted.at([100, 300]), true.at([100, 300]), atol=0.01)
    # from a start (the bootstrap's refits) it lands on the same curve
    again = lc.fit_power_law(n, true.at(n), np.full(4, 0.01), fitted)
    assert np.allclose(again.at([300]), true.at([300]), atol=0.005)


def test_projection_sizes_are_round_and_up_to_five_times_today():
    assert lc.round_sizes(84) == [100, 200, 300]
    assert lc.round_sizes(150) == [200, 300, 500]
    assert lc.round_sizes(600) == [1000, 2000, 3000]
    assert all(lc.round_sizes(n) for n in range(2, 2000, 7))


def simulated(shares: dict[float, float], n_folds: int = 5, n_test: int = 60, seed: int = 0):
    """Fraction -> the folds' :class:`FoldPredictions` of a model that gets ``share`` of each
    class right (the wrong ones drawn anew per fraction and fold), trained on 4/5 of 5 * 60."""
    rng = np.random.default_rng(seed)
    by_fraction = {}
    for fraction, share in shares.items():
        folds = []
        for k in range(n_folds):
            people = np.array([f"f{k}-p{i:02d}" for i in range(n_test)])
            truth = np.arange(n_test) % 2
            right = np.zeros(n_test, bool)
            for label in (0, 1):
                own = np.flatnonzero(truth == label)
                right[rng.choice(own, round(share * len(own)), replace=False)] = True
            predicted = np.where(right, truth, 1 - truth)
            bac = float(np.mean([np.mean(right[truth == c]) for c in (0, 1)]))
            n_training = round(fraction * (n_folds - 1) * n_test)
            folds.append(lc.FoldPredictions(f"r0_f{k}", n_training, bac, people, truth, predicted))
        by_fraction[fraction] = folds
    draws = lc.bootstrap_draws(
        {f.fold: f.participants for f in by_fraction[1.0]}, lc.N_BOOTSTRAP, seed
    )
    return lc.model_curve(by_fraction, 0.8, n_folds * n_test, draws)


def test_a_rising_curve_is_fitted_and_projected_with_an_interval():
    true = lc.Fit(0.95, 1.2, 0.5)
    shares = {f: float(true.at(f * 300)) for f in (0.25, 0.5, 0.75, 1.0)}
    curve, projection = simulated(shares)
    assert curve.status == "fitted" and curve.params is not None
    assert [p.n_participants for p in projection] == lc.round_sizes(300) == [500, 1000]
    centres = [p.bac for p in projection]
    assert centres == sorted(centres) and centres[0] > curve.points[-1].bac - 0.02
    for point in projection:
        low, high = point.interval
        assert low <= point.bac <= high and high - low < 0.3
    # the truth at the projected sizes lies within the interval
    for point in projection:
        low, high = point.interval
        assert low - 0.02 <= true.at(point.n_participants) <= high + 0.02
    assert "by its learning curve a study of 500 participants would reach" in curve.statement


def test_a_flat_curve_is_said_to_be_flat_and_projects_its_level():
    curve, projection = simulated(dict.fromkeys((0.25, 0.5, 0.75, 1.0), 0.8), seed=1)
    assert curve.status == "flat" and curve.params is None
    assert curve.level == curve.points[-1].bac and abs(curve.level - 0.8) < 0.05
    assert {p.bac for p in projection} == {curve.level}
    assert 0.5 < projection[0].interval[0] < 0.8 < projection[0].interval[1]
    assert "the learning curve is flat" in curve.statement
    assert "not expected to raise it" in curve.statement


@pytest.mark.parametrize(
    "shares",
    [
        {0.25: 0.58, 0.5: 0.44, 0.75: 0.47, 1.0: 0.46},  # a fall beyond its noise
        {0.25: 0.40, 0.5: 0.45, 0.75: 0.48, 1.0: 0.53},  # a rise beyond it
    ],
)
def test_a_curve_whose_run_is_not_told_from_chance_is_flat_at_chance(shares):
    # a study whose label has no cause: neither the fall nor the rise is learning
    curve, projection = simulated(shares)
    assert curve.status == "flat" and curve.params is None
    assert curve.level == curve.points[-1].bac
    low, high = projection[0].interval
    assert low <= 0.5 <= high and {p.bac for p in projection} == {curve.level}
    assert curve.statement.startswith("the learning curve is flat at chance: from 75 to 300")
    assert "is not above chance, 0.50), so the curve shows no rise to project" in curve.statement


def test_a_falling_curve_is_unreliable_and_too_few_points_are_said():
    curve, projection = simulated({0.25: 0.9, 0.5: 0.6, 0.75: 0.8, 1.0: 0.85}, seed=2)
    assert curve.status == "non_monotone" and projection
    assert "not monotone" in curve.statement and "unreliable" in curve.statement
    curve, projection = simulated({0.75: 0.8, 1.0: 0.85})
    assert curve.status == "too_few_points" and projection == []
    assert curve.statement.startswith("too few points for a learning curve (2")


# ------------------------------------------------------------------------------------------
# the nested subsets of a run's folds


def test_subsets_are_nested_stratified_participant_wise_and_fixed(tmp_path, capsys):
    labels = ["patient" if p % 3 == 0 else "control" for p in range(36)]
    root = make_connectome_folder(tmp_path / "prep", n_participants=36, labels=labels)
    plan = plan_run(root, "diagnosis", tiny_config(cv=3))
    subsets, skipped = experiment_curve.plan_subsets(plan)
    assert skipped and skipped[0].startswith("25% skipped: the validation split")
    assert {fraction for _, fraction in subsets} == {0.5, 0.75}
    label_of = dict(zip((f"sub-{p:02d}" for p in range(36)), labels))
    for fold in plan.folds:
        part = set(fold.train + fold.val)
        smaller, larger = subsets[fold.name, 0.5], subsets[fold.name, 0.75]
        for subset, fraction in ((smaller, 0.5), (larger, 0.75)):
            chosen = set(subset.train + subset.val)
            assert not set(subset.train) & set(subset.val) and chosen <= part
            assert subset.test == fold.test and (subset.repeat, subset.fold) == (
                fold.repeat,
                fold.fold,
            )
            for label in ("patient", "control"):  # the class shares of the training part
                whole = sum(label_of[p] == label for p in part)
                assert sum(label_of[p] == label for p in chosen) == max(1, round(fraction * whole))
        assert set(smaller.train + smaller.val) < set(larger.train + larger.val)
    # the same subsets every time: every model of a fold is refit on them
    again, _ = experiment_curve.plan_subsets(plan)
    assert again == subsets


def test_the_fractions_are_a_validated_setting(tmp_path):
    default = TrainConfig()
    assert default.learning_curve_fractions == (0.25, 0.5, 0.75)
    toml = tmp_path / "curve.toml"
    toml.write_text("learning_curve_fractions = [0.2, 0.4, 0.6, 0.8]\n")
    config = resolve_config("default", toml)
    assert config.learning_curve_fractions == (0.2, 0.4, 0.6, 0.8)
    assert config.to_dict()["learning_curve_fractions"] == [0.2, 0.4, 0.6, 0.8]
    assert TrainConfig.from_dict(config.to_dict()) == config
    # a stored config of an earlier version, without the setting: today's default
    stored = default.to_dict()
    del stored["learning_curve_fractions"]
    assert TrainConfig.from_dict(stored).learning_curve_fractions == (0.25, 0.5, 0.75)
    for bad in ([0.5], [0.5, 0.25], [0, 0.5], [0.5, 1], [0.25, 0.25], [0.251, 0.254], [0.2, nan]):
        with pytest.raises(UsageError) as raised:
            apply_overrides(default, {"learning_curve_fractions": bad}, "test")
        assert "for learning_curve_fractions; allowed values are at least 2 fractions" in str(
            raised.value
        ) and "strictly between 0 and 1, increasing" in str(raised.value)
    for bad in ("0.5", [True, 0.5], 0.5):
        with pytest.raises(UsageError, match="'learning_curve_fractions' in test; expected"):
            apply_overrides(default, {"learning_curve_fractions": bad}, "test")


def test_the_run_cuts_the_fractions_of_its_config(tmp_path):
    root = make_connectome_folder(tmp_path / "prep", n_participants=36)
    plan = plan_run(root, "diagnosis", tiny_config(cv=3, learning_curve_fractions=[0.6, 0.8]))
    subsets, skipped = experiment_curve.plan_subsets(plan)
    assert not skipped and {fraction for _, fraction in subsets} == {0.6, 0.8}
    for fold in plan.folds:
        part = len(fold.train) + len(fold.val)
        assert len(subsets[fold.name, 0.6].train + subsets[fold.name, 0.6].val) == round(0.6 * part)


# ------------------------------------------------------------------------------------------
# end to end


def curve_of(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())["sample_size"]


@pytest.fixture
def prep(tmp_path) -> tuple[Path, Path]:
    """A 30-participant folder and the tiny TOML config (``val_fraction`` 0.34, 2 epochs)."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    return make_connectome_folder(tmp_path / "prep", n_participants=30, effect=0.1), config


@pytest.mark.slow
def test_a_run_with_the_curve_writes_it_and_the_report_plots_it(prep, tmp_path, capsys):
    root, config = prep
    run = tmp_path / "run"
    args = ("train", root, "--out", run, "-l", "diagnosis", "--cv", "3", "--config", config)
    code, printed = run_main(capsys, *args, "--learning-curve", "-j", "2")
    assert code == 0, printed
    assert "learning curve: 25% skipped: the validation split" in printed
    assert "learning curve, XAIguiFormer: BAC " in printed
    assert "learning curve, the logistic regression: BAC " in printed
    written = json.loads((run / "metrics.json").read_text())
    assert written["complete"] is True
    sample = written["sample_size"]
    assert set(sample["learning_curve"]) == set(written["models"]) == set(sample["projection"])
    points = sample["learning_curve"]["xaiguiformer"]["points"]
    assert [p["fraction"] for p in points] == [0.5, 0.75, 1.0]
    assert points[-1]["n_participants"] == 30 and points[-1]["per_fold"] == [
        fold["bac"] for fold in written["models"]["xaiguiformer"]["per_fold"]
    ]
    for entries in sample["projection"].values():
        assert [e["n_participants"] for e in entries] == [50, 100]
        assert all(set(e) == {"n_participants", "bac", "interval"} for e in entries)
    assert sample["learning_curve_run"]["fractions"] == [0.5, 0.75, 1.0]
    files = sorted(p.name for p in (run / "folds" / "learning_curve").iterdir())
    assert files == [f"r0_f{k}_{pct}pct.json" for k in range(3) for pct in (50, 75)]
    # the reader keeps it, and writes it back as it was
    metrics = run_folder.read_metrics(run)
    assert metrics.sample_size.learning_curve["xaiguiformer"].points[-1].fraction == 1.0
    assert metrics.to_dict() == written
    # the report: the sentence to quote goes on with the curve, and the plot
    from eegformer_cli.report.build import write_report

    page = write_report(run, None, tmp_path / "report.html").read_text()
    assert "Learning curve" in page and "the learning curve" in page.lower()
    # a holdout has no curve over folds: refused before anything is written
    code, printed = run_main(
        capsys, "train", root, "--out", tmp_path / "holdout", "-l", "diagnosis", "--holdout",
        "0.3", "--config", config, "--learning-curve",
    )  # fmt: skip
    assert code == 2 and "--learning-curve needs cross-validation" in printed
    assert not (tmp_path / "holdout").exists()


@pytest.mark.slow
def test_fold_jobs_merge_and_resume_give_the_same_curve(prep, tmp_path, capsys):
    root, config = prep
    run = tmp_path / "run"
    args = ("train", root, "--out", run, "-l", "diagnosis", "--cv", "3", "--config", config)
    assert run_main(capsys, *args, "--fold", "0", "--learning-curve")[0] == 0
    assert sorted(p.name for p in (run / "folds" / "learning_curve").iterdir()) == [
        "r0_f0_50pct.json",
        "r0_f0_75pct.json",
    ]
    for k in (1, 2):
        assert run_main(capsys, *args, "--fold", str(k))[0] == 0
    code, printed = run_main(capsys, "train", "--merge", run)
    assert code == 0 and "learning_curve" not in curve_of(run)
    # the merge adds it to the finished run, refitting only what the fold jobs did not
    code, printed = run_main(capsys, "train", "--merge", run, "--learning-curve")
    assert code == 0, printed
    assert "learning curve: 4 of 6 refits to compute (fractions 50%, 75%)" in printed
    merged = curve_of(run)
    # an interrupted curve resumes: a lost refit is computed again, to the same numbers
    (run / "folds" / "learning_curve" / "r0_f2_75pct.json").unlink()
    code, printed = run_main(capsys, "train", "--merge", run, "--learning-curve")
    assert code == 0 and "learning curve: 1 of 6 refits to compute (fractions 75%)" in printed
    again = curve_of(run)
    del merged["learning_curve_run"]["seconds"], again["learning_curve_run"]["seconds"]
    assert again == merged
    # a whole run with the curve gives the same numbers as the fold jobs and their merge
    whole = tmp_path / "whole"
    run_main(capsys, "train", root, "--out", whole, *args[4:], "--learning-curve")
    alone = curve_of(whole)
    del alone["learning_curve_run"]["seconds"]
    assert alone == merged


@pytest.mark.slow
def test_a_merge_or_rerun_without_the_flag_keeps_the_curve(prep, tmp_path, capsys):
    root, config = prep
    run = tmp_path / "run"
    args = ("train", root, "--out", run, "-l", "diagnosis", "--cv", "3", "--config", config)
    assert run_main(capsys, *args, "--learning-curve")[0] == 0
    made = curve_of(run)
    assert "learning_curve" in made
    # a merge that adds something else rewrites the summaries: the curve stays, from its refits
    code, printed = run_main(capsys, "train", "--merge", run)
    assert code == 0, printed
    assert "refits to compute" not in printed and "learning curve, XAIguiFormer: BAC" in printed
    written = json.loads((run / "metrics.json").read_text())
    assert written["complete"] is True and written["sample_size"] == made
    from eegformer_cli.report.build import write_report

    assert "Learning curve" in write_report(run, None, tmp_path / "report.html").read_text()
    # so does the same command again, and a lost refit is made again
    (run / "folds" / "learning_curve" / "r0_f1_50pct.json").unlink()
    code, printed = run_main(capsys, *args)
    assert code == 0 and "learning curve: 1 of 6 refits to compute (fractions 50%)" in printed
    again = curve_of(run)
    del made["learning_curve_run"]["seconds"], again["learning_curve_run"]["seconds"]
    assert again == made


@pytest.mark.slow
def test_the_merge_adds_the_curve_to_a_run_of_an_earlier_version(tmp_path, capsys):
    prep = make_connectome_folder(tmp_path / "prep", n_participants=20)
    run = tmp_path / "run"
    shutil.copytree(EARLIER_RUN, run)
    text = (run / "config.json").read_text().replace('"/data/prep"', json.dumps(str(prep)))
    (run / "config.json").write_text(text)
    code, printed = run_main(capsys, "train", "--merge", run, "--learning-curve")
    assert code == 0, printed
    sample = RunMetrics.from_dict(json.loads((run / "metrics.json").read_text())).sample_size
    curve = sample.learning_curve["xaiguiformer"]
    assert curve.points[-1].fraction == 1.0 and curve.points[-1].n_participants == 20
    # its folds' training parts (10 participants) are too small for a validation split of
    # 1 in 5 at any fraction: the curve is the run alone, and says so
    assert "learning curve: 75% skipped: the validation split" in printed
    assert curve.status == "too_few_points" and sample.projection == {
        name: [] for name in sample.learning_curve
    }
    assert f"learning curve, XAIguiFormer: BAC 0.80 at 20; {curve.statement}" in printed
