"""How much of one recording's logit each path of the model carries: its linear path and the
transformer's residual (``model/linear_path.py``).

The channel-pair attributions, band importance, head maps, contrast and interaction table are
of the whole model: its logit is the linear path's plus the transformer's, and Integrated
Gradients of that sum add up to the sum's change from the baseline connectome. This module
splits that change in two. The linear path's part is exact: its weights times the change of
its features from the baseline's (a linear function's attribution needs no integral): for a
model on recording means (``linear_path.uses_recording_means``) of the recording's means'
features, ``w . (features(mean) - features(baseline))``, else the mean over the recording's
segments of each segment's; the transformer's part is the rest of the change of the
segment-mean logit. For a model whose residual was not kept the transformer's part is 0, and
for a model without a linear path there is no split (None).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from eegformer_cli.explain.segment_attributions import segment_slices
from eegformer_cli.model.linear_path import recording_linear_logits, uses_recording_means


def path_logit_changes(
    model,
    coh: Tensor,
    wpli: Tensor,
    age: Tensor,
    sex: Tensor,
    target: int | tuple[int, int],
    reference: tuple[Tensor, Tensor] | None,
) -> dict | None:
    """``{"total", "linear", "transformer"}``: the change of the explained output from the
    baseline connectome to the recording (logit units, mean over segments), and each path's
    part of it; ``target`` a class index, or ``(a, b)`` for ``logit(b) - logit(a)``.

    ``coh``, ``wpli`` (S, T, C, C) and ``age``, ``sex`` (S,) on the model's device;
    ``reference`` (coh, wPLI) (T, C, C) (None: zero connectivity). None for a model without a
    linear path."""
    if getattr(model, "linear", None) is None:
        return None
    baseline = (
        (torch.zeros_like(coh), torch.zeros_like(wpli))
        if reference is None
        else tuple(r.to(x.dtype).expand_as(x) for r, x in zip(reference, (coh, wpli)))
    )
    recording = (coh, wpli, age, sex)
    # a model on recording means: each side's linear logits, every one of its segments' offset
    # (None: the forward forms the linear path per segment)
    ours_offset, theirs_offset = (
        (
            recording_linear_logits(model, *recording),
            recording_linear_logits(model, baseline[0][:1], baseline[1][:1], age, sex),
        )
        if uses_recording_means(model)
        else (None, None)
    )

    def total(batch: tuple) -> Tensor:  # (coh, wpli, age, sex, reference coh, reference wpli)
        ours, theirs = batch[:4], (*batch[4:], *batch[2:4])
        return _refined(model, ours, target, ours_offset) - _refined(
            model, theirs, target, theirs_offset
        )

    def linear(batch: tuple) -> Tensor:
        ours, theirs = batch[:4], (*batch[4:], *batch[2:4])
        return _output(
            model.linear(model.linear_features(*ours))
            - model.linear(model.linear_features(*theirs)),
            target,
        )

    both = (*recording, *baseline)
    linear_change = (
        _segment_mean(both, linear)
        if ours_offset is None or theirs_offset is None
        else float(_output((ours_offset - theirs_offset)[None], target)[0])
    )
    return _split(_segment_mean(both, total), linear_change)


def _refined(model, inputs: tuple, target, offset: Tensor | None) -> Tensor:
    """(B,) the explained output of the refined logits of ``inputs`` (coh, wpli, age, sex);
    ``offset`` (n_classes,): every segment's (a model on recording means: its recording's
    linear logits; None: the forward forms the linear path per segment)."""
    rows = None if offset is None else offset.expand(len(inputs[0]), -1)
    return _output(model(*inputs, rows)[1], target)


def _segment_mean(inputs: tuple, output: Callable[[tuple], Tensor]) -> float:
    """The mean over the segments of ``output`` (a batch of ``inputs`` -> (B,)), computed
    ``segment_slices`` at a time (flat memory for a recording of any length), summed in
    float64."""
    n_segments = len(inputs[0])
    sum_ = 0.0
    with torch.no_grad():
        for part in segment_slices(n_segments):
            sum_ += float(output(tuple(x[part] for x in inputs)).double().sum())
    return sum_ / n_segments


def _split(total_change: float, linear_change: float) -> dict:
    """The change of the explained output and its two paths' parts."""
    return {
        "total": total_change,
        "linear": linear_change,
        "transformer": total_change - linear_change,
    }


def _output(logits: Tensor, target: int | tuple[int, int]) -> Tensor:
    """(S,) the explained output of (S, n_classes) logits."""
    if isinstance(target, tuple):
        return logits[:, target[1]] - logits[:, target[0]]
    return logits[:, target]
