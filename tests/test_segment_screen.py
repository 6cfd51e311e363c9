"""The interaction screen on segments (``interaction_segments``) and the linear path on the
mean of the segments' products (``linear_segment_products``): a pair of entries that acts
together within recordings, with every entry's recording mean alike in the classes
(builders.dynamic_study, the dynamic scenario's design on 6 channels and 3 bands)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from builders import BANDS, CHANNELS, EDGES, PLANTED, dynamic_study, tiny_config
from sklearn.metrics import balanced_accuracy_score

from eegformer_cli.errors import UsageError
from eegformer_cli.explain.attributions import explain_recording
from eegformer_cli.model.interactions import Interaction
from eegformer_cli.model.linear_path import recording_features
from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer
from eegformer_cli.training import interaction_screen as screen
from eegformer_cli.training.dataset import ConnectomeDataset, load_training_data
from eegformer_cli.training.fit import evaluate, fit_model, screen_fit

IDENTITY = {"coh_mean": 0.0, "coh_std": 1.0, "wpli_mean": 0.0, "wpli_std": 1.0}


def _screened(folder, segments: bool):
    data = load_training_data(folder, "diagnosis")
    train_set = ConnectomeDataset(data.recordings, data.label_names, data.channels, data.bands)
    config = tiny_config(interactions=True, age_interactions=False, interaction_segments=segments)
    ages = np.array([r.age for r in data.recordings])
    return screen_fit(data, train_set, None, ages, config, seed=0)


def test_entry_segments_are_the_rows_entry_means_averages():
    rng = np.random.default_rng(3)
    coh, wpli = (rng.random((5, 3, 6, 6)).astype(np.float32) for _ in range(2))
    rows = screen.entry_segments(coh, wpli, IDENTITY)
    assert rows.shape == (5, 2 * 3 * 15) and rows.dtype == np.float32
    np.testing.assert_allclose(
        rows.mean(axis=0), screen.entry_means(coh, wpli, IDENTITY), atol=1e-6
    )


def test_screen_inputs_repeat_each_recordings_label_participant_and_age_per_segment():
    arrays = [(np.zeros((n, 3, 6, 6), np.float32),) * 2 for n in (2, 3)]
    labels, groups, age = np.array([0, 1]), np.array(["a", "b"]), np.array([-1.0, 1.0])
    features, rows, row_groups, row_age = screen.screen_inputs(
        arrays, IDENTITY, labels, groups, age, segments=True
    )
    assert features.shape == (5, 90)
    assert rows.tolist() == [0, 0, 1, 1, 1] and row_groups.tolist() == ["a", "a", "b", "b", "b"]
    assert row_age.tolist() == [-1, -1, 1, 1, 1]
    means = screen.screen_inputs(arrays, IDENTITY, labels, groups, age, segments=False)
    assert means[0].shape == (2, 90) and means[1] is labels


def test_only_the_segment_screen_finds_a_pair_that_bursts_together(tmp_path):
    folder = dynamic_study(tmp_path / "dynamic")
    on_segments = _screened(folder, segments=True)
    first = on_segments.kept[0]
    assert {first.a, first.b} == set(PLANTED) and first.score > on_segments.pair_threshold
    assert on_segments.n_recordings == 60 * 8  # the screen's rows: every segment
    on_means = _screened(folder, segments=False)
    assert all({k.a, k.b} != set(PLANTED) for k in on_means.kept)


def test_a_fit_with_the_segment_screen_gives_the_model_the_pair(tmp_path):
    data = load_training_data(dynamic_study(tmp_path / "dynamic", n=40), "diagnosis")
    config = tiny_config(epochs=2, interactions=True, interaction_segments=True)
    fit = fit_model(
        data, data.recordings[:30], data.recordings[30:], config, torch.device("cpu"), 0, {}
    )
    kept = [Interaction.from_dict(k) for k in fit.model.config.interactions]
    assert fit.screen is not None and fit.screen["n_recordings"] == 30 * 8
    assert {kept[0].a, kept[0].b} == set(PLANTED)


def _linear_path_bac(data, config) -> tuple[float, torch.nn.Module]:
    """The balanced accuracy of a fit's model (its linear path alone: ``residual`` "off") on
    the last 16 recordings, trained on the first 36 and validated on the next 8."""
    recordings = data.recordings
    fit = fit_model(data, recordings[:36], recordings[36:44], config, torch.device("cpu"), 0, {})
    test_set = ConnectomeDataset(recordings[44:], data.label_names, data.channels, data.bands)
    logits = evaluate(fit.model, test_set, torch.device("cpu"))
    return balanced_accuracy_score(test_set.labels, logits.argmax(axis=1)), fit.model


def test_the_linear_path_on_segment_products_reads_a_pair_that_bursts_together(tmp_path):
    data = load_training_data(dynamic_study(tmp_path / "dynamic"), "diagnosis")
    settings = {"interactions": True, "interaction_segments": True, "transformer_path": "off"}
    on_means, _ = _linear_path_bac(data, tiny_config(**settings))
    on_segments, model = _linear_path_bac(
        data, tiny_config(**settings, linear_segment_products=True)
    )
    assert model.config.linear_segment_products and model.config.interactions
    assert on_segments >= 0.85 and on_segments > on_means + 0.2
    first = ConnectomeDataset(data.recordings[:1], data.label_names, data.channels, data.bands)
    coh, wpli = first.recording_arrays(0)
    age, sex = (torch.full((len(coh),), v) for v in (data.recordings[0].age, 0.0))
    products = model.interaction_products(torch.from_numpy(coh), torch.from_numpy(wpli), age, sex)
    features = recording_features(model, coh, wpli, data.recordings[0].age, 0.0)
    torch.testing.assert_close(features[0, -products.shape[1] :], products.mean(0))
    explained = explain_recording(
        model,
        coh,
        wpli,
        data.recordings[0].age,
        0.0,
        data.label_names,
        recording_id="sub-00",
        n_steps=4,
        covariance=first.recording_covariance(0),
    )
    assert np.isfinite(explained.paths["target"]["linear"])


def _transformer_logits(inputs: str, coh: torch.Tensor, wpli: torch.Tensor) -> torch.Tensor:
    """The transformer path's refined logits of a default model with the planted pair's token."""
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "default",
        n_channels=len(CHANNELS),
        band_names=BANDS,
        band_edges_hz=EDGES,
        n_classes=2,
        channel_names=CHANNELS,
        interactions=[Interaction(*PLANTED, 1.0, 0.5).to_dict()],
        transformer_inputs=inputs,
    )
    path = XAIguiFormer(config).eval().transformer
    age, sex = torch.full((len(coh),), 40.0), torch.zeros(len(coh))
    return path.forward_with_details(coh, wpli, age, sex).logits_refined.detach()


def test_a_transformer_on_the_interaction_token_alone_reads_nothing_but_the_pair():
    generator = torch.Generator().manual_seed(1)
    coh, wpli = (torch.rand((4, 3, 6, 6), generator=generator) for _ in range(2))
    other = coh.clone()
    other[:, 1] += 0.5  # alpha: neither planted entry
    planted = wpli.clone()
    planted[:, 2, 1, 3] += 0.5  # the planted wPLI beta F4-C4
    alone = _transformer_logits("interactions", coh, wpli)
    torch.testing.assert_close(alone, _transformer_logits("interactions", other, wpli))
    assert not torch.allclose(alone, _transformer_logits("interactions", coh, planted))
    everything = _transformer_logits("connectivity", coh, wpli)
    assert not torch.allclose(everything, _transformer_logits("connectivity", other, wpli))
    with pytest.raises(UsageError, match="transformer_inputs"):
        _transformer_logits("bands", coh, wpli)


def test_a_tempered_static_stage_gives_the_same_logits_scaled_by_one_factor(tmp_path):
    data = load_training_data(dynamic_study(tmp_path / "dynamic", n=40), "diagnosis")
    test_set = ConnectomeDataset(data.recordings[32:], data.label_names, data.channels, data.bands)
    logits, cpu = {}, torch.device("cpu")
    for tempered in (False, True):
        config = tiny_config(transformer_path="off", static_temperature=tempered)
        fit = fit_model(data, data.recordings[:24], data.recordings[24:32], config, cpu, 0, {})
        logits[tempered] = evaluate(fit.model, test_set, cpu)
    ratio = (logits[True][:, 1] - logits[True][:, 0]) / (logits[False][:, 1] - logits[False][:, 0])
    assert 0.05 <= ratio[0] <= 20 and not np.isclose(ratio[0], 1.0)
    np.testing.assert_allclose(logits[True], ratio[0] * logits[False], rtol=1e-4, atol=1e-6)
