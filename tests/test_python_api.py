"""The Python API: the public names and their signatures, a lazy ``import
eegformer_cli``, a trained model on an ``mne.io.Raw`` against ``eegformer predict`` on the file,
``explain`` against the files of ``eegformer explain``, and the same exceptions as the CLI's
exit codes (tests/test_docs.py runs the guide's Python example).
"""

from __future__ import annotations

import csv
import inspect
import subprocess
import sys

import mne
import numpy as np
import pandas as pd
import pytest
from builders import SAMPLE_DATA, json_rows, run_main

import eegformer_cli
from eegformer_cli import commands, errors

EEG = SAMPLE_DATA / "eeg"
UNSEEN = EEG / "sub-13_task-rest_eeg.edf"  # not among the 12 recordings of the sample run

#: Every public name, its parameters as ``inspect`` shows them (keyword-only ones after ``*``).
SIGNATURES = {
    "load_model": "(path, device='auto', precision='auto')",
    "TrainedModel.predict": "(self, raw_or_paths, age=None, sex=None, *, participants=None, "
    "participant_id=None, max_interpolated=None, strict=False, on_row=None, coverage=None)",
    "TrainedModel.predict_proba": "(self, raw_or_paths, age=None, sex=None, **options)",
    "TrainedModel.explain": "(self, raw_or_paths, age=None, sex=None, *, participants=None, "
    "participant_id=None, target=None, contrast=None, method='integrated_gradients', n_steps=128, "
    "all_heads=False, max_interpolated=None, strict=False, out=None, overwrite=False)",
    "Explanations": "(recordings, band_importance, attention, attention_diagnostics, "
    "channel_pairs, contrast, per_recording, interactions)",
    "preprocess_raw": "(raw, settings='default', channels=None)",
    "load_connectome": "(path)",
    "XAIguiFormerClassifier": "(preset='default', config=None, epochs=None, batch_size=None, "
    "lr=None, patience=None, val_fraction=None, no_xai=False, no_interactions=False, "
    "no_age_interactions=False, frequency_encoding=None, random_state=0, device='auto')",
    "XAIguiFormerClassifier.fit": "(self, X, y, groups=None)",
    "XAIguiFormerClassifier.predict": "(self, X)",
    "XAIguiFormerClassifier.predict_proba": "(self, X)",
    "read_preprocessed": "(data_dir)",
    "commands.preprocess": "(inputs, out, *, participants=None, recordings=None, "
    "preset='default', channels=None, max_interpolated=None, bands=None, "
    "epoch_length=None, sfreq=None, ica=None, n_jobs=1, strict=False, "
    "backend='local', scheduler=None, overwrite=False, crop=None, participant_pattern=None, "
    "task=None, session=None, run=None)",
    "commands.train": "(data_dir=None, out=None, label_column=None, *, preset='default', "
    "config=None, cv=None, repeats=None, holdout=None, splits=None, "
    "epochs=None, batch_size=None, lr=None, patience=None, seed=None, "
    "device=None, precision=None, no_xai=False, no_interactions=False, "
    "no_age_interactions=False, frequency_encoding=None, "
    "positive_label=None, "
    "n_jobs=1, overwrite=False, fold=None, merge=None, confounds=None, "
    "permutations=0, permutation_model='reference', split_by='participant', "
    "learning_curve=False)",
    "commands.predict": "(model, inputs, *, participants=None, age=None, sex=None, "
    "max_interpolated=None, device='auto', precision='auto', strict=False, "
    "on_row=None, coverage=None)",
    "commands.explain": "(model, inputs, out, *, target=None, contrast=None, "
    "method='integrated_gradients', "
    "n_steps=128, all_heads=False, participants=None, max_interpolated=None, "
    "device='auto', strict=False, overwrite=False)",
    "commands.report": "(run_dir, *, explanations=None, out=None, band=None, overwrite=False)",
}
CLASSES = ("TrainedModel", "PreprocessSettings", "Connectome")
EXCEPTIONS = (
    "EegformerError",
    "UsageError",
    "InputDataError",
    "RecordingError",
    "ModelFileError",
    "OutputError",
    "PartialFailure",
)


def parameters(obj) -> str:
    """``inspect.signature`` without annotations: names, defaults and the ``*`` marker."""
    signature = inspect.signature(obj)
    return str(
        signature.replace(
            parameters=[
                p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
            ],
            return_annotation=inspect.Signature.empty,
        )
    )


def resolve(dotted: str):
    obj = eegformer_cli
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_public_name_imports_with_its_signature_and_a_numpydoc_docstring():
    assert sorted(eegformer_cli.__all__) == sorted(
        {
            "__version__",
            "commands",
            "errors",
            "EegformerWarning",
            *CLASSES,
            *EXCEPTIONS,
            *{name.split(".")[0] for name in SIGNATURES},
        }
    )
    for name in eegformer_cli.__all__:
        assert getattr(eegformer_cli, name) is not None
        exec(f"from eegformer_cli import {name}", {})
    for dotted, expected in SIGNATURES.items():
        obj = resolve(dotted)
        assert parameters(obj) == expected, dotted
        if not dotted.startswith(("Explanations", "XAIguiFormerClassifier.")):
            assert "Parameters\n" in inspect.getdoc(obj), f"{dotted}: numpydoc Parameters"
        if inspect.isfunction(obj) and not dotted.startswith("XAIguiFormerClassifier"):
            assert "Returns\n" in inspect.getdoc(obj), f"{dotted}: numpydoc Returns"
    for name in EXCEPTIONS:
        assert issubclass(getattr(eegformer_cli, name), eegformer_cli.EegformerError)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        eegformer_cli.nonexistent


@pytest.mark.slow
def test_import_loads_neither_torch_nor_mne_nor_sklearn_nor_pandas():
    heavy = ("torch", "mne", "sklearn", "pandas", "scipy")
    code = (
        "import sys, eegformer_cli; from eegformer_cli import commands, errors; "
        "eegformer_cli.UsageError; "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def participant_row(participant_id: str) -> dict:
    with open(SAMPLE_DATA / "participants.tsv", newline="") as handle:
        return next(
            row
            for row in csv.DictReader(handle, delimiter="\t")
            if row["participant_id"] == participant_id
        )


def test_predict_proba_of_a_raw_equals_predict_on_the_file(sample_run, capsys):
    """Acceptance: ``load_model(...).predict_proba(raw)`` on a Raw read with
    ``mne.io.read_raw_edf`` gives ``eegformer predict``'s probabilities for the file."""
    code, output = run_main(capsys, "predict", sample_run["model"], UNSEEN, "--format", "json")
    assert code == 0, output
    (cli,) = json_rows(output)
    person = participant_row("sub-13")
    raw = mne.io.read_raw_edf(UNSEEN, verbose="error")
    names = list(raw.ch_names)
    model = eegformer_cli.load_model(sample_run["model"], device="cpu")
    age, sex = float(person["age"]), person["sex"]
    probabilities = model.predict_proba(raw, age=age, sex=sex)
    assert list(probabilities.index) == ["sub-13_task-rest_eeg"] and cli["age"] == age
    assert list(probabilities.columns) == model.classes == ["depression", "healthy"]
    difference = max(
        abs(probabilities.loc["sub-13_task-rest_eeg", c] - cli[f"prob_{c}"]) for c in model.classes
    )
    assert difference < 1e-6, difference
    rows = model.predict(raw, age=age, sex=sex)
    assert list(rows.columns) == list(cli)  # the CLI's columns, provenance included
    row = rows.iloc[0]
    assert row["source_file"] == str(UNSEEN) and row["n_segments"] == cli["n_segments"]
    assert row["age_source"] == "flag" and row["warnings"] == cli["warnings"]
    assert not raw.preload and raw.ch_names == names  # the caller's Raw is left as it was


def test_a_raw_gets_the_participant_the_cli_finds_for_its_file(sample_run, capsys):
    """A Raw read from a file: the participant, age and sex ``eegformer predict`` finds for the
    file (the participants table beside it); one made in memory: ``participant_id=``, whose
    row of ``participants=`` gives age and sex."""
    code, output = run_main(capsys, "predict", sample_run["model"], UNSEEN, "--format", "json")
    assert code == 0, output
    (cli,) = json_rows(output)
    model = eegformer_cli.load_model(sample_run["model"], device="cpu")
    raw = mne.io.read_raw_edf(UNSEEN, verbose="error")
    row = model.predict(raw).iloc[0]
    assert row["participant_id"] == cli["participant_id"] == "sub-13"
    assert (row["age"], row["sex"]) == (cli["age"], cli["sex"]) == (59.0, "M")
    assert row["age_source"] == row["sex_source"] == cli["age_source"] == "table"
    assert abs(row["prob_healthy"] - cli["prob_healthy"]) < 1e-6
    made = mne.io.RawArray(raw.get_data(), raw.info, verbose="error")
    table = SAMPLE_DATA / "participants.tsv"
    named = model.predict(made, participant_id="sub-13", participants=table).iloc[0]
    assert named["recording_id"] == "raw-0" and named["participant_id"] == "sub-13"
    assert (named["age"], named["sex"], named["age_source"]) == (59.0, "M", "table")
    assert abs(named["prob_healthy"] - cli["prob_healthy"]) < 1e-6
    anonymous = model.predict(made).iloc[0]
    assert anonymous["participant_id"] is None and anonymous["age_source"] == "none"
    with pytest.raises(errors.UsageError, match="participant_id= is for mne.io.Raw inputs"):
        model.predict(UNSEEN, participant_id="sub-13")


def test_paths_give_the_cli_rows_and_warnings(sample_run, capsys):
    """Paths behave as in the CLI: the participants table beside them, the same rows, the
    same warnings on stderr (a training recording is ``in_training_data``)."""
    edfs = sorted(EEG.glob("*.edf"))[10:14]
    code, output = run_main(capsys, "predict", sample_run["model"], *edfs, "--format", "json")
    assert code == 0, output
    cli = json_rows(output)
    rows = commands.predict(sample_run["model"], edfs, device="cpu")
    python_output = capsys.readouterr().err
    assert rows["recording_id"].tolist() == [row["recording_id"] for row in cli]
    for row, expected in zip(rows.to_dict("records"), cli):
        assert row["warnings"] == expected["warnings"] and row["sex"] == expected["sex"]
        assert abs(row["prob_healthy"] - expected["prob_healthy"]) < 1e-12
    warned = [line for line in output.splitlines() if line.startswith("warning:")]
    assert warned and warned == [
        line for line in python_output.splitlines() if line.startswith("warning:")
    ]


def test_preprocess_raw_is_the_connectome_of_the_file(tmp_path):
    """``preprocess_raw`` touches no disk and gives the connectome ``preprocess`` writes."""
    from eegformer_cli.preprocess import process_recording

    raw = mne.io.read_raw_edf(EEG / "sub-02_task-rest_eeg.edf", verbose="error")
    settings = eegformer_cli.PreprocessSettings.from_preset("default")
    connectome = eegformer_cli.preprocess_raw(raw, settings)
    on_disk = process_recording(EEG / "sub-02_task-rest_eeg.edf", settings)
    assert isinstance(connectome, eegformer_cli.Connectome)
    assert np.array_equal(connectome.coh, on_disk.coh)
    assert np.array_equal(connectome.wpli, on_disk.wpli)
    assert connectome.signal_sha256 == on_disk.signal_sha256
    assert connectome.channels[:2] == ["Fp1", "Fp2"]  # 'EEG Fp1-REF' in the file
    connectome.save(tmp_path / "c.npz")
    assert np.array_equal(eegformer_cli.load_connectome(tmp_path / "c.npz").coh, on_disk.coh)
    made = mne.io.RawArray(raw.get_data(), raw.info, verbose="error")  # made in memory
    assert np.array_equal(eegformer_cli.preprocess_raw(made, "default").coh, on_disk.coh)


def test_explain_returns_the_numbers_explain_writes(sample_run, tmp_path, capsys):
    edfs = sorted(EEG.glob("*.edf"))[12:14]
    out = tmp_path / "explanations"
    code, output = run_main(
        capsys, "explain", sample_run["model"], *edfs, "--out", out, "--n-steps", "8"
    )
    assert code == 0, output
    model = eegformer_cli.load_model(sample_run["model"], device="cpu")
    raws = [mne.io.read_raw_edf(path, verbose="error") for path in edfs]
    people = [participant_row(path.name.split("_")[0]) for path in edfs]
    result = model.explain(
        raws, age=[float(p["age"]) for p in people], sex=[p["sex"] for p in people], n_steps=8
    )
    assert isinstance(result, eegformer_cli.Explanations)
    for name in (
        "band_importance",
        "attention",
        "attention_diagnostics",
        "channel_pairs",
        "recordings",
    ):
        written = pd.read_csv(out / f"{name}.csv", keep_default_na=False)
        table = getattr(result, name)
        assert list(table.columns) == list(written.columns), name
        assert len(table) == len(written), name
        for column in table.columns:
            if pd.api.types.is_float_dtype(table[column]):  # files: 6 significant digits
                assert np.allclose(
                    table[column],
                    pd.to_numeric(written[column], errors="coerce"),
                    rtol=6e-6,
                    atol=1e-12,
                    equal_nan=True,
                ), (name, column)
    for explanation in result.per_recording:
        with np.load(out / f"{explanation.recording_id}.npz") as data:
            assert np.allclose(explanation.channel_pairs, data["channel_pairs"])


def test_bad_input_raises_the_cli_s_exception_and_message(sample_run, tmp_path, capsys):
    code, output = run_main(capsys, "predict", tmp_path / "missing.pt", UNSEEN)
    with pytest.raises(errors.ModelFileError) as raised:
        eegformer_cli.load_model(tmp_path / "missing.pt")
    assert code == errors.ModelFileError.exit_code == 4
    assert output.strip() == f"eegformer: error: {raised.value.one_line()}"

    model = eegformer_cli.load_model(sample_run["model"], device="cpu")
    raw = mne.io.read_raw_edf(UNSEEN, preload=True, verbose="error")
    with pytest.raises(errors.UsageError, match=r"invalid --age 'old'"):
        model.predict(raw, age="old")
    with pytest.raises(errors.UsageError, match="not both"):
        model.predict([raw, UNSEEN])
    with pytest.raises(errors.UsageError, match="invalid --target 'sick'"):
        model.explain(raw, target="sick")

    short = raw.copy().crop(0, 5)
    short_file = tmp_path / "short.edf"
    mne.export.export_raw(short_file, short, fmt="edf", verbose="error")
    code, output = run_main(capsys, "predict", sample_run["model"], short_file)
    assert code == errors.InputDataError.exit_code == 3
    cli_line = output.strip().splitlines()[-1]
    with pytest.raises(errors.RecordingError) as raised:
        model.predict(mne.io.read_raw_edf(short_file, verbose="error"), age=40, sex="F")
    assert cli_line == f"eegformer: error: {raised.value.one_line()}"
    assert raised.value.result.empty  # no recording worked

    with pytest.raises(
        errors.InputDataError, match=r"^2 recording\(s\) could not be predicted"
    ) as raised:
        model.predict([short, raw, short.copy()], age=40, sex="F")
    assert raised.value.result["recording_id"].tolist() == ["sub-13_task-rest_eeg-2"]
