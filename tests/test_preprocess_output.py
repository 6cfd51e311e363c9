"""The preprocess output format (preprocess/output.py), on small synthetic files: what is written
is read back, and a damaged connectome gives the same one-line error through every reader."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eegformer_cli.errors import InputDataError
from eegformer_cli.preprocess import output
from eegformer_cli.recordings import demographics

CHANNELS, BANDS = ["Fz", "Cz", "Pz"], ["theta", "alpha"]


def _connectome(n_segments: int = 4, covariance: bool = True) -> output.Connectome:
    rng = np.random.default_rng(0)
    shape = (n_segments, len(BANDS), len(CHANNELS), len(CHANNELS))
    return output.Connectome(
        coh=rng.random(shape, dtype=np.float32),
        wpli=rng.random(shape, dtype=np.float32),
        channels=CHANNELS,
        bands=BANDS,
        band_edges_hz=np.array([[4.0, 8.0], [8.0, 13.0]]),
        sfreq=128.0,
        segment_onsets_s=np.arange(n_segments) * 15.0,
        duration_s=60.0,
        epoch_length_s=15.0,
        channels_interpolated=["Pz"],
        channels_marked_bad=["Pz"],
        n_segments_rejected=1,
        source_sfreq=256.0,
        signal_sha256="ab12",
        covariance=np.ones((2, 3, 3), np.float32) if covariance else None,
        covariance_bands=BANDS if covariance else [],
    )


def test_a_saved_connectome_reads_back_through_every_reader(tmp_path):
    connectome = _connectome()
    path = tmp_path / "rec.npz"
    connectome.save(path)
    channels, bands, edges = output.read_layout(path)
    assert (channels, bands) == (CHANNELS, BANDS) and edges.dtype == np.float64
    assert output.read_segment_count(path) == 4
    from_file = output.read_tokens(path, CHANNELS, BANDS, 4, "rec")
    in_memory = output.read_tokens(connectome, CHANNELS, BANDS, 4, "rec")
    for a, b in zip(from_file, in_memory):
        np.testing.assert_array_equal(a, b)
    assert output.read_covariances(path, 3, "rec").shape == (2, 3, 3)
    assert output.read_provenance(path) == {
        "n_segments_rejected": 1,
        "channels_interpolated": ["Pz"],
        "channels_marked_bad": ["Pz"],
        "duration_s": 60.0,
        "source_sfreq": 256.0,
        "signal_sha256": "ab12",
    }
    assert output.load_connectome(path).n_segments == 4
    with pytest.raises(InputDataError, match="expected \\(5, 2, 3, 3\\) from the manifest"):
        output.read_tokens(path, CHANNELS, BANDS, 5, "rec")
    with pytest.raises(InputDataError, match="channels or bands differ"):
        output.read_tokens(connectome, CHANNELS[::-1], BANDS, 4, "rec")


def test_a_file_without_covariances_has_none(tmp_path):
    _connectome(covariance=False).save(tmp_path / "old.npz")
    assert output.read_covariances(tmp_path / "old.npz", 3, "old") is None
    assert output.load_record(tmp_path / "old.npz")["has_covariance"] is False


def test_a_truncated_connectome_is_one_line_naming_the_file_for_every_reader(tmp_path):
    path = tmp_path / "cut.npz"
    _connectome().save(path)
    path.write_bytes(path.read_bytes()[:200])
    for read in (
        lambda: output.read_layout(path),
        lambda: output.read_segment_count(path),
        lambda: output.read_tokens(path, CHANNELS, BANDS, 4, "cut"),
        lambda: output.read_covariances(path, 3, "cut"),
    ):
        with pytest.raises(InputDataError) as caught:
            read()
        line = caught.value.one_line()
        assert line.startswith(f"{path}: cannot read connectome: ") and "\n" not in line
        assert line.endswith("(rerun `eegformer preprocess`)") and caught.value.exit_code == 3
    assert output.read_provenance(path) == {} and output.load_record(path) is None


def test_the_manifest_reads_back_what_was_written(tmp_path):
    rows = [
        {
            "recording_id": "a",
            "status": "ok",
            "n_segments": 4,
            "age": 41.5,
            "sex": "F",
            "site": "x",
            "connectome": "connectomes/a.npz",
        },
        {
            "recording_id": "b",
            "status": "error",
            "error": "too short",
            "age": math.nan,
            "group": "hc",
        },
    ]
    output.write_manifest(tmp_path / output.MANIFEST_NAME, rows)
    read = output.read_manifest(tmp_path)
    header = list(read[0])
    assert header[: len(output.MANIFEST_LEADING_COLUMNS)] == list(output.MANIFEST_LEADING_COLUMNS)
    assert header[-3:] == list(output.MANIFEST_TRAILING_COLUMNS)
    assert header[len(output.MANIFEST_LEADING_COLUMNS) : -3] == ["site", "group"]
    assert read[0]["age"] == "41.5" and read[1]["age"] == read[1]["site"] == output.MISSING
    age = demographics.age_value
    assert age(read[0]["age"]) == 41.5 and math.isnan(age(read[1]["age"]))
    assert demographics.sex_value(read[0]["sex"]) == 1.0
    assert output.connectome_path(tmp_path, read[0]) == tmp_path / "connectomes" / "a.npz"
    assert output.connectome_path(tmp_path, {"recording_id": "b"}) == tmp_path / "connectomes/b.npz"
    with pytest.raises(InputDataError, match="no manifest.tsv: not a preprocess output folder"):
        output.read_manifest(tmp_path / "elsewhere")
