"""``benchmarks/compare_demo.py``: two demo folders compare equal when only timings, versions,
modification times and folder paths differ, a changed value is found, every difference of a
file is reported, and ``--renames`` reads an earlier version's keys under today's names."""

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
    assert compare(before, after) == {"files": 3, "differences": {}, "renamed": []}
    changed = _demo(tmp_path / "c", 1.0, 0.25)
    differences = compare(before, changed)["differences"]
    assert sorted(differences) == ["a.npz", "predictions.csv", "run/metrics.json"]
    assert [d for d in differences["run/metrics.json"] if "auroc" in d] == [
        "/auroc: 0.5 before, 0.25 after"
    ]


def _run(folder: Path, linear_path: dict, config: dict, auroc: float = 0.5) -> Path:
    (folder / "run" / "folds").mkdir(parents=True)
    metrics = {"auroc": auroc, "linear_path": {"n_folds": 3, **linear_path}}
    (folder / "run" / "metrics.json").write_text(json.dumps(metrics))
    (folder / "run" / "config.json").write_text(json.dumps({"train_config": config}))
    (folder / "run" / "oof.tsv").write_text("id\tresidual_kept\nsub-01\t1\n")
    return folder


def test_a_renamed_key_differs_as_written_and_is_equal_under_renames(tmp_path, capsys):
    script = _script()
    before = _run(
        tmp_path / "b",
        {"residual_kept": 2, "paths": {"linear": 1.0}},
        {"residual": "auto", "residual_margin": 0.0, "linear": 1},
    )
    after = _run(
        tmp_path / "a",
        {"transformer_kept": 2, "paths": {"linear": 1.0}},
        {"transformer_path": "auto", "keep_margin": 0.0, "linear": 1},
    )
    (after / "run" / "oof.tsv").write_text("id\ttransformer_kept\nsub-01\t1\n")
    plain = script.compare(before, after)
    assert sorted(plain["differences"]) == ["run/config.json", "run/metrics.json", "run/oof.tsv"]
    assert "/linear_path/residual_kept: only in before" in plain["differences"]["run/metrics.json"]
    assert script.compare(before, after, renames=True) == {
        "files": 3,
        "differences": {},
        "renamed": ["run/config.json", "run/metrics.json", "run/oof.tsv"],
    }
    assert script.main([str(before), str(after), "--renames"]) == 0
    assert "0 of 3 files equal, 3 more equal after renaming earlier keys (3 of 3)" in (
        capsys.readouterr().out
    )
    # a renamed key with another value still differs, under its name of today
    changed = _run(tmp_path / "c", {"transformer_kept": 1}, {"transformer_path": "auto"})
    found = script.compare(before, changed, renames=True)["differences"]
    assert "/linear_path/transformer_kept: 2 before, 1 after" in found["run/metrics.json"]


def test_every_difference_after_the_first_is_reported(tmp_path, capsys):
    script = _script()
    before = _run(tmp_path / "b", {"transformer_kept": 2}, {"transformer_path": "auto"}, 0.5)
    after = _run(tmp_path / "a", {"transformer_kept": 1}, {"transformer_path": "on"}, 0.25)
    found = script.compare(before, after)["differences"]
    assert found["run/metrics.json"] == [
        "/auroc: 0.5 before, 0.25 after",
        "/linear_path/transformer_kept: 2 before, 1 after",
    ]
    many = script.differences(list(range(30)), [-1] * 30)
    assert len(many) == 30 and many[-1] == "[29]: 29 before, -1 after"
    (before / "run" / "many.json").write_text(json.dumps(list(range(30))))
    (after / "run" / "many.json").write_text(json.dumps([-1] * 30))
    assert script.main([str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "differs: run/many.json: 30 differences" in out
    assert "  [19]: 19 before, -1 after" in out and "[20]:" not in out
    assert "  ... and 10 more" in out
    assert "/linear_path/transformer_kept: 2 before, 1 after" in out
