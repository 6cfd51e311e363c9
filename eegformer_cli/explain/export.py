"""Files written by ``eegformer explain`` (all atomic), for people and for programs.

In ``OUT_DIR``:

=============================  ====================================================================
file                           content
=============================  ====================================================================
``<recording_id>.npz``         arrays of :class:`~eegformer_cli.explain.attributions.RecordingExplanation`
                               (``band_importance`` (T,), ``attention_coarse`` / ``attention_refined``
                               (L, T, T) or (L, H, T, T), ``channel_pairs`` / ``coh_pairs`` /
                               ``wpli_pairs`` (T, C, C), ``probabilities`` (K,)) plus ``bands``,
                               ``channels``, ``label_names``
``<recording_id>.json``        summary: prediction, probabilities, explained class, band importance
                               per band, the :data:`TOP_PAIRS` strongest channel pairs, attention
                               diagnostics, settings, provenance
``band_importance.csv``        ``recording_id, participant_id, target, band, value``
``attention.csv``              ``recording_id, target, pass (coarse|refined), layer, head
                               (mean|0..H-1), query_band, key_band, value``
``attention_diagnostics.csv``  ``recording_id, target, pass, layer`` and each quantity of
                               :mod:`eegformer_cli.model.diagnostics`
``channel_pairs.csv``          ``recording_id, target, band, channel_a, channel_b, value, coh, wpli``
                               (each unordered pair once: channel_a before channel_b in model order)
``class_summary.npz``          per explained class (``classes`` (K',), ``n_recordings`` (K',)), the
                               class means stacked on a first axis: ``band_importance`` (K', T), ...
``class_summary.json``         settings, bands, channels, labels, recordings, failures, and per class
                               its count, mean band importance, strongest pairs, attention diagnostics
=============================  ====================================================================

The four long-format tables (:data:`TABLES`) come from :func:`table_rows`, which the Python API
also turns into DataFrames (unrounded; the CSV files round to 6 significant digits).
And ``recordings.csv``: one row per explained recording, as ``predict`` prints it (prediction,
explained class, provenance and warnings; :func:`recording_rows`); each
``<recording_id>.json`` holds the same provenance under ``provenance``.
"""

from __future__ import annotations

import csv
import json
import zipfile
from collections.abc import Iterator, Sequence
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


def strongest_pairs(
    pairs: np.ndarray, bands: Sequence[str], channels: Sequence[str], k: int = TOP_PAIRS
) -> list[dict]:
    """The ``k`` entries of a (T, C, C) symmetric map with the largest |value| (i < j only):
    ``[{"band", "channel_a", "channel_b", "value"}, ...]``, strongest first."""
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    values = pairs[:, upper_i, upper_j]  # (T, n_pairs)
    order = np.argsort(-np.abs(values), axis=None, kind="stable")[:k]
    out = []
    for flat in order:
        band, pair = np.unravel_index(flat, values.shape)
        out.append(
            {
                "band": bands[band],
                "channel_a": channels[upper_i[pair]],
                "channel_b": channels[upper_j[pair]],
                "value": float(values[band, pair]),
            }
        )
    return out


def write_recording(
    out_dir: Path,
    explanation: RecordingExplanation,
    bands: Sequence[str],
    channels: Sequence[str],
    label_names: Sequence[str],
    settings: dict,
    provenance: dict | None = None,
) -> None:
    """``<recording_id>.npz`` and ``<recording_id>.json`` of one recording (``provenance``:
    :func:`eegformer_cli.provenance.row_fields` of its input, kept in the JSON)."""
    e = explanation
    save_npz(
        out_dir / f"{e.recording_id}.npz",
        **{field: getattr(e, field) for field in ARRAY_FIELDS},
        bands=np.array(bands),
        channels=np.array(channels),
        label_names=np.array(label_names),
    )
    write_json(
        out_dir / f"{e.recording_id}.json",
        {
            "recording_id": e.recording_id,
            "participant_id": e.participant_id,
            "n_segments": e.n_segments,
            "predicted": e.predicted,
            "target": e.target,
            "probabilities": dict(zip(label_names, map(float, e.probabilities))),
            "band_importance": dict(zip(bands, map(float, e.band_importance))),
            "strongest_channel_pairs": strongest_pairs(e.channel_pairs, bands, channels),
            "attention_diagnostics": e.attention_diagnostics,
            "settings": settings,
            "provenance": provenance,
        },
    )


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def table_rows(
    name: str,
    explanations: Sequence[RecordingExplanation],
    bands: Sequence[str],
    channels: Sequence[str],
) -> tuple[list[str], Iterator[list]]:
    """``(columns, rows)`` of the long-format table ``name`` (:data:`TABLES`), values unrounded
    (floats as computed, None for a quantity a recording lacks): what ``NAME.csv`` holds, and
    what the Python API returns as a DataFrame."""
    if name == "band_importance":
        return (
            ["recording_id", "participant_id", "target", "band", "value"],
            (
                [e.recording_id, e.participant_id or "n/a", e.target, band, float(value)]
                for e in explanations
                for band, value in zip(bands, e.band_importance)
            ),
        )
    if name == "attention":

        def attention():
            for e in explanations:
                for pass_name, maps in (
                    ("coarse", e.attention_coarse),
                    ("refined", e.attention_refined),
                ):
                    per_head = maps[:, None] if maps.ndim == 3 else maps  # (L, H', T, T)
                    heads = ["mean"] if maps.ndim == 3 else list(range(maps.shape[1]))
                    for layer, head, query, key in np.ndindex(per_head.shape):
                        yield [
                            e.recording_id,
                            e.target,
                            pass_name,
                            layer,
                            heads[head],
                            bands[query],
                            bands[key],
                            float(per_head[layer, head, query, key]),
                        ]

        return (
            ["recording_id", "target", "pass", "layer", "head", "query_band", "key_band", "value"],
            attention(),
        )
    if name == "attention_diagnostics":
        quantities = TRACE_QUANTITIES + ABLATION_QUANTITIES

        def diagnostics():
            for e in explanations:
                for pass_name, values in (e.attention_diagnostics or {}).get("passes", {}).items():
                    for layer in range(len(values["entropy"])):
                        yield [
                            e.recording_id,
                            e.target,
                            pass_name,
                            layer,
                            *(float(values[q][layer]) if q in values else None for q in quantities),
                        ]

        return ["recording_id", "target", "pass", "layer", *quantities], diagnostics()
    if name == "channel_pairs":
        upper_i, upper_j = np.triu_indices(len(channels), 1)
        return (
            ["recording_id", "target", "band", "channel_a", "channel_b", "value", "coh", "wpli"],
            (
                [
                    e.recording_id,
                    e.target,
                    band,
                    channels[i],
                    channels[j],
                    float(e.channel_pairs[b, i, j]),
                    float(e.coh_pairs[b, i, j]),
                    float(e.wpli_pairs[b, i, j]),
                ]
                for e in explanations
                for b, band in enumerate(bands)
                for i, j in zip(upper_i, upper_j)
            ),
        )
    raise ValueError(f"unknown table {name!r}")


#: The long-format tables of ``explain``, each written as ``NAME.csv`` by :func:`write_tables`.
TABLES = ("band_importance", "attention", "attention_diagnostics", "channel_pairs")


def write_tables(
    out_dir: Path,
    explanations: Sequence[RecordingExplanation],
    bands: Sequence[str],
    channels: Sequence[str],
) -> None:
    """``band_importance.csv``, ``attention.csv``, ``attention_diagnostics.csv`` and
    ``channel_pairs.csv`` (long format, :func:`table_rows`; floats to 6 significant digits, a
    missing quantity empty)."""
    for name in TABLES:
        columns, rows = table_rows(name, explanations, bands, channels)
        with atomic_open(out_dir / f"{name}.csv") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(columns)
            for row in rows:
                writer.writerow(
                    [
                        "" if value is None else _fmt(value) if isinstance(value, float) else value
                        for value in row
                    ]
                )


def write_class_summary(
    out_dir: Path,
    means: dict[str, dict],
    bands: Sequence[str],
    channels: Sequence[str],
    label_names: Sequence[str],
    settings: dict,
    recordings: Sequence[str],
    failures: dict[str, str],
    explanations: Sequence[RecordingExplanation] = (),
) -> None:
    """``class_summary.npz`` and ``class_summary.json`` from
    :func:`~eegformer_cli.explain.attributions.class_means` output (and, per class, the mean
    attention diagnostics of ``explanations``)."""
    classes = list(means)
    arrays = (
        {field: np.stack([means[c][field] for c in classes]) for field in MEAN_FIELDS}
        if classes
        else {}
    )
    save_npz(
        out_dir / "class_summary.npz",
        classes=np.array(classes, dtype=str),
        n_recordings=np.array([means[c]["n_recordings"] for c in classes], dtype=np.int64),
        bands=np.array(bands),
        channels=np.array(channels),
        label_names=np.array(label_names),
        **arrays,
    )
    write_json(
        out_dir / "class_summary.json",
        {
            "settings": settings,
            "bands": list(bands),
            "channels": list(channels),
            "label_names": list(label_names),
            "recordings": list(recordings),
            "failures": dict(failures),
            "classes": {
                c: {
                    "n_recordings": means[c]["n_recordings"],
                    "band_importance": dict(zip(bands, map(float, means[c]["band_importance"]))),
                    "strongest_channel_pairs": strongest_pairs(
                        means[c]["channel_pairs"], bands, channels
                    ),
                    "attention_diagnostics": mean_diagnostics(
                        [e.attention_diagnostics for e in explanations if e.target == c]
                    ),
                }
                for c in classes
            },
        },
    )


def recording_columns(label_names: Sequence[str]) -> list[str]:
    """The columns of ``recordings.csv`` (and of :func:`recording_rows`)."""
    return (
        ["recording_id", "participant_id", "predicted", "target"]
        + [f"prob_{name}" for name in label_names]
        + ["explained_by"]
        + list(PROVENANCE_COLUMNS)
    )


def recording_rows(
    explanations: Sequence[RecordingExplanation],
    provenance_rows: Sequence[dict],
    label_names: Sequence[str],
) -> list[dict]:
    """Per explained recording ``recording_id, participant_id, predicted, target,
    prob_<label>..., explained_by`` and the provenance columns of ``predict``
    (:data:`eegformer_cli.provenance.PROVENANCE_COLUMNS`; ``provenance_rows`` in the order of
    ``explanations``), unrounded, lists as lists: what ``recordings.csv`` holds."""
    return [
        {
            "recording_id": e.recording_id,
            "participant_id": e.participant_id,
            "predicted": e.predicted,
            "target": e.target,
            **{f"prob_{name}": float(p) for name, p in zip(label_names, e.probabilities)},
            "explained_by": e.explained_by,
            **fields,
        }
        for e, fields in zip(explanations, provenance_rows)
    ]


def write_recordings_table(
    out_dir: Path,
    explanations: Sequence[RecordingExplanation],
    provenance_rows: Sequence[dict],
    label_names: Sequence[str],
) -> None:
    """``recordings.csv``: :func:`recording_rows` (probabilities to 6 significant digits, lists
    joined as in ``predict``'s CSV)."""
    with atomic_open(out_dir / "recordings.csv") as handle:
        writer = csv.DictWriter(handle, recording_columns(label_names), lineterminator="\n")
        writer.writeheader()
        for row in recording_rows(explanations, provenance_rows, label_names):
            writer.writerow(
                flat_row(
                    {
                        key: _fmt(value) if key.startswith("prob_") else value
                        for key, value in row.items()
                    }
                )
            )


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
        return [
            str(r)
            for r in json.loads((Path(out_dir) / "class_summary.json").read_text()).get(
                "recordings", []
            )
        ]
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
        raise InputDataError(
            f"cannot read the class summary: {exc}", path=path, hint="rerun `eegformer explain`"
        ) from None
    for key in ("classes", "bands", "channels", "label_names"):
        out[key] = [str(v) for v in out[key]]
    return out
