"""The linear path (model/linear_path.py, training/linear_fit.py, training/residual.py): its
features in the screen's and the reference's order, its logit weights equal to the fitted
pipeline, the built-in reference when it is that reference's L2 fit, the linear fit alone when
the residual is off, the residual off where the effect is linear, the cross-fitted offsets of
training, and the model file's round trip."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from builders import write_connectome_folder
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from eegformer_cli.experiment.run import run_training
from eegformer_cli.model.linear_path import linear_features
from eegformer_cli.training.config import resolve_config
from eegformer_cli.training.dataset import ConnectomeDataset, load_training_data
from eegformer_cli.training.fit import build_model
from eegformer_cli.training.interaction_screen import entry_means
from eegformer_cli.training.linear_fit import _logit_weights, fit_linear_path
from eegformer_cli.training.model_file import load_model_file
from eegformer_cli.training.residual import fit_linear
from eegformer_cli.training.standardise import connectivity_stats

#: A small run of the default preset (its linear path on), screens off unless a test turns
#: them on.
SETTINGS = {
    "epochs": 12,
    "batch_size": 8,
    "lr": 3e-3,
    "warmup_epochs": 0.0,
    "cv": 5,
    "val_fraction": 0.3,
    "device": "cpu",
    "interactions": False,
    "age_interactions": False,
}


@pytest.fixture(scope="module")
def linear_study(tmp_path_factory):
    """40 participants whose class raises theta coherence a little everywhere: a linear effect
    only, not separable by any one entry."""
    return write_connectome_folder(
        tmp_path_factory.mktemp("linear") / "prep",
        n_participants=40,
        n_segments=3,
        seed=4,
        effect=0.06,
        balanced_sex=True,
    )


def oof(run_dir) -> dict[str, dict[str, np.ndarray]]:
    """oof_predictions.tsv as model -> recording id -> probabilities."""
    with open(run_dir / "oof_predictions.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    columns = [c for c in rows[0] if c.startswith("prob_")]
    out: dict[str, dict[str, np.ndarray]] = {}
    for row in rows:
        out.setdefault(row["model"], {})[row["recording_id"]] = np.array(
            [float(row[c]) for c in columns]
        )
    return out


def test_features_are_the_entries_in_the_screen_and_reference_order():
    rng = np.random.default_rng(0)
    coh, wpli = rng.normal(size=(2, 3, 4, 5, 5)).astype(np.float32)
    identity = {"coh_mean": 0.0, "coh_std": 1.0, "wpli_mean": 0.0, "wpli_std": 1.0}
    features = linear_features(torch.from_numpy(coh), torch.from_numpy(wpli), None)
    expected = entry_means(coh, wpli, identity)  # the mean over the 3 segments
    np.testing.assert_allclose(features.double().mean(0).numpy(), expected, rtol=1e-6)
    products = torch.arange(6.0).reshape(3, 2)
    with_products = linear_features(torch.from_numpy(coh), torch.from_numpy(wpli), products)
    assert with_products.shape == (3, 2 * 4 * 10 + 2)
    assert torch.equal(with_products[:, -2:], products)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_logit_weights_give_the_pipelines_decisions(n_classes):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 7)) * rng.uniform(0.5, 3, 7) + rng.normal(size=7)
    y = np.arange(60) % n_classes
    x[:, 0] += y
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(x, y)
    weight, bias = _logit_weights(pipeline, n_classes)
    logits = x @ weight.T + bias
    if n_classes == 2:  # (-z/2, +z/2)
        np.testing.assert_allclose(logits[:, 1] - logits[:, 0], pipeline.decision_function(x))
        np.testing.assert_allclose(logits.sum(axis=1), 0, atol=1e-9)
    else:
        np.testing.assert_allclose(logits, pipeline.decision_function(x), rtol=1e-9)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, pipeline.predict_proba(x), atol=1e-9)


def test_cross_fitted_logits_come_from_the_model_that_did_not_see_the_recording():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 6))
    y = np.arange(40) % 2
    x[:, 1] += 1.5 * y
    groups = np.repeat(np.arange(20), 2)  # two recordings per participant
    fit = fit_linear_path(x, y, groups, 2, seed=3, penalty="auto")
    assert fit.penalty in ("l1", "l2")
    for k in np.unique(fit.inner_fold):
        held_out = fit.inner_fold == k
        assert len(set(groups[held_out]) & set(groups[~held_out])) == 0  # participant-wise
        expected = x[held_out] @ fit.inner_weight[k].T + fit.inner_bias[k]
        np.testing.assert_allclose(fit.cross_fitted[held_out], expected)
    assert not np.allclose(fit.cross_fitted, x @ fit.weight.T + fit.bias)  # not the refit's


def test_training_offsets_are_the_cross_fitted_logits(linear_study):
    """A training item of a one-segment recording gets exactly its recording's cross-fitted
    logits, through the model's own features (standardised inside the model)."""
    data = load_training_data(linear_study, "diagnosis")
    recordings = data.recordings[:24]
    config = resolve_config("default", None, SETTINGS)
    train_set = ConnectomeDataset(recordings[:16], data.label_names, data.channels, data.bands)
    val_set = ConnectomeDataset(recordings[16:], data.label_names, data.channels, data.bands)
    model = build_model(data, config, np.array([r.age for r in recordings[:16]]))
    model.set_stats(connectivity_stats(train_set.recording_arrays(r) for r in range(16)))
    residual = fit_linear(model, train_set, val_set, config, seed=5)
    coh, wpli = (torch.from_numpy(a.mean(0, keepdims=True)) for a in train_set.recording_arrays(3))
    age, sex = (torch.tensor([float(getattr(recordings[3], k))]) for k in ("age", "sex"))
    offsets = residual.batch_offsets(model, coh, wpli, age, sex, torch.tensor([3]))
    np.testing.assert_allclose(offsets[0].numpy(), residual.fit.cross_fitted[3], rtol=1e-4)
    # the model itself uses the refit: its untrained transformer adds nothing (head at zero)
    with torch.no_grad():
        _, refined = model(coh, wpli, age, sex)
    refit = model.linear_features(coh, wpli, age, sex).double().numpy()
    expected = refit @ residual.fit.weight.T + residual.fit.bias
    np.testing.assert_allclose(refined[0].numpy(), expected[0], rtol=1e-4, atol=1e-5)


def test_the_l2_path_with_nothing_kept_is_the_built_in_reference(linear_study, tmp_path):
    config = resolve_config(
        "default", None, {**SETTINGS, "cv": 2, "linear_penalty": "l2", "residual": "off"}
    )
    metrics = run_training(linear_study, tmp_path / "run", "diagnosis", config)
    predictions = oof(tmp_path / "run")
    reference = predictions["logistic_regression"]
    assert predictions["linear_path"].keys() == reference.keys()
    for recording, probabilities in predictions["linear_path"].items():
        np.testing.assert_allclose(probabilities, reference[recording], atol=1e-6)
        # residual off: the model is its linear path
        np.testing.assert_allclose(predictions["xaiguiformer"][recording], probabilities)
    assert metrics.models["linear_path"].mean.bac == metrics.models["logistic_regression"].mean.bac
    folds = [json.loads(p.read_text()) for p in (tmp_path / "run" / "folds").glob("r*.json")]
    assert all(f["linear_path"]["residual"] is False for f in folds)
    assert all(f["history"] == [] for f in folds)  # the transformer was not trained


@pytest.fixture(scope="module")
def linear_run(linear_study, tmp_path_factory):
    """The default preset (its transformer trained on the residual) on the linear study."""
    run_dir = tmp_path_factory.mktemp("linear-run") / "run"
    run_training(linear_study, run_dir, "diagnosis", resolve_config("default", None, SETTINGS))
    return run_dir


@pytest.mark.slow
def test_a_linear_effect_keeps_no_residual_and_the_model_file_round_trips(linear_study, linear_run):
    folds = [json.loads(p.read_text()) for p in (linear_run / "folds").glob("r*.json")]
    assert len(folds) == 5
    records = [f["linear_path"] for f in folds]
    assert all(r["residual_val_loss"] is not None for r in records)  # it was trained
    assert sum(r["residual"] for r in records) <= 1, records
    metrics = json.loads((linear_run / "metrics.json").read_text())
    assert metrics["linear_path"]["residual_kept"] == sum(r["residual"] for r in records)
    raw = torch.load(linear_run / "model.pt", weights_only=True)
    assert {"model.linear.weight", "model.linear.bias"} <= set(raw["state_dict"])
    bundle = load_model_file(linear_run / "model.pt")
    assert bundle.model.config.linear_path
    assert torch.count_nonzero(bundle.model.linear.weight) > 0
    coh, wpli, age, sex = recording_tensors(linear_study, 0)
    with torch.no_grad():
        linear = bundle.model.linear(bundle.model.linear_features(coh, wpli, age, sex))
        _, refined = bundle.model(coh, wpli, age, sex)
    if not bundle.model.config.residual_kept:
        np.testing.assert_allclose(refined.numpy(), linear.numpy(), rtol=1e-6)


def recording_tensors(prep, index: int) -> tuple[torch.Tensor, ...]:
    """(coh, wpli, age, sex) of recording ``index`` of ``prep``: (S, T, C, C) and (S,)."""
    data = load_training_data(prep, "diagnosis")
    dataset = ConnectomeDataset(data.recordings, data.label_names, data.channels, data.bands)
    coh, wpli = (torch.from_numpy(a) for a in dataset.recording_arrays(index))
    rec = data.recordings[index]
    return coh, wpli, *(torch.full((len(coh),), float(getattr(rec, k))) for k in ("age", "sex"))


@pytest.mark.slow
@pytest.mark.parametrize("residual_kept", [False, True])
def test_the_paths_share_the_logit_and_the_attributions_add_up(
    linear_study, linear_run, residual_kept
):
    """explain splits the explained logit's change into the linear path's exact part and the
    transformer's; the pair and interaction attributions of the whole model add up to it."""
    from eegformer_cli.explain.attributions import explain_recording

    bundle = load_model_file(linear_run / "model.pt")
    bundle.model.config.residual_kept = residual_kept
    coh, wpli, age, sex = recording_tensors(linear_study, 3)
    explanation = explain_recording(
        bundle.model,
        coh.numpy(),
        wpli.numpy(),
        float(age[0]),
        float(sex[0]),
        bundle.label_names,
        recording_id="r",
        contrast=bundle.label_names,
        reference=(bundle.reference["coh"], bundle.reference["wpli"]),
    )
    for output in ("target", "contrast"):
        shares = explanation.paths[output]
        assert shares["linear"] + shares["transformer"] == pytest.approx(shares["total"])
        assert shares["linear"] != 0
        if not residual_kept:
            assert shares["transformer"] == pytest.approx(0, abs=1e-5)
    upper = np.triu_indices(coh.shape[-1], 1)
    summed = explanation.channel_pairs[:, upper[0], upper[1]].sum()
    total = explanation.paths["target"]["total"]
    assert summed == pytest.approx(total, rel=0.01, abs=1e-4)  # completeness
