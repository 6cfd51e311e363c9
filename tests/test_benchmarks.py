"""``benchmarks/bench_gpu.py --quick`` on the CPU: the GPU benchmark's table, as CI can run it
(its figures at these sizes mean nothing; what is checked is that every row is measured)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def test_gpu_benchmark_prints_its_table_on_the_cpu(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_gpu", REPO / "benchmarks" / "bench_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    threads = torch.get_num_threads()
    try:
        bench.main(["--quick", "--device", "cpu", "--json", str(tmp_path / "gpu.json")])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    figures = json.loads((tmp_path / "gpu.json").read_text())
    rows = {row["quantity"]: row["value"] for row in figures["rows"]}
    for name in (
        "paper-size step, float32",
        "paper-size step, bfloat16",
        "paper-size step, captum / one-pass",
        "default XAI / coarse-only step",
        "paper XAI / coarse-only step",
        "paper-size step peak memory, bfloat16",
        "predict throughput, bfloat16",
        "full CV wall time (synthetic, --quick)",
    ):
        assert rows[name] > 0 and math.isfinite(rows[name])
        assert name in printed
    assert math.isclose(
        rows["paper-size step, float32 / bfloat16"],
        rows["paper-size step, float32"] / rows["paper-size step, bfloat16"],
    )
    assert figures["quick"] is True and printed.startswith("device: ")
