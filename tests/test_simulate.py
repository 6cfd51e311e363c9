"""The EEG simulator and the committed sample_data/ it made."""

from __future__ import annotations

import csv
from pathlib import Path

import mne
import numpy as np
import pytest
from builders import SAMPLE_DATA, exit_code
from mne_connectivity import spectral_connectivity_epochs

from eegformer_cli.recordings.channels import canonical_channel_name
from eegformer_cli.simulation.simulate import (
    CHANNELS,
    DEFAULT_DURATION_S,
    DEFAULT_N_PARTICIPANTS,
    DEFAULT_SEED,
    DEFAULT_SFREQ,
    draw_participants,
    participants_table,
    simulate_participant,
    write_edf,
)


def _read_table(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _canonical(raw: mne.io.BaseRaw) -> mne.io.BaseRaw:
    """Rename the messy EDF labels to canonical 10-20 names with the project's normaliser."""
    return raw.rename_channels({name: canonical_channel_name(name) for name in raw.ch_names})


def _theta_connectivity(raw: mne.io.BaseRaw, pairs: list[tuple[str, str]]) -> dict[str, np.ndarray]:
    """Coherence and wPLI in 4-8 Hz for each channel pair, over 3 s epochs of 1-45 Hz data."""
    raw = _canonical(raw.copy()).filter(1, 45, verbose="error")
    epochs = mne.make_fixed_length_epochs(raw, duration=3.0, verbose="error")
    index = CHANNELS.index
    indices = (np.array([index(a) for a, _ in pairs]), np.array([index(b) for _, b in pairs]))
    con = spectral_connectivity_epochs(
        epochs,
        method=["coh", "wpli"],
        mode="multitaper",
        indices=indices,
        fmin=4.0,
        fmax=8.0,
        faverage=True,
        verbose="error",
    )
    return {"coh": con[0].get_data()[:, 0], "wpli": con[1].get_data()[:, 0]}


def test_sample_data_is_a_small_clinical_looking_dataset():
    rows = _read_table(SAMPLE_DATA / "participants.tsv")
    assert list(rows[0]) == ["participant_id", "diagnosis", "age", "sex"]
    assert len(rows) == DEFAULT_N_PARTICIPANTS >= 24
    diagnoses = [row["diagnosis"] for row in rows]
    assert sorted(set(diagnoses)) == ["depression", "healthy"]
    assert diagnoses.count("depression") == diagnoses.count("healthy")
    ages = [float(row["age"]) for row in rows if row["age"] != "n/a"]
    assert 2 <= len(rows) - len(ages) <= 3
    assert min(ages) < 30 and max(ages) > 70
    sexes = [row["sex"] for row in rows]
    assert set(sexes) == {"M", "F", "n/a"} and 1 <= sexes.count("n/a") <= 2
    size = sum(path.stat().st_size for path in SAMPLE_DATA.rglob("*") if path.is_file())
    assert size < 5_000_000


def test_sample_data_round_trips_through_mne_edf_reader():
    rows = _read_table(SAMPLE_DATA / "participants.tsv")
    edf_files = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))
    assert [path.name for path in edf_files] == [
        f"{row['participant_id']}_task-rest_eeg.edf" for row in rows
    ]
    labels = set()
    for path in edf_files:
        raw = mne.io.read_raw_edf(path, verbose="error")
        labels.update(raw.ch_names)
        assert raw.info["sfreq"] == DEFAULT_SFREQ
        assert raw.n_times == DEFAULT_DURATION_S * DEFAULT_SFREQ
        assert tuple(_canonical(raw).ch_names) == CHANNELS
        assert set(raw.get_channel_types()) == {"eeg"}
    # the labels are messy on purpose: the pipeline has to normalise them
    assert {"Fp1", "EEG Fp1-REF", "T3", "FP1-LE"} <= labels


def test_signals_survive_the_16_bit_edf_round_trip(tmp_path):
    participant = draw_participants(DEFAULT_N_PARTICIPANTS, DEFAULT_SEED)[5]
    raw = simulate_participant(participant)
    write_edf(raw, tmp_path / participant.file_name)
    back = mne.io.read_raw_edf(tmp_path / participant.file_name, preload=True, verbose="error")
    quantisation_step_v = 6400e-6 / 65534
    assert np.abs(back.get_data() - raw.get_data()).max() <= quantisation_step_v
    assert back.info["meas_date"] == raw.info["meas_date"]


def test_regenerating_with_the_same_seed_gives_the_committed_bytes(tmp_path):
    participants = draw_participants(DEFAULT_N_PARTICIPANTS, DEFAULT_SEED)
    assert participants_table(participants) == (SAMPLE_DATA / "participants.tsv").read_text()
    for participant in (participants[1], participants[3]):  # "EEG X-REF" and "X-LE" labels
        path = tmp_path / participant.file_name
        write_edf(simulate_participant(participant, DEFAULT_DURATION_S, DEFAULT_SFREQ), path)
        assert path.read_bytes() == (SAMPLE_DATA / "eeg" / participant.file_name).read_bytes()


def test_alpha_peak_measured_on_o1_o2_slows_with_age():
    participants = draw_participants(12, seed=11)
    measured = []
    for participant in participants:
        raw = _canonical(simulate_participant(participant, duration_s=30))
        spectrum = raw.compute_psd(
            method="welch", fmin=7, fmax=13, picks=["O1", "O2"], n_fft=512, verbose="error"
        )
        measured.append(spectrum.freqs[spectrum.get_data().mean(axis=0).argmax()])
    ages = [p.age for p in participants]
    assert np.ptp(ages) > 30
    assert np.corrcoef(ages, measured)[0, 1] < -0.7
    np.testing.assert_allclose(measured, [p.alpha_peak_hz for p in participants], atol=0.6)


def test_patients_have_stronger_fronto_parietal_theta_coupling():
    participants = draw_participants(16, seed=5)
    coupled, uncoupled = ("F3", "P3"), ("T7", "O2")
    rows = []
    for participant in participants:
        con = _theta_connectivity(simulate_participant(participant), [coupled, uncoupled])
        rows.append(
            (
                participant.diagnosis == "depression",
                participant.coupling_strength,
                con["coh"][0],
                con["wpli"][0],
                con["coh"][1],
            )
        )
    patient, strength, coh, wpli, coh_uncoupled = (np.array(column) for column in zip(*rows))
    assert coh[patient].mean() > coh[~patient].mean() + 0.2
    assert wpli[patient].mean() > wpli[~patient].mean() + 0.2
    assert abs(coh_uncoupled[patient].mean() - coh_uncoupled[~patient].mean()) < 0.1
    assert np.corrcoef(strength, coh)[0, 1] > 0.7


def test_groups_overlap_so_the_task_is_learnable_but_not_trivial():
    participants = draw_participants(400, seed=0)
    patient = np.array([p.diagnosis == "depression" for p in participants])
    strength = np.array([p.coupling_strength for p in participants])
    best_balanced_accuracy = max(
        ((strength[patient] > threshold).mean() + (strength[~patient] <= threshold).mean()) / 2
        for threshold in np.unique(strength)
    )
    assert 0.8 < best_balanced_accuracy < 0.97


def test_cli_writes_a_dataset_and_refuses_to_overwrite_it(tmp_path, capsys):
    out = tmp_path / "data"
    args = ["simulate", "--out", str(out), "--n-participants", "4", "--duration", "20"]
    assert exit_code(*args) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert len(_read_table(out / "participants.tsv")) == 4
    for path in sorted((out / "eeg").glob("*.edf")):
        raw = mne.io.read_raw_edf(path, verbose="error")
        assert (raw.n_times, len(raw.ch_names)) == (20 * DEFAULT_SFREQ, 19)
    assert len(list((out / "eeg").glob("*.edf"))) == 4

    assert exit_code(*args) == 5
    error = capsys.readouterr().err
    assert str(out) in error and "--overwrite" in error and "Traceback" not in error

    assert (
        exit_code(
            "simulate",
            "--out",
            str(out),
            "--n-participants",
            "2",
            "--duration",
            "10",
            "--overwrite",
        )
        == 0
    )
    assert sorted(path.name for path in (out / "eeg").iterdir()) == [
        "sub-01_task-rest_eeg.edf",
        "sub-02_task-rest_eeg.edf",
    ]


@pytest.mark.parametrize(
    "flag, value", [("--n-participants", "1"), ("--duration", "5"), ("--sfreq", "100")]
)
def test_cli_rejects_settings_that_cannot_make_a_dataset(tmp_path, capsys, flag, value):
    assert exit_code("simulate", "--out", str(tmp_path / "data"), flag, value) == 2
    error = capsys.readouterr().err
    assert flag in error and value in error
    assert not (tmp_path / "data").exists()
