"""The report's figures: each function takes plain data and returns a matplotlib figure (Agg
backend; the caller embeds and closes it), so each can be tested and reused alone; the
attention figures are :mod:`.attention_figures`'.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from eegformer_cli.evaluation.run_metrics import MeanScores

#: Channel pairs drawn per class on the head (strongest by |value|).
HEAD_PAIRS = 20
#: What a chart says in place of a top band when every band's value is 0: no connectivity
#: entry carries any of the logit (:func:`eegformer_cli.explain.attributions.top_band`).
NO_BAND = "no band outlined: no connectivity entry carries any of the logit"


def inches(width: float, height: float) -> tuple[float, float]:
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
        figsize=inches(3.6 + 0.09 * longest + 0.45 * len(labels), 3.4 + 0.45 * len(labels))
    )
    ConfusionMatrixDisplay(np.asarray(matrix), display_labels=labels).plot(ax=ax, colorbar=False)
    summed = "" if n_folds is None else f", summed over {n_folds} fold{'s' * (n_folds != 1)}"
    ax.set_title(f"{title}\nout-of-fold counts{summed}", fontsize=10)
    fig.tight_layout()
    return fig


def coinciding(curves: dict[str, object]) -> list[list[str]]:
    """The names of ``curves`` (name -> what draws its curve, compared with ``==``) grouped
    by equal curves, in first-seen order: a model whose predictions are another's (XAIguiFormer
    whose transformer was kept in no fold, and its linear path alone) is drawn once."""
    groups: list[tuple[object, list[str]]] = []
    for name, data in curves.items():
        match = next((names for drawn, names in groups if drawn == data), None)
        if match is None:
            groups.append((data, [name]))
        else:
            match.append(name)
    return [names for _, names in groups]


def same_curve_name(names: list[str]) -> str:
    """The legend's name of one curve drawn for several models: "xaiguiformer = linear_path
    (identical curves, drawn once)"."""
    if len(names) == 1:
        return names[0]
    return " = ".join(names) + " (identical curves, drawn once)"


def _curve_legend(name: str, short: str, pooled: float, fold_mean: float | None) -> str:
    """A curve's legend: its pooled area and, when known, the mean over folds."""
    text = f"{name}: pooled {short} {pooled:.3f}"
    return text if fold_mean is None else f"{text}, mean over folds {fold_mean:.3f}"


def _roc_curves(
    predictions: list[dict], labels: list[str], positive_label: str | None
) -> list[tuple[list[str], str, list[dict]]]:
    """The curves of :func:`roc_pr_figure`: (the models it stands for, the class, their rows);
    models with the same predictions (:func:`coinciding`) share one."""
    models = sorted({row["model"] for row in predictions})
    if positive_label is None:
        rows = [r for r in predictions if r["model"] == "xaiguiformer"]
        return [([f"xaiguiformer {label}-vs-rest"], label, rows) for label in labels]
    by_model = {m: [r for r in predictions if r["model"] == m] for m in models}
    groups = coinciding(
        {
            m: sorted(
                (
                    r.get("recording_id"),
                    r.get("repeat"),
                    r.get("fold"),
                    float(r[f"prob_{positive_label}"]),
                )
                for r in rows
            )
            for m, rows in by_model.items()
        }
    )
    return [(names, positive_label, by_model[names[0]]) for names in groups]


def roc_pr_figure(
    predictions: list[dict],
    labels: list[str],
    positive_label: str | None,
    fold_means: dict[str, MeanScores] | None = None,
):
    """ROC and precision-recall curves per model from ``oof_predictions.tsv`` rows (two
    classes: of ``positive_label``; more classes: one-vs-rest of each class, XAIguiFormer).

    Models with the same predictions (:func:`coinciding`) share one curve, its legend naming
    each. Each curve pools every out-of-fold prediction (all folds and repeats); its legend gives
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
    curves = _roc_curves(predictions, labels, positive_label)
    means = fold_means or {}
    for names, label, rows in curves:
        truth = np.array([r["label"] == label for r in rows])
        score = np.array([float(r[f"prob_{label}"]) for r in rows])
        if truth.all() or not truth.any():
            continue
        fpr, tpr, _ = roc_curve(truth, score)
        precision, recall, _ = precision_recall_curve(truth, score)
        mean, name = means.get(names[0]), same_curve_name(names)
        auroc, ap = roc_auc_score(truth, score), average_precision_score(truth, score)
        ax_roc.plot(
            fpr, tpr, label=_curve_legend(name, "AUC", auroc, None if mean is None else mean.auroc)
        )
        ax_pr.plot(
            recall,
            precision,
            drawstyle="steps-post",
            label=_curve_legend(name, "AP", ap, None if mean is None else mean.auc_pr),
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


def band_importance_figure(
    band_importance: np.ndarray,
    classes: list[str],
    bands: list[str],
    baseline: str = "the training recordings' mean connectome",
):
    """Grouped bars: signed band importance (abs-sum 1) per explained class, (K', T) in, each
    class's top band (largest |value|, the band its head plot shows) outlined; the title says
    what the sign is against (``baseline``), on lines that fit the figure; the legend below
    the bars. A class whose bands are all 0 (no connectivity entry carries any of its logit:
    :func:`attributions.top_band` is None) has no band outlined, and its legend entry says
    so."""
    import textwrap

    from eegformer_cli.explain.attributions import top_band

    width_in = inches(max(6, len(bands) * 0.9), 4.25)
    fig, ax = plt.subplots(figsize=width_in, layout="constrained")
    width = 0.8 / len(classes)
    x = np.arange(len(bands))
    tops = [top_band(values) for values in band_importance]
    for k, name in enumerate(classes):
        top = tops[k]
        ax.bar(
            x + (k - (len(classes) - 1) / 2) * width,
            band_importance[k],
            width,
            label=f"{name} (top band {bands[top]})" if top is not None else f"{name} (no top band)",
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
                f"class's logit compared with {baseline}, < 0 lowers it; outlined: each "
                "class's top band"
                + (
                    ""
                    if all(t is not None for t in tops)
                    else " (no top band: every band 0, no connectivity entry carries any of "
                    "the class's logit)"
                ),
                characters,
            )
        ),
        fontsize=9,
    )
    legend_below(fig, ax, ncol=min(len(classes), 3))
    return fig


def _head_axes(ax, channels: list[str]) -> np.ndarray:
    """MNE's sensor topomap of ``channels`` on ``ax`` (montage positions, nose up, left
    hemisphere on the left, names readable over lines); returns the positions (C, 2)."""
    import mne

    from eegformer_cli.recordings.channels import MONTAGE_NAME

    info = mne.create_info(list(channels), 100.0, "eeg")
    info.set_montage(MONTAGE_NAME, on_missing="ignore", verbose="error")
    mne.viz.plot_sensors(
        info, kind="topomap", axes=ax, show_names=True, show=False, pointsize=12, linewidth=0
    )
    for label in ax.texts:  # channel names stay readable over lines
        label.set(
            zorder=4,
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.7},
        )
    return ax.collections[0].get_offsets()  # (C, 2), info order


def _strongest(values: np.ndarray, n_lines: int) -> np.ndarray:
    """Indices of the ``n_lines`` largest non-zero |``values``|, strongest first."""
    strongest = np.argsort(-np.abs(values), kind="stable")[:n_lines]
    return strongest[values[strongest] != 0]


def _draw_pairs(
    ax, positions, values: np.ndarray, cautioned: np.ndarray, drawn: np.ndarray
) -> float:
    """Pairs ``drawn`` (indices into the upper-triangle order of ``values`` (n_pairs,)) as lines
    between ``positions``, coloured on a diverging scale symmetric about 0, wider when
    stronger, dashed where ``cautioned`` (n_pairs,) bool; returns the scale's limit."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize

    upper_i, upper_j = np.triu_indices(len(positions), 1)
    limit = (float(np.abs(values[drawn]).max()) if len(drawn) else 0.0) or 1e-12
    norm, cmap = Normalize(-limit, limit), plt.get_cmap("RdBu_r")
    order = np.asarray(drawn, dtype=int)[np.argsort(np.abs(values[drawn]), kind="stable")]
    lines = LineCollection(  # strongest drawn last
        [(positions[upper_i[p]], positions[upper_j[p]]) for p in order],
        colors=cmap(norm(values[order])),
        linewidths=0.8 + 3.2 * np.abs(values[order]) / limit,
        linestyles=["--" if cautioned[p] else "-" for p in order],
        zorder=3,
    )
    ax.add_collection(lines)
    return limit


def colour_bar(fig, ax, limit: float, label: str):
    from matplotlib.colors import Normalize

    mappable = plt.cm.ScalarMappable(norm=Normalize(-limit, limit), cmap=plt.get_cmap("RdBu_r"))
    bar = fig.colorbar(mappable, ax=ax, orientation="horizontal", fraction=0.05, pad=0.02)
    bar.set_label(label, fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return bar


def _caution_line(shown: np.ndarray, cautioned: np.ndarray) -> str:
    """A head panel's line on the drawn pairs artefacts can fake (dashed), or ``""``."""
    n = int(cautioned[shown].sum()) if len(shown) else 0
    if not n:
        return ""
    return f"\ncaution: {n} of {len(shown)} dashed (eye or muscle artefacts can fake them)"


def shown_band(
    band_importance: np.ndarray, bands: list[str], band: str | None = None
) -> int | None:
    """The band a head plot shows: ``band`` when given (by name), else the top band of the
    chart whose values are ``band_importance`` (T,) (:func:`attributions.top_band`); None when
    no band is given and the chart's are all 0 (no band to show)."""
    from eegformer_cli.explain.attributions import top_band

    return bands.index(band) if band is not None else top_band(band_importance)


def connectivity_head_figure(
    channel_pairs: np.ndarray,
    classes: list[str],
    bands: list[str],
    channels: list[str],
    *,
    band_importance: np.ndarray,
    band: str | None = None,
    cautions: dict | None = None,
    n_lines: int = HEAD_PAIRS,
    baseline: str = "the training recordings' mean connectome",
):
    """Channel-pair attributions on the head: one panel per explained class ((K', T, C, C) in,
    logit units), the ``n_lines`` strongest pairs of one band, drawn between the sensors'
    montage positions (MNE's sensor topomap, nose up, left hemisphere on the left).

    The band: ``band`` when given, else the class's top band in the band-importance chart
    (largest |``band_importance``|, (K', T): the chart's values; :func:`shown_band`). Pairs
    that artefacts can fake in that band under the rule ``cautions``
    (:func:`~eegformer_cli.connectivity.artefacts.caution_rules`) are dashed and counted in
    the title. Each panel has its own diverging colour scale, symmetric about 0, and a colour
    bar with values: red raises the class's logit compared with ``baseline``, blue lowers
    it; line width grows with |value|."""
    from eegformer_cli.connectivity.artefacts import caution_masks

    fig, axes = plt.subplots(
        1, len(classes), figsize=inches(4.75 * len(classes), 5.5), squeeze=False
    )
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    masks = caution_masks(cautions or {}, bands, channels)[:, upper_i, upper_j]
    for k, (name, ax) in enumerate(zip(classes, axes[0])):
        positions = _head_axes(ax, channels)
        shown = shown_band(band_importance[k], bands, band)
        if shown is None:  # no band carries any of the logit: no pair to draw
            ax.set_title(f"{name}: no pairs drawn\n({NO_BAND})", fontsize=9)
            continue
        values = channel_pairs[k, shown, upper_i, upper_j]
        drawn = _strongest(values, n_lines)
        limit = _draw_pairs(ax, positions, values, masks[shown], drawn)
        colour_bar(fig, ax, limit, "attribution (logit units)")
        count = (
            "strongest pair"
            if len(drawn) == 1
            else f"strongest {len(drawn)} pairs"
            if len(drawn)
            else "no pair with a non-zero attribution"
        )
        why = "chosen with --band" if band is not None else "top band of the chart"
        ax.set_title(
            f"{name}: {count}, {bands[shown]}\n({why}){_caution_line(drawn, masks[shown])}",
            fontsize=9,
        )
    fig.suptitle(
        f"Channel pairs on the head: red raises the class's logit, blue lowers it, "
        f"compared with {baseline}; each panel on its own scale",
        fontsize=9,
        wrap=True,
    )
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.1, top=0.82, wspace=0.08)
    return fig


def _contrast_band_bars(ax, contrast_band: np.ndarray, bands: list[str], classes: list[str]):
    """The contrast's sum per band (``contrast_band`` (T,), logit units) as bars on ``ax``: red
    towards the second class, blue towards the first, the top band (largest |value|)
    outlined; none when every band's sum is 0, and the title says so."""
    from eegformer_cli.explain.attributions import top_band

    first, second = classes
    x = np.arange(len(bands))
    top = top_band(contrast_band)
    ax.bar(
        x,
        contrast_band,
        color=np.where(np.asarray(contrast_band) >= 0, "tab:red", "tab:blue"),
        edgecolor=["black" if t == top else "none" for t in range(len(bands))],
        linewidth=1.5,
    )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, bands)
    ax.set_ylabel("logit units", fontsize=8)
    outlined = "Outlined: the top band" if top is not None else "\n" + NO_BAND.capitalize()
    ax.set_title(
        f"Per band (pairs summed): > 0 {second}'s connectivity, against {first}'s, pushes "
        f"towards {second}; < 0 towards {first}. {outlined}",
        fontsize=9,
    )


def _contrast_bars_alone(contrast_band: np.ndarray, bands: list[str], classes: list[str]):
    """The class contrast's figure when every band's sum is 0 (``contrast_band`` (T,)): its
    bars alone, none outlined, and no head, as no channel pair carries any of it."""
    first, second = classes
    fig = plt.figure(figsize=inches(10.5, 4.0), layout="constrained")
    _contrast_band_bars(fig.add_subplot(), contrast_band, bands, classes)
    fig.suptitle(
        f"Class contrast, {second} against {first}: no head plots, as no channel pair "
        "carries any of it",
        fontsize=10,
    )
    return fig


#: The measures of the class contrast's heads, each on its own: its name in words, and the keys
#: of its push and of its connectivity difference in the class summary.
CONTRAST_MEASURES = (
    ("coherence", "contrast_coh_pairs", "coh_difference"),
    ("wPLI", "contrast_wpli_pairs", "wpli_difference"),
)


def contrast_figure(
    summary: dict,
    classes: list[str],
    *,
    band: str | None = None,
    cautions: dict | None = None,
    n_lines: int = HEAD_PAIRS,
):
    """The class contrast of classes (A, B) (:func:`class_summary.class_contrast`), each
    connectivity measure on its own, so that a measure higher in B and one lower never cancel.

    ``summary``: the class summary's arrays (:func:`class_summary.load_class_summary`):
    ``contrast_band`` (T,) and, per measure of :data:`CONTRAST_MEASURES`, its push
    (``contrast_coh_pairs`` / ``contrast_wpli_pairs``, (T, C, C), logit units) and its
    difference (``coh_difference`` / ``wpli_difference``, (T, C, C), B's mean minus A's), with
    ``bands`` and ``channels``. Top: the contrast's sum per band (logit units; the top band,
    largest |value|, outlined). Below, one row per measure, in the shown band (``band``, else
    the top band), for the ``n_lines`` pairs whose push by that measure is strongest: left,
    which are more connected in B than in A by that measure; right, how that measure's
    difference pushes the prediction (red towards B, blue towards A). Each head on its own
    scale, with its colour bar; dashed: pairs that artefacts can fake in that band
    (``cautions``). With no ``band`` and every band's sum 0 (no channel pair carries any of
    the contrast), the bars alone: no band to draw on the head."""
    from eegformer_cli.connectivity.artefacts import caution_masks

    first, second = classes
    bands, channels = list(summary["bands"]), list(summary["channels"])
    shown = shown_band(summary["contrast_band"], bands, band)
    if shown is None:  # no band carries any of the contrast: the bars alone, no heads
        return _contrast_bars_alone(summary["contrast_band"], bands, classes)
    fig = plt.figure(figsize=inches(10.5, 16.0))
    grid = fig.add_gridspec(3, 2, height_ratios=[0.6, 1, 1], hspace=0.4, wspace=0.1)
    _contrast_band_bars(fig.add_subplot(grid[0, :]), summary["contrast_band"], bands, classes)
    upper_i, upper_j = np.triu_indices(len(channels), 1)
    mask = caution_masks(cautions or {}, bands, channels)[shown, upper_i, upper_j]
    for row, (measure, push_key, difference_key) in enumerate(CONTRAST_MEASURES, start=1):
        push = summary[push_key][shown, upper_i, upper_j]
        drawn = _strongest(push, n_lines)
        for column, (data, title, label) in enumerate(
            (
                (
                    summary[difference_key][shown, upper_i, upper_j],
                    f"{measure}, {second} minus {first}:\nred higher in {second}, blue lower",
                    f"{measure} difference",
                ),
                (
                    push,
                    f"how the {measure} difference pushes:\nred towards {second}, blue "
                    f"towards {first}",
                    f"towards {first}  <-  logit units  ->  towards {second}",
                ),
            )
        ):
            ax = fig.add_subplot(grid[row, column])
            limit = _draw_pairs(ax, _head_axes(ax, channels), data, mask, drawn)
            colour_bar(fig, ax, limit, label)
            ax.set_title(title + _caution_line(drawn, mask), fontsize=9)
    why = "chosen with --band" if band is not None else "the top band"
    fig.suptitle(
        f"Class contrast, {second} against {first}, in {bands[shown]} ({why}): coherence and "
        f"wPLI apart, each with its strongest pairs (up to {n_lines})",
        fontsize=10,
    )
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.04, top=0.94)
    return fig
