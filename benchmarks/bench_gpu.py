"""What CUDA and bfloat16 cost or gain, in one command: a table of

- the paper-size training step (batch 64, 19 channels, 9 bands, 12 layers) in float32 and under
  bfloat16 autocast (the precision policy of ``model/precision.py`` on), and their ratio;
- the same step with captum's per-layer ``LayerDeepLift`` against the one-pass explanation
  (float32), and their ratio;
- the XAI step (coarse pass, explanation, refined pass) against the coarse-only step
  (``xai_refinement`` off), for the ``default`` step (msu-like: 16 channels, 8 bands, batch 16)
  and the paper-size step, at each preset's ``--precision auto``;
- the peak memory of the paper-size step in each precision (CUDA: ``max_memory_allocated``;
  CPU: the process's peak resident set so far, a bound rather than the step's own);
- predict throughput (recordings/s of ``model.predict.recording_logits``: a ``default`` model,
  recordings of 10 segments, float32 and bfloat16);
- the wall time of a full cross-validation run (``train``, default preset, 5 folds and the
  final model) on ``--cv-data`` (a ``preprocess`` folder of msu-schizophrenia); without it
  that row says so.

On a machine without CUDA it runs on the CPU (bfloat16 = CPU autocast) and prints the same
table. ``--quick`` shrinks every size (a 2-layer d-32 paper model, batch 4, 2 timed steps, a
synthetic 24-participant study with 1 epoch and 2 folds for the cross-validation row) so the
script itself can be tested (tests/test_benchmarks.py); its figures mean nothing.
``--json PATH`` also writes the figures. Step times are medians of wall-clock seconds, with
``torch.cuda.synchronize`` around each step on CUDA; on CPU one torch thread, as ``train``.

Example::

    .venv/bin/python benchmarks/bench_gpu.py --cv-data prep-msu --json gpu.json
    .venv/bin/python benchmarks/bench_gpu.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # machine.py, bench_train_step.py
from bench_train_step import ALPHA, BAND_EDGES_HZ, BANDS, CaptumDeepLift, make_inputs
from machine import cpu_model

from eegformer_cli.model import ModelConfig, XAIguiFormer
from eegformer_cli.model.devices import autocast, resolve_precision

#: Sizes of the full run and of ``--quick``.
SIZES = {
    "full": {
        "paper_batch": 64,
        "channels": 19,
        "paper_model": {},
        "default_batch": 16,
        "steps": 20,
        "warmup": 3,
        "predict_recordings": 64,
        "segments": 10,
    },
    "quick": {
        "paper_batch": 4,
        "channels": 6,
        "default_batch": 4,
        "steps": 2,
        "warmup": 1,
        "paper_model": {"d_model": 32, "n_heads": 2, "n_layers": 2, "n_gnn_layers": 1},
        "predict_recordings": 4,
        "segments": 3,
    },
}


def build(preset: str, n_channels: int, n_bands: int, device: torch.device, **fields):
    """A seeded XAIguiFormer of ``preset`` (weights perturbed, so explanations are not ~1e-4)."""
    torch.manual_seed(0)
    config = ModelConfig.preset(
        preset,
        n_channels=n_channels,
        band_names=BANDS[:n_bands],
        band_edges_hz=BAND_EDGES_HZ[:n_bands],
        n_classes=2,
        **fields,
    )
    model = XAIguiFormer(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.set_demographic_stats(50.0, 17.0)
    return model.to(device).train()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def step_seconds(
    model, inputs, device: torch.device, precision: str, steps: int, warmup: int
) -> tuple[float, float]:
    """(median seconds of a training step: forward under ``precision``, loss, backward, fused
    AdamW as ``train``; peak memory in MiB, see the module docs)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    coh, wpli, age, sex, labels = inputs
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for step in range(warmup + steps):
        synchronize(device)
        start = time.perf_counter()
        with autocast(device, precision):
            coarse, refined = model(coh, wpli, age, sex)
        loss = (1 - ALPHA) * F.cross_entropy(coarse.float(), labels) + ALPHA * F.cross_entropy(
            refined.float(), labels
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        synchronize(device)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    return statistics.median(times), peak


def predict_throughput(device: torch.device, precision: str, size: dict) -> float:
    """Recordings per second of ``recording_logits`` for a default model (module docs)."""
    from eegformer_cli.model.predict import recording_logits

    model = build("default", size["channels"], 8, device).eval()
    generator = np.random.default_rng(0)
    recordings = []
    for _ in range(size["predict_recordings"]):
        coh, wpli = (
            generator.uniform(
                0, 1, (size["segments"], 8, size["channels"], size["channels"])
            ).astype(np.float32)
            for _ in range(2)
        )
        recordings.append((coh, wpli, 50.0, 1.0))
    recording_logits(model, recordings[:1], device, precision)  # warm-up
    synchronize(device)
    start = time.perf_counter()
    recording_logits(model, recordings, device, precision)
    synchronize(device)
    return len(recordings) / (time.perf_counter() - start)


def synthetic_study(root: Path, n_channels: int, n_participants: int = 24) -> Path:
    """A ``preprocess``-style folder of random connectomes (two classes): the ``--quick``
    cross-validation row's input."""
    from eegformer_cli.preprocess import PreprocessSettings

    channels = [
        "F3",
        "F4",
        "C3",
        "C4",
        "P3",
        "P4",
        "O1",
        "O2",
        "Fz",
        "Cz",
        "Pz",
        "T7",
        "T8",
        "F7",
        "F8",
        "Fp1",
        "Fp2",
        "P7",
        "P8",
    ][:n_channels]
    bands, edges = BANDS[:3], [list(e) for e in BAND_EDGES_HZ[:3]]
    rng = np.random.default_rng(0)
    (root / "connectomes").mkdir(parents=True)
    header = [
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
    ]
    rows = [header]
    for p in range(n_participants):
        coh, wpli = (rng.uniform(0, 0.5, (2, len(bands), n_channels, n_channels)) for _ in range(2))
        for m in (coh, wpli):
            m[:] = (m + m.transpose(0, 1, 3, 2)) / 2
            m[:, :, np.arange(n_channels), np.arange(n_channels)] = 0
        rid = f"sub-{p:02d}"
        np.savez(
            root / "connectomes" / f"{rid}.npz",
            coh=coh.astype(np.float32),
            wpli=wpli.astype(np.float32),
            channels=np.array(channels),
            bands=np.array(bands),
            band_edges_hz=np.array(edges),
        )
        rows.append(
            [
                rid,
                rid,
                f"{rid}.edf",
                "ok",
                "n/a",
                "2",
                "128",
                "60",
                "n/a",
                str(20 + 5 * (p // 2)),
                "MF"[p // 2 % 2],
                "ab"[p % 2],
                f"connectomes/{rid}.npz",
                "0",
            ]
        )  # age and sex balanced over the classes
    (root / "manifest.tsv").write_text("\n".join("\t".join(r) for r in rows) + "\n")
    settings = PreprocessSettings.from_preset("default").to_dict()
    (root / "preprocess.json").write_text(
        json.dumps(
            {"settings": settings, "channels": channels, "bands": bands, "band_edges_hz": edges}
        )
    )
    return root


def cv_seconds(data: Path, device: torch.device, quick: bool) -> float:
    """Wall seconds of ``train`` (default preset) on ``data``: 5 folds and the final model
    (``--quick``: 2 folds, 1 epoch)."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.training.config import resolve_config

    flags = {"device": device.type, "cv": 2 if quick else 5}
    if quick:
        flags.update(epochs=1, batch_size=4)
    label = "diagnosis"
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        run_training(data, Path(out) / "run", label, resolve_config("default", None, flags))
        return time.perf_counter() - start


def measure(device: torch.device, size: dict, cv_data: Path | None, quick: bool) -> list:
    """Rows (quantity, value, unit) of the table."""
    rows = []
    half = "float16" if device.type == "cuda" and not torch.cuda.is_bf16_supported() else "bfloat16"
    paper_inputs = make_inputs(size["paper_batch"], size["channels"], str(device))
    paper = {}
    for precision in ("float32", half):
        model = build("paper", size["channels"], len(BANDS), device, **size["paper_model"])
        paper[precision] = step_seconds(
            model, paper_inputs, device, precision, size["steps"], size["warmup"]
        )
        rows.append((f"paper-size step, {precision}", paper[precision][0] * 1e3, "ms"))
    rows.append((f"paper-size step, float32 / {half}", paper["float32"][0] / paper[half][0], "x"))
    for precision in ("float32", half):
        rows.append((f"paper-size step peak memory, {precision}", paper[precision][1], "MiB"))
    captum = CaptumDeepLift(
        build("paper", size["channels"], len(BANDS), device, **size["paper_model"])
    )
    captum_seconds = step_seconds(
        captum, paper_inputs, device, "float32", size["steps"], size["warmup"]
    )[0]
    rows.append(("paper-size step, captum LayerDeepLift", captum_seconds * 1e3, "ms"))
    rows.append(("paper-size step, captum / one-pass", captum_seconds / paper["float32"][0], "x"))
    default_inputs = make_inputs(size["default_batch"], size["channels"], str(device))
    default_inputs = (default_inputs[0][:, :8], default_inputs[1][:, :8], *default_inputs[2:])
    for preset, inputs, n_bands, fields in (
        ("default", default_inputs, 8, {}),
        ("paper", paper_inputs, len(BANDS), size["paper_model"]),
    ):
        precision = resolve_precision("auto")
        xai = step_seconds(
            build(preset, size["channels"], n_bands, device, **fields),
            inputs,
            device,
            precision,
            size["steps"],
            size["warmup"],
        )[0]
        coarse = step_seconds(
            build(preset, size["channels"], n_bands, device, **{**fields, "xai_refinement": False}),
            inputs,
            device,
            precision,
            size["steps"],
            size["warmup"],
        )[0]
        rows.append((f"{preset} XAI step ({precision})", xai * 1e3, "ms"))
        rows.append((f"{preset} coarse-only step ({precision})", coarse * 1e3, "ms"))
        rows.append((f"{preset} XAI / coarse-only step", xai / coarse, "x"))
    for precision in ("float32", half):
        rows.append(
            (
                f"predict throughput, {precision}",
                predict_throughput(device, precision, size),
                "recordings/s",
            )
        )
    if quick:
        with tempfile.TemporaryDirectory() as folder:
            data = synthetic_study(Path(folder) / "prep", size["channels"])
            rows.append(
                ("full CV wall time (synthetic, --quick)", cv_seconds(data, device, True), "s")
            )
    elif cv_data is not None:
        rows.append(
            (f"full CV wall time ({cv_data.name})", cv_seconds(cv_data, device, False), "s")
        )
    else:
        rows.append(("full CV wall time: not measured (give --cv-data)", float("nan"), "s"))
    return rows


def table(rows: list, header: dict) -> str:
    """The rows as aligned text, under one line naming the device."""
    width = max(len(name) for name, _, _ in rows)
    lines = [", ".join(f"{k}: {v}" for k, v in header.items())]
    lines += [f"{name:<{width}}  {value:>10.3f}  {unit}" for name, value, unit in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (module docs)")
    parser.add_argument("--cv-data", type=Path, help="a preprocess folder for the CV row")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    name = args.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    size = SIZES["quick" if args.quick else "full"]
    if device.type == "cpu":
        torch.set_num_threads(1)
    rows = measure(device, size, args.cv_data, args.quick)
    header = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model(),
        "torch": torch.__version__,
        "quick": args.quick,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    print(table(rows, header))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    **header,
                    "rows": [
                        {"quantity": n, "value": v if np.isfinite(v) else None, "unit": u}
                        for n, v, u in rows
                    ],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
