"""``eegformer explain``: shapes and documented normalisations of every output, Integrated
Gradients completeness, the model-randomisation sanity check (Adebayo et al. 2018), the CLI end
to end on sample data (files, tables, agreement with ``predict``, clear errors) and on msu.
"""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import (
    RANDOM_BANDS,
    RANDOM_N_CHANNELS,
    SAMPLE_DATA,
    random_connectivity,
    random_model,
    run_main,
)
from scipy.stats import spearmanr

from eegformer_cli.choices import CAPTUM_METHODS
from eegformer_cli.explain.attributions import explain_recording
from eegformer_cli.explain.class_summary import class_means
from eegformer_cli.inference.inputs import load_inputs
from eegformer_cli.inference.predictions import predict_recordings
from eegformer_cli.training.model_file import load_model_file

EEGFORMER = [sys.executable, "-m", "eegformer_cli"]


def test_shapes_and_documented_normalisations_on_a_random_model():
    model = random_model()
    coh, wpli = random_connectivity(5, seed=1)
    labels = ["a", "b", "c"]
    e = explain_recording(model, coh, wpli, 40.0, 1.0, labels, recording_id="r1")
    L, T, C = 2, len(RANDOM_BANDS), RANDOM_N_CHANNELS
    assert e.n_segments == 5 and e.predicted in labels and e.target == e.predicted
    assert e.probabilities.shape == (3,) and e.probabilities.sum() == pytest.approx(1)
    assert e.band_importance.shape == (T,)
    assert np.abs(e.band_importance).sum() == pytest.approx(1.0)
    for maps in (e.attention_coarse, e.attention_refined):
        assert maps.shape == (L, T, T)
        np.testing.assert_allclose(maps.sum(axis=-1), 1.0, atol=1e-5)  # softmax rows
    assert not np.allclose(e.attention_coarse, e.attention_refined)  # refinement acts
    for pairs in (e.channel_pairs, e.coh_pairs, e.wpli_pairs):
        assert pairs.shape == (T, C, C)
        np.testing.assert_allclose(pairs, pairs.transpose(0, 2, 1))
    np.testing.assert_allclose(e.channel_pairs, e.coh_pairs + e.wpli_pairs)
    # the diagonal inputs are zero, as is the baseline, so Integrated Gradients gives them zero
    np.testing.assert_allclose(e.channel_pairs[:, np.arange(C), np.arange(C)], 0, atol=1e-7)

    # Integrated Gradients completeness: the sum over unordered pairs (i < j) equals the
    # segment-mean refined logit of the explained class minus its value at zero connectivity
    target = labels.index(e.target)
    age, sex = torch.full((5,), 40.0), torch.full((5,), 1.0)
    with torch.no_grad():
        at_input = model(torch.from_numpy(coh), torch.from_numpy(wpli), age, sex)[1][:, target]
        at_zero = model(
            torch.zeros_like(torch.from_numpy(coh)),
            torch.zeros_like(torch.from_numpy(wpli)),
            age,
            sex,
        )[1][:, target]
    upper = np.triu_indices(C, 1)
    total = e.channel_pairs[:, upper[0], upper[1]].sum()
    gap = float((at_input - at_zero).mean())
    assert total == pytest.approx(gap, rel=0.05, abs=1e-4)

    heads = explain_recording(
        model, coh, wpli, 40.0, 1.0, labels, recording_id="r1", all_heads=True, target="c"
    )
    assert heads.attention_coarse.shape == (L, 2, T, T) and heads.target == "c"
    np.testing.assert_allclose(heads.attention_coarse.mean(axis=1), e.attention_coarse, atol=1e-6)


@pytest.mark.parametrize("method", [m for m in CAPTUM_METHODS if m != "integrated_gradients"])
def test_other_captum_methods_give_symmetric_band_pair_maps(method):
    coh, wpli = random_connectivity(3, seed=2)
    torch.manual_seed(0)
    e = explain_recording(
        random_model(),
        coh,
        wpli,
        float("nan"),
        float("nan"),
        ["a", "b", "c"],
        recording_id="r",
        method=method,
        n_steps=4,
    )
    assert e.channel_pairs.shape == (len(RANDOM_BANDS), RANDOM_N_CHANNELS, RANDOM_N_CHANNELS)
    assert np.isfinite(e.channel_pairs).all() and np.abs(e.channel_pairs).sum() > 0
    if method == "saliency":  # |gradient|: never negative
        assert (e.channel_pairs >= 0).all()


def test_class_means_renormalise_band_importance():
    model = random_model()
    explanations = [
        explain_recording(
            model,
            *random_connectivity(2, seed=s),
            30.0,
            0.0,
            ["a", "b", "c"],
            recording_id=f"r{s}",
            target=t,
            n_steps=4,
        )
        for s, t in ((1, "a"), (2, "a"), (3, "b"))
    ]
    means = class_means(explanations)
    assert set(means) == {"a", "b"} and means["a"]["n_recordings"] == 2
    assert np.abs(means["a"]["band_importance"]).sum() == pytest.approx(1)
    np.testing.assert_allclose(
        means["a"]["channel_pairs"],
        (explanations[0].channel_pairs + explanations[1].channel_pairs) / 2,
    )
    np.testing.assert_allclose(means["b"]["attention_refined"], explanations[2].attention_refined)


def _shuffled_weights(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A copy with every parameter tensor's entries randomly permuted (same weight
    distribution, structure destroyed); buffers (input statistics) kept."""
    generator = torch.Generator().manual_seed(seed)
    shuffled = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in shuffled.parameters():
            flat = parameter.flatten()
            parameter.copy_(
                flat[torch.randperm(flat.numel(), generator=generator)].view_as(parameter)
            )
    return shuffled


def test_model_randomisation_changes_the_attributions(sample_run):
    """Adebayo et al. 2018: attributions that survive randomising the weights explain the
    input, not the model. Rank correlation of the channel-pair maps (upper triangles, all
    bands, 3 recordings) of the trained model against the same model with shuffled weights
    must be low, while recomputing with other IG steps (a positive control) stays high."""
    bundle = load_model_file(sample_run["model"])
    items = [i for i in load_inputs(bundle, [sample_run["prep"]]) if i.error is None][:3]
    upper = np.triu_indices(len(bundle.channels), 1)

    def maps(model, n_steps=32):
        out = [
            explain_recording(
                model,
                i.coh,
                i.wpli,
                i.age,
                i.sex,
                bundle.label_names,
                recording_id=i.recording_id,
                target=bundle.label_names[0],
                n_steps=n_steps,
            ).channel_pairs[:, upper[0], upper[1]]
            for i in items
        ]
        return np.concatenate([m.ravel() for m in out])

    trained = maps(bundle.model)
    control = spearmanr(trained, maps(bundle.model, n_steps=16)).statistic
    randomised = spearmanr(trained, maps(_shuffled_weights(bundle.model, seed=1))).statistic
    assert control > 0.95
    assert abs(randomised) < 0.5, f"rank correlation with shuffled weights {randomised:.2f}"


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_explain_cli_on_sample_data_writes_every_output(sample_run, tmp_path):
    out = tmp_path / "explanations"
    done = subprocess.run(
        EEGFORMER
        + ["explain", str(sample_run["model"]), str(sample_run["prep"]), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "explained 12 recording(s)" in done.stderr
    bundle = load_model_file(sample_run["model"])
    T, C = len(bundle.bands), len(bundle.channels)
    L = bundle.model_config["n_layers"]
    ids = sorted(
        p.name.removesuffix("_eeg.edf") + "_eeg"
        for p in sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[:12]
    )
    assert sorted(p.stem for p in out.glob("sub-*.npz")) == ids
    predicted = {
        row["recording_id"]: row["predicted"]
        for row in predict_recordings(
            bundle, load_inputs(bundle, [sample_run["prep"]]), torch.device("cpu")
        )
    }
    for recording_id in ids:
        with np.load(out / f"{recording_id}.npz") as data:
            assert data["band_importance"].shape == (T,)
            assert np.abs(data["band_importance"]).sum() == pytest.approx(1)
            assert data["attention_coarse"].shape == data["attention_refined"].shape == (L, T, T)
            assert data["channel_pairs"].shape == (T, C, C)
            assert list(data["channels"]) == bundle.channels
        summary = json.loads((out / f"{recording_id}.json").read_text())
        assert summary["predicted"] == summary["target"] == predicted[recording_id]
        assert sum(summary["probabilities"].values()) == pytest.approx(1)
        assert len(summary["strongest_channel_pairs"]) == 10
        passes = summary["attention_diagnostics"]["passes"]
        assert set(passes) == {"coarse", "refined"} and len(passes["refined"]["entropy"]) == L
    diagnostics = _read_csv(out / "attention_diagnostics.csv")
    assert len(diagnostics) == len(ids) * 2 * L
    first_rows = {
        (r["pass"], int(r["layer"])): r for r in diagnostics if r["recording_id"] == ids[0]
    }
    first_json = json.loads((out / f"{ids[0]}.json").read_text())["attention_diagnostics"]
    for (name, layer), row in first_rows.items():  # the CSV and the JSON hold the same numbers
        assert float(row["entropy"]) == pytest.approx(
            first_json["passes"][name]["entropy"][layer], rel=1e-5
        )
    assert (
        first_rows["coarse", 0]["guidance_ratio"]
        == ""
        != first_rows["refined", 0]["guidance_ratio"]
    )
    bands_rows = _read_csv(out / "band_importance.csv")
    assert len(bands_rows) == len(ids) * T
    first = [float(r["value"]) for r in bands_rows if r["recording_id"] == ids[0]]
    with np.load(out / f"{ids[0]}.npz") as data:
        np.testing.assert_allclose(first, data["band_importance"], rtol=1e-5, atol=1e-7)
    assert len(_read_csv(out / "attention.csv")) == len(ids) * 2 * L * T * T
    pairs = _read_csv(out / "channel_pairs.csv")
    assert len(pairs) == len(ids) * T * C * (C - 1) // 2
    assert all(
        abs(float(r["value"]) - float(r["coh"]) - float(r["wpli"])) < 1e-5 for r in pairs[:500]
    )
    classes = json.loads((out / "class_summary.json").read_text())
    assert sum(c["n_recordings"] for c in classes["classes"].values()) == len(ids)
    assert classes["failures"] == {}
    with np.load(out / "class_summary.npz") as data:
        assert data["channel_pairs"].shape == (len(classes["classes"]), T, C, C)
        np.testing.assert_allclose(np.abs(data["band_importance"]).sum(axis=1), 1)


def test_explain_cli_raw_recording_target_and_clear_errors(sample_run, tmp_path, capsys):
    model = sample_run["model"]
    edf = SAMPLE_DATA / "eeg" / "sub-13_task-rest_eeg.edf"  # not in the training subset
    code, output = run_main(
        capsys,
        "explain",
        model,
        edf,
        "--out",
        tmp_path / "raw",
        "--target",
        "healthy",
        "--all-heads",
    )
    assert code == 0, output
    summary = json.loads((tmp_path / "raw" / "sub-13_task-rest_eeg.json").read_text())
    assert summary["target"] == "healthy"
    with np.load(tmp_path / "raw" / "sub-13_task-rest_eeg.npz") as data:
        assert data["attention_coarse"].ndim == 4  # (L, H, T, T)
    # a rerun into the same folder on another recording leaves no file of the earlier one
    (tmp_path / "raw" / "notes.txt").write_text("the user's own file")
    code, output = run_main(
        capsys,
        "explain",
        model,
        SAMPLE_DATA / "eeg" / "sub-14_task-rest_eeg.edf",
        "--out",
        tmp_path / "raw",
    )
    assert code == 0, output
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == [
        ".eegformer",  # the marker: explain made this folder
        "attention.csv",
        "attention_diagnostics.csv",
        "band_importance.csv",
        "channel_pairs.csv",
        "class_summary.json",
        "class_summary.npz",
        "contrast_pairs.csv",
        "interactions.csv",
        "notes.txt",
        "recordings.csv",
        "sub-14_task-rest_eeg.json",
        "sub-14_task-rest_eeg.npz",
        "sub-14_task-rest_eeg.segments.csv",
    ]
    # ... and says so on stderr, with the count
    assert "explain: removed 3 files of 1 recordings that an earlier run explained" in output

    code, output = run_main(
        capsys, "explain", model, edf, "--out", tmp_path / "x", "--target", "nosuch"
    )
    assert code == 2 and "--target" in output and "healthy" in output
    code, output = run_main(
        capsys, "explain", model, edf, "--out", tmp_path / "x", "--method", "magic"
    )
    assert code == 2 and "integrated_gradients" in output
    code, output = run_main(
        capsys, "explain", model, edf, "--out", tmp_path / "x", "--device", "gpu"
    )
    assert code == 2 and "'auto', 'cpu', 'cuda'" in output
    code, output = run_main(capsys, "explain", edf, edf, "--out", tmp_path / "x")
    assert code == 4 and "model" in output
    assert not (tmp_path / "x").exists()

    # a preprocess folder with other channels than the model's: exit 3, naming the channels
    other = tmp_path / "other-prep"
    (other / "connectomes").mkdir(parents=True)
    (other / "manifest.tsv").write_text((sample_run["prep"] / "manifest.tsv").read_text())
    for npz in (sample_run["prep"] / "connectomes").glob("*.npz"):
        with np.load(npz) as data:
            arrays = dict(data)
        arrays["channels"] = arrays["channels"][:-1]
        for key in ("coh", "wpli"):
            arrays[key] = arrays[key][..., :-1, :-1]
        np.savez(other / "connectomes" / npz.name, **arrays)
    code, output = run_main(capsys, "explain", model, other, "--out", tmp_path / "x")
    assert code == 3 and "channels" in output and output[-1] == "\n"
    assert "Traceback" not in output


@pytest.mark.slow
def test_explain_on_msu_recordings_with_a_model_trained_on_msu(msu_dir, tmp_path, capsys):
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
    from eegformer_cli.training.config import resolve_config

    rows = list(csv.DictReader(open(msu_dir / "participants.tsv"), delimiter="\t"))
    chosen = [r["participant_id"] for r in rows if r["diagnosis"] == "healthy"][:3] + [
        r["participant_id"] for r in rows if r["diagnosis"] == "schizophrenia"
    ][:3]
    edfs = [msu_dir / "eeg" / f"{pid}_task-rest_eeg.edf" for pid in chosen]
    run_preprocess(
        edfs,
        tmp_path / "prep",
        PreprocessSettings.from_preset("default"),
        participants=msu_dir / "participants.tsv",
        n_jobs=2,
    )
    config = resolve_config(
        "default",
        None,
        {
            "epochs": 2,
            "batch_size": 8,
            "holdout": 0.34,
            "val_fraction": 0.5,
            "device": "cpu",
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1},
        },
    )
    run_training(tmp_path / "prep", tmp_path / "run", "diagnosis", config)
    code, output = run_main(
        capsys,
        "explain",
        tmp_path / "run" / "model.pt",
        tmp_path / "prep",
        "--out",
        tmp_path / "out",
    )
    assert code == 0, output
    for pid in chosen:
        with np.load(tmp_path / "out" / f"{pid}_task-rest_eeg.npz") as data:
            assert data["channel_pairs"].shape == (8, 16, 16)
            assert np.abs(data["band_importance"]).sum() == pytest.approx(1)
    assert len(_read_csv(tmp_path / "out" / "band_importance.csv")) == len(chosen) * 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_explain_on_cuda_matches_cpu():
    coh, wpli = random_connectivity(4, seed=3)
    on_cpu = explain_recording(
        random_model(), coh, wpli, 50.0, 0.0, ["a", "b", "c"], recording_id="r"
    )
    on_gpu = explain_recording(
        random_model().cuda(),
        coh,
        wpli,
        50.0,
        0.0,
        ["a", "b", "c"],
        recording_id="r",
        device="cuda",
    )
    assert on_gpu.target == on_cpu.target
    for field in ("band_importance", "attention_refined", "channel_pairs"):
        np.testing.assert_allclose(
            getattr(on_gpu, field), getattr(on_cpu, field), rtol=1e-3, atol=1e-5
        )
