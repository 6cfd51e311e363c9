"""Input standardisation of connectivity (``default`` preset): z-scores per band and channel pair.

Coherence and wPLI of different bands and pairs live on different scales, and the class
differences are small against them. :class:`StandardisedModel` wraps an ``XAIguiFormer`` and
feeds it ``(coh - mean) / std`` and ``(wpli - mean) / std``, entry by entry (band, i, j), with
the mean and std of the training segments (std floored at :data:`STD_FLOOR`, so the zero
diagonal stays zero). The statistics are buffers in the state dict, so the model file carries
them and ``predict`` / ``explain`` apply them exactly as training did; callers keep passing the
raw connectivity. On a real clinical set the model barely left chance on raw inputs and did
clearly better on standardised ones (docs/benchmarks.md, "Accuracy"). The ``paper`` preset keeps raw
inputs, as the paper's code (no normalisation anywhere).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from eegformer_cli.model.linear_path import LinearPath
    from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer

STD_FLOOR = 1e-3
#: Segments of a recording summed at a time by :func:`connectivity_stats`: its float64 copies
#: stay near 24 MB at 19 channels and 8 bands, however many segments the recording has (a
#: 24-hour one has 2,880 of 30 s; summed whole they took 330 MB).
STATS_SEGMENTS_PER_BLOCK = 256


def connectivity_stats(arrays: Iterable[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-entry mean and std over all segments of ``arrays`` (one (coh, wpli) pair per recording,
    each float32 (n_segments, n_bands, C, C)), streamed recording by recording and
    :data:`STATS_SEGMENTS_PER_BLOCK` segments at a time.

    Returns float32 arrays (n_bands, C, C): ``coh_mean``, ``coh_std``, ``wpli_mean``, ``wpli_std``.
    """
    sums: np.ndarray | None = None
    squares: np.ndarray | None = None
    count = 0
    for coh, wpli in arrays:
        for start in range(0, coh.shape[0], STATS_SEGMENTS_PER_BLOCK):
            block = slice(start, start + STATS_SEGMENTS_PER_BLOCK)
            stacked = np.stack([coh[block], wpli[block]]).astype(np.float64)  # (2, S, F, C, C)
            part_sum, part_sq = stacked.sum(axis=1), (stacked**2).sum(axis=1)
            sums = part_sum if sums is None else sums + part_sum
            squares = part_sq if squares is None else squares + part_sq
        count += coh.shape[0]
    if sums is None or squares is None:
        raise ValueError("connectivity_stats needs at least one segment")
    mean = sums / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0.0))
    std = np.maximum(std, STD_FLOOR)
    return {
        "coh_mean": mean[0].astype(np.float32),
        "coh_std": std[0].astype(np.float32),
        "wpli_mean": mean[1].astype(np.float32),
        "wpli_std": std[1].astype(np.float32),
    }


class StandardisedModel(nn.Module):
    """An ``XAIguiFormer`` behind a fixed per-entry z-score of its coh and wPLI inputs.

    Same call signatures as the wrapped model (``forward``, ``forward_with_details``,
    ``describe``, ``set_demographic_stats``, ``config``); inputs are the raw connectivity.
    The buffers start as mean 0, std 1 (identity) until :meth:`set_stats`.
    """

    coh_mean: Tensor
    coh_std: Tensor
    wpli_mean: Tensor
    wpli_std: Tensor

    def __init__(self, model: XAIguiFormer):
        super().__init__()
        self.model = model
        shape = (len(model.config.band_names), model.config.n_channels, model.config.n_channels)
        for name, value in (
            ("coh_mean", 0.0),
            ("coh_std", 1.0),
            ("wpli_mean", 0.0),
            ("wpli_std", 1.0),
        ):
            self.register_buffer(name, torch.full(shape, value))

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    def set_stats(self, stats: dict[str, np.ndarray]) -> None:
        """Store :func:`connectivity_stats` output (float32 (n_bands, C, C) arrays)."""
        for name, value in stats.items():
            getattr(self, name).copy_(torch.as_tensor(value))

    def set_demographic_stats(self, age_mean: float | None, age_std: float | None) -> None:
        self.model.set_demographic_stats(age_mean, age_std)

    def describe(self) -> dict:
        return {**self.model.describe(), "input_standardisation": True}

    def _standardise(self, coh: Tensor, wpli: Tensor) -> tuple[Tensor, Tensor]:
        return (coh - self.coh_mean) / self.coh_std, (wpli - self.wpli_mean) / self.wpli_std

    @property
    def linear(self) -> LinearPath | None:
        """The wrapped model's linear path (None without one)."""
        return self.model.linear

    @property
    def tangent_space(self):
        """The wrapped model's tangent-space path (None without one)."""
        return self.model.tangent_space

    @property
    def static_mix(self):
        """The wrapped model's static mix (None without a tangent-space path)."""
        return self.model.static_mix

    def forward(self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor, offset=None):
        return self.model(*self._standardise(coh, wpli), age, sex, offset)

    def forward_with_details(
        self,
        coh: Tensor,
        wpli: Tensor,
        age: Tensor,
        sex: Tensor,
        target: Tensor | None = None,
        products: Tensor | None = None,
        offset: Tensor | None = None,
    ):
        return self.model.forward_with_details(
            *self._standardise(coh, wpli), age, sex, target, products, offset
        )

    def interaction_products(self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor):
        return self.model.interaction_products(*self._standardise(coh, wpli), age, sex)

    def linear_features(self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor, products=None):
        return self.model.linear_features(*self._standardise(coh, wpli), age, sex, products)


#: What a fit builds and a model file holds: an ``XAIguiFormer``, or one behind input
#: standardisation.
TrainedModel: TypeAlias = "XAIguiFormer | StandardisedModel"
