"""The HTML report of a run folder (``eegformer report``): one self-contained file.

Built with :class:`mne.Report` (its scripts and styles are inlined; figures are embedded as
base64 PNG), from the run folder's files (docs/architecture.md) and, optionally, an
``eegformer explain`` output folder. Sections, each present even when its inputs are missing
(it then says what is missing and how to get it):

1. Dataset: recordings, participants, classes, age and sex per class, preprocessing failures
   (the manifest of the training data, whose folder ``config.json`` names).
2. Cross-validation: mean +- std of each metric per model (XAIguiFormer, the logistic
   regression reference, ablations if present), confusion matrix, ROC and precision-recall
   curves from the out-of-fold predictions, training curves per fold.
3. Is the score real?: the shortcut audit and the permutation test (:mod:`trust_report`).
4. Attention: what the coarse and refined attention do, out of fold (metrics.json's
   ``attention``: entropy, residual share, explanation against qkv bias, the logit change when
   attention is replaced by a uniform mean or the identity) and the entropy per epoch on the
   validation participants (history.jsonl).
5. Explanations: band importance per class, the strongest channel-pair attributions per class
   on a connectivity circle (mne-connectivity), coarse versus refined attention per layer.

Figure functions take plain data and return a matplotlib figure (Agg backend, closed by the
caller after embedding), so each can be tested and reused alone.
"""

from __future__ import annotations

import csv
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


# ----------------------------------------------------------------------------- figures

def confusion_matrix_figure(matrix, labels: list[str], title: str = "XAIguiFormer"):
    """Counts (rows = true class, columns = predicted)."""
    from sklearn.metrics import ConfusionMatrixDisplay

    fig, ax = plt.subplots(figsize=(4.5, 4))
    ConfusionMatrixDisplay(np.asarray(matrix), display_labels=labels).plot(ax=ax, colorbar=False)
    ax.set_title(f"{title}: out-of-fold confusion matrix")
    fig.tight_layout()
    return fig


def roc_pr_figure(predictions: list[dict], labels: list[str], positive_label: str | None):
    """ROC and precision-recall curves per model from ``oof_predictions.tsv`` rows (two
    classes: of ``positive_label``; more classes: one-vs-rest of each class, XAIguiFormer)."""
    from sklearn.metrics import auc, precision_recall_curve, roc_curve

    fig, (ax_roc, ax_pr) = plt.subplots(1, 2, figsize=(10, 4.2))
    models = sorted({row["model"] for row in predictions})
    if positive_label is not None:
        curves = [(m, positive_label, [r for r in predictions if r["model"] == m]) for m in models]
    else:
        rows = [r for r in predictions if r["model"] == "xaiguiformer"]
        curves = [(f"xaiguiformer {label}-vs-rest", label, rows) for label in labels]
    for name, label, rows in curves:
        truth = np.array([r["label"] == label for r in rows])
        score = np.array([float(r[f"prob_{label}"]) for r in rows])
        if truth.all() or not truth.any():
            continue
        fpr, tpr, _ = roc_curve(truth, score)
        precision, recall, _ = precision_recall_curve(truth, score)
        ax_roc.plot(fpr, tpr, label=f"{name} (AUC {auc(fpr, tpr):.2f})")
        ax_pr.plot(recall, precision, label=f"{name} (AUC {auc(recall, precision):.2f})")
    ax_roc.plot([0, 1], [0, 1], color="grey", linestyle=":")
    ax_roc.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC")
    ax_pr.set(xlabel="recall", ylabel="precision", title="Precision-recall")
    for ax in (ax_roc, ax_pr):
        if ax.get_legend_handles_labels()[0]:  # no curve: no legend (and no matplotlib warning)
            ax.legend(fontsize=8, loc="lower right" if ax is ax_roc else "lower left")
    fig.tight_layout()
    return fig


def training_curves_figure(history: list[dict]):
    """Train and validation loss and validation BAC against epoch, one line per fold."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    folds = sorted({(h.get("repeat", 0), h.get("fold", 0)) for h in history})
    for repeat, fold in folds:
        rows = [h for h in history if (h.get("repeat", 0), h.get("fold", 0)) == (repeat, fold)]
        epochs = [h["epoch"] for h in rows]
        for ax, key in zip(axes, ("train_loss", "val_loss", "val_bac")):
            values = [np.nan if h.get(key) is None else h[key] for h in rows]
            ax.plot(epochs, values, marker=".", label=f"r{repeat} f{fold}")
    for ax, key in zip(axes, ("train_loss", "val_loss", "val_bac")):
        ax.set(xlabel="epoch", title=key.replace("_", " "))
    axes[-1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def attention_diagnostics_html(attention: dict) -> str:
    """HTML table: one row per pass and layer of metrics.json's ``attention`` summary."""
    columns = [("entropy", "entropy (nats)", ".3f"), ("entropy_fraction", "of ln T", ".1%"),
               ("residual_share", "residual share", ".3f"),
               ("guidance_ratio", "explanation / qkv bias", ".3g"),
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
    fig, ax = plt.subplots(figsize=(6, 3.6))
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
    fig, ax = plt.subplots(figsize=(max(6, len(bands) * 0.9), 3.8))
    width = 0.8 / len(classes)
    x = np.arange(len(bands))
    for k, name in enumerate(classes):
        ax.bar(x + (k - (len(classes) - 1) / 2) * width, band_importance[k], width, label=name)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, bands, rotation=30)
    ax.set(ylabel="signed importance (|.| sums to 1)",
           title="Band importance (DeepLIFT of the explained class), mean per class")
    ax.legend(title="explained class")
    fig.tight_layout()
    return fig


def connectivity_circle_figure(channel_pairs: np.ndarray, classes: list[str], bands: list[str],
                               channels: list[str], n_lines: int = CIRCLE_PAIRS):
    """One connectivity circle per class: the ``n_lines`` strongest channel pairs, summed over
    bands ((K', T, C, C) in; the band with the largest share is named in the title)."""
    from mne_connectivity.viz import plot_connectivity_circle

    fig, axes = plt.subplots(1, len(classes), figsize=(5.5 * len(classes), 5.8),
                             subplot_kw={"projection": "polar"}, squeeze=False)
    summed = channel_pairs.sum(axis=1)                                  # (K', C, C)
    limit = float(np.abs(summed).max()) or 1.0
    for k, (name, ax) in enumerate(zip(classes, axes[0])):
        top_band = bands[int(np.abs(channel_pairs[k]).sum(axis=(1, 2)).argmax())]
        plot_connectivity_circle(
            summed[k], channels, n_lines=n_lines, ax=ax, show=False, facecolor="white",
            textcolor="black", colormap="RdBu_r", vmin=-limit, vmax=limit, colorbar=False,
            title=f"{name}: strongest {n_lines} pairs, all bands\n(red towards the class, "
                  f"blue against; largest band share: {top_band})",
            fontsize_title=10, interactive=False)
    return fig


def attention_figure(coarse: np.ndarray, refined: np.ndarray, bands: list[str], title: str):
    """Per layer: coarse, refined and refined - coarse attention (query rows, key columns),
    (L, T, T) in (a head axis is averaged)."""
    if coarse.ndim == 4:
        coarse, refined = coarse.mean(axis=1), refined.mean(axis=1)
    n_layers = coarse.shape[0]
    fig, axes = plt.subplots(n_layers, 3, figsize=(11, 3.3 * n_layers), squeeze=False)
    limit = float(np.abs(refined - coarse).max()) or 1.0
    for layer in range(n_layers):
        for col, (name, data, cmap, lims) in enumerate((
                ("coarse", coarse[layer], "viridis", (0, None)),
                ("refined", refined[layer], "viridis", (0, None)),
                ("refined - coarse", refined[layer] - coarse[layer], "RdBu_r", (-limit, limit)))):
            ax = axes[layer, col]
            image = ax.imshow(data, cmap=cmap, vmin=lims[0], vmax=lims[1])
            ax.set_xticks(range(len(bands)), bands, rotation=90, fontsize=7)
            ax.set_yticks(range(len(bands)), bands, fontsize=7)
            ax.set_title(f"layer {layer}: {name}", fontsize=9)
            fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(title)
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


def build_report(run_dir: str | Path, explanations_dir: str | Path | None = None):
    """An :class:`mne.Report` of the run (module docs). Raises InputDataError when ``run_dir``
    is not a run folder (no ``config.json``)."""
    import mne

    run_dir = _check_run_dir(run_dir)
    config = _read_json(run_dir / "config.json")
    report = mne.Report(title=f"eegformer run {run_dir.name}", verbose="error")
    _add_dataset(report, config)
    _add_cross_validation(report, run_dir)
    add_trust_section(report, run_dir)
    _add_attention(report, run_dir)
    _add_explanations(report, run_dir, explanations_dir)
    return report


def _note(report, title: str, text: str, section: str) -> None:
    report.add_html(f"<p>{html.escape(text)}</p>", title, section=section)


def _figure(report, fig, title: str, section: str) -> None:
    report.add_figure(fig, title, section=section, image_format="png")
    plt.close(fig)


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
    matrix = metrics.get("models", {}).get("xaiguiformer", {}).get("confusion_matrix")
    if matrix is not None:
        _figure(report, confusion_matrix_figure(matrix, labels), "Confusion matrix", section)
    if oof_file.is_file():
        try:
            figure = roc_pr_figure(_read_tsv(oof_file), labels, metrics.get("positive_label"))
        except (KeyError, TypeError, ValueError) as exc:  # a truncated or edited table
            raise InputDataError(f"damaged out-of-fold predictions ({type(exc).__name__}: {exc})",
                                 path=oof_file, hint="rerun the same `eegformer train` command"
                                 ) from None
        _figure(report, figure, "ROC and precision-recall curves", section)
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
        "the tokens it is added to. <b>Explanation / qkv bias</b> (refined pass): how large the "
        "explanation's part of the refined queries and keys is against the bias; near 0 means "
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
    counts = ", ".join(f"{c}: {n}" for c, n in zip(classes, summary["n_recordings"]))
    report.add_html(f"<p>From {html.escape(str(folder))}; recordings per explained class: "
                    f"{html.escape(counts)}.</p>", "About the explanations", section=section)
    _figure(report, band_importance_figure(summary["band_importance"], classes, bands),
            "Band importance per class", section)
    _figure(report, connectivity_circle_figure(summary["channel_pairs"], classes, bands, channels),
            "Strongest channel-pair attributions", section)
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
