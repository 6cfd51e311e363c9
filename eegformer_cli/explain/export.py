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
                               importance per band and its ``top_band`` (null when no band
                               carries any of the logit), the :data:`TOP_PAIRS` strongest
                               channel pairs with a non-zero value (each with its artefact
                               ``caution``), the contrast's strongest pairs, ``paths`` (how
                               much of the logit change the linear path and the transformer
                               each carry, for the explained class and the contrast; null
                               without a linear path), attention diagnostics, settings,
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
                               class_difference, gate, group, proxies, value, contrast_value``
                               (``group``: the row heading the kept interactions that are
                               proxies of each other; ``proxies``: the screen's other
                               candidates for the same effect, in words; no rows for a model
                               that keeps none)
``contrast_pairs.csv``         the class contrast (:func:`contrast_rows`), strongest first:
                               ``class_a, class_b, grouped_by, band, channel_a, channel_b, value,
                               coh, wpli, coh_difference, wpli_difference, caution``
``class_summary.npz``          per explained class (``classes`` (K',), ``n_recordings`` (K',)),
                               the class means stacked on a first axis: ``band_importance``
                               (K', T), ...; the contrast's maps
                               (:data:`~eegformer_cli.explain.class_summary.CONTRAST_ARRAYS`)
``class_summary.json``         settings (with the artefact rule, ``artefact_caution``), bands,
                               channels, labels, recordings, failures, per class its count, mean
                               band importance, top band, strongest pairs, attention diagnostics,
                               and the ``contrast`` (classes, grouping, counts, per band, top band,
                               strongest pairs)
=============================  ====================================================================

And per recording ``<recording_id>.segments.csv``, its time course
(:func:`~eegformer_cli.explain.segment_attributions.timeline_rows`), one row per segment:
``recording_id, target, segment, onset_s, contribution, static_share, cell_1, value_1, ...``,
the segment's part of the explained class's logit (the static share plus the contributions is
the recording's logit) and its strongest cells (``band channel_a-channel_b``, the coh and wPLI
attributions of the pair summed, logit units).

This module writes every file but the class summary, which :mod:`.class_summary` writes and
reads back.

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
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from eegformer_cli.atomic import atomic_open, save_npz, write_json
from eegformer_cli.connectivity.artefacts import pair_caution
from eegformer_cli.explain import interactions
from eegformer_cli.explain.attributions import (
    RECORDING_ARRAYS,
    RecordingExplanation,
    pair_band_sums,
    token_names,
    top_band,
)
from eegformer_cli.explain.segment_attributions import timeline_rows
from eegformer_cli.model.diagnostics import ABLATION_QUANTITIES, TRACE_QUANTITIES
from eegformer_cli.provenance import PROVENANCE_COLUMNS, flat_row

#: How many channel pairs the JSON summaries list (strongest by absolute value).
TOP_PAIRS = 10


def top_band_name(band_importance: np.ndarray, bands: Sequence[str]) -> str | None:
    """The name of the :func:`~eegformer_cli.explain.attributions.top_band` of
    ``band_importance`` (T,), None (JSON ``null``) when no band carries any of the logit."""
    top = top_band(band_importance)
    return None if top is None else bands[top]


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
    (:func:`~eegformer_cli.connectivity.artefacts.caution_rules`), ``""`` for none. Only pairs
    with a finite non-zero value: fewer than ``k``, or none, when the map carries less (a
    pair of value 0 carries none of the logit, and listing it would say it does)."""
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    values = pairs[:, upper_i, upper_j]  # (T, n_pairs)
    order = np.argsort(-np.abs(values), axis=None, kind="stable")[:k]
    carried = np.isfinite(values.flat[order]) & (values.flat[order] != 0)
    out = []
    for flat in order[carried]:
        band, pair = (int(index) for index in np.unravel_index(flat, values.shape))
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
    """``<recording_id>.npz``, ``<recording_id>.json`` and its segment table of one recording
    (``provenance``: :func:`eegformer_cli.provenance.row_fields` of its input, kept in the JSON;
    ``settings`` with the artefact rule under ``artefact_caution``)."""
    e = explanation
    if e.segments is not None:
        _write_csv(
            segment_table_path(out_dir, e.recording_id),
            *timeline_rows(e.segments, e.recording_id, e.target, bands, channels),
        )
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
            "top_band": top_band_name(e.band_importance, bands),
            "strongest_channel_pairs": strongest_pairs(
                e.channel_pairs, bands, channels, cautions=cautions
            ),
            "contrast": None
            if e.contrast_pairs is None or e.contrast_classes is None  # set together
            else contrast_entry(
                list(e.contrast_classes),
                e.contrast_pairs,
                pair_band_sums(e.contrast_pairs),
                bands,
                channels,
                cautions,
            ),
            "interactions": e.interactions,
            "paths": e.paths,
            "attention_diagnostics": e.attention_diagnostics,
            "settings": settings,
            "provenance": provenance,
        },
    )


#: What a contrast's values mean, in one recording's JSON (the classes': in
#: :mod:`.class_summary`).
CONTRAST_MEANING = (
    "attribution of logit({b}) - logit({a}) (the log-odds of {b} against {a}): > 0 the pair's "
    "connectivity pushes the recording towards {b} compared with the baseline connectome, "
    "< 0 towards {a}"
)


def contrast_entry(
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
        "top_band": top_band_name(per_band, bands),
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
    if name not in _TABLE_ROWS:
        raise ValueError(f"unknown table {name!r}")
    return _TABLE_ROWS[name](explanations, bands, channels)


def _band_importance_rows(
    explanations: Sequence[RecordingExplanation], bands: Sequence[str], channels: Sequence[str]
) -> tuple[list[str], Iterator[list]]:
    """``band_importance.csv``: one row per recording and band."""
    return (
        ["recording_id", "participant_id", "target", "band", "value"],
        (
            [e.recording_id, e.participant_id or "n/a", e.target, band, float(value)]
            for e in explanations
            for band, value in zip(bands, e.band_importance)
        ),
    )


def _attention_rows(
    explanations: Sequence[RecordingExplanation], bands: Sequence[str], channels: Sequence[str]
) -> tuple[list[str], Iterator[list]]:
    """``attention.csv``: one row per recording, pass, layer, head (``mean`` for maps
    averaged over heads), query token and key token."""

    def rows():
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
        rows(),
    )


def _attention_diagnostics_rows(
    explanations: Sequence[RecordingExplanation], bands: Sequence[str], channels: Sequence[str]
) -> tuple[list[str], Iterator[list]]:
    """``attention_diagnostics.csv``: one row per recording, pass and layer, each quantity of
    :mod:`eegformer_cli.model.diagnostics` (None where the recording lacks it)."""
    quantities = TRACE_QUANTITIES + ABLATION_QUANTITIES

    def rows():
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

    return ["recording_id", "target", "pass", "layer", *quantities], rows()


def _channel_pair_rows(
    explanations: Sequence[RecordingExplanation], bands: Sequence[str], channels: Sequence[str]
) -> tuple[list[str], Iterator[list]]:
    """``channel_pairs.csv``: one row per recording, band and unordered channel pair."""
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
            for i, j in zip(upper_i.tolist(), upper_j.tolist())
        ),
    )


def _interaction_rows(
    explanations: Sequence[RecordingExplanation], bands: Sequence[str], channels: Sequence[str]
) -> tuple[list[str], Iterator[list]]:
    """``interactions.csv``: one row per recording and kept interaction."""
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
                row.get("group", row["interaction"]),
                interactions.proxies_text(row),
                row["value"],
                row["contrast_value"],
            ]
            for e in explanations
            for row in e.interactions or []
        ),
    )


#: Each long-format table's ``(columns, rows)`` builder, by name.
_TABLE_ROWS = {
    "band_importance": _band_importance_rows,
    "attention": _attention_rows,
    "attention_diagnostics": _attention_diagnostics_rows,
    "channel_pairs": _channel_pair_rows,
    "interactions": _interaction_rows,
}
#: The long-format tables of ``explain``, each written as ``NAME.csv`` by :func:`write_tables`.
TABLES = tuple(_TABLE_ROWS)


def contrast_rows(
    contrast: dict | None, bands: Sequence[str], channels: Sequence[str], cautions: dict
) -> tuple[list[str], list[list]]:
    """``(columns, rows)`` of ``contrast_pairs.csv``: the class contrast
    (:func:`~eegformer_cli.explain.class_summary.class_contrast`), one row per band and
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
        b, pair = (int(index) for index in np.unravel_index(flat, values.shape))
        i, j = int(upper_i[pair]), int(upper_j[pair])
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


def recording_columns(label_names: Sequence[str], entity_columns: Sequence[str] = ()) -> list[str]:
    """The columns of ``recordings.csv`` (and of :func:`recording_rows`): the BIDS
    ``entity_columns`` after ``participant_id``, as in ``predict``'s rows."""
    return (
        ["recording_id", "participant_id", *entity_columns, "true_class", "predicted", "target"]
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
    entity_columns: Sequence[str] = (),
) -> None:
    """``recordings.csv``: :func:`recording_rows` (probabilities to 6 significant digits, lists
    joined as in ``predict``'s CSV), with the ``entity_columns`` that ``provenance_rows``
    carry."""
    columns = recording_columns(label_names, entity_columns)
    with atomic_open(out_dir / "recordings.csv") as handle:
        writer = csv.DictWriter(handle, columns, lineterminator="\n")
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


def segment_table_path(folder: str | Path, recording_id: str) -> Path:
    """The segment table (the time course) of ``recording_id`` in an explain folder."""
    return Path(folder) / f"{recording_id}{SEGMENT_TABLE_SUFFIX}"


#: The end of a segment table's name, after the recording id.
SEGMENT_TABLE_SUFFIX = ".segments.csv"


def read_segment_table(folder: str | Path, recording_id: str) -> list[dict] | None:
    """The rows of a recording's segment table (strings; :func:`segment_table_path`), or None
    when the folder has none (written before explain kept it)."""
    path = segment_table_path(folder, recording_id)
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def read_recordings_table(folder: str | Path) -> list[dict] | None:
    """The rows of ``recordings.csv`` (strings), or None when the folder has none (written
    before explain kept it)."""
    path = Path(folder) / "recordings.csv"
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def remove_recordings(out_dir: Path, recording_ids: Sequence[str]) -> int:
    """Delete ``<recording_id>.npz``, ``.json`` and ``.segments.csv`` of each id (e.g. an earlier run's
    recordings that this run did not explain, so the folder holds one run's files only);
    returns how many files were removed."""
    removed = 0
    for recording_id in recording_ids:
        for suffix in (".npz", ".json", SEGMENT_TABLE_SUFFIX):
            path = Path(out_dir) / f"{recording_id}{suffix}"
            if path.is_file():
                path.unlink()
                removed += 1
    return removed
