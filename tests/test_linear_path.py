"""The linear path (model/linear_path.py, training/linear_fit.py, training/transformer_keep.py): its
features in the screen's and the reference's order, its logit weights equal to the fitted
pipeline, the built-in reference when it is that reference's L2 fit, the linear fit alone when
the residual is off, the residual off where the effect is linear, the cross-fitted offsets of
training, and the model file's round trip; and a logit its kept interactions' products alone
carry (every entry's weight 0, the residual off): explain names no top band and no pair of
value 0, the report outlines no band, draws no head of zeros and says what carries it."""

from __future__ import annotations

import csv
import html
import json
import shutil

import numpy as np
import pytest
import torch
from builders import exit_code, write_connectome_folder
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
from eegformer_cli.training.standardise import connectivity_stats
from eegformer_cli.training.transformer_keep import fit_static

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
    residual = fit_static(model, train_set, val_set, config, seed=5)
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
        "default", None, {**SETTINGS, "cv": 2, "linear_penalty": "l2", "transformer_path": "off"}
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
    assert all(f["linear_path"]["transformer_kept"] is False for f in folds)
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
    for r in records:  # trained (until it could not be kept), or not at all: no static error
        stopped = r["transformer_stopped"]
        assert stopped is not None or r["transformer_val_loss"] is not None
        assert (r["static_errors"] == 0) == (stopped is not None and stopped["epoch"] == 0)
    assert sum(r["transformer_kept"] for r in records) <= 1, records
    metrics = json.loads((linear_run / "metrics.json").read_text())
    assert metrics["linear_path"]["transformer_kept"] == sum(r["transformer_kept"] for r in records)
    raw = torch.load(linear_run / "model.pt", weights_only=True)
    assert {"static.linear.weight", "static.linear.bias"} <= set(raw["state_dict"])
    bundle = load_model_file(linear_run / "model.pt")
    assert bundle.model.config.linear_path
    assert torch.count_nonzero(bundle.model.static.linear.weight) > 0
    coh, wpli, age, sex = recording_tensors(linear_study, 0)
    with torch.no_grad():
        linear = bundle.model.static.linear(bundle.model.linear_features(coh, wpli, age, sex))
        _, refined = bundle.model(coh, wpli, age, sex)
    if not bundle.model.kept:
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
    bundle.model.keep_transformer(residual_kept)
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
        reference=(bundle.baseline["coh"], bundle.baseline["wpli"]),
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


# ------------------------------------------------------------------------------------------
# the linear path on recording means: the products of a recording's means, one logit per
# recording given to every segment; model files of earlier versions per segment


@pytest.fixture(scope="module")
def means_model(linear_study):
    """A default model with one entry x entry and one entry x age interaction, its linear path
    fitted (L2: every weight non-zero) on 24 recordings of 3 segments, its transformer
    untrained (head at zero: the model is its linear path)."""
    from eegformer_cli.model.interactions import Entry, Interaction

    data = load_training_data(linear_study, "diagnosis")
    recordings = data.recordings[:24]
    config = resolve_config("default", None, {**SETTINGS, "linear_penalty": "l2"})
    kept = [
        Interaction(
            Entry("coh", data.bands[0], (data.channels[0], data.channels[1])),
            Entry("wpli", data.bands[1], (data.channels[1], data.channels[2])),
            0.5,
            0.1,
        ),
        Interaction(
            Entry("coh", data.bands[1], (data.channels[0], data.channels[2])), "age", 0.5, 0.1
        ),
    ]
    ages = np.array([r.age for r in recordings[:16]])
    model = build_model(data, config, ages, kept)
    train_set = ConnectomeDataset(recordings[:16], data.label_names, data.channels, data.bands)
    val_set = ConnectomeDataset(recordings[16:], data.label_names, data.channels, data.bands)
    model.set_stats(connectivity_stats(train_set.recording_arrays(r) for r in range(16)))
    residual = fit_static(model, train_set, val_set, config, seed=5)
    return model.eval(), residual, train_set, ages


def products_of_means(model, coh: np.ndarray, wpli: np.ndarray, age: float) -> np.ndarray:
    """float64 (n_features,): the linear features of a recording computed here from their
    definition: the standardised mean entries (upper triangles, coherence first, band-major),
    then the products of those means and mean entry x z-scored age."""
    stats = {
        name: getattr(model.standardiser, name).double().numpy() for name in ("coh_mean", "coh_std")
    }
    stats |= {
        name: getattr(model.standardiser, name).double().numpy()
        for name in ("wpli_mean", "wpli_std")
    }
    z = {
        m: (x.astype(np.float64).mean(0) - stats[f"{m}_mean"]) / stats[f"{m}_std"]
        for m, x in (("coh", coh), ("wpli", wpli))
    }
    upper = np.triu_indices(coh.shape[-1], 1)
    entries = [z[m][:, upper[0], upper[1]].ravel() for m in ("coh", "wpli")]
    config = model.config
    age_z = (age - float(model.transformer.age_mean)) / float(model.transformer.age_std)

    def value(side) -> float:
        if side == "age":
            return age_z
        measure, band, first, second = side
        i, j = config.channel_names.index(first), config.channel_names.index(second)
        return z[measure][config.band_names.index(band), i, j]

    products = [value(item["a"]) * value(item["b"]) for item in config.interactions]
    return np.concatenate([*entries, products])


def test_the_linear_path_alone_is_the_linear_fit_on_products_of_means(means_model):
    from eegformer_cli.model.predict import recording_logits
    from eegformer_cli.training.transformer_keep import mean_linear_features

    model, residual, train_set, _ = means_model
    assert model.config.linear_on_means
    fit = residual.fit
    features = mean_linear_features(model, train_set)
    recordings = []
    for r, rec in enumerate(train_set.recordings):
        coh, wpli = train_set.recording_arrays(r)
        assert len(coh) == 3
        expected = products_of_means(model, coh, wpli, rec.age)
        np.testing.assert_allclose(features[r], expected, rtol=1e-4, atol=1e-5)
        recordings.append((coh, wpli, rec.age, rec.sex))
    # the mean of per-segment products is another thing (what earlier versions read)
    coh, wpli = train_set.recording_arrays(0)
    with torch.no_grad():
        per_segment = model.linear_features(
            *(torch.from_numpy(a) for a in (coh, wpli)), *(torch.full((3,), 40.0),) * 2
        )
    assert abs(per_segment[:, -2].double().mean() - features[0, -2]) > 1e-3
    # predictions: the refit's logits of those features, whatever the batches
    logits = recording_logits(model, recordings, torch.device("cpu"))
    np.testing.assert_allclose(logits, features @ fit.weight.T + fit.bias, rtol=1e-4, atol=1e-5)
    with model.static_alone():
        np.testing.assert_allclose(
            recording_logits(model, recordings, torch.device("cpu")), logits, atol=1e-6
        )
    # the training offsets: the cross-fitted logits of each recording's means
    item = train_set.recording_arrays(5)
    offsets = residual.batch_offsets(
        model,
        *(torch.from_numpy(a[:1]) for a in item),
        torch.tensor([0.0]),
        torch.tensor([0.0]),
        torch.tensor([5]),
    )
    np.testing.assert_allclose(offsets[0].numpy(), fit.cross_fitted[5], rtol=1e-4, atol=1e-5)


def test_a_recording_across_batches_gets_its_offset_on_every_segment(means_model):
    from eegformer_cli.model.linear_path import recording_linear_logits
    from eegformer_cli.model.predict import segment_batches, static_offsets

    model, _, train_set, _ = means_model
    recordings = [
        (*train_set.recording_arrays(r), rec.age, rec.sex)
        for r, rec in enumerate(train_set.recordings[:4])
    ]
    counts: list[int] = []
    batches = list(segment_batches(recordings, counts, size=2, offsets=static_offsets(model)))
    offsets = np.concatenate([batch[4] for batch in batches])
    expected = np.concatenate(
        [np.repeat(recording_linear_logits(model, *rec).numpy()[None], 3, 0) for rec in recordings]
    )
    np.testing.assert_array_equal(offsets, expected)
    assert counts == [3, 3, 3, 3] and [len(b[0]) for b in batches] == [2] * 6


@pytest.mark.parametrize("contrast", [False, True])
def test_the_linear_attributions_of_recording_means_add_up(means_model, contrast):
    """Completeness: the pairs' and the products' attributions add up to the explained
    logit's change (the transformer adds nothing here: its head is at zero), all of it the
    linear path's, each product's being its weight times the change of the product of means."""
    from eegformer_cli.explain.path_shares import path_logit_changes
    from eegformer_cli.explain.segment_attributions import channel_pair_attributions
    from eegformer_cli.model.static_paths import recording_offset

    model, _, train_set, _ = means_model
    coh, wpli = (torch.from_numpy(a) for a in train_set.recording_arrays(2))
    rec = train_set.recordings[2]
    age, sex = (torch.full((3,), float(v)) for v in (rec.age, rec.sex))
    reference = tuple(torch.from_numpy(a.mean(0)) for a in train_set.recording_arrays(7))
    target = (0, 1) if contrast else 1
    offset = recording_offset(model, (coh, wpli, age, sex))
    attributions = channel_pair_attributions(
        model, coh, wpli, age, sex, target, n_steps=4, reference=reference, offset=offset
    )
    paths = path_logit_changes(model, coh, wpli, age, sex, target, reference)
    upper = np.triu_indices(coh.shape[-1], 1)
    summed = (
        attributions.coh_pairs[:, upper[0], upper[1]].sum()
        + attributions.wpli_pairs[:, upper[0], upper[1]].sum()
        + attributions.interactions.sum()
    )
    assert summed == pytest.approx(paths["total"], rel=1e-4, abs=1e-5)
    assert paths["linear"] == pytest.approx(paths["total"], rel=1e-5, abs=1e-6)
    features = products_of_means(model, coh.numpy(), wpli.numpy(), rec.age)
    base = products_of_means(model, reference[0][None].numpy(), reference[1][None].numpy(), rec.age)
    weight = model.static.linear.weight.double().numpy()
    row = weight[1] - weight[0] if contrast else weight[1]
    np.testing.assert_allclose(
        attributions.interactions, (row * (features - base))[-2:], rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize("on_means", [True, False])
def test_the_paths_split_of_a_long_recording_goes_batch_by_batch(
    means_model, monkeypatch, on_means
):
    """``path_logit_changes`` runs a recording's segments through the model a batch at a time
    (``SEGMENTS_PER_EXPLANATION``), as the attributions do, so a recording of any length is
    split in flat memory; the split is that of one pass over all the segments, for a model on
    recording means and for one of an earlier version (per segment)."""
    from eegformer_cli.explain import segment_attributions
    from eegformer_cli.explain.path_shares import path_logit_changes

    model, _, train_set, _ = means_model
    monkeypatch.setattr(model.config, "linear_on_means", on_means)
    # 9 segments: three recordings' segments as one recording of one participant
    coh, wpli = (
        torch.from_numpy(np.concatenate(arrays))
        for arrays in zip(*(train_set.recording_arrays(r) for r in (2, 3, 4)))
    )
    age, sex = torch.full((9,), 40.0), torch.full((9,), 1.0)
    reference = tuple(torch.from_numpy(a.mean(0)) for a in train_set.recording_arrays(7))
    whole = path_logit_changes(model, coh, wpli, age, sex, (0, 1), reference)
    rows = []
    forward = model.forward

    def counted(coh_in, *args):
        rows.append(len(coh_in))
        return forward(coh_in, *args)

    monkeypatch.setattr(model, "forward", counted)
    monkeypatch.setattr(segment_attributions, "SEGMENTS_PER_EXPLANATION", 4)  # 4, 4, 1
    batched = path_logit_changes(model, coh, wpli, age, sex, (0, 1), reference)
    assert rows == [4, 4, 4, 4, 1, 1]  # each batch: the recording's, the reference's
    for part in ("total", "linear", "transformer"):
        assert batched[part] == pytest.approx(whole[part], rel=1e-5, abs=1e-6), part


def test_a_training_config_of_an_earlier_version_fits_per_segment(linear_study):
    """``linear_means`` absent from a stored training config (earlier versions) reads false:
    the model's linear path is per segment, as that run's folds were (a run of an earlier
    version resumes only with it; the default preset's is true)."""
    from eegformer_cli.training.config import TrainConfig

    data = load_training_data(linear_study, "diagnosis")
    stored = resolve_config("default", None, SETTINGS).to_dict()
    assert stored.pop("linear_means") is True
    config = TrainConfig.from_dict(stored)
    assert config.linear_means is False
    model = build_model(data, config, np.array([40.0]))
    assert model.config.linear_path and not model.config.linear_on_means
    assert not build_model(
        data, resolve_config("paper", None, {}), np.array([40.0])
    ).config.linear_on_means


@pytest.mark.slow
def test_a_model_file_of_an_earlier_version_predicts_per_segment_as_before(
    linear_study, linear_run, tmp_path
):
    """A model file without ``linear_on_means`` (earlier versions) loads with it false and
    predicts the segment mean of its per-segment logits (the linear path of the mean
    per-segment features), as before; the same weights on recording means predict
    otherwise only through the products (none here: the same)."""
    from eegformer_cli.model.predict import recording_logits

    raw = torch.load(linear_run / "model.pt", weights_only=True)
    assert raw["model_config"]["linear_on_means"] is True
    del raw["model_config"]["linear_on_means"]
    torch.save(raw, tmp_path / "old.pt")
    old = load_model_file(tmp_path / "old.pt").model
    assert old.config.linear_on_means is False
    coh, wpli, age, sex = recording_tensors(linear_study, 3)
    with torch.no_grad():
        _, refined = old(coh, wpli, age, sex)
    logits = recording_logits(
        old, [(coh.numpy(), wpli.numpy(), float(age[0]), float(sex[0]))], torch.device("cpu")
    )
    np.testing.assert_allclose(logits[0], refined.double().mean(0).numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
# a logit carried by the kept interactions' products alone: no band, no pair named


def test_top_band_and_strongest_pairs_name_only_what_carries_the_logit():
    """All-zero band importance has no top band (not the first band), and the strongest pairs
    are only those with a non-zero value: none of an all-zero map, one of a map with one."""
    from eegformer_cli.explain.attributions import top_band
    from eegformer_cli.explain.export import contrast_entry, strongest_pairs

    bands, channels = ["delta", "theta", "alpha"], ["Fp1", "Fp2", "C3", "O1"]
    cautions = {"eye movements": {"bands": ["delta", "theta"], "channels": ["Fp1", "Fp2"]}}
    assert top_band(np.zeros(3)) is None
    assert top_band(np.array([0.0, np.nan, -0.0])) is None
    assert top_band(np.array([0.0, -0.5, 0.25])) == 1
    pairs = np.zeros((3, 4, 4))
    assert strongest_pairs(pairs, bands, channels, cautions=cautions) == []
    entry = contrast_entry(["a", "b"], pairs, np.zeros(3), bands, channels, cautions)
    assert entry["top_band"] is None and entry["strongest_channel_pairs"] == []
    pairs[2, 1, 3] = pairs[2, 3, 1] = -0.3
    assert strongest_pairs(pairs, bands, channels, cautions=cautions) == [
        {"band": "alpha", "channel_a": "Fp2", "channel_b": "O1", "value": -0.3, "caution": ""}
    ]


def test_the_report_charts_no_band_and_draws_no_zero_head():
    """The band chart outlines no band of a class whose bands are all 0 and its legend says
    so; the head of such a class, drawn only for a band named with --band, has no line; the
    contrast of all-zero bands is its bars alone, none outlined."""
    from matplotlib.collections import LineCollection

    from eegformer_cli.report.figures import (
        band_importance_figure,
        connectivity_head_figure,
        contrast_figure,
    )

    bands, channels = ["theta", "alpha", "beta"], ["F3", "F4", "C3", "C4"]
    importance = np.array([[0.0, 0.0, 0.0], [0.2, -0.8, 0.0]])
    fig = band_importance_figure(importance, ["control", "patient"], bands)
    ax = fig.axes[0]
    assert ax.get_legend_handles_labels()[1] == [
        "control (no top band)",
        "patient (top band alpha)",
    ]
    outlined = [
        (k, t)
        for k, container in enumerate(ax.containers)
        for t, bar in enumerate(container)
        if tuple(bar.get_edgecolor()) == (0.0, 0.0, 0.0, 1.0)  # black; "none" has alpha 0
    ]
    assert outlined == [(1, 1)]  # patient's alpha only
    assert "no connectivity entry carries any of" in ax.get_title().replace("\n", " ")
    head = connectivity_head_figure(
        np.zeros((1, 3, 4, 4)),
        ["control"],
        bands,
        channels,
        band_importance=np.zeros((1, 3)),
        band="beta",
    )
    lines = [c for c in head.axes[0].collections if isinstance(c, LineCollection)]
    assert len(lines) == 1 and not lines[0].get_segments()
    assert "no pair with a non-zero attribution, beta" in head.axes[0].get_title()
    zeros = np.zeros((3, 4, 4))
    summary = {
        "bands": bands,
        "channels": channels,
        "contrast_band": np.zeros(3),
        **dict.fromkeys(("contrast_coh_pairs", "contrast_wpli_pairs"), zeros),
        **dict.fromkeys(("coh_difference", "wpli_difference"), zeros),
    }
    contrast = contrast_figure(summary, ["control", "patient"])
    assert len(contrast.axes) == 1  # the bars alone
    assert "No band outlined" in contrast.axes[0].get_title()


def prep_subset(prep, out, per_class: int):
    """A preprocess folder at ``out`` of the first ``per_class`` recordings of each class of
    ``prep`` (its manifest rows and connectomes, its settings): fewer to explain."""
    with open(prep / "manifest.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    kept = [
        row
        for label in sorted({row["diagnosis"] for row in rows})
        for row in [r for r in rows if r["diagnosis"] == label][:per_class]
    ]
    (out / "connectomes").mkdir(parents=True)
    shutil.copy(prep / "preprocess.json", out / "preprocess.json")
    for row in kept:
        shutil.copy(prep / row["connectome"], out / row["connectome"])
    with open(out / "manifest.tsv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(kept)
    return out


@pytest.fixture(scope="module")
def product_only_run(interaction_run, tmp_path_factory) -> dict:
    """A copy of conftest.py's interaction run whose model reads only its kept interactions'
    products: every connectivity entry's weight in its linear path 0, each product's not, the
    transformer residual off; 12 of its recordings explained (by the model file) into
    ``explanations``."""
    out = tmp_path_factory.mktemp("product-only")
    run = out / "run"
    shutil.copytree(interaction_run["run"], run)
    bundle = torch.load(run / "model.pt", map_location="cpu", weights_only=True)
    n_products = len(bundle["model_config"]["interactions"])
    assert n_products and bundle["model_config"]["linear_path"]
    weight = bundle["state_dict"]["static.linear.weight"]
    weight[:, :-n_products] = 0.0
    weight[:, -n_products:] = torch.tensor([-0.5, 0.5])[:, None]  # a two-class logit pair
    bundle["state_dict"]["transformer_kept"] = torch.tensor(False)
    torch.save(bundle, run / "model.pt")
    explanations = out / "explanations"
    assert (
        exit_code(
            "explain",
            run / "model.pt",
            prep_subset(interaction_run["prep"], out / "prep", 6),
            "--out",
            explanations,
            "--n-steps",
            4,
        )
        == 0
    )
    return {"run": run, "explanations": explanations, "out": out}


def test_a_logit_carried_by_products_names_no_band_and_no_pair(product_only_run):
    """explain writes no top band (null, not the first band) and no strongest pair of value 0,
    in each recording's JSON, its contrast and the class summary; the paths say the linear
    path carries the whole logit."""
    folder = product_only_run["explanations"]
    recordings = sorted(folder.glob("sub-*.json"))
    assert recordings
    for path in recordings:
        data = json.loads(path.read_text())
        assert data["top_band"] is None, path.name
        assert data["strongest_channel_pairs"] == []
        assert data["contrast"]["top_band"] is None
        assert data["contrast"]["strongest_channel_pairs"] == []
        paths = data["paths"]["target"]
        assert paths["linear"] != 0 and paths["transformer"] == 0
        assert any(row["value"] for row in data["interactions"])
    summary = json.loads((folder / "class_summary.json").read_text())
    for name, entry in summary["classes"].items():
        assert entry["top_band"] is None and entry["strongest_channel_pairs"] == [], name
    assert summary["contrast"]["top_band"] is None
    assert summary["contrast"]["strongest_channel_pairs"] == []


def test_the_report_of_such_a_logit_outlines_no_band_and_says_what_carries_it(
    product_only_run,
):
    """No band outlined and no head plot of zeros: a note says the kept products carry the
    logit; the class contrast lists no pair; --band NAME still draws its head plot."""
    run, folder, out = (product_only_run[k] for k in ("run", "explanations", "out"))
    texts = {}
    for name, extra in (("default", []), ("band", ["--band", "theta"])):
        assert (
            exit_code(
                "report", run, "--explanations", folder, "--out", out / f"{name}.html", *extra
            )
            == 0
        )
        texts[name] = html.unescape((out / f"{name}.html").read_text(encoding="utf-8"))
    text = texts["default"]
    note = text[text.index("Where no band carries the logit") :]
    for name in ("control", "patient"):
        assert (
            f"{name}: no connectivity entry carries any of its logit (every band's importance "
            "is 0), so the band chart outlines no band for it and no head plot is drawn: it is "
            "carried by the kept interactions' products"
        ) in note
    assert "coh theta C3-P4 x wpli beta F4-C4" in note
    assert "Strongest channel-pair attributions" not in text  # no head plot of zeros
    assert "top band of the chart" not in text
    assert "no channel pair carries any of it (every pair 0)" in text
    assert "No channel pair carries any of the class contrast: every pair's value is 0." in text
    assert "<td>delta</td>" not in text and "eye movements</td>" not in text
    band = texts["band"]
    assert "Strongest channel-pair attributions" in band
    assert "its head plot (theta, chosen with --band) shows no pair" in band
