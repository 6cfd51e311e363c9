"""Compare two ``eegformer demo`` output folders (a change that should change no output).

Usage::

    python benchmarks/compare_demo.py BEFORE AFTER [--src BEFORE_SRC AFTER_SRC] [--renames]

Every file of either folder is compared with its namesake in the other, by kind: ``.npz``
(every array, exactly), ``.json`` / ``.jsonl`` (the parsed values), ``.pt`` (a model file:
``torch.load(weights_only=True)``, every tensor exactly and every other value), ``.csv`` /
``.tsv`` / other text (the lines), and ``report.html`` (its text with the embedded images, whose
bytes carry the same figures). Set aside before comparing, and only these: the run's timings
(keys in :data:`TIMING_KEYS`), the package versions (:data:`VERSION_KEYS`), the sources'
modification times (:data:`MTIME_KEYS`), dates and times
in the report's text, and folder paths (each folder's own path, and with ``--src`` each
checkout's path, become a placeholder).

With ``--renames``, BEFORE's keys of earlier versions are read under their names of today
first, with the package's own maps (:func:`rename_maps`), each where its reader applies it:
the settings in a ``train_config`` (``config.json``, model files), the keep keys in a
``linear_path`` (fold records, ``metrics.json``) and its ``val_losses``, and a model file's own
keys; in JSON, JSONL, ``.pt`` and an ``.npz``'s JSON texts, and in the header of a ``.csv`` /
``.tsv`` (the names that mean one thing in every map). A file equal only so is counted apart.

Prints, per file that differs, every difference (the first :data:`SHOWN` of them, then how many
more), and exits 1 when any file differs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the package's rename maps: this checkout's

#: Keys whose values are measured times: set aside.
TIMING_KEYS = frozenset({"seconds", "cv_seconds"})
#: A source file's modification time, recorded in each connectome's ``record_json`` (the
#: checkout's copy of ``sample_data/`` has its own): set aside.
MTIME_KEYS = frozenset({"source_mtime_ns"})
#: Keys that record the installed packages and the Python: set aside.
VERSION_KEYS = frozenset({"versions", "python"})
#: The differences printed per file.
SHOWN = 20
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


def differences(a, b, where: str = "") -> list[str]:
    """Every place two plain values (dicts, lists, arrays, scalars) differ: ``[]`` when equal.
    Lists of different lengths and arrays of different shapes are one difference each."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                found.append(f"{where}/{key}: only in {'after' if key not in a else 'before'}")
            else:
                found += differences(a[key], b[key], f"{where}/{key}")
        return found
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items before, {len(b)} after"]
        found = []
        for index, (x, y) in enumerate(zip(a, b)):
            found += differences(x, y, f"{where}[{index}]")
        return found
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return [f"{where}: {a.dtype}{a.shape} before, {b.dtype}{b.shape} after"]
        if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            if a.dtype.kind in "fc":
                return [f"{where}: max |difference| {np.nanmax(np.abs(a - b)):.3g}"]
            return [f"{where}: the values differ"]
        return []
    same = (a == b) or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
    return [] if same else [f"{where}: {a!r} before, {b!r} after"]


def rename_maps() -> dict[str, dict[str, str]]:
    """The package's maps from keys of earlier versions to today's, by where each applies:
    ``train_config`` (a dict under that key), ``linear_path`` (a dict under that key),
    ``val_losses`` (a dict under that key inside a ``linear_path``), ``model_file`` (a ``.pt``
    file's own keys)."""
    from eegformer_cli.evaluation.run_metrics import RENAMED_LINEAR_PATH_KEYS
    from eegformer_cli.training.config import RENAMED_SETTINGS
    from eegformer_cli.training.fold_record import RENAMED_KEEP_KEYS, RENAMED_VAL_LOSSES
    from eegformer_cli.training.model_file import RENAMED_BUNDLE_KEYS

    return {
        "train_config": dict(RENAMED_SETTINGS),
        "linear_path": {**RENAMED_KEEP_KEYS, **RENAMED_LINEAR_PATH_KEYS},
        "val_losses": dict(RENAMED_VAL_LOSSES),
        "model_file": dict(RENAMED_BUNDLE_KEYS),
    }


def column_renames(maps: dict[str, dict[str, str]]) -> dict[str, str]:
    """The earlier names a table's column is renamed from: those with one name of today in
    every map (``residual`` is two settings' earlier name, and is left alone); not
    ``val_losses``' (``linear`` means other things elsewhere)."""
    today: dict[str, set[str]] = {}
    for where, names in maps.items():
        if where != "val_losses":
            for earlier, name in names.items():
                today.setdefault(earlier, set()).add(name)
    return {earlier: names.pop() for earlier, names in today.items() if len(names) == 1}


def _rename_keys(values: dict, names: dict[str, str]) -> dict:
    """``values`` with ``names``' earlier keys under today's (not where today's is there too:
    that stays a difference)."""
    return {
        key if key not in names or names[key] in values else names[key]: value
        for key, value in values.items()
    }


def renamed(value, maps: dict[str, dict[str, str]], inside: tuple[str, ...] = ()):
    """A plain value with the keys of earlier versions under today's names (:func:`rename_maps`);
    ``inside``: the keys above it."""
    if isinstance(value, list):
        return [renamed(item, maps, inside) for item in value]
    if not isinstance(value, dict):
        return value
    where = inside[-1] if inside else None
    if where == "train_config":
        value = _rename_keys(value, maps["train_config"])
    elif where == "linear_path":
        value = _rename_keys(value, maps["linear_path"])
    elif where == "val_losses" and "linear_path" in inside[:-1]:
        value = _rename_keys(value, maps["val_losses"])
    return {key: renamed(item, maps, (*inside, str(key))) for key, item in value.items()}


def _load(path: Path, paths: Paths, maps: dict[str, dict[str, str]] | None = None):
    """The file's comparable value; ``maps``: :func:`rename_maps`, applied to it (None: as
    written)."""
    suffix = path.suffix

    def current(value):
        return value if maps is None else renamed(value, maps)

    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
        for key in [key for key in arrays if key.endswith("_json")]:  # a JSON text in an array
            arrays[key] = current(_plain(json.loads(str(arrays[key])), paths))
        return arrays
    if suffix == ".json":
        return current(_plain(json.loads(path.read_text(encoding="utf-8")), paths))
    if suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        return [current(_plain(json.loads(line), paths)) for line in lines if line.strip()]
    if suffix == ".pt":
        import torch

        bundle = _plain(torch.load(path, map_location="cpu", weights_only=True), paths)
        if maps is not None and isinstance(bundle, dict):
            bundle = current(_rename_keys(bundle, maps["model_file"]))
        return _tensors_as_arrays(bundle)
    text = paths(path.read_text(encoding="utf-8", errors="replace"))
    if suffix == ".html":
        text = _WHEN.sub("<when>", text)
    lines = text.splitlines()
    if maps is not None and suffix in (".csv", ".tsv") and lines:
        lines[0] = _renamed_header(lines[0], "\t" if suffix == ".tsv" else ",", maps)
    return lines


def _renamed_header(header: str, separator: str, maps: dict[str, dict[str, str]]) -> str:
    names = column_renames(maps)
    columns = header.split(separator)
    return separator.join(
        names[c] if c in names and names[c] not in columns else c for c in columns
    )


def _tensors_as_arrays(value):
    if isinstance(value, dict):
        return {key: _tensors_as_arrays(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tensors_as_arrays(item) for item in value]
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value


def compare(
    before: Path, after: Path, sources: tuple[str, str] | None = None, renames: bool = False
) -> dict:
    """``files``: how many; ``differences``: ``{relative path: every difference}`` for each file
    that differs (or is only in one); ``renamed``: the files equal only once BEFORE's earlier
    keys are read under today's names (``renames``: else none; their differences as written
    are not in ``differences``)."""
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
    maps = rename_maps() if renames else None
    found, equal_renamed = {}, []
    for name in sorted(names):
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            found[name] = [f"only in {'after' if not a.exists() else 'before'}"]
            continue
        after_value = _load(b, paths_after)
        listed = differences(_load(a, paths_before), after_value)
        if listed and maps is not None:
            listed_renamed = differences(_load(a, paths_before, maps), after_value)
            if not listed_renamed:
                equal_renamed.append(name)
            listed = listed_renamed
        if listed:
            found[name] = listed
    return {"files": len(names), "differences": found, "renamed": equal_renamed}


def _shown(difference: str) -> str:
    return difference if len(difference) <= 300 else difference[:297] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--src", nargs=2, metavar=("BEFORE_SRC", "AFTER_SRC"))
    parser.add_argument(
        "--renames",
        action="store_true",
        help="read BEFORE's keys of earlier versions under today's names (the package's maps)",
    )
    args = parser.parse_args(argv)
    sources = tuple(args.src) if args.src else None
    result = compare(args.before, args.after, sources, renames=args.renames)
    for name, listed in result["differences"].items():
        print(f"differs: {name}: {len(listed)} difference{'s' if len(listed) > 1 else ''}")
        for difference in listed[:SHOWN]:
            print(f"  {_shown(difference)}")
        if len(listed) > SHOWN:
            print(f"  ... and {len(listed) - SHOWN} more")
    for name in result["renamed"]:
        print(f"equal after renaming: {name}")
    same = result["files"] - len(result["differences"]) - len(result["renamed"])
    line = f"{same} of {result['files']} files equal"
    if args.renames:
        line += (
            f", {len(result['renamed'])} more equal after renaming earlier keys"
            f" ({same + len(result['renamed'])} of {result['files']})"
        )
    print(line)
    return 1 if result["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
