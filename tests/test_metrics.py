"""Metrics: scikit-learn definitions, the paper's BAC, positive-class AUC-PR, fold summaries,
the paired comparison with the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import average_precision_score, roc_auc_score

from eegformer_cli.evaluation.metrics import (
    classification_metrics,
    compare_folds,
    describe_comparison,
    paper_balanced_accuracy,
    summarise_folds,
)
from eegformer_cli.evaluation.run_metrics import Comparison, FoldScores


def compared(comparison: dict, model: str, reference: str) -> Comparison:
    """:func:`compare_folds`'s dict as metrics.json keeps a run's comparison."""
    return Comparison.from_dict({"model": model, "reference": reference, **comparison})


def test_binary_metrics_use_the_positive_class():
    y = np.array([0, 0, 0, 1, 1])
    p1 = np.array([0.1, 0.6, 0.2, 0.8, 0.4])
    probs = np.stack([1 - p1, p1], axis=1)
    m = classification_metrics(y, probs, positive_index=1)
    assert m.bac == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert m.paper_bac == pytest.approx(m.bac)  # equal for two classes
    assert m.auroc == pytest.approx(roc_auc_score(y, p1))
    assert m.auc_pr == pytest.approx(average_precision_score(y, p1))
    assert m.confusion_matrix == [[2, 1], [1, 1]]
    # positive class 0: AUC-PR of class 0's probability, not of class 1
    m0 = classification_metrics(y, probs, positive_index=0)
    assert m0.auc_pr == pytest.approx(average_precision_score(y == 0, 1 - p1))
    assert m0.auc_pr != pytest.approx(m.auc_pr)


def test_three_classes_sklearn_bac_vs_paper_bac():
    y = np.array([0, 0, 1, 1, 2, 2])
    predicted = np.array([0, 1, 1, 1, 0, 2])
    probs = np.eye(3)[predicted] * 0.7 + 0.1
    m = classification_metrics(y, probs, positive_index=None)
    assert m.bac == pytest.approx((0.5 + 1 + 0.5) / 3)
    # the official code's "BAC" is inflated for 3 classes (chance 0.5)
    assert m.paper_bac > m.bac
    assert m.paper_bac == pytest.approx(paper_balanced_accuracy(np.array(m.confusion_matrix)))
    assert m.auroc == pytest.approx(roc_auc_score(y, probs, multi_class="ovr"))


def test_chance_level_of_paper_bac_is_one_half():
    # always predicting class 0 on balanced 3-class data
    matrix = np.array([[5, 0, 0], [5, 0, 0], [5, 0, 0]])
    assert paper_balanced_accuracy(matrix) == pytest.approx(0.5)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
def test_undefined_auroc_is_nan_and_skipped_in_summary():
    one_class = classification_metrics(np.array([1, 1]), np.array([[0.2, 0.8], [0.6, 0.4]]), 1)
    assert math.isnan(one_class.auroc)
    full = classification_metrics(np.array([0, 1]), np.array([[0.8, 0.2], [0.3, 0.7]]), 1)
    summary = summarise_folds([one_class, full])
    assert summary["mean"]["auroc"] == pytest.approx(1.0)
    assert math.isnan(summary["std"]["auroc"])  # one defined value: no spread
    assert summary["mean"]["bac"] == pytest.approx((one_class.bac + full.bac) / 2)
    assert summary["std"]["bac"] == pytest.approx(np.std([one_class.bac, full.bac], ddof=1))
    assert (
        summary["confusion_matrix"]
        == (np.array(one_class.confusion_matrix) + np.array(full.confusion_matrix)).tolist()
    )


def test_paired_comparison_is_the_t_interval_widened_for_overlapping_training_sets():
    rng = np.random.default_rng(0)
    model = [FoldScores(bac=value) for value in rng.uniform(0.7, 1.0, 15)]
    reference = [FoldScores(bac=value) for value in rng.uniform(0.7, 1.0, 15)]
    differences = np.array([a.bac - b.bac for a, b in zip(model, reference)])
    naive = compare_folds(model, reference, test_train_ratio=0.0)
    expected = stats.ttest_1samp(differences, 0.0)  # independent folds: scipy's one-sample t
    assert naive["ci95"] == pytest.approx(list(expected.confidence_interval()))
    assert naive["p_value"] == pytest.approx(expected.pvalue)
    corrected = compare_folds(model, reference, test_train_ratio=0.25)  # 5-fold CV
    widening = np.sqrt((1 / 15 + 0.25) / (1 / 15))
    assert np.diff(corrected["ci95"])[0] == pytest.approx(widening * np.diff(naive["ci95"])[0])
    assert corrected["p_value"] > naive["p_value"]
    assert corrected["folds_better"] == (differences > 0).sum()
    assert corrected["folds_better"] + corrected["folds_worse"] + corrected["folds_equal"] == 15
    line = describe_comparison(compared(corrected, "xaiguiformer", "logistic_regression"))
    assert f"{corrected['mean_difference']:+.3f}" in line and "95 % CI" in line


def test_paired_comparison_skips_undefined_folds_and_needs_two_for_an_interval():
    model = [FoldScores(auroc=0.9), FoldScores(auroc=float("nan"))]
    reference = [FoldScores(auroc=0.8), FoldScores(auroc=0.7)]
    comparison = compare_folds(model, reference, 0.25, metric="auroc")
    assert comparison["n_folds"] == 1 and comparison["mean_difference"] == pytest.approx(0.1)
    assert np.isnan(comparison["ci95"]).all() and np.isnan(comparison["p_value"])
    assert "CI" not in describe_comparison(compared(comparison, "a", "b"))
    # the same difference on every fold (up to rounding) gives no interval, not p = 1e-16
    same = compare_folds(
        [FoldScores(bac=0.7), FoldScores(bac=0.9), FoldScores(bac=0.8)],
        [FoldScores(bac=0.7667), FoldScores(bac=0.9667), FoldScores(bac=0.8667)],
        1.0,
    )
    assert 0 < same["std_difference"] < 1e-12 and np.isnan(same["p_value"])


def test_a_paired_interval_wider_than_possible_is_clipped_and_said():
    """Three folds (the issue's case: -1.004 to +0.866): a difference of two values in [0, 1]
    lies in [-1, 1], so the interval is clipped there and the line says why."""
    model = [FoldScores(bac=0.5), FoldScores(bac=1.0), FoldScores(bac=0.55)]
    reference = [FoldScores(bac=1.0), FoldScores(bac=0.5), FoldScores(bac=0.95)]
    comparison = compare_folds(model, reference, test_train_ratio=0.5)  # 3-fold CV
    assert comparison["ci95"] == [-1.0, 1.0] and comparison["ci95_clipped"]
    assert "clipped to the possible range: too few folds" in describe_comparison(
        compared(comparison, "xaiguiformer", "logistic_regression")
    )
    # an interval inside the range is left as it is
    narrow = compare_folds(
        [FoldScores(bac=0.8), FoldScores(bac=0.9), FoldScores(bac=0.85)],
        [FoldScores(bac=0.75), FoldScores(bac=0.9), FoldScores(bac=0.8)],
        0.5,
    )
    assert not narrow["ci95_clipped"] and -1 < narrow["ci95"][0] < narrow["ci95"][1] < 1
    assert "clipped" not in describe_comparison(compared(narrow, "a", "b"))


def test_the_selection_scores_are_those_of_the_full_metrics():
    from eegformer_cli.evaluation.metrics import classification_metrics, selection_scores

    rng = np.random.default_rng(0)
    for n_classes, labels in ((2, None), (3, None), (3, [0, 0, 2, 2, 0, 2])):
        y = np.array(labels) if labels else rng.integers(0, n_classes, 40)
        probabilities = rng.dirichlet(np.ones(n_classes), len(y))
        full, chosen = (
            classification_metrics(y, probabilities, None),
            selection_scores(y, probabilities),
        )
        assert (chosen.bac, chosen.paper_bac, chosen.n) == (full.bac, full.paper_bac, full.n)
