"""The static stage: a tangent-space path inside the model, chosen by the inner CV, read by
predict and explain like every other part (``model/static_paths.py``,
``training/static_choice.py``)."""

from __future__ import annotations

import csv
import json
import zipfile

import numpy as np
import pytest
import torch
from builders import json_rows, run_main

from eegformer_cli.training.static_choice import CHOICE_MARGINS, choose

#: A strong power effect on few people, so that the tangent space carries the label: a carrier's
#: amplitude gain on one channel in one band.
GAIN = 3.0


@pytest.fixture(scope="module")
def power_run(tmp_path_factory) -> dict:
    """``simulate --scenario power`` (60 people, 30 s), preprocessed, and ``default`` trained
    with 3-fold CV, 2 epochs and the transformer always kept (every path in the output)."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
    from eegformer_cli.simulation.scenarios import simulate_scenario
    from eegformer_cli.training.config import resolve_config

    root = tmp_path_factory.mktemp("power")
    study, prep, run = root / "study", root / "prep", root / "run"
    truth = simulate_scenario(study, "power", 60, 30, 128, seed=3, gain=GAIN)
    run_preprocess([study], prep, PreprocessSettings.from_preset("default"), n_jobs=2)
    config = resolve_config(
        "default", None, {"epochs": 2, "cv": 3, "transformer_path": "on", "device": "cpu"}
    )
    run_training(prep, run, "diagnosis", config)
    return {"study": study, "prep": prep, "run": run, "truth": truth}


def test_the_connectivity_path_stays_unless_a_candidate_beats_it_by_its_margin():
    scores = {"connectivity": 0.70, "tangent_space": 0.70 + CHOICE_MARGINS["tangent_space"]}
    assert choose(scores, "auto") == "connectivity"  # by the margin, not more
    scores["tangent_space"] += 0.01
    assert choose(scores, "auto") == "tangent_space"
    scores["stacked"] = scores["tangent_space"] + 0.01
    assert choose(scores, "auto") == "stacked"  # the best of those beyond their margins
    assert choose({"connectivity": None, "stacked": 0.9}, "auto") == "connectivity"
    assert choose({"connectivity": 0.9, "stacked": None}, "auto") == "connectivity"
    assert choose(scores, "connectivity") == "connectivity"  # a forced candidate
    assert choose(scores, "tangent_space") == "tangent_space"


def test_a_power_study_is_carried_by_the_tangent_space_the_reference_inside_the_model(power_run):
    metrics = json.loads((power_run["run"] / "metrics.json").read_text())
    counts = metrics["linear_path"]["static_candidates"]
    assert counts.get("connectivity", 0) == 0, counts  # the covariances carry the label
    models = metrics["models"]
    assert models["xaiguiformer"]["mean"]["bac"] >= models["tangent_space"]["mean"]["bac"] - 0.05
    folds = [
        json.loads(p.read_text()) for p in sorted((power_run["run"] / "folds").glob("r*.json"))
    ]
    for index, fold in enumerate(folds):
        static = fold["linear_path"]["static"]
        if static["candidate"] != "tangent_space":
            continue
        # the path alone is the tangent-space reference: same features, folds, grid and fit
        ours, theirs = (
            models[name]["per_fold"][index] for name in ("linear_path", "tangent_space")
        )
        assert ours["auroc"] == pytest.approx(theirs["auroc"], abs=1e-9)
        assert ours["bac"] == pytest.approx(theirs["bac"], abs=1e-9)


def test_a_saved_model_reads_back_as_its_stages(power_run):
    from eegformer_cli.model.stages import Standardiser, StaticStage
    from eegformer_cli.model.static_paths import reads_covariance
    from eegformer_cli.model.transformer_path import TransformerPath
    from eegformer_cli.training.model_file import FORMAT_VERSION, load_model_file

    for path in sorted((power_run["run"] / "folds").glob("*.pt")):
        raw = torch.load(path, weights_only=True)
        assert raw["format_version"] == FORMAT_VERSION
        stages = {key.split(".")[0] for key in raw["state_dict"]}
        assert stages == {"standardiser", "static", "transformer", "transformer_kept"}
        bundle = load_model_file(path)
        fold = json.loads(path.with_suffix(".json").read_text())["linear_path"]
        record = fold["static"]
        model = bundle.model
        assert isinstance(model.standardiser, Standardiser)
        assert isinstance(model.static, StaticStage) and model.static.on_means
        assert isinstance(model.transformer, TransformerPath)
        assert model.kept == fold["transformer_kept"]
        assert model.static.linear is not None and model.static.tangent_space is not None
        np.testing.assert_allclose(model.static.mix.weight.numpy(), record["weight"], rtol=1e-6)
        assert reads_covariance(model) == (record["weight"][1] != 0)
        assert model.static.tangent_space.reference_invsqrt.dtype == torch.float64
        assert bundle.model_config["tangent_space_bands"]


def _oof(run) -> dict[str, list[float]]:
    with open(run / "oof_predictions.tsv", newline="") as handle:
        return {
            row["recording_id"]: [float(row["prob_control"]), float(row["prob_patient"])]
            for row in csv.DictReader(handle, delimiter="\t")
            if row["model"] == "xaiguiformer"
        }


def test_predict_with_a_fold_model_reproduces_its_out_of_fold_probabilities(power_run, capsys):
    """From the preprocess folder and from a raw file (preprocessed with the model's settings,
    its covariances included)."""
    run, prep = power_run["run"], power_run["prep"]
    oof = _oof(run)
    fold = sorted((run / "folds").glob("*.pt"))[0]
    tested = [
        row["recording_id"]
        for row in json.loads(fold.with_suffix(".json").read_text())["oof"]
        if row["model"] == "xaiguiformer"
    ]
    code, output = run_main(capsys, "predict", fold, prep, "--format", "json")
    assert code == 0, output
    rows = {row["recording_id"]: row for row in json_rows(output)}
    for rid in tested:
        assert [rows[rid]["prob_control"], rows[rid]["prob_patient"]] == pytest.approx(
            oof[rid], abs=1e-6
        )
    raw = next((power_run["study"] / "eeg").glob(f"{tested[0]}.*"))
    code, output = run_main(capsys, "predict", fold, raw, "--format", "json")
    assert code == 0, output
    row = json_rows(output)[0]
    assert [row["prob_control"], row["prob_patient"]] == pytest.approx(oof[tested[0]], abs=1e-5)


def test_predict_refuses_a_folder_without_covariances_in_one_line(power_run, tmp_path, capsys):
    import shutil

    old = tmp_path / "old-prep"
    shutil.copytree(power_run["prep"], old)
    for path in (old / "connectomes").glob("*.npz"):  # as an earlier version wrote them
        with np.load(path) as data:
            kept = {k: data[k] for k in data.files if not k.startswith("covariance")}
        np.savez(path, **kept)
        assert "covariance" not in zipfile.ZipFile(path).namelist()[0]
    model = power_run["run"] / "model.pt"
    code, output = run_main(capsys, "predict", model, old, "--format", "json")
    assert code != 0
    assert "band covariances" in output and "Traceback" not in output


def _carriers(truth: dict) -> list[str]:
    return [p["participant_id"] for p in truth["participants"] if max(p["gains"].values()) > 1.0]


def test_explanations_add_up_over_every_path_and_find_the_planted_power(power_run):
    """Completeness over the connectivity, the interactions, the covariances and the
    transformer; the power maps rank the planted band and channel first in the carriers' mean
    map and in most carriers' own (at 60 people a carrier's top cell is at times another
    channel's natural variation)."""
    from eegformer_cli.explain.attributions import explain_recording
    from eegformer_cli.explain.path_shares import band_power, covariance_attributions
    from eegformer_cli.preprocess import output
    from eegformer_cli.training.dataset import load_training_data
    from eegformer_cli.training.model_file import load_model_file

    bundle = load_model_file(power_run["run"] / "model.pt")
    data = load_training_data(power_run["prep"], "diagnosis")
    power = power_run["truth"]["power"]
    band = bundle.model_config["tangent_space_bands"].index(power["token_band"])
    channel = data.channels.index(power["channel"])
    carriers = set(_carriers(power_run["truth"]))
    patient = bundle.label_names.index("patient")
    maps = []
    for rec in data.recordings:
        if rec.participant_id not in carriers:
            continue
        covariance = output.read_covariances(rec.connectome, len(data.channels), "")
        maps.append(band_power(covariance_attributions(bundle.model, covariance, patient, 32)))
    tops = [np.unravel_index(np.argmax(power), power.shape) == (band, channel) for power in maps]
    assert len(tops) >= 10 and np.mean(tops) >= 0.6, tops
    mean = np.mean(maps, axis=0)  # the report's map of the class
    assert np.unravel_index(np.argmax(mean), mean.shape) == (band, channel)
    rec = next(r for r in data.recordings if r.participant_id in carriers)
    coh, wpli = output.read_tokens(rec.connectome, data.channels, data.bands, rec.n_segments, "")
    covariance = output.read_covariances(rec.connectome, len(data.channels), "")
    explained = explain_recording(
        bundle.model,
        coh,
        wpli,
        rec.age,
        rec.sex,
        bundle.label_names,
        recording_id=rec.recording_id,
        target="patient",
        n_steps=32,
        reference=(bundle.baseline["coh"], bundle.baseline["wpli"]),
        covariance=covariance,
    )
    paths = explained.paths["target"]
    assert paths["tangent_space"] != 0
    upper = np.triu_indices(len(data.channels), 1)
    attributed = explained.channel_pairs[:, upper[0], upper[1]].sum()
    attributed += sum(row["value"] for row in explained.interactions or [])
    attributed += explained.covariance_pairs.sum()
    assert attributed == pytest.approx(paths["total"], abs=0.02 * abs(paths["total"]) + 1e-3)
    np.testing.assert_array_equal(
        explained.band_power, np.diagonal(explained.covariance_pairs, axis1=1, axis2=2)
    )
