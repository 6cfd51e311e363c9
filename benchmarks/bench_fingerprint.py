"""Connectivity fingerprints: is a changed copy of a training recording recognised, and is
nothing else taken for one? (``predict``'s ``in_training_data`` check, provenance.py).

On a ``preprocess`` output of ../shared/data/msu-schizophrenia (every recording as the training
set, centred on their mean connectome as a model file stores it): the closest two distinct
recordings; then 12 recordings (seed 0) changed six ways (cropped, band-passed, notch-filtered,
resampled, alone and combined), preprocessed with the folder's own settings, and each copy's
similarity to its original and to the closest other recording. On eegmat-subset (two
recordings per person, rest and mental arithmetic): one person's two recordings against two
people's. The threshold, provenance.FINGERPRINT_MATCH, must lie between.

Usage:
  python benchmarks/bench_fingerprint.py --out /tmp/bench-fp [--msu PREP] [--eegmat PREP]
Prints one JSON object (also written to OUT/bench_fingerprint.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from bench_accuracy import preprocessed  # scripts run from this folder
from machine import machine

from eegformer_cli.preprocess import PreprocessSettings
from eegformer_cli.preprocess.output import load_connectome, read_manifest
from eegformer_cli.preprocess.recording import preprocess_raw
from eegformer_cli.provenance import FINGERPRINT_MATCH, connectivity_vector
from eegformer_cli.recordings.reading import read_recording

CHANGES = {
    "first 40 s": lambda raw: raw.crop(0, 40),
    "last 30 s": lambda raw: raw.crop(raw.times[-1] - 30, None),
    "first 20 s": lambda raw: raw.crop(0, 20),
    "band-pass 2-30 Hz": lambda raw: raw.filter(2, 30, verbose="error"),
    "resampled to 100 Hz": lambda raw: raw.resample(100, verbose="error"),
    "10-50 s, notch 50 Hz, 1-40 Hz": lambda raw: (
        raw.crop(10, 50).notch_filter(50, verbose="error").filter(1, 40, verbose="error")
    ),
    "15-45 s, 2-30 Hz": lambda raw: raw.crop(15, 45).filter(2, 30, verbose="error"),
}


def vectors(prep: Path) -> tuple[list[dict], np.ndarray]:
    """The ok manifest rows of ``prep`` and their connectivity vectors (n, n_features)."""
    rows = [row for row in read_manifest(prep) if row["status"] == "ok"]
    found = []
    for row in rows:
        connectome = load_connectome(prep / row["connectome"])
        found.append(connectivity_vector(connectome.coh, connectome.wpli))
    return rows, np.array(found)


def unit(deviations: np.ndarray) -> np.ndarray:
    return deviations / np.linalg.norm(deviations, axis=-1, keepdims=True)


def msu(prep: Path) -> dict:
    rows, features = vectors(prep)
    centre = features.mean(axis=0)
    prints = unit(features - centre)
    similarity = prints @ prints.T
    np.fill_diagonal(similarity, -np.inf)
    settings = PreprocessSettings.from_dict(
        json.loads((prep / "preprocess.json").read_text())["settings"]
    )
    chosen = np.random.default_rng(0).choice(len(rows), 12, replace=False)
    copies = {}
    for name, change in CHANGES.items():
        own, other = [], []
        for index in chosen:
            raw = change(read_recording(Path(rows[index]["source_file"]), preload=True))
            copy = preprocess_raw(raw, settings)
            matches = prints @ unit(connectivity_vector(copy.coh, copy.wpli) - centre)
            own.append(float(matches[index]))
            other.append(float(np.max(np.delete(matches, index))))
        copies[name] = {
            "own_min": min(own),
            "own_median": float(np.median(own)),
            "closest_other_max": max(other),
            "recognised": float(np.mean(np.array(own) >= FINGERPRINT_MATCH)),
        }
    return {
        "n_recordings": len(rows),
        "distinct_max": float(similarity.max()),
        "distinct_closest_median": float(np.median(similarity.max(axis=1))),
        "copies": copies,
    }


def eegmat(prep: Path) -> dict:
    rows, features = vectors(prep)
    prints = unit(features - features.mean(axis=0))
    similarity = prints @ prints.T
    people = [row["participant_id"] for row in rows]
    pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))]
    same = sorted(float(similarity[i, j]) for i, j in pairs if people[i] == people[j])
    different = [float(similarity[i, j]) for i, j in pairs if people[i] != people[j]]
    return {"same_person": same, "different_people_max": max(different)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the data and JSON")
    parser.add_argument("--msu", type=Path, help="msu preprocess output (made if absent)")
    parser.add_argument("--eegmat", type=Path, help="eegmat preprocess output (made if absent)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        "machine": machine(),
        "threshold": FINGERPRINT_MATCH,
        "msu": msu(preprocessed("msu", args.msu, args.out)),
        "eegmat": eegmat(preprocessed("eegmat", args.eegmat, args.out)),
    }
    (args.out / "bench_fingerprint.json").write_text(json.dumps(results, indent=2))
    worst = min(copy["own_min"] for copy in results["msu"]["copies"].values())
    print(
        f"copies >= {worst:.2f}, distinct <= {results['msu']['distinct_max']:.2f} "
        f"(threshold {FINGERPRINT_MATCH})",
        file=sys.stderr,
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
