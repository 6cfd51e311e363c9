"""Files written by ``eegformer explain`` (all atomic), for people and for programs.

In ``OUT_DIR``:

=============================  ====================================================================
file                           content
=============================  ====================================================================
``<recording_id>.npz``         arrays of :class:`~eegformer_cli.explain.attributions.RecordingExplanation`
                               (:data:`~eegformer_cli.explain.attributions.RECORDING_ARRAYS`:
                               ``band_importance`` (T,), ``attention_coarse`` /
                               ``attention_refined`` (L, T, T) or (L, H, T, T), ``channel_pairs``
                               / ``coh_pairs`` / ``wpli_pairs`` (T, C, C), ``probabilities`` (K,),
                               the contrast's ``contrast_pairs`` / ``contrast_coh_pairs`` /
                               ``contrast_wpli_pairs`` (T, C, C), the connectivity ``mean_coh`` /
                               ``mean_wpli`` (T, C, C)) plus ``bands``, ``channels``,
                               ``label_names``, ``contrast_classes``
``<recording_id>.json``        summary: prediction, probabilities, explained class, band
                               importance per band and its ``top_band``, the :data:`TOP_PAIRS`
                               strongest channel pairs (each with its artefact ``caution``), the
                               contrast's strongest pairs, attention diagnostics, settings,
                               provenance
``band_importance.csv``        ``recording_id, participant_id, target, band, value``
``attention.csv``              ``recording_id, target, pass (coarse|refined), layer, head
                               (mean|0..H-1), query_band, key_band, value`` (a model with kept
                               interactions has one more token, ``interactions``, after the bands)
``attention_diagnostics.csv``  ``recording_id, target, pass, layer`` and each quantity of
                               :mod:`eegformer_cli.model.diagnostics`
``channel_pairs.csv``          ``recording_id, target, band, channel_a, channel_b, value, coh, wpli``
                               (each unordered pair once: channel_a before channel_b in model order)
``interactions.csv``           the kept interactions (:mod:`~eegformer_cli.explain.interactions`):
                               ``recording_id, target, interaction, side_a, side_b,
                               class_difference, gate, value, contrast_value`` (no rows for a
                               model that keeps none)
``contrast_pairs.csv``         the class contrast (:func:`contrast_rows`), strongest first:
                               ``class_a, class_b, grouped_by, band, channel_a, channel_b, value,
                               coh, wpli, coh_difference, wpli_difference, caution``
``class_summary.npz``          per explained class (``classes`` (K',), ``n_recordings`` (K',)),
                               the class means stacked on a first axis: ``band_importance``
                               (K', T), ...; the contrast's maps (:data:`CONTRAST_ARRAYS`)
``class_summary.json``         settings (with the artefact rule, ``artefact_caution``), bands,
                               channels, labels, recordings, failures, per class its count, mean
                               band importance, top band, strongest pairs, attention diagnostics,
                               and the ``contrast`` (classes, grouping, counts, per band, top band,
                               strongest pairs)
=============================  ====================================================================

The five long-format tables (:data:`TABLES`) come from :func:`table_rows`, which the Python API
also turns into DataFrames (unrounded; the CSV files round to 6 significant digits), and so does
the contrast's table (:func:`contrast_rows`).
And ``recordings.csv``: one row per explained recording, as ``predict`` prints it (prediction,
explained class, the true class where the input gives it, provenance and warnings;
:func:`recording_rows`); each ``<recording_id>.json`` holds the same provenance under
``provenance``.
"""

from __future__ import annotations

import csv
import json
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from eegformer_cli.atomic import atomic_open, save_npz, write_json
from eegformer_cli.connectivity.artefacts import pair_caution
from eegformer_cli.errors import InputDataError
from eegformer_cli.explain import interactions
from eegformer_cli.explain.attributions import (
    CONTRAST_FIELDS,
    GROUPED_BY,
    MEAN_FIELDS,
    RECORDING_ARRAYS,
    RecordingExplanation,
    pair_band_sums,
    token_names,
    top_band,
)
from eegformer_cli.model.diagnostics import ABLATION_QUANTITIES, TRACE_QUANTITIES, mean_diagnostics
from eegformer_cli.provenance import PROVENANCE_COLUMNS, flat_row

#: How many channel pairs the JSON summaries list (strongest by absolute value).
TOP_PAIRS = 10
#: The contrast's arrays in ``class_summary.npz``: the maps of
#: :data:`~eegformer_cli.explain.attributions.CONTRAST_FIELDS` (T, C, C), ``contrast_band``
#: (T,), ``contrast_classes`` (2,) and ``contrast_n_recordings`` (2,).
CONTRAST_ARRAYS = (*CONTRAST_FIELDS, "contrast_band")


def strongest_pairs(
    pairs: np.ndarray,
    bands: Sequence[str],
    channels: Sequence[str],
    k: int = TOP_PAIRS,
    cautions: dict | None = None,
) -> list[dict]:
    """The ``k`` entries of a (T, C, C) symmetric map with the largest |value| (i < j only):
    ``[{"band", "channel_a", "channel_b", "value", "caution"}, ...]``, strongest first;
    ``caution`` the artefacts that can fake the pair in that band under the rule ``cautions``
    (:func:`~eegformer_cli.connectivity.artefacts.caution_rules`), ``""`` for none."""
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
                "caution": pair_caution(
                    cautions or {},
                    bands[band],
                    channels[upper_i[pair]],
                    channels[upper_j[pair]],
                ),
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
    :func:`eegformer_cli.provenance.row_fields` of its input, kept in the JSON; ``settings``
    with the artefact rule under ``artefact_caution``)."""
    e = explanation
    cautions = settings.get("artefact_caution") or {}
    save_npz(
        out_dir / f"{e.recording_id}.npz",
        **{field: getattr(e, field) for field in RECORDING_ARRAYS if getattr(e, field) is not None},
        bands=np.array(bands),
        channels=np.array(channels),
        label_names=np.array(label_names),
        contrast_classes=np.array(e.contrast_classes or [], dtype=str),
        interaction_names=np.array([r["interaction"] for r in e.interactions or []], dtype=str),
        interaction_values=np.array([r["value"] for r in e.interactions or []], dtype=float),
    )
    write_json(
        out_dir / f"{e.recording_id}.json",
        {
            "recording_id": e.recording_id,
            "participant_id": e.participant_id,
            "true_class": e.true_class,
            "n_segments": e.n_segments,
            "predicted": e.predicted,
            "target": e.target,
            "probabilities": dict(zip(label_names, map(float, e.probabilities))),
            "band_importance": dict(zip(bands, map(float, e.band_importance))),
            "top_band": bands[top_band(e.band_importance)],
            "strongest_channel_pairs": strongest_pairs(
                e.channel_pairs, bands, channels, cautions=cautions
            ),
            "contrast": None
            if e.contrast_pairs is None
            else _contrast_summary(
                list(e.contrast_classes),
                e.contrast_pairs,
                pair_band_sums(e.contrast_pairs),
                bands,
                channels,
                cautions,
            ),
            "interactions": e.interactions,
            "attention_diagnostics": e.attention_diagnostics,
            "settings": settings,
            "provenance": provenance,
        },
    )


#: What a contrast's values mean, in its JSON entries: one recording's, and the classes'.
CONTRAST_MEANING = (
    "attribution of logit({b}) - logit({a}) (the log-odds of {b} against {a}): > 0 the pair's "
    "connectivity pushes the recording towards {b} compared with the reference connectome, "
    "< 0 towards {a}"
)
CLASS_CONTRAST_MEANING = (
    "mean over {b}'s recordings minus mean over {a}'s of the attribution of logit({b}) - "
    "logit({a}): how far the log-odds of {b} move when the pair's connectivity goes from "
    "{a}'s to {b}'s; > 0 {b}'s connectivity (against {a}'s) pushes towards {b}, < 0 towards "
    "{a}; coh_difference and wpli_difference say whether it is higher or lower in {b}"
)


def _contrast_summary(
    classes: list[str],
    pairs: np.ndarray,
    per_band: np.ndarray,
    bands: Sequence[str],
    channels: Sequence[str],
    cautions: dict,
    meaning: str = CONTRAST_MEANING,
) -> dict:
    """The JSON entry of a contrast map (T, C, C) and its band sums (T,); ``meaning`` a
    template of what the values are (``{a}``, ``{b}``: the classes)."""
    return {
        "classes": classes,
        "meaning": meaning.format(a=classes[0], b=classes[1]),
        "per_band": dict(zip(bands, map(float, per_band))),
        "top_band": bands[top_band(per_band)],
        "strongest_channel_pairs": strongest_pairs(pairs, bands, channels, cautions=cautions),
    }


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
                    tokens = token_names(bands, maps.shape[-1])
                    for layer, head, query, key in np.ndindex(per_head.shape):
                        yield [
                            e.recording_id,
                            e.target,
                            pass_name,
                            layer,
                            heads[head],
                            tokens[query],
                            tokens[key],
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
    if name == "interactions":
        return (
            list(interactions.COLUMNS),
            (
                [
                    e.recording_id,
                    e.target,
                    row["interaction"],
                    interactions.side(row["a"]),
                    interactions.side(row["b"]),
                    row["class_difference"],
                    row["gate"],
                    row["value"],
                    row["contrast_value"],
                ]
                for e in explanations
                for row in e.interactions or []
            ),
        )
    raise ValueError(f"unknown table {name!r}")


#: The long-format tables of ``explain``, each written as ``NAME.csv`` by :func:`write_tables`.
TABLES = ("band_importance", "attention", "attention_diagnostics", "channel_pairs", "interactions")


def contrast_rows(
    contrast: dict | None, bands: Sequence[str], channels: Sequence[str], cautions: dict
) -> tuple[list[str], list[list]]:
    """``(columns, rows)`` of ``contrast_pairs.csv``: the class contrast
    (:func:`~eegformer_cli.explain.attributions.class_contrast`), one row per band and
    unordered pair, strongest |value| first: ``class_a, class_b, grouped_by, band, channel_a,
    channel_b, value`` (the mean over B's recordings minus A's of the attribution of
    logit(class_b) - logit(class_a): > 0 B's connectivity, against A's, pushes towards B),
    ``coh, wpli`` (its two measures), ``coh_difference, wpli_difference`` (B's mean
    connectivity minus A's) and ``caution`` (artefacts that can fake the pair in that band,
    under ``cautions``). No rows without a contrast or with an empty group."""
    columns = [
        "class_a",
        "class_b",
        "grouped_by",
        "band",
        "channel_a",
        "channel_b",
        "value",
        "coh",
        "wpli",
        "coh_difference",
        "wpli_difference",
        "caution",
    ]
    if contrast is None or "contrast_pairs" not in contrast:
        return columns, []
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    values = contrast["contrast_pairs"][:, upper_i, upper_j]  # (T, n_pairs)
    rows = []
    for flat in np.argsort(-np.abs(values), axis=None, kind="stable"):
        b, pair = np.unravel_index(flat, values.shape)
        i, j = upper_i[pair], upper_j[pair]
        rows.append(
            [
                *contrast["classes"],
                contrast["grouped_by"],
                bands[b],
                channels[i],
                channels[j],
                *(
                    float(contrast[key][b, i, j])
                    for key in (
                        "contrast_pairs",
                        "contrast_coh_pairs",
                        "contrast_wpli_pairs",
                        "coh_difference",
                        "wpli_difference",
                    )
                ),
                pair_caution(cautions, bands[b], channels[i], channels[j]),
            ]
        )
    return columns, rows


def _write_csv(path: Path, columns: list[str], rows) -> None:
    """A CSV file: floats to 6 significant digits, a missing quantity empty."""
    with atomic_open(path) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(
                [
                    "" if value is None else _fmt(value) if isinstance(value, float) else value
                    for value in row
                ]
            )


def write_tables(
    out_dir: Path,
    explanations: Sequence[RecordingExplanation],
    bands: Sequence[str],
    channels: Sequence[str],
    contrast: dict | None = None,
    cautions: dict | None = None,
) -> None:
    """``band_importance.csv``, ``attention.csv``, ``attention_diagnostics.csv`` and
    ``channel_pairs.csv`` (long format, :func:`table_rows`) and ``contrast_pairs.csv``
    (:func:`contrast_rows` of ``contrast``, cautions under the rule ``cautions``)."""
    for name in TABLES:
        _write_csv(out_dir / f"{name}.csv", *table_rows(name, explanations, bands, channels))
    _write_csv(
        out_dir / "contrast_pairs.csv", *contrast_rows(contrast, bands, channels, cautions or {})
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
    contrast: dict | None = None,
) -> None:
    """``class_summary.npz`` and ``class_summary.json`` from
    :func:`~eegformer_cli.explain.attributions.class_means` output (and, per class, the mean
    attention diagnostics of ``explanations``) and the class ``contrast``
    (:func:`~eegformer_cli.explain.attributions.class_contrast`, None: none)."""
    classes = list(means)
    cautions = settings.get("artefact_caution") or {}
    arrays = (
        {field: np.stack([means[c][field] for c in classes]) for field in MEAN_FIELDS}
        if classes
        else {}
    )
    if contrast is not None:
        arrays["contrast_classes"] = np.array(contrast["classes"], dtype=str)
        arrays["contrast_n_recordings"] = np.array(contrast["n_recordings"], dtype=np.int64)
        arrays.update({key: contrast[key] for key in CONTRAST_ARRAYS if key in contrast})
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
                    "top_band": bands[top_band(means[c]["band_importance"])],
                    "strongest_channel_pairs": strongest_pairs(
                        means[c]["channel_pairs"], bands, channels, cautions=cautions
                    ),
                    "attention_diagnostics": mean_diagnostics(
                        [e.attention_diagnostics for e in explanations if e.target == c]
                    ),
                }
                for c in classes
            },
            "contrast": _contrast_json(contrast, bands, channels, cautions),
            "interactions": _interactions_json(explanations, contrast),
        },
    )


def _interactions_json(
    explanations: Sequence[RecordingExplanation], contrast: dict | None
) -> dict | None:
    """``class_summary.json``'s ``interactions``: per explained class the mean attribution of
    each kept interaction over its recordings, and the class contrast's (None: the models
    keep none)."""
    if not any(e.interactions for e in explanations):
        return None
    groups: dict[str, list] = {}
    for e in explanations:
        groups.setdefault(e.target, []).append(e.interactions)
    out = {"per_class": interactions.class_summary(groups), "contrast": None}
    if contrast is not None and all(contrast["n_recordings"]):
        by_truth = contrast["grouped_by"] == GROUPED_BY[0]
        first, second = (
            [
                e.interactions
                for e in explanations
                if (e.true_class if by_truth else e.predicted) == name
            ]
            for name in contrast["classes"]
        )
        out["contrast"] = interactions.contrast_summary(first, second)
    return out


def _contrast_json(contrast: dict | None, bands, channels, cautions: dict) -> dict | None:
    """``class_summary.json``'s ``contrast``: classes, grouping and counts, and (both groups
    non-empty) per band, top band and strongest pairs."""
    if contrast is None:
        return None
    head = {key: contrast[key] for key in ("classes", "grouped_by", "n_recordings")}
    if "contrast_pairs" not in contrast:
        return {**head, "missing": "a group has no recording, so the classes cannot be compared"}
    return {
        **head,
        **_contrast_summary(
            contrast["classes"],
            contrast["contrast_pairs"],
            contrast["contrast_band"],
            bands,
            channels,
            cautions,
            CLASS_CONTRAST_MEANING,
        ),
    }


def recording_columns(label_names: Sequence[str]) -> list[str]:
    """The columns of ``recordings.csv`` (and of :func:`recording_rows`)."""
    return (
        ["recording_id", "participant_id", "true_class", "predicted", "target"]
        + [f"prob_{name}" for name in label_names]
        + ["explained_by"]
        + list(PROVENANCE_COLUMNS)
    )


def recording_rows(
    explanations: Sequence[RecordingExplanation],
    provenance_rows: Sequence[dict],
    label_names: Sequence[str],
) -> list[dict]:
    """Per explained recording ``recording_id, participant_id, true_class, predicted, target,
    prob_<label>..., explained_by`` and the provenance columns of ``predict``
    (:data:`eegformer_cli.provenance.PROVENANCE_COLUMNS`; ``provenance_rows`` in the order of
    ``explanations``), unrounded, lists as lists: what ``recordings.csv`` holds."""
    return [
        {
            "recording_id": e.recording_id,
            "participant_id": e.participant_id,
            "true_class": e.true_class,
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
    "n_recordings": (K',), <field>: (K', ...) arrays}`` and the contrast's arrays when it has
    them (``contrast_classes`` a list; what the report draws)."""
    path = Path(folder) / "class_summary.npz"
    try:
        with np.load(path) as data:
            out = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # truncated or damaged
        raise InputDataError(
            f"cannot read the class summary: {exc}", path=path, hint="rerun `eegformer explain`"
        ) from None
    for key in ("classes", "bands", "channels", "label_names", "contrast_classes"):
        if key in out:
            out[key] = [str(v) for v in out[key]]
    return out
