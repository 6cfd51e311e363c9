"""Training: config, schedule, augmentation, dataset, and whole runs (resume, reproducibility,
model file in a fresh process, errors, CUDA).

Whole runs use a small synthetic ``preprocess`` folder (the documented connectome/manifest
contract, 6 channels, 3 bands) whose class difference is a raised coherence in one band, so
a tiny model learns it in a few epochs and the runs stay fast.
The real-data path (msu EDFs -> preprocess -> train -> predict) is in tests/test_predict.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import (
    BANDS,
    CHANNELS,
    EDGES,
    SAMPLE_DATA,
    TRAIN_SETTINGS,
    exit_code,
    make_connectome_folder,
    study_model_config,
    tiny_config,
    write_connectome_folder,
)

from eegformer_cli.errors import InputDataError, ModelFileError, UsageError
from eegformer_cli.evaluation.reference import fit_reference
from eegformer_cli.experiment.run import run_training
from eegformer_cli.model import devices
from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer
from eegformer_cli.training import augment
from eegformer_cli.training.config import TrainConfig, apply_overrides, resolve_config
from eegformer_cli.training.dataset import ConnectomeDataset, RecordingCache, load_training_data
from eegformer_cli.training.epoch_selection import selection_improved
from eegformer_cli.training.fit import lr_at_step
from eegformer_cli.training.model_file import FORMAT_VERSION, load_model_file
from eegformer_cli.training.run_plan import transformer_parameters

EEGFORMER = [sys.executable, "-m", "eegformer_cli"]


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory) -> Path:
    return make_connectome_folder(tmp_path_factory.mktemp("prep") / "prep")


def run_cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        EEGFORMER + [str(a) for a in args], capture_output=True, text=True, timeout=timeout
    )


# ------------------------------------------------------------------------------------------
# config


def test_presets_toml_and_flags(tmp_path):
    paper = TrainConfig.preset_config("paper")
    assert (paper.alpha, paper.label_smoothing, paper.betas, paper.batch_size, paper.epochs) == (
        0.7,
        0.1,
        (0.9, 0.99),
        64,
        100,
    )
    assert paper.selection_metric == "paper_bac" and paper.patience == 0
    assert paper.class_weighting == "none" and paper.augmentation == "graphon"
    # the training presets take the model presets of the same name as they are
    assert paper.model == {} and TrainConfig.preset_config("default").model == {}
    paper_model, default_model = (
        ModelConfig.preset(
            name, n_channels=4, band_names=["theta"], band_edges_hz=[(4, 8)], n_classes=2
        )
        for name in ("paper", "default")
    )
    assert (paper_model.readout, paper_model.channel_embedding) == ("mean", False)  # reference
    assert (default_model.readout, default_model.channel_embedding) == (
        "channel_flatten_per_band",
        True,
    )
    toml = tmp_path / "exp.toml"
    toml.write_text('preset = "paper"\nepochs = 7\nbetas = [0.8, 0.9]\n[model]\nn_layers = 2\n')
    config = resolve_config("default", toml, {"epochs": 9, "lr": None, "model": {"d_model": 32}})
    assert config.preset == "paper"  # from the file
    assert config.epochs == 9  # flag beats file
    assert config.betas == (0.8, 0.9)
    assert config.model == {"n_layers": 2, "d_model": 32}
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_a_training_config_stored_by_an_earlier_version_is_read_without_its_retired_settings():
    config = resolve_config("default", None, {"model": {"d_model": 32}})
    stored = {
        **config.to_dict(),
        "selection": "second_half",
        "model": {"d_model": 32, "attention_impl": "fused", "explanation_impl": "one_pass"},
    }
    assert TrainConfig.from_dict(stored) == config
    for retired, shown in (
        ({"selection": "best"}, "selection='best'"),
        ({"augmentation": "mixup"}, "augmentation='mixup'"),
        ({"model": {"guidance": "rms_token"}}, "guidance='rms_token'"),
    ):
        with pytest.raises(UsageError, match=f"{shown} was .*experimental variant"):
            TrainConfig.from_dict({**stored, **retired})


@pytest.mark.parametrize(
    "values, message",
    [
        ({"epoch": 3}, "unknown training setting 'epoch'"),
        ({"augmentation": "mixup"}, "allowed values are 'graphon', 'none'"),
        ({"alpha": 1.5}, "invalid value 1.5 for alpha"),
        (
            {"segment_averaging": 2},
            r"invalid value 2.0 for segment_averaging; allowed range is \[0, 1\]",
        ),
        ({"epochs": "ten"}, "expected int"),
        ({"model": {"depth": 3}}, "unknown model setting 'depth'"),
        ({"holdout": 1.0}, r"invalid value 1.0 for holdout; allowed range is \(0, 1\)"),
    ],
)
def test_invalid_settings_name_the_key(values, message):
    with pytest.raises(UsageError, match=message):
        apply_overrides(TrainConfig(), values, source="test")


@pytest.mark.parametrize("value", ["0", "1", "-0.2"])
def test_holdout_flag_must_be_a_fraction_strictly_between_0_and_1(
    synthetic_dir, tmp_path, capsys, value
):
    code = exit_code(
        "train",
        synthetic_dir,
        "--out",
        tmp_path / "run",
        "-l",
        "diagnosis",
        f"--holdout={value}",
        "--epochs",
        "1",
        "--device",
        "cpu",
    )
    err = capsys.readouterr().err
    assert code == 2 and "--holdout" in err and "allowed range is (0, 1)" in err
    assert not (tmp_path / "run").exists()
    # not given: the preset's scheme (cross-validation); 0 in a config means the same
    assert (
        tiny_config().holdout == 0
        and apply_overrides(TrainConfig(), {"holdout": 0}, "test").cv == 5
    )


def test_bad_toml_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("epochs = = 3")
    with pytest.raises(UsageError, match="not a valid TOML"):
        resolve_config("default", bad)


def test_lr_schedule_warmup_then_cosine_over_the_whole_run():
    kwargs = {
        "total_steps": 100,
        "warmup_steps": 10,
        "lr": 1e-3,
        "lr_min": 1e-7,
        "warmup_lr_init": 1e-7,
    }
    assert lr_at_step(0, **kwargs) == pytest.approx(1e-7)
    assert lr_at_step(5, **kwargs) == pytest.approx(1e-7 + 0.5 * (1e-3 - 1e-7))
    # after warmup the cosine continues from where it is at step 10 (timm warmup_prefix=False)
    assert lr_at_step(10, **kwargs) == pytest.approx(
        1e-7 + 0.5 * (1e-3 - 1e-7) * (1 + np.cos(0.1 * np.pi))
    )
    assert lr_at_step(50, **kwargs) == pytest.approx((1e-3 + 1e-7) / 2)
    assert lr_at_step(100, **kwargs) == pytest.approx(1e-7)


@pytest.mark.parametrize("epochs", [1, 2, 3, 4])
def test_selection_can_select_the_last_epoch_and_otherwise_only_the_second_half(epochs):
    config = tiny_config(epochs=epochs)
    assert selection_improved(config, epochs - 1, 0.5, None)
    assert [selection_improved(config, e, 0.5, None) for e in range(epochs)] == [
        e >= epochs / 2 or e == epochs - 1 for e in range(epochs)
    ]
    assert selection_improved(config, epochs - 1, 0.5, 0.5)  # ties -> later epoch
    assert not selection_improved(config, epochs - 1, 0.4, 0.5)


def test_a_one_epoch_run_selects_that_epoch(synthetic_dir, tmp_path):
    config = tiny_config(epochs=1, holdout=0.25, transformer_path="on")
    run_training(synthetic_dir, tmp_path / "run", "diagnosis", config)
    fold = json.loads((tmp_path / "run" / "folds" / "r0_f0.json").read_text())
    assert fold["best_epoch"] == 1 and (tmp_path / "run" / "model.pt").exists()


# ------------------------------------------------------------------------------------------
# augmentation


def test_usvt_keeps_the_graph_contract_and_lowers_rank():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, (16, 1))
    m = np.clip(base @ base.T + rng.normal(0, 0.05, (16, 16)), 0, 1)
    m = (m + m.T) / 2
    np.fill_diagonal(m, 0)
    est = augment.usvt(torch.tensor(m[None], dtype=torch.float32))[0].numpy()
    assert np.allclose(est, est.T, atol=1e-6)
    assert np.all(np.diag(est) == 0) and est.min() >= 0 and est.max() <= m.max() + 1e-6
    # the strong rank-one structure survives ...
    off = ~np.eye(16, dtype=bool)
    assert np.corrcoef(est[off], (base @ base.T)[off])[0, 1] > 0.95
    # ... while weak structureless noise is below the threshold 0.2 * sqrt(16) and vanishes
    noise = np.abs(rng.normal(0, 0.02, (16, 16)))
    noise = (noise + noise.T) / 2
    np.fill_diagonal(noise, 0)
    assert augment.usvt(torch.tensor(noise[None])).abs().max() == 0


def test_mix_batch_mixes_labels_and_demographics_consistently():
    kind = "graphon"
    b, f, c = 8, 3, 6
    gen = torch.Generator().manual_seed(0)
    coh = torch.rand(b, f, c, c, generator=gen)
    coh = (coh + coh.transpose(-1, -2)) / 2 * (1 - torch.eye(c))
    wpli = coh.clone()
    age = torch.arange(b, dtype=torch.float32) + 20
    sex = (torch.arange(b) % 2).float()
    targets = torch.nn.functional.one_hot(torch.arange(b) % 2, 2).float()
    for seed in range(6):  # both mixup and cutmix branches
        out = augment.mix_batch(
            coh, wpli, age, sex, targets, kind, 1.0, 0.5, 0.2, np.random.default_rng(seed)
        )
        new_coh, _, new_age, _, new_targets = out
        assert torch.allclose(new_targets.sum(1), torch.ones(b))
        lam_mean = new_targets[:, 0].mean()  # balanced classes: mixing keeps the class mass
        assert torch.isclose(lam_mean, torch.tensor(0.5), atol=1e-6)
        assert torch.allclose(new_coh, new_coh.transpose(-1, -2), atol=1e-6)
        assert float(new_age.min()) >= 20 and float(new_age.max()) <= 27
    again = augment.mix_batch(
        coh, wpli, age, sex, targets, kind, 1.0, 0.5, 0.2, np.random.default_rng(5)
    )
    assert torch.equal(again[0], out[0])


def test_cutmix_mask_is_a_symmetric_block():
    mask = augment.cut_block_mask(16, 0.75, np.random.default_rng(1))
    assert mask.shape == (16, 16) and (mask == mask.T).all()
    assert 0 < mask.mean() <= 2 * 0.25 + 1e-9


# ------------------------------------------------------------------------------------------
# dataset


def test_dataset_indexes_segments_and_bounds_its_cache(synthetic_dir):
    data = load_training_data(synthetic_dir, "diagnosis")
    assert data.label_names == ["control", "patient"] and data.channels == CHANNELS
    one_recording = 2 * 2 * len(BANDS) * len(CHANNELS) ** 2 * 4
    dataset = ConnectomeDataset(
        data.recordings, data.label_names, data.channels, data.bands, cache_bytes=3 * one_recording
    )
    assert len(dataset) == 24 * 2
    item = dataset[5]
    assert item["coh"].shape == (3, 6, 6) and item["coh"].dtype == torch.float32
    assert int(item["recording"]) == 2 and int(item["label"]) == 0  # sub-02: control
    for i in range(len(dataset)):
        dataset[i]
    assert len(dataset.cache._arrays) == 3 and dataset.cache._bytes <= 3 * one_recording
    unknown_age = next(r for r in data.recordings if r.recording_id == "sub-00_rest")
    assert np.isnan(unknown_age.age) and unknown_age.sex == 1.0


def test_datasets_sharing_a_cache_are_bounded_together(synthetic_dir):
    data = load_training_data(synthetic_dir, "diagnosis")
    one_recording = 2 * 2 * len(BANDS) * len(CHANNELS) ** 2 * 4
    cache = RecordingCache(3 * one_recording)
    first, second = (
        ConnectomeDataset(part, data.label_names, data.channels, data.bands, cache=cache)
        for part in (data.recordings[:12], data.recordings[12:])
    )
    for dataset in (first, second, first):
        for i in range(len(dataset)):
            dataset[i]
    assert len(cache._arrays) == 3 and cache._bytes <= 3 * one_recording
    # what a dataset reads through the shared cache is its own recording's
    own = ConnectomeDataset(data.recordings[12:], data.label_names, data.channels, data.bands)
    for r in range(len(second.recordings)):
        assert all(
            np.array_equal(a, b)
            for a, b in zip(second.recording_arrays(r), own.recording_arrays(r))
        )


def test_segment_averaging_means_segments_of_the_same_recording_only(synthetic_dir):
    data = load_training_data(synthetic_dir, "diagnosis")

    def dataset(probability, seed=0):
        return ConnectomeDataset(
            data.recordings,
            data.label_names,
            data.channels,
            data.bands,
            segment_averaging=probability,
            rng=np.random.default_rng(seed),
        )

    plain, always, half = dataset(0.0), dataset(1.0), dataset(0.5)
    averaged = 0
    for i in range(len(plain)):
        r = int(plain.index[i, 0])
        coh, wpli = plain.recording_arrays(r)  # 2 segments per recording
        torch.testing.assert_close(always[i]["coh"], torch.from_numpy(coh.mean(axis=0)))
        torch.testing.assert_close(always[i]["wpli"], torch.from_numpy(wpli.mean(axis=0)))
        assert int(always[i]["label"]) == int(plain[i]["label"])
        item = half[i]["coh"]
        averaged += not torch.equal(item, plain[i]["coh"])
        assert torch.equal(item, plain[i]["coh"]) or torch.allclose(item, always[i]["coh"])
    assert 0.25 * len(plain) < averaged < 0.75 * len(plain)

    # seeded: the same seed draws the same items, another seed other ones
    def items(d):
        return [d[i]["coh"] for i in range(len(plain))]

    first, repeat, other = items(dataset(0.5)), items(dataset(0.5)), items(dataset(0.5, seed=1))
    assert all(torch.equal(x, y) for x, y in zip(first, repeat))
    assert not all(torch.equal(x, y) for x, y in zip(first, other))


def test_missing_labels_are_left_out_with_a_warning(tmp_path, capsys):
    labels = ["control", "patient", None, "patient"] * 3
    folder = make_connectome_folder(tmp_path / "p", n_participants=12, labels=labels)
    data = load_training_data(folder, "diagnosis")
    assert len(data.recordings) == 9
    err = capsys.readouterr().err
    assert "3 recording(s) without a 'diagnosis' label" in err and "sub-02_rest" in err


def test_label_problems_are_input_errors(tmp_path):
    one_class = make_connectome_folder(tmp_path / "a", n_participants=6, labels=["x"] * 6)
    with pytest.raises(InputDataError, match="only one class"):
        load_training_data(one_class, "diagnosis")
    no_labels = make_connectome_folder(tmp_path / "b", n_participants=4, labels=[None] * 4)
    with pytest.raises(InputDataError, match="every recording has a missing"):
        load_training_data(no_labels, "diagnosis")
    with pytest.raises(UsageError, match="available columns are .*diagnosis"):
        load_training_data(one_class, "group")


def test_a_numeric_label_column_of_many_values_is_refused_before_the_run_folder(tmp_path):
    """``train -l age`` would make one class per age: refused, naming the column and how to
    make classes of it; a few numeric codes (0/1) are classes and train as such."""
    from eegformer_cli import commands

    # ages: 16 values from 31 to 49, and 5 n/a
    folder = make_connectome_folder(tmp_path / "p", n_participants=24)
    with pytest.raises(UsageError) as refused:
        load_training_data(folder, "age")
    line = refused.value.one_line()
    assert line.startswith("label column 'age' is numeric with 16 distinct values (31 to 49)")
    assert "add a column of a few classes made from it to participants.tsv, e.g. age_group" in line
    assert line.endswith("then train with --label-column age_group)")
    with pytest.raises(UsageError, match="label column 'age' is numeric"):
        commands.train(folder, tmp_path / "run", "age", epochs=1)
    assert not (tmp_path / "run").exists()
    codes = make_connectome_folder(
        tmp_path / "codes", n_participants=6, labels=["0", "1", "1", "0", "2", "2"]
    )
    assert load_training_data(codes, "diagnosis").label_names == ["0", "1", "2"]


# ------------------------------------------------------------------------------------------
# whole runs


@pytest.fixture
def one_thread():
    """PyTorch on one thread for the test, as each pool worker runs (``parallel.py``): a run in
    this process is then compared with a run in workers at the same thread count, whatever
    the machine's (a float32 sum split over 2 threads rounds differently, 1e-5 after training)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_spawned_workers_give_the_same_results(synthetic_dir, tmp_path, monkeypatch, one_thread):
    """Where torch sees a CUDA device the pool spawns its workers (a forked worker's backward
    fails once this process has run one there); spawned workers give the numbers of one
    process, as forked ones do."""
    from eegformer_cli import parallel

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert parallel.start_method() == "spawn"
    monkeypatch.undo()
    monkeypatch.setattr(parallel, "start_method", lambda: "spawn")
    config = tiny_config(cv=2)
    one = run_training(synthetic_dir, tmp_path / "one", "diagnosis", config)
    spawned = run_training(synthetic_dir, tmp_path / "spawned", "diagnosis", config, n_jobs=2)
    assert (tmp_path / "one" / "oof_predictions.tsv").read_text() == (
        tmp_path / "spawned" / "oof_predictions.tsv"
    ).read_text()
    assert one.models == spawned.models


@pytest.mark.slow
def test_same_seed_gives_identical_results(synthetic_dir, tmp_path, one_thread):
    config = tiny_config(cv=3, transformer_path="on")  # every epoch trained, so compared
    a = run_training(synthetic_dir, tmp_path / "a", "diagnosis", config)
    b = run_training(synthetic_dir, tmp_path / "b", "diagnosis", config)
    # --n-jobs 2: folds and the final model in two worker processes, finishing in any order
    c = run_training(synthetic_dir, tmp_path / "c", "diagnosis", config, n_jobs=2)
    oof_a = (tmp_path / "a" / "oof_predictions.tsv").read_text()
    assert oof_a == (tmp_path / "b" / "oof_predictions.tsv").read_text()
    assert oof_a == (tmp_path / "c" / "oof_predictions.tsv").read_text()
    assert a.models == b.models == c.models
    weights_a, weights_c = (
        torch.load(tmp_path / run / "model.pt", weights_only=False)["state_dict"]
        for run in ("a", "c")
    )
    assert weights_a.keys() == weights_c.keys()
    assert all(torch.equal(weights_a[k], weights_c[k]) for k in weights_a)

    def without_times(run):
        return [
            {k: v for k, v in json.loads(line).items() if k != "seconds"}
            for line in (tmp_path / run / "history.jsonl").read_text().splitlines()
        ]

    assert without_times("a") == without_times("c")
    assert (tmp_path / "a" / "model.pt").exists()  # retrained on everybody after the CV
    # the task is learnable and both models are reported on the same folds
    assert a.transformer.mean.bac >= 0.75
    assert len(a.models["logistic_regression"].per_fold) == 3
    history = [
        json.loads(line) for line in (tmp_path / "a" / "history.jsonl").read_text().splitlines()
    ]
    assert {
        "repeat",
        "fold",
        "epoch",
        "train_loss",
        "val_loss",
        "val_bac",
        "lr",
        "seconds",
        "attention",
    } <= set(history[0])
    assert {(h["repeat"], h["fold"]) for h in history} == {(0, 0), (0, 1), (0, 2), (-1, -1)}
    # attention diagnostics: per epoch on the validation participants, out of fold per fold
    for record in history:
        assert set(record["attention"]) == {"coarse", "refined"}
        assert 0 <= record["attention"]["refined"]["entropy"][0] <= np.log(len(BANDS)) + 1e-6
        assert "logit_change_uniform" not in record["attention"]["coarse"]  # no ablation per epoch
    attention = a.attention
    assert attention["n_bands"] == len(BANDS) and len(attention["per_fold"]) == 3
    assert {
        "entropy",
        "entropy_fraction",
        "residual_share",
        "guidance_ratio",
        "logit_change_uniform",
        "flips_identity",
    } <= set(attention["passes"]["refined"])
    assert a.attention == c.attention  # reproducible, workers included
    splits = json.loads((tmp_path / "a" / "splits.json").read_text())
    tested = sorted(p for fold in splits["folds"] for p in fold["test"])
    assert tested == sorted(f"sub-{p:02d}" for p in range(24))


@pytest.fixture(scope="module")
def holdout_run(synthetic_dir, tmp_path_factory) -> Path:
    """A tiny model trained with a 25 % holdout (its model file is the evaluated model)."""
    run_dir = tmp_path_factory.mktemp("holdout") / "run"
    run_training(synthetic_dir, run_dir, "diagnosis", tiny_config(holdout=0.25))
    return run_dir


@pytest.mark.slow
def test_model_file_loads_in_a_fresh_process(synthetic_dir, holdout_run, tmp_path):
    bundle = load_model_file(holdout_run / "model.pt")
    assert bundle.label_names == ["control", "patient"] and bundle.channels == CHANNELS
    assert bundle.trained_on == "holdout" and bundle.band_edges_hz.tolist() == EDGES
    # a new interpreter, no training data needed: predict the preprocessed folder
    moved = tmp_path / "elsewhere.pt"
    moved.write_bytes((holdout_run / "model.pt").read_bytes())
    done = run_cli("predict", moved, synthetic_dir, "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    rows = {r["recording_id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert len(rows) == 24
    oof = [
        line.split("\t") for line in (holdout_run / "oof_predictions.tsv").read_text().splitlines()
    ]
    held_out = [dict(zip(oof[0], values)) for values in oof[1:]]
    held_out = [row for row in held_out if row["model"] == "xaiguiformer"]
    assert len(held_out) == 6
    for row in held_out:
        assert rows[row["recording_id"]]["prob_patient"] == pytest.approx(
            float(row["prob_patient"]), abs=1e-5
        )
        assert rows[row["recording_id"]]["predicted"] == row["predicted"]


@pytest.mark.slow
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_interrupted_cv_resumes_without_redoing_finished_folds(synthetic_dir, tmp_path, n_jobs):
    run_dir = tmp_path / "run"
    toml = tmp_path / "slow.toml"
    toml.write_text(
        "epochs = 10\nbatch_size = 8\naugmentation = 'none'\ndevice = 'cpu'\n"
        "[model]\nd_model = 16\nn_heads = 2\nn_layers = 1\nn_gnn_layers = 1\n"
    )
    args = [
        "train",
        synthetic_dir,
        "--out",
        run_dir,
        "--label-column",
        "diagnosis",
        "--config",
        toml,
        "--cv",
        "3",
        "--n-jobs",
        n_jobs,
    ]
    process = subprocess.Popen(
        EEGFORMER + [str(a) for a in args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = run_dir / "folds" / "r0_f0.json"
    deadline = time.monotonic() + 240
    while (
        not (first.exists() and (run_dir / "metrics.json").exists())  # written after each fold
        and process.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert first.exists(), process.communicate()[1]
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "rerun the same command to resume" in err
    assert not (run_dir / "folds" / "r0_f2.json").exists()
    assert not list(run_dir.rglob(".tmp-*"))
    # the metrics of the folds finished so far say that they are not the whole run's
    partial = json.loads((run_dir / "metrics.json").read_text())
    assert partial["complete"] is False and list(partial)[:2] == ["complete", "incomplete"]
    assert f"{partial['n_folds']} of 3 folds finished" in partial["incomplete"]
    assert "no final model (model.pt) yet" in partial["incomplete"]
    mtime = first.stat().st_mtime_ns
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    assert first.stat().st_mtime_ns == mtime  # not retrained
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["n_folds"] == 3 and (run_dir / "model.pt").exists()
    assert metrics["complete"] is True and "incomplete" not in metrics
    # the paired comparison with the reference: differences of the same folds, told on stdout
    comparison = metrics["comparison"]
    differences = [
        a["bac"] - b["bac"]
        for a, b in zip(
            metrics["models"]["xaiguiformer"]["per_fold"],
            metrics["models"]["logistic_regression"]["per_fold"],
        )
    ]
    assert comparison["mean_difference"] == pytest.approx(np.mean(differences))
    assert comparison["folds_better"] + comparison["folds_equal"] + comparison["folds_worse"] == 3
    assert "xaiguiformer - logistic_regression, bac:" in done.stdout
    # a folder started by an earlier version, whose config still names a retired setting with
    # the value that survives, resumes: nothing is retrained
    config_path = run_dir / "config.json"
    stored = json.loads(config_path.read_text())
    stored["identity"]["train_config"]["selection"] = "second_half"
    config_path.write_text(json.dumps(stored))
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert first.stat().st_mtime_ns == mtime
    # the same folder with other settings is refused (--overwrite would replace it)
    changed = run_cli(*args, "--epochs", "2")
    assert changed.returncode == 2 and "holds another run" in changed.stderr
    assert "train_config.epochs" in changed.stderr


@pytest.mark.slow
def test_small_classes_give_one_warning_and_no_scikit_learn_warnings(tmp_path):
    from eegformer_cli import EegformerWarning

    folder = make_connectome_folder(tmp_path / "p", n_participants=12)  # sex: 4 F, 8 M
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_training(folder, tmp_path / "run", "sex", tiny_config(epochs=1))
    assert [str(w.message) for w in caught if "sklearn" in w.filename] == []
    lines = [str(w.message) for w in caught if "lack a class" in str(w.message)]
    assert len(lines) == 1 and "'F', has 4 participants" in lines[0]
    assert [w.category for w in caught if "lack a class" in str(w.message)] == [EegformerWarning]


def test_reference_search_with_a_one_class_inner_split_stays_quiet():
    """A class with one participant leaves an inner training split without it: scikit-learn's
    FitFailedWarning (with the failed fit's traceback) must not reach the terminal."""
    rng = np.random.default_rng(0)
    features, labels = rng.normal(size=(10, 6)), np.array([0] * 9 + [1])
    groups = np.array([f"p{i}" for i in range(10)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search = fit_reference(features, labels, groups, seed=0)
    assert [str(w.message)[:80] for w in caught] == []
    assert np.isnan(search.cv_results_["mean_test_score"]).all()  # the case did occur
    assert list(search.classes_) == [0, 1]  # refit on both classes


def test_invalid_settings_leave_no_run_folder(synthetic_dir, tmp_path):
    config = tiny_config(model={"frequency_encoding": "foo"})
    with pytest.raises(UsageError, match="for frequency_encoding"):
        run_training(synthetic_dir, tmp_path / "run", "diagnosis", config)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "n_jobs, environ, message",
    [
        (0, {}, "invalid --n-jobs 0; use a positive number or -1"),
        (-2, {}, "invalid --n-jobs -2"),
        (
            2,
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
            "cannot be combined with torchrun",
        ),
    ],
)
def test_bad_n_jobs_is_refused_before_the_run_folder_exists(
    synthetic_dir, tmp_path, monkeypatch, n_jobs, environ, message
):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=message):
        run_training(synthetic_dir, tmp_path / "run", "diagnosis", tiny_config(), n_jobs=n_jobs)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_cli_errors_have_distinct_exit_codes(tmp_path):
    one_class = make_connectome_folder(tmp_path / "a", n_participants=6, labels=["x"] * 6)
    done = run_cli("train", one_class, "--out", tmp_path / "r", "--label-column", "diagnosis")
    assert done.returncode == 3 and "only one class" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    blocker = tmp_path / "file"
    blocker.write_text("x")
    two = make_connectome_folder(tmp_path / "b", n_participants=24)
    done = run_cli(
        "train",
        two,
        "--out",
        blocker / "run",
        "--label-column",
        "diagnosis",
        "--holdout",
        "0.3",
        "--epochs",
        "1",
    )
    assert done.returncode == 5 and "cannot create folder" in done.stderr
    done = run_cli(
        "train",
        two,
        "--out",
        tmp_path / "r2",
        "--label-column",
        "diagnosis",
        "--holdout",
        "0.3",
        "--cv",
        "3",
    )
    assert done.returncode == 2 and "--holdout cannot be combined" in done.stderr


@pytest.mark.slow
def test_model_file_errors(tmp_path, synthetic_dir, holdout_run):
    good = (holdout_run / "model.pt").read_bytes()
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelFileError, match="corrupt or truncated"):
        load_model_file(bad)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    with pytest.raises(ModelFileError, match="not an eegformer model file"):
        load_model_file(other)
    bundle = torch.load(holdout_run / "model.pt", weights_only=True)
    bundle["format_version"] = FORMAT_VERSION + 1
    newer = tmp_path / "newer.pt"
    torch.save(bundle, newer)
    with pytest.raises(
        ModelFileError, match=f"format version {FORMAT_VERSION + 1} is not supported"
    ):
        load_model_file(newer)
    done = run_cli("predict", bad, synthetic_dir)
    assert done.returncode == 4 and str(bad) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_model_file_of_an_earlier_version_predicts_the_same(tmp_path, synthetic_dir, holdout_run):
    """Its retired model fields with their surviving values are dropped; a retired
    experimental variant is refused naming the field (exit 4, one line)."""
    bundle = torch.load(holdout_run / "model.pt", weights_only=True)
    bundle["model_config"].update(
        explainer="deeplift", explanation_impl="one_pass", attention_impl="fused"
    )
    bundle["train_config"]["selection"] = "second_half"
    old = tmp_path / "old.pt"
    torch.save(bundle, old)
    data = np.load(next((synthetic_dir / "connectomes").glob("*.npz")))
    coh, wpli = torch.from_numpy(data["coh"]), torch.from_numpy(data["wpli"])
    age = sex = torch.full((len(coh),), float("nan"))
    with torch.no_grad():
        logits = [
            load_model_file(path).model(coh, wpli, age, sex)[1]
            for path in (holdout_run / "model.pt", old)
        ]
    assert torch.equal(logits[0], logits[1])
    bundle["model_config"]["guidance"] = "rms_sample"
    variant = tmp_path / "variant.pt"
    torch.save(bundle, variant)
    with pytest.raises(
        ModelFileError,
        match="guidance='rms_sample' was made by an experimental "
        "variant that this eegformer version no longer",
    ):
        load_model_file(variant)
    done = run_cli("predict", variant, synthetic_dir)
    assert done.returncode == 4 and "guidance='rms_sample'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_fold_on_cuda_with_mixed_precision(synthetic_dir, tmp_path):
    half = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    metrics = run_training(
        synthetic_dir,
        tmp_path / "run",
        "diagnosis",
        tiny_config(holdout=0.25, device="cuda", precision=half),
    )
    assert metrics.transformer.mean.bac is not None
    bundle = load_model_file(tmp_path / "run" / "model.pt", "cuda")
    assert next(bundle.model.parameters()).is_cuda
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["device"] == "cuda"
    assert config["precision"] == half


@pytest.mark.slow
def test_folds_on_workers_move_the_progress_bar_every_epoch(tmp_path, monkeypatch):
    """With --n-jobs the folds train in worker processes; each fold's epochs still reach the
    bar (one task per running fold, as in one process), and the final model's too."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from eegformer_cli import console

    class SeenProgress(Progress):
        seen: list = []

        def update(self, task_id, **fields):
            SeenProgress.seen.append((self._tasks[task_id].description, fields.get("completed")))
            super().update(task_id, **fields)

    monkeypatch.setattr(
        console,
        "progress_bar",
        lambda transient=False: SeenProgress(
            console=Console(file=io.StringIO(), force_terminal=True), auto_refresh=False
        ),
    )
    data = write_connectome_folder(tmp_path / "prep", n_participants=12, n_segments=3)
    run_training(
        data,
        tmp_path / "run",
        "diagnosis",
        resolve_config("default", None, dict(TRAIN_SETTINGS, epochs=3, transformer_path="on")),
        n_jobs=2,
    )
    for name in ("fold r0_f0", "fold r0_f1", "final model"):
        assert [done for label, done in SeenProgress.seen if label == name] == [1, 2, 3], name


# ------------------------------------------------------------------------------------------
# the tangent-space reference


def pyriemann_probabilities(prep: Path, fold: dict, seed: int, labels: list[str]) -> dict:
    """The tangent-space reference written with pyRiemann and scikit-learn alone: shrinkage,
    tangent space per band at the training recordings' Riemannian mean, standardised, a
    balanced logistic regression with C by participant-wise inner CV; test recording id ->
    class probabilities."""
    import csv

    from pyriemann.estimation import Shrinkage
    from pyriemann.tangentspace import TangentSpace
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedGroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    with open(prep / "manifest.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["status"] == "ok"]
    groups = np.array([r["participant_id"] for r in rows])
    y = np.array([labels.index(r["diagnosis"]) for r in rows])
    covariances = np.stack(
        [
            Shrinkage(0.1).transform(
                np.load(prep / r["connectome"])["covariance"].astype(np.float64)
            )
            for r in rows
        ]
    )
    fit, test = np.isin(groups, fold["train"] + fold["val"]), np.isin(groups, fold["test"])
    spaces = [
        TangentSpace(metric="riemann").fit(covariances[fit, b]) for b in range(covariances.shape[1])
    ]
    vectors = np.hstack([space.transform(covariances[:, b]) for b, space in enumerate(spaces)])
    smallest = min(len(set(groups[fit][y[fit] == k])) for k in np.unique(y[fit]))
    search = GridSearchCV(
        make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=5000)),
        {"logisticregression__C": [1e-4, 1e-3, 1e-2, 1e-1, 1.0]},
        scoring="balanced_accuracy",
        cv=StratifiedGroupKFold(max(2, min(5, smallest)), shuffle=True, random_state=seed),
    )
    search.fit(vectors[fit], y[fit], groups=groups[fit])
    return dict(
        zip(
            [r["recording_id"] for r, t in zip(rows, test) if t],
            search.predict_proba(vectors[test]),
        )
    )


def test_tangent_space_reference_is_pyriemanns_pipeline_on_the_same_folds(sample_run):
    from eegformer_cli.experiment import permutation
    from eegformer_cli.experiment.run import read_run_request
    from eegformer_cli.training.fit import fold_seed
    from eegformer_cli.training.fold_job import reference_features
    from eegformer_cli.training.run_plan import plan_run

    run = sample_run["run"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert list(metrics["models"]) == [
        "xaiguiformer",
        "logistic_regression",
        "tangent_space",
        "linear_path",
    ]
    assert [(c["model"], c["reference"]) for c in metrics["comparisons"]] == [
        ("xaiguiformer", "logistic_regression"),
        ("xaiguiformer", "tangent_space"),
        ("xaiguiformer", "linear_path"),
    ]
    assert metrics["comparison"] == metrics["comparisons"][0]
    fold = json.loads((run / "splits.json").read_text())["folds"][0]
    config = json.loads((run / "config.json").read_text())
    expected = pyriemann_probabilities(
        sample_run["prep"], fold, fold_seed(config["train_config"]["seed"], 0, 0), config["labels"]
    )
    lines = (run / "oof_predictions.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    got = {
        r["recording_id"]: [float(r[f"prob_{label}"]) for label in config["labels"]]
        for r in rows
        if r["model"] == "tangent_space"
    }
    assert sorted(got) == sorted(expected) and len(got) == 3
    for recording_id, probabilities in got.items():
        np.testing.assert_allclose(probabilities, expected[recording_id], atol=1e-9)
    # the permutation test refits exactly this reference: on the real labels, the run's BAC
    request = read_run_request(run)
    plan = plan_run(request.data_dir, request.label_column, request.config)
    refit = permutation.refit_scores(
        plan,
        reference_features(plan.data),
        [r.label for r in plan.data.recordings],
        "tangent_space",
    )
    assert refit["bac"] == {"tangent_space": metrics["models"]["tangent_space"]["mean"]["bac"]}


def test_a_folder_without_covariances_trains_without_the_tangent_space_and_says_so(
    sample_run, tmp_path, capsys
):
    import shutil

    from eegformer_cli.preprocess import PreprocessSettings, load_connectome, run_preprocess

    old = tmp_path / "old"  # as an earlier eegformer wrote it: no covariance keys
    shutil.copytree(sample_run["prep"], old)
    for path in (old / "connectomes").glob("*.npz"):
        with np.load(path) as data:
            arrays = {key: data[key] for key in data.files if not key.startswith("covariance")}
        np.savez_compressed(path, **arrays)
    metrics = run_training(
        old, tmp_path / "run", "diagnosis", tiny_config(epochs=1, holdout=0.25, val_fraction=0.25)
    )
    assert "hold no band covariances" in capsys.readouterr().err
    assert list(metrics.models) == ["xaiguiformer", "logistic_regression", "linear_path"]
    assert [c.reference for c in metrics.comparisons] == ["logistic_regression", "linear_path"]
    assert (
        exit_code(
            "train",
            "--merge",
            tmp_path / "run",
            "--permutations",
            "2",
            "--permutation-model",
            "tangent_space",
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "needs band covariances" in err and "Traceback" not in err
    # a rerun of preprocess into the folder makes those files again, with the covariances
    edfs = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[:12]
    run_preprocess(
        edfs,
        old,
        PreprocessSettings.from_preset("default"),
        participants=SAMPLE_DATA / "participants.tsv",
        n_jobs=1,
    )
    for path in (old / "connectomes").glob("*.npz"):
        remade = load_connectome(path)
        original = load_connectome(sample_run["prep"] / "connectomes" / path.name)
        assert remade.covariance.shape == (8, 19, 19) and remade.covariance_bands[0] == "delta"
        np.testing.assert_array_equal(remade.covariance, original.covariance)


def test_auto_trains_a_small_transformer_path_on_the_cpu_gpu_or_not(monkeypatch):
    sizes = {
        preset: transformer_parameters(XAIguiFormer(study_model_config(preset)))
        for preset in ("default", "paper")
    }
    assert sizes["default"] < devices.CUDA_MIN_PARAMETERS <= sizes["paper"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the rule, without a GPU
    assert devices.resolve_train_device("auto", sizes["default"]).type == "cpu"
    assert devices.resolve_train_device("auto", sizes["paper"]).type == "cuda"
    assert devices.resolve_train_device("cuda", sizes["default"]).type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve_train_device("auto", sizes["paper"]).type == "cpu"
