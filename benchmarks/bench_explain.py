"""Time ``eegformer explain`` (all outputs) on one 60 s recording with a default-preset model.

Setup (not timed): the recording is preprocessed once (its ``preprocess.json`` gives the
settings, channels and bands a model file needs), and a ``ModelConfig.preset("default")``
XAIguiFormer behind input standardisation (the statistics of this recording) is saved as a
model file. Its weights are random: the time does not depend on their values.

Timed, ``--repeats`` times each (median reported):

- ``cli_raw``: the whole command in a fresh process on the raw EDF (Python and torch import,
  preprocessing with the model's settings, every explanation, every file);
- ``in_process_raw``: the same command through ``eegformer_cli.cli.app.main`` in this process
  (no interpreter start);
- ``in_process_preprocessed``: the command on the preprocess folder (explanations and files only).

Prints one JSON object on stdout (times in s, segments, the 1-minute load average, machine).

Example::

    .venv/bin/python benchmarks/bench_explain.py ../shared/data/msu-schizophrenia/eeg/sub-001_task-rest_eeg.edf
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

from eegformer_cli.choices import DEFAULT_N_STEPS
from eegformer_cli.cli.app import main
from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer
from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
from eegformer_cli.training.model_file import save_model_file
from eegformer_cli.training.standardise import connectivity_stats


def make_model_file(prep: Path, path: Path) -> int:
    """A default-preset model file fitted to ``prep``'s channels and bands; returns S segments."""
    settings = json.loads((prep / "preprocess.json").read_text())
    connectome = next((prep / "connectomes").glob("*.npz"))
    with np.load(connectome) as data:
        coh, wpli = data["coh"], data["wpli"]
        channels, bands = [str(c) for c in data["channels"]], [str(b) for b in data["bands"]]
        edges = data["band_edges_hz"]
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "default",
        n_channels=len(channels),
        band_names=bands,
        band_edges_hz=edges.tolist(),
        n_classes=2,
        channel_names=channels,
        input_standardisation=True,
    )
    model = XAIguiFormer(config)
    model.set_stats(connectivity_stats([(coh, wpli)]))
    save_model_file(
        path,
        model,
        label_names=["healthy", "patient"],
        label_column="diagnosis",
        positive_label="patient",
        channels=channels,
        bands=bands,
        band_edges_hz=edges,
        preprocess_settings=settings["settings"],
        demographic_stats=None,
        train_config={},
        trained_on="benchmark",
    )
    return len(coh)


def timed_main(args: list[str]) -> float:
    start = time.perf_counter()
    try:
        main(args)
    except SystemExit as stopped:
        if stopped.code != 0:
            raise RuntimeError(f"eegformer {' '.join(args)} exited {stopped.code}") from None
    return time.perf_counter() - start


def main_benchmark() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", type=Path, help="one EDF of about 60 s")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run_preprocess([args.recording], tmp / "prep", PreprocessSettings.from_preset("default"))
        n_segments = make_model_file(tmp / "prep", tmp / "model.pt")
        model, raw, prep, out = map(
            str, (tmp / "model.pt", args.recording, tmp / "prep", tmp / "out")
        )
        times = {"cli_raw": [], "in_process_raw": [], "in_process_preprocessed": []}
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "eegformer_cli",
                    "explain",
                    model,
                    raw,
                    "--out",
                    out,
                    "--device",
                    "cpu",
                ],
                check=True,
                capture_output=True,
            )
            times["cli_raw"].append(time.perf_counter() - start)
            times["in_process_raw"].append(
                timed_main(["explain", model, raw, "--out", out, "--device", "cpu"])
            )
            times["in_process_preprocessed"].append(
                timed_main(["explain", model, prep, "--out", out, "--device", "cpu"])
            )
        files = sorted(p.name for p in Path(out).iterdir())
    print(
        json.dumps(
            {
                "recording": str(args.recording),
                "n_segments": n_segments,
                "model": "ModelConfig.preset('default'), random weights",
                "method": f"integrated_gradients, {DEFAULT_N_STEPS} steps",
                "files": files,
                "median_s": {k: round(statistics.median(v), 2) for k, v in times.items()},
                "all_s": {k: [round(x, 2) for x in v] for k, v in times.items()},
                "load_average_1min": os.getloadavg()[0],
                "machine": machine(),
                "torch": torch.__version__,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main_benchmark()
