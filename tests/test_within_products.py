"""Within pairs read per recording (``ModelConfig.within_per_recording``): the interaction
token reads a within pair's two entries' rises over their own recording's floor, in units of
their standard deviation over its segments, so a recording's products average to the entries'
correlation over its segments, and every caller gives a segment the products of its whole recording, in whatever batch it
falls (``model/predict.py``, training, ``explain``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from builders import BANDS, CHANNELS, PLANTED, perturb, study_model_config

from eegformer_cli.explain.attributions import explain_recording
from eegformer_cli.model.interactions import (
    MEASURES,
    Entry,
    Interaction,
    Proxy,
    entry_values,
    measure_twins_of,
)
from eegformer_cli.model.predict import SEGMENTS_PER_BATCH, recording_logits
from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer

#: A static pair (the screen of means) beside the within one.
STATIC = (Entry("coh", "alpha", ("F3", "C3")), Entry("coh", "beta", ("P3", "P4")))


def twin(entry: Entry) -> Entry:
    """The other measure of ``entry``'s band and channel pair."""
    return Entry(MEASURES[1 - MEASURES.index(entry.measure)], entry.band, entry.channels)


#: Proxies of the within pair PLANTED that pair each side's twin with the other side.
TWIN_PROXIES = (
    Proxy(twin(PLANTED[0]), PLANTED[1], 0.9, 0.8),
    Proxy(PLANTED[0], twin(PLANTED[1]), 0.8, 0.7),
)


def within_model(per_recording: bool = True, proxies=(), **fields) -> XAIguiFormer:
    """A random default model on recording means whose token holds a within pair (PLANTED,
    with ``proxies``) and a pair of the screen of means, standardising its inputs, moved from
    its init."""
    torch.manual_seed(0)
    config = study_model_config(
        interactions=[
            Interaction(*PLANTED, 1.0, 0.5, tuple(proxies), within=True).to_dict(),
            Interaction(*STATIC, 1.0, 0.5).to_dict(),
        ],
        transformer_inputs="interactions",
        within_per_recording=per_recording,
        linear_path=True,
        linear_on_means=True,
        input_standardisation=True,
        **fields,
    )
    model = XAIguiFormer(config)
    model.set_stats({"coh_mean": 0.3, "coh_std": 0.1, "wpli_mean": 0.3, "wpli_std": 0.1})
    model.set_demographic_stats(40.0, 10.0)
    return perturb(model).eval()


def recording(n_segments: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric float32 coh and wPLI (S, 3, 6, 6) in [0, 1], zero diagonals."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        x = rng.uniform(0, 1, (n_segments, len(BANDS), len(CHANNELS), len(CHANNELS)))
        x = (x + x.transpose(0, 1, 3, 2)) / 2
        x[..., np.arange(len(CHANNELS)), np.arange(len(CHANNELS))] = 0
        out.append(x.astype(np.float32))
    return out[0], out[1]


def planted_values(coh: np.ndarray, wpli: np.ndarray) -> np.ndarray:
    """(S, 2): the within pair's two raw entries in each segment."""
    token = within_model().transformer.interaction_token
    index = torch.cat((token.index_a[:1], token.index_b[:1]))
    return entry_values(torch.from_numpy(coh), torch.from_numpy(wpli), index).numpy()


def test_a_within_pairs_products_average_to_its_entries_correlation_over_the_recording():
    model = within_model()
    coh, wpli = recording(7, seed=1)
    products = model.token_products(coh, wpli, 40.0, 1.0).numpy()
    values = planted_values(coh, wpli)
    assert products[:, 0].mean() == pytest.approx(np.corrcoef(values.T)[0, 1], abs=1e-5)
    # the pair of the screen of means: each segment's own product, as the static stage reads
    tensors = (torch.from_numpy(coh), torch.from_numpy(wpli), torch.full((7,), 40.0))
    own = model.interaction_products(*tensors, torch.ones(7)).numpy()
    np.testing.assert_array_equal(products[:, 1], own[:, 1])
    assert not np.allclose(products[:, 0], own[:, 0])


def test_a_weak_participants_bursts_give_its_largest_products_only_per_recording():
    """Both couplings burst in segments 0-3 of 10, weakly: 0.15 against 0.05 where they are
    off, both below the training mean of 0.3. Standardised with the training statistics the
    off segments' product is the larger; standardised over the recording, the bursts'."""
    coh, wpli = recording(10, seed=2)
    for measure, (band, i, j) in ((coh, (0, 2, 5)), (wpli, (2, 1, 3))):  # PLANTED's slots
        measure[:, band, i, j] = measure[:, band, j, i] = 0.05
        measure[:4, band, i, j] = measure[:4, band, j, i] = 0.15
    np.testing.assert_allclose(planted_values(coh, wpli)[:4], 0.15)
    for per_recording, bursts_larger in ((False, False), (True, True)):
        products = within_model(per_recording).token_products(coh, wpli, 40.0, 1.0)[:, 0]
        assert bool(products[:4].mean() > products[4:].mean()) == bursts_larger


def test_where_two_couplings_burst_in_half_the_segments_the_bursts_carry_the_correlation():
    """Both couplings burst together in 5 segments of 10 (a patient of the dynamic study): a
    product of deviations from the recording's mean would give the quiet segments as much as
    the bursts; the rises above the floor give the bursts all of the correlation."""
    coh, wpli = recording(10, seed=4)
    bursts = np.array([1, 0, 0, 1, 1, 0, 1, 0, 1, 0], dtype=bool)
    for measure, (band, i, j) in ((coh, (0, 2, 5)), (wpli, (2, 1, 3))):  # PLANTED's slots
        level = np.where(bursts, 0.6, 0.2) + np.linspace(0, 0.01, 10)
        measure[:, band, i, j] = measure[:, band, j, i] = level
    products = within_model().token_products(coh, wpli, 40.0, 1.0)[:, 0].numpy()
    correlation = np.corrcoef(planted_values(coh, wpli).T)[0, 1]
    assert products.mean() == pytest.approx(correlation, abs=1e-5)
    assert products[bursts].min() > 0 > products[~bursts].max()
    assert products[bursts].sum() > correlation * len(bursts)


def test_a_segment_gets_its_recordings_products_in_any_batch():
    """Three recordings whose segments share forwards (one of them across two batches) give
    the logits each gives alone, every segment of it in one forward."""
    model = within_model()
    lengths = (3, SEGMENTS_PER_BATCH + 5, 4)
    recordings = [(*recording(n, seed=n), 30.0 + n, 1.0) for n in lengths]
    together = recording_logits(model, recordings, torch.device("cpu"))
    for row, (coh, wpli, age, sex) in zip(together, recordings):
        alone = recording_logits(model, [(coh, wpli, age, sex)], torch.device("cpu"))[0]
        np.testing.assert_allclose(row, alone, rtol=1e-5, atol=1e-6)
        n = len(coh)
        inputs = (torch.from_numpy(coh), torch.from_numpy(wpli), torch.full((n,), age))
        with torch.no_grad():
            offset = model.static(model.linear_features(*inputs, torch.ones(n)).mean(0)[None])
            whole = model(*inputs, torch.ones(n), offset.expand(n, -1))[1].mean(0)
        np.testing.assert_allclose(row, whole.numpy(), rtol=1e-4, atol=1e-5)


def test_a_model_file_without_the_setting_keeps_the_training_statistics():
    stored = within_model().config.to_dict()
    del stored["within_per_recording"]  # a model file of an earlier version
    earlier = XAIguiFormer(ModelConfig.from_dict(stored)).eval()
    assert not earlier.token_reads_recordings
    coh, wpli = recording(5, seed=3)
    tensors = (torch.from_numpy(coh), torch.from_numpy(wpli), torch.full((5,), 40.0))
    np.testing.assert_array_equal(
        earlier.token_products(coh, wpli, 40.0, 1.0).numpy(),
        earlier.interaction_products(*tensors, torch.ones(5)).numpy(),
    )


def test_the_explanation_of_a_within_pair_adds_up_over_its_segments_and_cells():
    model = within_model()
    coh, wpli = recording(9, seed=5)
    explanation = explain_recording(
        model,
        coh,
        wpli,
        40.0,
        1.0,
        ["control", "patient"],
        recording_id="r",
        target="patient",
        onsets_s=np.arange(9) * 12.0,
        reference=(0.5 * coh.mean(axis=0), 0.5 * wpli.mean(axis=0)),
    )
    logit = recording_logits(model, [(coh, wpli, 40.0, 1.0)], torch.device("cpu"))[0, 1]
    timeline = explanation.segments
    assert np.ptp(timeline.contributions) > 0
    total = timeline.static_share + timeline.contributions.sum()
    assert total == pytest.approx(logit, rel=1e-5, abs=1e-6)
    upper = np.triu_indices(len(CHANNELS), 1)
    pairs = explanation.channel_pairs[:, upper[0], upper[1]].sum()
    products = [row["value"] for row in explanation.interactions]
    assert products[0] != 0  # the transformer path reads the products alone
    total = explanation.paths["target"]["total"]
    assert pairs + sum(products) == pytest.approx(total, rel=0.01, abs=1e-4)  # completeness


def test_a_within_pair_reads_the_twins_a_proxy_pairs_with_the_other_side():
    a, b = PLANTED
    assert measure_twins_of(Interaction(a, b, 1.0, 0.5, TWIN_PROXIES, within=True)) == (
        twin(a),
        twin(b),
    )
    both_twins = (Proxy(twin(a), twin(b), 0.9, 0.8),)
    assert measure_twins_of(Interaction(a, b, 1.0, 0.5, both_twins)) == (twin(a), twin(b))
    elsewhere = (Proxy(twin(a), STATIC[0], 0.9, 0.8), Proxy(STATIC[1], b, 0.9, 0.8))
    assert measure_twins_of(Interaction(a, b, 1.0, 0.5, elsewhere)) == (None, None)
    assert measure_twins_of(Interaction(a, "age", 1.0, 0.5, TWIN_PROXIES)) == (None, None)


def noisy_couplings(together: bool, seed: int, n_segments: int = 10):
    """A recording whose two PLANTED couplings burst in half its segments, together or in
    turn, each seen by both coherence and wPLI of its slot with noise of its own (sd 0.12
    against a burst of 0.1)."""
    coh, wpli = recording(n_segments, seed)
    rng = np.random.default_rng([seed, 7])
    on_a = rng.permutation(n_segments) < n_segments // 2
    on_b = on_a if together else ~on_a
    for (band, i, j), on in (((0, 2, 5), on_a), ((2, 1, 3), on_b)):  # PLANTED's slots
        for measure in (coh, wpli):
            level = 0.3 + 0.1 * on + rng.normal(0, 0.12, n_segments)
            measure[:, band, i, j] = measure[:, band, j, i] = level
    return coh, wpli


def test_reading_the_twins_tells_co_occurring_couplings_apart_with_less_noise():
    """Per recording, the mean of the pair's products (its sides' correlation) of 30
    recordings whose couplings burst together against 30 whose couplings alternate: Welch's
    t is larger when each side is read with its twin than when read alone."""
    from scipy.stats import ttest_ind

    t = {}
    for twins in (False, True):
        model = within_model(proxies=TWIN_PROXIES, within_measure_twins=twins)
        means = {
            together: [
                float(model.token_products(*noisy_couplings(together, s), 40.0, 1.0)[:, 0].mean())
                for s in range(30)
            ]
            for together in (True, False)
        }
        t[twins] = ttest_ind(means[True], means[False], equal_var=False).statistic
    assert t[True] > 1.2 * t[False] > 0, t


def test_without_twins_or_the_setting_a_within_pair_reads_its_entries_alone():
    coh, wpli = recording(6, seed=5)
    alone = within_model().token_products(coh, wpli, 40.0, 1.0).numpy()
    no_proxy = within_model(within_measure_twins=True).token_products(coh, wpli, 40.0, 1.0)
    np.testing.assert_array_equal(no_proxy.numpy(), alone)
    stored = within_model(proxies=TWIN_PROXIES, within_measure_twins=True).config.to_dict()
    del stored["within_measure_twins"]  # a model file of an earlier version
    earlier = XAIguiFormer(ModelConfig.from_dict(stored)).eval()
    earlier.set_stats({"coh_mean": 0.3, "coh_std": 0.1, "wpli_mean": 0.3, "wpli_std": 0.1})
    earlier.set_demographic_stats(40.0, 10.0)
    np.testing.assert_array_equal(earlier.token_products(coh, wpli, 40.0, 1.0).numpy(), alone)
