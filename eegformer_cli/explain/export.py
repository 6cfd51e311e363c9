"""Files written by ``eegformer explain`` (all atomic), for people and for programs.

In ``OUT_DIR``:

=============================  ====================================================================
And ``recordings.csv``: one row per explained recording, as ``predict`` prints it (prediction,
explained class, provenance and warnings; :func:`write_recordings_table`); each
``<recording_id>.json`` holds the same provenance under ``provenance``.
"""

from __future__ import annotations

import csv
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from eegformer_cli.atomic import atomic_open, save_npz, write_json
from eegformer_cli.errors import InputDataError
from eegformer_cli.explain.attributions import MEAN_FIELDS, RecordingExplanation
from eegformer_cli.model.diagnostics import ABLATION_QUANTITIES, TRACE_QUANTITIES, mean_diagnostics
from eegformer_cli.provenance import PROVENANCE_COLUMNS, flat_row

#: How many channel pairs the JSON summaries list (strongest by absolute value).
TOP_PAIRS = 10
ARRAY_FIELDS = MEAN_FIELDS + ("probabilities",)


def strongest_pairs(pairs: np.ndarray, bands: Sequence[str], channels: Sequence[str],
                    k: int = TOP_PAIRS) -> list[dict]:
    """The ``k`` entries of a (T, C, C) symmetric map with the largest |value| (i < j only):
    ``[{"band", "channel_a", "channel_b", "value"}, ...]``, strongest first."""
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    values = pairs[:, upper_i, upper_j]                               # (T, n_pairs)
    order = np.argsort(-np.abs(values), axis=None, kind="stable")[:k]
    out = []
    for flat in order:
        band, pair = np.unravel_index(flat, values.shape)
        out.append({"band": bands[band], "channel_a": channels[upper_i[pair]],
                    "channel_b": channels[upper_j[pair]], "value": float(values[band, pair])})
    return out


def write_recording(out_dir: Path, explanation: RecordingExplanation, bands: Sequence[str],
                    channels: Sequence[str], label_names: Sequence[str], settings: dict,
                    provenance: dict | None = None) -> None:
    """``<recording_id>.npz`` and ``<recording_id>.json`` of one recording (``provenance``:
    :func:`eegformer_cli.provenance.row_fields` of its input, kept in the JSON)."""
    e = explanation
    save_npz(out_dir / f"{e.recording_id}.npz",
             **{field: getattr(e, field) for field in ARRAY_FIELDS},
             bands=np.array(bands), channels=np.array(channels), label_names=np.array(label_names))
    write_json(out_dir / f"{e.recording_id}.json", {
        "recording_id": e.recording_id, "participant_id": e.participant_id,
        "n_segments": e.n_segments, "predicted": e.predicted, "target": e.target,
        "probabilities": dict(zip(label_names, map(float, e.probabilities))),
        "band_importance": dict(zip(bands, map(float, e.band_importance))),
        "strongest_channel_pairs": strongest_pairs(e.channel_pairs, bands, channels),
        "attention_diagnostics": e.attention_diagnostics,
        "settings": settings,
        "provenance": provenance,
    })


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def write_tables(out_dir: Path, explanations: Sequence[RecordingExplanation],
                 bands: Sequence[str], channels: Sequence[str]) -> None:
    """``band_importance.csv``, ``attention.csv`` and ``channel_pairs.csv`` (long format)."""
    with atomic_open(out_dir / "band_importance.csv") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["recording_id", "participant_id", "target", "band", "value"])
        for e in explanations:
            for band, value in zip(bands, e.band_importance):
                writer.writerow([e.recording_id, e.participant_id or "n/a", e.target, band,
                                 _fmt(value)])
    with atomic_open(out_dir / "attention.csv") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["recording_id", "target", "pass", "layer", "head", "query_band",
                         "key_band", "value"])
        for e in explanations:
            for name, maps in (("coarse", e.attention_coarse), ("refined", e.attention_refined)):
                per_head = maps[:, None] if maps.ndim == 3 else maps          # (L, H', T, T)
                heads = ["mean"] if maps.ndim == 3 else list(range(maps.shape[1]))
                for layer, head, query, key in np.ndindex(per_head.shape):
                    writer.writerow([e.recording_id, e.target, name, layer, heads[head],
                                     bands[query], bands[key],
                                     _fmt(per_head[layer, head, query, key])])
    quantities = TRACE_QUANTITIES + ABLATION_QUANTITIES
    with atomic_open(out_dir / "attention_diagnostics.csv") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["recording_id", "target", "pass", "layer", *quantities])
        for e in explanations:
            for name, values in (e.attention_diagnostics or {}).get("passes", {}).items():
                for layer in range(len(values["entropy"])):
                    writer.writerow([e.recording_id, e.target, name, layer,
                                     *(_fmt(values[q][layer]) if q in values else ""
                                       for q in quantities)])
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    with atomic_open(out_dir / "channel_pairs.csv") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["recording_id", "target", "band", "channel_a", "channel_b", "value",
                         "coh", "wpli"])
        for e in explanations:
            for band_index, band in enumerate(bands):
                for i, j in zip(upper_i, upper_j):
                    writer.writerow([e.recording_id, e.target, band, channels[i], channels[j],
                                     _fmt(e.channel_pairs[band_index, i, j]),
                                     _fmt(e.coh_pairs[band_index, i, j]),
                                     _fmt(e.wpli_pairs[band_index, i, j])])


def write_class_summary(out_dir: Path, means: dict[str, dict], bands: Sequence[str],
                        channels: Sequence[str], label_names: Sequence[str], settings: dict,
                        recordings: Sequence[str], failures: dict[str, str],
                        explanations: Sequence[RecordingExplanation] = ()) -> None:
    """``class_summary.npz`` and ``class_summary.json`` from
    :func:`~eegformer_cli.explain.attributions.class_means` output (and, per class, the mean
    attention diagnostics of ``explanations``)."""
    classes = list(means)
    arrays = {field: np.stack([means[c][field] for c in classes]) for field in MEAN_FIELDS} \
        if classes else {}
    save_npz(out_dir / "class_summary.npz", classes=np.array(classes, dtype=str),
             n_recordings=np.array([means[c]["n_recordings"] for c in classes], dtype=np.int64),
             bands=np.array(bands), channels=np.array(channels),
             label_names=np.array(label_names), **arrays)
    write_json(out_dir / "class_summary.json", {
        "settings": settings, "bands": list(bands), "channels": list(channels),
        "label_names": list(label_names), "recordings": list(recordings),
        "failures": dict(failures),
        "classes": {c: {"n_recordings": means[c]["n_recordings"],
                        "band_importance": dict(zip(bands, map(float, means[c]["band_importance"]))),
                        "strongest_channel_pairs": strongest_pairs(means[c]["channel_pairs"],
                                                                   bands, channels),
                        "attention_diagnostics": mean_diagnostics(
                            [e.attention_diagnostics for e in explanations if e.target == c])}
                    for c in classes},
    })


def write_recordings_table(out_dir: Path, explanations: Sequence[RecordingExplanation],
                           provenance_rows: Sequence[dict], label_names: Sequence[str]) -> None:
    """``recordings.csv``: per explained recording ``recording_id, participant_id, predicted,
    target, prob_<label>...`` and the provenance columns of ``predict``
    (:data:`eegformer_cli.provenance.PROVENANCE_COLUMNS`; ``provenance_rows`` in the order of
    ``explanations``)."""
    columns = (["recording_id", "participant_id", "predicted", "target"]
               + [f"prob_{name}" for name in label_names] + list(PROVENANCE_COLUMNS))
    with atomic_open(out_dir / "recordings.csv") as handle:
        writer = csv.DictWriter(handle, columns, lineterminator="\n")
        writer.writeheader()
        for e, fields in zip(explanations, provenance_rows):
            writer.writerow(flat_row({
                "recording_id": e.recording_id, "participant_id": e.participant_id,
                "predicted": e.predicted, "target": e.target,
                **{f"prob_{name}": _fmt(p) for name, p in zip(label_names, e.probabilities)},
                **fields}))


def read_recordings_table(folder: str | Path) -> list[dict] | None:
    """The rows of ``recordings.csv`` (strings), or None when the folder has none (written
    before explain kept it)."""
    path = Path(folder) / "recordings.csv"
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def earlier_recordings(out_dir: Path) -> list[str]:
    """The recording ids an earlier ``explain`` into ``out_dir`` wrote files for (from its
    ``class_summary.json``; empty when there is none or it cannot be read)."""
    try:
        return [str(r) for r in json.loads((Path(out_dir) / "class_summary.json").read_text())
                .get("recordings", [])]
    except (OSError, ValueError, AttributeError):
        return []


def remove_recordings(out_dir: Path, recording_ids: Sequence[str]) -> int:
    """Delete ``<recording_id>.npz`` and ``.json`` of each id (e.g. an earlier run's
    recordings that this run did not explain, so the folder holds one run's files only);
    returns how many files were removed."""
    removed = 0
    for recording_id in recording_ids:
        for suffix in (".npz", ".json"):
            path = Path(out_dir) / f"{recording_id}{suffix}"
            if path.is_file():
                path.unlink()
                removed += 1
    return removed


def load_class_summary(folder: str | Path) -> dict:
    """Read ``class_summary.npz`` back: ``{"classes": [...], "bands": [...], "channels": [...],
    "n_recordings": (K',), <field>: (K', ...) arrays}`` (what the report draws)."""
    path = Path(folder) / "class_summary.npz"
    try:
        with np.load(path) as data:
            out = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # truncated or damaged
        raise InputDataError(f"cannot read the class summary: {exc}", path=path,
                             hint="rerun `eegformer explain`") from None
    for key in ("classes", "bands", "channels", "label_names"):
        out[key] = [str(v) for v in out[key]]
    return out
