"""A recording cleaned and tokenised chunk by chunk gives the whole recording's tokens, and its
hash is made in the same pass."""

from __future__ import annotations

import hashlib
import zipfile

import mne
import numpy as np
import pytest
from builders import ica_friendly_raw, synthetic_raw, write_edf

from eegformer_cli.choices import STANDARD_1020
from eegformer_cli.errors import RecordingError
from eegformer_cli.preprocess import PreprocessSettings, output, process_recording
from eegformer_cli.preprocess.recording import process_raw
from eegformer_cli.recordings import chunks, cleaning, reading
from eegformer_cli.recordings.channels import canonical_names, channel_layout

WHOLE = np.inf  # chunk_s: the whole recording at once


def awkward_raw(seconds=400.0, sfreq=500.0) -> mne.io.RawArray:
    """A 500 Hz recording (resampled by 32/125) missing Fz, with Pz marked bad (both
    interpolated), a flat channel in one segment and a 40 mV step in another (both
    rejected)."""
    raw = synthetic_raw(seconds=seconds, sfreq=sfreq).drop_channels(["Fz"])
    data = raw.get_data()
    data[3, int(95 * sfreq) : int(125 * sfreq)] = 0.0  # F3 flat in segment 3 (90-120 s)
    data[5, int(250 * sfreq) :] += 0.04  # a step on F4 in segment 8 (240-270 s)
    raw = mne.io.RawArray(data, raw.info, verbose=False)
    raw.info["bads"] = ["Pz"]
    return raw


def assert_same_tokens(whole, chunked):
    """The acceptance's tolerances: coherence and wPLI within 1e-5, band covariances within
    1e-5 relative, the same segments kept and rejected."""
    np.testing.assert_array_equal(chunked.segment_onsets_s, whole.segment_onsets_s)
    assert chunked.n_segments_rejected == whole.n_segments_rejected
    np.testing.assert_allclose(chunked.coh, whole.coh, rtol=0, atol=1e-5)
    np.testing.assert_allclose(chunked.wpli, whole.wpli, rtol=0, atol=1e-5)
    np.testing.assert_allclose(chunked.covariance, whole.covariance, rtol=1e-5)
    assert chunked.signal_sha256 == whole.signal_sha256
    assert chunked.channels_interpolated == whole.channels_interpolated


@pytest.mark.parametrize("chunk_s", [40.0, 61.0])
def test_chunked_tokens_equal_the_whole_recordings(chunk_s):
    """40 s and 61 s chunks (neither a multiple of the 30 s segments: segments straddle chunks)
    through resampling, interpolation, band-pass, reference and rejection."""
    raw = awkward_raw()
    settings = PreprocessSettings.from_preset("default", max_interpolated=2)
    whole = process_raw(raw, settings, STANDARD_1020, chunk_s=WHOLE)
    chunked = process_raw(raw, settings, STANDARD_1020, chunk_s=chunk_s)
    assert whole.channels_interpolated == ["Fz", "Pz"] and whole.channels_marked_bad == ["Pz"]
    assert whole.n_segments_rejected == 2
    assert whole.n_segments == 11 and 90.0 not in whole.segment_onsets_s
    recording = chunks.ChunkedRecording(
        raw,
        channel_layout(raw, canonical_names(raw), list(STANDARD_1020), 1),
        chunks.Cleaning(128.0, 1.0, 45.0, 5.0),
        "raw",
        chunk_s,
    )
    assert len(list(recording.chunks())) >= 7
    assert_same_tokens(whole, chunked)


def test_chunked_tokens_of_a_cropped_file_read_lazily_equal_the_whole_recordings(tmp_path):
    path = write_edf(synthetic_raw(seconds=300.0, sfreq=256.0), tmp_path / "rec.edf")
    settings = PreprocessSettings.from_preset("default", crop_s=150.0, epoch_length=15.0)
    whole = process_raw(mne.io.read_raw(path, preload=True, verbose=False), settings, chunk_s=WHOLE)
    chunked = process_recording(path, settings, chunk_s=20.0)
    assert whole.n_segments == 10 and whole.duration_s == 300.0
    assert_same_tokens(whole, chunked)
    # the hash covers the whole file, the cropped part too
    assert chunked.signal_sha256 == reading.signal_sha256(mne.io.read_raw(path, verbose=False))


def test_fft_resampling_of_earlier_settings_is_one_chunk_and_differs_from_polyphase():
    """Settings stored without a resampling method (by earlier versions) keep MNE's FFT method,
    whose output depends on the whole recording; polyphase changes the tokens only slightly."""
    raw = synthetic_raw(seconds=120.0, sfreq=500.0)
    stored = PreprocessSettings.from_preset("default").to_dict()
    del stored["resample_method"]
    earlier = PreprocessSettings.from_dict(stored)
    assert earlier.resample_method == "fft"
    assert earlier.settings_hash() != PreprocessSettings.from_preset("default").settings_hash()
    fft = process_raw(raw, earlier, chunk_s=20.0)
    np.testing.assert_array_equal(fft.coh, process_raw(raw, earlier, chunk_s=WHOLE).coh)
    polyphase = process_raw(raw, PreprocessSettings.from_preset("default"))
    assert 0 < np.abs(fft.coh - polyphase.coh).max() < 0.05


def test_the_signal_hash_is_of_the_samples_in_time_order_whatever_the_chunks(tmp_path):
    raw = synthetic_raw(seconds=30.0, sfreq=256.0, n_channels=5)
    data = raw.get_data()
    expected = "v2:" + hashlib.sha256(data.T.astype("<f8").tobytes()).hexdigest()
    assert reading.signal_sha256(raw) == expected
    streamed = reading.SignalHash()
    for start in range(0, data.shape[1], 1000):
        streamed.update(data[:, start : start + 1000])
    assert streamed.hexdigest() == expected
    reader = chunks.SourceReader(raw, tmp_path, reading.SignalHash())
    for start, stop in [(0, 900), (700, 2500), (2400, 4000)]:  # overlapping spans, as chunks
        reader.read(start, stop)
    reader.finish()
    assert reader.signal_hash.hexdigest() == expected


def test_the_channel_major_hash_of_earlier_versions_is_unchanged():
    """What earlier versions stored (``raw.get_data()``'s bytes), read in bounded pieces."""
    raw = synthetic_raw(seconds=700.0, sfreq=256.0, n_channels=3)  # 179,200 > 2**16 samples
    expected = hashlib.sha256(raw.get_data().astype("<f8").tobytes()).hexdigest()
    assert reading.channel_major_sha256(raw) == expected
    assert reading.needs_channel_major_hash([expected, "v2:ab"])
    assert not reading.needs_channel_major_hash(["v2:ab"]) and not reading.needs_channel_major_hash(
        []
    )


def test_a_nan_in_a_late_chunk_names_every_channel_holding_one():
    raw = synthetic_raw(seconds=200.0, sfreq=128.0)
    data = raw.get_data()
    data[2, 20_000] = np.nan
    data[7, 25_000] = np.inf
    raw = mne.io.RawArray(data, raw.info, verbose=False)
    with pytest.raises(RecordingError, match=r"NaN or infinite values \(channels F7, T3\)"):
        process_raw(raw, PreprocessSettings.from_preset("default"), chunk_s=30.0)


def test_ica_fitted_on_the_whole_short_recording_and_applied_per_chunk_equals_the_whole():
    raw = ica_friendly_raw(seconds=65.0)
    settings = PreprocessSettings.from_preset("paper", sfreq=128.0, ica_n_components=6)
    whole = process_raw(raw, settings, chunk_s=WHOLE)
    chunked = process_raw(raw, settings, chunk_s=20.0)
    assert chunked.ica_excluded == whole.ica_excluded
    assert_same_tokens(whole, chunked)


def test_ica_beyond_its_longest_fit_sees_blocks_of_the_cleaned_recording(monkeypatch):
    """The fit's blocks are the whole cleaned recording's samples (here with the longest fit
    lowered to 60 s as 6 blocks of 10 s), and ICA then runs on such a recording."""
    monkeypatch.setattr(cleaning, "ICA_FIT_MAX_S", 60.0)
    monkeypatch.setattr(cleaning, "ICA_FIT_BLOCKS", 6)
    raw = ica_friendly_raw(seconds=185.0)
    layout = channel_layout(raw, canonical_names(raw), list(raw.ch_names), 0)
    steps = chunks.Cleaning(128.0, 1.0, 45.0, "auto")
    recording = chunks.ChunkedRecording(raw, layout, steps, "raw", 25.0)
    spans = cleaning.ica_fit_spans(recording.n_times, 128.0)
    assert len(spans) == 6 and spans[-1][1] == recording.n_times == 185 * 128
    whole = chunks.ChunkedRecording(raw, layout, steps, "raw", WHOLE).cleaned(
        [(0, recording.n_times)], referenced=False
    )
    expected = np.concatenate([whole[:, start:stop] for start, stop in spans], axis=1)
    np.testing.assert_allclose(recording.cleaned(spans, referenced=False), expected, atol=1e-18)
    settings = PreprocessSettings.from_preset("paper", sfreq=128.0, ica_n_components=6)
    connectome = process_raw(raw, settings, chunk_s=25.0)
    assert connectome.n_segments == 6 and np.isfinite(connectome.coh).all()


def test_a_compressed_fif_is_loaded_whole_and_gives_the_tokens_of_its_uncompressed_twin(tmp_path):
    raw = synthetic_raw(seconds=90.0, sfreq=256.0)
    raw.save(tmp_path / "rec_raw.fif", verbose=False)
    raw.save(tmp_path / "rec_raw.fif.gz", verbose=False)
    assert reading.reads_lazily(tmp_path / "rec_raw.fif")
    assert not reading.reads_lazily(tmp_path / "rec_raw.fif.gz")
    settings = PreprocessSettings.from_preset("default")
    plain = process_recording(tmp_path / "rec_raw.fif", settings, chunk_s=30.0)
    compressed = process_recording(tmp_path / "rec_raw.fif.gz", settings, chunk_s=30.0)
    assert_same_tokens(plain, compressed)


def _members(path) -> dict[str, bytes]:
    """The ``.npy`` members of an ``.npz``, their bytes as stored (decompressed)."""
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_tokens_streamed_to_files_give_the_file_of_the_tokens_held_in_memory(tmp_path):
    """A recording forced into many chunks: its tokens written to temporary files as they come
    (what ``eegformer preprocess`` does) give a connectome file whose members are byte for byte
    those of the tokens held in memory and of ``np.savez_compressed`` (the format of earlier
    versions), and the temporary files are gone."""
    path = write_edf(synthetic_raw(seconds=300.0, sfreq=256.0), tmp_path / "rec.edf")
    settings = PreprocessSettings.from_preset("default", epoch_length=15.0)
    in_memory = process_recording(path, settings, chunk_s=40.0)
    out = tmp_path / "out" / "rec.npz"
    with output.TokenFiles(out) as token_files:
        streamed = process_recording(path, settings, chunk_s=40.0, token_store=token_files)
        assert isinstance(streamed.coh, np.memmap) and token_files.n_segments == 20
        token_files.save(streamed, out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["rec.npz"]
    in_memory.save(tmp_path / "memory.npz")
    np.savez_compressed(tmp_path / "savez.npz", **in_memory._members())
    assert _members(out) == _members(tmp_path / "memory.npz") == _members(tmp_path / "savez.npz")
    assert_same_tokens(in_memory, output.load_connectome(out))


def test_a_failure_while_the_tokens_stream_or_the_file_is_written_leaves_nothing(
    tmp_path, monkeypatch
):
    """A recording that fails half-way (its tokens partly written) and a connectome file whose
    writing fails half-way (after its token members) leave no file behind, temporary or not."""
    raw = synthetic_raw(seconds=300.0, sfreq=256.0)
    data = raw.get_data()
    data[4, int(200 * 256) :] = np.nan  # read in the last chunks, after tokens were written
    path = write_edf(raw, tmp_path / "rec.edf")
    out = tmp_path / "out" / "rec.npz"
    settings = PreprocessSettings.from_preset("default", epoch_length=15.0)
    nan_path = tmp_path / "nan_raw.fif"
    mne.io.RawArray(data, raw.info, verbose=False).save(nan_path, verbose=False)
    with pytest.raises(RecordingError, match="NaN"), output.TokenFiles(out) as token_files:
        process_recording(nan_path, settings, chunk_s=40.0, token_store=token_files)
    assert token_files.n_segments > 0 and list(out.parent.iterdir()) == []

    written = []

    def failing_write_array(member, array, **kwargs):
        written.append(array)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", failing_write_array)
    with pytest.raises(OSError, match="No space"), output.TokenFiles(out) as token_files:
        connectome = process_recording(path, settings, chunk_s=40.0, token_store=token_files)
        token_files.save(connectome, out)
    assert len(written) == 1 and list(out.parent.iterdir()) == []
