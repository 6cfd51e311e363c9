"""Cleaning steps on synthetic recordings with known content, and ICA on a real one."""

from __future__ import annotations

import mne
import numpy as np
import pytest

from eegformer_cli.errors import RecordingError
from eegformer_cli.recordings import cleaning
from eegformer_cli.recordings.channels import normalise_channels

SFREQ = 128.0


def sine_raw(freqs, seconds=60.0, sfreq=SFREQ, amplitude=1e-5):
    """One channel per frequency, each a pure sine (volts)."""
    t = np.arange(int(seconds * sfreq)) / sfreq
    data = np.array([amplitude * np.sin(2 * np.pi * f * t) for f in freqs])
    return mne.io.RawArray(
        data, mne.create_info([f"s{i}" for i in range(len(freqs))], sfreq, "eeg"), verbose=False
    )


def gain_db(before: mne.io.BaseRaw, after: mne.io.BaseRaw) -> np.ndarray:
    """Per-channel gain in dB, judged away from the edges."""
    middle = slice(int(10 * SFREQ), int(50 * SFREQ))
    return 20 * np.log10(
        after.get_data()[:, middle].std(axis=1) / before.get_data()[:, middle].std(axis=1)
    )


def test_bandpass_default_transition_removes_50_and_60_hz_line_noise():
    raw = sine_raw([10, 40, 50, 60])
    original = raw.get_data().copy()
    gains = gain_db(raw, cleaning.bandpass(raw, 1, 45, cleaning.LINE_NOISE_H_TRANS_HZ))
    np.testing.assert_allclose(gains[:2], 0, atol=0.1)  # 10 and 40 Hz pass
    assert gains[2] < -40 and gains[3] < -40  # 50 and 60 Hz line noise removed
    np.testing.assert_array_equal(raw.get_data(), original)  # input untouched


def test_mne_automatic_transition_would_leave_50_hz_line_noise():
    """Why the default preset narrows the upper transition band: MNE's rule keeps 50 Hz."""
    gains = gain_db(sine_raw([50]), cleaning.bandpass(sine_raw([50]), 1, 45, "auto"))
    assert gains[0] > -10


def test_resample_returns_a_new_raw_at_the_rate():
    raw = sine_raw([10], sfreq=500.0, seconds=10)
    resampled = cleaning.resample(raw, SFREQ)
    assert resampled.info["sfreq"] == SFREQ and raw.info["sfreq"] == 500.0
    assert resampled.n_times == 10 * SFREQ
    same = cleaning.resample(resampled, SFREQ)
    assert same is not resampled and same.n_times == resampled.n_times


def test_average_reference_zeroes_the_channel_mean():
    rng = np.random.default_rng(0)
    raw = mne.io.RawArray(
        rng.standard_normal((4, 1000)) * 1e-5 + 3e-5,
        mne.create_info(4, SFREQ, "eeg"),
        verbose=False,
    )
    referenced = cleaning.average_reference(raw)
    np.testing.assert_allclose(referenced.get_data().mean(axis=0), 0, atol=1e-20)
    assert abs(raw.get_data().mean()) > 1e-5  # input untouched


@pytest.mark.parametrize(
    "duration, expected",
    [(60, 15), (62, 15), (182, 30), (3600, 30), (20, 6), (5, 6), (120, 30), (100, 24)],
)
def test_auto_epoch_length(duration, expected):
    assert cleaning.auto_epoch_length(duration) == expected


def test_segment_cuts_consecutive_windows_and_drops_the_tail():
    raw = sine_raw([5, 7, 11], seconds=40)
    segments, onsets = cleaning.segment(raw, 9.0)
    assert segments.shape == (4, 3, 3, 384)  # 4 x 9 s in 40 s; 3 windows of 3 s; 3 channels
    np.testing.assert_allclose(onsets, [0, 9, 18, 27])
    data = raw.get_data()
    start = int(18 * SFREQ) + 384  # segment 2, window 1
    np.testing.assert_array_equal(segments[2, 1], data[:, start : start + 384])


def test_segment_of_a_too_short_recording_is_a_recording_error():
    with pytest.raises(RecordingError, match="too short: 5.0 s"):
        cleaning.segment(sine_raw([10], seconds=5), 6.0)


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


def test_thresholds_keep_every_segment_of_real_recordings(msu_dir, eegmat_dir):
    """The documented choice: the real datasets lose no segment to rejection. These are the
    recordings with the largest (msu sub-021) and smallest (eegmat Subject09_1) amplitudes."""
    for path in (
        msu_dir / "eeg" / "sub-021_task-rest_eeg.edf",
        eegmat_dir / "eeg" / "Subject09_1.edf",
    ):
        raw, _ = normalise_channels(mne.io.read_raw_edf(path, preload=True, verbose=False))
        filtered = cleaning.bandpass(cleaning.resample(raw, SFREQ), 1, 45, 5.0)
        segments, _ = cleaning.segment(filtered, 15.0)
        keep, reasons = cleaning.reject_segments(segments, filtered.ch_names)
        assert keep.all(), reasons


def test_ica_iclabel_is_reproducible_and_keeps_the_shape(eegmat_dir):
    raw, _ = normalise_channels(
        mne.io.read_raw_edf(eegmat_dir / "eeg" / "Subject00_2.edf", preload=True, verbose=False)
    )
    raw = cleaning.average_reference(cleaning.bandpass(cleaning.resample(raw, SFREQ), 1, 45))
    raw.crop(0, 30)
    first, excluded = cleaning.run_ica_iclabel(raw, n_components=6, random_state=0)
    second, _ = cleaning.run_ica_iclabel(raw, n_components=6, random_state=0)
    assert first.get_data().shape == raw.get_data().shape
    np.testing.assert_array_equal(first.get_data(), second.get_data())
    assert set(excluded) <= {
        "muscle artifact",
        "eye blink",
        "heart beat",
        "line noise",
        "channel noise",
    }
    # Removing components changes the data exactly when some were excluded.
    assert np.allclose(first.get_data(), raw.get_data()) == (not excluded)
