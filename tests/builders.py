"""What several test modules build or run: the repository's paths and the real datasets beside
it, the CLI in this process, synthetic preprocess folders (two contracts: the manifest as
``preprocess`` writes it by hand, and :class:`Connectome` files), synthetic recordings, small
models and their inputs, and the tiny runs on sample data and on an XOR study that
``tests/conftest.py`` builds once per session (and per xdist worker) as fixtures.

A plain module, not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import json
from pathlib import Path

import mne
import numpy as np
import pytest
import torch

from eegformer_cli.atomic import write_json, write_text
from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.model.interactions import Entry
from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer
from eegformer_cli.preprocess import Connectome
from eegformer_cli.recordings.channels import STANDARD_1020
from eegformer_cli.training.config import TrainConfig, resolve_config

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
SAMPLE_DATA = REPO / "sample_data"
#: A run folder written by commit 40b91a5 (its README says how).
EARLIER_RUN = Path(__file__).parent / "data" / "run_folder_40b91a5"
#: A run folder written by commit eb6edf8, fold model files included (its README says how).
PINNED_RUN = Path(__file__).parent / "data" / "run_folder_eb6edf8"
#: A run folder whose models have a tangent-space path, its logits stacked with the linear path's.
STACKED_RUN = Path(__file__).parent / "data" / "run_folder_78d9a86"


def shared_dataset(name: str) -> Path:
    """Path of ``../shared/data/<name>``; skips the test with a clear message when absent."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(
            f"real dataset {name!r} not found at {path} (clone the project beside ../shared)"
        )
    return path


# ------------------------------------------------------------------------------------------
# the CLI in this process (as the console script runs it, without its start-up)


def run_main(capsys, *args) -> tuple[int, str]:
    """The CLI in this process (as the console script runs it): (exit code, stdout + stderr)."""
    from eegformer_cli.cli.app import main

    with pytest.raises(SystemExit) as stopped:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return stopped.value.code, captured.out + captured.err


def exit_code(*args) -> int:
    """``eegformer ARGS`` in this process (no interpreter start-up); returns the exit code."""
    # imported here: it imports every subcommand, which only the CLI tests need
    from eegformer_cli.cli.app import main

    with pytest.raises(SystemExit) as stopped:
        main([str(a) for a in args])
    return stopped.value.code


def json_rows(output: str) -> list[dict]:
    """The JSON list ``predict --format json`` printed (stdout), from :func:`run_main`'s
    output."""
    start = output.index("[\n")
    return json.loads(output[start : output.index("\n]", start) + 2])


#: A ``train --config`` file for a 2-epoch run of a tiny model.
TINY_TOML = """epochs = 2
batch_size = 8
augmentation = 'none'
device = 'cpu'
val_fraction = 0.34
[model]
d_model = 16
n_heads = 2
n_layers = 1
n_gnn_layers = 1
"""


# ------------------------------------------------------------------------------------------
# a preprocess folder written by hand, its tiny training config


CHANNELS = ["F3", "F4", "C3", "C4", "P3", "P4"]
BANDS = ["theta", "alpha", "beta"]
EDGES = [[4.0, 8.0], [8.0, 13.0], [13.0, 30.0]]


def study_model_config(preset: str = "default", **fields) -> ModelConfig:
    """``ModelConfig.preset(preset, **fields)`` for this module's study (CHANNELS, BANDS,
    EDGES, two classes)."""
    return ModelConfig.preset(
        preset,
        n_channels=len(CHANNELS),
        band_names=BANDS,
        band_edges_hz=EDGES,
        n_classes=2,
        channel_names=CHANNELS,
        **fields,
    )


TINY = {
    "epochs": 6,
    "batch_size": 4,
    "lr": 3e-3,
    "warmup_epochs": 1.0,
    "augmentation": "none",
    "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1},
}


#: The manifest columns the two folder builders below write: a subset of those preprocess
#: writes (the readers take a manifest without the others), plus the label ``diagnosis``.
BUILT_MANIFEST_COLUMNS = (
    "recording_id",
    "participant_id",
    "source_file",
    "status",
    "error",
    "n_segments",
    "sfreq",
    "duration_s",
    "channels_interpolated",
    "age",
    "sex",
    "diagnosis",
    "connectome",
    "settings_hash",
)


def make_connectome_folder(
    root: Path,
    n_participants: int = 24,
    n_segments: int = 2,
    seed: int = 0,
    labels=None,
    effect: float = 0.3,
) -> Path:
    """A preprocess-style output folder with a learnable two-class difference (``effect``
    added to the patients' alpha coherence; band covariances too: average-referenced random
    signals, rank C - 1, from their own stream)."""
    from eegformer_cli.preprocess import PreprocessSettings

    rng, signals = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    (root / "connectomes").mkdir(parents=True)
    c = len(CHANNELS)
    header = list(BUILT_MANIFEST_COLUMNS)
    rows = []
    for p in range(n_participants):
        label = labels[p] if labels is not None else ("patient" if p % 2 else "control")
        coh = rng.uniform(0.2, 0.6, (n_segments, len(BANDS), c, c))
        wpli = rng.uniform(0.0, 0.3, (n_segments, len(BANDS), c, c))
        if label == "patient":
            coh[:, 1] += effect
        for m in (coh, wpli):
            m[:] = (m + m.transpose(0, 1, 3, 2)) / 2
            m[:, :, np.arange(c), np.arange(c)] = 0
        x = signals.normal(size=(len(BANDS), c, 200)) * 1e-5
        x -= x.mean(axis=1, keepdims=True)
        rid = f"sub-{p:02d}_rest"
        np.savez(
            root / "connectomes" / f"{rid}.npz",
            coh=coh.astype(np.float32),
            wpli=wpli.astype(np.float32),
            channels=np.array(CHANNELS),
            bands=np.array(BANDS),
            band_edges_hz=np.array(EDGES),
            covariance=(x @ x.transpose(0, 2, 1) / 200).astype(np.float32),
            covariance_bands=np.array(BANDS),
        )
        age = f"{30 + p % 20}" if p % 5 else "n/a"
        rows.append(
            [
                rid,
                f"sub-{p:02d}",
                f"/data/{rid}.edf",
                "ok",
                "n/a",
                str(n_segments),
                "128",
                "60",
                "n/a",
                age,
                "M" if p % 3 else "F",
                label or "n/a",
                f"connectomes/{rid}.npz",
                "0",
            ]
        )
    (root / "manifest.tsv").write_text("\n".join("\t".join(r) for r in [header] + rows) + "\n")
    settings = PreprocessSettings.from_preset("default").to_dict()
    (root / "preprocess.json").write_text(
        json.dumps(
            {"settings": settings, "channels": CHANNELS, "bands": BANDS, "band_edges_hz": EDGES}
        )
    )
    return root


def tiny_config(**overrides) -> TrainConfig:
    return resolve_config("default", None, {**TINY, "device": "cpu", **overrides})


# ------------------------------------------------------------------------------------------
# a preprocess folder of Connectome files, its training settings


#: The same channels and bands as :func:`make_connectome_folder`'s, edges as an array.
BAND_EDGES_HZ = np.array(EDGES)
#: A tiny model and a short schedule: enough for the weights to move away from their start.
#: Batches of 7 split 4 + 3 over two processes (uneven slices, loss scales 8/7 and 6/7).
# dropout 0: each process draws its own dropout masks for its slice of the batch, so with
# dropout a multi-process run equals a one-process run only in distribution (docs/guide/scaling.md).
TRAIN_SETTINGS = {
    "epochs": 4,
    "batch_size": 7,
    "lr": 3e-3,
    "warmup_epochs": 0.0,
    "cv": 2,
    "val_fraction": 0.3,
    "device": "cpu",
    "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1, "dropout": 0.0},
}


def write_connectome_folder(
    out: Path,
    n_participants: int,
    n_segments: int,
    channels: list[str] = CHANNELS,
    bands: list[str] = BANDS,
    edges: np.ndarray = BAND_EDGES_HZ,
    seed: int = 0,
    effect: float = 0.3,
    balanced_sex: bool = False,
) -> Path:
    """A ``preprocess`` output in the documented format: random symmetric connectomes (entries
    uniform in [0, 1]), group ``schizophrenia`` with theta coherence higher by ``effect``, ages
    and sexes (the sex alternating with the group, or with ``balanced_sex`` half of each group
    each sex), one recording each."""
    rng = np.random.default_rng(seed)
    n_channels = len(channels)
    columns = BUILT_MANIFEST_COLUMNS
    lines = ["\t".join(columns)]
    for i in range(n_participants):
        diagnosis = "schizophrenia" if i % 2 else "healthy"
        values = rng.uniform(0, 1, (n_segments, len(bands), n_channels, n_channels))
        values[:, 0] += effect * (diagnosis == "schizophrenia")
        coh = (values + values.transpose(0, 1, 3, 2)) / 2 * (1 - np.eye(n_channels))
        recording_id = f"sub-{i:03d}_task-rest"
        Connectome(
            coh.astype(np.float32),
            (coh / 2).astype(np.float32),
            channels,
            bands,
            edges,
            128.0,
            np.arange(n_segments) * 15.0,
            15.0 * n_segments,
            15.0,
        ).save(out / "connectomes" / f"{recording_id}.npz")
        lines.append(
            "\t".join(
                [
                    recording_id,
                    f"sub-{i:03d}",
                    f"{recording_id}.edf",
                    "ok",
                    "n/a",
                    str(n_segments),
                    "128",
                    str(15 * n_segments),
                    "n/a",
                    str(20 + 3 * i),
                    "MF"[(i // 2 if balanced_sex else i) % 2],
                    diagnosis,
                    f"connectomes/{recording_id}.npz",
                    "0123456789abcdef",
                ]
            )
        )
    write_text(out / "manifest.tsv", "\n".join(lines) + "\n")
    write_json(out / "preprocess.json", {"settings": {}, "channels": channels, "bands": bands})
    return out


# ------------------------------------------------------------------------------------------
# an XOR study: two entries whose label is caused by both together


#: The planted entries: coherence of C3-P4 in theta, wPLI of F4-C4 in beta.
PLANTED = (Entry("coh", "theta", ("C3", "P4")), Entry("wpli", "beta", ("F4", "C4")))


def _entry_slot(entry: Entry) -> tuple[int, int, int]:
    return (
        BANDS.index(entry.band),
        CHANNELS.index(entry.channels[0]),
        CHANNELS.index(entry.channels[1]),
    )


def planted_study(root, rule: str, n: int = 160, seed: int = 0):
    """A folder of ``n`` participants whose label follows ``rule``: "xor" (patient <=> the two
    planted entries raised, one but not both), "age" (patient <=> the first raised xor age
    > 45) or "null" (the first raised in half of them, the label independent)."""
    rng = np.random.default_rng([seed, 35])
    a, b = rng.integers(0, 2, n), rng.integers(0, 2, n)
    ages = 30 + (np.arange(n) % 32)
    label = {"xor": a ^ b, "age": a ^ (ages > 45), "null": rng.integers(0, 2, n)}[rule]
    folder = make_connectome_folder(
        root, n, seed=seed, labels=["patient" if y else "control" for y in label]
    )
    for p in range(n):
        path = folder / "connectomes" / f"sub-{p:02d}_rest.npz"
        with np.load(path) as saved:
            arrays = {key: saved[key] for key in saved.files}
        if label[p]:  # undo the fixture's own (linear) class difference
            arrays["coh"][:, 1] -= 0.3
            arrays["coh"][:, 1, np.arange(6), np.arange(6)] = 0.0
        for raised, entry in zip((a[p], b[p]), PLANTED):
            band, i, j = _entry_slot(entry)
            arrays[entry.measure][:, band, i, j] += 0.25 * raised
            arrays[entry.measure][:, band, j, i] += 0.25 * raised
        np.savez(path, **arrays)
    manifest = folder / "manifest.tsv"
    lines = manifest.read_text().splitlines()
    header = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:]]
    for p, row in enumerate(rows):
        row[header.index("age")] = str(ages[p])
    manifest.write_text("\n".join("\t".join(r) for r in [header] + rows) + "\n")
    return folder


def dynamic_onsets_s(n_segments: int) -> np.ndarray:
    """The onsets (s) :func:`dynamic_study` gives its recordings' segments."""
    index = np.arange(n_segments, dtype=np.float64)
    return 1.5 + 4.0 * (index + (index >= 2))


def dynamic_study(root, n: int = 60, n_segments: int = 8, seed: int = 0):
    """A folder of ``n`` participants of ``n_segments`` segments whose label is whether the two
    :data:`PLANTED` entries are raised in the same segments: in patients both in one half of
    the segments, in controls each in its own half (the dynamic scenario's design: every
    entry's recording mean and spread alike in the classes). Each connectome file holds its
    segments' onsets (``segment_onsets_s``: 4 s apart, one segment missing after the second, as
    after a rejected one)."""
    rng = np.random.default_rng([seed, 36])
    label = np.arange(n) % 2
    folder = make_connectome_folder(
        root,
        n,
        n_segments=n_segments,
        seed=seed,
        labels=["patient" if y else "control" for y in label],
        effect=0.0,
    )
    for p in range(n):
        path = folder / "connectomes" / f"sub-{p:02d}_rest.npz"
        with np.load(path) as saved:
            arrays = {key: saved[key] for key in saved.files}
        order = rng.permutation(n_segments)
        on_a = order[: n_segments // 2]
        on_b = on_a if label[p] else order[n_segments // 2 :]
        for on, entry in zip((on_a, on_b), PLANTED):
            band, i, j = _entry_slot(entry)
            arrays[entry.measure][on, band, i, j] += 0.25
            arrays[entry.measure][on, band, j, i] += 0.25
        arrays["segment_onsets_s"] = dynamic_onsets_s(n_segments)
        np.savez(path, **arrays)
    return folder


# ------------------------------------------------------------------------------------------
# synthetic recordings


#: The 10-20 names an old montage uses for four channels, and their new names.
OLD_NAMES = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}


def synthetic_raw(seconds=60.0, sfreq=256.0, n_channels=19, seed=0) -> mne.io.RawArray:
    """Noise plus a shared 10 Hz rhythm, ~20 uV, with standard 10-20 names (old T3-T6 ones)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sfreq)) / sfreq
    alpha = np.sin(2 * np.pi * 10 * t)
    data = (
        rng.standard_normal((n_channels, t.size)) + rng.uniform(0.5, 1.5, (n_channels, 1)) * alpha
    )
    names = [{v: k for k, v in OLD_NAMES.items()}.get(n, n) for n in STANDARD_1020[:n_channels]]
    return mne.io.RawArray(data * 1e-5, mne.create_info(names, sfreq, "eeg"), verbose=False)


def write_edf(raw: mne.io.BaseRaw, path: Path) -> Path:
    mne.export.export_raw(path, raw, fmt="edf", overwrite=True, verbose=False)
    return path


def ica_friendly_raw(seconds=65.0, sfreq=500.0, n_channels=10, seed=0) -> mne.io.RawArray:
    """Mixed super-Gaussian sources: extended infomax converges on them in a few iterations
    (on Gaussian noise it runs to its iteration limit, minutes)."""
    rng = np.random.default_rng(seed)
    sources = rng.laplace(size=(n_channels, int(seconds * sfreq)))
    data = rng.standard_normal((n_channels, n_channels)) @ sources * 1e-5
    return mne.io.RawArray(
        data, mne.create_info(list(STANDARD_1020[:n_channels]), sfreq, "eeg"), verbose=False
    )


# ------------------------------------------------------------------------------------------
# small models and their inputs: a 5-band model with its own batches ...


MODEL_CHANNELS = ["Fp1", "Fz", "Cz", "Pz", "O1", "O2"]
MODEL_BANDS = ["delta", "theta", "alpha", "beta", "theta_beta_ratio"]
MODEL_EDGES_HZ = [(2, 4), (4, 8), (8, 12), (12, 30), (4 / 12, 8 / 30)]


def small_config(preset: str = "default", **fields) -> ModelConfig:
    """A few-second model with the preset's behaviour: d 32, 4 heads (head dim 8), 2 layers,
    no dropout (so two instances with the same weights compute the same numbers)."""
    defaults = {
        "n_channels": len(MODEL_CHANNELS),
        "band_names": MODEL_BANDS,
        "band_edges_hz": MODEL_EDGES_HZ,
        "n_classes": 3,
        "d_model": 32,
        "n_heads": 4,
        "n_layers": 2,
        "n_gnn_layers": 2,
        "dropout": 0.0,
    }
    return ModelConfig.preset(preset, **{**defaults, **fields})


def connectome_batch(batch: int = 3, seed: int = 0, device: str = "cpu"):
    """Symmetric coh/wPLI in [0, 1) with zero diagonal; ages and sexes with one unknown each."""
    generator = torch.Generator().manual_seed(seed)
    n = len(MODEL_CHANNELS)

    def connectome():
        values = torch.rand(batch, len(MODEL_BANDS), n, n, generator=generator)
        return (values + values.transpose(-1, -2)) / 2 * (1 - torch.eye(n))

    age = torch.tensor([25.0, float("nan"), 70.0, 41.0][:batch])
    sex = torch.tensor([1.0, 0.0, float("nan"), 0.0][:batch])
    return tuple(t.to(device) for t in (connectome(), connectome(), age, sex))


def perturb(model: XAIguiFormer, seed: int = 0) -> XAIguiFormer:
    """Move every weight away from its init (LayerScale gammas up to ~0.5), as after training,
    so the explanations and the refined pass are not negligibly small."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.add_((0.5 if name.endswith("gamma") else 0.1) * noise)
    return model


# ... and a 4-band, 6-channel random model with random connectivity, to explain


RANDOM_BANDS = ["delta", "theta", "alpha", "beta"]
RANDOM_N_CHANNELS = 6


def random_model(n_classes: int = 3, **overrides) -> XAIguiFormer:
    """A random ``default`` model of 4 bands and 6 channels (``overrides``: more ModelConfig
    fields), seeded, in eval mode."""
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "default",
        n_channels=RANDOM_N_CHANNELS,
        band_names=RANDOM_BANDS,
        band_edges_hz=[(1, 4), (4, 8), (8, 13), (13, 30)],
        n_classes=n_classes,
        d_model=16,
        n_heads=2,
        n_layers=2,
        n_gnn_layers=1,
        **overrides,
    )
    return XAIguiFormer(config).eval()


def random_connectivity(n_segments: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric (S, T, C, C) float32 coh and wPLI in [0, 1] with zero diagonals."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        x = rng.uniform(0, 1, (n_segments, len(RANDOM_BANDS), RANDOM_N_CHANNELS, RANDOM_N_CHANNELS))
        x = (x + x.transpose(0, 1, 3, 2)) / 2
        x[..., np.arange(RANDOM_N_CHANNELS), np.arange(RANDOM_N_CHANNELS)] = 0
        out.append(x.astype(np.float32))
    return out[0], out[1]


# ------------------------------------------------------------------------------------------
# runs: the tiny runs conftest.py shares as fixtures, a metrics.json as the verdict reads it


def build_sample_run(root: Path) -> dict:
    """12 sample recordings preprocessed into ``root/prep`` and a tiny model trained into
    ``root/run`` (25 % holdout)."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.preprocess import PreprocessSettings, run_preprocess

    prep, run_dir = root / "prep", root / "run"
    edfs = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[:12]
    run_preprocess(
        edfs,
        prep,
        PreprocessSettings.from_preset("default"),
        participants=SAMPLE_DATA / "participants.tsv",
        n_jobs=2,
    )
    config = resolve_config(
        "default",
        None,
        {
            "epochs": 15,
            "batch_size": 8,
            "holdout": 0.25,
            "val_fraction": 0.25,
            "device": "cpu",
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 2, "n_gnn_layers": 1},
            # the tests explain this model's transformer path, so it must reach the output:
            # with the default's keep_patience (3) this tiny run stops it before it is kept
            "keep_patience": 5,
        },
    )
    run_training(prep, run_dir, "diagnosis", config)
    return {"prep": prep, "run": run_dir, "model": run_dir / "model.pt"}


def build_interaction_run(root: Path) -> dict:
    """A tiny model (25 % holdout) trained into ``root/run`` on an XOR study of 80
    participants (``root/xor``), whose screen keeps the planted pair."""
    from eegformer_cli.experiment.run import run_training

    prep, run = root / "xor", root / "run"
    planted_study(prep, "xor", n=80)
    config = tiny_config(interactions=True, age_interactions=True, holdout=0.25)
    run_training(prep, run, "diagnosis", config)
    return {"prep": prep, "run": run}


def metrics_of(**changes) -> RunMetrics:
    """A metrics.json of a run, as ``verdict`` reads it."""
    base = {
        "labels": ["control", "patient"],
        "n_folds": 5,
        "models": {"xaiguiformer": {"mean": {"bac": 0.75, "auroc": 0.8}}},
        "score": {"mean": 0.75, "std": 0.05, "ci95": [0.66, 0.84]},
        "comparison": {
            "model": "xaiguiformer",
            "reference": "logistic_regression",
            "metric": "bac",
            "mean_difference": 0.017,
            "ci95": [-0.072, 0.105],
        },
    }
    return RunMetrics.from_dict({**base, **changes})
