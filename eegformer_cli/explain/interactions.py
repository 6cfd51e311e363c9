"""The kept interactions in an explanation: what each is, in words, and how much it moved a
recording's logit.

A model whose training screen kept interactions (``model/interactions.py``) forms their
products itself; ``segment_attributions.channel_pair_attributions`` attributes the explained logit to
each product beside the connectivity entries. This module turns those numbers into rows a
person can read and a program can join: one dict per kept interaction,

``{"interaction": "coh theta T7-P3 x wpli low_beta F7-P8", "a": [measure, band, ch, ch],
"b": [...] or "age", "class_difference": the screen's score (how much the two sides'
correlation differs between the classes, 0-2), "gate": the level it beat, "proxies": the
candidates the screen grouped with it as the same effect seen through other entries (each
``{"interaction", "class_difference", "correlation"}``: its name, its score and the correlation
of its product with the kept one's over the training recordings; empty for a model of an
earlier version), "group": the name of the row that heads its group in this table, "value":
the attribution (logit units, mean over segments), "contrast_value": the same for the class
contrast's log-odds, or None}``.

Fold models of one run keep different interactions, so explanations by several models are
merged by the interaction's name: the mean over the models, 0 for a model that did not keep it
(its logit does not depend on it), the proxies of all of them. One model's kept interactions
are distinct effects, but one fold model may keep what another recorded as a proxy: rows
linked that way (one in the other's ``proxies``) form one group, named by its strongest row
(:func:`with_groups`), so a table says which of its rows are proxies of each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from eegformer_cli.model.interactions import Interaction


def kept_interactions(model) -> list[Interaction]:
    """The interactions ``model`` (an XAIguiFormer or a wrapper with its ``config``) forms, in
    the order of its products."""
    return [Interaction.from_dict(item) for item in model.config.interactions]


def describe(
    model, values: np.ndarray | None, contrast_values: np.ndarray | None = None
) -> list[dict] | None:
    """One dict per kept interaction of ``model`` (module docs), with its attribution ``values``
    (K,) and ``contrast_values`` (K,) or None; None when the model keeps none."""
    if values is None:
        return None
    return [
        {
            "interaction": kept.label(),
            "a": kept.to_dict()["a"],
            "b": kept.to_dict()["b"],
            "class_difference": kept.score,
            "gate": kept.threshold,
            "proxies": [
                {
                    "interaction": proxy.label(),
                    "class_difference": proxy.score,
                    "correlation": proxy.correlation,
                }
                for proxy in kept.proxies
            ],
            "group": kept.label(),
            "value": float(value),
            "contrast_value": None if contrast_values is None else float(contrast_values[k]),
        }
        for k, (kept, value) in enumerate(zip(kept_interactions(model), values))
    ]


def with_groups(rows: list[dict]) -> list[dict]:
    """``rows`` (strongest first) with each one's ``group``: rows linked by ``proxies`` (one
    row's name among another's proxies, in either direction, directly or through other rows)
    share the name of the first of them; a row linked to none is its own group."""
    names = [row["interaction"] for row in rows]
    head = {name: name for name in names}

    def root(name: str) -> str:
        while head[name] != name:
            name = head[name]
        return name

    for row in rows:
        for proxy in row.get("proxies", []):
            if proxy["interaction"] in head:
                first, second = sorted(
                    (root(row["interaction"]), root(proxy["interaction"])), key=names.index
                )
                head[second] = first
    return [{**row, "group": root(row["interaction"])} for row in rows]


def _union_proxies(first: list[dict], second: list[dict]) -> list[dict]:
    """The proxies of ``first`` then those of ``second`` it lacks (by name)."""
    known = {proxy["interaction"] for proxy in first}
    return first + [proxy for proxy in second if proxy["interaction"] not in known]


def merged(rows_per_model: Sequence[list[dict] | None]) -> list[dict] | None:
    """Interaction rows of several explanations (one recording's by several models, or a
    class's recordings), merged by name: values averaged over all of them (0 where one did not
    keep it), strongest |value| first; None when none keeps any."""
    if not any(rows_per_model):
        return None
    n = len(rows_per_model)
    by_name: dict[str, dict] = {}
    for rows in rows_per_model:
        for row in rows or []:
            entry = by_name.setdefault(
                row["interaction"], {**row, "proxies": [], "value": 0.0, "contrast_value": None}
            )
            entry["proxies"] = _union_proxies(entry["proxies"], row.get("proxies", []))
            entry["value"] += row["value"] / n
            if row["contrast_value"] is not None:
                entry["contrast_value"] = (entry["contrast_value"] or 0.0) + row[
                    "contrast_value"
                ] / n
    return strongest_first(list(by_name.values()))


def strongest_first(rows: list[dict]) -> list[dict]:
    """``rows`` sorted by |value|, largest first, each with its :func:`with_groups` group."""
    return with_groups(sorted(rows, key=lambda row: -abs(row["value"])))


def class_summary(groups: Mapping[str, Sequence[list[dict] | None]]) -> dict[str, list[dict]]:
    """Per group name (a class), the mean over its recordings of each interaction's value (0
    for a recording whose models kept none), strongest first."""
    return {name: merged(list(rows)) or [] for name, rows in groups.items()}


def contrast_summary(
    first: Sequence[list[dict] | None], second: Sequence[list[dict] | None]
) -> list[dict]:
    """The class contrast of the interactions: per interaction, the mean ``contrast_value``
    over the second group's recordings minus the first's (logit units, the same sign
    convention as the contrast pairs), strongest first."""
    means = [merged(list(group)) or [] for group in (first, second)]
    names = {row["interaction"]: row for rows in means for row in rows}
    out = []
    for name, row in names.items():
        a, b = (
            next((r["contrast_value"] or 0.0 for r in rows if r["interaction"] == name), 0.0)
            for rows in means
        )
        out.append({**row, "value": b - a, "contrast_value": None})
    return strongest_first(out)


#: Columns of ``interactions.csv`` (one row per recording and kept interaction).
COLUMNS = (
    "recording_id",
    "target",
    "interaction",
    "side_a",
    "side_b",
    "class_difference",
    "gate",
    "group",
    "proxies",
    "value",
    "contrast_value",
)


def proxies_text(row: dict) -> str:
    """A row's proxies in words for a table cell: ``name (class difference 0.61, r 0.93) |
    ...``, empty when it has none."""
    return " | ".join(
        f"{proxy['interaction']} (class difference {proxy['class_difference']:.2f}, "
        f"r {proxy['correlation']:.2f})"
        for proxy in row.get("proxies", [])
    )


def side(value) -> str:
    """A side of an interaction in words: ``coh theta T7-P3`` or ``age``."""
    if isinstance(value, str):
        return value
    measure, band, first, second = value
    return f"{measure} {band} {first}-{second}"
