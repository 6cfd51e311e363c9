"""A model and the preprocess folder it reads must share every setting that changes the tokens
(``PreprocessSettings.differences``): each field of ``PreprocessSettings`` is compared or
declared harmless, a setting missing from stored settings counts with its default of the
version that wrote them, and the crop mismatch in both directions is refused by ``predict``,
``explain`` and the Python API (exit 3, naming the difference and the fix). A recording shorter
than the model's crop is scored whole with a warning."""

from __future__ import annotations

import dataclasses
import json
import shutil

import mne
import pytest
from builders import SAMPLE_DATA, json_rows, run_main

import eegformer_cli
from eegformer_cli.connectivity.bands import BAND_PRESETS
from eegformer_cli.errors import EegformerWarning, InputDataError, PartialFailure, UsageError
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.preprocess.settings import NOT_COMPARED, TOKEN_SETTINGS

EDFS = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))
CROP_S = 30.0

#: For every compared setting, another valid value than the default's (a new field of
#: PreprocessSettings fails the enumeration test until it is given one here, or declared
#: harmless in NOT_COMPARED).
OTHER_VALUES = {
    "sfreq": 256.0,
    "resample_method": "fft",
    "l_freq": 0.5,
    "h_freq": 40.0,
    "h_trans_bandwidth": "auto",
    "epoch_length": 30.0,
    "window_s": 2.0,
    "flat_ptp_v": None,
    "absurd_ptp_v": 1e-3,
    "ica": True,
    "ica_n_components": 15,
    "ica_random_state": 1,
    "ica_before_reference": True,
    "bands": BAND_PRESETS["paper"],
    "channels": ("Fp1", "Fp2", "O1", "O2"),
    "crop_s": 62.0,
}
HARMLESS_VALUES = {"preset": "paper", "max_interpolated": 5}


def test_every_setting_is_compared_or_declared_harmless():
    fields = [field.name for field in dataclasses.fields(PreprocessSettings)]
    assert set(TOKEN_SETTINGS).isdisjoint(NOT_COMPARED)
    assert set(fields) == set(TOKEN_SETTINGS) | set(NOT_COMPARED), "declare each new field"
    assert set(OTHER_VALUES) == set(TOKEN_SETTINGS) and set(HARMLESS_VALUES) == set(NOT_COMPARED)
    default = PreprocessSettings()
    for name, value in OTHER_VALUES.items():
        other = dataclasses.replace(default, **{name: value})
        assert list(other.differences(default)) == [name], name
    for name, value in HARMLESS_VALUES.items():
        other = dataclasses.replace(default, **{name: value})
        assert other.differences(default) == {}, name
        assert list(other.differences(default, tokens_only=False)) == [name], name


def test_a_setting_missing_from_stored_settings_counts_with_its_version_s_default():
    uncropped = PreprocessSettings(epoch_length=9.0).to_dict()
    assert "crop_s" not in uncropped  # to_dict (and so the hash) unchanged without a crop
    cropped = PreprocessSettings(epoch_length=9.0, crop_s=CROP_S)
    read = PreprocessSettings.from_dict(uncropped)
    assert read.differences(cropped) == {"crop_s": ("none", "30")}
    assert cropped.differences(read) == {"crop_s": ("30", "none")}
    del uncropped["resample_method"]  # stored before it was a setting: MNE's FFT method
    earlier = PreprocessSettings.from_dict(uncropped)
    assert earlier.differences(read) == {"resample_method": ("fft", "polyphase")}


@pytest.fixture(scope="module")
def cropped(sample_run, tmp_path_factory) -> dict:
    """The sample run (uncropped), and the same 12 recordings preprocessed with a 30 s crop
    (otherwise the same settings) with a tiny model trained on them."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.training.config import resolve_config

    sample = sample_run
    root = tmp_path_factory.mktemp("cropped")
    prep, run_dir = root / "prep", root / "run"
    settings = PreprocessSettings.of_folder(sample["prep"])
    assert settings is not None and settings.crop_s is None
    run_preprocess(
        EDFS[:12],
        prep,
        dataclasses.replace(settings, crop_s=CROP_S),
        participants=SAMPLE_DATA / "participants.tsv",
        n_jobs=2,
    )
    config = resolve_config(
        "default",
        None,
        {
            "epochs": 3,
            "batch_size": 8,
            "holdout": 0.25,
            "val_fraction": 0.25,
            "device": "cpu",
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 2, "n_gnn_layers": 1},
        },
    )
    run_training(prep, run_dir, "diagnosis", config)
    return {"sample": sample, "prep": prep, "run": run_dir, "model": run_dir / "model.pt"}


@pytest.mark.slow
def test_the_crop_mismatch_is_refused_both_ways(cropped, tmp_path, capsys):
    sample, out = cropped["sample"], tmp_path / "explained"
    for model, folder, here, theirs in (
        (cropped["model"], sample["prep"], "none", "30"),
        (sample["model"], cropped["prep"], "30", "none"),
    ):
        expected = f"crop_s {here} (model: {theirs})"
        for command in (["predict"], ["explain", "--out", out]):
            code, output = run_main(capsys, *command, model, folder)
            assert code == InputDataError.exit_code == 3, output
            assert not out.exists()  # refused before anything is written
            (line,) = output.strip().splitlines()
            assert line.startswith(f"eegformer: error: {folder}: made with other preprocessing")
            assert expected in line and "pass the raw recordings instead" in line
            assert "epoch_length" not in line  # the one setting that differs
        trained_model = eegformer_cli.load_model(model, device="cpu")
        for method in (trained_model.predict, trained_model.explain):
            with pytest.raises(InputDataError, match=rf"crop_s {here} \(model: {theirs}\)"):
                method(folder)
    # the raw recordings are preprocessed with the model's settings instead
    code, output = run_main(capsys, "predict", cropped["model"], EDFS[12], "--format", "json")
    assert code == 0, output
    assert json_rows(output)[0]["n_segments"] == 3  # 30 s in 9 s segments


@pytest.mark.slow
def test_a_rerun_into_a_cropped_folder_names_the_crop(cropped, tmp_path):
    folder = tmp_path / "prep"
    shutil.copytree(cropped["prep"], folder)
    settings = PreprocessSettings.of_folder(folder)
    with pytest.raises(UsageError, match=r"\(different: crop_s\)"):
        run_preprocess(EDFS[:2], folder, dataclasses.replace(settings, crop_s=None))


@pytest.mark.slow
def test_a_recording_shorter_than_the_crop_is_scored_whole_with_a_warning(
    cropped, tmp_path, capsys
):
    raw = mne.io.read_raw_edf(EDFS[13], preload=True, verbose="error").crop(
        0, 24.0, include_tmax=False
    )
    short = tmp_path / "sub-14_task-rest_eeg.edf"
    mne.export.export_raw(short, raw, fmt="edf", verbose="error")
    flags = ("--age", "40", "--sex", "F")
    code, output = run_main(capsys, "predict", cropped["model"], short, *flags, "--format", "json")
    assert code == 0, output
    (row,) = json_rows(output)
    message = (
        "crop: 24.0 s long, shorter than the 30 s the model's training recordings were "
        "cropped to: analysed whole, 2 segment(s), so its score is noisier than theirs"
    )
    assert row["warnings"] == [message] and row["n_segments"] == 2
    assert f"warning: {row['recording_id']}: {message}" in " ".join(output.split())
    model = eegformer_cli.load_model(cropped["model"], device="cpu")
    with pytest.warns(EegformerWarning, match="shorter than the 30 s"):
        rows = model.predict(raw, age=40, sex="F")
    assert rows.iloc[0]["warnings"] == [message]
    assert "--crop" not in message  # the same words for the shell and for Python
    with pytest.raises(PartialFailure):
        model.predict(raw, age=40, sex="F", strict=True)
    code, output = run_main(capsys, "predict", cropped["model"], short, *flags, "--strict")
    assert code == PartialFailure.exit_code == 6


@pytest.mark.slow
def test_a_model_file_s_settings_and_the_folder_s_are_read_the_same_way(cropped):
    """The model stores the folder's preprocess.json settings: read back, nothing differs."""
    bundle_settings = eegformer_cli.load_model(cropped["model"], device="cpu").preprocess_settings
    stored = json.loads((cropped["prep"] / "preprocess.json").read_text())["settings"]
    assert bundle_settings.differences(PreprocessSettings.from_dict(stored)) == {}
    assert bundle_settings == PreprocessSettings.of_folder(cropped["prep"])
