"""Explanations of the coarse pass at every transformer layer's input (what the refined pass
uses as queries and keys).

The official code calls ``captum.attr.LayerDeepLift`` once per layer (reference section 4.4): 12
forwards on inputs || zero baselines (2B rows each) plus 12 gradients, per step. Because the
transformer has no module captum's DeepLift rescales (no nn.ReLU/nn.Softmax/...), each call
computes exactly ``E_i = (h_i - h_i^base) * d logit_target / d h_i`` with the gradient at the
real input. :func:`one_pass_deeplift` computes all of them from the coarse pass's own graph:
one baseline row (the baseline is the same for every sample), one ``autograd.grad`` for all
layers. The numbers equal captum's (tests/test_explanation.py, benchmarks/bench_train_step.py).

:func:`captum_layer_attributions` keeps the per-layer captum path: the reference for DeepLift,
and the only path for Integrated Gradients and Gradient x Activation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from eegformer_cli.errors import check_choice
from eegformer_cli.model.transformer import BandTransformer, EncoderOutput

EXPLAINERS = ("deeplift", "integrated_gradients", "gradient_x_activation")
EXPLANATION_IMPLS = ("one_pass", "captum")
#: Integrated Gradients settings of the official wrapper.
IG_STEPS = 50
IG_METHOD = "gausslegendre"


def one_pass_deeplift(encoder: BandTransformer, coarse: EncoderOutput, demographics: Tensor,
                      target: Tensor, detach: bool = False) -> list[Tensor]:
    """DeepLIFT (zero token + zero demographic baseline) of ``target`` at every layer input.

    Parameters
    ----------
    encoder : the transformer that produced ``coarse``.
    coarse : its coarse pass, run with ``keep_layer_inputs=True`` under grad mode;
        ``coarse.layer_inputs[0]`` (the tokens) must require grad.
    demographics : (B, 2) float32, as given to the coarse pass.
    target : (B,) int64 class index per sample.
    detach : cut the graph through ``h_i - h_i^base`` (the official DeepLift path keeps it; the
        gradient factor never has a graph, as in captum).

    Returns
    -------
    list of L tensors (B, T, d), same dtype as the layer inputs.
    """
    tokens = coarse.layer_inputs[0]
    baseline = encoder.run(tokens.new_zeros((1,) + tokens.shape[1:]),
                           demographics.new_zeros((1, demographics.shape[-1])),
                           keep_layer_inputs=True)
    target_logit = coarse.logits.gather(1, target[:, None]).sum()
    grads = torch.autograd.grad(target_logit, coarse.layer_inputs, retain_graph=True)
    explanations = []
    for h, h_base, grad in zip(coarse.layer_inputs, baseline.layer_inputs, grads):
        delta = h - h_base
        explanations.append((delta.detach() if detach else delta) * grad)
    return explanations


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


def explain_layers(encoder: BandTransformer, coarse: EncoderOutput, demographics: Tensor,
                   target: Tensor, explainer: str, impl: str, detach: bool) -> list[Tensor]:
    """Layer-input explanations of the coarse pass with the configured explainer.

    ``impl="one_pass"`` applies to DeepLIFT only; the other explainers always go through captum.
    Shapes as in :func:`one_pass_deeplift`.
    """
    check_choice("explainer", explainer, EXPLAINERS)
    check_choice("explanation_impl", impl, EXPLANATION_IMPLS)
    if explainer == "deeplift" and impl == "one_pass":
        return one_pass_deeplift(encoder, coarse, demographics, target, detach)
    return captum_layer_attributions(encoder, coarse.layer_inputs[0], demographics, target,
                                     explainer, detach)
