"""The model's passes over one recording's segments, batch by batch, averaged over the segments:
the attention maps and refined logits (:func:`attention_maps`) and the captum attributions of a
refined logit to the coh and wPLI entries (:func:`channel_pair_attributions`), what
:mod:`.attributions` makes a recording's explanation of.

Segments go through the model :data:`SEGMENTS_PER_EXPLANATION` at a time, so the memory these
passes need does not grow with the recording's length (a 24-hour recording has thousands of
segments). A recording of at most that many segments is one batch, computed exactly as a pass
over all its segments; a longer one gives each batch's mean weighted by its share of the
segments (:class:`SegmentMean`), equal to the mean over all segments up to float rounding
(about 1e-7 relative: float32 means of float32 values).

The time course of a recording (:class:`SegmentTimeline`) keeps what the means average: each
segment's part of the explained logit and its strongest cells (:class:`SegmentCells`), a few
numbers per segment, so it too stays small for a recording of any length.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from eegformer_cli.choices import DEFAULT_METHOD, DEFAULT_N_STEPS
from eegformer_cli.model.deeplift import differentiable_explanations
from eegformer_cli.model.diagnostics import explicit_attention
from eegformer_cli.model.linear_path import feature_attributions, recording_features

#: Interpolated rows per forward inside captum (bounds memory; results do not depend on it).
ROWS_PER_FORWARD = 512
#: Segments per batch of :func:`attention_maps` and :func:`channel_pair_attributions` (with
#: ``n_steps`` Integrated Gradients steps, captum runs ``ROWS_PER_FORWARD // segments`` steps
#: per forward: two here).
SEGMENTS_PER_EXPLANATION = 256
#: Cells (band, channel pair) kept per segment for the time course: its strongest by |value|.
TOP_SEGMENT_CELLS = 5


def segment_slices(n_segments: int) -> Iterator[slice]:
    """Consecutive slices of at most :data:`SEGMENTS_PER_EXPLANATION` segments covering
    ``n_segments``."""
    for start in range(0, n_segments, SEGMENTS_PER_EXPLANATION):
        yield slice(start, min(start + SEGMENTS_PER_EXPLANATION, n_segments))


class SegmentMean:
    """The mean over a recording's ``n_segments`` segments from the means of its batches: a
    batch of all the segments gives its mean as it is (same dtype, same numbers); smaller ones
    are weighted by ``batch size / n_segments`` and summed in float64."""

    def __init__(self, n_segments: int):
        self.n_segments = n_segments
        self.value: np.ndarray | None = None

    def add(self, batch_mean: np.ndarray, batch_size: int) -> None:
        """Add one batch's mean (any shape) over its ``batch_size`` segments."""
        if batch_size == self.n_segments:
            self.value = batch_mean
            return
        part = batch_mean.astype(np.float64) * (batch_size / self.n_segments)
        self.value = part if self.value is None else self.value + part


def exact_segment_mean(values: np.ndarray) -> np.ndarray:
    """float64 mean over axis 0 of float32 ``values`` (S, ...), equal to
    ``values.astype(float64).mean(axis=0)`` without a float64 copy of the whole array: a running
    sum segment by segment, the order NumPy sums along a leading axis."""
    total = np.zeros(values.shape[1:], dtype=np.float64)
    for segment in values:
        total += segment
    return total / len(values)


def _offsets(offset: Tensor | None, n: int) -> Tensor | None:
    """The recording's linear logits (n_classes,) as the forward's ``offset`` of ``n`` rows
    (None stays None: the model forms its linear path per segment)."""
    return None if offset is None else offset.expand(n, -1)


def recording_token_products(model, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor):
    """(S, K) what the interaction token embeds for each of a whole recording's S segments
    (``XAIguiFormer.token_products``), for a model whose token reads whole recordings; None
    for any other (each batch of segments forms its own products)."""
    if not model.token_reads_recordings:
        return None
    return model.token_products(coh, wpli, float(age[0]), float(sex[0]))


def _part(products: Tensor | None, part: slice) -> Tensor | None:
    return None if products is None else products[part]


def attention_maps(
    model,
    coh: Tensor,
    wpli: Tensor,
    age: Tensor,
    sex: Tensor,
    all_heads: bool = False,
    offset: Tensor | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coarse, refined, logits): attention float64 (L, T, T), or (L, H, T, T) with
    ``all_heads``, averaged over segments; ``logits`` float64 (S, K) refined logits. Inputs as
    ``model.forward_with_details`` (coh, wpli (S, T, C, C); age, sex (S,)), run in batches;
    ``offset`` (n_classes,) the recording's linear logits for a model on recording means
    (``static_paths.recording_offset``)."""
    coarse, refined = SegmentMean(len(coh)), SegmentMean(len(coh))
    logits = []
    n_bands, n_heads = coh.shape[1], model.config.n_heads

    def batch_mean(layers: list) -> np.ndarray:
        maps = (
            torch.stack([layer.weights.float().mean(dim=0) for layer in layers])
            if layers
            else coh.new_zeros((0, n_heads, n_bands, n_bands))
        )  # (L, H, T, T)
        return (maps if all_heads else maps.mean(dim=1)).cpu().numpy().astype(np.float64)

    products = recording_token_products(model, coh, wpli, age, sex)
    for part in segment_slices(len(coh)):
        inputs = (coh[part], wpli[part], age[part], sex[part])
        with torch.no_grad(), explicit_attention(model):
            output = model.forward_with_details(
                *inputs, offset=_offsets(offset, len(inputs[0])), products=_part(products, part)
            )
        coarse.add(batch_mean(output.attention_coarse), len(inputs[0]))
        refined.add(batch_mean(output.attention_refined), len(inputs[0]))
        logits.append(output.logits_refined.float().cpu().numpy().astype(np.float64))
    assert coarse.value is not None and refined.value is not None  # S >= 1
    return coarse.value, refined.value, np.concatenate(logits)


def _captum_attribution(
    method: str,
    forward,
    inputs: tuple[Tensor, ...],
    baselines: tuple[Tensor, ...],
    extra: tuple[Tensor, ...],
    target: int,
    n_steps: int,
):
    import captum.attr as ca

    if method == "integrated_gradients":
        return ca.IntegratedGradients(forward).attribute(
            inputs,
            baselines=baselines,
            target=target,
            additional_forward_args=extra,
            n_steps=n_steps,
            internal_batch_size=ROWS_PER_FORWARD,
        )
    # the gradient methods need inputs that require grad (captum warns and sets it otherwise)
    gradient_inputs = tuple(x.detach().requires_grad_() for x in inputs)
    if method == "saliency":  # |gradient|: unsigned, so pairs are sums of magnitudes
        return ca.Saliency(forward).attribute(
            gradient_inputs, target=target, additional_forward_args=extra
        )
    if method == "input_x_gradient":
        return ca.InputXGradient(forward).attribute(
            gradient_inputs, target=target, additional_forward_args=extra
        )
    # gradient_shap: expected gradients between the baseline and the input, n_steps samples
    return ca.GradientShap(forward).attribute(
        inputs,
        baselines=tuple(b[:1] for b in baselines),
        target=target,
        additional_forward_args=extra,
        n_samples=n_steps,
        stdevs=0.0,
    )


class Attributions(NamedTuple):
    """What :func:`channel_pair_attributions` returns: ``coh_pairs``, ``wpli_pairs`` float64
    (T, C, C) symmetric (logit units), and ``interactions`` float64 (K,), the attribution of
    each kept interaction's product (``model/interactions.py``; None for a model without)."""

    coh_pairs: np.ndarray
    wpli_pairs: np.ndarray
    interactions: np.ndarray | None = None


def _explained_output(model, target: int | tuple[int, int], offset: Tensor | None) -> tuple:
    """(forward, output column) captum attributes: the refined logits and column ``target``,
    or for a pair ``(a, b)`` the one column ``logit(b) - logit(a)``. The forward takes
    ``(coh, wpli, [products,] age, sex, guiding class)``; ``offset`` (n_classes,), a model on
    recording means: its recording's linear logits, fixed along the path (their attribution is
    exact, :func:`_linear_attributions`)."""

    def refined_logits(coh_in, wpli_in, *rest):
        *products_in, age_in, sex_in, guiding_in = rest
        return model.forward_with_details(
            coh_in,
            wpli_in,
            age_in,
            sex_in,
            target=guiding_in,
            products=products_in[0] if products_in else None,
            offset=_offsets(offset, len(coh_in)),
        ).logits_refined.float()

    if not isinstance(target, tuple):
        return refined_logits, target
    first, second = target

    def contrast(*args):
        logits = refined_logits(*args)
        return (logits[:, second] - logits[:, first]).unsqueeze(1)

    return contrast, 0


def _symmetric_pairs(mean: np.ndarray) -> np.ndarray:
    """(T, C, C) -> (T, C, C) float64: entry (i, j) plus entry (j, i)."""
    return (mean + np.swapaxes(mean, -1, -2)).astype(np.float64)


def channel_pair_attributions(
    model,
    coh: Tensor,
    wpli: Tensor,
    age: Tensor,
    sex: Tensor,
    target: int | tuple[int, int],
    method: str = DEFAULT_METHOD,
    n_steps: int = DEFAULT_N_STEPS,
    reference: tuple[Tensor, Tensor] | None = None,
    offset: Tensor | None = None,
    cells: SegmentCells | None = None,
) -> Attributions:
    """captum attribution of the ``target`` refined logit (a class index), or of
    ``logit(b) - logit(a)`` for ``target`` a pair of class indices ``(a, b)`` (the class
    contrast, :mod:`.attributions`), to each input entry, against ``reference``, the baseline
    connectome (coh, wPLI), each (T, C, C) on the model's device (None: zero connectivity).

    Returns :class:`Attributions`: the pairs, float64 (T, C, C) each, symmetric: entry (i, j)
    plus entry (j, i) of the attribution, averaged over segments (:mod:`.attributions`); for a
    model with kept interactions, their products are inputs of their own (the baseline's
    products as their baseline), attributed beside the entries, so the entries' values hold
    only what they do alone and the three parts add up to the logit's change. Seeded by the
    caller for ``gradient_shap`` (random interpolation points, drawn batch by batch). ``method``
    (one of ``choices.CAPTUM_METHODS``) and ``n_steps`` (>= 1) come checked from the entry
    point (``trained_model.check_explain_options``).

    ``offset`` (n_classes,): for a model on recording means (``static_paths.recording_offset``)
    its recording's linear logits. The segments' attributions are then the transformer's (the
    offset fixed along the path), and the linear path's exact ones are added: its weights
    times the change of its features, the recording's means' against the baseline's
    (:func:`_linear_attributions`), the entries' to the pairs and the products' to theirs.

    ``cells``: where each segment's strongest cells are kept, before the mean (None: not kept);
    they are the segments' own attributions (the transformer's, with an offset).
    """
    baseline = reference  # the keyword keeps its name: callers pass it by name
    means = [SegmentMean(len(coh)) for _ in range(3)]  # coh pairs, wPLI pairs, interactions
    token_products = recording_token_products(model, coh, wpli, age, sex)
    for part in segment_slices(len(coh)):
        batch = (coh[part], wpli[part], age[part], sex[part])
        if offset is not None and not model.kept:
            # the logits are the recording's static ones alone: the segments carry nothing
            attributed = _zero_attributions(model, batch)
        else:
            attributed = _batch_attributions(
                model, batch, _part(token_products, part), target, method, n_steps, baseline, offset
            )
        if cells is not None:
            to_products = attributed[2] if len(attributed) > 2 else None
            cells.add(
                attributed[0], attributed[1], to_products, model.transformer.interaction_token
            )
        for mean, attribution in zip(means, attributed):
            mean.add(attribution.detach().float().mean(dim=0).cpu().numpy(), len(batch[0]))

    coh_pairs, wpli_pairs, interactions = (mean.value for mean in means)
    assert coh_pairs is not None and wpli_pairs is not None  # S >= 1
    result = Attributions(
        _symmetric_pairs(coh_pairs),
        _symmetric_pairs(wpli_pairs),
        None if interactions is None else interactions.astype(np.float64),
    )
    if offset is None:
        return result
    linear_coh, linear_wpli, linear_products = _linear_attributions(
        model, (coh, wpli, age, sex), target, baseline
    )
    return Attributions(
        result.coh_pairs + linear_coh,
        result.wpli_pairs + linear_wpli,
        None if result.interactions is None else result.interactions + linear_products,
    )


def _zero_attributions(model, batch: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Zero attributions of the shapes :func:`_batch_attributions` gives, for a batch."""
    coh, wpli, age, sex = batch
    with torch.no_grad():
        products = model.interaction_products(coh, wpli, age, sex)
    zeros = (torch.zeros_like(coh), torch.zeros_like(wpli))
    return zeros if products is None else (*zeros, torch.zeros_like(products))


def _linear_attributions(
    model, recording: tuple[Tensor, ...], target: int | tuple[int, int], baseline
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact attributions of the explained output's linear part for a model on recording
    means: (coh, wPLI) float64 (T, C, C) pairs and the products' (K,), adding up to the
    linear logits' change from the baseline connectome (None: zero connectivity) to the
    recording's means (``linear_path.feature_attributions``)."""
    coh, wpli, age, sex = recording
    at_baseline = (
        (torch.zeros_like(coh[:1]), torch.zeros_like(wpli[:1]))
        if baseline is None
        else tuple(r.to(x.dtype)[None] for r, x in zip(baseline, (coh, wpli)))
    )
    features = recording_features(model, coh, wpli, age, sex)[0]
    baseline_features = recording_features(model, at_baseline[0], at_baseline[1], age, sex)[0]
    weight = model.static.linear.weight
    if model.static.mix is not None:  # the static mix's weight on the linear path
        weight = weight * model.static.mix.weight[0]
    row = weight[target[1]] - weight[target[0]] if isinstance(target, tuple) else weight[target]
    return feature_attributions(row, features, baseline_features, coh.shape[1], coh.shape[-1])


def _batch_attributions(
    model,
    batch: tuple[Tensor, ...],
    products: Tensor | None,
    target,
    method: str,
    n_steps: int,
    baseline,
    offset,
) -> tuple[Tensor, ...]:
    """The captum attributions of one batch of segments (:func:`channel_pair_attributions`):
    coh and wPLI (B, T, C, C), and the kept interactions' products (B, K) when the model has
    them; ``products`` the batch's from its whole recording (:func:`recording_token_products`;
    None: the batch forms its own)."""
    coh, wpli, age, sex = batch
    with torch.no_grad():  # the class each segment's refined pass is guided by, at the input
        if products is None:
            products = model.interaction_products(coh, wpli, age, sex)
        guiding = model.forward_with_details(
            coh, wpli, age, sex, offset=_offsets(offset, len(coh)), products=products
        ).target
    explained, explained_target = _explained_output(model, target, offset)
    # The refined pass follows the explanation, so the gradient must follow it too (a
    # second-order backward, which the fused attention kernel does not have), and the
    # explained class stays the input's along the whole path: where the coarse argmax would
    # flip between the baseline and the input, the refined logit would jump, and a jump has
    # no gradient to integrate (the attributions would miss that part of the logit's change).
    with differentiable_explanations(model), explicit_attention(model):
        baselines: tuple[Tensor, ...] = (
            (torch.zeros_like(coh), torch.zeros_like(wpli))
            if baseline is None
            else tuple(
                r.to(x.dtype).expand_as(x).contiguous() for r, x in zip(baseline, (coh, wpli))
            )
        )
        inputs: tuple[Tensor, ...] = (coh, wpli)
        if products is not None:
            with torch.no_grad():  # the baseline: one recording of constant connectivity
                baselines += (model.token_products(*baselines, float(age[0]), float(sex[0])),)
            inputs += (products,)
        return tuple(
            _captum_attribution(
                method,
                explained,
                inputs,
                baselines,
                (age, sex, guiding),
                explained_target,
                n_steps,
            )
        )


def product_cells(products: Tensor, token, shape: torch.Size) -> Tensor:
    """The attributions of the kept pairs' products (B, K) on the cells of their entries:
    float32 ``shape`` (B, T, C, C), each product's half at each of its two entries' (band, i,
    j), all of it at its entry for an entry-age product. The halves are the Shapley values of
    a product of two changes from zero (``ab / 2`` each); the cells then carry the whole of a
    transformer path that reads the products alone. ``token``: the model's
    ``InteractionToken`` (its ``index_a``, ``index_b`` (K, 4) and ``with_age`` (K,))."""
    out = torch.zeros(shape, dtype=torch.float32, device=products.device)
    values = products.detach().float()
    half = torch.where(token.with_age, values, values / 2)
    rows = torch.arange(len(values), device=values.device)[:, None]
    for index, share in ((token.index_a, half), (token.index_b, values - half)):
        cell = (rows, index[:, 1][None], index[:, 2][None], index[:, 3][None])
        out.index_put_(cell, share, accumulate=True)
    return out


class SegmentCells:
    """The strongest cells of each segment, batch by batch: a cell is a band and an unordered
    channel pair, its value the attribution of the pair's coh and wPLI entries (both orders)
    summed, with the shares of the kept pairs' products that read them (:func:`product_cells`),
    logit units. Per segment at most ``k`` cells are kept, so the memory grows by ``2 k``
    numbers per segment, never by a (T, C, C) map."""

    def __init__(self, k: int | None = None):
        self.k = TOP_SEGMENT_CELLS if k is None else k
        self.index: list[np.ndarray] = []
        self.value: list[np.ndarray] = []

    def add(self, coh: Tensor, wpli: Tensor, products: Tensor | None = None, token=None) -> None:
        """Add one batch's attributions, coh and wPLI (B, T, C, C), and the products' (B, K)
        of the model's interaction ``token`` (None: a model without kept pairs)."""
        n_channels = coh.shape[-1]
        upper = torch.triu_indices(n_channels, n_channels, 1, device=coh.device)
        both = (coh + wpli).detach().float()
        if products is not None:
            both = both + product_cells(products, token, both.shape)
        pairs = (both + both.transpose(-1, -2))[..., upper[0], upper[1]]  # (B, T, n_pairs)
        flat = pairs.reshape(len(pairs), -1)
        strongest = torch.topk(flat.abs(), min(self.k, flat.shape[1]), dim=1).indices
        band, pair = strongest // pairs.shape[-1], strongest % pairs.shape[-1]
        cell = (band * n_channels + upper[0][pair]) * n_channels + upper[1][pair]
        self.index.append(cell.cpu().numpy().astype(np.int64))
        self.value.append(torch.gather(flat, 1, strongest).cpu().numpy().astype(np.float64))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(index, value): int64 (S, k) flat indices into a (T, C, C) map (channel i before j),
        strongest first, and their values float64 (S, k)."""
        return np.concatenate(self.index), np.concatenate(self.value)


@dataclass
class SegmentTimeline:
    """One recording's explained logit segment by segment.

    ``onsets_s`` float64 (S,) the segments' starts in the recording (s; NaN when the connectome
    file gives none); ``contributions`` float64 (S,) logit units, each segment's part of the
    explained class's logit: its transformer path's logit divided by S (a model on recording
    means), or its whole logit divided by S (a model that forms its static stage per segment,
    or has none); ``static_share`` the static stage's logit of the recording (0.0 for those),
    so ``static_share + contributions.sum()`` is the recording's logit (the mean of its
    segments' refined logits, before any recalibration); ``cells`` int64 (S, k) flat indices
    into a (T, C, C) map and ``cell_values`` float64 (S, k): each segment's strongest cells
    (:class:`SegmentCells`) of the attribution of its own refined logit, which for a model on
    recording means is what its transformer path carries (the static logit fixed), value 0
    where no cell carries any.
    """

    onsets_s: np.ndarray
    contributions: np.ndarray
    static_share: float
    cells: np.ndarray
    cell_values: np.ndarray


def segment_timeline(
    logits: np.ndarray,
    offset: Tensor | None,
    target: int,
    onsets_s: np.ndarray | None,
    cells: SegmentCells,
) -> SegmentTimeline:
    """The :class:`SegmentTimeline` of the ``target`` class from the segments' refined logits
    float64 (S, K) (:func:`attention_maps`), the recording's static logits ``offset`` (K,) (None:
    no static stage on recording means), the onsets (S,) s (None: unknown) and the cells."""
    n_segments = len(logits)
    static = 0.0 if offset is None else float(offset.double().cpu()[target])
    index, value = cells.arrays()
    return SegmentTimeline(
        onsets_s=np.full(n_segments, np.nan)
        if onsets_s is None
        else np.asarray(onsets_s, dtype=np.float64),
        contributions=(logits[:, target] - static) / n_segments,
        static_share=static,
        cells=index,
        cell_values=value,
    )


def mean_timelines(timelines: Sequence[SegmentTimeline]) -> SegmentTimeline:
    """The mean of one recording's timelines by several models: contributions and static
    shares averaged (so they still add up to the mean logit), each segment's cells the
    strongest of the models' mean values over the cells any model kept (a cell a model did not
    keep counts 0 for it)."""
    first = timelines[0]
    if len(timelines) == 1:
        return first
    k = first.cells.shape[1]
    cells = np.zeros_like(first.cells)
    values = np.zeros_like(first.cell_values)
    for s in range(len(first.cells)):
        totals: dict[int, float] = {}
        for timeline in timelines:
            for cell, value in zip(timeline.cells[s], timeline.cell_values[s]):
                totals[int(cell)] = totals.get(int(cell), 0.0) + value / len(timelines)
        strongest = sorted(totals.items(), key=lambda item: -abs(item[1]))[:k]
        cells[s, : len(strongest)] = [cell for cell, _ in strongest]
        values[s, : len(strongest)] = [value for _, value in strongest]
    return SegmentTimeline(
        onsets_s=first.onsets_s,
        contributions=np.mean([t.contributions for t in timelines], axis=0),
        static_share=float(np.mean([t.static_share for t in timelines])),
        cells=cells,
        cell_values=values,
    )


def timeline_rows(
    timeline: SegmentTimeline,
    recording_id: str,
    target: str,
    bands: Sequence[str],
    channels: Sequence[str],
) -> tuple[list[str], list[list]]:
    """``(columns, rows)`` of a recording's segment table, one row per segment: ``recording_id,
    target, segment, onset_s, contribution, static_share`` and, strongest first, ``cell_1,
    value_1, ...`` (a cell in words, ``band channel_a-channel_b``; empty where no cell carries
    any of the logit); floats unrounded, an unknown onset None."""
    k = timeline.cells.shape[1]
    columns = ["recording_id", "target", "segment", "onset_s", "contribution", "static_share"]
    columns += [name for rank in range(1, k + 1) for name in (f"cell_{rank}", f"value_{rank}")]
    shape = (len(bands), len(channels), len(channels))
    rows = []
    for s, (onset, contribution) in enumerate(zip(timeline.onsets_s, timeline.contributions)):
        row = [recording_id, target, s, None if np.isnan(onset) else float(onset)]
        row += [float(contribution), timeline.static_share]
        for cell, value in zip(timeline.cells[s], timeline.cell_values[s]):
            band, i, j = (int(x) for x in np.unravel_index(int(cell), shape))
            carried = bool(np.isfinite(value) and value != 0)
            name = f"{bands[band]} {channels[i]}-{channels[j]}"
            row += [name, float(value)] if carried else ["", None]
        rows.append(row)
    return columns, rows
