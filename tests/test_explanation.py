"""The one-pass explanation equals captum's per-layer LayerDeepLift, the official code's path
(attributions, refined logits, parameter gradients); captum is called here as the reference."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from builders import connectome_batch, perturb, small_config
from captum.attr import LayerDeepLift

from eegformer_cli.model import XAIguiFormer
from eegformer_cli.model.deeplift import one_pass_deeplift

LABELS = torch.tensor([0, 2, 1])


def layer_deeplift(encoder, tokens, demographics, target, detach=False) -> list[torch.Tensor]:
    """captum's ``LayerDeepLift`` (zero baselines) at every layer input, one call per layer, as
    the official code: L tensors (B, T, d)."""
    inputs = (tokens, demographics)
    baselines = (torch.zeros_like(tokens), torch.zeros_like(demographics))
    explanations = []
    for layer in encoder.layers:
        attribution = LayerDeepLift(encoder, layer, multiply_by_inputs=True).attribute(
            inputs,
            baselines,
            target=target,
            attribute_to_layer_input=True,
            grad_kwargs={"materialize_grads": True},
        )  # demographics may get no gradient
        attribution = attribution[0] if isinstance(attribution, (tuple, list)) else attribution
        explanations.append(attribution.detach() if detach else attribution)
    return explanations


def captum_forward(model: XAIguiFormer, coh, wpli, age, sex):
    """The model's forward with the explanations from :func:`layer_deeplift`: (coarse logits,
    refined logits, explained class, explanations)."""
    tokens = model.transformer.tokenizer(coh, wpli)
    demographics = model.transformer.encode_demographics(age, sex)
    coarse = model.transformer.encoder(tokens, demographics)
    target = coarse.detach().argmax(dim=1)
    explanations = layer_deeplift(
        model.transformer.encoder, tokens, demographics, target, model.config.detach_explanations
    )
    refined = model.transformer.encoder.run(tokens, demographics, explanations).logits
    return coarse, refined, target, explanations


def twin_model(preset: str, dtype=torch.float32, **fields) -> XAIguiFormer:
    """A 3-layer model with perturbed weights."""
    torch.manual_seed(11)
    return perturb(XAIguiFormer(small_config(preset, n_layers=3, **fields)), seed=3).to(dtype)


def inputs(dtype=torch.float32):
    coh, wpli, age, sex = connectome_batch()
    return coh.to(dtype), wpli.to(dtype), age, sex


@pytest.mark.parametrize(
    "preset, detach, guidance",
    [
        ("paper", False, "paper"),
        ("default", False, "band_share"),
        ("default", True, "band_share"),
        ("default", True, "paper"),
    ],
)
def test_one_pass_equals_captum_layer_deeplift(preset, detach, guidance):
    """Both guidance designs explain the same coarse pass, so the refined logits agree too."""
    model = twin_model(preset, detach_explanations=detach, guidance=guidance)
    ours = model.forward_with_details(*inputs())
    coarse, refined, target, explanations = captum_forward(model, *inputs())
    assert torch.equal(ours.target, target)
    torch.testing.assert_close(ours.logits_coarse, coarse, rtol=0, atol=1e-6)
    assert max(float(e.detach().abs().max()) for e in explanations) > 1e-2  # not trivially small
    for mine, reference in zip(ours.explanations, explanations):
        assert float((mine - reference).detach().abs().max()) <= 1e-5
    assert float((ours.logits_refined - refined).detach().abs().max()) <= 1e-5


def test_one_pass_equals_captum_without_the_model_wrapper():
    """Direct call on the transformer, with a target that is not argmax."""
    model = twin_model("paper")
    coh, wpli, age, sex = inputs()
    tokens = model.transformer.tokenizer(coh, wpli).detach().requires_grad_()
    demographics = model.transformer.encode_demographics(age, sex)
    plain = model.transformer.encoder.run(tokens, demographics, keep_layer_inputs=True)
    target = (plain.logits.argmax(1) + 1) % 3
    coarse, chosen, ours = one_pass_deeplift(
        model.transformer.encoder, tokens, demographics, target
    )
    theirs = layer_deeplift(model.transformer.encoder, tokens, demographics, target)
    np.testing.assert_allclose(torch.stack(ours).detach(), torch.stack(theirs).detach(), atol=1e-5)
    # the baseline row appended to the batch leaves the samples' own coarse pass as it was
    assert torch.equal(chosen, target)
    torch.testing.assert_close(coarse.logits, plain.logits, rtol=0, atol=1e-6)
    for mine, reference in zip(coarse.layer_inputs, plain.layer_inputs):
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-6)


def test_parameter_gradients_equal_captum_path():
    """Not detached (paper): the gradient flows through h_i - h_i^base in both paths."""
    one_pass = twin_model("paper", dtype=torch.float64)
    captum = copy.deepcopy(one_pass)
    grads = []
    for model, forward in (
        (one_pass, lambda *x: one_pass(*x)),
        (captum, lambda *x: captum_forward(captum, *x)[:2]),
    ):
        coarse, refined = forward(*inputs(torch.float64))
        (F.cross_entropy(coarse, LABELS) + F.cross_entropy(refined, LABELS)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-7, atol=1e-10)


def test_detaching_explanations_keeps_logits_but_cuts_their_gradient():
    attached = twin_model("default", dtype=torch.float64, detach_explanations=False)
    detached = XAIguiFormer(dataclasses.replace(attached.config, detach_explanations=True)).double()
    detached.load_state_dict(attached.state_dict())
    outputs, grads = [], []
    for model in (attached, detached):
        output = model.forward_with_details(*inputs(torch.float64))
        F.cross_entropy(output.logits_refined, LABELS).backward()
        outputs.append(output)
        grads.append(
            torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        )
    assert outputs[0].explanations[1].requires_grad and not outputs[1].explanations[1].requires_grad
    torch.testing.assert_close(outputs[0].logits_refined, outputs[1].logits_refined)
    assert not torch.allclose(grads[0], grads[1], rtol=1e-9, atol=0)


def test_target_picks_the_explained_class():
    model = twin_model("paper")
    default = model.forward_with_details(*inputs())
    assert torch.equal(default.target, default.logits_coarse.argmax(1))
    other = (default.target + 1) % 3
    chosen = model.forward_with_details(*inputs(), target=other)
    assert torch.equal(chosen.target, other)
    assert not torch.allclose(chosen.explanations[0], default.explanations[0])
