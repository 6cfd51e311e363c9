"""How much of one recording's logit each path of the model carries: its linear path and the
transformer's residual (``model/linear_path.py``).

The channel-pair attributions, band importance, head maps, contrast and interaction table are
of the whole model: its logit is the linear path's plus the transformer's, and Integrated
Gradients of that sum add up to the sum's change from the reference connectome. This module
splits that change in two. The linear path's part is exact: its weights times the change of
its features from the reference's (a linear function's attribution needs no integral): for a
model on recording means (``linear_path.uses_recording_means``) of the recording's means'
features, ``w . (features(mean) - features(reference))``, else the mean over the recording's
segments of each segment's; the transformer's part is the rest of the change of the
segment-mean logit. For a model whose residual was not kept the transformer's part is 0, and
for a model without a linear path there is no split (None).
"""

from __future__ import annotations

import torch
from torch import Tensor

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
    reference connectome to the recording (logit units, mean over segments), and each path's
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
    if uses_recording_means(model):
        return _recording_changes(model, (coh, wpli, age, sex), baseline, target)
    with torch.no_grad():
        total = _output(model(coh, wpli, age, sex)[1], target) - _output(
            model(*baseline, age, sex)[1], target
        )
        features = model.linear_features(coh, wpli, age, sex)
        reference_features = model.linear_features(*baseline, age, sex)
        linear = _output(model.linear(features) - model.linear(reference_features), target)
    return _split(float(total.mean()), float(linear.mean()))


def _recording_changes(model, recording: tuple, baseline: tuple, target) -> dict:
    """:func:`path_logit_changes` of a model on recording means: each side's segments get its
    recording's linear logits as their offset (the reference's: of the reference connectome)."""
    coh, wpli, age, sex = recording
    offset = recording_linear_logits(model, coh, wpli, age, sex)
    reference_offset = recording_linear_logits(model, baseline[0][:1], baseline[1][:1], age, sex)
    rows = offset.new_ones(len(coh), 1)
    with torch.no_grad():
        total = _output(model(coh, wpli, age, sex, rows * offset)[1], target) - _output(
            model(*baseline, age, sex, rows * reference_offset)[1], target
        )
    linear = _output((offset - reference_offset)[None], target)
    return _split(float(total.mean()), float(linear[0]))


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
