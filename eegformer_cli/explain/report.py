"""The HTML report of a run folder (``eegformer report``): one self-contained file.

Built with :class:`mne.Report` (its scripts and styles are inlined; figures are embedded as
base64 PNG), from the run folder's files (docs/architecture.md) and, optionally, an
``eegformer explain`` output folder. Sections, each present even when its inputs are missing
(it then says what is missing and how to get it):

0. Run summary: preset, epochs, evaluation scheme, seed, classes and positive class, data,
   model, final model, versions (``config.json``, ``metrics.json``).
1. Dataset: recordings, participants, classes, age and sex per class, preprocessing failures
   (the manifest of the training data, whose folder ``config.json`` names).
2. Cross-validation: mean +- std of each metric per model (XAIguiFormer, the logistic
   regression reference, ablations if present) with a plain-language note on each metric and
   the paired interval, confusion matrix, ROC and precision-recall curves from the
   out-of-fold predictions, a sortable table of every recording's out-of-fold prediction
   (misclassified first), training curves per fold.
3. Is the score real?: the shortcut audit and the permutation test (:mod:`trust_report`).
4. Attention: what the coarse and refined attention do, out of fold (metrics.json's
   ``attention``: entropy, residual share, the explanation's part of the refined attention,
   the logit change when attention is replaced by a uniform mean or the identity) and the
   entropy per epoch on the validation participants (history.jsonl).
5. Explanations: which model and recordings they come from (and whether those recordings
   were the model's training data), band importance per class with what its sign means, the
   strongest channel-pair attributions per class on a connectivity circle (mne-connectivity),
   coarse versus refined attention per layer as differences from uniform attention.

No MNE tags: every item is added without them (:func:`_untagged_report`) and the tag filter is
hidden (:data:`REPORT_CSS`).

Figure functions take plain data and return a matplotlib figure (Agg backend, closed by the
caller after embedding), so each can be tested and reused alone.
"""

from __future__ import annotations

import csv
import datetime
import html
import json
import tempfile
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)
import numpy as np  # noqa: E402

from eegformer_cli import console
from eegformer_cli.atomic import ensure_dir, write_bytes  # noqa: E402
from eegformer_cli.errors import InputDataError, OutputError  # noqa: E402
from eegformer_cli.explain.trust_report import add_trust_section
from eegformer_cli.training.metrics import describe_comparison

#: Channel pairs drawn per class on the connectivity circle (strongest by |value|).
CIRCLE_PAIRS = 20
METRICS = ("bac", "auroc", "auc_pr", "accuracy")
#: Styles added to MNE's page: the tag filter hidden (the report has no tags), the notes boxed.
REPORT_CSS = """
#filter-by-tags-dropdown-menu { display: none !important; }
.eeg-note { background: #f3f6fb; border-left: 4px solid #4a6fa5; padding: .6em 1em;
            margin: .8em 0; font-size: .92em; }
.eeg-note dt { font-weight: 600; margin-top: .35em; }
.eeg-note dd { margin-left: 1.2em; margin-bottom: .1em; }
.eeg-oof, .eeg-oof table, .eeg-oof th, .eeg-oof td { font-size: 13px; }
"""


# ----------------------------------------------------------------------------- reading

def _read_tsv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: a damaged file
        raise InputDataError(f"unreadable JSON ({exc})", path=path,
                             hint="rerun the command that wrote it") from None


def _read_jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]
    except ValueError as exc:
        raise InputDataError(f"unreadable JSON lines ({exc})", path=path,
                             hint="rerun the command that wrote it") from None


def _known(value: str | None) -> bool:
    return value not in (None, "", "n/a", "nan", "NaN")


# ----------------------------------------------------------------------------- tables

def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f'<table class="table table-sm table-striped"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def dataset_summary_html(manifest: list[dict], label_column: str) -> str:
    """HTML tables: counts, classes with age (mean +- sd, range) and sex, failures."""
    ok = [r for r in manifest if r.get("status") == "ok"]
    failed = [r for r in manifest if r.get("status") != "ok"]
    participants = {r.get("participant_id") for r in manifest if _known(r.get("participant_id"))}
    parts = [_table(["recordings", "usable", "failed", "participants"],
                    [[len(manifest), len(ok), len(failed), len(participants)]])]
    rows = []
    for label in sorted({r.get(label_column, "n/a") for r in ok}):
        members = [r for r in ok if r.get(label_column, "n/a") == label]
        ages = np.array([float(r["age"]) for r in members if _known(r.get("age"))])
        sexes = Counter(r.get("sex") if _known(r.get("sex")) else "n/a" for r in members)
        age_text = (f"{ages.mean():.1f} +- {ages.std():.1f} ({ages.min():.0f}-{ages.max():.0f}), "
                    f"n/a {len(members) - len(ages)}") if len(ages) else "n/a"
        rows.append([label, len(members), age_text,
                     ", ".join(f"{k} {v}" for k, v in sorted(sexes.items()))])
    parts.append(_table([label_column, "recordings", "age (years)", "sex"], rows))
    if failed:
        parts.append("<p>Preprocessing failures:</p>" + _table(
            ["recording_id", "error"], [[r.get("recording_id"), r.get("error")] for r in failed]))
    else:
        parts.append("<p>No preprocessing failures.</p>")
    return "\n".join(parts)


def metrics_html(metrics: dict) -> str:
    """HTML table: mean +- std of :data:`METRICS` per model in ``metrics.json``."""
    rows = []
    for name, model in metrics.get("models", {}).items():
        mean, std = model.get("mean", {}), model.get("std", {})
        rows.append([name] + [
            "n/a" if mean.get(m) is None else
            f"{mean[m]:.3f}" + ("" if std.get(m) is None else f" +- {std[m]:.3f}")
            for m in METRICS])
    return _table(["model"] + list(METRICS), rows)


# ----------------------------------------------------------------------------- notes

def _rows_html(rows: list[tuple[str, str]]) -> str:
    """A two-column table of (label, HTML value) rows; labels are escaped, values are not."""
    body = "".join(f"<tr><th scope=\"row\">{html.escape(label)}</th><td>{value}</td></tr>"
                   for label, value in rows)
    return f'<table class="table table-sm"><tbody>{body}</tbody></table>'


def _scheme_text(scheme: dict | None, n_folds: int | None) -> str:
    """The evaluation scheme of splits.json / metrics.json in words."""
    if not scheme:
        return "unknown (no splits.json)"
    inner = (f"; in each fold {scheme['val_fraction']:.0%} of the training participants are set "
             "aside to choose the epoch" if scheme.get("val_fraction") else "")
    if scheme.get("kind") == "holdout":
        return (f"holdout: {scheme.get('fraction', 0):.0%} of the participants kept for test, "
                f"never used in training{inner}")
    k, repeats = scheme.get("k"), scheme.get("repeats", 1)
    if k is None:
        return f"{n_folds} folds from {html.escape(str(scheme.get('from_file', 'a splits file')))}"
    tested = "once" if repeats == 1 else f"{repeats} times"
    return (f"participant-wise {k}-fold cross-validation, {repeats} repeat"
            f"{'s' * (repeats != 1)} ({k * repeats} folds; every participant is tested "
            f"{tested}, by models that never saw them){inner}")


def run_summary_html(run_dir: Path, config: dict, metrics: dict | None,
                     scheme: dict | None) -> str:
    """Which run made this report: preset, epochs, evaluation, seed, classes and positive
    class, data, model, final model, device and versions (from ``config.json``, and
    ``metrics.json`` / ``splits.json`` when there)."""
    train, model = config.get("train_config", {}), config.get("model_config", {})
    finished = (run_dir / "metrics.json")
    when = ("not finished (no metrics.json)" if not finished.is_file() else
            datetime.datetime.fromtimestamp(finished.stat().st_mtime, datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M UTC"))
    selection = {"second_half": "the epoch with the best validation {metric} in the second half "
                                "of training is kept",
                 "best": "the epoch with the best validation {metric} is kept"}.get(
        train.get("selection"), "{metric}").format(metric=train.get("selection_metric", "score"))
    patience = train.get("patience") or 0
    labels = [str(label) for label in config.get("labels", [])]
    positive = config.get("positive_label")
    n_participants = config.get("n_participants")
    holdout = (scheme or {}).get("kind") == "holdout"
    final = ("the holdout model: trained on the training part, evaluated on the held-out "
             "participants" if holdout else
             f"retrained after the cross-validation on all {n_participants} participants (its "
             "predictions on them are not out of fold: the figures below come from the fold "
             "models)")
    versions = config.get("versions", {})
    rows = [
        ("run folder", html.escape(str(run_dir.resolve()))),
        ("finished", html.escape(when)),
        ("preset", f"<code>{html.escape(str(config.get('preset', train.get('preset'))))}</code>"),
        ("evaluation", _scheme_text(scheme, (metrics or {}).get("n_folds"))),
        ("training", html.escape(
            f"up to {train.get('epochs')} epochs ({selection}; early stop "
            f"{'after ' + str(patience) + ' epochs without improvement' if patience else 'off'}), "
            f"batch of {train.get('batch_size')} segments, peak learning rate {train.get('lr')}, "
            f"weight decay {train.get('weight_decay')}")),
        ("seed", html.escape(str(train.get("seed")))),
        ("classes", html.escape(f"{', '.join(labels)} (column {config.get('label_column')})")
         + ("" if positive is None else
            f"; positive class for AUROC and AUC-PR: <b>{html.escape(str(positive))}</b>")),
        ("data", html.escape(f"{config.get('data_dir')}: {config.get('n_recordings')} "
                             f"recordings of {n_participants} participants")),
        ("model", html.escape(
            f"XAIguiFormer, d_model {model.get('d_model')}, {model.get('n_layers')} layer(s), "
            f"{model.get('n_heads')} heads, explanation-guided refinement "
            f"{'on' if model.get('xai_refinement', True) else 'off'}, frequency encoding "
            f"{model.get('frequency_encoding')}; beside it a logistic regression on the same "
            "tokens")),
        ("model.pt", html.escape(final)),
        ("device", html.escape(str(config.get("device")))),
        ("versions", html.escape(", ".join(f"{name} {version}"
                                           for name, version in versions.items()))),
    ]
    return _rows_html(rows)


def metric_notes_html(metrics: dict) -> str:
    """A plain-language box: what each metric, the spread and the paired interval mean, with
    this run's chance levels."""
    labels = [str(label) for label in metrics.get("labels", [])]
    positive = metrics.get("positive_label")
    n_folds = metrics.get("n_folds")
    matrix = np.asarray(metrics.get("models", {}).get("xaiguiformer", {})
                        .get("confusion_matrix") or [[0]], dtype=float)
    share = (matrix[labels.index(positive)].sum() / matrix.sum()
             if positive in labels and matrix.sum() else None)
    auc_pr_chance = "" if share is None else f" (chance here: {share:.2f}, the share of {positive})"
    of_positive = ("" if positive is None else f" of the positive class ({positive})")
    comparison = metrics.get("comparison") or {}
    clipped = (" Here it reached past the possible range and was clipped to it: too few folds "
               "for an informative interval." if comparison.get("ci95_clipped") else "")
    items = [
        ("bac (balanced accuracy)",
         "the share of each class's recordings classified correctly, averaged over the "
         f"classes; 1 is perfect, {1 / max(len(labels), 1):.2f} is chance "
         f"({len(labels)} classes), whatever the class sizes."),
        ("auroc",
         f"the probability that a recording{of_positive} gets a higher predicted probability of "
         "that class than a recording of another class; 0.5 is chance, 1 a perfect ranking. It "
         "does not depend on the 0.5 threshold that bac and accuracy use."),
        ("auc_pr (average precision)",
         f"precision{of_positive} averaged over every recall level; it rewards ranking that "
         f"class's recordings first{auc_pr_chance}."),
        ("accuracy", "the share of all recordings classified correctly (it favours the larger "
                     "class when the classes differ in size)."),
        ("mean +- std", f"mean over the {n_folds} test folds and the standard deviation between "
                        "them: how much the result varies with the participants tested, not a "
                        "confidence interval. A fold's test participants were never used to "
                        "train or choose its model."),
        ("paired difference and 95 % interval",
         "the transformer's bac minus the logistic regression's, fold by fold on the same test "
         "participants; the interval (corrected resampled t-test, which allows for folds "
         "sharing training participants) shows what the folds cannot rule out: if it contains "
         f"0, these data do not tell which model is better.{clipped}"),
    ]
    body = "".join(f"<dt>{html.escape(name)}</dt><dd>{html.escape(text)}</dd>"
                   for name, text in items)
    return f'<div class="eeg-note"><dl>{body}</dl></div>'


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def oof_table_html(predictions: list[dict], labels: list[str]) -> str:
    """Every recording's out-of-fold predictions, one row each, misclassified first: true
    class, XAIguiFormer's prediction (argmax of its probabilities averaged over repeats), its
    probability of the true class, how many of its out-of-fold predictions were wrong, the
    folds, and the same for the logistic regression. Sortable by any column in the browser
    (bootstrap-table, which mne.Report embeds)."""
    by_model: dict[str, dict[str, list[dict]]] = {}
    for row in predictions:
        by_model.setdefault(row["model"], {}).setdefault(row["recording_id"], []).append(row)
    model_rows = by_model.get("xaiguiformer", {})
    reference_rows = by_model.get("logistic_regression", {})

    def summary(rows: list[dict]) -> tuple[str, float, int]:
        mean_probs = {label: _mean([float(r[f"prob_{label}"]) for r in rows]) for label in labels}
        return (max(mean_probs, key=mean_probs.get), mean_probs.get(rows[0]["label"], np.nan),
                sum(r["predicted"] != r["label"] for r in rows))

    table = []
    for recording_id, rows in model_rows.items():
        predicted, p_true, wrong = summary(rows)
        reference = summary(reference_rows[recording_id]) if recording_id in reference_rows \
            else ("n/a", np.nan, 0)
        folds = ", ".join(f"r{r['repeat']} f{r['fold']}" for r in rows)
        table.append((wrong, p_true, recording_id, rows[0]["participant_id"], rows[0]["label"],
                      predicted, folds, reference))
    table.sort(key=lambda t: (-t[0], t[1], t[2]))
    repeats = max((len(rows) for rows in model_rows.values()), default=1)
    header = ["recording", "participant", "true class", "predicted", "P(true)",
              f"wrong (of {repeats})", "test fold", "LR predicted", "LR P(true)"]
    head = "".join(f'<th data-sortable="true">{html.escape(h)}</th>' for h in header)
    body = []
    for wrong, p_true, recording_id, participant, label, predicted, folds, ref in table:
        cells = [recording_id, participant, label, predicted, f"{p_true:.3f}", wrong, folds,
                 ref[0], "n/a" if np.isnan(ref[1]) else f"{ref[1]:.3f}"]
        tint = ' class="table-danger"' if wrong else ""
        body.append(f"<tr{tint}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
                    + "</tr>")
    n_wrong = sum(t[0] > 0 for t in table)
    return (f"<p>{len(table)} recordings, {n_wrong} misclassified by XAIguiFormer at least once "
            "(tinted, listed first; click a column header to sort, all pages at once). "
            "<i>P(true)</i>: the "
            "probability the model gave the recording's true class, averaged over its "
            f"out-of-fold predictions (one per repeat, {repeats} here); <i>wrong</i>: how many "
            "of them were wrong; <i>test fold</i>: r = repeat, f = fold; <i>LR</i>: the "
            "logistic regression (the reference), tested on the same folds.</p>"
            '<div class="eeg-oof"><table class="table table-sm table-hover" data-toggle="table" '
            'data-pagination="true" data-page-size="25" data-page-list="[25, 100, all]">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def explanations_source_html(run_dir: Path, folder: Path, settings: dict,
                             recordings: list[dict] | None, classes: list[str],
                             counts: list[int]) -> str:
    """Which model and recordings the explanations come from, whether those recordings were
    the model's training data (``recordings.csv`` of ``explain``: its ``in_training_data``
    warnings), what the per-class means average over, and classes of one recording."""
    model = Path(str(settings.get("model", "")))
    own = (run_dir / "model.pt").resolve() == model.resolve() if settings.get("model") else False
    trained_on = settings.get("model_trained_on")
    which = {"all": "the final model, retrained on all participants of the run",
             "holdout": "the holdout model, trained on the run's training participants"
             }.get(trained_on, "a model file")
    parts = [f"From <code>{html.escape(str(folder))}</code>: "
             f"<code>eegformer explain</code> with {html.escape(which)} "
             + ("(this run's <code>model.pt</code>)" if own else
                f"(<code>{html.escape(str(model))}</code>, not this run's model.pt, with the same "
                "classes, bands and channels)")
             + (f", on {html.escape(', '.join(map(str, settings['inputs'])))}"
                if settings.get("inputs") else "") + "."]
    if recordings is None:
        parts.append("This explain output predates the record of which recordings were the "
                     "model's training data, so that is not known here.")
    else:
        seen = [row for row in recordings if "in_training_data:" in (row.get("warnings") or "")]
        if seen and len(seen) == len(recordings):
            every = ("The explained recording was" if len(seen) == 1 else
                     f"All {len(recordings)} explained recordings were")
            parts.append(f"<b>{every} in the training data of this model</b> (explain was run "
                         "on the model's own training "
                         "recordings): the explanations show what the model relies on for "
                         "recordings it was fitted to, not evidence of what generalises to new "
                         "people; its predictions on them are optimistic (the honest ones are "
                         "the out-of-fold predictions above).")
        elif seen:
            parts.append(f"<b>{len(seen)} of the {len(recordings)} explained recordings were in "
                         "the training data of this model</b>; their explanations describe "
                         "recordings the model was fitted to.")
        else:
            parts.append(f"None of the {len(recordings)} explained recordings was in the "
                         "training data of this model.")
    target = settings.get("target")
    parts.append("Each recording is explained for " + (
        f"the class <b>{html.escape(str(target))}</b>, so every mean below is over all "
        "recordings" if target else
        "its <b>predicted</b> class, so the class means below group recordings by what the "
        "model predicted, not by their true class") + ": "
        + html.escape(", ".join(f"{c} {n} recording{'s' * (n != 1)}"
                                for c, n in zip(classes, counts))) + ".")
    single = [c for c, n in zip(classes, counts) if n == 1]
    if single:
        parts.append(f"<b>{html.escape(', '.join(single))}: one recording only</b>, so its "
                     "'mean' is that one recording's explanation, not a pattern of the class.")
    return "<p>" + "</p><p>".join(parts) + "</p>"


BAND_IMPORTANCE_NOTE = (
    "Each bar is the model's own DeepLIFT explanation of the explained class's coarse logit, "
    "per band token, averaged over the class's recordings and scaled so that the absolute "
    "values sum to 1 (the share of the explanation each band carries). For one band it is "
    "(the band's token - an all-zero reference token) x the gradient of the logit at the real "
    "token, summed over the embedding: a first-order estimate of how much the band, compared "
    "with that reference, moves the logit. Positive: the band raises the class's logit; "
    "negative: it lowers it. The reference is artificial (a zero embedding, not 'no "
    "connectivity'), and in this transformer the bars need not add up to the class's logit, "
    "so bars that are negative almost everywhere do not say the class is unlikely (these "
    "recordings were predicted as that class): the sizes rank the bands, the sign gives the "
    "direction relative to the zero token.")


# ----------------------------------------------------------------------------- figures

def _inches(width: float, height: float) -> tuple[float, float]:
    """A computed figure size on a quarter-inch grid. mne.Report reads a figure's pixels back
    with int(size x dpi), so a width such as 9.2 in (919.999... px at 100 dpi) loses a pixel
    and the image comes out sheared; quarter inches are exact in binary floating point."""
    return round(width * 4) / 4, round(height * 4) / 4


def confusion_matrix_figure(matrix, labels: list[str], title: str = "XAIguiFormer",
                            n_folds: int | None = None):
    """Counts (rows = true class, columns = predicted), summed over ``n_folds`` folds; the
    title on two lines, so it fits above the matrix whatever the class names' length."""
    from sklearn.metrics import ConfusionMatrixDisplay

    longest = max(len(label) for label in labels)
    fig, ax = plt.subplots(figsize=_inches(3.6 + 0.09 * longest + 0.45 * len(labels),
                                           3.4 + 0.45 * len(labels)))
    ConfusionMatrixDisplay(np.asarray(matrix), display_labels=labels).plot(ax=ax, colorbar=False)
    summed = "" if n_folds is None else f", summed over {n_folds} fold{'s' * (n_folds != 1)}"
    ax.set_title(f"{title}\nout-of-fold counts{summed}", fontsize=10)
    fig.tight_layout()
    return fig


def roc_pr_figure(predictions: list[dict], labels: list[str], positive_label: str | None,
                  fold_means: dict[str, dict] | None = None):
    """ROC and precision-recall curves per model from ``oof_predictions.tsv`` rows (two
    classes: of ``positive_label``; more classes: one-vs-rest of each class, XAIguiFormer).

    Each curve pools every out-of-fold prediction (all folds and repeats); its legend gives
    that pooled area (ROC: AUC; precision-recall: average precision, the estimator of the
    metrics table) and, from ``fold_means`` (model -> metrics.json's ``mean``), the table's
    mean over folds, which differs from it: pooling mixes folds whose scores are not on one
    scale.
    """
    from sklearn.metrics import (average_precision_score, precision_recall_curve, roc_auc_score,
                                 roc_curve)

    fig, (ax_roc, ax_pr) = plt.subplots(1, 2, figsize=(10, 4.2))
    models = sorted({row["model"] for row in predictions})
    if positive_label is not None:
        curves = [(m, positive_label, [r for r in predictions if r["model"] == m]) for m in models]
    else:
        rows = [r for r in predictions if r["model"] == "xaiguiformer"]
        curves = [(f"xaiguiformer {label}-vs-rest", label, rows) for label in labels]
    means = fold_means or {}
    for name, label, rows in curves:
        truth = np.array([r["label"] == label for r in rows])
        score = np.array([float(r[f"prob_{label}"]) for r in rows])
        if truth.all() or not truth.any():
            continue
        fpr, tpr, _ = roc_curve(truth, score)
        precision, recall, _ = precision_recall_curve(truth, score)
        mean = means.get(name, {})

        def legend(metric: str, pooled: float, short: str) -> str:
            text = f"{name}: pooled {short} {pooled:.3f}"
            if mean.get(metric) is None:
                return text
            return f"{text}, mean over folds {mean[metric]:.3f}"

        ax_roc.plot(fpr, tpr, label=legend("auroc", roc_auc_score(truth, score), "AUC"))
        ax_pr.plot(recall, precision, drawstyle="steps-post",
                   label=legend("auc_pr", average_precision_score(truth, score), "AP"))
    ax_roc.plot([0, 1], [0, 1], color="grey", linestyle=":")
    of = "" if positive_label is None else f" ({positive_label} = positive)"
    ax_roc.set(xlabel="false positive rate", ylabel="true positive rate", title=f"ROC{of}")
    ax_pr.set(xlabel="recall", ylabel="precision", title=f"Precision-recall{of}")
    for ax in (ax_roc, ax_pr):
        if ax.get_legend_handles_labels()[0]:  # no curve: no legend (and no matplotlib warning)
            ax.legend(fontsize=8, loc="lower right" if ax is ax_roc else "lower left")
    fig.tight_layout()
    return fig


def training_curves_figure(history: list[dict]):
    """Train and validation loss and validation BAC against epoch, one line per fold."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    folds = sorted({(h.get("repeat", 0), h.get("fold", 0)) for h in history},
                   key=lambda rf: (rf[0] < 0, rf))          # the final model last
    for repeat, fold in folds:
        rows = [h for h in history if (h.get("repeat", 0), h.get("fold", 0)) == (repeat, fold)]
        epochs = [h["epoch"] for h in rows]
        final = repeat < 0      # the model retrained on every participant after the CV
        for ax, key in zip(axes, ("train_loss", "val_loss", "val_bac")):
            values = [np.nan if h.get(key) is None else h[key] for h in rows]
            ax.plot(epochs, values, marker=".", label="final model" if final
                    else f"repeat {repeat} fold {fold}",
                    **({"color": "black", "linestyle": "--"} if final else {}))
    for ax, key in zip(axes, ("train_loss", "val_loss", "val_bac")):
        ax.set(xlabel="epoch", title=key.replace("_", " "))
    axes[-1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def attention_diagnostics_html(attention: dict) -> str:
    """HTML table: one row per pass and layer of metrics.json's ``attention`` summary."""
    columns = [("entropy", "entropy (nats)", ".3f"), ("entropy_fraction", "of ln T", ".1%"),
               ("residual_share", "residual share", ".3f"),
               ("guidance_ratio", "explanation / rest", ".3g"),
               ("logit_change_uniform", "logit change, uniform", ".3f"),
               ("flips_uniform", "flips, uniform", ".1%"),
               ("logit_change_identity", "logit change, identity", ".3f"),
               ("flips_identity", "flips, identity", ".1%")]
    rows = []
    for name, values in attention.get("passes", {}).items():
        for layer in range(len(values.get("entropy", []))):
            rows.append([name, layer] + [format(values[key][layer], fmt) if key in values
                                         else "" for key, _, fmt in columns])
    return _table(["pass", "layer"] + [title for _, title, _ in columns], rows)


def attention_entropy_figure(history: list[dict], uniform_entropy: float):
    """Attention entropy (nats, mean over layers and validation recordings) of each pass
    against epoch, the mean over folds with the range over folds shaded."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    rows = [h for h in history if h.get("attention") and h.get("fold", 0) >= 0]
    for name, colour in (("coarse", "tab:blue"), ("refined", "tab:orange")):
        by_epoch: dict[int, list[float]] = {}
        for h in rows:
            if name in h["attention"]:
                by_epoch.setdefault(h["epoch"], []).append(
                    float(np.mean(h["attention"][name]["entropy"])))
        if by_epoch:
            epochs = sorted(by_epoch)
            values = [by_epoch[e] for e in epochs]
            ax.plot(epochs, [np.mean(v) for v in values], color=colour, label=name)
            ax.fill_between(epochs, [min(v) for v in values], [max(v) for v in values],
                            color=colour, alpha=0.2)
    ax.axhline(uniform_entropy, color="grey", linestyle=":", label="uniform (ln T)")
    ax.set(xlabel="epoch", ylabel="entropy (nats)",
           title="Attention entropy on the validation participants")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def band_importance_figure(band_importance: np.ndarray, classes: list[str], bands: list[str]):
    """Grouped bars: signed band importance (abs-sum 1) per explained class, (K', T) in."""
    fig, ax = plt.subplots(figsize=_inches(max(6, len(bands) * 0.9), 3.8))
    width = 0.8 / len(classes)
    x = np.arange(len(bands))
    for k, name in enumerate(classes):
        ax.bar(x + (k - (len(classes) - 1) / 2) * width, band_importance[k], width, label=name)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, bands, rotation=30)
    ax.set(ylabel="signed importance (|.| sums to 1)",
           title="Band importance (DeepLIFT of the explained class), mean per class\n"
                 "> 0: the band raises the class's logit (against an all-zero token); "
                 "< 0: lowers it")
    ax.legend(title="explained class")
    fig.tight_layout()
    return fig


def connectivity_circle_figure(channel_pairs: np.ndarray, classes: list[str], bands: list[str],
                               channels: list[str], n_lines: int = CIRCLE_PAIRS):
    """One connectivity circle per class: the ``n_lines`` strongest channel pairs, summed over
    bands ((K', T, C, C) in; the band with the largest share is named in the title), on one
    colour scale (red towards the class, blue against). The circles fill their panels: MNE's
    room for long node names (``padding``) is cut to what 10-20 names need."""
    from mne_connectivity.viz import plot_connectivity_circle

    fig, axes = plt.subplots(1, len(classes), figsize=_inches(4.5 * len(classes), 5.0),
                             subplot_kw={"projection": "polar"}, squeeze=False)
    summed = channel_pairs.sum(axis=1)                                  # (K', C, C)
    limit = float(np.abs(summed).max()) or 1.0
    for k, (name, ax) in enumerate(zip(classes, axes[0])):
        top_band = bands[int(np.abs(channel_pairs[k]).sum(axis=(1, 2)).argmax())]
        plot_connectivity_circle(
            summed[k], channels, n_lines=n_lines, ax=ax, show=False, facecolor="white",
            textcolor="black", colormap="RdBu_r", vmin=-limit, vmax=limit, colorbar=False,
            title=f"{name}: strongest {n_lines} pairs\n(largest band share: {top_band})",
            fontsize_title=10, padding=1.5, interactive=False)
    fig.subplots_adjust(left=0.03, right=0.97, bottom=0.03, top=0.86, wspace=0.15)
    return fig


def attention_figure(coarse: np.ndarray, refined: np.ndarray, bands: list[str], title: str):
    """Per layer: coarse and refined attention as differences from uniform attention (1/T),
    and refined - coarse; query rows, key columns; (L, T, T) in (a head axis is averaged).

    Softmax rows sum to 1, so raw weights all sit near 1/T and one colour scale from 0 hides
    every difference: each panel shows its departure from 1/T (or from the coarse pass) on a
    diverging scale of its own, symmetric about 0, with its colour bar.
    """
    if coarse.ndim == 4:
        coarse, refined = coarse.mean(axis=1), refined.mean(axis=1)
    n_layers, n_bands = coarse.shape[0], coarse.shape[-1]
    uniform = 1.0 / n_bands
    fig, axes = plt.subplots(n_layers, 3, figsize=(11, 3.5 * n_layers), squeeze=False)
    for layer in range(n_layers):
        for col, (name, data) in enumerate((
                (f"coarse - 1/{n_bands}", coarse[layer] - uniform),
                (f"refined - 1/{n_bands}", refined[layer] - uniform),
                ("refined - coarse", refined[layer] - coarse[layer]))):
            ax = axes[layer, col]
            limit = float(np.abs(data).max()) or 1e-6
            image = ax.imshow(data, cmap="RdBu_r", vmin=-limit, vmax=limit)
            ax.set_xticks(range(len(bands)), bands, rotation=90, fontsize=7)
            ax.set_yticks(range(len(bands)), bands, fontsize=7)
            ax.set_title(f"layer {layer}: {name}", fontsize=9)
            if col == 0:
                ax.set_ylabel("query band", fontsize=8)
            ax.set_xlabel("key band", fontsize=8)
            fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(f"{title}\nred: more attention than uniform ({uniform:.3f}) or than the coarse "
                 "pass; blue: less; each panel on its own scale", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- report

def _check_run_dir(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise InputDataError("not a run folder (no config.json)", path=run_dir,
                             hint="pass the --out folder of `eegformer train`")
    return run_dir


def _check_explanations_match(run_dir: Path, explanations_dir: Path) -> None:
    """Raise InputDataError when ``explanations_dir`` explains another model than the run's
    (other classes, bands or channels than its ``config.json``): a report must not put one
    dataset's explanations beside another's metrics."""
    from eegformer_cli.explain.export import load_class_summary

    config = _read_json(run_dir / "config.json")
    summary = load_class_summary(explanations_dir)
    model = config.get("model_config", {})
    expected = {"classes": config.get("labels"), "bands": model.get("band_names"),
                "channels": model.get("channel_names")}
    explained = {"classes": summary["label_names"], "bands": summary["bands"],
                 "channels": summary["channels"]}
    differing = [f"{key} {explained[key]} (run: {expected[key]})" for key in expected
                 if expected[key] is not None and list(expected[key]) != explained[key]]
    if differing:
        raise InputDataError("explains another model than this run's: " + "; ".join(differing),
                             path=explanations_dir,
                             hint=f"run `eegformer explain {run_dir / 'model.pt'} DATA --out DIR`")


def report_title(config: dict) -> str:
    """The report's title from a run's ``config.json``: the model, the data and the label, e.g.
    "XAIguiFormer (default preset) on msu-schizophrenia: diagnosis". The data is named by the
    folder ``preprocess`` read (its ``preprocess.json`` inputs: one folder's name, or the
    folders' names joined; for recording files, the folder holding them above BIDS-style
    ``eeg`` / ``sub-*`` / ``ses-*`` folders), else by the preprocess output folder."""
    data_dir = Path(config.get("data_dir") or "data")
    inputs = []
    settings_file = data_dir / "preprocess.json"
    if settings_file.is_file():
        try:
            inputs = [str(i) for i in json.loads(settings_file.read_text(encoding="utf-8"))
                      .get("inputs") or []]
        except ValueError:                       # a damaged file only loses the nicer name
            inputs = []
    names = list(dict.fromkeys(_dataset_name(Path(i)) for i in inputs))
    data = " + ".join(names) if names else data_dir.name
    return (f"XAIguiFormer ({config.get('preset', 'default')} preset) on {data}: "
            f"{config.get('label_column', 'label')}")


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


def build_report(run_dir: str | Path, explanations_dir: str | Path | None = None):
    """An :class:`mne.Report` of the run (module docs). Raises InputDataError when ``run_dir``
    is not a run folder (no ``config.json``)."""
    run_dir = _check_run_dir(run_dir)
    config = _read_json(run_dir / "config.json")
    report = _untagged_report(report_title(config))
    _add_run_summary(report, run_dir, config)
    _add_dataset(report, config)
    _add_cross_validation(report, run_dir)
    add_trust_section(report, run_dir)
    _add_attention(report, run_dir)
    _add_explanations(report, run_dir, explanations_dir)
    return report


def _note(report, title: str, text: str, section: str) -> None:
    report.add_html(f"<p>{html.escape(text)}</p>", title, section=section)


def _figure(report, fig, title: str, section: str, caption: str | None = None) -> None:
    report.add_figure(fig, title, section=section, image_format="png", caption=caption)
    plt.close(fig)


def _add_run_summary(report, run_dir: Path, config: dict) -> None:
    metrics_file, splits_file = run_dir / "metrics.json", run_dir / "splits.json"
    metrics = _read_json(metrics_file) if metrics_file.is_file() else None
    scheme = (metrics or {}).get("scheme") or (
        _read_json(splits_file).get("scheme") if splits_file.is_file() else None)
    report.add_html(run_summary_html(run_dir, config, metrics, scheme), "Which run this is",
                    section="Run summary")


def _add_dataset(report, config: dict) -> None:
    section = "Dataset"
    data_dir = Path(config.get("data_dir") or "")
    manifest = data_dir / "manifest.tsv"
    if not manifest.is_file():
        _note(report, "Dataset summary", f"The training data's manifest ({manifest}) is not "
              "available, so the dataset cannot be summarised here.", section)
        return
    label_column = config.get("label_column", "label")
    report.add_html(f"<p>Data: {html.escape(str(data_dir))}, label column "
                    f"<code>{html.escape(label_column)}</code>.</p>"
                    + dataset_summary_html(_read_tsv(manifest), label_column),
                    "Dataset summary", section=section)


def _add_cross_validation(report, run_dir: Path) -> None:
    section = "Cross-validation"
    metrics_file, oof_file, history_file = (run_dir / "metrics.json", run_dir / "oof_predictions.tsv",
                                            run_dir / "history.jsonl")
    if not metrics_file.is_file():
        why = ("incomplete run: no metrics.json (the training did not finish); rerun the same "
               "`eegformer train` command, or `eegformer train --merge` after `--fold` jobs")
        console.warn(f"{run_dir}: {why}")
        _note(report, "Metrics", why, section)
        return
    metrics = _read_json(metrics_file)
    incomplete = _incomplete_run(run_dir, metrics)
    if incomplete:
        console.warn(f"{run_dir}: {incomplete}")
        _note(report, "Incomplete run", incomplete, section)
    labels = [str(label) for label in metrics.get("labels", [])]
    comparison = metrics.get("comparison")
    paired = ("" if not comparison else "<p>Paired over the same folds: "
              + html.escape(describe_comparison(comparison, comparison["model"],
                                                comparison["reference"])) + ".</p>")
    report.add_html("<p>Out-of-fold metrics, mean +- std over folds (bac = balanced accuracy)."
                    "</p>" + metrics_html(metrics) + paired, "Metrics", section=section)
    report.add_html(metric_notes_html(metrics), "What these numbers mean", section=section)
    matrix = metrics.get("models", {}).get("xaiguiformer", {}).get("confusion_matrix")
    if matrix is not None:
        _figure(report, confusion_matrix_figure(matrix, labels, n_folds=metrics.get("n_folds")),
                "Confusion matrix", section)
    if oof_file.is_file():
        fold_means = {name: model.get("mean", {})
                      for name, model in metrics.get("models", {}).items()}
        try:
            predictions = _read_tsv(oof_file)
            figure = roc_pr_figure(predictions, labels, metrics.get("positive_label"), fold_means)
            table = oof_table_html(predictions, labels)
        except (KeyError, TypeError, ValueError) as exc:  # a truncated or edited table
            raise InputDataError(f"damaged out-of-fold predictions ({type(exc).__name__}: {exc})",
                                 path=oof_file, hint="rerun the same `eegformer train` command"
                                 ) from None
        _figure(report, figure, "ROC and precision-recall curves", section, caption=(
            "Each curve pools the out-of-fold predictions of every fold into one ranking; the "
            "metrics table gives the mean of the per-fold values instead. The two differ "
            "because each fold's model puts its probabilities on a scale of its own."))
        report.add_html(table, "Per-recording out-of-fold predictions", section=section)
    if history_file.is_file() and history_file.stat().st_size:
        _figure(report, training_curves_figure(_read_jsonl(history_file)),
                "Training curves per fold", section)


def _add_attention(report, run_dir: Path) -> None:
    section = "Attention"
    metrics_file, history_file = run_dir / "metrics.json", run_dir / "history.jsonl"
    attention = _read_json(metrics_file).get("attention") if metrics_file.is_file() else None
    if not attention:
        _note(report, "What attention does", "No attention diagnostics: the run has no "
              "metrics.json, or an earlier version of eegformer trained it.", section)
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
        + attention_diagnostics_html(attention), "What attention does (out of fold)",
        section=section)
    if history_file.is_file() and history_file.stat().st_size:
        history = _read_jsonl(history_file)
        if any(h.get("attention") for h in history):
            _figure(report, attention_entropy_figure(history, attention["uniform_entropy"]),
                    "Attention entropy per epoch", section)


def _incomplete_run(run_dir: Path, metrics: dict) -> str | None:
    """Why the run's metrics are not the whole run (fewer folds than ``splits.json`` plans, or
    no final model file), or None."""
    splits_file = run_dir / "splits.json"
    planned = len(_read_json(splits_file).get("folds", [])) if splits_file.is_file() else None
    finished = metrics.get("n_folds")
    if planned and finished is not None and finished < planned:
        return (f"incomplete run: {finished} of {planned} folds finished, so the metrics cover "
                "only those; rerun the same `eegformer train` command to finish it")
    if not (run_dir / "model.pt").is_file():
        return ("incomplete run: no model.pt (the final model was not trained); rerun the same "
                "`eegformer train` command to finish it")
    return None


def _add_explanations(report, run_dir: Path, explanations_dir) -> None:
    from eegformer_cli.explain.export import load_class_summary

    section = "Explanations"
    if explanations_dir is None:
        _note(report, "How to add explanations",
              "No explanations: no --explanations folder was given. Run "
              f"`eegformer explain {run_dir / 'model.pt'} "
              "DATA --out EXPLANATIONS` and then `eegformer report "
              f"{run_dir} --explanations EXPLANATIONS`.", section)
        return
    folder = Path(explanations_dir)
    summary = load_class_summary(folder)
    classes, bands, channels = summary["classes"], summary["bands"], summary["channels"]
    if not classes:
        _note(report, "Explanations", f"{folder} holds no explained recording.", section)
        return
    from eegformer_cli.explain.export import read_recordings_table

    settings = _read_json(folder / "class_summary.json").get("settings", {})
    report.add_html(explanations_source_html(
        run_dir, folder, settings, read_recordings_table(folder), classes,
        [int(n) for n in summary["n_recordings"]]), "About the explanations", section=section)
    _figure(report, band_importance_figure(summary["band_importance"], classes, bands),
            "Band importance per class", section, caption=BAND_IMPORTANCE_NOTE)
    _figure(report, connectivity_circle_figure(summary["channel_pairs"], classes, bands, channels),
            "Strongest channel-pair attributions", section, caption=(
                "Each line joins two channels whose connectivity (coherence + wPLI, all bands "
                "summed) the model's explained-class logit depends on most (captum attribution): "
                "red raises the class's logit, blue lowers it; one colour scale for all panels."))
    for k, name in enumerate(classes):
        _figure(report, attention_figure(summary["attention_coarse"][k],
                                         summary["attention_refined"][k], bands,
                                         f"Attention, class {name} (mean over its recordings)"),
                f"Coarse vs refined attention: {name}", section)


def write_report(run_dir: str | Path, explanations_dir: str | Path | None,
                 out: str | Path) -> Path:
    """Build the report and write it atomically to ``out`` (one HTML file); return the path.

    Raises InputDataError when ``run_dir`` is not a run folder or ``explanations_dir`` is not
    an ``eegformer explain`` output, and OutputError when ``out`` is a folder or its folder
    cannot be created or written (all checked before the build)."""
    _check_run_dir(run_dir)
    if explanations_dir is not None and not (Path(explanations_dir) / "class_summary.npz").is_file():
        raise InputDataError("not an explain output folder (no class_summary.npz)",
                             path=explanations_dir,
                             hint="pass the --out folder of `eegformer explain`")
    if explanations_dir is not None:
        _check_explanations_match(Path(run_dir), Path(explanations_dir))
    out = Path(out)
    if out.is_dir():
        raise OutputError("is a folder", path=out, hint="give a file name, e.g. report.html")
    ensure_dir(out.parent)
    report = build_report(run_dir, explanations_dir)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "report.html"
        report.save(staged, open_browser=False, overwrite=True, verbose="error")
        write_bytes(out, staged.read_bytes())
    return out
