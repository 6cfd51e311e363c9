"""The HTML report of a run folder (``eegformer report``): one self-contained file.

Built with :class:`mne.Report` (its scripts and styles are inlined; figures are embedded as
base64 PNG), from the run folder's files (docs/architecture.md) and, optionally, an
``eegformer explain`` output folder. Sections, each present even when its inputs are missing
(it then says what is missing and how to get it):

Verdict (first): the score with its interval, the comparison with every reference model,
   shortcuts, the permutation p and calibration, in a box (:mod:`calibration_report`).
0. Run summary: preset, epochs, evaluation scheme, seed, classes and positive class, data,
   model, final model, versions (``config.json``, ``metrics.json``).
1. Dataset: recordings, participants, classes, age and sex per class, preprocessing failures
   (the manifest of the training data, whose folder ``config.json`` names); then the
   preprocessing: every setting of that folder's ``preprocess.json``, the crop first.
2. Cross-validation: mean +- std of each metric per model (XAIguiFormer, the logistic
   regression and tangent-space references, ablations if present) with a plain-language note
   on each metric and the paired intervals, confusion matrix, ROC and precision-recall curves
   from the out-of-fold predictions, a sortable table of every recording's out-of-fold prediction
   (misclassified first), training curves per fold.
3. Is the score real?: the shortcut audit and the permutation test (:mod:`trust_report`),
   then how far to trust a probability: calibration, reliability diagram, prediction-set
   coverage (:mod:`calibration_report`); then the per-recording table and training curves.
4. Attention: what the coarse and refined attention do, out of fold (metrics.json's
   ``attention``: entropy, residual share, the explanation's part of the refined attention,
   the logit change when attention is replaced by a uniform mean or the identity) and the
   entropy per epoch on the validation participants (history.jsonl).
5. Explanations: which model and recordings they come from (and whether those recordings
   were the model's training data, or were explained out of fold), band importance per class
   with what its sign is against (the reference connectome), the strongest channel-pair
   attributions per class on the head (MNE's sensor topomap, montage positions, a colour bar
   per class) in the class's top band of that chart (or ``--band``), the class contrast (two
   classes on one signed scale, its strongest pairs with the connectivity difference), pairs
   that artefacts can fake dashed and named, coarse versus refined attention per layer as
   differences from uniform attention.

Tables wrap their cells to the page's width (:data:`REPORT_CSS`); legends sit under their
plots, over no data (:func:`report_figures.legend_below`).

No MNE tags: every item is added without them (:func:`_untagged_report`) and the tag filter is
hidden (:data:`REPORT_CSS`).

This module reads the run folder and assembles the sections; the figures are in
:mod:`report_figures` (plain data in, a matplotlib figure out, so each can be tested and reused
alone) and the tables and notes in :mod:`report_tables` (plain data in, HTML out).
"""

from __future__ import annotations

import html
import json
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot (report_figures chooses it too; either may come first)
import matplotlib.pyplot as plt

from eegformer_cli import console
from eegformer_cli.atomic import ensure_dir, read_json, write_bytes
from eegformer_cli.errors import InputDataError, OutputError, UsageError, check_choice
from eegformer_cli.evaluation.metrics import describe_comparison
from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.experiment import run_folder
from eegformer_cli.explain.calibration_report import add_calibration_section, add_verdict
from eegformer_cli.explain.report_figures import (
    attention_entropy_figure,
    attention_figure,
    band_importance_figure,
    confusion_matrix_figure,
    connectivity_head_figure,
    contrast_figure,
    roc_pr_figure,
    training_curves_figure,
)
from eegformer_cli.explain.report_tables import (
    attention_diagnostics_html,
    band_importance_note,
    caution_note,
    contrast_note,
    contrast_table_html,
    dataset_summary_html,
    explanations_source_html,
    interactions_table_html,
    metric_notes_html,
    metrics_html,
    oof_table_html,
    preprocessing_html,
    run_summary_html,
)
from eegformer_cli.explain.trust_report import add_trust_section
from eegformer_cli.preprocess.output import MANIFEST_NAME, read_manifest

#: Styles added to MNE's page: the tag filter hidden (the report has no tags), the notes boxed.
REPORT_CSS = """
#filter-by-tags-dropdown-menu { display: none !important; }
.eeg-note { background: #f3f6fb; border-left: 4px solid #4a6fa5; padding: .6em 1em;
            margin: .8em 0; font-size: .92em; }
.eeg-note dt { font-weight: 600; margin-top: .35em; }
.eeg-note dd { margin-left: 1.2em; margin-bottom: .1em; }
.eeg-oof, .eeg-oof table, .eeg-oof th, .eeg-oof td { font-size: 13px; }
/* tables wrap to the page's width instead of running past its edge: cells break between
   words (a word longer than its column breaks too); the per-recording table, 11 columns of
   class names and ids, also inside words, its sortable headers included */
table.table { max-width: 100%; }
table.table td, table.table th { overflow-wrap: break-word; }
.eeg-oof td { overflow-wrap: anywhere; }
.eeg-oof .bootstrap-table .fixed-table-container .table thead th .th-inner {
  white-space: normal; overflow-wrap: anywhere; padding-left: .3rem; }
"""


# ----------------------------------------------------------------------------- report


def _check_run_dir(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    run_folder.read_config(run_dir)  # InputDataError when it is not a run folder
    return run_dir


def _check_explanations_match(run_dir: Path, explanations_dir: Path) -> None:
    """Raise InputDataError when ``explanations_dir`` explains another model than the run's
    (other classes, bands or channels than its ``config.json``): a report must not put one
    dataset's explanations beside another's metrics."""
    from eegformer_cli.explain.class_summary import load_class_summary

    config = run_folder.read_config(run_dir)
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
            hint=f"run `eegformer explain {run_dir / 'model.pt'} DATA --out DIR`",
        )


def report_title(config: dict) -> str:
    """The report's title from a run's ``config.json``: the model, the data and the label, e.g.
    "XAIguiFormer (default preset) on sample_data: diagnosis". The data is named by the
    folder ``preprocess`` read (its ``preprocess.json`` inputs: one folder's name, or the
    folders' names joined; for recording files, the folder holding them above BIDS-style
    ``eeg`` / ``sub-*`` / ``ses-*`` folders), else by the preprocess output folder."""
    data_dir = Path(config.get("data_dir") or "data")
    inputs = []
    settings_file = data_dir / "preprocess.json"
    if settings_file.is_file():
        try:
            inputs = [
                str(i)
                for i in json.loads(settings_file.read_text(encoding="utf-8")).get("inputs") or []
            ]
        except ValueError:  # a damaged file only loses the nicer name
            inputs = []
    names = list(dict.fromkeys(_dataset_name(Path(i)) for i in inputs))
    data = " + ".join(names) if names else data_dir.name
    return (
        f"XAIguiFormer ({config.get('preset', 'default')} preset) on {data}: "
        f"{config.get('label_column', 'label')}"
    )


def _dataset_name(path: Path) -> str:
    """The dataset an input path stands for (see :func:`report_title`)."""
    folder = path if path.is_dir() or not path.suffix else path.parent
    while folder.name == "eeg" or folder.name.startswith(("sub-", "ses-")):
        folder = folder.parent
    return folder.name


def _untagged_report(title: str):
    """An :class:`mne.Report` whose items carry no tags unless given: MNE's defaults
    ("custom-html", "custom-figure") only add badges and a tag filter, which say nothing here."""
    import mne

    class UntaggedReport(mne.Report):
        def add_html(self, html, title, *, tags=(), **kwargs):
            return super().add_html(html, title, tags=tags, **kwargs)

        def add_figure(self, fig, title, *, tags=(), **kwargs):
            return super().add_figure(fig, title, tags=tags, **kwargs)

    report = UntaggedReport(title=title, verbose="error")
    report.add_custom_css(REPORT_CSS)
    return report


def build_report(
    run_dir: str | Path, explanations_dir: str | Path | None = None, band: str | None = None
):
    """An :class:`mne.Report` of the run (module docs); ``band``: the band the head plots
    show (None: each chart's top band). Raises InputDataError when ``run_dir`` is not a run
    folder (no ``config.json``)."""
    run_dir = Path(run_dir)
    config = run_folder.read_config(run_dir)
    metrics = run_folder.read_metrics(run_dir)
    history = run_folder.read_history(run_dir)
    report = _untagged_report(report_title(config))
    add_verdict(report, metrics)
    _add_run_summary(report, run_dir, config, metrics)
    _add_dataset(report, config)
    _add_preprocessing(report, config)
    _add_cross_validation(report, run_dir, metrics, history)
    if metrics is not None:  # without it, the cross-validation section says why
        add_trust_section(report, run_dir, metrics)
        add_calibration_section(report, metrics)
        _add_predictions_and_curves(report, run_dir, metrics, history)
    _add_attention(report, metrics, history)
    _add_explanations(report, run_dir, explanations_dir, band)
    return report


def _note(report, title: str, text: str, section: str) -> None:
    report.add_html(f"<p>{html.escape(text)}</p>", title, section=section)


def _figure(report, fig, title: str, section: str, caption: str | None = None) -> None:
    report.add_figure(fig, title, section=section, image_format="png", caption=caption)
    plt.close(fig)


def _add_run_summary(report, run_dir: Path, config: dict, metrics: RunMetrics | None) -> None:
    planned = None if metrics and metrics.scheme else run_folder.read_planned_folds(run_dir)
    scheme = metrics.scheme if metrics and metrics.scheme else planned and planned[0]
    report.add_html(
        run_summary_html(run_dir, config, metrics, scheme),
        "Which run this is",
        section="Run summary",
    )


def _add_dataset(report, config: dict) -> None:
    section = "Dataset"
    data_dir = Path(config.get("data_dir") or "")
    manifest = data_dir / MANIFEST_NAME
    if not manifest.is_file():
        _note(
            report,
            "Dataset summary",
            f"The training data's manifest ({manifest}) is not "
            "available, so the dataset cannot be summarised here.",
            section,
        )
        return
    label_column = config.get("label_column", "label")
    report.add_html(
        f"<p>Data: {html.escape(str(data_dir))}, label column "
        f"<code>{html.escape(label_column)}</code>.</p>"
        + dataset_summary_html(read_manifest(data_dir), label_column),
        "Dataset summary",
        section=section,
    )


def _add_preprocessing(report, config: dict) -> None:
    """Every setting of the training data's ``preprocess.json``, the crop first."""
    section = "Preprocessing"
    settings_file = Path(config.get("data_dir") or "") / "preprocess.json"
    if not settings_file.is_file():
        _note(
            report,
            "Preprocessing settings",
            f"The training data's preprocessing settings ({settings_file}) are not available, "
            "so they cannot be listed here (model.pt keeps a copy: `eegformer predict` and "
            "`explain` use it).",
            section,
        )
        return
    report.add_html(
        f"<p>How the recordings became connectomes: <code>{html.escape(str(settings_file))}"
        "</code>, every setting, the crop first (a new recording given to "
        "<code>eegformer predict</code> is preprocessed the same way).</p>"
        + preprocessing_html(read_json(settings_file)),
        "Preprocessing settings",
        section=section,
    )


def _add_cross_validation(
    report, run_dir: Path, metrics: RunMetrics | None, history: list[dict]
) -> None:
    section = "Cross-validation"
    if metrics is None:
        why = (
            "incomplete run: no metrics.json (the training did not finish); rerun the same "
            "`eegformer train` command, or `eegformer train --merge` after `--fold` jobs"
        )
        console.warn(f"{run_dir}: {why}")
        _note(report, "Metrics", why, section)
        return
    incomplete = _incomplete_run(run_dir, metrics)
    if incomplete:
        console.warn(f"{run_dir}: {incomplete}")
        _note(report, "Incomplete run", incomplete, section)
    labels = [str(label) for label in metrics.labels]
    paired = "".join(
        "<p>Paired over the same folds: " + html.escape(describe_comparison(comparison)) + ".</p>"
        for comparison in metrics.all_comparisons
    )
    chance = (
        f" Chance level: bac {1 / len(labels):.2f} ({len(labels)} classes), auroc 0.50."
        if labels
        else ""
    )
    report.add_html(
        "<p>Out-of-fold metrics, mean +- std over folds (bac = balanced accuracy)."
        f"{chance}</p>" + metrics_html(metrics) + paired,
        "Metrics",
        section=section,
    )
    report.add_html(metric_notes_html(metrics), "What these numbers mean", section=section)
    matrix = metrics.transformer.confusion_matrix
    if matrix is not None:
        _figure(
            report,
            confusion_matrix_figure(matrix, labels, n_folds=metrics.n_folds),
            "Confusion matrix",
            section,
        )
    if run_folder.has_oof_predictions(run_dir):
        fold_means = {name: model.mean for name, model in metrics.models.items()}
        predictions = run_folder.read_oof_predictions(run_dir)
        try:
            figure = roc_pr_figure(predictions, labels, metrics.positive_label, fold_means)
        except (KeyError, TypeError, ValueError) as exc:  # a truncated or edited table
            raise run_folder.damaged_oof_predictions(run_dir, exc) from None
        _figure(
            report,
            figure,
            "ROC and precision-recall curves",
            section,
            caption=(
                "Each curve pools the out-of-fold predictions of every fold into one ranking; the "
                "metrics table gives the mean of the per-fold values instead. The two differ "
                "because each fold's model puts its probabilities on a scale of its own."
            ),
        )


def _add_predictions_and_curves(
    report, run_dir: Path, metrics: RunMetrics, history: list[dict]
) -> None:
    """Every recording's out-of-fold prediction and the training curves, after the verdict's
    evidence (metrics, audit, calibration)."""
    section = "Per-recording predictions and training"
    labels = [str(label) for label in metrics.labels]
    if run_folder.has_oof_predictions(run_dir):
        try:
            table = oof_table_html(run_folder.read_oof_predictions(run_dir), labels)
        except (KeyError, TypeError, ValueError) as exc:
            raise run_folder.damaged_oof_predictions(run_dir, exc) from None
        report.add_html(table, "Per-recording out-of-fold predictions", section=section)
    if history:
        _figure(report, training_curves_figure(history), "Training curves per fold", section)


def _add_attention(report, metrics: RunMetrics | None, history: list[dict]) -> None:
    section = "Attention"
    attention = metrics.attention if metrics else None
    if not attention:
        _note(
            report,
            "What attention does",
            "No attention diagnostics: the run has no "
            "metrics.json, or an earlier version of eegformer trained it.",
            section,
        )
        return
    report.add_html(
        "<p>What the attention of the two passes does on the test participants of every fold "
        "(mean over a fold's recordings, then over folds). <b>Entropy</b>: how spread each "
        f"band's attention is, in nats; uniform attention over the {attention['n_bands']} bands "
        f"gives ln {attention['n_bands']} = {attention['uniform_entropy']:.3f} (100 %), attention "
        "to one band gives 0. <b>Residual share</b>: the size of the attention update against "
        "the tokens it is added to. <b>Explanation / rest</b> (refined pass): how large the "
        "explanation's part of the refined attention is against the part that does not depend "
        "on it (the qkv bias, or the content logits q.k for band-share guidance); near 0 means "
        "the refined pass ignores the explanation. <b>Logit change</b> and <b>flips</b>: how "
        "much that pass's logits move, and how many segments change class, when the layer's "
        "attention is replaced by a plain mean over bands (uniform) or by the identity; near 0 "
        "means the attention could be removed without changing the output.</p>"
        + attention_diagnostics_html(attention),
        "What attention does (out of fold)",
        section=section,
    )
    if any(h.get("attention") for h in history):
        _figure(
            report,
            attention_entropy_figure(history, attention["uniform_entropy"]),
            "Attention entropy per epoch",
            section,
        )


def _incomplete_run(run_dir: Path, metrics: RunMetrics) -> str | None:
    """Why the run's metrics are not the whole run (metrics.json's own ``incomplete``; for a
    run of an earlier version, fewer folds than ``splits.json`` plans or no final model
    file), or None."""
    if metrics.complete is False:
        return str(metrics.incomplete or "incomplete run")
    splits = run_folder.read_planned_folds(run_dir)
    planned = len(splits[1]) if splits else None
    finished = metrics.n_folds
    if planned and finished is not None and finished < planned:
        return (
            f"incomplete run: {finished} of {planned} folds finished, so the metrics cover "
            "only those; rerun the same `eegformer train` command to finish it"
        )
    if not run_folder.has_final_model(run_dir):
        return (
            "incomplete run: no model.pt (the final model was not trained); rerun the same "
            "`eegformer train` command to finish it"
        )
    return None


def _add_explanations(report, run_dir: Path, explanations_dir, band: str | None) -> None:
    from eegformer_cli.explain.class_summary import load_class_summary

    section = "Explanations"
    if explanations_dir is None:
        _note(
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
    classes, bands, _channels = summary["classes"], summary["bands"], summary["channels"]
    if not classes:
        _note(report, "Explanations", f"{folder} holds no explained recording.", section)
        return
    from eegformer_cli.explain.export import read_recordings_table

    written = read_json(folder / "class_summary.json")
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
    _add_attribution_figures(report, summary, settings, section, band)
    _add_contrast(report, summary, written.get("contrast"), settings, section, band)
    if written.get("interactions"):
        report.add_html(
            interactions_table_html(written["interactions"], classes),
            "Interactions the models use",
            section=section,
        )
    for k, name in enumerate(classes):
        _figure(
            report,
            attention_figure(
                summary["attention_coarse"][k],
                summary["attention_refined"][k],
                bands,
                f"Attention, class {name} (mean over its recordings)",
            ),
            f"Coarse vs refined attention: {name}",
            section,
        )


def _add_attribution_figures(
    report, summary: dict, settings: dict, section: str, band: str | None
) -> None:
    """Band importance and the channel pairs on the head, each said against the reference
    connectome the explanations used (``settings["baseline"]``); the head shows each class's
    top band of the chart, or ``band``."""
    classes, bands, channels = summary["classes"], summary["bands"], summary["channels"]
    reference = str(settings.get("baseline") or "zero connectivity")
    _figure(
        report,
        band_importance_figure(summary["band_importance"], classes, bands, reference),
        "Band importance per class",
        section,
        caption=band_importance_note(reference),
    )
    which = (
        f"the band {band} (chosen with --band)"
        if band is not None
        else "the class's top band (the outlined bar of the band-importance chart: the "
        "largest |band importance|; `eegformer report --band NAME` shows another)"
    )
    _figure(
        report,
        connectivity_head_figure(
            summary["channel_pairs"],
            classes,
            bands,
            channels,
            band_importance=summary["band_importance"],
            band=band,
            cautions=settings.get("artefact_caution"),
            reference=reference,
        ),
        "Strongest channel-pair attributions",
        section,
        caption=(
            "Each line joins two sensors (montage positions, seen from above, nose up, "
            "left hemisphere on the left) whose connectivity (coherence + wPLI) in "
            f"{which} the explained-class logit depends on most (captum "
            f"attribution against {reference}): red raises the class's logit compared "
            "with it, blue lowers it; thicker is stronger. Each class on its own colour "
            "scale (its colour bar gives the values, logit units). " + caution_note(settings)
        ),
    )


def _add_contrast(
    report,
    summary: dict,
    contrast: dict | None,
    settings: dict,
    section: str,
    band: str | None,
) -> None:
    """The class contrast (figure and table of its strongest pairs) beside the per-class
    attributions, or a note on why there is none."""
    from eegformer_cli.explain.export import TOP_PAIRS, contrast_rows

    title = "Class contrast"
    if contrast is None:
        _note(
            report,
            title,
            "No class contrast: the model has more than two classes and explain was not asked "
            "for one, or an earlier eegformer wrote these explanations. `eegformer explain "
            "... --contrast A B` compares two classes.",
            section,
        )
        return
    first, second = contrast["classes"]
    if "contrast_pairs" not in summary:
        counts = ", ".join(
            f"{c} {n}" for c, n in zip(contrast["classes"], contrast["n_recordings"])
        )
        _note(
            report,
            title,
            f"No class contrast of {second} against {first}: grouped by "
            f"{contrast['grouped_by']}, a class has no recording ({counts}).",
            section,
        )
        return
    cautions = settings.get("artefact_caution") or {}
    _figure(
        report,
        contrast_figure(
            summary["contrast_pairs"],
            summary["contrast_band"],
            summary["coh_difference"] + summary["wpli_difference"],
            [first, second],
            summary["bands"],
            summary["channels"],
            band=band,
            cautions=cautions,
        ),
        f"Class contrast: {second} against {first}",
        section,
        caption=contrast_note(contrast, settings) + " " + caution_note(settings),
    )
    columns, rows = contrast_rows(
        {**summary, "classes": [first, second], "grouped_by": contrast["grouped_by"]},
        summary["bands"],
        summary["channels"],
        cautions,
    )
    report.add_html(
        contrast_table_html([dict(zip(columns, row)) for row in rows[:TOP_PAIRS]]),
        f"Class contrast: the {TOP_PAIRS} strongest pairs",
        section=section,
    )


def write_report(
    run_dir: str | Path,
    explanations_dir: str | Path | None,
    out: str | Path,
    band: str | None = None,
) -> Path:
    """Build the report and write it atomically to ``out`` (one HTML file); return the path.

    ``band``: the band whose channel pairs the head plots show (None: each chart's top band).
    Raises InputDataError when ``run_dir`` is not a run folder or ``explanations_dir`` is not
    an ``eegformer explain`` output, UsageError for a ``band`` the explanations lack (or
    without explanations), and OutputError when ``out`` is a folder or its folder cannot be
    created or written (all checked before the build)."""
    _check_run_dir(run_dir)
    if (
        explanations_dir is not None
        and not (Path(explanations_dir) / "class_summary.npz").is_file()
    ):
        raise InputDataError(
            "not an explain output folder (no class_summary.npz)",
            path=explanations_dir,
            hint="pass the --out folder of `eegformer explain`",
        )
    if explanations_dir is not None:
        _check_explanations_match(Path(run_dir), Path(explanations_dir))
    if band is not None:
        if explanations_dir is None:
            raise UsageError(
                "--band chooses the band of the explanation figures: give --explanations too"
            )
        from eegformer_cli.explain.class_summary import load_class_summary

        check_choice("--band", band, tuple(load_class_summary(explanations_dir)["bands"]))
    out = Path(out)
    if out.is_dir():
        raise OutputError("is a folder", path=out, hint="give a file name, e.g. report.html")
    ensure_dir(out.parent)
    report = build_report(run_dir, explanations_dir, band)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "report.html"
        report.save(staged, open_browser=False, overwrite=True, verbose="error")
        write_bytes(out, staged.read_bytes())
    return out
