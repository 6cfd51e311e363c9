"""The dynamic scenario's cause: which couplings burst in the same segments.

``eegformer simulate --scenario dynamic`` (:mod:`eegformer_cli.simulation.scenarios`) plants two
couplings, A and B, on two channel pairs in two bands (drawn from the layout seed as the
interaction scenario's), present in *bursts* in every participant. The recording is cut into a
grid of segments of ``segment_s`` seconds from its first sample (the grid ``preprocess
--epoch-length segment_s`` cuts, whose segments start at the recording's start), the grid into
blocks of ``burst_segments`` consecutive segments (the burst length), and each coupling is on in
exactly half the blocks (rounded down) and off elsewhere, its source multiplied by that 0/1
envelope. A's blocks are a uniformly drawn subset; in patients B bursts in A's blocks (the two
co-occur), in controls in as many blocks drawn from A's off blocks (they alternate, never
together). Each coupling alone is therefore on in the same number of segments, in a uniformly
drawn set of blocks, with a strength drawn alike, in both groups: every entry's recording mean
and spread over segments has the same distribution in the two classes by construction, and
only the joint per-segment pattern (which couplings share a segment) carries the label.

Whatever follows the last whole block (and the last whole segment) carries neither coupling.
The ground truth's ``dynamic`` records the grid, and each participant's ``bursts`` the 0/1 state
of each coupling per segment. :func:`segment_product` is the oracle's input: the mean
per-segment product of the two planted pairs' coherence, each standardised over the
recording's segments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from eegformer_cli.errors import UsageError

#: The burst grid's segment length (s) unless given: a multiple of preprocess's 3 s windows.
DEFAULT_SEGMENT_S = 12
#: The burst lengths (in segments) the layout seed draws from unless one is given.
BURST_SEGMENT_CHOICES = (1, 2)


@dataclass(frozen=True)
class BurstGrid:
    """The dynamic scenario's grid: segments of ``segment_s`` s from the recording's start,
    ``n_segments`` of them, bursts of ``burst_segments`` consecutive segments."""

    segment_s: float
    burst_segments: int
    n_segments: int

    @property
    def n_blocks(self) -> int:
        """Whole bursts the grid holds."""
        return self.n_segments // self.burst_segments


def burst_grid(
    layout_seed: int, duration_s: float, segment_s: float, burst_segments: int | None
) -> BurstGrid:
    """The grid of a recording of ``duration_s`` s: ``burst_segments`` given, else drawn from
    ``layout_seed`` (one of :data:`BURST_SEGMENT_CHOICES`). :class:`UsageError` when the
    segment length is no multiple of 3 s or the recording holds fewer than 2 bursts."""
    if not (segment_s >= 6 and float(segment_s / 3).is_integer()):
        raise UsageError(
            f"--segment-length must be a multiple of 3 s, at least 6 s (a segment of "
            f"preprocess's 3 s windows), got {segment_s:g}"
        )
    if burst_segments is None:
        rng = np.random.default_rng([layout_seed, 5, 29])  # not draw_layout's stream
        burst_segments = int(rng.choice(BURST_SEGMENT_CHOICES))
    if burst_segments < 1:
        raise UsageError(f"--burst-segments must be at least 1, got {burst_segments}")
    grid = BurstGrid(float(segment_s), int(burst_segments), int(duration_s // segment_s))
    if grid.n_blocks < 2:
        raise UsageError(
            f"a {duration_s:g} s recording holds {grid.n_segments} segments of {segment_s:g} s: "
            f"fewer than 2 bursts of {burst_segments} segments",
            hint="give a longer --duration or a shorter --segment-length / --burst-segments",
        )
    return grid


def draw_bursts(grid: BurstGrid, patient: bool, seed: int, index: int) -> dict[str, np.ndarray]:
    """One participant's bursts: ``{"A": (n_segments,), "B": (n_segments,)}`` 0/1 per segment.
    A is on in ``n_blocks // 2`` uniformly drawn blocks; B in the same blocks for a patient,
    in as many drawn from A's off blocks for a control. The draws come from (seed, index)
    alone and are made alike for both groups, so A's blocks do not depend on the label."""
    rng = np.random.default_rng([seed, index, 5])
    n_on = grid.n_blocks // 2
    order = rng.permutation(grid.n_blocks)
    a_blocks = order[:n_on]
    b_blocks = a_blocks if patient else rng.permutation(order[n_on:])[:n_on]
    out = {}
    for name, blocks in (("A", a_blocks), ("B", b_blocks)):
        on = np.zeros(grid.n_segments, dtype=int)
        for block in blocks:
            start = int(block) * grid.burst_segments
            on[start : start + grid.burst_segments] = 1
        out[name] = on
    return out


def burst_envelope(on: np.ndarray, segment_s: float) -> Callable[[int, float], np.ndarray]:
    """``envelope(n_times, sfreq)``: 1 in the samples of the segments where ``on`` is 1, 0
    elsewhere (past the last segment included), (n_times,)."""

    def envelope(n_times: int, sfreq: float) -> np.ndarray:
        per_segment = int(round(segment_s * sfreq))
        out = np.zeros(n_times)
        for k in np.flatnonzero(on):
            out[k * per_segment : (k + 1) * per_segment] = 1.0
        return out

    return envelope


def dynamic_record(grid: BurstGrid | None) -> dict:
    """The ground truth's ``dynamic``: the burst grid; nothing for the other scenarios."""
    if grid is None:
        return {}
    return {
        "dynamic": {
            "segment_s": grid.segment_s,
            "burst_segments": grid.burst_segments,
            "n_segments": grid.n_segments,
            "grid": "segments of segment_s from the recording's first sample",
        }
    }


class _Coherence(Protocol):
    """What :func:`segment_product` reads of a :class:`~eegformer_cli.preprocess.Connectome`."""

    @property
    def channels(self) -> Sequence[str]: ...
    @property
    def bands(self) -> Sequence[str]: ...
    @property
    def coh(self) -> np.ndarray: ...


def segment_product(connectome: _Coherence, couplings: Sequence) -> float:
    """The mean over the recording's segments of the product of the two ``couplings``'
    coherence (each a :class:`~eegformer_cli.simulation.scenarios.Coupling`: its pair in its
    token band), each standardised over the segments: their correlation over segments, high
    when the couplings burst together, low when they alternate."""
    channels, bands = list(connectome.channels), list(connectome.bands)
    series = []
    for c in couplings:
        i, j = channels.index(c.channels[0]), channels.index(c.channels[1])
        values = connectome.coh[:, bands.index(c.token_band), i, j]
        series.append((values - values.mean()) / max(float(values.std()), 1e-12))
    return float(np.mean(np.prod(series, axis=0)))
