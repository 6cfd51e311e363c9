"""Cleaning steps on synthetic recordings with known content, and ICA on a real one."""

from __future__ import annotations

import mne
import numpy as np
import pytest

from eegformer_cli.errors import RecordingError
from eegformer_cli.recordings import cleaning
from eegformer_cli.recordings.channels import normalise_channels

SFREQ = 128.0


def sines(freqs, seconds=60.0, sfreq=SFREQ, amplitude=1e-5) -> np.ndarray:
    """One channel per frequency, each a pure sine (volts): (n_freqs, n_times)."""
    t = np.arange(int(seconds * sfreq)) / sfreq
    return np.array([amplitude * np.sin(2 * np.pi * f * t) for f in freqs])


def gain_db(before: np.ndarray, after: np.ndarray, sfreq=SFREQ) -> np.ndarray:
    """Per-channel gain in dB, judged away from the edges."""
    middle = slice(int(10 * sfreq), int(50 * sfreq))
    return 20 * np.log10(after[:, middle].std(axis=1) / before[:, middle].std(axis=1))


def test_bandpass_default_transition_removes_50_and_60_hz_line_noise():
    data = sines([10, 40, 50, 60])
    original = data.copy()
    gains = gain_db(data, cleaning.bandpass(data, SFREQ, 1, 45, cleaning.LINE_NOISE_H_TRANS_HZ))
    np.testing.assert_allclose(gains[:2], 0, atol=0.1)  # 10 and 40 Hz pass
    assert gains[2] < -40 and gains[3] < -40  # 50 and 60 Hz line noise removed
    np.testing.assert_array_equal(data, original)  # input untouched


def test_bandpass_is_what_raw_filter_does():
    data = np.random.default_rng(3).standard_normal((3, 3000)) * 1e-5
    raw = mne.io.RawArray(data.copy(), mne.create_info(3, SFREQ, "eeg"), verbose=False)
    raw.filter(1, 45, h_trans_bandwidth=5.0, verbose=False)
    np.testing.assert_array_equal(cleaning.bandpass(data, SFREQ, 1, 45, 5.0), raw.get_data())


def test_mne_automatic_transition_would_leave_50_hz_line_noise():
    """Why the default preset narrows the upper transition band: MNE's rule keeps 50 Hz."""
    gains = gain_db(sines([50]), cleaning.bandpass(sines([50]), SFREQ, 1, 45, "auto"))
    assert gains[0] > -10


@pytest.mark.parametrize("source_sfreq", [500.0, 256.0, 250.0, 199.99])
def test_polyphase_resampling_keeps_the_band_and_removes_aliases(source_sfreq):
    """10 and 40 Hz pass unchanged (within 0.3 %), 100 Hz (which would fold onto 28 Hz) is gone
    (< -60 dB)."""
    data = sines([10, 40, 100], seconds=60, sfreq=source_sfreq)
    resampled = cleaning.resample(data, source_sfreq, SFREQ, "polyphase")
    assert resampled.shape[1] == cleaning.resampled_length(
        data.shape[1], source_sfreq, SFREQ, "polyphase"
    )
    assert abs(resampled.shape[1] - 60 * SFREQ) <= 1
    middle = slice(1280, 60 * 128 - 1280)
    expected = sines([10, 40], seconds=60)[:, middle]
    np.testing.assert_allclose(resampled[:2, middle], expected, rtol=0, atol=3e-3 * 1e-5)
    assert 20 * np.log10(resampled[2, middle].std() / data[2].std()) < -60


def test_polyphase_resampling_of_a_chunk_equals_the_whole_away_from_its_edges():
    data = np.random.default_rng(4).standard_normal((2, 50_000))
    whole = cleaning.resample(data, 500.0, SFREQ, "polyphase")
    up, down = cleaning.resample_factors(500.0, SFREQ)
    assert (up, down) == (32, 125)
    reach = cleaning.resample_reach(500.0, SFREQ)
    start, stop = 125 * 100, 125 * 300  # a multiple of down: 3,200 and 9,600 at 128 Hz
    part = cleaning.resample(data[:, start - 125 * 4 : stop + 125 * 4], 500.0, SFREQ, "polyphase")
    assert reach < 125 * 4
    np.testing.assert_allclose(part[:, 128 : 128 + 6400], whole[:, 3200:9600], rtol=0, atol=1e-12)


def test_resampling_to_the_same_rate_is_no_copy_and_fft_is_mne_raw_resample():
    data = sines([10], sfreq=500.0, seconds=10)
    assert cleaning.resample(data, 500.0, 500.0, "polyphase") is data
    raw = mne.io.RawArray(data.copy(), mne.create_info(1, 500.0, "eeg"), verbose=False)
    np.testing.assert_array_equal(
        cleaning.resample(data, 500.0, SFREQ, "fft"), raw.resample(SFREQ, verbose=False).get_data()
    )


def test_average_reference_is_mne_average_reference():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((4, 1000)) * 1e-5 + 3e-5
    raw = mne.io.RawArray(data.copy(), mne.create_info(4, SFREQ, "eeg"), verbose=False)
    raw.set_eeg_reference("average", projection=False, verbose=False)
    referenced = cleaning.average_reference(data)
    np.testing.assert_allclose(referenced, raw.get_data(), rtol=0, atol=1e-20)
    np.testing.assert_allclose(referenced.mean(axis=0), 0, atol=1e-20)
    assert abs(data.mean()) > 1e-5  # input untouched


@pytest.mark.parametrize(
    "duration, expected",
    [(60, 15), (62, 15), (182, 30), (3600, 30), (20, 6), (5, 6), (120, 30), (100, 24)],
)
def test_auto_epoch_length(duration, expected):
    assert cleaning.auto_epoch_length(duration) == expected


def test_segment_cuts_consecutive_windows_and_drops_the_tail():
    data = sines([5, 7, 11], seconds=40)
    segments, onsets = cleaning.segment(data, SFREQ, 9.0)
    assert segments.shape == (4, 3, 3, 384)  # 4 x 9 s in 40 s; 3 windows of 3 s; 3 channels
    np.testing.assert_allclose(onsets, [0, 9, 18, 27])
    start = int(18 * SFREQ) + 384  # segment 2, window 1
    np.testing.assert_array_equal(segments[2, 1], data[:, start : start + 384])
    assert cleaning.segment(data[:, :700], SFREQ, 9.0)[0].shape == (0, 3, 3, 384)


def test_a_recording_shorter_than_an_epoch_is_a_recording_error():
    with pytest.raises(RecordingError, match="too short: 5.0 s"):
        cleaning.check_holds_an_epoch(5 * 128, SFREQ, 6.0)
    cleaning.check_holds_an_epoch(6 * 128, SFREQ, 6.0)


def test_crop_length_and_a_recording_too_short_for_it():
    assert cleaning.crop_length(1000, SFREQ, 6.0) == 768
    assert cleaning.crop_length(768, SFREQ, 6.0) == 768
    with pytest.raises(RecordingError, match="too short for a crop of 8 s: 6.0 s long"):
        cleaning.crop_length(768, SFREQ, 8.0)


def test_ica_fits_on_the_whole_recording_up_to_30_minutes_and_on_30_blocks_beyond():
    sfreq = 250.0
    assert cleaning.ica_fit_spans(int(1800 * sfreq), sfreq) == [(0, 450_000)]
    spans = cleaning.ica_fit_spans(int(8 * 3600 * sfreq), sfreq)
    assert len(spans) == 30 and all(stop - start == 15_000 for start, stop in spans)  # 1 min
    assert spans[0][0] == 0 and spans[-1][1] == 8 * 3600 * 250  # first to last minute
    gaps = np.diff([start for start, _ in spans])
    assert gaps.max() - gaps.min() <= 1  # evenly spread


def test_reject_segments_flags_flat_and_absurd_channels_only():
    rng = np.random.default_rng(1)
    segments = rng.standard_normal((4, 5, 3, 384)) * 2e-5  # ~100 uV peak-to-peak
    segments[1, :, 2] = 0.0  # channel C flat for the whole segment
    segments[2, :2, 2] = 0.0  # flat in 2 of 5 windows only: kept
    segments[3, 4, 0, 100] = 0.05  # a 50 mV spike on channel A
    keep, reasons = cleaning.reject_segments(segments, ["A", "B", "C"])
    np.testing.assert_array_equal(keep, [True, False, True, False])
    assert reasons[0] == "flat channel C"
    assert reasons[1].startswith("peak-to-peak above 25 mV on A")
    keep, _ = cleaning.reject_segments(segments, ["A", "B", "C"], None, None)
    assert keep.all()


@pytest.mark.slow
def test_thresholds_keep_every_segment_of_real_recordings(msu_dir, eegmat_dir):
    """The documented choice: the real datasets lose no segment to rejection. These are the
    recordings with the largest (msu sub-021) and smallest (eegmat Subject09_1) amplitudes."""
    for path in (
        msu_dir / "eeg" / "sub-021_task-rest_eeg.edf",
        eegmat_dir / "eeg" / "Subject09_1.edf",
    ):
        raw, _ = normalise_channels(mne.io.read_raw_edf(path, preload=True, verbose=False))
        resampled = cleaning.resample(raw.get_data(), raw.info["sfreq"], SFREQ, "polyphase")
        segments, _ = cleaning.segment(cleaning.bandpass(resampled, SFREQ, 1, 45, 5.0), SFREQ, 15.0)
        keep, reasons = cleaning.reject_segments(segments, raw.ch_names)
        assert keep.all(), reasons


@pytest.mark.slow
def test_ica_iclabel_is_reproducible_and_keeps_the_shape(eegmat_dir):
    raw, _ = normalise_channels(
        mne.io.read_raw_edf(eegmat_dir / "eeg" / "Subject00_2.edf", preload=True, verbose=False)
    )
    data = cleaning.resample(raw.get_data(), raw.info["sfreq"], SFREQ, "polyphase")
    data = cleaning.average_reference(cleaning.bandpass(data, SFREQ, 1, 45))[:, : 30 * 128]
    info = mne.create_info(raw.ch_names, SFREQ, "eeg")
    raw = mne.io.RawArray(data, info, verbose=False)
    ica, excluded = cleaning.fit_ica_iclabel(raw, n_components=6, random_state=0)
    again, _ = cleaning.fit_ica_iclabel(raw, n_components=6, random_state=0)
    first = cleaning.apply_ica(ica, data, info)
    assert first.shape == data.shape
    np.testing.assert_array_equal(first, cleaning.apply_ica(again, data, info))
    assert set(excluded) <= {
        "muscle artifact",
        "eye blink",
        "heart beat",
        "line noise",
        "channel noise",
    }
    # Removing components changes the data exactly when some were excluded.
    assert np.allclose(first, data) == (not excluded)
    # one sample at a time: applied to a chunk, the chunk's samples of the whole
    np.testing.assert_allclose(
        cleaning.apply_ica(ica, data[:, 1000:2000], info), first[:, 1000:2000], rtol=1e-12
    )
