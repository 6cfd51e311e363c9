"""The precision policy (model/precision.py) checked without a GPU: trained ``default`` and
``paper`` models under CPU bfloat16 autocast (and CUDA's, where there is a GPU) against float32 (logits, probabilities, the
model's own explanations, one training step), the dtypes the policy keeps, the paper norm's
second derivative, the paper model's Integrated Gradients completeness, and ``--precision``.

CPU autocast leaves softmax and norms in the input's dtype where CUDA's computes them in
float32; the policy casts explicitly, so these CPU runs compute the sensitive operations in the
dtypes a CUDA run does.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from builders import exit_code

from eegformer_cli.errors import UsageError
from eegformer_cli.explain.segment_attributions import channel_pair_attributions
from eegformer_cli.inference.inputs import load_inputs
from eegformer_cli.model.deeplift import differentiable_explanations
from eegformer_cli.model.devices import resolve_precision
from eegformer_cli.model.layers import TimmRmsNorm
from eegformer_cli.model.precision import policy_off
from eegformer_cli.model.transformer import RotaryAttention
from eegformer_cli.training.model_file import load_model_file

#: Largest change bfloat16 autocast may make, against float32 (measured on the fixture models:
#: logits 0.005 / 0.003, probabilities 0.002 / 0.001, explanations 0.7 % / 2.7 %, loss 0.08 % /
#: 0.02 %, gradients 0.7 % / 0.6 %, default / paper).
TOLERANCE = {
    "logit": 0.02,
    "probability": 0.01,
    "explanation": 0.08,
    "loss": 0.005,
    "gradient": 0.03,
}
#: The largest attention logit |q.k| / sqrt(Dh) each fixture model must reach, so the test
#: covers the logits the policy is for (measured: default 1.7, paper 4800: raw ages 35-76 times
#: each of q and k).
LEAST_PEAK_LOGIT = {"default": 1.0, "paper": 1000.0}


def build_paper_run(tmp_path_factory, prep: Path) -> Path:
    """A small ``paper``-preset model (its dRoFE, norms and LayerScale; d 32, 2 layers) trained
    on the sample run's recordings (25 % holdout), once per session and worker."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.training.config import resolve_config

    run_dir = tmp_path_factory.getbasetemp() / "precision-paper-run"
    if not (run_dir / "model.pt").is_file():
        config = resolve_config(
            "paper",
            None,
            {
                "epochs": 15,
                "batch_size": 8,
                "lr": 1e-3,
                "holdout": 0.25,
                "val_fraction": 0.25,
                "device": "cpu",
                "model": {"d_model": 32, "n_heads": 2, "n_layers": 2, "n_gnn_layers": 1},
            },
        )
        run_training(prep, run_dir, "diagnosis", config)
    return run_dir


@pytest.fixture(scope="module")
def runs(sample_run, tmp_path_factory) -> dict:
    sample = sample_run
    return {
        "prep": sample["prep"],
        "default": sample["run"],
        "paper": build_paper_run(tmp_path_factory, sample["prep"]),
    }


#: Where the autocast tests run: the CPU always, CUDA when there is a GPU.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
        ],
    ),
]


def model_and_inputs(runs: dict, preset: str, device: str = "cpu"):
    """The preset's trained model (eval mode) and every sample recording's segments, on
    ``device``."""
    bundle = load_model_file(runs[preset] / "model.pt", device)
    items = [i for i in load_inputs(bundle, [runs["prep"]]) if i.error is None]
    counts = [len(i.coh) for i in items]
    inputs = (
        torch.from_numpy(np.concatenate([i.coh for i in items])),
        torch.from_numpy(np.concatenate([i.wpli for i in items])),
        torch.tensor(np.repeat([i.age for i in items], counts), dtype=torch.float32),
        torch.tensor(np.repeat([i.sex for i in items], counts), dtype=torch.float32),
    )
    return bundle.model.eval(), tuple(x.to(device) for x in inputs)


def bf16(enabled: bool = True, device: str = "cpu"):
    return torch.autocast(device, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def peak_attention_logit(model, inputs) -> float:
    """Largest |q.k| / sqrt(Dh) over every transformer layer (float32 forward)."""
    peak = [0.0]

    def hook(module, args, output):
        q, k = output
        logits = q.detach() @ k.detach().transpose(-1, -2) * q.shape[-1] ** -0.5
        peak[0] = max(peak[0], float(logits.abs().max()))

    handles = [
        layer.attn.rotary.register_forward_hook(hook) for layer in model.transformer.encoder.layers
    ]
    with torch.no_grad():
        model(*inputs)
    for handle in handles:
        handle.remove()
    return peak[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ["default", "paper"])
def test_bfloat16_inference_stays_close_to_float32(runs, preset, device):
    """Logits, probabilities and explanations of all 48 sample segments, bf16 vs float32."""
    model, inputs = model_and_inputs(runs, preset, device)
    assert peak_attention_logit(model, inputs) > LEAST_PEAK_LOGIT[preset]
    outputs = {}
    for half in (False, True):
        with torch.no_grad(), bf16(half, device):
            outputs[half] = model.forward_with_details(*inputs)
    full, half = outputs[False], outputs[True]
    logit_change = (half.logits_refined.float() - full.logits_refined).abs().max()
    probability_change = (
        (half.logits_refined.float().softmax(-1) - full.logits_refined.softmax(-1)).abs().max()
    )
    assert 0 < logit_change < TOLERANCE["logit"]  # > 0: bfloat16 did run
    assert probability_change < TOLERANCE["probability"]
    for e_half, e_full in zip(half.explanations, full.explanations):
        assert e_half.dtype == torch.float32
        assert (e_half - e_full).norm() / e_full.norm() < TOLERANCE["explanation"]


@contextlib.contextmanager
def dropout_off(model):
    """Train mode with every dropout probability 0 (``nn.Dropout`` and the attention's own).

    A seed gives the same masks in float32 and bfloat16 on the CPU, not on CUDA: its dropout
    kernels (``nn.Dropout``, the fused attention's) draw per dtype, so the two passes of
    ``default`` (dropout 0.1) dropped different units and their losses differed by 6.5 % on an
    H100. The step compares precisions, so it runs without dropout on every device."""
    saved = [(m, m.p) for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    saved_attention = [(m, m.dropout) for m in model.modules() if isinstance(m, RotaryAttention)]
    for m, _ in saved:
        m.p = 0.0
    for m, _ in saved_attention:
        m.dropout = 0.0
    try:
        yield
    finally:
        for m, p in saved:
            m.p = p
        for m, p in saved_attention:
            m.dropout = p


def training_step(model, inputs, labels, half: bool):
    """Loss and every parameter's gradient (flattened, float64) of one step, train mode
    without dropout."""
    model.train()
    model.zero_grad(set_to_none=True)
    with dropout_off(model), bf16(half, labels.device.type):
        coarse, refined = model(*inputs)
    loss = 0.3 * F.cross_entropy(coarse.float(), labels) + 0.7 * F.cross_entropy(
        refined.float(), labels
    )
    loss.backward()
    model.eval()
    return float(loss.detach()), torch.cat(
        [p.grad.double().flatten() for p in model.parameters() if p.grad is not None]
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ["default", "paper"])
def test_bfloat16_training_step_agrees_with_float32(runs, preset, device):
    model, inputs = model_and_inputs(runs, preset, device)
    batch = tuple(x[:16] for x in inputs)
    labels = torch.arange(16, device=device) % 2
    loss, grads = training_step(model, batch, labels, half=False)
    half_loss, half_grads = training_step(model, batch, labels, half=True)
    assert abs(half_loss - loss) / loss < TOLERANCE["loss"]
    assert 0 < (half_grads - grads).norm() / grads.norm() < TOLERANCE["gradient"]


def test_policy_keeps_attention_norms_and_explanations_in_float32(runs):
    """What CUDA autocast would keep in float32 (softmax, norms) is float32 under CPU autocast
    too, and only with the policy (policy_off: the bfloat16 of CPU autocast alone)."""
    from eegformer_cli.model.diagnostics import explicit_attention

    model, inputs = model_and_inputs(runs, "paper")
    inputs = tuple(x[:4] for x in inputs)
    dtypes = {}
    for name, context in (("policy", contextlib.nullcontext), ("off", policy_off)):
        with context(), torch.no_grad(), bf16(), explicit_attention(model):
            output = model.forward_with_details(*inputs)
            norm = model.transformer.encoder.layers[0].norm1.normalise(
                torch.randn(3, 32, dtype=torch.bfloat16)
            )
        dtypes[name] = (
            output.attention_coarse[0].weights.dtype,
            output.explanations[0].dtype,
            norm.dtype,
        )
    assert dtypes == {"policy": (torch.float32,) * 3, "off": (torch.bfloat16,) * 3}


def test_paper_norm_is_twice_differentiable_for_explanations():
    """Inside ``differentiable_explanations`` the timm norm's gradient has a graph of its own
    (float64 gradgradcheck); outside it keeps its fast first-order backward."""
    norm = TimmRmsNorm(6).double()
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    with differentiable_explanations(norm):
        assert norm.differentiable_explanations
        assert torch.autograd.gradgradcheck(norm.normalise, (x,))
    assert not norm.differentiable_explanations
    (grad,) = torch.autograd.grad(norm.normalise(x).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward()


def test_paper_integrated_gradients_add_up(runs):
    """The channel-pair attributions of the paper model sum to its refined logit's change
    from zero connectivity (median gap <= 1 %, 32 steps, 3 recordings)."""
    model, _ = model_and_inputs(runs, "paper")
    bundle = load_model_file(runs["paper"] / "model.pt")
    items = [i for i in load_inputs(bundle, [runs["prep"]]) if i.error is None][:3]
    upper = np.triu_indices(len(bundle.channels), 1)
    gaps = []
    for item in items:
        coh, wpli = torch.from_numpy(item.coh), torch.from_numpy(item.wpli)
        age, sex = torch.full((len(coh),), item.age), torch.full((len(coh),), item.sex)
        with torch.no_grad():
            output = model.forward_with_details(coh, wpli, age, sex)
            target = int(output.logits_refined.mean(dim=0).argmax())
            at_zero = model.forward_with_details(
                torch.zeros_like(coh), torch.zeros_like(wpli), age, sex, target=output.target
            ).logits_refined
        change = float((output.logits_refined - at_zero)[:, target].mean())
        coh_pairs, wpli_pairs, _ = channel_pair_attributions(
            model, coh, wpli, age, sex, target, n_steps=32
        )
        total = float((coh_pairs + wpli_pairs)[:, upper[0], upper[1]].sum())
        gaps.append(abs(total - change) / abs(change))
    assert np.median(gaps) <= 0.01


def test_precision_resolution_and_the_run_config(runs):
    assert resolve_precision("auto") == "float32"  # on every device and preset
    assert resolve_precision("bfloat16") == "bfloat16"
    with pytest.raises(UsageError, match="'float64' for --precision"):
        resolve_precision("float64")
    config = json.loads((runs["paper"] / "config.json").read_text(encoding="utf-8"))
    assert config["precision"] == "float32" and config["train_config"]["precision"] == "auto"


def test_precision_flag_is_checked(runs, capsys):
    assert (
        exit_code(
            "predict",
            runs["default"] / "model.pt",
            runs["prep"],
            "--device",
            "cpu",
            "--precision",
            "half",
        )
        == 2
    )
    assert "invalid value 'half' for --precision" in capsys.readouterr().err
    assert (
        exit_code(
            "predict",
            runs["default"] / "model.pt",
            runs["prep"],
            "--device",
            "cpu",
            "--precision",
            "bfloat16",
        )
        == 0
    )
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 1 + 12
