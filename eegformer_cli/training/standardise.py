"""The statistics of input standardisation (``default`` preset): per-entry mean and std of
coherence and wPLI over a fit's training segments.

The model's :class:`~eegformer_cli.model.stages.Standardiser` stores them as buffers and feeds
both of its paths ``(coh - mean) / std`` and ``(wpli - mean) / std``, entry by entry
(band, i, j), std floored at :data:`STD_FLOOR` (so the zero diagonal stays zero); the model
file carries them, so ``predict`` and ``explain`` apply them exactly as training did.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

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
