"""Bands and connectivity tokens on signals whose coupling is known by construction."""

from __future__ import annotations

import numpy as np
import pytest
from mne_connectivity import spectral_connectivity_epochs

from eegformer_cli.connectivity.bands import (
    BAND_PRESETS,
    Band,
    RatioBand,
    band_edges_hz,
    bands_to_spec,
    check_bands_fit_rate,
    parse_bands,
)
from eegformer_cli.connectivity.tokens import (
    recording_connectivity,
    recording_tokens,
    segment_connectivity,
)
from eegformer_cli.errors import RecordingError, UsageError

SFREQ = 128.0


def coupled_windows(n_windows=10, seed=0, lag_rad=np.pi / 2):
    """(n_windows, 3, 384): channels 0 and 1 share a 10 Hz rhythm with a fixed phase lag and a
    random phase per window; channel 2 is independent noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(3 * SFREQ)) / SFREQ
    windows = rng.standard_normal((n_windows, 3, t.size)) * 0.5
    for window in windows:
        phase = rng.uniform(0, 2 * np.pi)
        window[0] += np.sin(2 * np.pi * 10 * t + phase)
        window[1] += np.sin(2 * np.pi * 10 * t + phase + lag_rad)
    return windows * 1e-5


def test_parse_bands_reads_plain_and_ratio_bands_in_order():
    bands = parse_bands("delta:2-4, theta:4-8,tbr:4-8/12-30,hi:30.5-44.5")
    assert bands == (
        Band("delta", 2, 4),
        Band("theta", 4, 8),
        RatioBand("tbr", Band("tbr numerator", 4, 8), Band("tbr denominator", 12, 30)),
        Band("hi", 30.5, 44.5),
    )
    assert parse_bands(bands_to_spec(bands)) == bands


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("delta", "NAME:LOW-HIGH"),
        ("delta:4-2", "0 < LOW < HIGH"),
        ("a:1-2,a:2-3", "twice"),
        ("x:1-2/3", "NAME:LOW-HIGH"),
        ("", "NAME:LOW-HIGH"),
    ],
)
def test_parse_bands_rejects_bad_specs_naming_the_option(spec, fragment):
    with pytest.raises(UsageError, match="--bands") as info:
        parse_bands(spec)
    assert fragment in str(info.value)


def test_presets_match_the_reference():
    default, paper = BAND_PRESETS["default"], BAND_PRESETS["paper"]
    assert [b.name for b in default] == [
        "delta",
        "theta",
        "low_alpha",
        "high_alpha",
        "low_beta",
        "mid_beta",
        "high_beta",
        "gamma",
    ]
    assert paper[:8] == default and paper[8].name == "theta_beta_ratio"
    edges = band_edges_hz(paper)
    assert edges.dtype == np.float64 and edges.shape == (9, 2)
    np.testing.assert_allclose(edges[0], [2, 4])
    np.testing.assert_allclose(edges[8], [4 / 12, 8 / 30])


def test_rate_too_low_for_a_band_names_band_and_rate():
    check_bands_fit_rate(BAND_PRESETS["default"], 128.0)
    with pytest.raises(RecordingError) as info:
        check_bands_fit_rate(BAND_PRESETS["default"], 64.0)
    message = info.value.one_line()
    assert "64 Hz" in message and "'gamma'" in message and "--bands" in message


def test_coupled_channels_have_high_coherence_and_wpli_in_their_band_only():
    bands = BAND_PRESETS["default"]
    coh, wpli = segment_connectivity(coupled_windows(), SFREQ, bands)
    assert coh.shape == wpli.shape == (8, 3, 3)
    assert coh.dtype == wpli.dtype == np.float32
    for tokens in (coh, wpli):
        np.testing.assert_array_equal(tokens, tokens.transpose(0, 2, 1))
        assert np.all(np.diagonal(tokens, axis1=1, axis2=2) == 0)
        assert tokens.min() >= 0 and tokens.max() <= 1 + 1e-6
    # 10 Hz is the shared edge of low_alpha (8-10) and high_alpha (10-12): both see it.
    alpha = [2, 3]
    assert coh[alpha, 0, 1].min() > 0.5 and wpli[alpha, 0, 1].min() > 0.8
    assert coh[alpha, 0, 2].max() < 0.4 and wpli[alpha, 0, 2].max() < 0.6
    assert coh[[0, 5, 7], 0, 1].max() < 0.4


def test_zero_lag_coupling_has_coherence_but_no_wpli():
    coh, wpli = segment_connectivity(coupled_windows(lag_rad=0.0), SFREQ, BAND_PRESETS["default"])
    assert coh[3, 0, 1] > 0.5
    assert wpli[3, 0, 1] < 0.5  # volume conduction (zero lag) is what wPLI ignores


def mne_connectivity_tokens(windows, sfreq, bands):
    """The reference computation: one spectral_connectivity_epochs call, mirrored."""
    results = spectral_connectivity_epochs(
        windows,
        method=["coh", "wpli"],
        sfreq=sfreq,
        mode="multitaper",
        fmin=[b.f_low for b in bands],
        fmax=[b.f_high for b in bands],
        faverage=True,
        verbose=False,
    )
    return [
        np.moveaxis(d + d.transpose(1, 0, 2), -1, 0)
        for d in (result.get_data("dense") for result in results)
    ]


@pytest.mark.parametrize(
    "n_windows, n_channels, sfreq", [(10, 3, 128.0), (5, 16, 128.0), (4, 7, 250.0), (2, 5, 100.0)]
)
def test_tokens_equal_spectral_connectivity_epochs(n_windows, n_channels, sfreq):
    """Our vectorised multitaper estimator reproduces mne-connectivity (see tokens.py)."""
    rng = np.random.default_rng(n_channels)
    windows = rng.standard_normal((n_windows, n_channels, int(3 * sfreq))) * 1e-5
    windows[:, 1] += 0.6 * np.roll(windows[:, 0], 2, axis=-1)  # a lagged coupling
    bands = BAND_PRESETS["default"] + (Band("odd", 7.3, 13.1),)
    coh, wpli = segment_connectivity(windows, sfreq, bands)
    expected_coh, expected_wpli = mne_connectivity_tokens(windows, sfreq, bands)
    np.testing.assert_allclose(coh, expected_coh, atol=1e-6)
    np.testing.assert_allclose(wpli, expected_wpli, atol=1e-6)
    assert expected_coh[:, 1, 0].max() > 0.3  # the coupling is visible, so the check has teeth


def test_ratio_token_is_theta_over_beta_with_zero_where_undefined():
    windows = coupled_windows(seed=4)
    paper = BAND_PRESETS["paper"]
    coh, wpli = segment_connectivity(windows, SFREQ, paper)
    parts = (Band("theta", 4, 8), Band("beta", 12, 30))
    coh_parts, wpli_parts = segment_connectivity(windows, SFREQ, parts)
    for tokens, part in ((coh, coh_parts), (wpli, wpli_parts)):
        off_diagonal = ~np.eye(3, dtype=bool)
        np.testing.assert_allclose(
            tokens[8][off_diagonal], part[0][off_diagonal] / part[1][off_diagonal], rtol=1e-5
        )
        assert np.all(np.diagonal(tokens[8]) == 0)  # 0/0 -> 0, as the reference
        np.testing.assert_array_equal(tokens[1], part[0])


def test_recording_connectivity_equals_one_mne_call_per_segment():
    segments = np.stack([coupled_windows(n_windows=5, seed=s) for s in range(3)])
    bands = BAND_PRESETS["paper"]
    coh, wpli = recording_connectivity(segments, SFREQ, bands)
    assert coh.shape == wpli.shape == (3, 9, 3, 3)
    for index, windows in enumerate(segments):
        expected_coh, expected_wpli = mne_connectivity_tokens(windows, SFREQ, bands[:8])
        np.testing.assert_allclose(coh[index, :8], expected_coh, atol=1e-6)
        np.testing.assert_allclose(wpli[index, :8], expected_wpli, atol=1e-6)


def test_band_covariance_is_the_variance_of_the_band_in_volts_squared():
    """A 6 Hz sine of 20 uV on one of 5 channels, weak noise, average reference: its variance
    (A^2 / 2, shared out by the reference) lies in theta alone; the matrices are symmetric,
    positive semi-definite and of rank C - 1; the ratio token has none."""
    rng = np.random.default_rng(0)
    n_times, amplitude = int(3 * SFREQ), 20e-6
    t = np.arange(4 * 5 * n_times) / SFREQ
    signal = rng.standard_normal((5, t.size)) * 0.1e-6
    signal[0] += amplitude * np.sin(2 * np.pi * 6 * t)
    signal -= signal.mean(axis=0)  # average reference
    segments = signal.reshape(5, 4, 5, n_times).transpose(1, 2, 0, 3)  # 4 segments x 5 windows
    coh, _, covariance = recording_tokens(segments, SFREQ, BAND_PRESETS["paper"])
    assert coh.shape[1] == 9 and covariance.shape == (8, 5, 5)  # no theta/beta covariance
    assert covariance.dtype == np.float32
    sine = amplitude * np.sin(2 * np.pi * 6 * t)
    referenced = np.outer([0.8, -0.2, -0.2, -0.2, -0.2], sine)
    np.testing.assert_allclose(
        covariance[1], referenced @ referenced.T / t.size, rtol=0.01, atol=1e-13
    )
    others = np.delete(covariance, 1, axis=0)
    assert np.abs(others).max() < 0.01 * covariance[1, 0, 0]
    for band, matrix in enumerate(covariance.astype(np.float64)):
        np.testing.assert_array_equal(matrix, matrix.T)
        eigenvalues = np.linalg.eigvalsh(matrix)
        assert abs(eigenvalues[0]) < 1e-5 * eigenvalues[-1]  # the all-ones direction
        assert np.abs(matrix @ np.ones(5)).max() < 1e-5 * eigenvalues[-1]
        if band >= 3:  # 10 Hz and up, noise alone: rank C - 1
            assert eigenvalues[1] > 1e-2 * eigenvalues[-1]
