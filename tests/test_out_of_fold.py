"""What ``explain`` reports is against a named reference (the training mean connectome), and a
run folder's own recordings are explained by the fold models that did not train on them."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from builders import random_connectivity, random_model, run_main

from eegformer_cli.explain.attributions import explain_recording, explain_with_models
from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer
from eegformer_cli.training.model_file import load_model_file


def _rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ","))


def test_attributions_add_up_to_the_logit_change_from_the_reference():
    model = random_model()
    coh, wpli = random_connectivity(4, seed=3)
    ref_coh, ref_wpli = (x.mean(axis=0) for x in random_connectivity(6, seed=4))
    labels = ["a", "b", "c"]
    e = explain_recording(
        model,
        coh,
        wpli,
        40.0,
        1.0,
        labels,
        recording_id="r",
        reference=(ref_coh, ref_wpli),
        n_steps=64,
    )
    target = labels.index(e.target)
    n = len(coh)
    age, sex = torch.full((n,), 40.0), torch.full((n,), 1.0)
    x = (torch.from_numpy(coh), torch.from_numpy(wpli))
    base = (torch.from_numpy(ref_coh).expand_as(x[0]), torch.from_numpy(ref_wpli).expand_as(x[1]))
    with torch.no_grad():  # the refined pass guided as at the input, as the attribution is
        guiding = model.forward_with_details(*x, age, sex).target
        change = (
            model.forward_with_details(*x, age, sex, target=guiding).logits_refined
            - model.forward_with_details(*base, age, sex, target=guiding).logits_refined
        )
    upper = np.triu_indices(coh.shape[-1], 1)
    per_band = e.channel_pairs[:, upper[0], upper[1]].sum(axis=1)
    assert per_band.sum() == pytest.approx(float(change[:, target].mean()), rel=0.01)
    # band importance: those per-band totals, scaled to abs-sum 1 (signs kept)
    np.testing.assert_allclose(e.band_importance, per_band / np.abs(per_band).sum(), atol=1e-12)
    # at the reference itself there is nothing to attribute
    at_reference = explain_recording(
        model,
        np.repeat(ref_coh[None], 2, 0),
        np.repeat(ref_wpli[None], 2, 0),
        40.0,
        1.0,
        labels,
        recording_id="ref",
        reference=(ref_coh, ref_wpli),
        n_steps=8,
    )
    assert np.abs(at_reference.channel_pairs).max() < 1e-6


def test_several_models_without_transformer_layers_explain_a_recording():
    # no layers, no attention: each model's attention diagnostics are None, and so is the mean
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "default",
        n_channels=4,
        band_names=["delta", "theta"],
        band_edges_hz=[(1, 4), (4, 8)],
        n_classes=2,
        d_model=16,
        n_heads=2,
        n_layers=0,
        n_gnn_layers=1,
        xai_refinement=False,
    )
    models = [(XAIguiFormer(config).eval(), None) for _ in range(2)]
    rng = np.random.default_rng(0)
    coh = rng.uniform(0, 1, (3, 2, 4, 4))
    coh = ((coh + coh.transpose(0, 1, 3, 2)) / 2 * (1 - np.eye(4))).astype(np.float32)
    e = explain_with_models(
        models, coh, coh.copy(), 40.0, 1.0, ["a", "b"], recording_id="r", n_steps=4
    )
    assert e.attention_diagnostics is None
    assert e.probabilities.shape == (2,) and np.isfinite(e.channel_pairs).all()


@pytest.fixture(scope="module")
def cv_run(sample_run, tmp_path_factory):
    """A tiny 3-fold x 2-repeat CV run on the sample run's 12 preprocessed recordings."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.training.config import resolve_config

    prep = sample_run["prep"]
    run_dir = tmp_path_factory.mktemp("oof") / "run"
    config = resolve_config(
        "default",
        None,
        {
            "epochs": 2,
            "batch_size": 8,
            "cv": 3,
            "repeats": 2,
            "val_fraction": 0.25,
            "device": "cpu",
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1},
        },
    )
    run_training(prep, run_dir, "diagnosis", config)
    return prep, run_dir


@pytest.mark.slow
def test_train_keeps_each_fold_model_with_its_reference(cv_run):
    _, run_dir = cv_run
    names = sorted(p.stem for p in (run_dir / "folds").glob("*.pt"))
    assert names == [f"r{r}_f{f}" for r in range(2) for f in range(3)]
    fold = load_model_file(run_dir / "folds" / "r0_f0.pt")
    assert fold.trained_on == "fold" and fold.baseline["coh"].shape == (
        len(fold.bands),
        len(fold.channels),
        len(fold.channels),
    )
    assert "mean connectome" in fold.baseline["description"]
    # the fold's test participants are not in what the fold model was trained on
    oof = [
        r
        for r in _rows(run_dir / "oof_predictions.tsv")
        if r["model"] == "xaiguiformer" and (r["repeat"], r["fold"]) == ("0", "0")
    ]
    assert oof and not {r["participant_id"] for r in oof} & set(fold.training_data["participants"])


@pytest.mark.slow
def test_explain_run_dir_gives_the_out_of_fold_probabilities(cv_run, tmp_path, capsys):
    prep, run_dir = cv_run
    code, output = run_main(
        capsys, "explain", run_dir, prep, "--out", tmp_path / "oof", "--n-steps", "4"
    )
    assert code == 0, output
    oof = [r for r in _rows(run_dir / "oof_predictions.tsv") if r["model"] == "xaiguiformer"]
    rows = _rows(tmp_path / "oof" / "recordings.csv")
    assert len(rows) == 12
    classes = [c[len("prob_") :] for c in rows[0] if c.startswith("prob_")]
    for row in rows:
        mine = [r for r in oof if r["recording_id"] == row["recording_id"]]
        assert len(mine) == 2  # one per repeat
        for name in classes:
            expected = np.mean([float(r[f"prob_{name}"]) for r in mine])
            assert float(row[f"prob_{name}"]) == pytest.approx(expected, abs=1e-6)
        assert row["explained_by"] == "out_of_fold: " + " ".join(
            f"r{r['repeat']}_f{r['fold']}" for r in mine
        )
        assert "in_training_data" not in row["warnings"]
    # the same recordings given the model file: the final model, trained on all of them
    code, output = run_main(
        capsys, "explain", run_dir / "model.pt", prep, "--out", tmp_path / "final", "--n-steps", "4"
    )
    assert code == 0, output
    final = _rows(tmp_path / "final" / "recordings.csv")
    assert {r["explained_by"] for r in final} == {"model"}
    assert all("in_training_data" in r["warnings"] for r in final)


@pytest.mark.slow
def test_a_run_without_fold_models_is_explained_by_its_final_model(cv_run, tmp_path, capsys):
    import shutil

    prep, run_dir = cv_run
    old = tmp_path / "old-run"  # as a run folder of an earlier version leaves it
    shutil.copytree(run_dir, old)
    for path in (old / "folds").glob("*.pt"):
        path.unlink()
    code, output = run_main(capsys, "explain", old, prep, "--out", tmp_path / "e", "--n-steps", "2")
    assert code == 0, output
    assert "keeps no model of fold(s) r0_f0, r0_f1, r0_f2, r1_f0, r1_f1 ..." in output
    rows = _rows(tmp_path / "e" / "recordings.csv")
    assert {r["explained_by"] for r in rows} == {"final_model"}
    assert all("in_training_data" in r["warnings"] for r in rows)
