"""The interaction screen and the model's interaction paths.

Studies here are preprocess-style folders (builders.make_connectome_folder's, 6 channels, 3
bands: 90 entries) whose label is caused by two entries together (an XOR: neither alone says
anything about the label), by an entry whose meaning flips with age, or by nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from builders import BANDS, CHANNELS, PLANTED, planted_study, tiny_config

from eegformer_cli.model.interactions import AGE, Interaction, entry_values
from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer
from eegformer_cli.training import interaction_screen as screen
from eegformer_cli.training.config import TrainConfig, resolve_config
from eegformer_cli.training.dataset import load_training_data
from eegformer_cli.training.fit import fit_model
from eegformer_cli.training.model_file import load_model_file


def screened(folder, **settings):
    """The screen on every recording of ``folder`` (identity standardisation)."""
    data = load_training_data(folder, "diagnosis")
    from eegformer_cli.training.dataset import ConnectomeDataset
    from eegformer_cli.training.fit import screen_fit

    train_set = ConnectomeDataset(data.recordings, data.label_names, data.channels, data.bands)
    config = tiny_config(interactions=True, age_interactions=True, **settings)
    ages = np.array([r.age for r in data.recordings])
    return screen_fit(data, train_set, None, ages, config, seed=0)


def test_block_scores_equal_the_full_correlation_difference_for_two_and_three_classes():
    rng = np.random.default_rng(1)
    for n_classes in (2, 3):
        features, labels = rng.standard_normal((60, 70)), rng.integers(0, n_classes, 60)
        expected = np.zeros((70, 70))
        for c in np.unique(labels)[:1] if n_classes == 2 else np.unique(labels):
            inside = np.corrcoef(features[labels == c].T)
            rest = np.corrcoef(features[labels != c].T)
            expected = np.maximum(expected, np.abs(inside - rest))
        upper = np.triu_indices(70, 1)
        best = np.argsort(-expected[upper])[:5]
        factors = screen.contrast_factors(features, labels)
        pairs, scores = screen.top_pairs(factors, 5, block_rows=16)
        np.testing.assert_allclose(scores, expected[upper][best], atol=1e-5)
        assert [tuple(p) for p in pairs] == [(upper[0][k], upper[1][k]) for k in best]
        assert screen.largest_pair_score(factors, block_rows=16) == pytest.approx(
            expected[upper].max(), abs=1e-5
        )


def test_the_screen_finds_the_planted_pair(tmp_path):
    found = screened(planted_study(tmp_path / "xor", "xor"))
    pairs = [k for k in found.kept if not k.with_age]
    assert {pairs[0].a, pairs[0].b} == set(PLANTED)
    assert pairs[0].score > found.pair_threshold


def test_the_gate_keeps_nothing_in_most_null_studies(tmp_path):
    """With the label independent of everything, the gate (the largest score of 20
    permutations, per candidate set) lets a pair through in about 1 study in 10."""
    entries = screen.entry_table(CHANNELS, BANDS)
    kept = []
    for seed in range(10):
        rng = np.random.default_rng([seed, 35])
        features, age = rng.standard_normal((160, len(entries))), rng.standard_normal(160)
        found = screen.screen_interactions(
            features,
            rng.integers(0, 2, 160),
            np.arange(160).astype(str),
            age,
            entries,
            max_pairs=10,
            n_permutations=20,
            null_quantile=1.0,
            seed=seed,
        )
        kept.append(len(found.kept))
    assert sum(k == 0 for k in kept) >= 8, kept


def test_the_age_screen_finds_the_entry_whose_meaning_flips_with_age(tmp_path):
    found = screened(planted_study(tmp_path / "age", "age"))
    with_age = [k for k in found.kept if k.with_age]
    assert with_age and with_age[0].a == PLANTED[0] and with_age[0].b == AGE


def test_the_screen_gate_and_its_permutations_are_reproducible(tmp_path):
    folder = planted_study(tmp_path / "xor", "xor", n=80)
    first, second = screened(folder), screened(folder)
    assert first.kept == second.kept and first.pair_threshold == second.pair_threshold


def _model(interactions=()) -> XAIguiFormer:
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "default",
        n_channels=len(CHANNELS),
        band_names=BANDS,
        band_edges_hz=[(4.0, 8.0), (8.0, 13.0), (13.0, 30.0)],
        n_classes=2,
        channel_names=CHANNELS,
        interactions=[i.to_dict() for i in interactions],
    )
    return XAIguiFormer(config).eval()


def _inputs(batch=3):
    generator = torch.Generator().manual_seed(3)
    coh = torch.rand((batch, 3, 6, 6), generator=generator)
    wpli = torch.rand((batch, 3, 6, 6), generator=generator)
    coh, wpli = (m + m.transpose(-1, -2) for m in (coh, wpli))
    return coh, wpli


def test_an_unknown_age_acts_as_the_training_mean_age_in_the_interaction_token():
    kept = [Interaction(PLANTED[0], AGE, 0.9, 0.5), Interaction(*PLANTED, 0.8, 0.5)]
    model = _model(kept)
    model.set_demographic_stats(45.0, 10.0)
    coh, wpli = _inputs(2)
    sex = torch.tensor([0.0, 0.0])
    ages = {"unknown": float("nan"), "mean": 45.0, "older": 75.0}
    products = {
        k: model.interaction_products(coh, wpli, torch.tensor([v, v]), sex) for k, v in ages.items()
    }
    # the entry-age product: 0 at the mean and for an unknown age, the entry times 3 at +3 SD
    assert torch.equal(products["unknown"][:, 0], torch.zeros(2))
    torch.testing.assert_close(products["mean"], products["unknown"])
    entry = entry_values(coh, wpli, model.transformer.interaction_token.index_a)[:, 0]
    torch.testing.assert_close(products["older"][:, 0], 3 * entry)
    # the entry pair's product does not depend on age
    torch.testing.assert_close(products["older"][:, 1], products["mean"][:, 1])
    with torch.no_grad():
        model.transformer.interaction_token.embed.weight.normal_(0, 5.0)
    logits = {k: model(coh, wpli, torch.tensor([v, v]), sex)[1] for k, v in ages.items()}
    torch.testing.assert_close(logits["unknown"], logits["mean"])
    # the path acts: the older people's logits with their products against the mean's products
    older = torch.tensor([75.0, 75.0])
    with torch.enable_grad():
        swapped = model.forward_with_details(coh, wpli, older, sex, products=products["mean"])
    assert not torch.allclose(swapped.logits_refined, logits["older"])


def test_a_model_file_keeps_its_interactions_and_the_run_says_so(interaction_run, capsys):
    from eegformer_cli.cli.train import _report
    from eegformer_cli.experiment import run_folder

    run = interaction_run["run"]
    bundle = load_model_file(run / "model.pt")
    kept = [Interaction.from_dict(d) for d in bundle.model.config.interactions]
    assert kept and {kept[0].a, kept[0].b} == set(PLANTED)
    assert bundle.model.transformer.interaction_token is not None
    # metrics.json and train's summary: what the screen kept, its best score and its gate
    metrics = run_folder.read_metrics(run)
    screens = metrics.interaction_screens
    assert screens.pairs and screens.with_age and (screens.n_folds, screens.folds_kept) == (1, 1)
    fold = screens.per_fold[0]
    assert fold.kept[0] == kept[0].label() == "coh theta C3-P4 x wpli beta F4-C4"
    assert fold.top_pair_score == pytest.approx(kept[0].score) and fold.pair_gate < kept[0].score
    assert screens.final is None  # a holdout run: model.pt is the evaluated model
    capsys.readouterr()
    _report(metrics, run, as_json=False)
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        "interaction screens: kept something in its one fold: coh theta C3-P4 x wpli beta F4-C4"
        in printed
    )
    assert f"entry pairs: best score {fold.top_pair_score:.2f} against a gate of " in printed

    # a model file of an earlier version: its interactions without proxies
    stored = torch.load(run / "model.pt", weights_only=True)
    for item in stored["model_config"]["interactions"]:
        del item["proxies"]
    torch.save(stored, run / "earlier.pt")
    earlier = load_model_file(run / "earlier.pt")
    assert [Interaction.from_dict(d) for d in earlier.model.config.interactions] == [
        Interaction(k.a, k.b, k.score, k.threshold) for k in kept
    ]
    coh, wpli = _inputs()
    no_demographics = torch.full((3,), float("nan"))
    torch.testing.assert_close(
        earlier.model(coh, wpli, no_demographics, no_demographics)[1],
        bundle.model(coh, wpli, no_demographics, no_demographics)[1],
    )


def test_the_screens_say_what_they_kept_or_that_they_kept_nothing_or_did_not_run():
    from eegformer_cli.experiment.screen_outcomes import describe_screens, summarise_screens
    from eegformer_cli.training.fold_record import FoldRecord

    def record(kept=(), pair=(0.62, 0.71), age=(0.40, 0.55)) -> dict:
        return {
            "kept": [k.to_dict() for k in kept],
            "top_pair_score": pair[0],
            "pair_threshold": pair[1],
            "top_age_score": age and age[0],
            "age_threshold": age and age[1],
        }

    folds = [FoldRecord(repeat=0, fold=k, interaction_screen=record()) for k in range(5)]
    folds[2].interaction_screen["top_pair_score"] = 0.70  # the nearest its gate
    nothing = summarise_screens(folds, True, True, record(pair=(0.5, 0.8)))
    assert nothing.folds_kept == 0 and [f.fit for f in nothing.per_fold][2] == "r0_f2"
    assert describe_screens(nothing, "default") == (
        "the screens kept nothing in any of the 5 folds, nor for the final model: entry "
        "pairs: best score 0.70 against a gate of 0.71 (r0_f2); entries with age: best "
        "score 0.40 against a gate of 0.55 (r0_f0)"
    )
    pair = Interaction(*PLANTED, 0.9, 0.71)
    folds[1].interaction_screen = record([pair], pair=(0.9, 0.71), age=None)  # no age known
    folds[3].interaction_screen = None  # a record of an earlier version
    some = summarise_screens(folds, True, True, None)
    assert some.folds_kept == 1 and not some.per_fold[3].recorded
    assert describe_screens(some, "default") == (
        "kept something in 1 of 5 folds (1 fold(s) of an earlier eegformer did not record "
        "theirs): coh theta C3-P4 x wpli beta F4-C4 (1 of 5 folds); entry pairs: best score "
        "0.90 against a gate of 0.71 (r0_f1); entries with age: best score 0.40 against a "
        "gate of 0.55 (r0_f0)"
    )
    unscreened = summarise_screens(folds, False, False, None)
    assert unscreened.per_fold == [] and unscreened.n_folds == 5
    assert describe_screens(unscreened, "paper") == (
        "not screened (the paper preset has no interaction screen)"
    )
    assert "--no-interactions and --no-age-interactions" in describe_screens(unscreened, "default")
    assert "`eegformer train --merge RUN_DIR` adds them" in describe_screens(None, "default")


def test_a_fit_that_keeps_nothing_is_bit_for_bit_the_fit_without_the_screen(tmp_path):
    folder = planted_study(tmp_path / "null", "null", n=60)
    data = load_training_data(folder, "diagnosis")
    train, val = data.recordings[:44], data.recordings[44:]
    fits = [
        fit_model(data, train, val, tiny_config(epochs=2, **s), torch.device("cpu"), 0, {})
        for s in ({}, {"interactions": True, "age_interactions": True})
    ]
    assert fits[1].screen is not None and fits[1].screen["kept"] == []
    assert fits[0].model.state_dict().keys() == fits[1].model.state_dict().keys()
    for name, value in fits[0].model.state_dict().items():
        torch.testing.assert_close(
            value, fits[1].model.state_dict()[name], rtol=0, atol=0, equal_nan=True
        )
    assert [h["val_loss"] for h in fits[0].history] == [h["val_loss"] for h in fits[1].history]


def test_a_run_folder_of_an_earlier_version_resolves_to_its_model_without_interactions():
    """config.json of an earlier version's default run has no interaction settings: a resumed
    or merged run keeps that version's model (no screen), while a new default run screens."""
    stored = TrainConfig.preset_config("default").to_dict()
    assert stored["interactions"] and stored["age_interactions"]
    for name in ("interactions", "age_interactions", "interaction_max_pairs"):
        stored.pop(name)
    earlier = TrainConfig.from_dict(stored)
    assert not earlier.interactions and not earlier.age_interactions
    assert not resolve_config("paper").interactions
    flags = {"interactions": False, "age_interactions": None}
    assert resolve_config("default", None, flags).age_interactions
