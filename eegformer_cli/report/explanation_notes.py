"""The report's "Explanations" section in words and tables: where the explanations come from
(which model, which recordings, whether the model trained on them), the captions of its
figures (band importance, artefact cautions, the class contrast), the tables of the
contrast's strongest pairs and of the kept interactions, and what the contrast says first when
those interactions carry more of it than any pair, and what carries a class's logit when no
connectivity entry carries any of it. Each a function of plain data (the explain
folder's settings, rows and summaries) returning an HTML string (values escaped) or, for a
note, plain text; :mod:`.explanations` and :mod:`.interactions` put them on the
page.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from eegformer_cli.experiment import run_folder
from eegformer_cli.report.page import inline_code
from eegformer_cli.report.tables import table_html

#: Pairs of the class contrast said in a sentence each, strongest first.
CONTRAST_SENTENCES = 5


def explanations_source_html(
    run_dir: Path,
    folder: Path,
    settings: dict,
    recordings: list[dict] | None,
    classes: list[str],
    counts: list[int],
) -> str:
    """Which model and recordings the explanations come from, whether those recordings were
    the model's training data (``recordings.csv`` of ``explain``: its ``in_training_data``
    warnings), what the per-class means average over, and classes of one recording."""
    out_of_fold = [
        row
        for row in recordings or []
        if str(row.get("explained_by", "")).startswith("out_of_fold")
    ]
    parts = [_source_sentence(run_dir, folder, settings)]
    if out_of_fold:
        rows = recordings or []  # out_of_fold's rows are some of them
        parts.append(out_of_fold_html(out_of_fold, len(rows)))
        recordings = [row for row in rows if row not in out_of_fold]
    training_data = _training_data_sentence(recordings, bool(out_of_fold))
    if training_data is not None:
        parts.append(training_data)
    parts += _class_means_sentences(settings, classes, counts)
    return "<p>" + "</p><p>".join(parts) + "</p>"


def _source_sentence(run_dir: Path, folder: Path, settings: dict) -> str:
    """Which folder the explanations are in, which model (the run's own, its fold models, or
    another model file) explained them, and on which inputs."""
    model = Path(str(settings.get("model", "")))
    own = bool(settings.get("model")) and (
        run_folder.model_path(run_dir).resolve() == model.resolve()
    )
    trained_on = str(settings.get("model_trained_on"))
    which = {
        "all": "the final model, retrained on all participants of the run",
        "holdout": "the holdout model, trained on the run's training participants",
    }.get(trained_on, "a model file")
    if settings.get("run_dir"):
        which = (
            "the run folder: its fold models for the run's own recordings, its final "
            "model for the others"
        )
    return (
        f"From <code>{inline_code(str(folder))}</code>: "
        f"<code>eegformer explain</code> with {inline_code(which)} "
        + (
            "(this run's <code>folds/*.pt</code> and <code>model.pt</code>)"
            if own and settings.get("run_dir")
            else "(this run's <code>model.pt</code>)"
            if own
            else f"(<code>{inline_code(str(model))}</code>, not this run's model.pt, with the same "
            "classes, bands and channels)"
        )
        + (
            f", on {inline_code(', '.join(map(str, settings['inputs'])))}"
            if settings.get("inputs")
            else ""
        )
        + "."
    )


def _training_data_sentence(recordings: list[dict] | None, beside_out_of_fold: bool) -> str | None:
    """Whether the ``recordings`` not explained out of fold were the model's training data
    (their ``in_training_data`` warnings); None when there are none; ``beside_out_of_fold``:
    others were explained out of fold."""
    if recordings is None:
        return (
            "This explain output predates the record of which recordings were the "
            "model's training data, so that is not known here."
        )
    if not recordings:
        return None
    seen = [row for row in recordings if "in_training_data:" in (row.get("warnings") or "")]
    if seen and len(seen) == len(recordings):
        every = (
            "The explained recording was"
            if len(seen) == 1
            else f"All {len(recordings)} explained recordings were"
        )
        return (
            f"<b>{every} in the training data of this model</b> (explain was run "
            "on the model's own training "
            "recordings): the explanations show what the model relies on for "
            "recordings it was fitted to, not evidence of what generalises to new "
            "people; its predictions on them are optimistic (the honest ones are "
            "the out-of-fold predictions above)."
        )
    if seen:
        return (
            f"<b>{len(seen)} of the {len(recordings)} explained recordings were in "
            "the training data of this model</b>; their explanations describe "
            "recordings the model was fitted to."
        )
    return (
        f"None of the {len(recordings)} "
        + ("other " if beside_out_of_fold else "")
        + "explained recordings was in "
        "the training data of this model."
    )


def _class_means_sentences(settings: dict, classes: list[str], counts: list[int]) -> list[str]:
    """Which class each recording is explained for (``settings["target"]``, else its
    predicted class), the recordings per class (``counts``), and the classes of one
    recording only."""
    target = settings.get("target")
    sentences = [
        "Each recording is explained for "
        + (
            f"the class <b>{inline_code(str(target))}</b>, so every mean below is over all "
            "recordings"
            if target
            else "its <b>predicted</b> class, so the class means below group recordings by what the "
            "model predicted, not by their true class"
        )
        + ": "
        + inline_code(
            ", ".join(f"{c} {n} recording{'s' * (n != 1)}" for c, n in zip(classes, counts))
        )
        + "."
    ]
    single = [c for c, n in zip(classes, counts) if n == 1]
    if single:
        sentences.append(
            f"<b>{inline_code(', '.join(single))}: one recording only</b>, so its "
            "'mean' is that one recording's explanation, not a pattern of the class."
        )
    return sentences


def out_of_fold_html(rows: list[dict], n_recordings: int) -> str:
    """What it means that ``rows`` (of ``recordings.csv``) were explained out of fold."""
    repeats = max(len(str(row["explained_by"]).split()) - 1 for row in rows)
    every = (
        "Every explained recording was"
        if len(rows) == n_recordings
        else f"{len(rows)} of the {n_recordings} explained recordings were"
    )
    return (
        f"<b>{every} explained out of fold</b>: by the fold model"
        + (f"s (one per repeat, {repeats}; their mean)" if repeats > 1 else "")
        + " of this run that did not train on the person, so these explanations, and the "
        "class means below, describe people the model never saw, and their probabilities "
        "are the out-of-fold ones (<code>explained_by</code> in recordings.csv names the "
        "folds). Each fold model's attributions are against its own training recordings' "
        "mean connectome."
    )


def band_importance_note(
    baseline: str,
    band_importance: np.ndarray | None = None,
    classes: list[str] | None = None,
    bands: list[str] | None = None,
) -> str:
    """The band-importance figure's caption, for explanations against ``baseline``; with the
    chart's values (``band_importance`` (K', T) of ``classes`` and ``bands``), first what it
    shows that a reader would take for a class difference (every class with the same top
    band, every bar positive) and why it is not one (:func:`same_bands_sentence`)."""
    first = (
        same_bands_sentence(np.asarray(band_importance), classes, bands)
        if band_importance is not None and classes and bands
        else ""
    )
    return first + (
        "Each bar is the explained class's attribution (captum, Integrated Gradients by "
        "default) to a band's connectivity, summed over its channel pairs, averaged over the "
        "class's recordings and scaled so that the absolute values sum to 1 (the share each "
        f"band carries). It is measured against {baseline}: positive, the band's "
        "connectivity raises the class's logit compared with that baseline (the typical "
        "training recording); negative, it lowers it. Before scaling the bars add up to the "
        "logit's change from the baseline (completeness), so sign and size both mean "
        "something. The refined pass itself is guided by another explanation (the model's "
        "DeepLIFT against a zero token), which this does not show."
    )


def same_bands_sentence(band_importance: np.ndarray, classes: list[str], bands: list[str]) -> str:
    """Why every class has the same top band, or every bar is positive, where the chart
    (``band_importance`` (K', T)) shows either with two classes or more; ``""`` otherwise.
    Each class's bars are of its own logit against the typical training recording: a
    recording explained for its predicted class has that class's logit above the typical
    one, so its bars are mostly positive, and the bands that move a logit most can be the
    same for every class. The class contrast says how the classes differ."""
    from eegformer_cli.explain.attributions import top_band

    if len(classes) < 2:
        return ""
    tops = {top_band(values) for values in band_importance}
    shared = tops.pop() if len(tops) == 1 else None  # None too where every band is 0
    positive = bool((band_importance >= 0).all() and band_importance.any())
    if shared is None and not positive:
        return ""
    seen = " and ".join(
        ([f"every class puts {bands[shared]} first"] if shared is not None else [])
        + (["every bar is positive"] if positive else [])
    )
    return (
        f"Here {seen}: this is not a difference between the classes. Each class's bars are "
        "of its own logit against the typical training recording, and a recording explained "
        "for its class has that logit above the typical one, so the bars lean positive and "
        "the bands that move a logit most can be the same for every class; the class "
        "contrast below says how the classes differ. "
    )


def caution_note(settings: dict) -> str:
    """What the dashed pairs mean: the artefact rule of the explanations' ``settings``
    (``artefact_caution``), or that these explanations predate it."""
    rules = settings.get("artefact_caution")
    if rules is None:
        return (
            "These explanations predate the artefact cautions: rerun `eegformer explain` to "
            "get pairs that eye movements or muscle can fake dashed."
        )
    if not rules:
        return "No band and channel of this model are prone to eye or muscle artefacts."
    kinds = "; ".join(
        f"{kind}: {', '.join(rule['channels'])} in {', '.join(rule['bands'])}"
        for kind, rule in rules.items()
    )
    return (
        "Dashed: pairs with an end that artefacts reach in that band, whose connectivity "
        f"(and so attribution) an artefact can fake rather than the brain ({kinds}); read "
        "them with caution (ICA, `eegformer preprocess --ica`, removes much of both)."
    )


def contrast_note(contrast: dict, settings: dict) -> str:
    """The contrast figure's caption: what its values are, which recordings it compares."""
    first, second = contrast["classes"]
    n_first, n_second = contrast["n_recordings"]
    baseline = str(settings.get("baseline") or "zero connectivity")
    return (
        f"How {second} differs from {first}, on one scale. For each recording, the attribution "
        f"(captum, against {baseline}) of logit({second}) - logit({first}), the log-odds of "
        f"{second} against {first}, to each pair's connectivity; then the mean over the "
        f"{n_second} recordings of {second} minus the mean over the {n_first} of {first}, "
        f"grouped by {contrast['grouped_by']}"
        + (
            " (the recordings' true classes were not all known)"
            if contrast["grouped_by"] == "predicted class"
            else ""
        )
        + f": how far the log-odds of {second} move when the pair's connectivity goes from "
        f"{first}'s to {second}'s. Red: {second}'s connectivity pushes towards {second} (the "
        f"difference helps tell the classes apart); blue: towards {first}. The bars add up to "
        f"about the difference between the groups' mean log-odds of {second}. Below the "
        "bars, coherence (upper row) and wPLI (lower row) each on its own, as the two can "
        f"move in opposite directions: on the left whether each pair is more or less "
        f"connected in {second} by that measure (the connectivity itself, not the model), on "
        "the right how that measure's difference pushes the prediction; each row draws the "
        "pairs that measure pushes most. The sentences and the table below say both for the "
        "strongest pairs."
    )


def connectivity_words(coh: float, wpli: float) -> str:
    """How a pair's coherence and wPLI differ (``coh``, ``wpli``: the second class's mean
    minus the first's), each measure on its own: "coherence and wPLI higher", "coherence
    lower, wPLI higher"."""

    def way(value: float) -> str:
        return "higher" if value > 0 else "lower" if value < 0 else "unchanged"

    if way(coh) == way(wpli):
        return f"coherence and wPLI {way(coh)}"
    return f"coherence {way(coh)}, wPLI {way(wpli)}"


def contrast_sentences_html(rows: list[dict], n: int = CONTRAST_SENTENCES) -> str:
    """The ``n`` strongest pairs of the contrast (rows of ``contrast_pairs.csv`` as dicts), a
    sentence each: "theta F8-P3: coherence lower, wPLI higher in B; pushes towards B (+0.012
    logit units: coherence -0.003, wPLI +0.015)"."""
    if not rows:
        return ""
    first, second = rows[0]["class_a"], rows[0]["class_b"]
    items = "".join(
        "<li>"
        + inline_code(
            f"{row['band']} {row['channel_a']}-{row['channel_b']}: "
            f"{connectivity_words(row['coh_difference'], row['wpli_difference'])} in "
            f"{second}; pushes towards {second if row['value'] > 0 else first} "
            f"({row['value']:+.3g} logit units: coherence {row['coh']:+.3g}, wPLI "
            f"{row['wpli']:+.3g})" + (f"; caution: {row['caution']}" if row["caution"] else "")
        )
        + "</li>"
        for row in rows[:n]
    )
    return f"<p>The strongest pairs, in words:</p><ul>{items}</ul>"


def contrast_table_html(rows: list[dict]) -> str:
    """The contrast's strongest pairs (rows of ``contrast_pairs.csv`` as dicts): band, pair,
    the push in logit units, the connectivity difference (class_b minus class_a) and the
    artefact caution."""
    if not rows:
        return "<p>No pair.</p>"
    first, second = rows[0]["class_a"], rows[0]["class_b"]
    table = [
        [
            row["band"],
            f"{row['channel_a']}\u2011{row['channel_b']}",  # a hyphen no line breaks at
            f"{row['value']:+.3g} (towards {second if row['value'] > 0 else first})",
            f"{row['coh_difference']:+.3g}",
            f"{row['wpli_difference']:+.3g}",
            connectivity_words(row["coh_difference"], row["wpli_difference"]),
            row["caution"] or "",
        ]
        for row in rows
    ]
    return table_html(
        [
            "band",
            "pair",
            f"push of {second}'s connectivity (logit units)",
            f"coherence, {second} - {first}",
            f"wPLI, {second} - {first}",
            f"connectivity in {second}",
            "caution (artefacts)",
        ],
        table,
    )


def interactions_table_html(interactions: dict, classes: list[str]) -> str:
    """The kept interactions (``class_summary.json``'s ``interactions``): each in words, how
    much the two sides' correlation differs between the classes against the gate it beat,
    the mean attribution of the product per explained class and, with a contrast, its push."""
    per_class = {
        name: {row["interaction"]: row for row in rows}
        for name, rows in (interactions.get("per_class") or {}).items()
    }
    contrast = {row["interaction"]: row["value"] for row in interactions.get("contrast") or []}
    rows: dict[str, dict] = {}
    for name in classes:
        for key, row in per_class.get(name, {}).items():
            rows.setdefault(key, row)
    if not rows:
        return "<p>The models keep no interaction.</p>"

    def attribution(name: str, key: str) -> str:
        row = per_class.get(name, {}).get(key)
        return f"{row['value']:+.3g}" if row else "0"

    table = [
        [
            *key.split(" x "),
            f"{row['class_difference']:.2f} (gate {row['gate']:.2f})",
            *(attribution(name, key) for name in classes),
            *([f"{contrast.get(key, 0.0):+.3g}"] if contrast else []),
        ]
        for key, row in rows.items()
    ]
    return table_html(
        [
            "side a",
            "side b",
            "how much their correlation differs between the classes (the gate it beat)",
            *(f"attribution, class {name} (logit units)" for name in classes),
            *(["class contrast (logit units)"] if contrast else []),
        ],
        table,
    )


def interactions_lead(
    products: list[dict], contrast_pairs, bands: list[str], channels: list[str]
) -> str | None:
    """What the class contrast section says first when the kept interactions carry more of
    the contrast than any single pair: the strongest product's push (``products``: the
    interactions' contrast rows, ``value`` in logit units) against the strongest pair's
    (``contrast_pairs`` (T, C, C), logit units); None otherwise (or without products)."""
    if not products:
        return None
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    pairs = np.abs(np.asarray(contrast_pairs)[:, upper_i, upper_j])  # (T, n_pairs)
    band, pair = np.unravel_index(np.argmax(pairs), pairs.shape)
    strongest = max(products, key=lambda row: abs(row["value"]))
    if abs(strongest["value"]) <= pairs[band, pair]:
        return None
    total = sum(row["value"] for row in products)
    together = (
        f" (the {len(products)} kept products together {total:+.3g})" if len(products) > 1 else ""
    )
    if not pairs[band, pair] > 0:  # no pair carries any of it: name none
        return (
            "The kept interactions carry more of the class contrast than any single pair: "
            f"{strongest['interaction']} pushes {strongest['value']:+.3g} logit "
            f"units{together}, and no channel pair carries any of it (every pair 0). The "
            "classes differ in how those entries combine, which no pair shows on its own, so "
            "no band is outlined and no pair of it is drawn on the head (the Interactions "
            "section lists every kept interaction)."
        )
    return (
        "The kept interactions carry more of the class contrast than any single pair: "
        f"{strongest['interaction']} pushes {strongest['value']:+.3g} logit units{together}, "
        f"against at most {pairs[band, pair]:.3g} for a pair ({bands[band]} "
        f"{channels[upper_i[pair]]}-{channels[upper_j[pair]]}). The classes differ in how "
        "those entries combine, which no pair shows on its own: read the pairs below as what "
        "is left beside the interactions, not as the cause (the Interactions section lists "
        "every kept interaction)."
    )


def no_band_note(
    name: str, paths: dict | None, products: list[dict], band: str | None = None
) -> str:
    """What carries the explained logit of class ``name`` when no connectivity entry carries
    any of it (its band importance all 0, no top band): its kept interactions' mean
    attributions (``products``, ``class_summary.json``'s ``interactions.per_class`` rows,
    logit units) and how its ``paths`` (``class_summary.json``'s ``paths.target``: total,
    linear, transformer; None without a linear path) split it; ``band``: the band the head
    plots show, chosen with ``--band`` (None: no head plot is drawn for the class)."""
    carried = [row for row in products if row.get("value")]
    if carried:
        strongest = max(carried, key=lambda row: abs(row["value"]))
        total = sum(row["value"] for row in carried)
        together = (
            f" (the {len(carried)} kept products together {total:+.3g})" if len(carried) > 1 else ""
        )
        what = (
            "it is carried by the kept interactions' products, which no single pair shows: "
            f"{strongest['interaction']} {strongest['value']:+.3g} logit units{together}"
        )
    else:
        what = "it is carried by the model's inputs beside the connectivity entries"
    split = (
        f"; of its change from the typical training recording ({paths['total']:+.2f}), "
        f"{paths['linear']:+.2f} comes from the linear path and {paths['transformer']:+.2f} "
        "from the transformer"
        if paths
        else ""
    )
    return (
        f"{name}: no connectivity entry carries any of its logit (every band's importance is "
        f"0), so the band chart outlines no band for it and "
        + (
            "no head plot is drawn"
            if band is None
            else f"its head plot ({band}, chosen with --band) shows no pair"
        )
        + f": {what}"
        f"{split}."
    )
