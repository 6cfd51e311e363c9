"""Finding recordings, reading every supported format, and one-line errors for bad files."""

from __future__ import annotations

import shutil
from pathlib import Path

import mne
import numpy as np
import pytest

from eegformer_cli.errors import InputDataError, RecordingError
from eegformer_cli.recordings.channels import normalise_channels
from eegformer_cli.recordings.reading import (
    RECORDING_SUFFIXES,
    find_recordings,
    read_recording,
    recording_id,
    recording_ids,
)


def _assert_one_line_naming(error: RecordingError, path: Path) -> str:
    line = error.one_line()
    assert "\n" not in line and len(line) < 400, line
    assert str(path) in line, line
    return line


def _msu_file(msu_dir: Path) -> Path:
    return sorted((msu_dir / "eeg").glob("*.edf"))[0]


# --- find_recordings ----------------------------------------------------------------------


@pytest.mark.slow
def test_find_recordings_in_fixtures_skips_companion_files(fixtures_dir):
    found = find_recordings([fixtures_dir])
    assert found == sorted(found)
    assert {p.name for p in found} == {
        "test_bdf_stim_channel.bdf",
        "test_NO.vhdr",
        "test_reduced.edf",
        "test_utf8_annotations.edf",
        "test_raw.set",
        "test_raw_2021.set",
        "test_1ch.gdf",
    }


@pytest.mark.slow
def test_find_recordings_counts_real_datasets(msu_dir, eegmat_dir):
    assert len(find_recordings([msu_dir])) == 84
    assert len(find_recordings([eegmat_dir / "eeg"])) == 20


@pytest.mark.slow
def test_find_recordings_deduplicates_files_and_folders(fixtures_dir):
    edf = fixtures_dir / "EDF" / "test_reduced.edf"
    found = find_recordings([fixtures_dir / "EDF", edf, edf])
    assert [p.name for p in found] == ["test_reduced.edf", "test_utf8_annotations.edf"]


@pytest.mark.slow
def test_find_recordings_keeps_the_order_the_inputs_were_given(fixtures_dir):
    """Rows of predict/explain follow the command line, wherever the files live."""
    utf8 = fixtures_dir / "EDF" / "test_utf8_annotations.edf"
    bdf = next((fixtures_dir / "BDF").glob("*.bdf"))
    found = find_recordings([utf8, bdf, fixtures_dir / "EDF"])
    assert [p.name for p in found] == [utf8.name, bdf.name, "test_reduced.edf"]


def test_a_symlinked_recording_keeps_its_own_name(tmp_path):
    """DataLad / git-annex datasets hold symlinks into .git/annex/objects: a file given by its
    link keeps the link's name (its id and participant come from it), as inside a folder, and
    a file given both alone and through its folder is one recording."""
    annexed = tmp_path / ".git" / "annex" / "objects" / "MD5E-s1--abc.edf"
    annexed.parent.mkdir(parents=True)
    annexed.write_bytes(b"x")
    link = tmp_path / "sub-01" / "eeg" / "sub-01_task-rest_eeg.edf"
    link.parent.mkdir(parents=True)
    link.symlink_to(annexed)
    named = link.parent.resolve() / link.name  # (tmp_path itself may sit behind a symlink)
    assert find_recordings([link]) == [named]
    assert find_recordings([link, tmp_path]) == [named]


def test_find_recordings_in_a_bids_root_skips_hidden_temporary_and_derivatives(tmp_path):
    (tmp_path / "dataset_description.json").write_text("{}")
    for relative in [
        "sub-01/eeg/sub-01_task-rest_eeg.edf",
        "sub-02/eeg/sub-02_task-rest_eeg.EDF",
        "sub-02/eeg/sub-02_task-rest_eeg.fif.gz",
        "sub-02/eeg/.tmp-sub-02.edf",
        ".git/x.edf",
        "derivatives/clean/sub-01_eeg.fif",
        "sub-01/eeg/notes.txt",
        "sub-01/eeg/sub-01_task-rest_eeg.vmrk",
    ]:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(b"x")
    found = find_recordings([tmp_path])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "sub-01/eeg/sub-01_task-rest_eeg.edf",
        "sub-02/eeg/sub-02_task-rest_eeg.EDF",
        "sub-02/eeg/sub-02_task-rest_eeg.fif.gz",
    ]


def test_find_recordings_errors_name_the_path(tmp_path):
    with pytest.raises(InputDataError, match="no such file or folder") as info:
        find_recordings([tmp_path / "missing"])
    assert str(tmp_path / "missing") in info.value.one_line()
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputDataError, match=r"folder holds no recordings \(looked for .edf"):
        find_recordings([tmp_path / "empty"])
    (tmp_path / "table.csv").write_text("a,b\n")
    with pytest.raises(InputDataError, match=r"unsupported format \(.csv\)"):
        find_recordings([tmp_path / "table.csv"])


def test_recording_suffixes_cover_the_required_formats():
    assert {".edf", ".bdf", ".gdf", ".vhdr", ".set", ".fif", ".fif.gz"} <= set(RECORDING_SUFFIXES)
    assert not {".eeg", ".vmrk", ".fdt"} & set(RECORDING_SUFFIXES)


# --- read_recording: real files -------------------------------------------------------------


@pytest.mark.slow
def test_every_fixture_is_read_or_rejected_with_one_line(fixtures_dir):
    outcomes = {}
    for path in sorted(p for p in fixtures_dir.rglob("*") if p.is_file()):
        try:
            raw = read_recording(path)
            normalised, _ = normalise_channels(raw, path)
            outcomes[path.name] = normalised.ch_names
        except RecordingError as error:
            _assert_one_line_naming(error, path)
            outcomes[path.name] = "rejected"
    # Only the BDF has 10-20 names (C3, C4, Cz + Status); companions are rejected as such.
    assert outcomes["test_bdf_stim_channel.bdf"] == ["C3", "C4", "Cz"]
    assert outcomes["test_NO.vmrk"] == outcomes["test_raw.fdt"] == "rejected"
    assert outcomes["test_1ch.gdf"] == "rejected"


@pytest.mark.slow
def test_brainvision_eeglab_and_gdf_are_read(fixtures_dir):
    vhdr = read_recording(fixtures_dir / "Brainvision" / "test_NO.vhdr")
    assert vhdr.info["sfreq"] == 5000 and len(vhdr.ch_names) == 65 and np.ptp(vhdr.get_data()) > 0
    with_fdt = read_recording(fixtures_dir / "EEGLAB" / "test_raw.set")
    assert with_fdt.info["sfreq"] == 128 and len(with_fdt.ch_names) == 32
    assert with_fdt.get_data().shape == (32, with_fdt.n_times) and np.ptp(with_fdt.get_data()) > 0
    gdf = read_recording(fixtures_dir / "GDF" / "test_1ch.gdf")
    assert gdf.ch_names == ["ECG"]


@pytest.mark.slow
def test_headers_only_for_real_datasets(msu_dir, eegmat_dir):
    msu = read_recording(_msu_file(msu_dir), preload=False)
    assert msu.info["sfreq"] == 128 and len(msu.ch_names) == 16 and not msu.preload
    eegmat = read_recording(eegmat_dir / "eeg" / "Subject00_1.edf", preload=False)
    assert eegmat.info["sfreq"] == 500 and len(eegmat.ch_names) == 21


@pytest.mark.slow
def test_upper_case_suffix_is_read(msu_dir, tmp_path):
    link = tmp_path / "RECORDING.EDF"
    link.symlink_to(_msu_file(msu_dir))
    assert len(read_recording(link, preload=False).ch_names) == 16


# --- read_recording: bad files --------------------------------------------------------------


def _rejected(path: Path, preload: bool = True) -> str:
    with pytest.raises(RecordingError) as info:
        read_recording(path, preload=preload)
    return _assert_one_line_naming(info.value, path)


def test_empty_file(tmp_path):
    (tmp_path / "empty.edf").write_bytes(b"")
    assert "empty file (0 bytes)" in _rejected(tmp_path / "empty.edf")


@pytest.mark.parametrize("suffix", [".edf", ".bdf", ".gdf", ".fif", ".set"])
def test_text_file_with_a_recording_suffix(tmp_path, suffix):
    path = tmp_path / f"notes{suffix}"
    path.write_text("participant 12, resting state, eyes closed\n")
    assert "starts like a text file" in _rejected(path)


@pytest.mark.slow
def test_truncated_edf_header(msu_dir, tmp_path):
    path = tmp_path / "truncated.edf"
    path.write_bytes(_msu_file(msu_dir).read_bytes()[:1000])
    assert "corrupt or truncated EDF header" in _rejected(path, preload=False)


@pytest.mark.slow
def test_edf_truncated_in_the_data_is_not_read_as_a_short_recording(msu_dir, tmp_path):
    original = _msu_file(msu_dir).read_bytes()
    path = tmp_path / "half.edf"
    path.write_bytes(original[: len(original) // 2])
    line = _rejected(path, preload=False)
    assert "truncated EDF file: the header announces 60 data records, the file holds" in line


def test_nan_values_are_rejected_naming_channels(tmp_path):
    data = np.random.default_rng(1).normal(0, 1e-5, (3, 500))
    data[1, 100:110] = np.nan
    raw = mne.io.RawArray(data, mne.create_info(["Cz", "Pz", "Oz"], 100.0, "eeg"), verbose="error")
    path = tmp_path / "with_nan_raw.fif"
    raw.save(path, verbose="error")
    assert "contains NaN or infinite values (channels Pz)" in _rejected(path)


@pytest.mark.slow
def test_missing_companion_files(fixtures_dir, tmp_path):
    shutil.copy(fixtures_dir / "Brainvision" / "test_NO.vhdr", tmp_path)
    assert "missing companion file test_NO.eeg" in _rejected(tmp_path / "test_NO.vhdr")
    shutil.copy(fixtures_dir / "EEGLAB" / "test_raw.set", tmp_path)
    assert "missing companion data file (.fdt)" in _rejected(tmp_path / "test_raw.set")


@pytest.mark.slow
def test_companion_and_unsupported_files(fixtures_dir, tmp_path):
    assert "companion file, not a recording: give the .vhdr" in _rejected(
        fixtures_dir / "Brainvision" / "test_NO.vmrk"
    )
    (tmp_path / "x.csv").write_text("1,2\n")
    assert "unsupported format (.csv)" in _rejected(tmp_path / "x.csv")


@pytest.mark.slow
def test_corrupt_data_found_when_loading(fixtures_dir, tmp_path):
    path = tmp_path / "cut.gdf"
    path.write_bytes((fixtures_dir / "GDF" / "test_1ch.gdf").read_bytes()[:3000])
    assert "corrupt or truncated GDF data" in _rejected(path)


# --- recording ids --------------------------------------------------------------------------


def test_recording_id_strips_the_recording_suffix():
    assert recording_id(Path("/d/eeg/sub-001_task-rest_eeg.edf")) == "sub-001_task-rest_eeg"
    assert recording_id(Path("/d/x_raw.fif.gz")) == "x_raw"
    assert recording_id(Path("/d/Subject 1 (rest).EDF")) == "Subject_1_rest_"
    assert recording_id(Path("/d/site-a/s01/x.edf"), Path("/d")) == "site-a__s01__x"


def test_recording_ids_disambiguate_only_collisions_and_do_not_depend_on_order():
    paths = [
        Path("/d/site-b/sub-01_eeg.edf"),
        Path("/d/site-a/sub-01_eeg.edf"),
        Path("/d/site-a/sub-02_eeg.vhdr"),
    ]
    ids = recording_ids(paths)
    assert ids == ["site-b__sub-01_eeg", "site-a__sub-01_eeg", "sub-02_eeg"]
    assert recording_ids(paths[::-1]) == ids[::-1]
    assert len(set(recording_ids([Path("/d/a b.edf"), Path("/d/a_b.edf")]))) == 2


def test_a_split_fif_recording_is_one_recording(tmp_path):
    """MNE splits large FIF files (BIDS or Neuromag naming); the first part reads them all."""
    n_times = 256 * 300
    raw = mne.io.RawArray(
        np.random.default_rng(0).standard_normal((19, n_times)) * 1e-5,
        mne.create_info(19, 256.0, "eeg"),
        verbose=False,
    )
    raw.save(tmp_path / "sub-01_eeg.fif", split_size="3MB", split_naming="bids", verbose=False)
    raw.save(tmp_path / "rec_raw.fif", split_size="3MB", verbose=False)
    parts = sorted(p.name for p in tmp_path.iterdir())
    assert "sub-01_split-02_eeg.fif" in parts and "rec_raw-1.fif" in parts
    found = find_recordings([tmp_path])
    assert [p.name for p in found] == ["rec_raw.fif", "sub-01_split-01_eeg.fif"]
    assert read_recording(found[1], preload=False).n_times == n_times
    # named explicitly (a shell glob): still one recording each
    assert find_recordings(sorted(tmp_path.iterdir())) == [
        tmp_path / "rec_raw.fif",
        tmp_path / "sub-01_split-01_eeg.fif",
    ]
    # a continuation part given alone is what the user asked for
    assert find_recordings([tmp_path / "rec_raw-1.fif"]) == [tmp_path / "rec_raw-1.fif"]
