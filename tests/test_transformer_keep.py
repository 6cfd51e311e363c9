"""Cost follows value: the transformer path's training stops as soon as it cannot be kept
(``training/transformer_keep.py``): not trained at all where the static stage put no recording
of the fit in the wrong class (or, in a fit of 50 recordings or more, at most 2 % of them),
stopped after ``keep_patience`` epochs that all missed the keep rule, trained to the last epoch with ``keep_patience = 0``, not trained in the final model where
the cross-validation kept it in no fold (``final_follows_folds``); the fold records and the
run's summary say when and why."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from builders import make_connectome_folder, tiny_config

from eegformer_cli.experiment import run_folder
from eegformer_cli.experiment.run import run_training
from eegformer_cli.experiment.verdict import transformer_statement


def _folds(run) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run / "folds").glob("r*_f*.json"))]


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    root = tmp_path_factory.mktemp("keep")
    return {
        "separable": make_connectome_folder(root / "separable", n_participants=24, effect=2.0),
        "null": make_connectome_folder(root / "null", n_participants=24, effect=0.0, seed=3),
    }


def test_a_static_stage_without_errors_leaves_the_transformer_untrained(studies, tmp_path):
    run = tmp_path / "run"
    run_training(studies["separable"], run, "diagnosis", tiny_config(cv=2, epochs=6))
    for fold in _folds(run):
        record = fold["linear_path"]
        assert record["static_errors"] == 0
        assert record["transformer_stopped"] == {
            "epoch": 0,
            "reason": "static_stage_made_no_error",
        }
        assert fold["history"] == [] and record["transformer_kept"] is False
    metrics = run_folder.read_metrics(run)
    assert metrics.linear_path["transformer_stopped"] == {"static_stage_made_no_error": 2}
    assert "not trained in 2 (the static stage put no recording" in transformer_statement(metrics)


@pytest.mark.parametrize("patience", [2, 0])
def test_keep_patience_stops_a_transformer_that_misses_the_keep_rule(studies, tmp_path, patience):
    run = tmp_path / "run"
    config = tiny_config(cv=2, epochs=6, keep_patience=patience)
    run_training(studies["null"], run, "diagnosis", config)
    for fold in _folds(run):
        record = fold["linear_path"]
        assert record["static_errors"] > 0
        history = fold["history"]
        gains = [record["static_val_loss"] - epoch["val_loss_calibrated"] for epoch in history]
        if patience == 0:
            assert len(history) == 6 and record["transformer_stopped"] is None
            continue
        # stopped at the first epoch that ends `patience` epochs missing the rule
        stopped = record["transformer_stopped"]
        assert stopped["reason"] == "keep_patience" and stopped["epoch"] == len(history)
        assert len(history) < 6, gains
        assert not record["transformer_kept"]
    statement = transformer_statement(run_folder.read_metrics(run))
    assert statement.startswith("The transformer path: kept in 0 of 2 folds")
    assert ("stopped early in 2" in statement) == bool(patience)
    # kept in no fold: the final model (``final_follows_folds``, default's) does not train it
    final = json.loads((run / "folds" / "final.json").read_text())
    assert final["history"] == [] and not final["linear_path"]["transformer_kept"]
    assert final["linear_path"]["transformer_stopped"] == {"epoch": 0, "reason": "kept_in_no_fold"}


@pytest.mark.parametrize("follows, n_jobs", [(True, 2), (False, 1)])
def test_the_final_model_follows_the_folds_or_its_own_rule(studies, tmp_path, follows, n_jobs):
    run = tmp_path / "run"
    config = tiny_config(cv=2, epochs=6, keep_patience=0, final_follows_folds=follows)
    run_training(studies["null"], run, "diagnosis", config, n_jobs=n_jobs)
    assert not any(fold["linear_path"]["transformer_kept"] for fold in _folds(run))
    final = json.loads((run / "folds" / "final.json").read_text())
    stopped = final["linear_path"]["transformer_stopped"]
    if follows:  # on workers: queued once the folds are done
        assert final["history"] == [] and stopped == {"epoch": 0, "reason": "kept_in_no_fold"}
    else:
        assert len(final["history"]) == 6 and stopped is None


def test_each_fold_line_says_where_the_transformer_path_stopped():
    from eegformer_cli.experiment.fold_training import transformer_words

    assert transformer_words(7, {"transformer_stopped": None}) == "best epoch 7"
    assert transformer_words(3, None) == "best epoch 3"
    stopped = {"transformer_stopped": {"epoch": 5, "reason": "keep_patience"}}
    assert transformer_words(0, stopped) == "transformer path not kept (stopped after epoch 5)"
    untrained = {"transformer_stopped": {"epoch": 0, "reason": "static_stage_made_no_error"}}
    assert "not trained (the static stage put no recording" in transformer_words(0, untrained)
    little = {"transformer_stopped": {"epoch": 0, "reason": "static_stage_left_little"}}
    assert "not trained (the static stage put at most 2% of" in transformer_words(0, little)
    no_fold = {"transformer_stopped": {"epoch": 0, "reason": "kept_in_no_fold"}}
    assert "not trained (the cross-validation kept it in no fold)" in transformer_words(0, no_fold)
    assert transformer_words(0, {"transformer_path": "off"}) == "transformer path off"


@pytest.mark.parametrize(
    "errors, n, epochs, reason",
    [
        (0, 24, 0, "static_stage_made_no_error"),
        (1, 24, 6, None),
        (2, 100, 0, "static_stage_left_little"),
        (3, 100, 6, None),
        (12, 600, 0, "static_stage_left_little"),
        (13, 600, 6, None),
    ],
)
def test_a_static_stage_that_leaves_little_to_fix_leaves_the_transformer_untrained(
    errors, n, epochs, reason
):
    from eegformer_cli.training.transformer_keep import NOTHING_TO_FIX_SHARE, TransformerKeep

    assert (errors <= int(NOTHING_TO_FIX_SHARE * n)) == (epochs == 0)

    def keep(mode: str) -> TransformerKeep:
        inputs = (torch.zeros(1), np.zeros(1), np.ones(4))
        return TransformerKeep(None, *inputs, mode, 0.0, static_errors=errors, n_recordings=n)

    auto = keep("auto")
    assert auto.planned_epochs(6) == epochs
    assert auto.stopped == (None if reason is None else {"epoch": 0, "reason": reason})
    assert keep("on").planned_epochs(6) == 6
