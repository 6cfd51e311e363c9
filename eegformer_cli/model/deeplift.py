"""Explanations of the coarse pass at every transformer layer's input (what the refined pass
uses as queries and keys).

The official code calls ``captum.attr.LayerDeepLift`` once per layer (reference-method.md,
section 4.4): L forwards on inputs || zero baselines plus L gradients, per step. Because the
transformer has no module captum's DeepLift rescales (no nn.ReLU/nn.Softmax/...), each call
computes exactly ``E_i = (h_i - h_i^base) * d logit_target / d h_i`` with the gradient at the
real input. :func:`one_pass_deeplift` computes all of them from the coarse pass's own graph: the
baseline (the same for every sample) is one extra row of the coarse pass's batch, and one
``autograd.grad`` serves all layers. The numbers equal captum's (tests/test_explanation.py
compares them with captum's).
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

from eegformer_cli.model.transformer import BandTransformer, EncoderOutput


def one_pass_deeplift(
    encoder: BandTransformer,
    tokens: Tensor,
    demographics: Tensor,
    target: Tensor | None = None,
    detach: bool = False,
    create_graph: bool = False,
    offset: Tensor | None = None,
) -> tuple[EncoderOutput, Tensor, list[Tensor]]:
    """The coarse pass and its DeepLIFT (zero token + zero demographic baseline) at every layer
    input, from one forward and one ``autograd.grad``.

    The baseline is the same for every sample, so it runs as one extra row of the coarse pass's
    batch (row B: zero tokens, zero demographics) instead of a pass of its own: every operation
    of the transformer (attention, norms, feed-forward, head) acts on each sample alone, so the
    B real rows compute the same values as without it (up to float rounding), and a separate
    1-row pass would cost a pass's Python and autograd overhead for one row.

    Parameters
    ----------
    encoder : the transformer.
    tokens : (B, T, d), requiring grad (the first layer's explanation is taken at them).
    demographics : (B, 2) float32 rotary inputs.
    target : (B,) int64 class index per sample; None: the argmax of the coarse pass's logits
        plus ``offset``.
    detach : cut the graph through ``h_i - h_i^base`` (the official DeepLift path keeps it; the
        gradient factor never has a graph, as in captum).
    create_graph : give the gradient factor a graph too (``torch.autograd.grad(...,
        create_graph=True)``), so the explanations are differentiable functions of the tokens
        in both factors: what attributing the refined logits to the inputs needs when the
        refined pass depends on the explanation (:func:`differentiable_explanations`).
    offset : (B, n_classes) logits added to the coarse pass's (the model's linear path), so
        that the explained class is the one the whole model's coarse logits pick; None: 0.

    Returns
    -------
    (coarse, target, explanations): the coarse pass of the B samples (logits, layer inputs and
    attention without the baseline row), the explained class (B,) and L tensors (B, T, d), same
    dtype as the layer inputs.
    """
    n = tokens.shape[0]
    with_baseline = encoder.run(
        torch.cat((tokens, tokens.new_zeros((1,) + tokens.shape[1:]))),
        torch.cat((demographics, demographics.new_zeros((1, demographics.shape[-1])))),
        keep_layer_inputs=True,
    )
    coarse = EncoderOutput(
        with_baseline.logits[:n],
        [h[:n] for h in with_baseline.layer_inputs],
        [trace.rows(slice(0, n)) for trace in with_baseline.attention],
    )
    if target is None:
        logits = coarse.logits.detach()
        target = (logits if offset is None else logits + offset.detach()).argmax(dim=1)
    target_logit = coarse.logits.gather(1, target[:, None]).sum()
    # gradients at the full layer inputs (the [:n] views are not part of the graph)
    grads = torch.autograd.grad(
        target_logit, with_baseline.layer_inputs, retain_graph=True, create_graph=create_graph
    )
    explanations = []
    for h, grad in zip(with_baseline.layer_inputs, grads):
        delta = h[:n] - h[n:]
        explanations.append((delta.detach() if detach else delta) * grad[:n])
    return coarse, target, explanations


@contextlib.contextmanager
def differentiable_explanations(model: torch.nn.Module):
    """Within the block, every XAIguiFormer in ``model`` computes its DeepLIFT explanations as
    differentiable functions of its inputs (not detached, the gradient factor with a graph),
    and every timm norm (the paper preset's) is twice differentiable, so a gradient through the
    explanations keeps its second-order terms (its fast backward is first-order only,
    ``layers.py``); restored afterwards.

    Why: the refined pass depends on the explanation (its attention follows it), so an
    attribution of the refined logits to the inputs (``explain``'s Integrated Gradients) must
    differentiate through it; with the training path's detached explanations the gradient
    misses that part and the attributions no longer add up to the logit's change
    (docs/benchmarks.md). Costs a second-order backward, so it is not used in training.
    """
    # the models and norms are found by their switch, so this module need not import
    # xaiguiformer.py (which imports it)
    models = [m for m in model.modules() if hasattr(m, "differentiable_explanations")]
    _switch(models, True)
    try:
        yield
    finally:
        _switch(models, False)


def _switch(models: list[nn.Module], on: bool) -> None:
    for module in models:
        # torch types Module.__setattr__'s value as Tensor | Module, yet it takes any value
        module.differentiable_explanations = on  # type: ignore[assignment]
