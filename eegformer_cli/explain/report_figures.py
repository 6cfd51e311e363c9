"""The report's figures: each function takes plain data and returns a matplotlib figure (Agg
backend; the caller embeds and closes it), so each can be tested and reused alone.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

#: Channel pairs drawn per class on the head (strongest by |value|).
HEAD_PAIRS = 20


def _inches(width: float, height: float) -> tuple[float, float]:
    """A computed figure size on a quarter-inch grid. mne.Report reads a figure's pixels back
    with int(size x dpi), so a width such as 9.2 in (919.999... px at 100 dpi) loses a pixel
    and the image comes out sheared; quarter inches are exact in binary floating point."""
    return round(width * 4) / 4, round(height * 4) / 4


def legend_below(fig, ax=None, ncol: int = 1) -> None:
    """The legend of ``ax`` (None: of every axes of ``fig``, each label once) under the plots,
    outside every axes, so that it covers no data. ``fig`` must use the constrained layout
    (``layout="constrained"``), which makes room for it."""
    handles, labels = {}, []
    for each in [ax] if ax is not None else fig.axes:
        for handle, label in zip(*each.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    if labels:  # no curve: no legend (and no matplotlib warning)
        fig.legend(
            [handles[label] for label in labels],
            labels,
            loc="outside lower center",
            ncol=ncol,
            fontsize=8,
        )


def confusion_matrix_figure(
    matrix, labels: list[str], title: str = "XAIguiFormer", n_folds: int | None = None
):
    """Counts (rows = true class, columns = predicted), summed over ``n_folds`` folds; the
    title on two lines, so it fits above the matrix whatever the class names' length."""
    from sklearn.metrics import ConfusionMatrixDisplay

    longest = max(len(label) for label in labels)
    fig, ax = plt.subplots(
        figsize=_inches(3.6 + 0.09 * longest + 0.45 * len(labels), 3.4 + 0.45 * len(labels))
    )
    ConfusionMatrixDisplay(np.asarray(matrix), display_labels=labels).plot(ax=ax, colorbar=False)
    summed = "" if n_folds is None else f", summed over {n_folds} fold{'s' * (n_folds != 1)}"
    ax.set_title(f"{title}\nout-of-fold counts{summed}", fontsize=10)
    fig.tight_layout()
    return fig


def _curve_legend(name: str, short: str, pooled: float, fold_mean: float | None) -> str:
    """A curve's legend: its pooled area and, when known, the mean over folds."""
    text = f"{name}: pooled {short} {pooled:.3f}"
    return text if fold_mean is None else f"{text}, mean over folds {fold_mean:.3f}"


def roc_pr_figure(
    predictions: list[dict],
    labels: list[str],
    positive_label: str | None,
    fold_means: dict[str, dict] | None = None,
):
    """ROC and precision-recall curves per model from ``oof_predictions.tsv`` rows (two
    classes: of ``positive_label``; more classes: one-vs-rest of each class, XAIguiFormer).

    Each curve pools every out-of-fold prediction (all folds and repeats); its legend gives
    that pooled area (ROC: AUC; precision-recall: average precision, the estimator of the
    metrics table) and, from ``fold_means`` (model -> metrics.json's ``mean``), the table's
    mean over folds, which differs from it: pooling mixes folds whose scores are not on one
    scale.
    """
    from sklearn.metrics import (
        average_precision_score,
        precision_recall_curve,
        roc_auc_score,
        roc_curve,
    )

    fig, (ax_roc, ax_pr) = plt.subplots(1, 2, figsize=(10, 5), layout="constrained")
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
        auroc, ap = roc_auc_score(truth, score), average_precision_score(truth, score)
        ax_roc.plot(fpr, tpr, label=_curve_legend(name, "AUC", auroc, mean.get("auroc")))
        ax_pr.plot(
            recall,
            precision,
            drawstyle="steps-post",
            label=_curve_legend(name, "AP", ap, mean.get("auc_pr")),
        )
    ax_roc.plot([0, 1], [0, 1], color="grey", linestyle=":")
    of = "" if positive_label is None else f" ({positive_label} = positive)"
    ax_roc.set(xlabel="false positive rate", ylabel="true positive rate", title=f"ROC{of}")
    ax_pr.set(xlabel="recall", ylabel="precision", title=f"Precision-recall{of}")
    legend_below(fig, ncol=2)
    return fig


def training_curves_figure(history: list[dict]):
    """Train and validation loss and validation BAC against epoch, one line per fold."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.5), layout="constrained")
    folds = sorted(
        {(h.get("repeat", 0), h.get("fold", 0)) for h in history}, key=lambda rf: (rf[0] < 0, rf)
    )  # the final model last
    for repeat, fold in folds:
        rows = [h for h in history if (h.get("repeat", 0), h.get("fold", 0)) == (repeat, fold)]
        epochs = [h["epoch"] for h in rows]
        final = repeat < 0  # the model retrained on every participant after the CV
        for ax, key in zip(axes, ("train_loss", "val_loss", "val_bac")):
            values = [np.nan if h.get(key) is None else h[key] for h in rows]
            ax.plot(
                epochs,
                values,
                marker=".",
                label="final model" if final else f"repeat {repeat} fold {fold}",
                **({"color": "black", "linestyle": "--"} if final else {}),
            )
    for ax, key in zip(axes, ("train_loss", "val_loss", "val_bac")):
        ax.set(xlabel="epoch", title=key.replace("_", " "))
    legend_below(fig, axes[-1], ncol=min(len(folds), 6))
    return fig


def attention_entropy_figure(history: list[dict], uniform_entropy: float):
    """Attention entropy (nats, mean over layers and validation recordings) of each pass
    against epoch, the mean over folds with the range over folds shaded."""
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    rows = [h for h in history if h.get("attention") and h.get("fold", 0) >= 0]
    for name, colour in (("coarse", "tab:blue"), ("refined", "tab:orange")):
        by_epoch: dict[int, list[float]] = {}
        for h in rows:
            if name in h["attention"]:
                by_epoch.setdefault(h["epoch"], []).append(
                    float(np.mean(h["attention"][name]["entropy"]))
                )
        if by_epoch:
            epochs = sorted(by_epoch)
            values = [by_epoch[e] for e in epochs]
            ax.plot(epochs, [np.mean(v) for v in values], color=colour, label=name)
            ax.fill_between(
                epochs, [min(v) for v in values], [max(v) for v in values], color=colour, alpha=0.2
            )
    ax.axhline(uniform_entropy, color="grey", linestyle=":", label="uniform (ln T)")
    ax.set(
        xlabel="epoch",
        ylabel="entropy (nats)",
        title="Attention entropy on the validation participants",
    )
    legend_below(fig, ax, ncol=3)
    return fig


def band_importance_figure(
    band_importance: np.ndarray,
    classes: list[str],
    bands: list[str],
    reference: str = "the training recordings' mean connectome",
):
    """Grouped bars: signed band importance (abs-sum 1) per explained class, (K', T) in, each
    class's top band (largest |value|, the band its head plot shows) outlined; the title says
    what the sign is against (``reference``), on lines that fit the figure; the legend below
    the bars."""
    import textwrap

    from eegformer_cli.explain.attributions import top_band

    width_in = _inches(max(6, len(bands) * 0.9), 4.25)
    fig, ax = plt.subplots(figsize=width_in, layout="constrained")
    width = 0.8 / len(classes)
    x = np.arange(len(bands))
    for k, name in enumerate(classes):
        top = top_band(band_importance[k])
        ax.bar(
            x + (k - (len(classes) - 1) / 2) * width,
            band_importance[k],
            width,
            label=f"{name} (top band {bands[top]})",
            edgecolor=["black" if t == top else "none" for t in range(len(bands))],
            linewidth=1.5,
        )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, bands, rotation=30)
    characters = int(width_in[0] * 13)  # about 13 characters per inch at 9 pt
    ax.set_ylabel("signed importance (|.| sums to 1)")
    ax.set_title(
        "\n".join(
            textwrap.wrap(
                "Band importance per explained class (mean): > 0 the band's connectivity raises the "
                f"class's logit compared with {reference}, < 0 lowers it; outlined: each "
                "class's top band",
                characters,
            )
        ),
        fontsize=9,
    )
    legend_below(fig, ax, ncol=min(len(classes), 3))
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
        for col, (name, data) in enumerate(
            (
                (f"coarse - 1/{n_bands}", coarse[layer] - uniform),
                (f"refined - 1/{n_bands}", refined[layer] - uniform),
                ("refined - coarse", refined[layer] - coarse[layer]),
            )
        ):
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
    fig.suptitle(
        f"{title}\nred: more attention than uniform ({uniform:.3f}) or than the coarse "
        "pass; blue: less; each panel on its own scale",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def connectivity_head_figure(
    channel_pairs: np.ndarray,
    classes: list[str],
    bands: list[str],
    channels: list[str],
    n_lines: int = HEAD_PAIRS,
    reference: str = "the training recordings' mean connectome",
):
    """Channel-pair attributions on the head: one panel per explained class ((K', T, C, C) in,
    logit units), the ``n_lines`` strongest pairs of the band with the largest share of that
    class's attribution, drawn between the sensors' montage positions (MNE's sensor topomap,
    nose up, left hemisphere on the left). Each panel has its own diverging colour scale,
    symmetric about 0, and a colour bar with values: red raises the class's logit compared
    with ``reference``, blue lowers it; line width grows with |value|."""
    import mne
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize

    from eegformer_cli.recordings.channels import MONTAGE_NAME

    info = mne.create_info(list(channels), 100.0, "eeg")
    info.set_montage(MONTAGE_NAME, on_missing="ignore", verbose="error")
    fig, axes = plt.subplots(
        1, len(classes), figsize=_inches(4.75 * len(classes), 5.25), squeeze=False
    )
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    cmap = plt.get_cmap("RdBu_r")
    for k, (name, ax) in enumerate(zip(classes, axes[0])):
        mne.viz.plot_sensors(
            info, kind="topomap", axes=ax, show_names=True, show=False, pointsize=12, linewidth=0
        )
        positions = ax.collections[0].get_offsets()  # (C, 2), info order
        band = int(np.abs(channel_pairs[k]).sum(axis=(1, 2)).argmax())
        values = channel_pairs[k, band, upper_i, upper_j]
        strongest = np.argsort(-np.abs(values), kind="stable")[:n_lines]
        strongest = strongest[values[strongest] != 0]
        limit = float(np.abs(values[strongest]).max()) if len(strongest) else 0.0
        limit = limit or 1e-12
        norm = Normalize(-limit, limit)
        order = strongest[::-1]  # strongest drawn last
        segments = [(positions[upper_i[p]], positions[upper_j[p]]) for p in order]
        lines = LineCollection(
            segments,
            colors=cmap(norm(values[order])),
            linewidths=0.8 + 3.2 * np.abs(values[order]) / limit,
            zorder=3,
        )
        ax.add_collection(lines)
        for label in ax.texts:  # channel names stay readable over lines
            label.set(
                zorder=4,
                fontsize=8,
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.7},
            )
        mappable = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
        bar = fig.colorbar(mappable, ax=ax, orientation="horizontal", fraction=0.05, pad=0.02)
        bar.set_label("attribution (logit units)", fontsize=8)
        bar.ax.tick_params(labelsize=7)
        count = "strongest pair" if len(strongest) == 1 else f"strongest {len(strongest)} pairs"
        ax.set_title(
            f"{name}: {count}, {bands[band]}\n(the band with the largest share)", fontsize=9
        )
    fig.suptitle(
        f"Channel pairs on the head: red raises the class's logit, blue lowers it, "
        f"compared with {reference}; each panel on its own scale",
        fontsize=9,
        wrap=True,
    )
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.1, top=0.84, wspace=0.08)
    return fig
