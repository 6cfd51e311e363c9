"""Channel names to canonical 10-20, the run's channel set, and interpolation of missing ones."""

from __future__ import annotations

import mne
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eegformer_cli.errors import InputDataError, RecordingError, UsageError
from eegformer_cli.recordings.channels import (
    OLD_TO_NEW_NAMES,
    STANDARD_1020,
    canonical_channel_name,
    conform_channels,
    montage_channel_names,
    normalise_channels,
    select_channel_set,
)
from eegformer_cli.recordings.reading import find_recordings, read_recording

NEW_NAMES = [name for name in montage_channel_names() if name not in OLD_TO_NEW_NAMES]
PREFIXES = ["", "EEG ", "eeg ", "EEG_", "EEG:", " ", "EEG  "]
SUFFIXES = [
    "",
    "-REF",
    "-Ref",
    "-ref",
    "-LE",
    "-A1",
    "-A2",
    "-M1",
    "-AVG",
    "-AR",
    " ",
    ".",
    "-REF ",
]


def _random_case(name: str, flips: list[bool]) -> str:
    return "".join(
        c.swapcase() if flip else c for c, flip in zip(name, flips + [False] * len(name))
    )


def _raw(names: list[str], sfreq: float = 100.0, seconds: float = 2.0) -> mne.io.RawArray:
    data = np.random.default_rng(0).normal(0, 1e-5, (len(names), int(sfreq * seconds)))
    return mne.io.RawArray(data, mne.create_info(names, sfreq, "eeg"), verbose="error")


# --- canonical_channel_name: properties ---------------------------------------------------


def test_standard_1020_is_the_19_new_names_and_in_the_montage():
    assert len(STANDARD_1020) == len(set(STANDARD_1020)) == 19
    assert set(STANDARD_1020) <= set(montage_channel_names())
    assert not set(STANDARD_1020) & set(OLD_TO_NEW_NAMES)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(NEW_NAMES))
def test_canonical_names_are_fixed_points(name):
    assert canonical_channel_name(name) == name
    assert canonical_channel_name(canonical_channel_name(name)) == name


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(montage_channel_names()),
    st.sampled_from(PREFIXES),
    st.sampled_from(SUFFIXES),
    st.lists(st.booleans(), max_size=8),
)
def test_case_and_decoration_do_not_matter(name, prefix, suffix, flips):
    decorated = prefix + _random_case(name, flips) + suffix
    assert canonical_channel_name(decorated) == canonical_channel_name(name)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(sorted(OLD_TO_NEW_NAMES)),
    st.sampled_from(PREFIXES),
    st.sampled_from(SUFFIXES),
    st.lists(st.booleans(), max_size=2),
)
def test_old_names_map_to_new(old, prefix, suffix, flips):
    assert (
        canonical_channel_name(prefix + _random_case(old, flips) + suffix) == OLD_TO_NEW_NAMES[old]
    )


@pytest.mark.parametrize(
    "name, expected",
    [
        ("EEG Fp1-REF", "Fp1"),
        ("EEG FP1-LE", "Fp1"),
        ("Fp1-A1", "Fp1"),
        ("FP1", "Fp1"),
        ("fp1", "Fp1"),
        ("EEG Fp1", "Fp1"),
        ("Fp1 ", "Fp1"),
        ("EEG T3", "T7"),
        ("T3-REF", "T7"),
        ("EEG A2-A1", "A2"),
        ("FPZ", "Fpz"),
        ("Fc5.", "FC5"),
        ("EEG CZ-REF", "Cz"),
    ],
)
def test_examples_of_real_spellings(name, expected):
    assert canonical_channel_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "ECG ECG",
        "ECG",
        "Status",
        "STI 014",
        "EOG",
        "EOG left",
        "Photic",
        "EEG 001",
        "1",
        "EMGright",
        "EEG EKG1-REF",
        "Fp1-F7",
        "C3-Cz",
        "EEG ROC-REF",
        "sine 1 Hz",
        "",
        "-REF",
    ],
)
def test_non_electrode_names_give_none(name):
    assert canonical_channel_name(name) is None


# --- normalise_channels -----------------------------------------------------------------


@pytest.mark.slow
def test_msu_has_16_channels_with_old_names_mapped(msu_dir):
    raw = read_recording(sorted((msu_dir / "eeg").glob("*.edf"))[0], preload=False)
    normalised, renamed = normalise_channels(raw)
    # Borisov et al. 2005: the 19 10-20 channels without Fp1, Fp2, Fz; old temporal names.
    assert sorted(normalised.ch_names) == sorted(set(STANDARD_1020) - {"Fp1", "Fp2", "Fz"})
    assert {renamed[old] for old in ("T3", "T4", "T5", "T6")} == {"T7", "T8", "P7", "P8"}
    assert set(normalised.get_channel_types()) == {"eeg"}
    assert raw.ch_names[4] == "T3", "the input recording must not be renamed in place"


@pytest.mark.slow
def test_eegmat_keeps_19_eeg_and_the_ear_drops_ecg(eegmat_dir):
    raw = read_recording(eegmat_dir / "eeg" / "Subject03_2.edf", preload=True)
    normalised, renamed = normalise_channels(raw)
    assert set(normalised.ch_names) == set(STANDARD_1020) | {"A2"}
    assert renamed["EEG T5"] == "P7" and renamed["EEG A2-A1"] == "A2"
    assert "ECG ECG" not in renamed
    np.testing.assert_array_equal(normalised.get_data("Fp1"), raw.get_data("EEG Fp1"))


def test_two_names_for_one_electrode_are_rejected_naming_both():
    with pytest.raises(RecordingError, match=r"'T3' and 'EEG T7-REF' are both electrode T7"):
        normalise_channels(_raw(["T3", "Cz", "Pz", "EEG T7-REF"]))


def test_unknown_naming_scheme_is_rejected_listing_names():
    with pytest.raises(
        RecordingError,
        match=r"no channel names recognised as 10-20 electrodes "
        r"\(found: Ch1, Ch2, .*19 in all\)",
    ):
        normalise_channels(_raw([f"Ch{i}" for i in range(1, 20)]))


@pytest.mark.slow
def test_numbered_cap_layout_is_not_taken_for_10_20(fixtures_dir):
    raw = read_recording(fixtures_dir / "EDF" / "test_reduced.edf", preload=False)
    assert {"C3", "F7", "B1"} <= set(raw.ch_names)  # BioSemi-style A1..I8 labels
    with pytest.raises(RecordingError, match="numbered cap layout"):
        normalise_channels(raw)


def test_two_channels_only_are_rejected():
    with pytest.raises(RecordingError, match=r"only 2 channel\(s\) .*\(C3, C4\); at least 3"):
        normalise_channels(_raw(["C3", "C4", "ECG"]))


def test_channel_types_other_than_eeg_are_not_kept():
    raw = _raw(["Fp1", "Fp2", "Cz", "Pz"])
    raw.set_channel_types({"Fp2": "eog"})
    normalised, renamed = normalise_channels(raw)
    assert normalised.ch_names == ["Fp1", "Cz", "Pz"] and "Fp2" not in renamed


# --- select_channel_set -------------------------------------------------------------------


@pytest.mark.slow
def test_default_set_on_msu_is_the_16_channels_in_standard_order(msu_dir):
    available = [
        set(normalise_channels(read_recording(path, preload=False))[0].ch_names)
        for path in find_recordings([msu_dir])
    ]
    assert len(available) == 84
    channels = select_channel_set(available, None)
    assert channels == [name for name in STANDARD_1020 if name not in ("Fp1", "Fp2", "Fz")]


def test_default_set_is_the_intersection_in_standard_order():
    available = [
        {"O2", "Cz", "C3", "A2", "Fp1"},
        {"Cz", "O2", "C3", "Fp1", "T7"},
        {"C3", "O2", "Cz", "Fp1"},
    ]
    assert select_channel_set(available, None) == ["Fp1", "C3", "Cz", "O2"]


def test_default_set_too_small_is_an_input_error():
    with pytest.raises(InputDataError, match=r"only 2 of the 19 .*\(C3, Cz\)") as info:
        select_channel_set([{"C3", "Cz", "Pz"}, {"C3", "Cz", "O1"}], None)
    assert "--channels" in info.value.one_line()


def test_explicit_list_is_canonicalised_in_the_given_order():
    assert select_channel_set([], ["cz", "T3", "EEG Fp1-REF", "POz"]) == ["Cz", "T7", "Fp1", "POz"]


@pytest.mark.parametrize(
    "requested, message",
    [
        (["Cz", "Xy1", "Pz", "Oz"], r"unknown channel name\(s\) for --channels: 'Xy1'.*Fp1, Fp2"),
        (["T3", "T7", "Cz"], r"same electrode twice: T7"),
        (["Cz", "Pz"], r"lists 2 channel\(s\); at least 3"),
    ],
)
def test_explicit_list_errors_are_usage_errors(requested, message):
    with pytest.raises(UsageError, match=message):
        select_channel_set([{"Cz"}], requested)


# --- conform_channels ---------------------------------------------------------------------


@pytest.mark.slow
def test_conform_reorders_sets_montage_and_interpolates_missing(eegmat_dir):
    raw = read_recording(eegmat_dir / "eeg" / "Subject03_2.edf", preload=True).crop(0, 20)
    normalised, _ = normalise_channels(raw)
    complete, interpolated = conform_channels(normalised, list(STANDARD_1020), max_interpolated=0)
    assert complete.ch_names == list(STANDARD_1020) and interpolated == []
    positions = np.array([ch["loc"][:3] for ch in complete.info["chs"]])
    assert np.isfinite(positions).all() and (np.linalg.norm(positions, axis=1) > 0.05).all()

    gappy = normalised.copy().drop_channels(["C3", "Pz"])
    repaired, interpolated = conform_channels(gappy, list(STANDARD_1020), max_interpolated=2)
    assert repaired.ch_names == list(STANDARD_1020) and interpolated == ["C3", "Pz"]
    assert repaired.info["bads"] == []
    # Spherical splines follow the real channel (leave-one-out r was 0.69 on average over
    # eegmat's ICA-cleaned channels, 0.86 on msu); a zero or misplaced channel would give r ~ 0.
    for name in ("C3", "Pz"):
        r = np.corrcoef(repaired.get_data(name)[0], complete.get_data(name)[0])[0, 1]
        assert r > 0.5, (name, r)
    np.testing.assert_array_equal(repaired.get_data("Cz"), complete.get_data("Cz"))


def test_conform_rejects_more_missing_than_allowed():
    raw = _raw(["Fp1", "Cz", "Pz", "O1"])
    with pytest.raises(
        RecordingError,
        match=r"missing channels Fp2, O2 \(allowed to interpolate "
        r"at most 1; use --max-interpolated\)",
    ):
        conform_channels(raw, ["Fp1", "Fp2", "Cz", "Pz", "O1", "O2"], max_interpolated=1)
