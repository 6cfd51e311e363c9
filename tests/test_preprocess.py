"""``eegformer preprocess`` end to end: real datasets, broken recordings, reruns, locking."""

from __future__ import annotations

import csv
import dataclasses
import json
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import mne
import numpy as np
import pytest
from builders import OLD_NAMES, ica_friendly_raw, shared_dataset, synthetic_raw, write_edf
from mne_connectivity import spectral_connectivity_epochs

from eegformer_cli.atomic import DirectoryLock
from eegformer_cli.cli.app import main
from eegformer_cli.connectivity.bands import BAND_PRESETS
from eegformer_cli.errors import InputDataError, OutputError, PartialFailure, UsageError
from eegformer_cli.preprocess import (
    PreprocessSettings,
    load_connectome,
    process_recording,
    run_preprocess,
)
from eegformer_cli.recordings.channels import STANDARD_1020

MSU_CHANNELS = [
    "F7",
    "F3",
    "F4",
    "F8",
    "T7",
    "C3",
    "Cz",
    "C4",
    "T8",
    "P7",
    "P3",
    "Pz",
    "P4",
    "P8",
    "O1",
    "O2",
]


def read_manifest(out_dir: Path) -> list[dict]:
    with open(out_dir / "manifest.tsv", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@pytest.fixture(scope="module")
def msu_run(tmp_path_factory):
    """msu-schizophrenia preprocessed once with 2 workers (shared by the tests below)."""
    data = shared_dataset("msu-schizophrenia")  # module scope: the msu_dir fixture is per test
    out = tmp_path_factory.mktemp("msu")
    summary = run_preprocess([data], out, PreprocessSettings.from_preset("default"), n_jobs=2)
    return data, out, summary


@pytest.mark.slow
def test_msu_every_recording_ok_with_demographics(msu_run):
    data, out, summary = msu_run
    assert (summary.n_recordings, summary.n_ok, summary.n_error) == (84, 84, 0)
    rows = read_manifest(out)
    assert len(rows) == 84 and {row["status"] for row in rows} == {"ok"}
    assert {row["sex"] for row in rows} == {"M"} and {row["age"] for row in rows} == {"n/a"}
    participants = {
        r["participant_id"]: r
        for r in csv.DictReader(open(data / "participants.tsv"), delimiter="\t")
    }
    for row in rows:
        assert row["diagnosis"] == participants[row["participant_id"]]["diagnosis"]
        assert row["recording_id"].startswith(row["participant_id"] + "_")
        assert row["n_segments"] == "4" and row["sfreq"] == "128" and row["error"] == "n/a"
    settings = json.loads((out / "preprocess.json").read_text())
    assert settings["channels"] == MSU_CHANNELS and settings["epoch_length_s"] == 15
    assert settings["counts"] == {
        "recordings": 84,
        "ok": 84,
        "error": 0,
        "skipped": 0,
        "kept_from_earlier_runs": 0,
    }
    assert settings["versions"]["mne-connectivity"]


@pytest.mark.slow
def test_msu_connectomes_follow_the_contract(msu_run):
    _, out, _ = msu_run
    rows = read_manifest(out)
    for row in rows[::20]:
        with np.load(out / row["connectome"], allow_pickle=False) as npz:
            assert list(npz["channels"]) == MSU_CHANNELS
            assert list(npz["bands"]) == [b.name for b in BAND_PRESETS["default"]]
            assert npz["band_edges_hz"].dtype == np.float64
            np.testing.assert_allclose(npz["segment_onsets_s"], [0, 15, 30, 45])
            for key in ("coh", "wpli"):
                tokens = npz[key]
                assert tokens.dtype == np.float32 and tokens.shape == (4, 8, 16, 16)
                np.testing.assert_array_equal(tokens, tokens.transpose(0, 1, 3, 2))
                assert np.all(np.diagonal(tokens, axis1=2, axis2=3) == 0)
                assert tokens.min() >= 0 and tokens.max() <= 1 + 1e-6
                assert tokens.std() > 0.01  # not a constant placeholder


@pytest.mark.slow
def test_stored_coherence_equals_a_direct_mne_computation(msu_run):
    """Rebuild one recording's cleaned segments with plain MNE calls and recompute coh/wPLI."""
    data, out, _ = msu_run
    stored = load_connectome(out / "connectomes" / "sub-007_task-rest_eeg.npz")
    raw = mne.io.read_raw_edf(
        data / "eeg" / "sub-007_task-rest_eeg.edf", preload=True, verbose=False
    )
    raw.rename_channels(lambda name: OLD_NAMES.get(name, name))
    raw.pick(MSU_CHANNELS)
    raw.filter(1, 45, h_trans_bandwidth=5.0, verbose=False)
    raw.set_eeg_reference("average", verbose=False)
    x = raw.get_data()
    bands = BAND_PRESETS["default"]
    for index, onset in enumerate(stored.segment_onsets_s):
        start = int(onset * 128)
        windows = np.stack([x[:, start + w * 384 : start + (w + 1) * 384] for w in range(5)])
        coh, wpli = spectral_connectivity_epochs(
            windows,
            method=["coh", "wpli"],
            sfreq=128.0,
            mode="multitaper",
            fmin=[b.f_low for b in bands],
            fmax=[b.f_high for b in bands],
            faverage=True,
            verbose=False,
        )
        for result, tokens in ((coh, stored.coh), (wpli, stored.wpli)):
            dense = result.get_data("dense")
            expected = np.moveaxis(dense + dense.transpose(1, 0, 2), -1, 0)
            np.testing.assert_allclose(tokens[index], expected, atol=1e-6)


@pytest.mark.slow
def test_rerun_skips_every_finished_recording(msu_run):
    data, out, _ = msu_run
    files = sorted((out / "connectomes").glob("*.npz"))
    mtimes = [f.stat().st_mtime_ns for f in files]
    manifest_before = (out / "manifest.tsv").read_text()
    started = time.perf_counter()
    summary = run_preprocess([data], out, PreprocessSettings.from_preset("default"))
    assert summary.n_skipped == 84 and summary.n_ok == 84
    assert time.perf_counter() - started < 20  # headers only, no recomputation
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    assert (out / "manifest.tsv").read_text() == manifest_before


@pytest.mark.slow
def test_a_second_run_into_a_locked_folder_is_refused(msu_run, tmp_path, capsys):
    data, out, _ = msu_run
    with DirectoryLock(out):
        with pytest.raises(OutputError, match="another eegformer"):
            run_preprocess([data], out, PreprocessSettings.from_preset("default"))
        with pytest.raises(SystemExit) as exit_info:
            main(["preprocess", str(data), "--out", str(out)])
    assert exit_info.value.code == 5
    assert "another eegformer" in capsys.readouterr().err


@pytest.mark.slow
def test_forked_workers_give_the_files_of_one_process(msu_run, tmp_path):
    """--n-jobs 2 (forked pool on Linux) and --n-jobs 1 write identical connectomes."""
    data, out, _ = msu_run
    files = sorted((data / "eeg").glob("*.edf"))[:3]
    run_preprocess(files, tmp_path, PreprocessSettings.from_preset("default"), n_jobs=1)
    for path in files:
        name = f"{path.name.removesuffix('.edf')}.npz"
        with (
            np.load(tmp_path / "connectomes" / name) as one,
            np.load(out / "connectomes" / name) as two,
        ):
            for key in ("coh", "wpli"):
                np.testing.assert_array_equal(one[key], two[key])


@pytest.mark.slow
def test_eegmat_channels_condition_and_ages(eegmat_dir, tmp_path):
    files = [
        eegmat_dir / "eeg" / name
        for name in ("Subject00_1.edf", "Subject00_2.edf", "Subject05_2.edf")
    ]
    summary = run_preprocess(files, tmp_path, PreprocessSettings.from_preset("default"), n_jobs=2)
    assert summary.n_ok == 3 and summary.channels == list(STANDARD_1020)
    rows = {row["recording_id"]: row for row in read_manifest(tmp_path)}
    participants = {
        r["participant_id"]: r
        for r in csv.DictReader(open(eegmat_dir / "participants.tsv"), delimiter="\t")
    }
    assert [rows[k]["condition"] for k in ("Subject00_1", "Subject00_2", "Subject05_2")] == [
        "rest",
        "arithmetic",
        "arithmetic",
    ]
    for row in rows.values():
        expected = participants[row["participant_id"]]
        assert float(row["age"]) == float(expected["age"]) and row["sex"] == expected["sex"]
        assert row["sfreq"] == "128" and row["source_sfreq"] == "500"  # cleaned / as recorded
    stored = load_connectome(tmp_path / rows["Subject00_1"]["connectome"])
    assert stored.coh.shape == (12, 8, 19, 19)  # 182 s in 15 s epochs (set by the 62 s ones)


@pytest.mark.slow
def test_reader_fixtures_are_read_or_rejected_with_a_message(fixtures_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["preprocess", str(fixtures_dir), "--out", str(tmp_path)])
    assert exit_info.value.code == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    rows = read_manifest(tmp_path)
    assert len(rows) == 7
    for row in rows:
        if row["status"] == "ok":
            assert (tmp_path / row["connectome"]).is_file()
        else:
            assert row["status"] == "error" and len(row["error"]) > 20 and "\n" not in row["error"]
            # the file the user gave (the .set, not the .fdt that MNE read the samples from)
            assert row["error"].startswith(row["source_file"] + ": "), row


@pytest.fixture
def messy_folder(tmp_path):
    """Two good recordings and one of each failure of issue 7."""
    folder = tmp_path / "messy"
    folder.mkdir()
    write_edf(synthetic_raw(seed=1), folder / "good1.edf")
    write_edf(synthetic_raw(seed=2, sfreq=500.0), folder / "good2.edf")
    write_edf(synthetic_raw(seconds=5.0, seed=3), folder / "short.edf")
    write_edf(synthetic_raw(sfreq=64.0, seed=4), folder / "slow.edf")
    flat = synthetic_raw(seed=5)
    flat._data[9] = 0.0  # Cz disconnected
    write_edf(flat, folder / "flat.edf")
    nan = synthetic_raw(seed=6)
    nan._data[:, 1000:] = np.nan
    nan.save(folder / "nan_raw.fif", verbose=False)
    truncated = write_edf(synthetic_raw(seed=7), folder / "truncated.edf").read_bytes()
    (folder / "truncated.edf").write_bytes(truncated[: len(truncated) // 2])
    (folder / "participants.tsv").write_text("participant_id\tage\tsex\ngood1\t30\tF\n")
    return folder


EXPECTED_ERRORS = {
    "short": "too short",
    "slow": "sampling rate 64 Hz",
    "flat": "flat channel Cz",
    "nan_raw": "NaN",
    "truncated": "truncated",
}


def test_each_broken_recording_gets_its_one_line_reason(messy_folder, tmp_path, capsys):
    out = tmp_path / "out"
    summary = run_preprocess([messy_folder], out, PreprocessSettings.from_preset("default"))
    rows = {row["recording_id"]: row for row in read_manifest(out)}
    assert summary.n_ok == 2 and summary.n_error == 5
    assert rows["good1"]["status"] == rows["good2"]["status"] == "ok"
    assert rows["good1"]["age"] == "30" and rows["good1"]["sex"] == "F"
    assert rows["good2"]["age"] == "n/a"
    err = capsys.readouterr().err
    assert "6 recordings have no row" in err  # all but good1
    # the first three failures named on stderr with their reason, then how many more
    named = [line for line in err.splitlines() if " failed: " in line]
    assert len(named) == 3 and all(line.startswith("warning: ") for line in named)
    assert "warning: 2 more recording(s) failed; every error is in " in err
    for recording_id, fragment in EXPECTED_ERRORS.items():
        row = rows[recording_id]
        assert row["status"] == "error" and fragment in row["error"], row["error"]
        assert row["connectome"] == "n/a"
    # --strict: the same outputs, then exit 6 (PartialFailure)
    with pytest.raises(PartialFailure):
        run_preprocess([messy_folder], out, PreprocessSettings.from_preset("default"), strict=True)
    with pytest.raises(SystemExit) as exit_info:
        main(["preprocess", str(messy_folder), "--out", str(out), "--strict"])
    assert exit_info.value.code == 6
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--strict" in err


def test_changed_settings_recompute_and_unchanged_ones_do_not(messy_folder, tmp_path):
    out = tmp_path / "out"
    files = [messy_folder / "good1.edf", messy_folder / "good2.edf"]
    run_preprocess(files, out, PreprocessSettings.from_preset("default"))
    first = load_connectome(out / "connectomes" / "good1.npz")
    theta_only = PreprocessSettings.from_preset("default", bands=BAND_PRESETS["default"][1:2])
    summary = run_preprocess(files, out, theta_only, overwrite=True)
    assert summary.n_skipped == 0
    second = load_connectome(out / "connectomes" / "good1.npz")
    assert second.bands == ["theta"] and second.coh.shape[1] == 1
    np.testing.assert_array_equal(second.coh[:, 0], first.coh[:, 1])
    assert run_preprocess(files, out, theta_only).n_skipped == 2


def test_manifest_has_the_original_rate_and_preprocess_json_absolute_inputs(messy_folder, tmp_path):
    out = tmp_path / "out"
    files = [messy_folder / "good1.edf", messy_folder / "good2.edf"]
    run_preprocess(files, out, PreprocessSettings.from_preset("default"))
    rows = read_manifest(out)
    assert [(row["sfreq"], row["source_sfreq"]) for row in rows] == [("128", "256"), ("128", "500")]
    inputs = json.loads((out / "preprocess.json").read_text())["inputs"]
    assert inputs == [str(path.absolute()) for path in files]  # the audit's input folders


def test_folder_by_folder_into_one_output_keeps_earlier_recordings(messy_folder, tmp_path, capsys):
    out = tmp_path / "out"
    settings = PreprocessSettings.from_preset("default", channels=tuple(STANDARD_1020))
    run_preprocess([messy_folder / "good1.edf"], out, settings)
    run_preprocess([messy_folder / "good2.edf"], out, settings)
    rows = read_manifest(out)
    assert [(row["recording_id"], row["status"]) for row in rows] == [
        ("good1", "ok"),
        ("good2", "ok"),
    ]
    assert rows[0]["age"] == "30"  # the earlier row keeps its metadata
    assert "keeps 1 recordings of earlier runs" in capsys.readouterr().err
    inputs = json.loads((out / "preprocess.json").read_text())["inputs"]
    assert [Path(name).name for name in inputs] == ["good1.edf", "good2.edf"]
    # other settings: refused, naming what differs, the folder untouched
    theta = dataclasses.replace(settings, bands=BAND_PRESETS["default"][1:2])
    before = (out / "manifest.tsv").read_text()
    with pytest.raises(
        UsageError,
        match=r"holds 2 recordings preprocessed with other settings "
        r"\(different: bands\)",
    ) as refused:
        run_preprocess([messy_folder / "good2.edf"], out, theta)
    assert "--overwrite" in refused.value.one_line()
    assert (out / "manifest.tsv").read_text() == before
    # with overwrite the earlier row is left out (never a manifest of mixed settings), its
    # file stays
    run_preprocess([messy_folder / "good2.edf"], out, theta, overwrite=True)
    assert [row["recording_id"] for row in read_manifest(out)] == ["good2"]
    assert "1 rows of earlier runs" in capsys.readouterr().err
    assert (out / "connectomes" / "good1.npz").is_file()
    # a manifest that is not text any more is replaced, with a warning, not a traceback
    (out / "manifest.tsv").write_bytes(b"\xff\xfe garbage")
    run_preprocess([messy_folder / "good1.edf"], out, settings)
    assert [row["recording_id"] for row in read_manifest(out)] == ["good1"]
    assert "earlier manifest not readable" in capsys.readouterr().err


def test_same_file_name_from_another_folder_never_replaces_an_earlier_recording(tmp_path, capsys):
    site1, site2, out = tmp_path / "site1", tmp_path / "site2", tmp_path / "out"
    site1.mkdir(), site2.mkdir()
    write_edf(synthetic_raw(seed=1), site1 / "sub-01.edf")
    write_edf(synthetic_raw(seed=2), site2 / "sub-01.edf")
    settings = PreprocessSettings.from_preset("default")
    run_preprocess([site1], out, settings)
    first = load_connectome(out / "connectomes" / "sub-01.npz").coh
    run_preprocess([site2], out, settings)
    assert "recording id sub-01 belongs to" in capsys.readouterr().err
    rows = read_manifest(out)
    assert [(row["recording_id"], Path(row["source_file"]).parent.name) for row in rows] == [
        ("sub-01", "site1"),
        ("site2__sub-01", "site2"),
    ]
    np.testing.assert_array_equal(load_connectome(out / "connectomes" / "sub-01.npz").coh, first)
    assert not np.array_equal(load_connectome(out / "connectomes" / "site2__sub-01.npz").coh, first)
    # reruns find their own connectomes again: nothing recomputed, nothing renamed
    assert run_preprocess([site2], out, settings).n_skipped == 1
    assert run_preprocess([site1], out, settings).n_skipped == 1
    assert sorted(row["recording_id"] for row in read_manifest(out)) == ["site2__sub-01", "sub-01"]
    # the same file moved elsewhere (size and mtime kept) is the same recording, not a new one
    moved = tmp_path / "moved"
    site1.rename(moved)
    assert run_preprocess([moved], out, settings).n_skipped == 1
    assert sorted(row["recording_id"] for row in read_manifest(out)) == ["site2__sub-01", "sub-01"]


def test_a_recording_failing_now_loses_its_old_connectome(messy_folder, tmp_path):
    out = tmp_path / "out"
    files = [messy_folder / "good1.edf", messy_folder / "good2.edf"]
    run_preprocess(files, out, PreprocessSettings.from_preset("default"))
    assert len(list((out / "connectomes").glob("*.npz"))) == 2
    with pytest.raises(InputDataError, match="no recording could be preprocessed"):
        run_preprocess(
            files, out, PreprocessSettings.from_preset("default", epoch_length=90.0), overwrite=True
        )
    assert list((out / "connectomes").glob("*.npz")) == []
    assert {row["status"] for row in read_manifest(out)} == {"error"}


def test_no_usable_recording_exits_3(messy_folder, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["preprocess", str(messy_folder / "short.edf"), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 3
    assert "no recording could be preprocessed" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--preset", "fast"], "--preset"),
        (["--bands", "delta:4-2"], "--bands"),
        (["--epoch-length", "10"], "--epoch-length"),
        (["--sfreq", "64"], "--sfreq"),
        (["--channels", "Fp1,XX9,Cz"], "--channels"),
    ],
)
def test_bad_options_are_usage_errors(messy_folder, tmp_path, capsys, args, fragment):
    with pytest.raises(SystemExit) as exit_info:
        main(["preprocess", str(messy_folder / "good1.edf"), "--out", str(tmp_path / "o"), *args])
    assert exit_info.value.code == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_settings_round_trip_through_json_with_a_stable_hash(preset):
    settings = PreprocessSettings.from_preset(preset, channels=("Fp1", "Cz", "O2"))
    restored = PreprocessSettings.from_dict(json.loads(json.dumps(settings.to_dict())))
    assert restored == settings and restored.settings_hash() == settings.settings_hash()
    assert (
        PreprocessSettings.from_preset(preset, window_s=1.5).settings_hash()
        != settings.settings_hash()
    )


def test_channels_most_recordings_have_are_kept_on_request(tmp_path, capsys):
    folder = tmp_path / "site"
    folder.mkdir()
    for seed in (1, 2):
        write_edf(synthetic_raw(seed=seed), folder / f"full{seed}.edf")
    write_edf(synthetic_raw(seed=3).drop_channels(["Fp1", "Fp2", "F7", "F3"]), folder / "few.edf")
    summary = run_preprocess([folder], tmp_path / "out", PreprocessSettings.from_preset("default"))
    assert summary.channels == [
        name for name in STANDARD_1020 if name not in ("Fp1", "Fp2", "F7", "F3")
    ]
    err = capsys.readouterr().err
    assert "Fp1, Fp2, F7, F3 left out of every recording because 1 of 3 lack them (few.edf)" in err
    # what the warning suggests: all 19, the recording missing 4 rejected (2 may be interpolated)
    summary = run_preprocess(
        [folder],
        tmp_path / "out19",
        PreprocessSettings.from_preset("default", channels=tuple(STANDARD_1020)),
    )
    assert summary.channels == list(STANDARD_1020) and (summary.n_ok, summary.n_error) == (2, 1)
    assert "left out of every recording" not in capsys.readouterr().err


def test_process_recording_takes_channels_in_any_spelling_and_order(tmp_path):
    path = write_edf(synthetic_raw(seconds=30), tmp_path / "r.edf")
    connectome = process_recording(
        path, PreprocessSettings.from_preset("default"), channels=["O2", "T3", "EEG Fp1", "cz"]
    )
    assert connectome.channels == ["O2", "T7", "Fp1", "Cz"]
    assert connectome.coh.shape == (5, 8, 4, 4)  # 30 s alone: auto epochs of 6 s


def test_process_recording_interpolates_a_missing_channel(tmp_path):
    path = write_edf(synthetic_raw(n_channels=18), tmp_path / "no_o2.edf")  # O2 missing
    settings = PreprocessSettings.from_preset("default", channels=tuple(STANDARD_1020))
    connectome = process_recording(path, settings)
    assert connectome.channels_interpolated == ["O2"] and connectome.coh.shape[-1] == 19
    assert connectome.coh[:, :, -1, -2].mean() > 0.5  # interpolated O2 follows its neighbour O1


@pytest.mark.slow
def test_kill_midway_then_rerun_finishes_without_redoing_work(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for seed in range(6):
        write_edf(synthetic_raw(seconds=120, seed=seed), folder / f"rec{seed}.edf")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "eegformer_cli", "preprocess", str(folder), "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list((out / "connectomes").glob("*.npz")) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 130
    assert "interrupted; rerun the same command to resume" in process.stderr.read().decode()
    done = {f.name: f.stat().st_mtime_ns for f in (out / "connectomes").glob("*.npz")}
    assert 1 <= len(done) < 6
    for file in done:
        load_connectome(out / "connectomes" / file)  # complete, readable files only
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"({len(done)} already done)" in result.stdout
    assert {
        f.name: f.stat().st_mtime_ns for f in (out / "connectomes").glob("*.npz") if f.name in done
    } == done
    assert len(list((out / "connectomes").glob("*.npz"))) == 6
    assert list(out.rglob(".tmp-*")) == []  # no half-written file anywhere
    assert [row["status"] for row in read_manifest(out)] == ["ok"] * 6


def test_paper_preset_follows_the_reference(tmp_path):
    """250 Hz, 30 s epochs, no rejection, ICA + ICLabel before the reference, 8 bands + the
    theta/beta ratio; the run below lowers the rate and component count only to save time."""
    settings = PreprocessSettings.from_preset("paper")
    assert (settings.sfreq, settings.epoch_length, settings.h_trans_bandwidth) == (
        250.0,
        30.0,
        "auto",
    )
    assert settings.ica and settings.ica_before_reference and settings.ica_n_components == 20
    assert settings.flat_ptp_v is None and settings.absurd_ptp_v is None
    path = write_edf(ica_friendly_raw(), tmp_path / "r.edf")
    connectome = process_recording(
        path, PreprocessSettings.from_preset("paper", sfreq=128.0, ica_n_components=6)
    )
    assert connectome.sfreq == 128.0 and connectome.epoch_length_s == 30.0
    assert connectome.coh.shape == (2, 9, 10, 10)
    np.testing.assert_allclose(connectome.band_edges_hz[8], [4 / 12, 8 / 30])
    ratio = connectome.coh[:, 8]
    assert np.isfinite(ratio).all() and ratio.min() >= 0 and ratio.max() > 0
    assert set(connectome.ica_excluded) <= {
        "muscle artifact",
        "eye blink",
        "heart beat",
        "line noise",
        "channel noise",
    }


def test_table_columns_named_like_manifest_columns_are_warned_about(tmp_path, capsys):
    """A participants column called ``status`` cannot be kept beside the manifest's own status:
    the user is told once, and the manifest's column keeps its meaning."""
    from eegformer_cli.simulation import simulate

    simulate.simulate_dataset(tmp_path / "study", n_participants=2, duration_s=30, sfreq=128)
    table = tmp_path / "study" / "participants.tsv"
    lines = table.read_text().splitlines()
    table.write_text(
        "\n".join([lines[0] + "\tstatus"] + [line + "\tscreened" for line in lines[1:]]) + "\n"
    )
    summary = run_preprocess(
        [tmp_path / "study"],
        tmp_path / "prep",
        PreprocessSettings.from_preset("default", epoch_length=6.0),
    )
    assert summary.n_ok == 2
    warnings = [line for line in capsys.readouterr().err.splitlines() if "also manifest" in line]
    assert warnings == [
        (
            "warning: participants table: column(s) status are also manifest "
            "columns; the manifest keeps its own values there (rename them to keep "
            "yours)"
        )
    ]
    manifest = (tmp_path / "prep" / "manifest.tsv").read_text().splitlines()
    rows = list(csv.DictReader(manifest, delimiter="\t"))
    assert [row["status"] for row in rows] == ["ok", "ok"]


def test_warnings_are_python_warnings_of_the_package_class(messy_folder, tmp_path, capsys):
    from eegformer_cli import EegformerWarning

    files = [messy_folder / "good1.edf", messy_folder / "short.edf"]
    with pytest.warns(EegformerWarning) as caught:
        run_preprocess(files, tmp_path / "a", PreprocessSettings.from_preset("default"))
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("short failed: ") and "too short" in m for m in messages), messages
    assert all(issubclass(w.category, UserWarning) for w in caught)
    capsys.readouterr()
    with warnings.catch_warnings():  # a script can silence them
        warnings.simplefilter("ignore", EegformerWarning)
        run_preprocess(files, tmp_path / "b", PreprocessSettings.from_preset("default"))
    assert "warning:" not in capsys.readouterr().err


def test_a_fif_files_bad_channels_are_interpolated_and_its_earlier_connectome_remade(tmp_path):
    """A FIF file keeps ``info["bads"]``: its bad channel is treated as missing (interpolated,
    said to be marked bad), as an mne.io.Raw's is; a connectome an earlier version made of it
    (bad channels only left out of the average reference, no channels key in its record) is
    made again by a rerun."""
    from eegformer_cli.preprocess import preprocess_raw
    from eegformer_cli.preprocess.output import connectome_path, read_manifest

    raw = synthetic_raw(seconds=40.0)
    raw.info["bads"] = ["C3"]
    folder = tmp_path / "fif"
    folder.mkdir()
    raw.save(folder / "sub-01_eeg.fif", verbose=False)
    settings = PreprocessSettings.from_preset("default", channels=list(STANDARD_1020))
    run_preprocess([folder], tmp_path / "out", settings)
    (row,) = read_manifest(tmp_path / "out")
    assert row["status"] == "ok" and row["channels_interpolated"] == "C3"
    stored = load_connectome(connectome_path(tmp_path / "out", row))
    assert stored.channels_marked_bad == ["C3"]
    in_memory = preprocess_raw(
        mne.io.read_raw_fif(folder / "sub-01_eeg.fif", verbose=False), settings
    )
    np.testing.assert_allclose(in_memory.coh, stored.coh, rtol=0, atol=1e-6)
    raw.info["bads"] = []
    unmarked = preprocess_raw(raw, settings)
    assert unmarked.channels_interpolated == [] and not np.allclose(unmarked.coh, stored.coh)
    # as an earlier version recorded it: no channels key
    stored.record = {key: value for key, value in stored.record.items() if key != "channels_key"}
    stored.save(connectome_path(tmp_path / "out", row))
    assert run_preprocess([folder], tmp_path / "out", settings).n_skipped == 0
    assert run_preprocess([folder], tmp_path / "out", settings).n_skipped == 1
