"""The HTML report of a run folder (``eegformer report``): one self-contained file.

Built with :class:`mne.Report` (its scripts and styles are inlined; figures are embedded as
base64 PNG), from the run folder's files (docs/architecture.md) and, optionally, an
``eegformer explain`` output folder. Sections, each present even when its inputs are missing
(it then says what is missing and how to get it):

Verdict (first): the score with its interval, the comparison with every reference model,
   shortcuts, the permutation p and calibration, in a box (:mod:`.calibration`).
0. Run summary: preset, epochs, evaluation scheme, seed, classes and positive class, data,
   model, final model, versions (``config.json``, ``metrics.json``).
1. Dataset: recordings, participants, classes, age and sex per class, preprocessing failures
   (the manifest of the training data, whose folder ``config.json`` names); then the
   preprocessing: every setting of that folder's ``preprocess.json``, the crop first.
2. Cross-validation: mean +- std of each metric per model (XAIguiFormer, the logistic
   regression and tangent-space references, ablations if present) with a plain-language note
   on each metric and the paired intervals, confusion matrix, ROC and precision-recall curves
   from the out-of-fold predictions, what this N resolves (:mod:`.sample_size`), a sortable
   table of every recording's out-of-fold prediction (misclassified first), training curves
   per fold.
3. Is the score real?: the shortcut audit and the permutation test (:mod:`.trust`),
   then how far to trust a probability: calibration, reliability diagram, prediction-set
   coverage (:mod:`.calibration`); then the per-recording table and training curves.
4. Attention: what the coarse and refined attention do, out of fold (metrics.json's
   ``attention``: entropy, residual share, the explanation's part of the refined attention,
   the logit change when attention is replaced by a uniform mean or the identity), first
   whether the attention reached the output at all (the transformer path kept in no
   fold, or in some only: :func:`~eegformer_cli.experiment.verdict.attention_reach`), and
   the entropy per epoch on the validation participants (history.jsonl).
5. Interactions: what every fit's interaction screen kept, its best score and its gate, or
   that nothing was screened (:mod:`.interactions`); with explanations, what each kept
   interaction weighs in a prediction.
6. Explanations: which model and recordings they come from (and whether those recordings
   were the model's training data, or were explained out of fold), band importance per class
   with what its sign is against (the baseline connectome), the strongest channel-pair
   attributions per class on the head (MNE's sensor topomap, montage positions, a colour bar
   per class) in the class's top band of that chart (or ``--band``), the class contrast (two
   classes on one signed scale, its strongest pairs with the connectivity difference), pairs
   that artefacts can fake dashed and named, coarse versus refined attention per layer as
   differences from uniform attention.

Tables wrap their cells to the page's width (:data:`.page.REPORT_CSS`); legends sit under their
plots, over no data (:func:`.figures.legend_below`).

No MNE tags: every item is added without them (:func:`.page.untagged_report`) and the
tag filter is hidden (:data:`.page.REPORT_CSS`).

This module reads the run folder and assembles the sections from the run's files (0 to 4);
each other section has a module of its own: the verdict and calibration
(:mod:`.calibration`), "Is the score real?" (:mod:`.trust`), the interactions
(:mod:`.interactions`) and the explanations
(:mod:`.explanations`, its words and tables in :mod:`.explanation_notes`). The figures
are in :mod:`.figures` (plain data in, a matplotlib figure out, so each can be tested
and reused alone), the run's tables and notes in :mod:`.tables` (plain data in, HTML
out) and the page (no tags, its styles, a note, a figure) in :mod:`.page`.
"""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

from eegformer_cli import console
from eegformer_cli.atomic import ensure_dir, write_bytes
from eegformer_cli.errors import InputDataError, OutputError, UsageError, check_choice
from eegformer_cli.evaluation.metrics import describe_comparison
from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.experiment import run_folder
from eegformer_cli.experiment.verdict import LINEAR_PATH_SCORER, attention_reach, scorer
from eegformer_cli.preprocess.output import (
    MANIFEST_NAME,
    SETTINGS_NAME,
    read_manifest,
    read_settings_file,
)
from eegformer_cli.report.attention_figures import attention_entropy_figure
from eegformer_cli.report.calibration import add_calibration_section
from eegformer_cli.report.explanations import (
    add_explanations_section,
    check_explanations_match,
)
from eegformer_cli.report.figures import (
    confusion_matrix_figure,
    roc_pr_figure,
    training_curves_figure,
)
from eegformer_cli.report.interactions import add_interactions_section
from eegformer_cli.report.page import (
    add_figure,
    add_note,
    inline_code,
    untagged_report,
)
from eegformer_cli.report.preprocessing import preprocessing_html
from eegformer_cli.report.sample_size import add_sample_size_section
from eegformer_cli.report.tables import (
    attention_diagnostics_html,
    dataset_summary_html,
    metric_notes_html,
    metrics_html,
    oof_table_html,
    run_summary_html,
    training_curves_caption,
)
from eegformer_cli.report.trust import add_trust_section
from eegformer_cli.report.verdict_box import add_verdict

#: Characters per line of the confusion matrix's title (the model that carries the score, at
#: 10 pt: the narrowest matrix is 4.5 inches wide).
CONFUSION_TITLE_CHARACTERS = 44

# ----------------------------------------------------------------------------- report


def _check_run_dir(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    run_folder.read_config_file(run_dir)  # InputDataError when it is not a run folder
    return run_dir


def report_title(config: dict, run_dir: str | Path) -> str:
    """The report's title from a run's ``config.json`` and its folder: the model, the data, its
    crop, the label and the run folder, e.g. "XAIguiFormer (default preset) on sample_data,
    whole recordings: diagnosis; run folder run", so that the reports of a cropped and an
    uncropped run differ. The data is named by the folder ``preprocess`` read (its
    ``preprocess.json`` inputs: one folder's name, or the folders' names joined; for recording
    files, the folder holding them above BIDS-style ``eeg`` / ``sub-*`` / ``ses-*`` folders),
    else by the preprocess output folder; the crop is that file's (left out when the file is
    missing)."""
    data_dir = Path(config.get("data_dir") or "data")
    stored = read_settings_file(data_dir)  # None: a missing or damaged file only loses the
    inputs = stored.inputs if stored is not None else []  # nicer name and the crop
    names = list(dict.fromkeys(_dataset_name(Path(i)) for i in inputs))
    data = " + ".join(names) if names else data_dir.name
    if stored is not None and stored.settings is not None:
        crop = stored.crop_s
        data += f", first {crop:g} s of each recording" if crop else ", whole recordings"
    return (
        f"XAIguiFormer ({config.get('preset', 'default')} preset) on {data}: "
        f"{config.get('label_column', 'label')}; run folder {Path(run_dir).resolve().name}"
    )


def _dataset_name(path: Path) -> str:
    """The dataset an input path stands for (see :func:`report_title`)."""
    folder = path if path.is_dir() or not path.suffix else path.parent
    while folder.name == "eeg" or folder.name.startswith(("sub-", "ses-")):
        folder = folder.parent
    return folder.name


def build_report(
    run_dir: str | Path, explanations_dir: str | Path | None = None, band: str | None = None
):
    """An :class:`mne.Report` of the run (module docs); ``band``: the band the head plots
    show (None: each chart's top band). Raises InputDataError when ``run_dir`` is not a run
    folder (no ``config.json``)."""
    run_dir = Path(run_dir)
    config = run_folder.read_config_file(run_dir)
    metrics = run_folder.read_metrics(run_dir)
    history = run_folder.read_history(run_dir)
    report = untagged_report(report_title(config, run_dir))
    add_verdict(report, metrics)
    _add_run_summary(report, run_dir, config, metrics)
    _add_dataset(report, config)
    _add_preprocessing(report, config)
    _add_cross_validation(report, run_dir, metrics, history)
    if metrics is not None:  # without it, the cross-validation section says why
        add_sample_size_section(report, metrics, "Cross-validation")
        add_trust_section(report, run_dir, metrics)
        add_calibration_section(report, metrics)
        _add_predictions_and_curves(report, run_dir, config, metrics, history)
    _add_attention(report, metrics, history)
    add_interactions_section(report, run_dir, metrics, explanations_dir)
    add_explanations_section(report, run_dir, explanations_dir, band)
    return report


def _add_run_summary(report, run_dir: Path, config: dict, metrics: RunMetrics | None) -> None:
    planned = None if metrics and metrics.scheme else run_folder.read_planned_folds(run_dir)
    scheme = metrics.scheme if metrics and metrics.scheme else planned and planned[0]
    incomplete = _incomplete_run(run_dir, metrics) if metrics is not None else "no metrics.json"
    report.add_html(
        run_summary_html(run_dir, config, metrics, scheme, incomplete),
        "Which run this is",
        section="Run summary",
    )


def _add_dataset(report, config: dict) -> None:
    section = "Dataset"
    data_dir = Path(config.get("data_dir") or "")
    manifest = data_dir / MANIFEST_NAME
    if not manifest.is_file():
        add_note(
            report,
            "Dataset summary",
            f"The training data's manifest ({manifest}) is not "
            "available, so the dataset cannot be summarised here.",
            section,
        )
        return
    label_column = config.get("label_column", "label")
    report.add_html(
        f"<p>Data: {inline_code(str(data_dir))}, label column "
        f"<code>{inline_code(label_column)}</code>.</p>"
        + dataset_summary_html(read_manifest(data_dir), label_column),
        "Dataset summary",
        section=section,
    )


def _add_preprocessing(report, config: dict) -> None:
    """Every setting of the training data's ``preprocess.json``, the crop first."""
    section = "Preprocessing"
    settings_file = Path(config.get("data_dir") or "") / SETTINGS_NAME
    stored = read_settings_file(settings_file.parent)
    if stored is None:
        add_note(
            report,
            "Preprocessing settings",
            f"The training data's preprocessing settings ({settings_file}) are not available, "
            "so they cannot be listed here (model.pt keeps a copy: `eegformer predict` and "
            "`explain` use it).",
            section,
        )
        return
    report.add_html(
        f"<p>How the recordings became connectomes: <code>{inline_code(str(settings_file))}"
        "</code>, every setting that did something, the crop first (a new recording given to "
        "<code>eegformer predict</code> is preprocessed the same way; with ICA off, its "
        "parameters are left out).</p>"
        + preprocessing_html(
            stored,
            read_manifest(settings_file.parent)
            if (settings_file.parent / MANIFEST_NAME).is_file()
            else None,
        ),
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
        add_note(report, "Metrics", why, section)
        return
    incomplete = _incomplete_run(run_dir, metrics)
    if incomplete:
        console.warn(f"{run_dir}: {incomplete}")
        add_note(report, "Incomplete run", incomplete, section)
    labels = [str(label) for label in metrics.labels]
    paired = "".join(
        "<p>Paired over the same folds: " + inline_code(describe_comparison(comparison)) + ".</p>"
        for comparison in metrics.all_comparisons
    )
    chance = (
        f" Chance level: bac {1 / len(labels):.2f} ({len(labels)} classes), auroc 0.50."
        if labels
        else ""
    )
    report.add_html(
        "<p>Out-of-fold metrics, mean +- std over folds (bac = balanced accuracy)."
        f"{chance}{inline_code(_carries(metrics))}</p>" + metrics_html(metrics) + paired,
        "Metrics",
        section=section,
    )
    report.add_html(metric_notes_html(metrics), "What these numbers mean", section=section)
    _add_confusion_matrix(report, metrics, labels, section)
    if run_folder.has_oof_predictions(run_dir):
        fold_means = {name: model.mean for name, model in metrics.models.items()}
        predictions = run_folder.read_oof_predictions(run_dir)
        try:
            figure = roc_pr_figure(predictions, labels, metrics.positive_label, fold_means)
        except (KeyError, TypeError, ValueError) as exc:  # a truncated or edited table
            raise run_folder.damaged_oof_predictions(run_dir, exc) from None
        add_figure(
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


def _add_confusion_matrix(report, metrics: RunMetrics, labels: list[str], section: str) -> None:
    """The summed out-of-fold confusion matrix, titled with the model that carries the score
    (:func:`~eegformer_cli.experiment.verdict.scorer`)."""
    name = scorer(metrics)
    matrix = metrics.transformer.confusion_matrix
    if matrix is None:
        return
    add_figure(
        report,
        confusion_matrix_figure(
            matrix,
            labels,
            textwrap.fill(name[0].upper() + name[1:], CONFUSION_TITLE_CHARACTERS),
            n_folds=metrics.n_folds,
        ),
        "Confusion matrix",
        section,
    )


def _carries(metrics: RunMetrics) -> str:
    """What the metrics table's xaiguiformer row is, where it is not the transformer in every
    fold (:func:`~eegformer_cli.experiment.verdict.scorer`), else ``""``."""
    name = scorer(metrics)
    if name == "XAIguiFormer":
        return ""
    repeats = ": it repeats the linear_path row." if name == LINEAR_PATH_SCORER else "."
    return f" The xaiguiformer row is {name}{repeats}"


def _add_predictions_and_curves(
    report, run_dir: Path, config: dict, metrics: RunMetrics, history: list[dict]
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
        add_figure(
            report,
            training_curves_figure(history),
            "Training curves per fold",
            section,
            caption=training_curves_caption(
                history, config.get("train_config", {}), bool(metrics.linear_path)
            ),
        )


def _add_attention(report, metrics: RunMetrics | None, history: list[dict]) -> None:
    section = "Attention"
    attention = metrics.attention if metrics else None
    if not attention:
        add_note(
            report,
            "What attention does",
            "No attention diagnostics: the run has no "
            "metrics.json, or an earlier version of eegformer trained it.",
            section,
        )
        return
    reach = attention_reach(metrics) if metrics else None
    report.add_html(
        ("" if reach is None else f'<p class="eeg-reach"><b>{inline_code(reach)}</b></p>')
        + "<p>What the attention of the two passes does on the test participants of every fold "
        "(mean over a fold's recordings, then over folds). <b>Entropy</b>: how spread each "
        f"band's attention is, in nats; uniform attention over the {attention['n_bands']} bands "
        f"gives ln {attention['n_bands']} = {attention['uniform_entropy']:.3f} (100 %), attention "
        "to one band gives 0. <b>TransformerKeep share</b>: the size of the attention update against "
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
        add_figure(
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
    if explanations_dir is not None:
        from eegformer_cli.explain.class_summary import has_class_summary  # imports torch

        if not has_class_summary(explanations_dir):
            raise InputDataError(
                "not an explain output folder (no class_summary.npz)",
                path=explanations_dir,
                hint="pass the --out folder of `eegformer explain`",
            )
        check_explanations_match(Path(run_dir), Path(explanations_dir))
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
