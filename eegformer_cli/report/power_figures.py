"""The tangent-space path's explanation in the report: band power on the head.

For a model whose static stage reads band covariances (``model/static_paths.py``), ``explain``
attributes that path's part of each logit onto the covariance entries
(``explain/path_shares.covariance_attributions``: onto each channel's log variance and each
pair's correlation per band); the log variances', what each channel's power in each band
carries, are what these head maps show, beside the connectivity maps: one panel per explained
class (the mean over its recordings), the covariance band whose power attributions have the
largest total |value| (MNE's ``plot_topomap``, montage positions, nose up).
"""

from __future__ import annotations

import numpy as np

from eegformer_cli.report.figures import colour_bar, inches
from eegformer_cli.report.page import add_figure


def band_power_figure(band_power: np.ndarray, classes: list[str], bands: list[str], channels):
    """``band_power`` (K', K, C) logit units, one panel per class: its top band's map."""
    import mne

    from eegformer_cli.recordings.channels import MONTAGE_NAME

    info = mne.create_info(list(channels), 100.0, "eeg")
    info.set_montage(MONTAGE_NAME, on_missing="ignore", verbose="error")
    import matplotlib.pyplot as plt  # the backend is set by report.figures, imported above

    fig, axes = plt.subplots(
        1, len(classes), figsize=inches(4.0 * len(classes), 4.6), squeeze=False
    )
    for k, (name, ax) in enumerate(zip(classes, axes[0])):
        band = int(np.argmax(np.abs(band_power[k]).sum(axis=1)))
        values = band_power[k, band]
        limit = float(np.abs(values).max()) or 1e-12
        mne.viz.plot_topomap(
            values, info, axes=ax, show=False, cmap="RdBu_r", vlim=(-limit, limit), names=None
        )
        colour_bar(fig, ax, limit, "attribution (logit units)")
        ax.set_title(f"{name}: band power, {bands[band]}", fontsize=9)
    return fig


def add_band_power_section(report, summary: dict, written: dict, section: str) -> None:
    """The band-power head maps (nothing for explanations without them: a model whose static
    stage reads no covariances, or explanations of an earlier version)."""
    bands = (written.get("settings") or {}).get("covariance_bands") or []
    if "band_power" not in summary or not bands:
        return
    add_figure(
        report,
        band_power_figure(summary["band_power"], summary["classes"], bands, summary["channels"]),
        "Band power: the tangent-space path",
        section,
        caption=(
            "The model's tangent-space path (its static stage reads each recording's band "
            "covariances) attributed onto each channel's log power in the band whose power "
            "carries most of the class's logit (Integrated Gradients through the matrix "
            "logarithm, against the training recordings' mean covariance, times the path's "
            "weight in the model): red raises the class's logit, blue lowers it. The pairs' "
            "correlations carry the rest of the path's part (the paths note gives each path's "
            "share)."
        ),
    )
