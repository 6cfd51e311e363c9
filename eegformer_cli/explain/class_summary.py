"""``class_summary.npz`` and ``class_summary.json`` of an ``eegformer explain`` folder: the
per-class means (:func:`class_means`) and the class contrast (:func:`class_contrast`), computed,
written (atomically) and read back.

The npz holds the explained classes (``classes`` (K',), ``n_recordings`` (K',)), the class
means of :data:`~eegformer_cli.explain.class_summary.MEAN_FIELDS` stacked on a first axis
(``band_importance`` (K', T), ...) and the contrast's arrays (:data:`CONTRAST_ARRAYS`); the
JSON the settings, bands, channels, labels, recordings, failures, per class its count, mean
band importance, top band (null when no band carries any of the logit), strongest pairs (only
non-zero ones), attention diagnostics and ``paths`` (the mean of its recordings'
:attr:`~.attributions.RecordingExplanation.paths`: how much of the logit the linear path and
the transformer carry), the ``contrast`` and the kept ``interactions``. The rest of the folder
is :mod:`.export`'s.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from eegformer_cli.atomic import read_json, save_npz, write_json
from eegformer_cli.errors import InputDataError
from eegformer_cli.explain import interactions
from eegformer_cli.explain.attributions import (
    TOKEN_ARRAYS,
    RecordingExplanation,
    mean_over,
    mean_paths,
    normalise_signed,
    pair_band_sums,
)
from eegformer_cli.explain.export import contrast_entry, strongest_pairs, top_band_name
from eegformer_cli.model.diagnostics import mean_diagnostics

#: Array fields of :class:`RecordingExplanation` averaged per class by :func:`class_means`.
MEAN_FIELDS = (
    "band_importance",
    "attention_coarse",
    "attention_refined",
    "channel_pairs",
    "coh_pairs",
    "wpli_pairs",
)


#: Array fields averaged per class where every recording of the class has them: the
#: tangent-space path's band power (K, C) (a model whose static stage reads covariances).
OPTIONAL_MEAN_FIELDS = ("band_power",)


def class_means(explanations: Sequence[RecordingExplanation]) -> dict[str, dict]:
    """Per explained class: ``{"n_recordings": int, <field>: mean array}`` for each of
    :data:`MEAN_FIELDS` (unweighted mean over the class's recordings; the mean band importance
    is renormalised so its absolute values sum to 1 again)."""
    out = {}
    n_tokens = max(e.attention_coarse.shape[-1] for e in explanations) if explanations else 0
    for name in sorted({e.target for e in explanations}):
        members = [e for e in explanations if e.target == name]
        means = {
            field: mean_over([getattr(e, field) for e in members], n_tokens)
            if field in TOKEN_ARRAYS
            else np.mean([getattr(e, field) for e in members], axis=0)
            for field in MEAN_FIELDS
        }
        means["band_importance"] = normalise_signed(means["band_importance"])
        for field in OPTIONAL_MEAN_FIELDS:  # where every member has it
            if all(getattr(e, field) is not None for e in members):
                means[field] = np.mean([getattr(e, field) for e in members], axis=0)
        out[name] = {"n_recordings": len(members), **means}
    return out


#: The class contrast's maps (T, C, C), each the mean over B's recordings minus the mean over
#: A's of the recording array it is named after (:func:`class_contrast`).
CONTRAST_FIELDS = {
    "contrast_pairs": "contrast_pairs",
    "contrast_coh_pairs": "contrast_coh_pairs",
    "contrast_wpli_pairs": "contrast_wpli_pairs",
    "coh_difference": "mean_coh",
    "wpli_difference": "mean_wpli",
}
GROUPED_BY = ("true class", "predicted class")


def class_contrast(explanations: Sequence[RecordingExplanation]) -> dict | None:
    """The two classes compared (module docs), from recordings explained with one contrast
    (A, B); None when none was (more than two classes and no ``contrast`` asked for).

    Returns ``{"classes": [A, B], "grouped_by": "true class" | "predicted class",
    "n_recordings": [n_A, n_B]}`` and, when both groups have recordings, for each key of
    :data:`CONTRAST_FIELDS` the mean over B's recordings minus the mean over A's, float64
    (T, C, C), and ``contrast_band`` (T,): ``contrast_pairs`` summed over each band's pairs,
    logit units (> 0: B's connectivity, against A's, pushes towards B). With Integrated
    Gradients the contrast pairs of all bands add up to about the difference between the
    groups' mean ``logit(B) - logit(A)`` (completeness).
    Recordings are grouped by true class when every one has a known one (those of a third
    class are left out), else by predicted class.
    """
    contrasted = [e for e in explanations if e.contrast_classes is not None]
    classes = contrasted[0].contrast_classes if contrasted else None
    if classes is None:
        return None
    by_truth = all(e.true_class is not None for e in contrasted)
    groups = [
        [e for e in contrasted if (e.true_class if by_truth else e.predicted) == name]
        for name in classes
    ]
    out = {
        "classes": list(classes),
        "grouped_by": GROUPED_BY[0] if by_truth else GROUPED_BY[1],
        "n_recordings": [len(group) for group in groups],
    }
    if not all(groups):
        return out
    differences = {}
    for name, source in CONTRAST_FIELDS.items():
        first, second = (np.mean([getattr(e, source) for e in group], axis=0) for group in groups)
        differences[name] = second - first
    return {**out, **differences, "contrast_band": pair_band_sums(differences["contrast_pairs"])}


#: The two files, written and read here only.
SUMMARY_NPZ, SUMMARY_JSON = "class_summary.npz", "class_summary.json"
#: The contrast's arrays in ``class_summary.npz``: the maps of
#: :data:`~eegformer_cli.explain.class_summary.CONTRAST_FIELDS` (T, C, C), ``contrast_band``
#: (T,), ``contrast_classes`` (2,) and ``contrast_n_recordings`` (2,).
CONTRAST_ARRAYS = (*CONTRAST_FIELDS, "contrast_band")
#: What the class contrast's values mean, in ``class_summary.json`` (``{a}``, ``{b}``: the
#: classes; one recording's contrast: :data:`.export.CONTRAST_MEANING`).
CLASS_CONTRAST_MEANING = (
    "mean over {b}'s recordings minus mean over {a}'s of the attribution of logit({b}) - "
    "logit({a}): how far the log-odds of {b} move when the pair's connectivity goes from "
    "{a}'s to {b}'s; > 0 {b}'s connectivity (against {a}'s) pushes towards {b}, < 0 towards "
    "{a}; coh_difference and wpli_difference say whether it is higher or lower in {b}"
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
    :func:`~eegformer_cli.explain.class_summary.class_means` output (and, per class, the mean
    attention diagnostics of ``explanations``) and the class ``contrast``
    (:func:`~eegformer_cli.explain.class_summary.class_contrast`, None: none)."""
    classes = list(means)
    cautions = settings.get("artefact_caution") or {}
    save_npz(
        out_dir / SUMMARY_NPZ,
        classes=np.array(classes, dtype=str),
        n_recordings=np.array([means[c]["n_recordings"] for c in classes], dtype=np.int64),
        bands=np.array(bands),
        channels=np.array(channels),
        label_names=np.array(label_names),
        **_summary_arrays(means, contrast),
    )
    write_json(
        out_dir / SUMMARY_JSON,
        {
            "settings": settings,
            "bands": list(bands),
            "channels": list(channels),
            "label_names": list(label_names),
            "recordings": list(recordings),
            "failures": dict(failures),
            "classes": {
                c: {
                    **_class_json(
                        means[c],
                        [e.attention_diagnostics for e in explanations if e.target == c],
                        bands,
                        channels,
                        cautions,
                    ),
                    "paths": mean_paths([e.paths for e in explanations if e.target == c]),
                }
                for c in classes
            },
            "contrast": _contrast_json(contrast, bands, channels, cautions),
            "interactions": _interactions_json(explanations, contrast),
        },
    )


def _summary_arrays(means: dict[str, dict], contrast: dict | None) -> dict[str, np.ndarray]:
    """``class_summary.npz``'s arrays beside the names and counts: the class means of
    :data:`MEAN_FIELDS` (and of :data:`OPTIONAL_MEAN_FIELDS` where every class has them)
    stacked (K', ...) and the
    contrast's classes, counts and maps (:data:`CONTRAST_ARRAYS`)."""
    classes = list(means)
    arrays = (
        {field: np.stack([means[c][field] for c in classes]) for field in MEAN_FIELDS}
        if classes
        else {}
    )
    for field in OPTIONAL_MEAN_FIELDS:
        if classes and all(field in means[c] for c in classes):
            arrays[field] = np.stack([means[c][field] for c in classes])
    if contrast is not None:
        arrays["contrast_classes"] = np.array(contrast["classes"], dtype=str)
        arrays["contrast_n_recordings"] = np.array(contrast["n_recordings"], dtype=np.int64)
        arrays.update({key: contrast[key] for key in CONTRAST_ARRAYS if key in contrast})
    return arrays


def _class_json(
    mean: dict,
    diagnostics: list,
    bands: Sequence[str],
    channels: Sequence[str],
    cautions: dict,
) -> dict:
    """One class's entry of ``class_summary.json``'s ``classes``: its count, mean band
    importance and top band, strongest pairs and the mean of its recordings' attention
    ``diagnostics``."""
    return {
        "n_recordings": mean["n_recordings"],
        "band_importance": dict(zip(bands, map(float, mean["band_importance"]))),
        "top_band": top_band_name(mean["band_importance"], bands),
        "strongest_channel_pairs": strongest_pairs(
            mean["channel_pairs"], bands, channels, cautions=cautions
        ),
        "attention_diagnostics": mean_diagnostics(diagnostics),
    }


def _interactions_json(
    explanations: Sequence[RecordingExplanation], contrast: dict | None
) -> dict | None:
    """``class_summary.json``'s ``interactions``: per explained class the mean attribution of
    each kept interaction over its recordings, and the class contrast's (None: the models
    keep none)."""
    if not any(e.interactions for e in explanations):
        return None
    groups: dict[str, list[list[dict] | None]] = {}
    for e in explanations:
        groups.setdefault(e.target, []).append(e.interactions)
    out: dict[str, object] = {"per_class": interactions.class_summary(groups), "contrast": None}
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
        **contrast_entry(
            contrast["classes"],
            contrast["contrast_pairs"],
            contrast["contrast_band"],
            bands,
            channels,
            cautions,
            CLASS_CONTRAST_MEANING,
        ),
    }


def load_class_summary(folder: str | Path) -> dict:
    """Read ``class_summary.npz`` back: ``{"classes": [...], "bands": [...], "channels": [...],
    "n_recordings": (K',), <field>: (K', ...) arrays}`` and the contrast's arrays when it has
    them (``contrast_classes`` a list; what the report draws)."""
    path = Path(folder) / SUMMARY_NPZ
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


def has_class_summary(folder: str | Path) -> bool:
    """Whether ``folder`` holds ``class_summary.npz``: an ``eegformer explain`` output folder."""
    return (Path(folder) / SUMMARY_NPZ).is_file()


def read_class_summary_json(folder: str | Path) -> dict:
    """``class_summary.json`` as written: the settings, bands, channels, labels, recordings,
    failures, per class its entry, the ``contrast`` and the kept ``interactions``."""
    return read_json(Path(folder) / SUMMARY_JSON)


def earlier_recordings(out_dir: Path) -> list[str]:
    """The recording ids an earlier ``explain`` into ``out_dir`` wrote files for (from its
    ``class_summary.json``; empty when there is none or it cannot be read)."""
    try:
        return [str(r) for r in read_class_summary_json(out_dir).get("recordings", [])]
    except (OSError, ValueError, AttributeError, InputDataError):
        return []
