"""Train, predict and explain on recordings of thousands of segments: peak memory.

Builds under ``--workdir`` (once; reused by later runs):

- ``tiled-<S>``: a preprocess folder of ``--recordings`` recordings of ``S`` segments each:
  synthetic 2-minute, 19-channel, 256 Hz recordings (``bench_preprocess.write_synthetic_edf``)
  preprocessed with the default preset, each connectome's segments tiled to ``S`` with a little
  noise (30 s segments: 240 for 2 hours, 960 for 8, 2,880 for 24), half labelled ``a``, half
  ``b``;
- ``raw-<H>h.edf``: a synthetic recording of ``H`` hours, for ``explain`` and ``predict``.

Then runs each command of ``--parts`` in a child process with the CLI of ``--code`` (a
checkout: this one by default, or e.g. ``git worktree add --detach ../baseline main``), one
thread, and prints its peak RSS (``ru_maxrss`` of the child, MiB), wall seconds and CPU
seconds, as JSON lines on stdout:

- ``train:<S>``: ``train tiled-<S> --holdout 0.25 --epochs 1 -j 1`` (default preset);
- ``explain:<H>``: ``explain M raw-<H>h.edf --n-steps 4`` with M the model of a ``train`` run
  on ``tiled-<--model-segments>`` (trained by this checkout first if missing);
- ``predict:<H>``: ``predict M raw-<H>h.edf``.

Usage::

    python benchmarks/bench_long_recordings.py --workdir /tmp/long --parts train:240,train:960
    python benchmarks/bench_long_recordings.py --workdir /tmp/long --parts explain:2,explain:8 \
        --code ../baseline

The machine is shared: say ``uptime``'s load with the figures (RSS does not depend on it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_preprocess import write_synthetic_edf  # benchmarks/ (scripts run from this folder)

REPO = Path(__file__).resolve().parents[1]
SHORT_MINUTES = 2


def short_folder(workdir: Path, n_recordings: int) -> Path:
    """``n_recordings`` 2-minute synthetic recordings preprocessed (default preset)."""
    from eegformer_cli.preprocess import PreprocessSettings, run_preprocess

    prep = workdir / f"short-{n_recordings}"
    if (prep / "manifest.tsv").is_file():
        return prep
    raw = workdir / f"short-raw-{n_recordings}"
    raw.mkdir(parents=True, exist_ok=True)
    lines = ["participant_id\tdiagnosis\tage\tsex"]
    for i in range(n_recordings):
        write_synthetic_edf(raw / f"sub-{i:02d}_task-rest_eeg.edf", SHORT_MINUTES, seed=i)
        lines.append(f"sub-{i:02d}\t{'ab'[i % 2]}\t{30 + i}\t{'MF'[i % 2]}")
    (raw / "participants.tsv").write_text("\n".join(lines) + "\n")
    settings = PreprocessSettings.from_preset("default")
    run_preprocess(sorted(raw.glob("*.edf")), prep, settings, participants=raw / "participants.tsv")
    return prep


def tiled_folder(workdir: Path, n_recordings: int, n_segments: int) -> Path:
    """The short folder with every connectome's segments tiled to ``n_segments`` (noise
    sd 0.01 added, clipped to [0, 1]) and the manifest's segment counts to match."""
    from eegformer_cli.preprocess import output

    tiled = workdir / f"tiled-{n_recordings}x{n_segments}"
    if (tiled / "manifest.tsv").is_file():
        return tiled
    source = short_folder(workdir, n_recordings)
    shutil.copytree(source, tiled)
    rows = output.read_manifest(tiled)
    rng = np.random.default_rng(0)
    for row in rows:
        path = output.connectome_path(tiled, row)
        connectome = output.load_connectome(path)
        picks = np.resize(np.arange(connectome.n_segments), n_segments)
        for name in ("coh", "wpli"):
            tokens = getattr(connectome, name)[picks]
            tokens += rng.normal(0, 0.01, tokens.shape).astype(np.float32)
            setattr(connectome, name, np.clip(tokens, 0, 1))
        connectome.segment_onsets_s = 30.0 * np.arange(n_segments)
        connectome.duration_s = 30.0 * n_segments
        connectome.save(path)
        row["n_segments"] = n_segments
    output.write_manifest(tiled / "manifest.tsv", rows)
    return tiled


def measured(command: list[str], code: Path) -> dict:
    """Run ``command`` in a child with ``code`` first on PYTHONPATH and one thread: peak RSS
    (MiB), wall and CPU seconds, exit status."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    assert child.stderr is not None
    tail = child.stderr.read().decode(errors="replace")[-400:]
    return {
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "exit": os.waitstatus_to_exitcode(status),
        **({"stderr": tail} if status else {}),
    }


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "eegformer_cli", *map(str, args)]


def train(workdir: Path, code: Path, n_recordings: int, n_segments: int, tag: str) -> tuple:
    data = tiled_folder(workdir, n_recordings, n_segments)
    run = workdir / f"run-{n_recordings}x{n_segments}-{tag}"
    shutil.rmtree(run, ignore_errors=True)
    command = cli("train", data, "--out", run, "-l", "diagnosis", "--holdout", "0.25")
    return run, measured([*command, "--epochs", "1", "-j", "1"], code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--parts", default="train:240,explain:2,explain:8,predict:24")
    parser.add_argument("--code", type=Path, default=REPO, help="checkout whose CLI runs")
    parser.add_argument("--recordings", type=int, default=16)
    parser.add_argument("--model-segments", type=int, default=240)
    args = parser.parse_args()
    workdir, code = args.workdir.resolve(), args.code.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    tag = code.name
    for part in args.parts.split(","):
        kind, size = part.split(":")
        if kind == "train":
            _, result = train(workdir, code, args.recordings, int(size), tag)
        else:
            model = workdir / f"run-{args.recordings}x{args.model_segments}-model" / "model.pt"
            if not model.is_file():
                train(workdir, REPO, args.recordings, args.model_segments, "model")
            raw = workdir / f"raw-{size}h.edf"
            if not raw.is_file():
                write_synthetic_edf(raw, 60 * float(size), seed=100)
            out = workdir / f"{kind}-{size}h-{tag}"
            shutil.rmtree(out, ignore_errors=True)
            if kind == "explain":
                command = cli("explain", model, raw, "--out", out, "--n-steps", 4)
            else:
                command = cli("predict", model, raw)  # rows on stdout (discarded)
            result = measured(command, code)
        load = os.getloadavg()
        print(json.dumps({"part": part, "code": str(code), **result, "load": load}), flush=True)


if __name__ == "__main__":
    main()
