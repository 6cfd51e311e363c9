"""The tangent-space path (model/tangent_space_path.py): its shrinkage is pyRiemann's, its
matrix logarithm and gradient are right and finite at the identity, its vectors equal the
tangent-space reference's (evaluation/tangent_space.py), its state survives the model file and
casts, and its Integrated Gradients are complete and find a planted effect."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from pyriemann.estimation import Shrinkage
from pyriemann.utils.base import logm as pyriemann_logm
from pyriemann.utils.mean import mean_riemann
from sklearn.linear_model import LogisticRegression

from eegformer_cli.evaluation.tangent_space import BandTangentSpace, shrunk_covariances
from eegformer_cli.model.tangent_space_path import (
    SHRINKAGE,
    TangentSpacePath,
    attribution_baseline,
    average_referenced,
    baseline_covariance,
    log_power_attributions,
    log_variance_correlation,
    logm,
    n_tangent_features,
    shrink,
    symmetrise,
    tangent_space_attributions,
)

N_CHANNELS, N_BANDS = 8, 3


def simulate_covariances(
    n: int, seed: int, gain_channel: int | None = None, gain_band: int = 1, gain: float = 1.0
) -> np.ndarray:
    """float32 (n, K, C, C), V^2: white noise through a shared mixing (plus a recording's own)
    per band, the average reference (rank C - 1), band variances near 1e-10 V^2; with
    ``gain_channel``, that channel of band ``gain_band`` is amplified by ``gain`` before the
    reference."""
    rng = np.random.default_rng(seed)
    mixing = np.eye(N_CHANNELS) + 0.3 * np.random.default_rng(0).standard_normal(
        (N_BANDS, N_CHANNELS, N_CHANNELS)
    )
    centring = np.eye(N_CHANNELS) - np.ones((N_CHANNELS, N_CHANNELS)) / N_CHANNELS
    scales = 1e-10 * np.array([3.0, 1.0, 0.4])
    out = np.empty((n, N_BANDS, N_CHANNELS, N_CHANNELS))
    for i in range(n):
        for band in range(N_BANDS):
            mix = mixing[band] + 0.15 * rng.standard_normal((N_CHANNELS, N_CHANNELS))
            if gain_channel is not None and band == gain_band:
                mix[gain_channel] *= gain
            signal = centring @ mix @ rng.standard_normal((N_CHANNELS, 200))
            out[i, band] = scales[band] * signal @ signal.T / signal.shape[1]
    return out.astype(np.float32)


def vary_channel(covariances: np.ndarray, seed: int, channel: int, band: int, sd: float):
    """``covariances`` (n, K, C, C) with ``channel``'s signal in ``band`` scaled by a recording's
    own ``exp(sd N(0, 1))`` after the average reference, then referenced again: one channel
    whose power varies a lot between recordings, in everyone."""
    rng = np.random.default_rng(seed)
    centring = np.eye(N_CHANNELS) - 1 / N_CHANNELS
    out = covariances.astype(np.float64)
    for i in range(len(out)):
        scale = np.eye(N_CHANNELS)
        scale[channel, channel] = np.exp(sd * rng.standard_normal())
        out[i, band] = centring @ scale @ out[i, band] @ scale @ centring
    return out.astype(np.float32)


def reference_mean(covariances: np.ndarray) -> np.ndarray:
    """(K, C, C): each band's Riemannian mean of the shrunk matrices (pyRiemann)."""
    shrunk = shrunk_covariances_of(covariances)
    return np.stack([mean_riemann(shrunk[:, band]) for band in range(shrunk.shape[1])])


def shrunk_covariances_of(covariances: np.ndarray) -> np.ndarray:
    return np.stack([shrunk_covariances(c) for c in covariances])


@pytest.fixture(scope="module")
def recordings() -> np.ndarray:
    return simulate_covariances(24, seed=1)


@pytest.fixture(scope="module")
def fitted_path(recordings) -> TangentSpacePath:
    """A path at the recordings' mean with a random binary classifier."""
    path = TangentSpacePath(N_BANDS, N_CHANNELS, 2)
    path.set_reference(reference_mean(recordings))
    rng = np.random.default_rng(3)
    z = torch.from_numpy(rng.standard_normal(n_tangent_features(N_BANDS, N_CHANNELS))).float()
    path.classifier.set_weights(torch.stack([-z / 2, z / 2]), torch.tensor([-0.1, 0.1]))
    return path


def test_shrink_is_pyriemanns_shrinkage_on_rank_deficient_covariances():
    rng = np.random.default_rng(0)
    factors = rng.standard_normal((5, 6, 4))
    covariances = factors @ np.swapaxes(factors, -1, -2) * 1e-10  # rank 4 of 6
    expected = Shrinkage(shrinkage=SHRINKAGE).transform(covariances)
    got = shrink(torch.from_numpy(covariances)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=0)
    batch = shrink(torch.from_numpy(covariances.reshape(1, 5, 6, 6)))  # any leading shape
    np.testing.assert_array_equal(batch.numpy()[0], got)


def test_logm_and_its_gradient_are_right_and_finite_at_the_identity():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 5, 5))
    spd = torch.from_numpy(a @ np.swapaxes(a, -1, -2) + 0.5 * np.eye(5))
    np.testing.assert_allclose(logm(spd).numpy(), pyriemann_logm(spd.numpy()), atol=1e-12)
    assert torch.autograd.gradcheck(lambda x: logm(symmetrise(x)), (spd.clone().requires_grad_(),))
    # at the identity (all eigenvalues equal) the derivative of logm is the identity map
    eye = torch.eye(5, dtype=torch.float64).requires_grad_()
    g = torch.from_numpy(symmetrise(torch.from_numpy(rng.standard_normal((5, 5)))).numpy())
    (logm(eye) * g).sum().backward()
    assert torch.isfinite(eye.grad).all()
    np.testing.assert_allclose(eye.grad.numpy(), g.numpy(), atol=1e-12)
    # two equal eigenvalues among distinct ones
    rotation, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    degenerate = torch.from_numpy(rotation @ np.diag([1.0, 1.0, 2.0, 3.0, 3.0]) @ rotation.T)
    x = degenerate.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: logm(symmetrise(x)), (x,))


def test_the_vectors_are_the_tangent_space_references(recordings):
    path = TangentSpacePath(N_BANDS, N_CHANNELS, 2)
    path.set_reference(reference_mean(recordings))
    shrunk = shrunk_covariances_of(recordings)
    expected = BandTangentSpace().fit(shrunk).transform(shrunk)
    got = path.features(torch.from_numpy(recordings))
    assert got.dtype == torch.float64 and got.shape == expected.shape
    assert expected.shape[1] == N_BANDS * N_CHANNELS * (N_CHANNELS + 1) // 2
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-10)


def test_the_state_dict_round_trips_and_casts_keep_the_reference_float64(fitted_path, recordings):
    covariance = torch.from_numpy(recordings[:4])
    logits = fitted_path(covariance)
    assert logits.dtype == torch.float32 and logits.shape == (4, 2)
    buffer = io.BytesIO()
    torch.save(fitted_path.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert set(state) == {"reference_invsqrt", "classifier.weight", "classifier.bias"}
    loaded = TangentSpacePath(N_BANDS, N_CHANNELS, 2)
    loaded.load_state_dict(state)
    torch.testing.assert_close(loaded(covariance), logits, rtol=0, atol=0)
    assert loaded.reference_invsqrt.dtype == torch.float64
    for dtype in (torch.float32, torch.float64, torch.float16):
        cast = TangentSpacePath(N_BANDS, N_CHANNELS, 2)
        cast.load_state_dict(state)
        cast.to("cpu", dtype)
        assert cast.classifier.weight.dtype == dtype
        assert cast.reference_invsqrt.dtype == torch.float64
        torch.testing.assert_close(
            cast.reference_invsqrt, fitted_path.reference_invsqrt, rtol=0, atol=0
        )
        if dtype != torch.float16:  # half rounds the classifier's weights
            torch.testing.assert_close(cast(covariance.double()), logits, rtol=1e-6, atol=1e-6)


def test_the_baseline_shrinks_to_the_mean_points_and_has_a_zero_vector(fitted_path):
    baseline = baseline_covariance(fitted_path)
    torch.testing.assert_close(shrink(baseline), fitted_path.mean_points(), rtol=1e-12, atol=0)
    vector = fitted_path.features(baseline[None])
    assert vector.abs().max() < 1e-10


def test_integrated_gradients_are_complete(fitted_path, recordings):
    for index, target in ((0, 1), (5, 0)):
        covariance = recordings[index]
        assert average_referenced(torch.from_numpy(covariance).double())
        baseline = attribution_baseline(fitted_path, torch.from_numpy(covariance))[None]
        assert baseline.sum(-1).abs().max() < 1e-12 * baseline.abs().max()  # projected
        attributions, delta = tangent_space_attributions(fitted_path, covariance, target)
        assert attributions.shape == (N_BANDS, N_CHANNELS, N_CHANNELS)
        np.testing.assert_array_equal(attributions, np.swapaxes(attributions, -1, -2))
        logits = fitted_path.logits64(torch.from_numpy(covariance).double()[None])
        difference = float(logits[0, target] - fitted_path.logits64(baseline)[0, target])
        assert abs(difference) > 0.1
        assert abs(delta) < 1e-4 * abs(difference)
        assert attributions.sum() == pytest.approx(difference, rel=1e-4)


def test_a_planted_channel_gain_shows_in_its_band_and_channel():
    channel, band = 3, 1
    controls = simulate_covariances(30, seed=5)
    cases = simulate_covariances(30, seed=6, gain_channel=channel, gain_band=band, gain=2.0)
    covariances = np.concatenate([controls, cases])
    labels = np.repeat([0, 1], 30)
    path = TangentSpacePath(N_BANDS, N_CHANNELS, 2)
    path.set_reference(reference_mean(covariances))
    vectors = path.features(torch.from_numpy(covariances)).numpy()
    fit = LogisticRegression(C=1.0, max_iter=2000).fit(vectors, labels)
    z, b = torch.from_numpy(fit.coef_[0]), float(fit.intercept_[0])
    path.classifier.set_weights(torch.stack([-z / 2, z / 2]), torch.tensor([-b / 2, b / 2]))
    attributions, _ = tangent_space_attributions(path, cases[0], target=1)
    largest = np.unravel_index(np.abs(attributions).argmax(), attributions.shape)
    assert largest[0] == band and channel in largest[1:]
    band_totals = np.abs(attributions).sum((1, 2))
    assert band_totals.argmax() == band
    power = np.diagonal(attributions, axis1=-2, axis2=-1)  # each channel's variance
    assert np.unravel_index(power.argmax(), power.shape) == (band, channel)


def test_log_power_attributions_are_complete_and_keep_the_variances_on_the_diagonal(
    fitted_path, recordings
):
    for index, target in ((0, 1), (5, 0)):
        covariance = torch.from_numpy(recordings[index]).double()
        attributions, delta = log_power_attributions(fitted_path, covariance, target)
        assert attributions.shape == (N_BANDS, N_CHANNELS, N_CHANNELS)
        np.testing.assert_array_equal(attributions, np.swapaxes(attributions, -1, -2))
        baseline = attribution_baseline(fitted_path, covariance)[None]
        logits = fitted_path.logits64(covariance[None])
        difference = float(logits[0, target] - fitted_path.logits64(baseline)[0, target])
        assert abs(difference) > 0.1
        assert abs(delta) < 1e-4 * abs(difference)
        assert attributions.sum() == pytest.approx(difference, rel=1e-4)
    log_variance, correlation = log_variance_correlation(covariance)
    torch.testing.assert_close(log_variance.exp(), torch.diagonal(covariance, dim1=-2, dim2=-1))
    torch.testing.assert_close(
        torch.diagonal(correlation, dim1=-2, dim2=-1), torch.ones(N_BANDS, N_CHANNELS).double()
    )


def test_the_log_power_map_ranks_a_planted_gain_first_where_the_raw_diagonal_does_not():
    """Everyone's channel 6 in band 0 varies a lot in power; cases have a gain on channel 3 in
    band 1. On the raw entries a recording's large change of channel 6's variance is split into
    a large variance part and opposite parts in its row's covariances, so its diagonal cell at
    times outranks the planted one; in log variance and correlation it is one coordinate."""
    channel, band = 3, 1
    controls = vary_channel(simulate_covariances(30, seed=5), 7, 6, 0, 0.5)
    cases = simulate_covariances(30, seed=6, gain_channel=channel, gain_band=band, gain=1.5)
    cases = vary_channel(cases, 8, 6, 0, 0.5)
    covariances = np.concatenate([controls, cases])
    path = TangentSpacePath(N_BANDS, N_CHANNELS, 2)
    path.set_reference(reference_mean(covariances))
    vectors = path.features(torch.from_numpy(covariances)).numpy()
    fit = LogisticRegression(C=1.0, max_iter=2000).fit(vectors, np.repeat([0, 1], 30))
    z, b = torch.from_numpy(fit.coef_[0]), float(fit.intercept_[0])
    path.classifier.set_weights(torch.stack([-z / 2, z / 2]), torch.tensor([-b / 2, b / 2]))
    firsts = {"log power": 0, "raw diagonal": 0}
    for case in cases:
        for name, attribute in (
            ("log power", log_power_attributions),
            ("raw diagonal", tangent_space_attributions),
        ):
            power = np.diagonal(attribute(path, case, 1, 32)[0], axis1=-2, axis2=-1)
            firsts[name] += np.unravel_index(power.argmax(), power.shape) == (band, channel)
    assert firsts["log power"] == len(cases), firsts
    assert firsts["raw diagonal"] < len(cases), firsts
