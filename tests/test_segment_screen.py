"""What changes within recordings: the within-recording screen (``dynamic_pairs``, in
``default``), the transformer path that reads its pairs over a tempered static stage, and the
linear path on the mean of the segments' products (``linear_segment_products``): a pair of
entries that acts together within recordings, with every entry's recording mean alike in the
classes (builders.dynamic_study, the dynamic scenario's design on 6 channels and 3 bands),
against a static one (builders.planted_study)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from builders import PLANTED, dynamic_study, planted_study, study_model_config, tiny_config
from sklearn.metrics import balanced_accuracy_score

from eegformer_cli.errors import UsageError
from eegformer_cli.explain.attributions import explain_recording
from eegformer_cli.model.interactions import Interaction
from eegformer_cli.model.linear_path import recording_features
from eegformer_cli.model.xaiguiformer import XAIguiFormer
from eegformer_cli.training import interaction_screen as screen
from eegformer_cli.training.dataset import ConnectomeDataset, load_training_data
from eegformer_cli.training.fit import evaluate, fit_model, screen_fit
from eegformer_cli.training.static_choice import temper
from eegformer_cli.training.transformer_keep import TransformerKeep

IDENTITY = {"coh_mean": 0.0, "coh_std": 1.0, "wpli_mean": 0.0, "wpli_std": 1.0}


def _screened(folder, dynamic_pairs: bool = True):
    data = load_training_data(folder, "diagnosis")
    train_set = ConnectomeDataset(data.recordings, data.label_names, data.channels, data.bands)
    config = tiny_config(interactions=True, age_interactions=False, dynamic_pairs=dynamic_pairs)
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


def test_only_the_within_screen_finds_a_pair_that_bursts_together(tmp_path):
    folder = dynamic_study(tmp_path / "dynamic")
    on_means = _screened(folder, dynamic_pairs=False)
    assert all({k.a, k.b} != set(PLANTED) for k in on_means.kept)
    assert on_means.within_threshold is None


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
    settings = {"interactions": True, "transformer_path": "off"}
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
    config = study_model_config(
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
    cpu = torch.device("cpu")
    config = tiny_config(transformer_path="off")
    fit = fit_model(data, data.recordings[:24], data.recordings[24:32], config, cpu, 0, {})
    before = evaluate(fit.model, test_set, cpu)
    labels = np.arange(40) % 2
    noise = np.random.default_rng(0).choice([-5.0, 5.0], 40)  # confident, unrelated to labels
    factor = temper(fit.model.static, np.stack([np.zeros(40), noise], axis=1), labels)
    assert 0.05 <= factor < 1.0
    np.testing.assert_allclose(
        evaluate(fit.model, test_set, cpu), factor * before, rtol=1e-4, atol=1e-6
    )


def test_within_deviations_centre_at_most_the_cap_of_evenly_spaced_segments():
    rng = np.random.default_rng(4)
    coh, wpli = (rng.random((30, 3, 6, 6)).astype(np.float32) for _ in range(2))
    rows = screen.within_deviations(coh, wpli, IDENTITY)
    assert rows.shape == (screen.WITHIN_SEGMENTS, 90)
    np.testing.assert_allclose(rows.mean(axis=0), 0.0, atol=1e-6)
    spaced = np.linspace(0, 29, screen.WITHIN_SEGMENTS).round().astype(int)
    segments = screen.entry_segments(coh[spaced], wpli[spaced], IDENTITY)
    np.testing.assert_allclose(rows, segments - segments.mean(axis=0), atol=1e-6)
    assert screen.within_deviations(coh[:1], wpli[:1], IDENTITY) is None


def test_the_within_screen_finds_the_pair_that_bursts_together_and_flags_it(tmp_path):
    found = _screened(dynamic_study(tmp_path / "dynamic"))
    within = [k for k in found.kept if k.within]
    assert {within[0].a, within[0].b} == set(PLANTED)
    assert within[0].score == found.top_within_score > found.within_threshold
    assert all({k.a, k.b} != set(PLANTED) for k in found.kept if not k.within)
    assert Interaction.from_dict(within[0].to_dict()) == within[0]
    assert "within" not in replace(within[0], within=False).to_dict()  # stored as before


def test_the_within_screen_keeps_nothing_of_a_static_interaction(tmp_path):
    found = _screened(planted_study(tmp_path / "xor", "xor", n=80))
    assert not any(k.within for k in found.kept)
    assert found.top_within_score < found.within_threshold
    assert any({k.a, k.b} == set(PLANTED) for k in found.kept)  # the screen of means' pair


def test_a_default_fit_reads_the_within_pair_with_the_transformer_over_a_tempered_stage(
    tmp_path,
):
    data = load_training_data(dynamic_study(tmp_path / "dynamic", n=40), "diagnosis")
    cpu = torch.device("cpu")
    fits = {
        on: fit_model(
            data,
            data.recordings[:30],
            data.recordings[30:],
            tiny_config(epochs=2, dynamic_pairs=on),
            cpu,
            0,
            {},
        )
        for on in (False, True)
    }
    kept = [Interaction.from_dict(k) for k in fits[True].model.config.interactions]
    assert fits[True].model.config.transformer_inputs == "interactions"
    assert any(k.within and {k.a, k.b} == set(PLANTED) for k in kept)
    assert fits[False].model.config.transformer_inputs == "connectivity"
    assert not any(k.get("within") for k in fits[False].model.config.interactions)
    assert 0 < fits[True].linear["static_scale"] <= 1.0  # toward chance, never sharpened
    assert "static_scale" not in fits[False].linear


class _Stage:
    """A static stage's ``scale``, recorded."""

    factor = 1.0

    def scale(self, factor: float) -> None:
        self.factor *= factor


def test_temper_never_sharpens_timid_logits():
    labels = np.arange(40) % 2
    timid = np.stack([np.zeros(40), np.where(labels == 1, 0.2, -0.2)], axis=1)
    stage = _Stage()
    assert temper(stage, timid, labels) == 1.0 == stage.factor  # calibrated, T < 1: kept at 1


def test_a_model_that_does_not_keep_its_transformer_has_its_static_stage_as_fitted(tmp_path):
    data = load_training_data(dynamic_study(tmp_path / "dynamic", n=40), "diagnosis")
    test_set = ConnectomeDataset(data.recordings[32:], data.label_names, data.channels, data.bands)
    cpu, recordings = torch.device("cpu"), data.recordings
    fits = {
        path: fit_model(
            data,
            recordings[:24],
            recordings[24:32],
            tiny_config(epochs=2, transformer_path=path, keep_margin=100.0),
            cpu,
            0,
            {},
        )
        for path in ("off", "auto")  # a margin of 100 nats: never kept
    }
    assert not fits["auto"].linear["transformer_kept"]
    logits = evaluate(fits["off"].model, test_set, cpu)
    np.testing.assert_allclose(evaluate(fits["auto"].model, test_set, cpu), logits, atol=1e-5)
    # the decision undoes a tempering: a stage scaled by 0.5 for the training is back at 1
    model = fits["auto"].model
    model.static.scale(0.5)
    keep = TransformerKeep(None, torch.zeros(1), np.zeros(1), np.ones(4), "auto", 100.0)
    keep.static_scale = 0.5
    assert keep.decide(model, np.ones(4)) is False and not model.kept
    np.testing.assert_allclose(evaluate(model, test_set, cpu), logits, atol=1e-5)
