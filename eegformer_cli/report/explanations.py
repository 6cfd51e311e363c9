"""The report's section "Explanations", from an ``eegformer explain`` folder: which model and
recordings they come from, band importance per class, the strongest channel pairs on the
head, the class contrast (figure and its strongest pairs, said first where the kept
interactions carry more of it than any pair), the explained logit in time (:mod:`.time_course`)
and coarse versus refined attention per class; and the check that the folder explains the run's model
(its classes, bands and channels). The words and tables are :mod:`.explanation_notes`'s, the
figures :mod:`.figures`'.
"""

from __future__ import annotations

from pathlib import Path

from eegformer_cli.errors import InputDataError
from eegformer_cli.experiment import run_folder
from eegformer_cli.report.attention_figures import attention_figure
from eegformer_cli.report.explanation_notes import (
    band_importance_note,
    caution_note,
    contrast_note,
    contrast_sentences_html,
    contrast_table_html,
    explanations_source_html,
    interactions_lead,
    no_band_note,
)
from eegformer_cli.report.figures import (
    band_importance_figure,
    connectivity_head_figure,
    contrast_figure,
)
from eegformer_cli.report.page import add_figure, add_note
from eegformer_cli.report.power_figures import add_band_power_section
from eegformer_cli.report.time_course import add_time_course_section


def check_explanations_match(run_dir: Path, explanations_dir: Path) -> None:
    """Raise InputDataError when ``explanations_dir`` explains another model than the run's
    (other classes, bands or channels than its ``config.json``): a report must not put one
    dataset's explanations beside another's metrics."""
    from eegformer_cli.explain.class_summary import load_class_summary

    config = run_folder.read_config_file(run_dir)
    summary = load_class_summary(explanations_dir)
    model = config.get("model_config", {})
    expected = {
        "classes": config.get("labels"),
        "bands": model.get("band_names"),
        "channels": model.get("channel_names"),
    }
    explained = {
        "classes": summary["label_names"],
        "bands": summary["bands"],
        "channels": summary["channels"],
    }
    differing = [
        f"{key} {explained[key]} (run: {expected[key]})"
        for key in expected
        if expected[key] is not None and list(expected[key]) != explained[key]
    ]
    if differing:
        raise InputDataError(
            "explains another model than this run's: " + "; ".join(differing),
            path=explanations_dir,
            hint=f"run `eegformer explain {run_folder.model_path(run_dir)} DATA --out DIR`",
        )


def add_explanations_section(report, run_dir: Path, explanations_dir, band: str | None) -> None:
    """Add the section to ``report`` (an :class:`mne.Report`) from ``explanations_dir`` (None:
    a note on how to add it); ``band``: the band the head plots show (None: each chart's top
    band)."""
    from eegformer_cli.explain.class_summary import load_class_summary

    section = "Explanations"
    if explanations_dir is None:
        add_note(
            report,
            "How to add explanations",
            "No explanations: no --explanations folder was given. Run "
            f"`eegformer explain {run_dir} "
            "DATA --out EXPLANATIONS` (the run folder: its recordings explained out of "
            "fold) and then `eegformer report "
            f"{run_dir} --explanations EXPLANATIONS`.",
            section,
        )
        return
    folder = Path(explanations_dir)
    summary = load_class_summary(folder)
    classes = summary["classes"]
    if not classes:
        add_note(report, "Explanations", f"{folder} holds no explained recording.", section)
        return
    from eegformer_cli.explain.class_summary import read_class_summary_json
    from eegformer_cli.explain.export import read_recordings_table

    written = read_class_summary_json(folder)
    settings = written.get("settings", {})
    report.add_html(
        explanations_source_html(
            run_dir,
            folder,
            settings,
            read_recordings_table(folder),
            classes,
            [int(n) for n in summary["n_recordings"]],
        ),
        "About the explanations",
        section=section,
    )
    _add_paths_note(report, written.get("classes") or {}, section)
    _add_attribution_figures(report, summary, written, section, band)
    add_band_power_section(report, summary, written, section)
    _add_contrast(
        report,
        summary,
        written.get("contrast"),
        written.get("interactions"),
        settings,
        section,
        band,
    )
    add_time_course_section(report, folder, section)
    _add_attention_figures(report, summary, written.get("classes") or {}, section)


def _add_paths_note(report, classes: dict, section: str) -> None:
    """A note on how much of each class's explained logit the model's linear path and its
    transformer carry (``class_summary.json``'s ``paths``; nothing for a model without a linear
    path)."""
    sentences = []
    for name, entry in classes.items():
        paths = (entry.get("paths") or {}).get("target")
        if paths:
            tangent = paths.get("tangent_space")
            sentences.append(
                f"{name} ({entry['n_recordings']} recordings): the logit of {name} moved by "
                f"{paths['total']:+.2f} on average from the typical training recording, "
                f"{paths['linear']:+.2f} of it from the linear path"
                + ("" if tangent is None else f", {tangent:+.2f} from the tangent-space path,")
                + f" and {paths['transformer']:+.2f} from the transformer"
            )
    tangent = any(
        "tangent_space" in ((entry.get("paths") or {}).get("target") or {})
        for entry in classes.values()
    )
    if sentences:
        add_note(
            report,
            "The model's three paths" if tangent else "The model's two paths",
            (
                "The model adds a linear path and a tangent-space path (logistic regressions "
                "fitted first, on the mean connectivity and on the band covariances)"
                if tangent
                else "The model adds a linear path (a logistic regression fitted first)"
            )
            + " and a transformer trained on what it misses; the maps below are of the whole "
            "model. "
            + "; ".join(sentences)
            + ". A transformer part near 0 means the transformer path adds nothing here "
            "(it was not kept, or it agrees with the static stage).",
            section,
        )


def attention_unused(classes: dict) -> bool:
    """Whether the transformer carries none of any explained class's logit (``classes``:
    ``class_summary.json``'s, each with its ``paths``; False for a model without a linear
    path, whose transformer is the whole model): the transformer path was not kept in the models
    explained, so their attention never reached the output."""
    parts = [(entry.get("paths") or {}).get("target") for entry in classes.values()]
    return bool(parts) and all(part and part["transformer"] == 0 for part in parts)


def _add_attention_figures(report, summary: dict, classes: dict, section: str) -> None:
    """Coarse versus refined attention, one figure per explained class (its mean); first,
    where the transformer carries none of the explained logits (:func:`attention_unused`),
    a note that this attention did not reach the output."""
    if attention_unused(classes):
        add_note(
            report,
            "Attention: it did not reach the output",
            "The attention did not reach the output: the transformer carries none of the "
            "explained logits (0 for every class: the transformer path was not kept in the "
            "models explained, so each prediction is the static stage's). The heat maps below are "
            "of a transformer that was trained but not used; they say nothing about what "
            "the model's predictions rest on.",
            section,
        )
    for k, name in enumerate(summary["classes"]):
        add_figure(
            report,
            attention_figure(
                summary["attention_coarse"][k],
                summary["attention_refined"][k],
                summary["bands"],
                f"Attention, class {name} (mean over its recordings)",
            ),
            f"Coarse vs refined attention: {name}",
            section,
        )


def _add_attribution_figures(
    report, summary: dict, written: dict, section: str, band: str | None
) -> None:
    """Band importance and the channel pairs on the head, each said against the baseline
    connectome the explanations used (``settings["baseline"]``); the head shows each class's
    top band of the chart, or ``band``. A class whose bands are all 0 (no connectivity entry
    carries any of its logit) gets no head plot without ``band`` but a note on what carries
    its logit (``written``: ``class_summary.json``, its ``paths`` and kept interactions)."""
    from eegformer_cli.explain.attributions import top_band

    classes, bands, channels = summary["classes"], summary["bands"], summary["channels"]
    settings = written.get("settings", {})
    baseline = str(settings.get("baseline") or "zero connectivity")
    add_figure(
        report,
        band_importance_figure(summary["band_importance"], classes, bands, baseline),
        "Band importance per class",
        section,
        caption=band_importance_note(baseline, summary["band_importance"], classes, bands),
    )
    which = (
        f"the band {band} (chosen with --band)"
        if band is not None
        else "the class's top band (the outlined bar of the band-importance chart: the "
        "largest |band importance|; `eegformer report --band NAME` shows another)"
    )
    empty = [k for k, values in enumerate(summary["band_importance"]) if top_band(values) is None]
    if empty:
        _add_no_band_note(report, written, [classes[k] for k in empty], band, section)
    drawn = [k for k in range(len(classes)) if band is not None or k not in empty]
    if not drawn:
        return
    add_figure(
        report,
        connectivity_head_figure(
            summary["channel_pairs"][drawn],
            [classes[k] for k in drawn],
            bands,
            channels,
            band_importance=summary["band_importance"][drawn],
            band=band,
            cautions=settings.get("artefact_caution"),
            baseline=baseline,
        ),
        "Strongest channel-pair attributions",
        section,
        caption=(
            "Each line joins two sensors (montage positions, seen from above, nose up, "
            "left hemisphere on the left) whose connectivity (coherence + wPLI) in "
            f"{which} the explained-class logit depends on most (captum "
            f"attribution against {baseline}): red raises the class's logit compared "
            "with it, blue lowers it; thicker is stronger. Each class on its own colour "
            "scale (its colour bar gives the values, logit units). " + caution_note(settings)
        ),
    )


def _add_no_band_note(
    report, written: dict, classes: list[str], band: str | None, section: str
) -> None:
    """The note on what carries the logit of each of ``classes``, whose bands are all 0
    (``written``: ``class_summary.json``, its ``paths`` and kept interactions; ``band``: the
    band named with --band, None: their head plots are not drawn)."""
    per_class = ((written.get("interactions") or {}).get("per_class")) or {}
    entries = written.get("classes") or {}
    add_note(
        report,
        "Where no band carries the logit",
        " ".join(
            no_band_note(
                name,
                (entries.get(name, {}).get("paths") or {}).get("target"),
                per_class.get(name) or [],
                band,
            )
            for name in classes
        ),
        section,
    )


def _no_contrast(contrast: dict | None, summary: dict) -> str | None:
    """Why there is no class contrast to show (None: there is one)."""
    if contrast is None:
        return (
            "No class contrast: the model has more than two classes and explain was not asked "
            "for one, or an earlier eegformer wrote these explanations. `eegformer explain "
            "... --contrast A B` compares two classes."
        )
    if "contrast_pairs" not in summary:
        first, second = contrast["classes"]
        counts = ", ".join(
            f"{c} {n}" for c, n in zip(contrast["classes"], contrast["n_recordings"])
        )
        return (
            f"No class contrast of {second} against {first}: grouped by "
            f"{contrast['grouped_by']}, a class has no recording ({counts})."
        )
    return None


def _add_contrast(
    report,
    summary: dict,
    contrast: dict | None,
    interactions: dict | None,
    settings: dict,
    section: str,
    band: str | None,
) -> None:
    """The class contrast (figure and table of its strongest pairs) beside the per-class
    attributions, or a note on why there is none; first, where the kept ``interactions``
    (``class_summary.json``'s) carry more of it than any single pair, a note saying so."""
    from eegformer_cli.explain.attributions import top_band

    why_not = _no_contrast(contrast, summary)
    if why_not is not None or contrast is None:
        add_note(report, "Class contrast", why_not or "", section)
        return
    first, second = contrast["classes"]
    lead = interactions_lead(
        (interactions or {}).get("contrast") or [],
        summary["contrast_pairs"],
        summary["bands"],
        summary["channels"],
    )
    no_band = top_band(summary["contrast_band"]) is None  # every band's sum 0
    if lead is not None:
        add_note(report, "Class contrast: the interactions first", lead, section)
    elif no_band:
        add_note(
            report,
            "Class contrast: no band carries it",
            f"No channel pair carries any of the contrast of {second} against {first} (every "
            "band's sum is 0), so no band is outlined and no pair of it is drawn on the head: the "
            "classes differ, for the model, in its inputs beside the connectivity entries "
            "(the kept interactions' products, where it keeps some).",
            section,
        )
    cautions = settings.get("artefact_caution") or {}
    add_figure(
        report,
        contrast_figure(summary, [first, second], band=band, cautions=cautions),
        f"Class contrast: {second} against {first}",
        section,
        caption=contrast_note(contrast, settings)
        + (
            " Here every band's sum is 0 (no channel pair carries any of the contrast): the "
            "bars alone, no head drawn."
            if band is None and no_band
            else ""
        )
        + " "
        + caution_note(settings),
    )
    _add_contrast_pairs(report, summary, contrast, cautions, section)


def _add_contrast_pairs(
    report, summary: dict, contrast: dict, cautions: dict, section: str
) -> None:
    """The class contrast's strongest pairs in sentences and a table, only those with a
    non-zero value (a pair of value 0 carries none of the contrast), or a line saying no pair
    carries any of it."""
    from eegformer_cli.explain.export import TOP_PAIRS, contrast_rows

    columns, rows = contrast_rows(
        {**summary, "classes": list(contrast["classes"]), "grouped_by": contrast["grouped_by"]},
        summary["bands"],
        summary["channels"],
        cautions,
    )
    strongest = [dict(zip(columns, row)) for row in rows[:TOP_PAIRS] if row[columns.index("value")]]
    report.add_html(
        contrast_sentences_html(strongest) + contrast_table_html(strongest)
        if strongest
        else "<p>No channel pair carries any of the class contrast: every pair's value is 0.</p>",
        f"Class contrast: the {TOP_PAIRS} strongest pairs",
        section=section,
    )
