"""Scaling out (issue 8): Dask preprocessing, torchrun/DDP training, fold jobs and their merge,
memory-bounded loading of connectome files."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import SAMPLE_DATA, TRAIN_SETTINGS, exit_code, write_connectome_folder
from hypothesis import given
from hypothesis import strategies as st

from eegformer_cli import parallel
from eegformer_cli.atomic import DirectoryLock
from eegformer_cli.choices import STANDARD_1020
from eegformer_cli.errors import OutputError, UsageError
from eegformer_cli.experiment.run import merge_run, run_training
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.training import distributed
from eegformer_cli.training.config import resolve_config
from eegformer_cli.training.dataset import ConnectomeDataset, load_training_data

SAMPLE_RECORDINGS = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[:4]


def assert_same_preprocess_outputs(first: Path, other: Path) -> None:
    """Same manifest and settings file, and every array of every connectome file equal."""
    assert (other / "manifest.tsv").read_bytes() == (first / "manifest.tsv").read_bytes()
    assert json.loads((other / "preprocess.json").read_text()) == json.loads(
        (first / "preprocess.json").read_text()
    )
    names = sorted(p.name for p in (first / "connectomes").glob("*.npz"))
    assert names and names == sorted(p.name for p in (other / "connectomes").glob("*.npz"))
    for name in names:
        with np.load(first / "connectomes" / name) as a, np.load(other / "connectomes" / name) as b:
            assert set(a.files) == set(b.files)
            for key in a.files:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name}: {key}")


# ------------------------------------------------------------------------------------------
# preprocess on Dask


@pytest.fixture(scope="module")
def one_process_output(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("n_jobs_1")
    summary = run_preprocess(
        SAMPLE_RECORDINGS, out, PreprocessSettings.from_preset("default"), n_jobs=1
    )
    assert summary.n_ok == len(SAMPLE_RECORDINGS)
    return out


@pytest.mark.slow
def test_dask_cluster_on_loopback_gives_the_manifest_and_tokens_of_one_process(
    one_process_output, tmp_path
):
    from distributed import Client, LocalCluster, get_task_stream

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
        get_task_stream(client) as stream,
    ):
        code = exit_code(
            "preprocess",
            *SAMPLE_RECORDINGS,
            "--out",
            tmp_path / "dask",
            "--backend",
            "dask",
            "--scheduler",
            cluster.scheduler_address,
        )
        workers = set(client.scheduler_info()["workers"])
    assert code == 0
    used = {task["worker"] for task in stream.data}
    assert used and used <= workers  # the recordings ran on the cluster's workers
    assert_same_preprocess_outputs(one_process_output, tmp_path / "dask")


@pytest.mark.slow
def test_dask_backend_without_address_starts_its_own_cluster(one_process_output, tmp_path):
    code = exit_code(
        "preprocess",
        *SAMPLE_RECORDINGS,
        "--out",
        tmp_path / "dask",
        "--backend",
        "dask",
        "--n-jobs",
        "2",
    )
    assert code == 0
    assert_same_preprocess_outputs(one_process_output, tmp_path / "dask")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler needs --backend dask"),
        (["--backend", "spark"], "allowed values are 'local', 'dask'"),
        (["--backend", "dask", "--n-jobs", "0"], "invalid --n-jobs 0"),
    ],
)
def test_bad_backend_options_are_usage_errors(tmp_path, capsys, args, fragment):
    assert exit_code("preprocess", SAMPLE_RECORDINGS[0], "--out", tmp_path, *args) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1


def test_dask_backend_without_dask_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the extra were not installed
    assert (
        exit_code("preprocess", SAMPLE_RECORDINGS[0], "--out", tmp_path, "--backend", "dask") == 2
    )
    assert "the dask backend needs `pip install eegformer-cli[dask]`" in capsys.readouterr().err


def test_unreachable_scheduler_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT_S", 1)
    assert (
        exit_code(
            "preprocess",
            SAMPLE_RECORDINGS[0],
            "--out",
            tmp_path,
            "--backend",
            "dask",
            "--scheduler",
            "tcp://127.0.0.1:9",
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "cannot reach the Dask scheduler at --scheduler tcp://127.0.0.1:9" in err
    assert len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------
# training: torchrun, fold jobs, merge


def write_toml(path: Path, settings: dict) -> Path:
    """``settings`` as a ``train --config`` file (flat keys and a ``[model]`` table)."""

    def value(v):
        return json.dumps(v)  # numbers, strings and booleans are spelled alike in TOML

    lines = [f"{k} = {value(v)}" for k, v in settings.items() if k != "model"]
    lines += ["[model]"] + [f"{k} = {value(v)}" for k, v in settings.get("model", {}).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_tsv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def without_timings(value):
    """JSON data with the wall-clock fields (``seconds``, ``cv_seconds``) removed."""
    if isinstance(value, dict):
        return {
            k: without_timings(v) for k, v in value.items() if k not in ("seconds", "cv_seconds")
        }
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def read_history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def connectome_dir(tmp_path_factory) -> Path:
    return write_connectome_folder(
        tmp_path_factory.mktemp("connectomes"), n_participants=16, n_segments=3
    )


@pytest.fixture(scope="module")
def single_run(connectome_dir, tmp_path_factory) -> Path:
    """One ordinary process: 2-fold CV and the final model."""
    run_dir = tmp_path_factory.mktemp("single_run")
    run_training(
        connectome_dir, run_dir, "diagnosis", resolve_config("default", overrides=TRAIN_SETTINGS)
    )
    return run_dir


def torchrun(
    n_processes: int, data_dir: Path, run_dir: Path, settings: dict, tmp_path: Path
) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node N -m eegformer_cli train ...`` (docs/guide/scaling.md)."""
    config = write_toml(tmp_path / f"train_{n_processes}.toml", settings)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(n_processes),
            "-m",
            "eegformer_cli",
            "train",
            str(data_dir),
            "--out",
            str(run_dir),
            "--label-column",
            "diagnosis",
            "--config",
            str(config),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )


def assert_runs_match(single: Path, other: Path, tolerance: float) -> None:
    """Same recordings, folds, predicted labels and selected epochs; probabilities and losses
    within ``tolerance``."""
    rows, other_rows = (
        read_tsv(single / "oof_predictions.tsv"),
        read_tsv(other / "oof_predictions.tsv"),
    )
    key = [(r["model"], r["fold"], r["recording_id"], r["predicted"]) for r in rows]
    assert key == [(r["model"], r["fold"], r["recording_id"], r["predicted"]) for r in other_rows]
    probabilities = np.array([[float(r[c]) for c in r if c.startswith("prob_")] for r in rows])
    other_probabilities = np.array(
        [[float(r[c]) for c in r if c.startswith("prob_")] for r in other_rows]
    )
    np.testing.assert_allclose(other_probabilities, probabilities, rtol=0, atol=tolerance)
    assert np.ptp(probabilities) > 10 * tolerance  # the models did move: the check has teeth
    history, other_history = read_history(single), read_history(other)
    assert [(h["fold"], h["epoch"]) for h in history] == [
        (h["fold"], h["epoch"]) for h in other_history
    ]
    for name in ("train_loss", "val_loss"):
        np.testing.assert_allclose(
            [h[name] for h in other_history], [h[name] for h in history], rtol=0, atol=tolerance
        )
    for fold_file in sorted((single / "folds").glob("*.json")):
        assert (
            json.loads(fold_file.read_text())["best_epoch"]
            == json.loads((other / "folds" / fold_file.name).read_text())["best_epoch"]
        )
    metrics, other_metrics = (
        json.loads((run / "metrics.json").read_text()) for run in (single, other)
    )
    for model, summary in metrics["models"].items():
        for fold, other_fold in zip(
            summary["per_fold"], other_metrics["models"][model]["per_fold"]
        ):
            assert fold["confusion_matrix"] == other_fold["confusion_matrix"]
            for name in ("bac", "auroc", "auc_pr"):
                assert other_fold[name] == pytest.approx(fold[name], abs=tolerance)


@pytest.mark.slow
def test_torchrun_two_gloo_processes_match_one_process(connectome_dir, single_run, tmp_path):
    run_dir = tmp_path / "ddp_run"
    result = torchrun(2, connectome_dir, run_dir, TRAIN_SETTINGS, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_runs_match(single_run, run_dir, distributed.PROBABILITY_TOLERANCE)
    assert result.stderr.count("fold r0_f1: BAC") == 1  # rank 1 logs nothing
    assert json.loads(result.stdout)["n_folds"] == 2  # one summary, from rank 0
    assert sorted(p.name for p in (run_dir / "folds").iterdir()) == [
        "final.json",
        "r0_f0.json",
        "r0_f0.pt",
        "r0_f1.json",
        "r0_f1.pt",
    ]


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (nccl, one per process)"
)
def test_torchrun_on_two_gpus_matches_one_gpu(connectome_dir, tmp_path):
    settings = {**TRAIN_SETTINGS, "device": "cuda"}
    one, two = tmp_path / "one_gpu", tmp_path / "two_gpus"
    for n_processes, run_dir in ((1, one), (2, two)):
        result = torchrun(n_processes, connectome_dir, run_dir, settings, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    # bfloat16 autocast on CUDA: rounding of ~4e-3 relative per operation.
    assert_runs_match(one, two, tolerance=2e-2)


@pytest.mark.slow
def test_fold_jobs_merged_equal_a_single_cv_run(connectome_dir, single_run, tmp_path, capsys):
    run_dir = tmp_path / "fold_jobs"
    job = [
        "train",
        connectome_dir,
        "--out",
        run_dir,
        "--label-column",
        "diagnosis",
        "--config",
        write_toml(tmp_path / "train.toml", TRAIN_SETTINGS),
    ]
    assert exit_code(*job, "--fold", "1") == 0
    assert "eegformer train --merge" in capsys.readouterr().err
    assert not (run_dir / "metrics.json").exists()  # summaries are the merge's job
    assert exit_code("train", "--merge", run_dir) == 2
    err = capsys.readouterr().err
    assert "1 fold(s) not finished" in err and "(--fold 0)" in err
    assert exit_code(*job, "--fold", "0") == 0
    with DirectoryLock(run_dir, shared=True):  # a fold job still running
        with pytest.raises(OutputError, match="fold jobs"):
            merge_run(run_dir)
    assert exit_code("train", "--merge", run_dir, "--json") == 0
    assert json.loads(capsys.readouterr().out)["n_folds"] == 2
    assert (run_dir / "oof_predictions.tsv").read_bytes() == (
        single_run / "oof_predictions.tsv"
    ).read_bytes()
    assert without_timings(read_history(run_dir)) == without_timings(read_history(single_run))
    assert without_timings(json.loads((run_dir / "metrics.json").read_text())) == without_timings(
        json.loads((single_run / "metrics.json").read_text())
    )
    merged_model = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=False)
    single_model = torch.load(single_run / "model.pt", map_location="cpu", weights_only=False)
    assert_same_tensors(merged_model, single_model)


def assert_same_tensors(a, b) -> None:
    """Every tensor in two nested structures (model files) equal; other leaves ignored."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_tensors(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["--fold", "2"],
            "invalid --fold 2; these splits have 2 folds, so allowed values are 0 to 1",
        ),
        (["--fold", "0", "--overwrite"], "--overwrite cannot be combined with --fold"),
        (["--merge", "{tmp}"], "remove --out, --label-column, --config, DATA_DIR"),
    ],
)
def test_fold_and_merge_options_are_checked(connectome_dir, tmp_path, capsys, args, fragment):
    config = write_toml(tmp_path / "train.toml", TRAIN_SETTINGS)
    args = [arg.format(tmp=tmp_path) for arg in args]
    assert (
        exit_code(
            "train",
            connectome_dir,
            "--out",
            tmp_path / "run",
            "--label-column",
            "diagnosis",
            "--config",
            config,
            *args,
        )
        == 2
    )
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (["--merge", "{tmp}"], 3, "not a train run folder"),  # as `report` on such a folder
        (["--merge", "{tmp}", "--epochs", "3"], 2, "remove --epochs"),
        (["--out", "{tmp}"], 2, "missing DATA_DIR, --label-column"),
    ],
)
def test_merge_needs_a_run_folder_and_nothing_else(tmp_path, capsys, args, code, fragment):
    assert exit_code("train", *[arg.format(tmp=tmp_path) for arg in args]) == code
    assert fragment in capsys.readouterr().err


def test_fold_jobs_share_the_run_folder_lock_but_exclude_whole_runs(tmp_path):
    with DirectoryLock(tmp_path, shared=True), DirectoryLock(tmp_path, shared=True):
        with pytest.raises(OutputError):
            DirectoryLock(tmp_path).__enter__()
    with DirectoryLock(tmp_path), pytest.raises(OutputError):
        DirectoryLock(tmp_path, shared=True).__enter__()


# ------------------------------------------------------------------------------------------
# pieces of distributed.py


@given(n=st.integers(0, 200), n_parts=st.integers(1, 9))
def test_shards_cover_the_batch_in_order_with_sizes_differing_by_at_most_one(n, n_parts):
    bounds = [distributed.shard_bounds(n, n_parts, part) for part in range(n_parts)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(stop == next_start for (_, stop), (next_start, _) in itertools.pairwise(bounds))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@given(counts=st.lists(st.integers(1, 600), max_size=60), limit=st.integers(1, 512))
def test_evaluation_chunks_keep_order_and_the_segment_bound(counts, limit):
    chunks = distributed.evaluation_chunks(counts, limit)
    assert [i for chunk in chunks for i in chunk] == list(range(len(counts)))
    for chunk in chunks:
        assert chunk and (len(chunk) == 1 or sum(counts[i] for i in chunk) <= limit)


def test_one_process_is_the_writer_and_keeps_the_whole_batch():
    tensors = (torch.arange(5.0), torch.arange(10.0).reshape(5, 2))
    shard, scale = distributed.shard_batch(*tensors)
    assert scale == 1.0 and all(a is b for a, b in zip(shard, tensors))
    assert distributed.is_writer() and distributed.world_size() == 1
    assert distributed.map_gathered(lambda x: x * 2, [1, 2, 3]) == [2, 4, 6]


@pytest.mark.parametrize(
    "environ, place",
    [
        ({}, (0, 1, 0)),
        ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (3, 4, 1)),
    ],
)
def test_process_place_comes_from_torchrun_variables(environ, place):
    found = distributed.process_place(environ)
    assert (found.rank, found.world_size, found.local_rank) == place


@pytest.mark.parametrize(
    "environ, fragment",
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "but not LOCAL_RANK"),
        ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "must be integers"),
        ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "outside"),
    ],
)
def test_incomplete_torchrun_variables_are_usage_errors(environ, fragment):
    with pytest.raises(UsageError, match=fragment):
        distributed.process_place(environ)


# ------------------------------------------------------------------------------------------
# memory-bounded loading


def test_iterating_many_connectome_files_keeps_memory_near_the_cache_bound(tmp_path):
    channels = list(STANDARD_1020)
    bands = [f"band{i}" for i in range(8)]
    edges = np.array([[i + 1.0, i + 2.0] for i in range(8)])
    data_dir = write_connectome_folder(
        tmp_path, n_participants=40, n_segments=8, channels=channels, bands=bands, edges=edges
    )
    data = load_training_data(data_dir, "diagnosis")
    per_recording = 2 * 8 * 8 * 19 * 19 * 4  # coh + wpli, float32
    total = per_recording * len(data.recordings)
    cache_bytes = 4 * per_recording
    dataset = ConnectomeDataset(
        data.recordings, data.label_names, data.channels, data.bands, cache_bytes=cache_bytes
    )
    tracemalloc.start()
    try:
        checksum = sum(float(dataset[i]["coh"][0, 0, 1]) for i in range(len(dataset)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert checksum > 0 and len(dataset) == 40 * 8
    # The cache, the recording being read and the npz reader's buffers (measured: cache + 3.1
    # recordings); never the 40 recordings.
    assert peak < cache_bytes + 4 * per_recording
    assert total > 5 * peak
