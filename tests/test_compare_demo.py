"""``benchmarks/compare_demo.py``: two demo folders compare equal when only timings, versions,
modification times and folder paths differ, and a changed value is found."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location(
        "compare_demo", REPO / "benchmarks" / "compare_demo.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _demo(folder: Path, seconds: float, value: float) -> Path:
    (folder / "run").mkdir(parents=True)
    metrics = {"seconds": seconds, "versions": {"torch": str(seconds)}, "auroc": value}
    metrics["data_dir"] = str(folder / "preprocessed")
    (folder / "run" / "metrics.json").write_text(json.dumps(metrics))
    record = json.dumps({"source_mtime_ns": int(seconds), "n_segments": 4})
    np.savez(folder / "a.npz", x=np.arange(3.0) * value, record_json=np.array(record))
    (folder / "predictions.csv").write_text(f"id,p\nsub-01,{value}\n")
    return folder


def test_only_timings_versions_mtimes_and_paths_are_set_aside(tmp_path):
    compare = _script().compare
    before, after = _demo(tmp_path / "b", 1.0, 0.5), _demo(tmp_path / "a", 2.0, 0.5)
    assert compare(before, after) == {"files": 3, "differences": {}}
    changed = _demo(tmp_path / "c", 1.0, 0.25)
    differences = compare(before, changed)["differences"]
    assert sorted(differences) == ["a.npz", "predictions.csv", "run/metrics.json"]
    assert "auroc" in differences["run/metrics.json"]
