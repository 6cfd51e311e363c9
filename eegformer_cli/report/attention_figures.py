"""The report's attention figures: the attention entropy per epoch on the validation
participants, and coarse versus refined attention as heat maps of their departure from uniform
attention; plain data in, a matplotlib figure out (Agg backend; the caller embeds and closes it).
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from eegformer_cli.report.figures import inches, legend_below


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


#: Font size (points) of the attention heat maps' band labels: about 12 px on the page, where
#: the report shows the figure's 850 pixels in a column of about 800 (a 1,100 px window).
ATTENTION_LABEL_PT = 9


def attention_figure(coarse: np.ndarray, refined: np.ndarray, bands: list[str], title: str):
    """Per layer: coarse and refined attention as differences from uniform attention (1/T),
    and refined - coarse; query rows, key columns; (L, T, T) in (a head axis is averaged).

    Softmax rows sum to 1, so raw weights all sit near 1/T and one colour scale from 0 hides
    every difference: each panel shows its departure from 1/T (or from the coarse pass) on a
    diverging scale of its own, symmetric about 0, with its colour bar. 8.5 inches wide, the
    widest figure mne.Report embeds at full resolution, with band labels of
    :data:`ATTENTION_LABEL_PT` points (the query bands once per layer, at its left).
    """
    from eegformer_cli.explain.attributions import token_names

    if coarse.ndim == 4:
        coarse, refined = coarse.mean(axis=1), refined.mean(axis=1)
    n_layers, n_bands = coarse.shape[0], coarse.shape[-1]
    bands = token_names(bands, n_bands)  # the interaction token, when the models have one
    uniform = 1.0 / n_bands
    size = ATTENTION_LABEL_PT
    fig, axes = plt.subplots(
        n_layers,
        3,
        figsize=inches(8.5, 1.0 + 3.5 * n_layers),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
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
            ax.set_xticks(range(len(bands)), bands, rotation=90, fontsize=size)
            ax.set_yticks(range(len(bands)), bands, fontsize=size)
            ax.set_title(f"layer {layer}: {name}", fontsize=size)
            if col == 0:
                ax.set_ylabel("query band", fontsize=size)
            ax.set_xlabel("key band", fontsize=size)
            bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
            bar.ax.tick_params(labelsize=size - 1)
    fig.suptitle(
        f"{title}\nred: more attention than uniform ({uniform:.3f}) or than the coarse "
        "pass; blue: less; each panel on its own scale",
        fontsize=size + 1,
    )
    _fit_height(fig, axes[:, 0])
    return fig


def _fit_height(fig, rows) -> None:
    """Shrink ``fig`` (constrained layout) to the height its square panels use, one axes per
    row in ``rows``: the layout gives each row a box of the figure's height, and a square
    image in a box taller than wide leaves the rest blank, above and below it."""

    def spare(extent: str) -> float:
        """The rows' blank share of the figure's height or width, as drawn now."""
        fig.canvas.draw()
        return sum(
            getattr(ax.get_position(original=True), extent)
            - getattr(ax.get_position(original=False), extent)
            for ax in rows
        )

    width, height = fig.get_size_inches()
    fitted = math.ceil(height * (1 - spare("height")) * 4) / 4  # a quarter-inch grid
    while fitted < height:  # the labels take more room than the estimate: up until square
        fig.set_size_inches(width, fitted)
        if spare("width") * width < 0.02:  # the panels fill their boxes' width again
            return
        fitted += 0.25
    fig.set_size_inches(width, height)
