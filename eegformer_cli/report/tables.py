"""The report's HTML pieces for the run's own sections (run summary, dataset, cross-validation,
per-recording predictions, training curves, attention): tables and plain-language notes, each
a function of the run folder's plain data returning an HTML string (values escaped). The
preprocessing table is :mod:`.preprocessing`'s, the explanations section's pieces
:mod:`.explanation_notes`'.
"""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path

import numpy as np

from eegformer_cli.evaluation.run_metrics import RunMetrics
from eegformer_cli.experiment import run_folder
from eegformer_cli.experiment.verdict import scorer
from eegformer_cli.report.page import inline_code

METRICS = ("bac", "auroc", "auc_pr", "accuracy")


def _known(value: str | None) -> bool:
    return value not in (None, "", "n/a", "nan", "NaN")


def table_html(header: list[str], rows: list[list]) -> str:
    """A striped table of ``header`` and ``rows`` (cells escaped)."""
    head = "".join(f"<th>{inline_code(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{inline_code(str(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f'<table class="table table-sm table-striped"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def dataset_summary_html(manifest: list[dict], label_column: str) -> str:
    """HTML tables: counts, classes with age (mean +- sd, range) and sex, failures."""
    ok = [r for r in manifest if r.get("status") == "ok"]
    failed = [r for r in manifest if r.get("status") != "ok"]
    participants = {r.get("participant_id") for r in manifest if _known(r.get("participant_id"))}
    parts = [
        table_html(
            ["recordings", "usable", "failed", "participants"],
            [[len(manifest), len(ok), len(failed), len(participants)]],
        )
    ]
    rows = []
    for label in sorted({r.get(label_column, "n/a") for r in ok}):
        members = [r for r in ok if r.get(label_column, "n/a") == label]
        ages = np.array([float(r["age"]) for r in members if _known(r.get("age"))])
        sexes = Counter(r.get("sex") if _known(r.get("sex")) else "n/a" for r in members)
        age_text = (
            (
                f"{ages.mean():.1f} +- {ages.std():.1f} ({ages.min():.0f}-{ages.max():.0f}), "
                f"n/a {len(members) - len(ages)}"
            )
            if len(ages)
            else "n/a"
        )
        rows.append(
            [label, len(members), age_text, ", ".join(f"{k} {v}" for k, v in sorted(sexes.items()))]
        )
    parts.append(table_html([label_column, "recordings", "age (years)", "sex"], rows))
    if failed:
        parts.append(
            "<p>Preprocessing failures:</p>"
            + table_html(
                ["recording_id", "error"], [[r.get("recording_id"), r.get("error")] for r in failed]
            )
        )
    else:
        parts.append("<p>No preprocessing failures.</p>")
    return "\n".join(parts)


def metrics_html(metrics: RunMetrics) -> str:
    """HTML table: mean +- std of :data:`METRICS` per model in ``metrics.json``."""
    rows = []
    for name, model in metrics.models.items():
        cells = [(getattr(model.mean, m), getattr(model.std, m)) for m in METRICS]
        rows.append(
            [name]
            + [
                "n/a" if mean is None else f"{mean:.3f}" + ("" if std is None else f" +- {std:.3f}")
                for mean, std in cells
            ]
        )
    return table_html(["model"] + list(METRICS), rows)


def rows_html(rows: list[tuple[str, str]]) -> str:
    """A two-column table of (label, HTML value) rows; labels are escaped, values are not."""
    body = "".join(
        f'<tr><th scope="row">{inline_code(label)}</th><td>{value}</td></tr>'
        for label, value in rows
    )
    return f'<table class="table table-sm"><tbody>{body}</tbody></table>'


def _scheme_text(scheme: dict | None, n_folds: int | None) -> str:
    """The evaluation scheme of splits.json / metrics.json in words."""
    if not scheme:
        return "unknown (no splits.json)"
    inner = (
        f"; in each fold {scheme['val_fraction']:.0%} of the training participants are set "
        "aside to choose the epoch"
        if scheme.get("val_fraction")
        else ""
    )
    if scheme.get("kind") == "holdout":
        return (
            f"holdout: {scheme.get('fraction', 0):.0%} of the participants kept for test, "
            f"never used in training{inner}"
        )
    k, repeats = scheme.get("k"), scheme.get("repeats", 1)
    if k is None:
        return f"{n_folds} folds from {inline_code(str(scheme.get('from_file', 'a splits file')))}"
    tested = "once" if repeats == 1 else f"{repeats} times"
    return (
        f"{scheme.get('unit', 'participant')}-wise {k}-fold cross-validation, {repeats} repeat"
        f"{'s' * (repeats != 1)} ({k * repeats} folds; every participant is tested "
        f"{tested}, by models that never saw them){inner}"
    )


def run_summary_html(
    run_dir: Path,
    config: dict,
    metrics: RunMetrics | None,
    scheme: dict | None,
    incomplete: str | None = None,
) -> str:
    """Which run made this report: preset, epochs, evaluation, seed, classes and positive
    class, data, model, final model, device and versions (from ``config.json``, and
    ``metrics.json`` / ``splits.json`` when there). ``incomplete``: why the run is not
    finished (None: it is), said in place of a finish time; without ``model.pt`` its row
    says it was not written, never what it would be."""
    train, model = config.get("train_config", {}), config.get("model_config", {})
    versions = config.get("versions", {})
    rows = [
        ("run folder", inline_code(str(run_dir.resolve()))),
        ("finished", inline_code(_finished_text(run_dir, incomplete))),
        ("preset", f"<code>{inline_code(str(config.get('preset', train.get('preset'))))}</code>"),
        ("evaluation", _scheme_text(scheme, metrics.n_folds if metrics else None)),
        ("training", inline_code(_training_text(train))),
        ("seed", inline_code(str(train.get("seed")))),
        ("classes", _classes_html(config)),
        (
            "data",
            inline_code(
                f"{config.get('data_dir')}: {config.get('n_recordings')} "
                f"recordings of {config.get('n_participants')} participants"
            ),
        ),
        (
            "model",
            inline_code(
                _model_text(model)
                + (
                    f"; the score is that of {scorer(metrics)}"
                    if metrics and metrics.linear_path
                    else ""
                )
            ),
        ),
        (
            run_folder.MODEL,
            inline_code(
                _final_model_text(scheme, config.get("n_participants"))
                if run_folder.has_final_model(run_dir)
                else "not written: the run stopped before its final model; rerun the same "
                "`eegformer train` command to train it"
            ),
        ),
        ("device", inline_code(str(config.get("device")))),
        (
            "versions",
            inline_code(", ".join(f"{name} {version}" for name, version in versions.items())),
        ),
    ]
    return rows_html(rows)


def _finished_text(run_dir: Path, incomplete: str | None = None) -> str:
    """When the run wrote its ``metrics.json`` (UTC, to the minute), or that it did not
    finish: ``incomplete``, why (a time would read as the end of a run that has none)."""
    finished = run_folder.metrics_time(run_dir)
    if finished is None:
        return "not finished (no metrics.json)"
    if incomplete is not None:
        return "not finished: " + incomplete.removeprefix("incomplete run: ")
    return datetime.datetime.fromtimestamp(finished, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"
    )


def _training_text(train: dict) -> str:
    """The training settings of ``config.json``'s ``train_config`` in words: epochs, which
    epoch is kept, early stop, batch, learning rate and weight decay."""
    selection = _selection_text(train)
    patience = train.get("patience") or 0
    return (
        f"up to {train.get('epochs')} epochs ({selection}; early stop "
        f"{'after ' + str(patience) + ' epochs without improvement' if patience else 'off'}), "
        f"batch of {train.get('batch_size')} segments, peak learning rate {train.get('lr')}, "
        f"weight decay {train.get('weight_decay')}"
    )


def _selection_text(train: dict) -> str:
    """Which epoch a fit keeps, from ``config.json``'s ``train_config``."""
    metric = train.get("selection_metric", "score")
    # runs of earlier versions may have selected over every epoch ("best")
    if train.get("selection") == "best":
        return f"the epoch with the best validation {metric} is kept"
    return f"the epoch with the best validation {metric} in the second half of training is kept"


#: A fold's validation loss "rises" when its last epoch's is this much above its lowest.
RISING_LOSS = 1.1


def training_curves_caption(history: list[dict], train: dict, linear_path: bool) -> str:
    """The training curves' caption: what each panel is, which epoch is kept (``train``:
    ``config.json``'s ``train_config``), what a rising validation loss means, and in how many
    folds of ``history`` (history.jsonl's records) it rises (its last epoch's above
    :data:`RISING_LOSS` times its lowest); ``linear_path``: the model has one."""
    folds: dict[tuple, list[float]] = {}
    for h in history:
        if h.get("fold", 0) >= 0 and h.get("val_loss") is not None:
            folds.setdefault((h.get("repeat", 0), h.get("fold", 0)), []).append(h["val_loss"])
    rising = sum(len(v) > 1 and v[-1] > RISING_LOSS * min(v) for v in folds.values())
    here = (
        f" Here it rises after its lowest in {rising} of the {len(folds)} folds (its last epoch "
        f"more than {RISING_LOSS - 1:.0%} above it)."
        if rising
        else ""
    )
    offset = (
        " The logits are the static stage's (fixed, fitted first) plus the transformer "
        "path's, so these curves are the transformer path's training on top of the static "
        "stage; whether it is kept is decided at the selected epoch."
        if linear_path
        else ""
    )
    return (
        "One line per fold, the final model black and dashed. train loss: the cross-entropy "
        "(nats) per segment on the fold's training participants, with augmentation; val loss "
        "and val bac: of each validation recording's logits (participants set aside inside "
        "the fold's training part, never its test participants)."
        f"{offset} {_selection_text(train).capitalize()}, and only that epoch is scored out "
        "of fold. A validation loss that rises while the training loss falls is the model "
        "fitting its training participants beyond what carries over (overfitting); with val "
        "bac steady it means probabilities growing over-confident (the calibration section "
        f"measures them).{here}"
    )


def _classes_html(config: dict) -> str:
    """The run's classes and label column, and its positive class when it has one."""
    labels = [str(label) for label in config.get("labels", [])]
    positive = config.get("positive_label")
    return inline_code(f"{', '.join(labels)} (column {config.get('label_column')})") + (
        ""
        if positive is None
        else f"; positive class for AUROC and AUC-PR: <b>{inline_code(str(positive))}</b>"
    )


def _model_text(model: dict) -> str:
    """``config.json``'s ``model_config`` in words, and the reference models beside it."""
    return (
        f"XAIguiFormer, d_model {model.get('d_model')}, {model.get('n_layers')} layer(s), "
        f"{model.get('n_heads')} heads, explanation-guided refinement "
        f"{'on' if model.get('xai_refinement', True) else 'off'}, frequency encoding "
        f"{model.get('frequency_encoding')}; beside it a logistic regression on the same "
        "tokens and, when the folder holds band covariances, pyRiemann's tangent space of "
        "them + a logistic regression"
    )


def _final_model_text(scheme: dict | None, n_participants) -> str:
    """What ``model.pt`` is: the holdout model, or the model retrained on all
    ``n_participants`` after the cross-validation."""
    if (scheme or {}).get("kind") == "holdout":
        return (
            "the holdout model: trained on the training part, evaluated on the held-out "
            "participants"
        )
    return (
        f"retrained after the cross-validation on all {n_participants} participants (its "
        "predictions on them are not out of fold: the figures below come from the fold "
        "models)"
    )


def metric_notes_html(metrics: RunMetrics) -> str:
    """A plain-language box: what each metric, the spread and the paired interval mean, with
    this run's chance levels."""
    labels = [str(label) for label in metrics.labels]
    positive, n_folds = metrics.positive_label, metrics.n_folds
    share = _positive_share(metrics)
    auc_pr_chance = "" if share is None else f" (chance here: {share:.2f}, the share of {positive})"
    of_positive = "" if positive is None else f" of the positive class ({positive})"
    clipped = (
        " Here it reached past the possible range and was clipped to it: too few folds "
        "for an informative interval."
        if any(c.ci95_clipped for c in metrics.all_comparisons)
        else ""
    )
    items = [
        (
            "bac (balanced accuracy)",
            "the share of each class's recordings classified correctly, averaged over the "
            f"classes; 1 is perfect, {1 / max(len(labels), 1):.2f} is chance "
            f"({len(labels)} classes), whatever the class sizes.",
        ),
        (
            "auroc",
            f"the probability that a recording{of_positive} gets a higher predicted probability of "
            "that class than a recording of another class; 0.5 is chance, 1 a perfect ranking. It "
            "does not depend on the 0.5 threshold that bac and accuracy use.",
        ),
        (
            "auc_pr (average precision)",
            f"precision{of_positive} averaged over every recall level; it rewards ranking that "
            f"class's recordings first{auc_pr_chance}.",
        ),
        (
            "accuracy",
            "the share of all recordings classified correctly (it favours the larger "
            "class when the classes differ in size).",
        ),
        (
            "mean +- std",
            f"mean over the {n_folds} test fold{'s' if n_folds != 1 else ''} and the standard "
            "deviation between them: how much the result varies with the participants tested, not a "
            "confidence interval. A fold's test participants were never used to "
            "train or choose its model.",
        ),
        (
            "paired difference and 95 % interval",
            f"the bac of {scorer(metrics)} minus a reference's (the logistic regression on "
            "the same tokens; the tangent space of the band covariances), fold by fold on the "
            "same test "
            "participants; the interval (corrected resampled t-test, which allows for folds "
            "sharing training participants) shows what the folds cannot rule out: if it contains "
            f"0, these data do not tell which model is better.{clipped}",
        ),
    ]
    body = "".join(
        f"<dt>{inline_code(name)}</dt><dd>{inline_code(text)}</dd>" for name, text in items
    )
    return f'<div class="eeg-note"><dl>{body}</dl></div>'


def _positive_share(metrics: RunMetrics) -> float | None:
    """The positive class's share of the recordings (rows of the transformer's confusion
    matrix): the chance level of AUC-PR; None without a positive class or a matrix."""
    labels = [str(label) for label in metrics.labels]
    positive = metrics.positive_label
    matrix = np.asarray(metrics.transformer.confusion_matrix or [[0]], dtype=float)
    return (
        matrix[labels.index(positive)].sum() / matrix.sum()
        if positive in labels and matrix.sum()
        else None
    )


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


#: The references' columns in the out-of-fold table: short name -> model name.
REFERENCE_COLUMNS = {"LR": "logistic_regression", "TS": "tangent_space"}


def _oof_summary(rows: list[dict], labels: list[str]) -> tuple[str, float, int]:
    """One model's out-of-fold ``rows`` of one recording: the class of highest mean
    probability, the mean probability of the true class, and how many rows were wrong."""
    mean_probs = {label: _mean([float(r[f"prob_{label}"]) for r in rows]) for label in labels}
    return (
        max(mean_probs, key=mean_probs.__getitem__),
        mean_probs.get(rows[0]["label"], np.nan),
        sum(r["predicted"] != r["label"] for r in rows),
    )


def _oof_rows(
    model_rows: dict[str, list[dict]], references: list[dict[str, list[dict]]], labels: list[str]
) -> list[tuple]:
    """The per-recording table's rows, most often wrong first, then least sure of the true
    class: ``(wrong, P(true), recording, participant, true class, predicted, folds,
    [(predicted, P(true), wrong) per reference])`` from XAIguiFormer's ``model_rows`` and each
    reference's (recording id -> its rows)."""
    table = []
    for recording_id, rows in model_rows.items():
        predicted, p_true, wrong = _oof_summary(rows, labels)
        reference = [
            _oof_summary(ref_rows[recording_id], labels)
            if recording_id in ref_rows
            else ("n/a", np.nan, 0)
            for ref_rows in references
        ]
        folds = ", ".join(f"r{r['repeat']} f{r['fold']}" for r in rows)
        table.append(
            (
                wrong,
                p_true,
                recording_id,
                rows[0]["participant_id"],
                rows[0]["label"],
                predicted,
                folds,
                reference,
            )
        )
    table.sort(key=lambda t: (-t[0], t[1], t[2]))
    return table


def _oof_row_html(row: tuple) -> str:
    """One row of :func:`_oof_rows` as HTML, tinted when XAIguiFormer was ever wrong."""
    wrong, p_true, recording_id, participant, label, predicted, folds, refs = row
    cells = [recording_id, participant, label, predicted, f"{p_true:.3f}", wrong, folds]
    for ref in refs:
        cells += [ref[0], "n/a" if np.isnan(ref[1]) else f"{ref[1]:.3f}"]
    tint = ' class="table-danger"' if wrong else ""
    return f"<tr{tint}>" + "".join(f"<td>{inline_code(str(c))}</td>" for c in cells) + "</tr>"


def oof_table_html(predictions: list[dict], labels: list[str]) -> str:
    """Every recording's out-of-fold predictions, one row each, misclassified first: true
    class, XAIguiFormer's prediction (argmax of its probabilities averaged over repeats), its
    probability of the true class, how many of its out-of-fold predictions were wrong, the
    folds, and the same for each reference in the predictions (the logistic regression, the
    tangent space). Sortable by any column in the browser (bootstrap-table, which mne.Report
    embeds)."""
    by_model: dict[str, dict[str, list[dict]]] = {}
    for row in predictions:
        by_model.setdefault(row["model"], {}).setdefault(row["recording_id"], []).append(row)
    model_rows = by_model.get("xaiguiformer", {})
    references = {
        short: by_model[name] for short, name in REFERENCE_COLUMNS.items() if name in by_model
    }
    table = _oof_rows(model_rows, list(references.values()), labels)
    repeats = max((len(rows) for rows in model_rows.values()), default=1)
    header = [
        "recording",
        "participant",
        "true class",
        "predicted",
        "P(true)",
        f"wrong (of {repeats})",
        "test fold",
    ] + [f"{short} {what}" for short in references for what in ("predicted", "P(true)")]
    head = "".join(f'<th data-sortable="true">{inline_code(h)}</th>' for h in header)
    body = [_oof_row_html(row) for row in table]
    n_wrong = sum(t[0] > 0 for t in table)
    return (
        f"<p>{len(table)} recordings, {n_wrong} misclassified by the model at least once "
        "(tinted, listed first; click a column header to sort, all pages at once). "
        "<i>P(true)</i>: the "
        "probability the model gave the recording's true class, averaged over its "
        f"out-of-fold predictions (one per repeat, {repeats} here); <i>wrong</i>: how many "
        "of them were wrong; <i>test fold</i>: r = repeat, f = fold; <i>LR</i>: the "
        "logistic regression, <i>TS</i>: the tangent-space reference, tested on the same "
        "folds.</p>"
        '<div class="eeg-oof"><table class="table table-sm table-hover" data-toggle="table" '
        'data-pagination="true" data-page-size="25" data-page-list="[25, 100, all]">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def attention_diagnostics_html(attention: dict) -> str:
    """HTML table: one row per pass and layer of metrics.json's ``attention`` summary."""
    columns = [
        ("entropy", "entropy (nats)", ".3f"),
        ("entropy_fraction", "of ln T", ".1%"),
        ("residual_share", "residual share", ".3f"),
        ("guidance_ratio", "explanation / rest", ".3g"),
        ("logit_change_uniform", "logit change, uniform", ".3f"),
        ("flips_uniform", "flips, uniform", ".1%"),
        ("logit_change_identity", "logit change, identity", ".3f"),
        ("flips_identity", "flips, identity", ".1%"),
    ]
    rows = []
    for name, values in attention.get("passes", {}).items():
        for layer in range(len(values.get("entropy", []))):
            rows.append(
                [name, layer]
                + [
                    format(values[key][layer], fmt) if key in values else ""
                    for key, _, fmt in columns
                ]
            )
    return table_html(["pass", "layer"] + [title for _, title, _ in columns], rows)
