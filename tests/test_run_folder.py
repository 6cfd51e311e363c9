"""The run folder's one owner (experiment/run_folder.py, with the typed metrics.json of
evaluation/run_metrics.py): a run folder written by an earlier version (tests/data) still loads,
writes its metrics.json back byte for byte, reports and merges; metrics.json of older shapes
loads; no other module opens the run's tables and JSON."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from builders import (
    EARLIER_RUN,
    PINNED_RUN,
    STACKED_RUN,
    exit_code,
    make_connectome_folder,
    run_main,
)
from sources import PACKAGE, module_name
from tolerance import assert_same_json

from eegformer_cli.evaluation.run_metrics import MODEL_NAME, RunMetrics
from eegformer_cli.experiment import run_folder
from eegformer_cli.experiment.verdict import headline, verdict_lines
from eegformer_cli.training.config import TrainConfig


def test_an_earlier_metrics_json_is_written_back_byte_for_byte(tmp_path):
    metrics = run_folder.read_metrics(EARLIER_RUN)
    assert metrics.complete is True and metrics.n_folds == 2
    assert metrics.transformer.mean.bac == pytest.approx(0.8)
    assert [c.reference for c in metrics.all_comparisons] == [
        "logistic_regression",
        "tangent_space",
    ]
    assert metrics.shortcut_audit.variables[0].auroc.n_folds == 2
    assert metrics.permutation_test.models[MODEL_NAME].p_value == pytest.approx(0.25)
    assert metrics.calibration.recalibration.after.bins[0].n >= 1
    run_folder.write_metrics(tmp_path, metrics)
    written = (tmp_path / "metrics.json").read_bytes()
    assert written == (EARLIER_RUN / "metrics.json").read_bytes()


def test_metrics_of_older_shapes_load_and_give_a_verdict():
    """An earlier version's metrics.json: one ``comparison`` and no ``comparisons``, no
    ``complete``, no score, calibration, audit or tangent space; unknown keys are kept."""
    data = json.loads((EARLIER_RUN / "metrics.json").read_text())
    for key in ("comparisons", "complete", "score", "calibration", "prediction_sets"):
        del data[key]
    for key in ("shortcut_audit", "permutation_test", "attention"):
        del data[key]
    del data["models"]["tangent_space"]
    data["comparison"].pop("ci95_clipped")
    data["a_later_key"] = {"kept": True}
    metrics = RunMetrics.from_dict(data)
    assert metrics.complete is None and metrics.score is None and metrics.attention is None
    assert [c.reference for c in metrics.all_comparisons] == ["logistic_regression"]
    assert list(metrics.models) == [MODEL_NAME, "logistic_regression"]
    # nothing lost, nothing added but the attention this version always writes (null)
    assert metrics.to_dict() == {**data, "attention": None}
    topics = [topic for topic, _, _ in verdict_lines(metrics)]
    assert topics == ["score", "reference", "shortcuts", "permutation test", "calibration"]
    assert headline(metrics).startswith("XAIguiFormer: ")


def test_a_non_finite_figure_is_written_as_null(tmp_path):
    data = json.loads((EARLIER_RUN / "metrics.json").read_text())
    data["models"][MODEL_NAME]["std"]["bac"] = float("nan")
    metrics = RunMetrics.from_dict(data)
    assert metrics.transformer.std.bac is None
    run_folder.write_metrics(tmp_path, metrics)
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["models"][MODEL_NAME]["std"]["bac"] is None


@pytest.fixture
def earlier_run(tmp_path) -> Path:
    """A copy of the earlier run folder whose config.json names a fresh copy of its data."""
    prep = make_connectome_folder(tmp_path / "prep", n_participants=20)
    run = tmp_path / "run"
    shutil.copytree(EARLIER_RUN, run)
    text = (run / "config.json").read_text().replace('"/data/prep"', json.dumps(str(prep)))
    (run / "config.json").write_text(text)
    return run


def test_a_run_of_the_model_before_its_stages_merges_and_resumes(tmp_path, capsys):
    """The run folder of the last version before the stages (format-1 fold files, the keep
    decision's earlier keys): ``--merge`` recomputes its metrics under today's names, and a
    rerun of the same request resumes it (every fold done: nothing retrained)."""
    prep = make_connectome_folder(tmp_path / "prep", n_participants=20, effect=0.05)
    run = tmp_path / "run"
    shutil.copytree(STACKED_RUN, run)
    text = (run / "config.json").read_text().replace('"/data/prep"', json.dumps(str(prep)))
    (run / "config.json").write_text(text)
    before = json.loads((run / "metrics.json").read_text())
    code, printed = run_main(capsys, "train", "--merge", run)
    assert code == 0, printed
    after = json.loads((run / "metrics.json").read_text())
    assert after["linear_path"]["transformer_kept"] == before["linear_path"]["residual_kept"]
    assert "residual_kept" not in after["linear_path"]
    for name in ("xaiguiformer", "linear_path"):
        assert after["models"][name]["mean"]["bac"] == before["models"][name]["mean"]["bac"]
    folds = {p.name: p.read_bytes() for p in (run / "folds").iterdir()}
    from eegformer_cli.experiment.run import run_training

    _, _, requested, _ = run_folder.request_in_config(run)
    stored = TrainConfig.from_dict(requested)
    assert stored.keep_patience == 0  # its transformer trained every epoch: so it resumes
    run_training(prep, run, "diagnosis", stored, permutations=3)
    assert {p.name: p.read_bytes() for p in (run / "folds").iterdir()} == folds


def test_an_earlier_run_folder_reports_and_merges(earlier_run, tmp_path, capsys):
    report = tmp_path / "report.html"
    assert exit_code("report", earlier_run, "--out", report) == 0
    page = report.read_text(encoding="utf-8")
    assert "permutation test" in page and "Shortcut audit" in page
    assert "0.800" in page  # the transformer's mean BAC in the metrics table
    before = json.loads((earlier_run / "metrics.json").read_text())
    for fold in (earlier_run / "folds").glob("r*_f*.json"):  # as an earlier version wrote them
        record = json.loads(fold.read_text())
        del record["interaction_screen"]
        fold.write_text(json.dumps(record))
    code, printed = run_main(capsys, "train", "--merge", earlier_run)
    assert code == 0, printed
    assert "sample size: 20 participants, 2 test fold(s): the balanced accuracy's" in printed
    assert "split seeds: stable over split seeds at this N" in printed
    after = json.loads((earlier_run / "metrics.json").read_text())
    # what this version adds to an earlier run's metrics: the answer of the above-chance rule
    # (no permutation test unless asked: the interval's)
    assert after.pop("above_chance")["follows"] == "interval"
    # ... which model carries the score (no linear path: XAIguiFormer whole, in every fold)
    assert after.pop("scored_by") == {
        "model": "xaiguiformer",
        "transformer_folds": 2,
        "n_folds": 2,
        "statement": "XAIguiFormer",
    }
    # ... and the interaction screens (the folds' records as an earlier version wrote them)
    screens = after.pop("interaction_screens")
    assert [fold["recorded"] for fold in screens["per_fold"]] == [False, False]
    # ... and what its number of participants resolves (it costs nothing): 20 participants
    # in 2 folds; XAIguiFormer is below the logistic regression and level with the
    # tangent-space reference, so no N would show it better than either
    sample = after.pop("sample_size")
    assert (sample["n_participants"], sample["n_folds"], sample["test_train_ratio"]) == (20, 2, 1)
    assert sample["participants_needed"] == {"logistic_regression": None, "tangent_space": None}
    assert sample["half_width"] > 1 and "no number of participants" in sample["statement"]
    # the merge recomputes every summary from the fold records, and adds no permutation test
    # unless asked: the same figures
    for entry in (before, after):
        entry.pop("permutation_test", None)
    # the same keys in the same order; the numbers up to the rounding of another CPU
    assert_same_json(after, before)
    assert_same_json(after, {**before, "calibration": _in_the_12th_digit(before["calibration"])})
    with pytest.raises(AssertionError, match="^calibration: keys"):
        assert_same_json(
            after, {**before, "calibration": dict(reversed(after["calibration"].items()))}
        )
    assert run_folder.read_oof_predictions(earlier_run)[0]["model"] == MODEL_NAME


def _in_the_12th_digit(value):
    """``value`` (a JSON tree) with every float moved by one unit of its 12th significant
    digit, as another CPU's rounding might move a recomputed figure."""
    if isinstance(value, dict):
        return {key: _in_the_12th_digit(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_in_the_12th_digit(item) for item in value]
    if isinstance(value, float) and value != 0 and math.isfinite(value):
        return value + 10 ** (math.floor(math.log10(abs(value))) - 11)
    return value


def test_recomputed_figures_compare_up_to_rounding_and_their_keys_exactly():
    """The comparison the merge test makes: the earlier run's metrics.json with its calibration
    moved in the 12th digit is the same document; keys in another order, a figure moved in its
    6th digit, or a count changed are not."""
    metrics = json.loads((EARLIER_RUN / "metrics.json").read_text())
    perturbed = {**metrics, "calibration": _in_the_12th_digit(metrics["calibration"])}
    slope = metrics["calibration"]["models"][MODEL_NAME]["slope"]
    assert perturbed["calibration"]["models"][MODEL_NAME]["slope"] != slope
    assert_same_json(perturbed, metrics)
    reordered = {**metrics, "calibration": dict(reversed(metrics["calibration"].items()))}
    with pytest.raises(AssertionError, match=r"^calibration: keys \['recalibration', 'm"):
        assert_same_json(reordered, metrics)
    moved = json.loads(json.dumps(metrics))
    moved["calibration"]["models"][MODEL_NAME]["slope"] = slope * (1 + 1e-6)
    with pytest.raises(AssertionError, match=rf"^calibration\.models\.{MODEL_NAME}\.slope: "):
        assert_same_json(moved, metrics)
    counted = json.loads(json.dumps(metrics))
    counted["calibration"]["models"][MODEL_NAME]["bins"][0]["n"] += 1
    with pytest.raises(AssertionError, match=r"bins\[0\]\.n: 2 != 1"):
        assert_same_json(counted, metrics)
    with pytest.raises(AssertionError, match="int 1 != float 1.0"):
        assert_same_json({"n": 1}, {"n": 1.0})
    assert_same_json([float("nan"), None, "a", True], [float("nan"), None, "a", True])


def test_an_earlier_run_folder_resumes_without_the_settings_it_lacks():
    """Its config.json predates some settings: they are read at the values that give that
    version's run (grouping of the interaction screen's proxies off), so the run's identity is
    this version's config of the same request and a rerun or merge resumes it."""
    stored = json.loads((EARLIER_RUN / "config.json").read_text())["identity"]["train_config"]
    assert "interaction_proxies" not in stored
    identity = run_folder._stored_identity(EARLIER_RUN / "config.json")
    _, _, requested, _ = run_folder.request_in_config(EARLIER_RUN)
    assert identity["train_config"] == TrainConfig.from_dict(requested).to_dict()
    assert identity["train_config"]["interaction_proxies"] is False


def test_the_keep_decisions_earlier_names_read_under_todays():
    """A run folder written before the renames (``residual`` settings and record keys): its
    settings, fold records and metrics.json read under today's names, and a resume of it is
    the same run."""
    stored = json.loads((PINNED_RUN / "config.json").read_text())["identity"]["train_config"]
    assert stored["residual"] == "on" and "transformer_path" not in stored
    identity = run_folder._stored_identity(PINNED_RUN / "config.json")
    assert identity["train_config"]["transformer_path"] == "on"
    assert "residual" not in identity["train_config"]
    _, _, requested, _ = run_folder.request_in_config(PINNED_RUN)
    assert identity["train_config"] == TrainConfig.from_dict(requested).to_dict()
    raw = json.loads((PINNED_RUN / "folds" / "r0_f0.json").read_text())["linear_path"]
    record = run_folder.read_fold_record(PINNED_RUN, "r0_f0").linear_path
    assert record["transformer_kept"] is raw["residual"] is True
    assert record["transformer_val_loss"] == raw["residual_val_loss"]
    assert record["val_losses"]["static"] == raw["val_losses"]["linear"]
    assert not {"residual", "residual_mode", "linear_val_loss"} & set(record)
    metrics = run_folder.read_metrics(PINNED_RUN)
    assert metrics.linear_path["transformer_kept"] == 2
    assert "residual_kept" not in metrics.linear_path


def test_a_toml_file_may_use_the_earlier_names_of_settings(tmp_path):
    from eegformer_cli.errors import UsageError
    from eegformer_cli.training.config import resolve_config

    old = tmp_path / "old.toml"
    old.write_text('residual = "off"\nresidual_margin = 0.02\n')
    config = resolve_config("default", old)
    assert (config.transformer_path, config.keep_margin) == ("off", 0.02)
    both = tmp_path / "both.toml"
    both.write_text('residual = "off"\ntransformer_path = "on"\n')
    with pytest.raises(UsageError, match="both 'residual' and 'transformer_path'"):
        resolve_config("default", both)


def test_only_the_run_folders_owner_opens_its_files():
    """No module but run_folder.py names a run file in a path (``/ "metrics.json"``, ``/
    "folds"``) or reads a TSV (csv with a tab); model files keep their own owner
    (training/model_file.py)."""
    patterns = (
        '/ "metrics.json"',
        '/ "oof_predictions.tsv"',
        '/ "config.json"',
        '/ "history.jsonl"',
        '/ "splits.json"',
        '/ "folds"',
        '"final.json"',
        'delimiter="\\t"',
    )
    opening = {
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if any(pattern in p.read_text(encoding="utf-8") for pattern in patterns)
    }
    # the demo's last lines and predict's in-training-data warning name a file, opening none;
    # the preprocess output's owner reads its own table (manifest.tsv), the BIDS reader a
    # dataset's channels.tsv
    others = {
        "eegformer_cli.cli.demo",
        "eegformer_cli.provenance",
        "eegformer_cli.preprocess.output",
        "eegformer_cli.recordings.bids",
    }
    assert opening - others == {"eegformer_cli.experiment.run_folder"}


def test_metrics_are_read_by_attribute_outside_their_owner():
    """No ``metrics["..."]`` or ``metrics.get(`` outside the owner's (de)serialisation."""
    owners = {"eegformer_cli.evaluation.run_metrics", "eegformer_cli.experiment.run_folder"}
    reading = {
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if any(
            pattern in p.read_text(encoding="utf-8")
            for pattern in ('metrics["', "metrics['", "metrics.get(")
        )
    }
    assert reading <= owners
