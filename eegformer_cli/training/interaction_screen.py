"""The interaction screen: which pairs of connectivity entries (or an entry and age) act together.

A linear model, and a transformer trained by gradient descent on a few hundred people, cannot
find a label caused by two couplings together (an XOR: neither coupling alone says anything
about the label). Among 2,736 entries (8 bands x 171 channel pairs x coherence and wPLI) such an
effect is a sparse parity, whose sample cost for gradient training grows with the input
dimension. A second-order *screen* needs far fewer people: inside one class two entries that
act together are correlated one way, inside the other the other way, so the difference of the
within-class correlations finds the pair (the idea of GA2M's FAST interaction detection, Lou et
al., KDD 2013, in the vectorised form the size here needs: the ``interpret`` package's
``measure_interactions`` fits a model per pair and takes hours at 2,000+ features).

:func:`screen_interactions` runs inside every fit, on that fit's training recordings only:

1. features: each recording's mean over its segments of the standardised entries (the
   model's input z-scores), :func:`entry_means`; entries are named by :class:`Entry`;
2. score: ``|corr(a, b | class c) - corr(a, b | not c)|``, the largest over the classes c (one
   against the rest; with two classes both contrasts are the same), for every entry pair
   (:func:`top_pairs`, computed in row blocks so the P x P matrix never exists at once) and for
   every entry with age (:func:`age_scores`; unknown ages at the training mean);
3. gate: a candidate is kept only when its score beats the ``null_quantile`` quantile of the
   largest score under ``n_permutations`` label permutations (the same statistic, labels
   permuted as ``null_labels`` permutes them: within each participant when a participant's
   recordings carry different labels, else between participants), from a generator of its
   own; at most ``max_pairs`` entry pairs and ``max_pairs`` entry-age pairs, best first;
4. proxies (``proxy_correlation``, the ``interaction_proxies`` setting): one effect is seen
   through many entries (a source reaches the neighbours of its channels, so their pairs'
   coherence and wPLI carry it too), and its proxies would fill every place. So the best
   :data:`CANDIDATES_PER_PLACE` x ``max_pairs`` candidates above the gate are grouped in score
   order (:func:`group_proxies`): a candidate whose recording-level product (entry a x entry b,
   or entry x z-scored age) correlates with a group's first by ``|r| >=``
   :data:`PROXY_CORRELATION` joins it; the first of each group is kept (at most ``max_pairs``
   groups), the others are recorded as its proxies (:class:`Proxy`) and not passed to the model.

With the ``dynamic_pairs`` setting a second screen runs beside it, on what changes *within*
recordings (:func:`screen_within_recordings`): the same statistic, gate and grouping over rows
that are segments' deviations from their recording's mean (at most :data:`WITHIN_SEGMENTS` a
recording), so it finds couplings that come and go together in one class and in turn in the
other, which leave every recording mean alike. Its pairs are kept after the means' own
(:func:`with_within`), flagged ``within``: the transformer path reads them segment by segment.

A fit that keeps nothing builds today's model (the model's interaction path exists only for kept
pairs). Cost: about P^2 n / 2 multiply-adds per statistic (P entries, n recordings), once for
the data and once per permutation; grouping adds one (n, M) x (M, n) product of the M
candidates' products (M <= 50 by default), nothing next to the permutations.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np

from eegformer_cli.model.interactions import AGE, MEASURES, Entry, Interaction, Proxy

#: Mixed into the screen's permutation seed, apart from the run's other uses of its seed.
SEED_TAG = 35_035
#: Entries per row block of the pair scores: the block's float32 (512, P) score matrix is the
#: memory bound (66 MB for 64 channels' 32,256 entries, 5.6 MB for 19 channels' 2,736).
BLOCK_ROWS = 512
#: At most this many segments of each recording, evenly spaced, are rows of the
#: within-recording screen (:func:`within_deviations`): its time and memory grow with the
#: training recordings, not with their length (a 24-hour recording has thousands of segments).
WITHIN_SEGMENTS = 12
#: With grouping: candidates above the gate considered per place (the best
#: CANDIDATES_PER_PLACE x ``max_pairs`` of each set), so that the places go to distinct effects.
#: An effect seen through many channel pairs puts hundreds of candidates above the gate, the
#: weaker ones correlating less with its best; more candidates would let those open groups
#: of their own (docs/benchmarks.md, "Proxies").
CANDIDATES_PER_PLACE = 5
#: The grouping level of a fit whose config groups proxies (``interaction_proxies``): two
#: candidates whose recording-level products correlate by at least this (absolute Pearson r
#: over the fit's training recordings) stand for one effect. Measured on simulated studies
#: whose planted sources reach neighbouring electrodes, the best candidates correlate with the
#: best one above this, products of independent effects by about 1 / sqrt(n)
#: (docs/benchmarks.md, "Proxies").
PROXY_CORRELATION = 0.5


@dataclass
class ScreenResult:
    """What one screen found: the kept interactions (entry pairs first, then entry-age, each
    best first), the gates, and its cost."""

    kept: list[Interaction]
    pair_threshold: float | None  # None: entry pairs not screened
    age_threshold: float | None  # None: entry-age pairs not screened (or no age known)
    top_pair_score: float | None
    top_age_score: float | None
    n_recordings: int
    n_entries: int
    n_permutations: int
    proxy_correlation: float | None  # the grouping level (None: candidates not grouped)
    seconds: float
    # the within-recording screen's gate and top score (None: not run; :func:`with_within`)
    within_threshold: float | None = None
    top_within_score: float | None = None

    def summary(self) -> dict:
        """JSON-ready record for a fold file."""
        out = asdict(self)
        out["kept"] = [k.to_dict() for k in self.kept]
        return out


def entry_table(channels: list[str], bands: list[str]) -> list[Entry]:
    """Every entry of a connectome, in :func:`entry_means`' column order: measure, then band,
    then channel pair (i < j, row-major upper triangle): 2 x F x C(C-1)/2 entries, the order of
    ``reference.recording_features``."""
    rows, cols = np.triu_indices(len(channels), k=1)
    return [
        Entry(measure, band, (channels[i], channels[j]))
        for measure in MEASURES
        for band in bands
        for i, j in zip(rows, cols)
    ]


def entry_means(
    coh: np.ndarray, wpli: np.ndarray, stats: Mapping[str, np.ndarray | float]
) -> np.ndarray:
    """One recording's mean over segments of its standardised entries.

    coh, wpli float32 (n_segments, F, C, C); ``stats`` the model's input statistics
    (``standardise.connectivity_stats``: ``coh_mean``, ``coh_std``, ``wpli_mean``, ``wpli_std``,
    each (F, C, C)). Returns float64 (2 F C(C-1)/2,) in :func:`entry_table`'s order.
    """
    rows, cols = np.triu_indices(coh.shape[-1], k=1)
    parts = []
    for name, values in (("coh", coh), ("wpli", wpli)):
        mean = values.mean(axis=0, dtype=np.float64)
        z = (mean - stats[f"{name}_mean"]) / stats[f"{name}_std"]
        parts.append(z[:, rows, cols].ravel())
    return np.concatenate(parts)


def entry_segments(
    coh: np.ndarray, wpli: np.ndarray, stats: Mapping[str, np.ndarray | float]
) -> np.ndarray:
    """One recording's standardised entries segment by segment (the rows :func:`entry_means`
    averages): float32 (n_segments, 2 F C(C-1)/2) in :func:`entry_table`'s order, from coh,
    wpli float32 (n_segments, F, C, C) and the model's input statistics ``stats``."""
    rows, cols = np.triu_indices(coh.shape[-1], k=1)
    parts = []
    for name, values in (("coh", coh), ("wpli", wpli)):
        z = (values.astype(np.float64) - stats[f"{name}_mean"]) / stats[f"{name}_std"]
        parts.append(z[:, :, rows, cols].reshape(len(values), -1).astype(np.float32))
    return np.concatenate(parts, axis=1)


def _within_class_z(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """The rows ``members`` of ``values`` (n, ...) z-scored over those rows and divided by
    sqrt(n_members), so that ``z.T @ z`` is their correlation matrix (a constant column gives
    zeros); float32."""
    part = values[members].astype(np.float32)
    if len(part) == 0:  # a class absent from a tiny training part: nothing to correlate
        return part
    centred = part - part.mean(axis=0)
    norm = np.sqrt((centred**2).sum(axis=0))
    return np.divide(centred, norm, out=np.zeros_like(centred), where=norm > 0)


def contrast_factors(values: np.ndarray, labels: np.ndarray) -> list[tuple]:
    """Per one-against-rest contrast (one for two classes, whose two contrasts give the same
    statistic; one per class otherwise), two float32 factors ``(w, s)`` shaped like ``values``
    (n, ...) with ``w.T @ s = corr_in - corr_out``: the class's within-class z-scores stacked
    over the rest's, and the same with the rest's negated, so that one product gives the
    difference of the two correlation matrices. float32: the scores are compared with a gate,
    not summed."""
    classes = np.unique(labels)
    factors = []
    for c in classes[:1] if len(classes) == 2 else classes:
        inside = labels == c
        z_in, z_out = _within_class_z(values, inside), _within_class_z(values, ~inside)
        factors.append((np.concatenate([z_in, z_out]), np.concatenate([z_in, -z_out])))
    return factors


def _block_scores(factors: list[tuple], start: int, stop: int) -> np.ndarray:
    """Scores of entries ``start:stop`` against entries ``start:`` (the matrix is symmetric,
    so the rows' scores against earlier entries are known from earlier blocks): float32
    (stop - start, P - start)."""
    (w, s), *others = factors
    score = np.abs(w[:, start:stop].T @ s[:, start:])
    for w, s in others:
        np.maximum(score, np.abs(w[:, start:stop].T @ s[:, start:]), out=score)
    return score


def largest_pair_score(factors: list[tuple], block_rows: int = BLOCK_ROWS) -> float:
    """The largest screen score over all entry pairs (what the permutation null records), from
    :func:`contrast_factors`. The diagonal scores 0 (1 - 1), so the largest entry of a block
    is a pair's."""
    n_features = factors[0][0].shape[1]
    return float(
        max(
            _block_scores(factors, start, min(start + block_rows, n_features)).max()
            for start in range(0, n_features, block_rows)
        )
    )


def top_pairs(
    factors: list[tuple], k: int, block_rows: int = BLOCK_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` entry pairs (i < j) with the largest screen score, best first, from
    :func:`contrast_factors` of the features (n, P).

    Score of (i, j): the largest over the contrasts of ``|corr_in(i, j) - corr_out(i, j)|``.
    Computed ``block_rows`` rows at a time, keeping the best ``k`` of each block: memory
    (block_rows x P), never P x P. Returns (pairs int64 (k', 2), scores float64 (k',)),
    k' = min(k, P(P-1)/2).
    """
    n_features = factors[0][0].shape[1]
    best_pairs, best_scores = np.empty((0, 2), dtype=np.int64), np.empty(0)
    for start in range(0, n_features - 1, block_rows):
        stop = min(start + block_rows, n_features)
        score = _block_scores(factors, start, stop)  # column c is entry start + c
        score[np.tril_indices(stop - start)] = -1.0  # each pair once: j > i
        flat = score.ravel()
        take = min(k, flat.size)
        top = np.argpartition(-flat, take - 1)[:take]
        top = top[flat[top] >= 0]
        rows, cols = np.divmod(top, n_features - start)
        best_pairs = np.concatenate([best_pairs, np.stack([rows, cols], axis=1) + start])
        best_scores = np.concatenate([best_scores, flat[top].astype(np.float64)])
        if len(best_scores) > k:
            keep = np.argpartition(-best_scores, k - 1)[:k]
            best_pairs, best_scores = best_pairs[keep], best_scores[keep]
    order = np.lexsort((best_pairs[:, 1], best_pairs[:, 0], -best_scores))
    return best_pairs[order], best_scores[order]


def age_scores(factors: list[tuple], age_factors: list[tuple]) -> np.ndarray:
    """Screen score of every entry with age: the largest over the contrasts of
    ``|corr_in(entry, age) - corr_out(entry, age)|``; float64 (P,). ``factors`` and
    ``age_factors``: :func:`contrast_factors` of the features (n, P) and of the z-scored ages
    (n,) (unknown ages at 0, the training mean) under the same labels."""
    score = np.zeros(factors[0][0].shape[1])
    for (w, _), (_, s_age) in zip(factors, age_factors):
        np.maximum(score, np.abs(w.T @ s_age), out=score)
    return score


def permuted(labels: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One label permutation as ``null_labels`` permutes: among each participant's recordings
    when some participant's recordings carry different labels, else the participants' labels
    shuffled between participants (each participant's recordings keep one label)."""
    order, first_index, inverse = np.unique(groups, return_index=True, return_inverse=True)
    first = labels[first_index]  # each participant's first recording's label
    if np.any(labels != first[inverse]):
        shuffled = labels.copy()
        for g in range(len(order)):
            where = np.flatnonzero(inverse == g)
            shuffled[where] = labels[rng.permutation(where)]
        return shuffled
    return rng.permutation(first)[inverse]


def within_deviations(
    coh: np.ndarray, wpli: np.ndarray, stats: Mapping[str, np.ndarray | float]
) -> np.ndarray | None:
    """One recording's rows of the within-recording screen: at most :data:`WITHIN_SEGMENTS`
    of its segments, evenly spaced over it, their standardised entries
    (:func:`entry_segments`) minus those segments' mean: float32 (s, P); None for a recording
    of one segment (nothing varies within it). coh, wpli float32 (n_segments, F, C, C)."""
    if len(coh) < 2:
        return None
    rows = np.unique(np.linspace(0, len(coh) - 1, min(len(coh), WITHIN_SEGMENTS)).round())
    segments = entry_segments(coh[rows.astype(int)], wpli[rows.astype(int)], stats)
    return segments - segments.mean(axis=0)


def screen_within_recordings(
    arrays: Iterable[tuple[np.ndarray, np.ndarray]],
    stats: Mapping[str, np.ndarray | float],
    labels: np.ndarray,
    groups: np.ndarray,
    entries: list[Entry],
    **gate,
) -> ScreenResult | None:
    """The within-recording screen: the entry pairs whose segment-wise deviations from their
    recording's mean (:func:`within_deviations`) correlate differently in the classes, gated
    and grouped as :func:`screen_interactions` does (``gate``: its keyword arguments but
    ``interactions`` and ``age_interactions``; permutations between participants); the kept
    ones flagged ``within``. None when fewer than two training recordings have two segments.

    Why deviations: two couplings that come and go together in one class and in turn in the
    other leave every entry's recording mean, and its spread over segments, alike in the
    classes; a pair of the recordings' means (a static interaction) leaves the deviations
    alike. So this screen finds what the screen of means cannot, and nothing of what it can.
    ``arrays``: each training recording's (coh, wpli); labels, groups (n_recordings,)."""
    blocks, row_labels, row_groups = [], [], []
    for (coh, wpli), label, group in zip(arrays, labels, groups):
        deviations = within_deviations(coh, wpli, stats)
        if deviations is not None:
            blocks.append(deviations)
            row_labels += [label] * len(deviations)
            row_groups += [group] * len(deviations)
    if len(blocks) < 2 or len(np.unique(row_labels)) < 2:
        return None
    result = screen_interactions(
        np.concatenate(blocks),
        np.array(row_labels),
        np.array(row_groups),
        None,
        entries,
        interactions=True,
        age_interactions=False,
        **gate,
    )
    result.kept = [replace(k, within=True) for k in result.kept]
    return result


def with_within(means: ScreenResult, within: ScreenResult | None) -> ScreenResult:
    """The screen of means' result with the within-recording screen's kept pairs after its own
    (a pair both kept: once, as the means'), its gate, top score and time."""
    if within is None:
        return means
    seen = {(k.a, k.b) for k in means.kept}
    return replace(
        means,
        kept=[*means.kept, *(k for k in within.kept if (k.a, k.b) not in seen)],
        within_threshold=within.pair_threshold,
        top_within_score=within.top_pair_score,
        seconds=means.seconds + within.seconds,
    )


def group_proxies(
    products: np.ndarray, max_groups: int, level: float
) -> list[tuple[int, list[tuple[int, float]]]]:
    """Candidates grouped into proxies of one effect, greedily in their order (best score
    first): a candidate whose product correlates with a group's first member by
    ``|r| >= level`` joins the most correlated such group; otherwise it opens a group while
    there are fewer than ``max_groups``, else it is left out.

    products float64 (n, M): each candidate's product over the recordings (Pearson ``r`` over
    them; a constant product correlates with nothing). Returns per group, in order, (its
    first candidate's index, [(member index, r with the first), ...] in candidate order).
    """
    centred = products - products.mean(axis=0)
    norm = np.sqrt((centred**2).sum(axis=0))
    z = np.divide(centred, norm, out=np.zeros_like(centred), where=norm > 0)
    correlation = z.T @ z
    groups: list[tuple[int, list[tuple[int, float]]]] = []
    for m in range(products.shape[1]):
        r = [correlation[m, first] for first, _ in groups]
        closest = int(np.argmax(np.abs(r))) if groups else -1
        if groups and abs(r[closest]) >= level:
            groups[closest][1].append((m, float(r[closest])))
        elif len(groups) < max_groups:
            groups.append((m, []))
    return groups


def kept_groups(
    candidates: list[tuple[Entry, Entry | str]],
    scores: np.ndarray,
    products: np.ndarray,
    threshold: float,
    max_pairs: int,
    proxy_correlation: float | None,
) -> list[Interaction]:
    """The kept interactions of one candidate set: of the ``candidates`` (best score first,
    ``scores`` (M,)) those above ``threshold``, grouped by :func:`group_proxies` of their
    ``products`` (n, M) at ``proxy_correlation`` (each group's best kept, the others its
    proxies), at most ``max_pairs`` groups; None: not grouped, the best ``max_pairs``."""
    above = int(np.sum(scores > threshold))
    groups: list[tuple[int, list[tuple[int, float]]]]
    if proxy_correlation is None:
        groups = [(m, []) for m in range(min(above, max_pairs))]
    else:
        groups = group_proxies(products[:, :above], max_pairs, proxy_correlation)
    return [
        Interaction(
            *candidates[first],
            float(scores[first]),
            threshold,
            tuple(Proxy(*candidates[m], float(scores[m]), r) for m, r in members),
        )
        for first, members in groups
    ]


def screen_interactions(
    features: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    age_z: np.ndarray | None,
    entries: list[Entry],
    *,
    max_pairs: int,
    n_permutations: int,
    null_quantile: float,
    seed: int,
    interactions: bool = True,
    age_interactions: bool = True,
    proxy_correlation: float | None = None,
) -> ScreenResult:
    """Screen and gate (module docstring) on one fit's training recordings.

    features float64 (n, P) (:func:`entry_means` per recording), labels int (n,), groups the
    participant of each recording (n,), age_z (n,) z-scored ages with unknown at 0 (None: age
    not known for anyone), entries the P :class:`Entry` of the columns. ``interactions`` /
    ``age_interactions`` (the training config's, ``--no-interactions`` /
    ``--no-age-interactions``) switch the two candidate sets; ``proxy_correlation``: the level of
    :func:`group_proxies` (None: no grouping, the best ``max_pairs`` of each set). Deterministic
    in ``seed``.
    """
    start = time.perf_counter()
    labels, groups = np.asarray(labels), np.asarray(groups)
    # the ages screened (None: the entry-age pairs are not)
    age = age_z if age_interactions and age_z is not None and np.std(age_z) > 0 else None
    rng = np.random.default_rng([SEED_TAG, seed])
    null_pair, null_age = [], []
    for _ in range(n_permutations if (interactions or age is not None) else 0):
        permutation = permuted(labels, groups, rng)
        factors = contrast_factors(features, permutation)
        if interactions:
            null_pair.append(largest_pair_score(factors))
        if age is not None:
            null_age.append(age_scores(factors, contrast_factors(age, permutation)).max())
    factors = contrast_factors(features, labels)
    n_candidates = max_pairs * (1 if proxy_correlation is None else CANDIDATES_PER_PLACE)
    kept: list[Interaction] = []
    pair_threshold = age_threshold = top_pair = top_age = None
    if interactions:
        pair_threshold = float(np.quantile(null_pair, null_quantile))
        found, scores = top_pairs(factors, n_candidates)
        top_pair = float(scores[0])
        products = features[:, found[:, 0]] * features[:, found[:, 1]]
        candidates = [(entries[i], entries[j]) for i, j in found]
        kept += kept_groups(
            candidates, scores, products, pair_threshold, max_pairs, proxy_correlation
        )
    if age is not None:
        age_threshold = float(np.quantile(null_age, null_quantile))
        scores = age_scores(factors, contrast_factors(age, labels))
        top_age = float(scores.max())
        best = np.argsort(-scores, kind="stable")[:n_candidates]
        products = features[:, best] * age[:, None]
        candidates = [(entries[i], AGE) for i in best]
        kept += kept_groups(
            candidates, scores[best], products, age_threshold, max_pairs, proxy_correlation
        )
    return ScreenResult(
        kept,
        pair_threshold,
        age_threshold,
        top_pair,
        top_age,
        len(labels),
        features.shape[1],
        n_permutations,
        proxy_correlation,
        time.perf_counter() - start,
    )
