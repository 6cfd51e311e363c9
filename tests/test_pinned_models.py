"""Model files written by earlier versions predict what they predicted: the committed run
folders of ``tests/data`` (their READMEs say how each was made), each with the probabilities
its model files gave when it was pinned (``predictions.tsv``), on the synthetic preprocess
folder they were trained on, rebuilt here."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import EARLIER_RUN, PINNED_RUN, STACKED_RUN, make_connectome_folder

from eegformer_cli import load_model
from eegformer_cli.training.model_file import load_model_file

#: Each committed run folder and the ``make_connectome_folder`` arguments of its data.
PINNED = {
    EARLIER_RUN: {"n_participants": 20},
    PINNED_RUN: {"n_participants": 20, "effect": 0.05},
    STACKED_RUN: {"n_participants": 20, "effect": 0.05},
}


def stored_predictions(run: Path) -> dict[str, dict[str, np.ndarray]]:
    """``{model file: {recording_id: probabilities}}`` of ``run``'s ``predictions.tsv``."""
    with open(run / "predictions.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    out: dict[str, dict[str, np.ndarray]] = {}
    for row in rows:
        probabilities = [float(v) for k, v in row.items() if k.startswith("prob_")]
        out.setdefault(row["model_file"], {})[row["recording_id"]] = np.array(probabilities)
    return out


@pytest.mark.parametrize("run", list(PINNED), ids=lambda run: run.name)
def test_committed_model_files_predict_what_they_predicted(run, tmp_path):
    prep = make_connectome_folder(tmp_path / "prep", **PINNED[run])
    stored = stored_predictions(run)
    assert "model.pt" in stored
    for model_file, expected in stored.items():
        model = load_model(run / model_file, device="cpu")
        with pytest.warns(Warning):  # in_training_data: these are its training recordings
            table = model.predict_proba([prep])
        assert sorted(table.index) == sorted(expected)
        for recording_id, probabilities in expected.items():
            np.testing.assert_allclose(
                table.loc[recording_id].to_numpy(dtype=float), probabilities, rtol=0, atol=1e-5
            )


@pytest.mark.parametrize("run", [PINNED_RUN, STACKED_RUN], ids=lambda run: run.name)
def test_fold_models_give_the_runs_out_of_fold_predictions(run):
    """A pinned run's fold models on their test recordings: oof_predictions.tsv's rows."""
    stored = stored_predictions(run)
    with open(run / "oof_predictions.tsv", newline="") as handle:
        oof = list(csv.DictReader(handle, delimiter="\t"))
    model_rows = [row for row in oof if row["model"] == "xaiguiformer"]
    assert len(model_rows) == 20
    for row in model_rows:
        fold_file = f"folds/r{row['repeat']}_f{row['fold']}.pt"
        np.testing.assert_allclose(
            stored[fold_file][row["recording_id"]],
            [float(row["prob_control"]), float(row["prob_patient"])],
            rtol=0,
            atol=1e-5,
        )


@pytest.mark.parametrize("run", list(PINNED), ids=lambda run: run.name)
def test_model_files_of_format_version_1_read_back_as_stages(run):
    """Every tensor of a version-1 file lands in its stage, the keep decision in
    ``transformer_kept``; the standardiser and the static stage exist as the file said."""
    for path in [run / "model.pt", *sorted((run / "folds").glob("*.pt"))]:
        raw = torch.load(path, weights_only=True)
        assert raw["format_version"] == 1
        bundle = load_model_file(path)
        model, config = bundle.model, raw["model_config"]
        if "reference_connectome" in raw:  # the baseline connectome's name then
            for key in ("coh", "wpli"):
                np.testing.assert_array_equal(
                    bundle.baseline[key], raw["reference_connectome"][key].numpy()
                )
        assert (model.standardiser is not None) == raw["input_standardisation"]
        assert (model.static is not None) == bool(config.get("linear_path"))
        assert model.kept == config.get("residual_kept", True)
        state = model.state_dict()
        assert len(state) == len(raw["state_dict"]) + 1  # transformer_kept
        for key, value in raw["state_dict"].items():
            key = key.removeprefix("model.") if raw["input_standardisation"] else key
            if key in ("coh_mean", "coh_std", "wpli_mean", "wpli_std"):
                staged = f"standardiser.{key}"
            elif key.split(".")[0] in ("linear", "tangent_space", "static_mix"):
                staged = "static." + key.replace("static_mix.", "mix.")
            else:
                staged = f"transformer.{key}"
            torch.testing.assert_close(state[staged], value, rtol=0, atol=0, equal_nan=True)
