"""Input standardisation's statistics, streamed over recordings of any length."""

from __future__ import annotations

import numpy as np

from eegformer_cli.training.standardise import STATS_SEGMENTS_PER_BLOCK, connectivity_stats


def test_statistics_of_long_recordings_equal_those_of_all_segments_at_once():
    """Recordings longer than a block (as a 24-hour one is) give the mean and std of every
    segment, as if all were stacked at once."""
    rng = np.random.default_rng(0)
    lengths = [3, 2 * STATS_SEGMENTS_PER_BLOCK + 17, 40]
    arrays = [
        (rng.random((n, 2, 4, 4), dtype=np.float32), rng.random((n, 2, 4, 4), dtype=np.float32))
        for n in lengths
    ]
    stats = connectivity_stats(iter(arrays))
    for name, index in (("coh", 0), ("wpli", 1)):
        every = np.concatenate([pair[index] for pair in arrays]).astype(np.float64)
        np.testing.assert_allclose(stats[f"{name}_mean"], every.mean(axis=0), rtol=1e-6)
        np.testing.assert_allclose(stats[f"{name}_std"], every.std(axis=0), rtol=1e-5)
