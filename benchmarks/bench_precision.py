"""What bfloat16 autocast changes in a trained model, with and without the precision policy.

For the first ``--recordings`` recordings of a ``preprocess`` folder and a model file, the
model runs in float32 and under CPU bfloat16 autocast (the policy of ``model/precision.py``
on, then off with ``precision.policy_off``), and the script prints one JSON object: the
largest attention logit |q.k| / sqrt(Dh) met (float32), and for each bfloat16 run the largest
change of a refined logit and of a probability, the share of segments whose predicted class
flips, the largest change of an attention weight and the share of attention rows (query, head,
layer, pass) where one moves by more than 0.1, the explanations' relative change (max over layers of ||dE|| / ||E||, the model's own
DeepLIFT), and for one training step on the first ``--batch`` segments (train mode, same
dropout masks) the relative change of the loss and of the gradient (L2 over every parameter).
CPU autocast keeps fewer operations in float32 than CUDA's, which is why the policy casts
explicitly; a CPU run thus checks what a GPU will compute.

Example::

    .venv/bin/python benchmarks/bench_precision.py run/model.pt prep --recordings 64
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

from eegformer_cli.model.diagnostics import explicit_attention
from eegformer_cli.model.precision import policy_off
from eegformer_cli.training.model_file import load_model_file


@contextlib.contextmanager
def attention_logit_peak(model, peak: list):
    """Record in ``peak[0]`` the largest |q.k| / sqrt(Dh) of every transformer layer."""

    def hook(module, inputs, output):
        q, k = output
        logits = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        peak[0] = max(peak[0], float(logits.detach().abs().max()))

    handles = [
        layer.attn.rotary.register_forward_hook(hook) for layer in model.transformer.encoder.layers
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def run(model, inputs, bf16: bool):
    """(refined logits float64 (S, K), explanations list of (S, T, d) float64, attention
    weights list of (S, H, T, T) float64, coarse then refined)."""
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with torch.no_grad(), context, explicit_attention(model):
        output = model.forward_with_details(*inputs)
    return (
        output.logits_refined.double(),
        [e.double() for e in output.explanations],
        [t.weights.double() for t in output.attention_coarse + output.attention_refined],
    )


def train_step(model, inputs, labels, bf16: bool):
    """Loss (float) and the gradient of every parameter, flattened (float64), of one step."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with context:
        coarse, refined = model(*inputs)
    loss = 0.3 * F.cross_entropy(coarse.float(), labels) + 0.7 * F.cross_entropy(
        refined.float(), labels
    )
    loss.backward()
    model.eval()
    grads = torch.cat([p.grad.double().flatten() for p in model.parameters() if p.grad is not None])
    return float(loss.detach()), grads


def compare(model, inputs, labels, batch: int) -> dict:
    """Every figure of the module docstring, for the policy on and off."""
    peak = [0.0]
    with attention_logit_peak(model, peak):
        logits, explanations, weights = run(model, inputs, bf16=False)
    step_inputs = tuple(x[:batch] for x in inputs)
    loss, grads = train_step(model, step_inputs, labels[:batch], bf16=False)
    out = {"max_attention_logit": peak[0], "segments": len(logits)}
    for name, context in (("policy", contextlib.nullcontext), ("no_policy", policy_off)):
        with context():
            half_logits, half_explanations, half_weights = run(model, inputs, bf16=True)
            half_loss, half_grads = train_step(model, step_inputs, labels[:batch], bf16=True)
        out[name] = {
            "max_logit_change": float((half_logits - logits).abs().max()),
            "max_probability_change": float(
                (half_logits.softmax(-1) - logits.softmax(-1)).abs().max()
            ),
            "flipped_share": float((half_logits.argmax(-1) != logits.argmax(-1)).double().mean()),
            "max_attention_weight_change": max(
                float((h - w).abs().max()) for h, w in zip(half_weights, weights)
            ),
            "attention_rows_changed_share": float(
                torch.cat(
                    [
                        ((h - w).abs().amax(-1) > 0.1).flatten()
                        for h, w in zip(half_weights, weights)
                    ]
                )
                .double()
                .mean()
            ),
            "explanation_relative_change": max(
                float((h - e).norm() / e.norm()) for h, e in zip(half_explanations, explanations)
            ),
            "loss_relative_change": abs(half_loss - loss) / abs(loss),
            "gradient_relative_change": float((half_grads - grads).norm() / grads.norm()),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="model.pt of `eegformer train`")
    parser.add_argument("data", type=Path, help="a `preprocess` output folder")
    parser.add_argument("--recordings", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="segments of the training step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bundle = load_model_file(args.model)
    model = bundle.model.eval()
    manifest = {}
    for line in (args.data / "manifest.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split("\t")
        manifest[fields[0]] = fields
    header = (args.data / "manifest.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")
    coh, wpli, age, sex = [], [], [], []
    files = sorted((args.data / "connectomes").glob("*.npz"))[: args.recordings]
    for path in files:
        row = dict(zip(header, manifest[path.stem]))
        with np.load(path) as data:
            coh.append(data["coh"])
            wpli.append(data["wpli"])
        n = len(coh[-1])
        age += [float(row["age"]) if row["age"] != "n/a" else np.nan] * n
        sex += [{"M": 0.0, "F": 1.0}.get(row["sex"], np.nan)] * n
    inputs = (
        torch.from_numpy(np.concatenate(coh)),
        torch.from_numpy(np.concatenate(wpli)),
        torch.tensor(age, dtype=torch.float32),
        torch.tensor(sex, dtype=torch.float32),
    )
    labels = torch.arange(len(inputs[0])) % len(bundle.label_names)
    result = {
        "machine": machine(),
        "model": str(args.model),
        "data": str(args.data),
        "recordings": len(files),
        **compare(model, inputs, labels, args.batch),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
