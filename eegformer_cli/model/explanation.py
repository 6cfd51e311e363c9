"""Explanations of the coarse pass at every transformer layer's input (what the refined pass
uses as queries and keys).

The official code calls ``captum.attr.LayerDeepLift`` once per layer (reference section 4.4): 12
forwards on inputs || zero baselines (2B rows each) plus 12 gradients, per step. Because the
transformer has no module captum's DeepLift rescales (no nn.ReLU/nn.Softmax/...), each call
computes exactly ``E_i = (h_i - h_i^base) * d logit_target / d h_i`` with the gradient at the
real input. :func:`one_pass_deeplift` computes all of them from the coarse pass's own graph:
the baseline (the same for every sample) is one extra row of the coarse pass's batch, and one
``autograd.grad`` serves all layers. The numbers equal captum's (tests/test_explanation.py,
benchmarks/bench_train_step.py).

:func:`captum_layer_attributions` keeps the per-layer captum path: the reference for DeepLift,
and the only path for Integrated Gradients and Gradient x Activation.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from eegformer_cli.errors import check_choice
from eegformer_cli.model.transformer import BandTransformer, EncoderOutput

EXPLAINERS = ("deeplift", "integrated_gradients", "gradient_x_activation")
EXPLANATION_IMPLS = ("one_pass", "captum")
#: Integrated Gradients settings of the official wrapper.
IG_STEPS = 50
IG_METHOD = "gausslegendre"


def _explained_class(coarse: EncoderOutput, target: Tensor | None) -> Tensor:
    """``target`` (B,) int64 if given, else the coarse pass's predicted class."""
    return coarse.logits.detach().argmax(dim=1) if target is None else target


def one_pass_deeplift(encoder: BandTransformer, tokens: Tensor, demographics: Tensor,
                      target: Tensor | None = None, detach: bool = False,
                      create_graph: bool = False) -> tuple[EncoderOutput, Tensor, list[Tensor]]:
    """The coarse pass and its DeepLIFT (zero token + zero demographic baseline) at every layer
    input, from one forward and one ``autograd.grad``.

    The baseline is the same for every sample, so it runs as one extra row of the coarse pass's
    batch (row B: zero tokens, zero demographics) instead of a pass of its own: every operation
    of the transformer (attention, norms, feed-forward, head) acts on each sample alone, so the
    B real rows compute the same values as without it (up to float rounding). Measured at the
    paper's size (batch 64, 12 layers; this project's 2-core CPU): a separate 1-row pass and its
    backward cost 20-35 ms of a 0.8-1.0 s training step (2 threads; Python and autograd
    overhead of ~40 small operations per layer).

    Parameters
    ----------
    encoder : the transformer.
    tokens : (B, T, d), requiring grad (the first layer's explanation is taken at them).
    demographics : (B, 2) float32 rotary inputs.
    target : (B,) int64 class index per sample; None: the coarse pass's argmax.
    detach : cut the graph through ``h_i - h_i^base`` (the official DeepLift path keeps it; the
        gradient factor never has a graph, as in captum).
    create_graph : give the gradient factor a graph too (``torch.autograd.grad(...,
        create_graph=True)``), so the explanations are differentiable functions of the tokens
        in both factors: what attributing the refined logits to the inputs needs when the
        refined pass depends on the explanation (:func:`differentiable_explanations`).

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
        keep_layer_inputs=True)
    coarse = EncoderOutput(with_baseline.logits[:n], [h[:n] for h in with_baseline.layer_inputs],
                           [trace.rows(slice(0, n)) for trace in with_baseline.attention])
    target = _explained_class(coarse, target)
    target_logit = coarse.logits.gather(1, target[:, None]).sum()
    # gradients at the full layer inputs (the [:n] views are not part of the graph)
    grads = torch.autograd.grad(target_logit, with_baseline.layer_inputs, retain_graph=True,
                                create_graph=create_graph)
    explanations = []
    for h, grad in zip(with_baseline.layer_inputs, grads):
        delta = h[:n] - h[n:]
        explanations.append((delta.detach() if detach else delta) * grad[:n])
    return coarse, target, explanations


def captum_layer_attributions(encoder: BandTransformer, tokens: Tensor, demographics: Tensor,
                              target: Tensor, explainer: str = "deeplift",
                              detach: bool = False) -> list[Tensor]:
    """One captum layer-attribution call per layer, as the official code does.

    ``explainer``: ``"deeplift"`` (``LayerDeepLift``, zero baselines), ``"integrated_gradients"``
    (``LayerIntegratedGradients``, zero baselines, 50 Gauss-Legendre steps; always detached, as
    the official wrapper does) or ``"gradient_x_activation"`` (``LayerGradientXActivation``).
    tokens (B, T, d), demographics (B, 2), target (B,) -> list of L tensors (B, T, d).
    """
    from captum.attr import LayerDeepLift, LayerGradientXActivation, LayerIntegratedGradients

    check_choice("explainer", explainer, EXPLAINERS)
    inputs = (tokens, demographics)
    baselines = (torch.zeros_like(tokens), torch.zeros_like(demographics))
    # zero gradients (not an error) for demographics when the frequency encoding ignores them
    grad_kwargs = {"materialize_grads": True}
    explanations = []
    for layer in encoder.layers:
        if explainer == "deeplift":
            attribution = LayerDeepLift(encoder, layer, multiply_by_inputs=True).attribute(
                inputs, baselines, target=target, attribute_to_layer_input=True,
                grad_kwargs=grad_kwargs)
        elif explainer == "integrated_gradients":
            attribution = LayerIntegratedGradients(encoder, layer, multiply_by_inputs=True).attribute(
                inputs, baselines, target=target, n_steps=IG_STEPS, method=IG_METHOD,
                attribute_to_layer_input=True, grad_kwargs=grad_kwargs)
        else:
            attribution = LayerGradientXActivation(encoder, layer, multiply_by_inputs=True).attribute(
                inputs, target=target, attribute_to_layer_input=True, grad_kwargs=grad_kwargs)
        attribution = attribution[0] if isinstance(attribution, (tuple, list)) else attribution
        if detach or explainer == "integrated_gradients":
            attribution = attribution.detach()
        explanations.append(attribution)
    return explanations


def explained_coarse_pass(encoder: BandTransformer, tokens: Tensor, demographics: Tensor,
                          target: Tensor | None, explainer: str, impl: str,
                          detach: bool, differentiable: bool = False
                          ) -> tuple[EncoderOutput, Tensor, list[Tensor]]:
    """The coarse pass and the layer-input explanations of ``target`` (None: its argmax) with
    the configured explainer; returns (coarse, target, explanations) as :func:`one_pass_deeplift`.

    ``impl="one_pass"`` applies to DeepLIFT only; the other explainers always go through captum.
    ``differentiable``: explanations that are differentiable functions of the tokens in both
    factors (DeepLIFT only: not detached, gradient with a graph), see
    :func:`differentiable_explanations`.
    """
    check_choice("explainer", explainer, EXPLAINERS)
    check_choice("explanation_impl", impl, EXPLANATION_IMPLS)
    if explainer == "deeplift" and (impl == "one_pass" or differentiable):
        return one_pass_deeplift(encoder, tokens, demographics, target,
                                 detach and not differentiable, create_graph=differentiable)
    coarse = encoder.run(tokens, demographics, keep_layer_inputs=True)
    target = _explained_class(coarse, target)
    return coarse, target, captum_layer_attributions(encoder, tokens, demographics, target,
                                                     explainer, detach)


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
    misses that part, and the attributions stopped adding up to the logit's change (20 msu
    recordings, the default's final model, 128 steps: 22 % off in the median, 39 % at worst,
    against 0.08 % and 0.6 % with it; docs/benchmarks.md). Costs a second-order backward, so
    it is not used in training. Other explainers (captum's Integrated Gradients, Gradient x Activation)
    keep their own graphs.
    """
    # the models and norms are found by their switch, so this module need not import
    # xaiguiformer.py (which imports it)
    models = [m for m in model.modules() if hasattr(m, "differentiable_explanations")]
    for module in models:
        module.differentiable_explanations = True
    try:
        yield
    finally:
        for module in models:
            module.differentiable_explanations = False
