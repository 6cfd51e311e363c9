"""Compare two ``eegformer demo`` output folders (issue 47, point 6: the moves change no output).

Usage::

    python benchmarks/compare_demo.py BEFORE AFTER [--src BEFORE_SRC AFTER_SRC]

Every file of either folder is compared with its namesake in the other, by kind: ``.npz``
(every array, exactly), ``.json`` / ``.jsonl`` (the parsed values), ``.pt`` (a model file:
``torch.load(weights_only=True)``, every tensor exactly and every other value), ``.csv`` /
``.tsv`` / other text (the lines), and ``report.html`` (its text with the embedded images, whose
bytes carry the same figures). Set aside before comparing, and only these: the run's timings
(keys in :data:`TIMING_KEYS`), the package versions (:data:`VERSION_KEYS`), the sources'
modification times (:data:`MTIME_KEYS`), dates and times
in the report's text, and folder paths (each folder's own path, and with ``--src`` each
checkout's path, become a placeholder). Prints one line per file that differs, with the first
difference, and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

#: Keys whose values are measured times: set aside.
TIMING_KEYS = frozenset({"seconds", "cv_seconds"})
#: A source file's modification time, recorded in each connectome's ``record_json`` (the
#: checkout's copy of ``sample_data/`` has its own): set aside.
MTIME_KEYS = frozenset({"source_mtime_ns"})
#: Keys that record the installed packages and the Python: set aside.
VERSION_KEYS = frozenset({"versions", "python"})
#: Dates and times in the report's text ("2026-11-27 21:00:16", "21:00 UTC", ...).
_WHEN = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?|\d{2}:\d{2}(:\d{2})?")


class Paths:
    """Replaces each folder's path with a placeholder in every string."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self.pairs = sorted(pairs, key=lambda pair: -len(pair[0]))

    def __call__(self, text: str) -> str:
        for path, placeholder in self.pairs:
            text = text.replace(path, placeholder)
        return text


def _plain(value, paths: Paths):
    """JSON-like value with timings and versions dropped and paths replaced."""
    if isinstance(value, dict):
        return {
            paths(key) if isinstance(key, str) else key: _plain(item, paths)
            for key, item in value.items()
            if key not in TIMING_KEYS | VERSION_KEYS | MTIME_KEYS
        }
    if isinstance(value, (list, tuple)):
        return [_plain(item, paths) for item in value]
    if isinstance(value, str):
        return paths(value)
    if isinstance(value, Path):
        return paths(str(value))
    return value


def first_difference(a, b, where: str = "") -> str | None:
    """Where two plain values (dicts, lists, arrays, scalars) first differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{where}/{key}: only in {'after' if key not in a else 'before'}"
            found = first_difference(a[key], b[key], f"{where}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items before, {len(b)} after"
        for index, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{index}]")
            if found:
                return found
        return None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: {a.dtype}{a.shape} before, {b.dtype}{b.shape} after"
        if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            if a.dtype.kind in "fc":
                return f"{where}: max |difference| {np.nanmax(np.abs(a - b)):.3g}"
            return f"{where}: the values differ"
        return None
    same = (a == b) or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
    return None if same else f"{where}: {a!r} before, {b!r} after"


def _load(path: Path, paths: Paths):
    suffix = path.suffix
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
        for key in [key for key in arrays if key.endswith("_json")]:  # a JSON text in an array
            arrays[key] = _plain(json.loads(str(arrays[key])), paths)
        return arrays
    if suffix == ".json":
        return _plain(json.loads(path.read_text(encoding="utf-8")), paths)
    if suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        return [_plain(json.loads(line), paths) for line in lines if line.strip()]
    if suffix == ".pt":
        import torch

        bundle = torch.load(path, map_location="cpu", weights_only=True)
        return _tensors_as_arrays(_plain(bundle, paths))
    text = paths(path.read_text(encoding="utf-8", errors="replace"))
    if suffix == ".html":
        text = _WHEN.sub("<when>", text)
    return text.splitlines()


def _tensors_as_arrays(value):
    if isinstance(value, dict):
        return {key: _tensors_as_arrays(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tensors_as_arrays(item) for item in value]
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value


def compare(before: Path, after: Path, sources: tuple[str, str] | None = None) -> dict:
    """``{relative path: first difference}`` for every file that differs (or is only in one)."""
    names = {
        p.relative_to(root).as_posix()
        for root in (before, after)
        for p in root.rglob("*")
        if p.is_file()
    }
    path_pairs = [(str(before), "<OUT>"), (str(after), "<OUT>")]
    path_pairs += [(str(before.resolve()), "<OUT>"), (str(after.resolve()), "<OUT>")]
    if sources:
        path_pairs += [(sources[0], "<SRC>"), (sources[1], "<SRC>")]
    paths_before = Paths([pair for pair in path_pairs if pair[0] != str(after)])
    paths_after = Paths([pair for pair in path_pairs if pair[0] != str(before)])
    differences = {}
    for name in sorted(names):
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            differences[name] = f"only in {'after' if not a.exists() else 'before'}"
            continue
        found = first_difference(_load(a, paths_before), _load(b, paths_after))
        if found:
            differences[name] = found
    return {"files": len(names), "differences": differences}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--src", nargs=2, metavar=("BEFORE_SRC", "AFTER_SRC"))
    args = parser.parse_args(argv)
    result = compare(args.before, args.after, tuple(args.src) if args.src else None)
    for name, difference in result["differences"].items():
        shown = difference if len(difference) <= 300 else difference[:297] + "..."
        print(f"differs: {name}: {shown}")
    same = result["files"] - len(result["differences"])
    print(f"{same} of {result['files']} files equal")
    return 1 if result["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
