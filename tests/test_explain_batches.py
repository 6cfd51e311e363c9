"""Recordings of any length in bounded memory: ``explain`` runs a recording's segments through
the model in batches, and the evaluation's segment batches span recordings without concatenating
them; either way the numbers are those of one pass over all the segments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from builders import random_connectivity, random_model

from eegformer_cli.explain import segment_attributions
from eegformer_cli.explain.attributions import RECORDING_ARRAYS, explain_recording
from eegformer_cli.explain.segment_attributions import exact_segment_mean
from eegformer_cli.model.diagnostics import recording_diagnostics
from eegformer_cli.model.predict import recording_logits, segment_batches

LABELS = ["a", "b", "c"]


def test_a_recording_explained_in_several_batches_equals_one_batch(monkeypatch):
    model = random_model()
    coh, wpli = random_connectivity(23, seed=3)
    reference = (0.5 * coh.mean(axis=0), 0.5 * wpli.mean(axis=0))
    rows = []
    forward = model.forward_with_details

    def counted(coh_in, *args, **kwargs):
        rows.append(len(coh_in))
        return forward(coh_in, *args, **kwargs)

    monkeypatch.setattr(model, "forward_with_details", counted)

    def explain(**options):
        return explain_recording(
            model,
            coh,
            wpli,
            40.0,
            1.0,
            LABELS,
            recording_id="r",
            contrast=("a", "c"),
            reference=reference,
            n_steps=4,
            **options,
        )

    whole = explain()
    assert max(rows) >= 23  # one batch: the whole recording at once
    monkeypatch.setattr(segment_attributions, "SEGMENTS_PER_EXPLANATION", 5)  # 5, ..., 5, 3
    rows.clear()
    batched = explain()
    # Integrated Gradients: 5 segments x 4 steps at most; all 23 at once only in the attention
    # diagnostics' passes, last (model/diagnostics.py: 256 segments at a time)
    first_diagnostic = rows.index(23)
    assert max(rows[:first_diagnostic]) == 5 * 4 and set(rows[first_diagnostic:]) == {23}
    assert (batched.predicted, batched.target) == (whole.predicted, whole.target)
    for name in RECORDING_ARRAYS:
        expected, got = getattr(whole, name), getattr(batched, name)
        if expected is None:  # a model that reads no covariances has no band power
            assert got is None, name
            continue
        assert got.shape == expected.shape and got.dtype == np.float64, name
        scale = np.abs(expected).max()
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * scale, err_msg=name)
    # the mean connectivity is summed segment by segment either way: bit-identical
    assert np.array_equal(batched.mean_coh, whole.mean_coh)
    heads = explain(all_heads=True)
    assert heads.attention_coarse.shape == (2, 2, 4, 4)
    np.testing.assert_allclose(heads.attention_coarse.mean(axis=1), whole.attention_coarse, 1e-6)


def test_exact_segment_mean_is_the_float64_mean():
    rng = np.random.default_rng(0)
    values = (rng.lognormal(size=(300, 3, 4, 4)) * 100).astype(np.float32)
    assert np.array_equal(exact_segment_mean(values), values.astype(np.float64).mean(axis=0))


def test_segment_batches_span_recordings_as_their_concatenation_would():
    recordings = [
        (*random_connectivity(n, seed=n), float(n), n % 2) for n in (3, 1, 7, 2)
    ]  # 13 segments
    counts: list[int] = []
    batches = list(segment_batches(iter(recordings), counts, size=4))
    assert counts == [3, 1, 7, 2] and [len(b[0]) for b in batches] == [4, 4, 4, 1]
    for i, column in enumerate((0, 1)):
        joined = np.concatenate([r[column] for r in recordings])
        assert np.array_equal(np.concatenate([b[i] for b in batches]), joined)
    ages = np.concatenate([b[2] for b in batches])
    assert ages.dtype == np.float32 and ages.tolist() == [3.0] * 3 + [1.0] + [7.0] * 7 + [2.0] * 2
    assert np.shares_memory(batches[1][0], recordings[2][0])  # within one recording: a view


def _flat(value, where: str = "") -> dict:
    """A nested dict / list of numbers as ``{path: number}``."""
    if isinstance(value, dict):
        return {
            k: v for key, item in value.items() for k, v in _flat(item, f"{where}/{key}").items()
        }
    if isinstance(value, (list, tuple)):
        return {
            k: v for i, item in enumerate(value) for k, v in _flat(item, f"{where}[{i}]").items()
        }
    return {where: value}


@pytest.mark.parametrize("lazily", [False, True])
def test_diagnostics_and_logits_of_recordings_read_one_at_a_time(lazily):
    model = random_model()
    recordings = [(*random_connectivity(n, seed=n), 30.0 + n, 1.0) for n in (300, 4)]
    device = torch.device("cpu")
    given = (r for r in recordings) if lazily else recordings
    summaries = recording_diagnostics(model, given, device, ablations=False)
    alone = [recording_diagnostics(model, [r], device, ablations=False)[0] for r in recordings]
    # equal up to float32 rounding: a batch's composition may change the kernels' summation
    # order on some CPUs
    assert _flat(summaries[1]) == pytest.approx(_flat(alone[1]), rel=1e-5, abs=1e-6)
    assert _flat(summaries[1]).keys() == _flat(alone[1]).keys()
    assert summaries[0].keys() == alone[0].keys()
    logits = recording_logits(model, (r for r in recordings) if lazily else recordings, device)
    with torch.no_grad():
        first = model(
            *(torch.from_numpy(a) for a in recordings[1][:2]),
            *(torch.full((4,), v) for v in (34.0, 1.0)),
        )[1]
    np.testing.assert_allclose(logits[1], first.double().mean(dim=0).numpy(), rtol=1e-5, atol=1e-6)
