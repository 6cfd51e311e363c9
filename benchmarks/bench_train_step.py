"""Training-step time: one-pass explanation vs per-layer captum ``LayerDeepLift`` (paper size).

A full step = tokenizer + coarse pass + explanation of every layer + refined pass + loss
(0.3 CE coarse + 0.7 CE refined) + backward + AdamW step, for the model's one-pass DeepLIFT and
for the official code's path (:class:`CaptumDeepLift`, here) on the same weights and inputs. Prints one JSON object on stdout: the median
step times (wall clock and process CPU time; the steps of the two are interleaved), their
ratios, the 1-minute load average, the max abs differences of the explanations and refined
logits, and the max relative difference of the parameter gradients between the two
implementations (float32: the paper's raw-age attention amplifies rounding; in float64 the
gradients agree to 1e-13, see tests/test_explanation.py).

With ``--default-step`` it times instead a preset's training step as ``train`` runs it
(``--preset``, default ``default``; msu-like inputs: 16 channels, 8 bands, the preset's batch
(16, paper 64), one CPU thread, inputs z-scored where the preset does), one-pass explanation
only; ``--model-json`` overrides model fields (e.g. the guidance before and after a change, or
``{"xai_refinement": false}`` for the coarse-only step).

Example::

    .venv/bin/python benchmarks/bench_train_step.py --steps 5 --threads 1
    .venv/bin/python benchmarks/bench_train_step.py --device cuda --batch 64
    .venv/bin/python benchmarks/bench_train_step.py --default-step --steps 50
    .venv/bin/python benchmarks/bench_train_step.py --default-step --model-json '{"guidance": "paper"}'
    .venv/bin/python benchmarks/bench_train_step.py --default-step --preset paper --steps 20
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from machine import cpu_model  # benchmarks/machine.py (scripts run from this folder)

from eegformer_cli.model import ModelConfig, XAIguiFormer

BANDS = [
    "delta",
    "theta",
    "low_alpha",
    "high_alpha",
    "low_beta",
    "mid_beta",
    "high_beta",
    "gamma",
    "theta_beta_ratio",
]
BAND_EDGES_HZ = [
    (2, 4),
    (4, 8),
    (8, 10),
    (10, 12),
    (12, 18),
    (18, 21),
    (21, 30),
    (30, 45),
    (4 / 12, 8 / 30),
]
#: Weight of the refined loss (official alpha).
ALPHA = 0.7


def make_inputs(batch: int, n_channels: int, device: str, seed: int = 0):
    """Connectome-like inputs: symmetric coh/wPLI in [0, 1) with zero diagonal, ages 20-80 y."""
    generator = torch.Generator().manual_seed(seed)
    off_diagonal = 1 - torch.eye(n_channels)

    def connectome():
        values = torch.rand(batch, len(BANDS), n_channels, n_channels, generator=generator)
        return ((values + values.transpose(-1, -2)) / 2 * off_diagonal).to(device)

    age = (20 + 60 * torch.rand(batch, generator=generator)).to(device)
    sex = torch.randint(0, 2, (batch,), generator=generator).float().to(device)
    labels = torch.randint(0, 2, (batch,), generator=generator).to(device)
    return connectome(), connectome(), age, sex, labels


def perturbed_paper_model(n_channels: int, device: str, seed: int = 0) -> XAIguiFormer:
    """Paper-size model with every weight perturbed (seeded), so explanations are not ~1e-4."""
    torch.manual_seed(seed)
    config = ModelConfig.preset(
        "paper", n_channels=n_channels, band_names=BANDS, band_edges_hz=BAND_EDGES_HZ, n_classes=2
    )
    model = XAIguiFormer(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.to(device)


class CaptumDeepLift(torch.nn.Module):
    """``model`` with its explanations from captum's ``LayerDeepLift`` (zero baselines), one
    call per layer: the official code's path, the same numbers as the model's one-pass
    DeepLIFT. ``forward`` -> (coarse, refined) logits as the model's; ``forward_with_details``
    -> logits_coarse, logits_refined and the L explanations (B, T, d)."""

    def __init__(self, model: XAIguiFormer):
        super().__init__()
        self.model = model

    def forward_with_details(self, coh, wpli, age, sex) -> SimpleNamespace:
        from captum.attr import LayerDeepLift

        model = self.model
        tokens = model.transformer.tokenizer(coh, wpli)
        demographics = model.transformer.encode_demographics(age, sex)
        coarse = model.transformer.encoder(tokens, demographics)
        target = coarse.detach().argmax(dim=1)
        explanations = []
        for layer in model.transformer.encoder.layers:
            attribution = LayerDeepLift(
                model.transformer.encoder, layer, multiply_by_inputs=True
            ).attribute(
                (tokens, demographics),
                (torch.zeros_like(tokens), torch.zeros_like(demographics)),
                target=target,
                attribute_to_layer_input=True,
                grad_kwargs={"materialize_grads": True},
            )  # demographics may get no gradient
            attribution = attribution[0] if isinstance(attribution, (tuple, list)) else attribution
            explanations.append(
                attribution.detach() if model.config.detach_explanations else attribution
            )
        refined = model.transformer.encoder.run(tokens, demographics, explanations).logits
        return SimpleNamespace(
            logits_coarse=coarse, logits_refined=refined, explanations=explanations
        )

    def forward(self, coh, wpli, age, sex):
        output = self.forward_with_details(coh, wpli, age, sex)
        return output.logits_coarse, output.logits_refined


def loss_of(model: XAIguiFormer, inputs) -> torch.Tensor:
    coh, wpli, age, sex, labels = inputs
    logits_coarse, logits_refined = model(coh, wpli, age, sex)
    return (1 - ALPHA) * F.cross_entropy(logits_coarse, labels) + ALPHA * F.cross_entropy(
        logits_refined, labels
    )


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_step_seconds(
    models: dict[str, XAIguiFormer], inputs, steps: int, warmup: int, device: str
) -> dict[str, dict[str, float]]:
    """Median wall-clock and process-CPU seconds of a full training step per model.

    The models' steps are interleaved so that changing load on a shared machine affects both
    alike; CPU time (all threads of this process) is less sensitive to other processes than
    wall time, but not immune (they still share caches and memory bandwidth).
    """
    optimizers = {
        name: torch.optim.AdamW(
            model.parameters(), lr=1e-4, betas=(0.9, 0.99), fused=True
        )  # as the trainer
        for name, model in models.items()
    }
    wall = {name: [] for name in models}
    cpu = {name: [] for name in models}
    for step in range(warmup + steps):
        for name, model in models.items():
            synchronize(device)
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            optimizers[name].zero_grad(set_to_none=True)
            loss_of(model, inputs).backward()
            optimizers[name].step()
            synchronize(device)
            if step >= warmup:
                wall[name].append(time.perf_counter() - start_wall)
                cpu[name].append(time.process_time() - start_cpu)
    return {
        name: {"wall": statistics.median(wall[name]), "cpu": statistics.median(cpu[name])}
        for name in models
    }


def differences(one_pass: XAIguiFormer, captum: XAIguiFormer, inputs) -> dict:
    """Max abs differences between the two implementations (same weights, same inputs)."""
    coh, wpli, age, sex, _ = inputs
    out_a = one_pass.forward_with_details(coh, wpli, age, sex)
    out_b = captum.forward_with_details(coh, wpli, age, sex)
    explanation_diff = max(
        (a - b).abs().max().item() for a, b in zip(out_a.explanations, out_b.explanations)
    )
    explanation_scale = max(b.abs().max().item() for b in out_b.explanations)
    for model in (one_pass, captum):
        model.zero_grad(set_to_none=True)
        loss_of(model, inputs).backward()
    grad_diff = max(
        ((pa.grad - pb.grad).abs().max() / pb.grad.abs().max().clamp_min(1e-30)).item()
        for pa, pb in zip(one_pass.parameters(), captum.parameters())
        if pb.grad is not None
    )
    return {
        "max_abs_diff_explanations": explanation_diff,
        "max_abs_explanation": explanation_scale,
        "max_abs_diff_refined_logits": (out_a.logits_refined - out_b.logits_refined)
        .abs()
        .max()
        .item(),
        "max_rel_diff_parameter_grads": grad_diff,
    }


def default_step(args) -> dict:
    """Median step seconds of the ``--preset`` preset's model (module docs)."""
    from eegformer_cli.training.config import TrainConfig

    bands, edges = BANDS[:8], BAND_EDGES_HZ[:8]
    fields = json.loads(args.model_json) if args.model_json else {}
    torch.manual_seed(0)
    config = ModelConfig.preset(
        args.preset,
        n_channels=args.channels,
        band_names=bands,
        band_edges_hz=edges,
        n_classes=2,
        input_standardisation=TrainConfig.preset_config(args.preset).input_standardisation,
        **fields,
    )
    model = XAIguiFormer(config).to(args.device).train()
    generator = torch.Generator().manual_seed(0)
    coh, wpli = (
        torch.rand(args.batch, 8, args.channels, args.channels, generator=generator)
        for _ in range(2)
    )
    coh, wpli = ((m + m.transpose(-1, -2)) / 2 for m in (coh, wpli))
    age, sex = 20 + 60 * torch.rand(args.batch, generator=generator), torch.zeros(args.batch)
    labels = torch.randint(0, 2, (args.batch,), generator=generator)
    inputs = tuple(t.to(args.device) for t in (coh, wpli, age, sex, labels))
    seconds = median_step_seconds({"step": model}, inputs, args.steps, args.warmup, args.device)[
        "step"
    ]
    return {
        "model": config.to_dict(),
        "step_seconds": seconds["wall"],
        "step_cpu_seconds": seconds["cpu"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--batch", type=int, help="default: 64 (--default-step: the preset's)")
    parser.add_argument("--channels", type=int, default=19)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per implementation")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    parser.add_argument(
        "--default-step",
        action="store_true",
        help="time the default preset's step instead (module docs)",
    )
    parser.add_argument("--model-json", help="with --default-step: model fields as JSON")
    parser.add_argument("--preset", default="default", help="with --default-step: default or paper")
    args = parser.parse_args()
    if args.default_step:
        if args.batch is None:
            from eegformer_cli.training.config import TrainConfig

            args.batch = TrainConfig.preset_config(args.preset).batch_size
        if args.channels == 19:
            args.channels = 16  # msu-schizophrenia
        torch.set_num_threads(1)  # as train does
        print(
            json.dumps(
                {
                    "device": args.device,
                    "preset": args.preset,
                    "threads": 1,
                    "torch": torch.__version__,
                    "cpu": cpu_model(),
                    "batch": args.batch,
                    "channels": args.channels,
                    "steps": args.steps,
                    "load_average_1min": os.getloadavg()[0],
                    **default_step(args),
                },
                indent=2,
            )
        )
        return
    torch.set_num_threads(args.threads)
    args.batch = args.batch or 64
    inputs = make_inputs(args.batch, args.channels, args.device)
    model = perturbed_paper_model(args.channels, args.device)
    one_pass, captum = model, CaptumDeepLift(copy.deepcopy(model))
    figures = differences(one_pass, captum, inputs)
    seconds = median_step_seconds(
        {"one_pass": one_pass, "captum": captum}, inputs, args.steps, args.warmup, args.device
    )
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else cpu_model()
    print(
        json.dumps(
            {
                "device": args.device,
                "device_name": device_name,
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "batch": args.batch,
                "channels": args.channels,
                "bands": len(BANDS),
                "layers": model.config.n_layers,
                "d_model": model.config.d_model,
                "heads": model.config.n_heads,
                "steps": args.steps,
                "warmup": args.warmup,
                "step_seconds_one_pass": seconds["one_pass"]["wall"],
                "step_seconds_captum": seconds["captum"]["wall"],
                "speedup": seconds["captum"]["wall"] / seconds["one_pass"]["wall"],
                "step_cpu_seconds_one_pass": seconds["one_pass"]["cpu"],
                "step_cpu_seconds_captum": seconds["captum"]["cpu"],
                "speedup_cpu_time": seconds["captum"]["cpu"] / seconds["one_pass"]["cpu"],
                "load_average_1min": os.getloadavg()[0],
                **figures,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
