"""The one-pass explanation equals captum's per-layer LayerDeepLift (attributions, refined logits,
parameter gradients); captum's other explainers stay selectable and behave as defined."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from eegformer_cli.model import XAIguiFormer
from eegformer_cli.model.explanation import captum_layer_attributions, one_pass_deeplift
from test_model import connectome_batch, perturb, small_config  # tests/ is on sys.path under pytest

LABELS = torch.tensor([0, 2, 1])


def twin_models(preset: str, dtype=torch.float32, **fields):
    """(one_pass, captum) models with the same perturbed weights."""
    torch.manual_seed(11)
    one_pass = perturb(XAIguiFormer(small_config(preset, n_layers=3, **fields)), seed=3).to(dtype)
    captum = XAIguiFormer(dataclasses.replace(one_pass.config, explanation_impl="captum")).to(dtype)
    captum.load_state_dict(one_pass.state_dict())
    return one_pass, captum


def inputs(dtype=torch.float32):
    coh, wpli, age, sex = connectome_batch()
    return coh.to(dtype), wpli.to(dtype), age, sex


@pytest.mark.parametrize("preset, detach, guidance", [
    ("paper", False, "paper"), ("default", False, "band_share"), ("default", True, "band_share"),
    ("default", True, "rms_sample"), ("default", True, "rms_token"), ("default", True, "paper")])
def test_one_pass_equals_captum_layer_deeplift(preset, detach, guidance):
    """Every guidance design explains the same coarse pass, so the refined logits agree too."""
    one_pass, captum = twin_models(preset, detach_explanations=detach, guidance=guidance)
    ours = one_pass.forward_with_details(*inputs())
    theirs = captum.forward_with_details(*inputs())
    assert torch.equal(ours.target, theirs.target)
    torch.testing.assert_close(ours.logits_coarse, theirs.logits_coarse, rtol=0, atol=1e-6)
    assert max(float(e.detach().abs().max()) for e in theirs.explanations) > 1e-2   # not trivially small
    for mine, reference in zip(ours.explanations, theirs.explanations):
        assert float((mine - reference).detach().abs().max()) <= 1e-5
    assert float((ours.logits_refined - theirs.logits_refined).detach().abs().max()) <= 1e-5


def test_one_pass_equals_captum_without_the_model_wrapper():
    """Direct call of the two functions on the transformer, with a target that is not argmax."""
    one_pass, _ = twin_models("paper")
    coh, wpli, age, sex = inputs()
    tokens = one_pass.tokenizer(coh, wpli).detach().requires_grad_()
    demographics = one_pass.encode_demographics(age, sex)
    plain = one_pass.encoder.run(tokens, demographics, keep_layer_inputs=True)
    target = (plain.logits.argmax(1) + 1) % 3
    coarse, chosen, ours = one_pass_deeplift(one_pass.encoder, tokens, demographics, target)
    theirs = captum_layer_attributions(one_pass.encoder, tokens, demographics, target, "deeplift")
    np.testing.assert_allclose(torch.stack(ours).detach(), torch.stack(theirs).detach(), atol=1e-5)
    # the baseline row appended to the batch leaves the samples' own coarse pass as it was
    assert torch.equal(chosen, target)
    torch.testing.assert_close(coarse.logits, plain.logits, rtol=0, atol=1e-6)
    for mine, reference in zip(coarse.layer_inputs, plain.layer_inputs):
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-6)


def test_parameter_gradients_equal_captum_path():
    """Not detached (paper): the gradient flows through h_i - h_i^base in both implementations."""
    one_pass, captum = twin_models("paper", dtype=torch.float64)
    grads = []
    for model in (one_pass, captum):
        coarse, refined = model(*inputs(torch.float64))
        (F.cross_entropy(coarse, LABELS) + F.cross_entropy(refined, LABELS)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-7, atol=1e-10)


def test_detaching_explanations_keeps_logits_but_cuts_their_gradient():
    attached, _ = twin_models("default", dtype=torch.float64, detach_explanations=False)
    detached = XAIguiFormer(dataclasses.replace(attached.config, detach_explanations=True)).double()
    detached.load_state_dict(attached.state_dict())
    outputs, grads = [], []
    for model in (attached, detached):
        output = model.forward_with_details(*inputs(torch.float64))
        F.cross_entropy(output.logits_refined, LABELS).backward()
        outputs.append(output)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert outputs[0].explanations[1].requires_grad and not outputs[1].explanations[1].requires_grad
    torch.testing.assert_close(outputs[0].logits_refined, outputs[1].logits_refined)
    assert not torch.allclose(grads[0], grads[1], rtol=1e-9, atol=0)


def test_gradient_x_activation_is_layer_input_times_gradient():
    model, _ = twin_models("default", explainer="gradient_x_activation")
    output = model.forward_with_details(*inputs())
    # recompute by hand at layer 1: h_1 * d logit_target / d h_1
    coh, wpli, age, sex = inputs()
    tokens = model.tokenizer(coh, wpli)
    coarse = model.encoder.run(tokens, model.encode_demographics(age, sex), keep_layer_inputs=True)
    target_logit = coarse.logits.gather(1, output.target[:, None]).sum()
    (grad,) = torch.autograd.grad(target_logit, coarse.layer_inputs[1])
    np.testing.assert_allclose(output.explanations[1].detach(), (coarse.layer_inputs[1] * grad).detach(),
                               rtol=1e-5, atol=1e-6)


def test_integrated_gradients_complete_at_the_first_layer():
    """Without demographics in the model, IG at layer 0 sums to logit(x) - logit(zero tokens)."""
    model, _ = twin_models("default", explainer="integrated_gradients", frequency_encoding="none")
    output = model.forward_with_details(*inputs())
    assert not output.explanations[0].requires_grad            # detached, as the official wrapper
    demographics = torch.zeros(3, 2)
    baseline_logits = model.encoder(torch.zeros_like(output.tokens), demographics)
    expected = (output.logits_coarse - baseline_logits).gather(1, output.target[:, None])[:, 0]
    np.testing.assert_allclose(output.explanations[0].sum(dim=(1, 2)).detach(), expected.detach(),
                               rtol=1e-3, atol=1e-4)


def test_target_picks_the_explained_class():
    model, _ = twin_models("paper")
    default = model.forward_with_details(*inputs())
    assert torch.equal(default.target, default.logits_coarse.argmax(1))
    other = (default.target + 1) % 3
    chosen = model.forward_with_details(*inputs(), target=other)
    assert torch.equal(chosen.target, other)
    assert not torch.allclose(chosen.explanations[0], default.explanations[0])
