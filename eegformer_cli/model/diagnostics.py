"""What attention does in an XAIguiFormer, measured: the numbers ``train``, ``explain`` and the
report show about the model's own mechanism.

Per pass (``coarse``, and ``refined`` when the model has XAI refinement) and per layer:

``entropy``
    Entropy of each query band's attention row, ``-sum_k a_qk ln a_qk``, averaged over heads
    and query bands, in nats. Uniform attention over T bands gives ln T (2.0794 for 8 bands);
    one-hot attention gives 0.
``entropy_fraction``
    ``entropy / ln T``: 1 = uniform.
``residual_share``
    ``||gamma1 * attn(x)|| / ||x||`` over the (T, d) tokens: how large the attention update is
    against the residual stream it is added to (post-norm layer, before the norm).
``guidance_ratio`` (refined pass only)
    How large the explanation's part of the refined attention is against the part that does
    not depend on it (``transformer.AttentionTrace``): for ``paper`` guidance
    ``||W_qk E|| / ||b_qk||``, the explanation's part of the queries and keys against the qkv
    bias; for ``band_share`` the explanation's logit bias against the content logits q.k (both
    centred per query). Near 0: the refined pass ignores the explanation.
``logit_change_uniform``, ``logit_change_identity``
    That pass's logits when this layer's attention weights in this pass are replaced by the
    mean over bands (uniform) or by the identity (each band keeps its own value), everything
    else as computed: the largest absolute change of the centred logits (logits minus their
    mean over classes, which the softmax ignores), in logit units. Near 0: the attention could
    be removed without changing the output.
``flips_uniform``, ``flips_identity``
    The fraction of segments whose predicted class (that pass's argmax) changes under the same
    replacement.

:func:`segment_diagnostics` computes them per segment; :func:`recording_diagnostics` per
recording (means over its segments, as ``explain`` writes them); :func:`mean_diagnostics`
averages such summaries (out-of-fold: over the test recordings, then over folds), and
:func:`describe` says the result in one line.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from eegformer_cli.errors import check_choice
from eegformer_cli.model.devices import one_cpu_thread
from eegformer_cli.model.precision import float32_forward
from eegformer_cli.model.predict import (
    batch_tensors,
    segment_batches,
    static_offsets,
    token_products,
)
from eegformer_cli.model.transformer import PASSES, RotaryAttention

#: What :func:`replaced_attention` puts in place of a layer's softmax weights.
ATTENTION_REPLACEMENTS = ("uniform", "identity")

#: Quantities measured from one forward (cheap enough for every training epoch).
TRACE_QUANTITIES = ("entropy", "entropy_fraction", "residual_share", "guidance_ratio")
#: Quantities that need one forward per pass, layer and replacement.
ABLATION_QUANTITIES = tuple(
    f"{name}_{kind}" for kind in ATTENTION_REPLACEMENTS for name in ("logit_change", "flips")
)


def _attention_modules(model: torch.nn.Module) -> list[RotaryAttention]:
    """The transformer's attention modules, layer 0 first."""
    return [m for m in model.modules() if isinstance(m, RotaryAttention)]


@contextlib.contextmanager
def explicit_attention(model: torch.nn.Module):
    """Make every attention module return its weights and trace (``fused_attn`` off; the same
    numbers as the fused kernel, see model/transformer.py), restored afterwards."""
    modules = _attention_modules(model)
    previous = [m.fused_attn for m in modules]
    for module in modules:
        module.fused_attn = False
    try:
        yield
    finally:
        for module, fused in zip(modules, previous):
            module.fused_attn = fused


@contextlib.contextmanager
def replaced_attention(model: torch.nn.Module, pass_name: str, layer: int, kind: str):
    """Within the block, layer ``layer``'s attention weights in pass ``pass_name`` are
    ``kind`` ("uniform": every query takes the mean of the values; "identity": every token
    keeps its own value) instead of the softmax: a forward hook on that layer's attention
    module replaces its output (no trace), removed afterwards. For a model in eval mode."""
    check_choice("pass", pass_name, PASSES)
    check_choice("attention replacement", kind, ATTENTION_REPLACEMENTS)

    def hook(module: RotaryAttention, args: tuple, kwargs: dict, output):
        explanation = args[2] if len(args) > 2 else kwargs.get("explanation")
        if (explanation is None) != (pass_name == "coarse"):
            return None
        return _replaced_output(module, args[0], explanation, kind), None

    handle = _attention_modules(model)[layer].register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


@float32_forward
def _replaced_output(
    module: RotaryAttention, x: Tensor, explanation: Tensor | None, kind: str
) -> Tensor:
    """The attention output (B, T, d) of ``module`` with uniform or identity weights (B, H,
    T, T) applied to its values, in the module's precision."""
    v = module.project(x, explanation)[2]  # (B, H, T, Dh)
    n = v.shape[-2]
    shape = v.shape[:-1] + (n,)
    if kind == "uniform":
        weights = torch.full(shape, 1.0 / n, dtype=v.dtype, device=v.device)
    else:
        weights = torch.eye(n, dtype=v.dtype, device=v.device).expand(shape)
    return module.proj((weights @ v).transpose(1, 2).flatten(-2))


def attention_entropy(weights: Tensor) -> Tensor:
    """Mean row entropy in nats: weights (B, H, T, T), rows summing to 1 -> (B,) float32+."""
    weights = weights.float() if weights.dtype in (torch.float16, torch.bfloat16) else weights
    return torch.special.entr(weights).sum(dim=-1).mean(dim=(1, 2))


def _centred(logits: Tensor) -> Tensor:
    logits = logits.float()
    return logits - logits.mean(dim=-1, keepdim=True)


def segment_diagnostics(
    model,
    coh: Tensor,
    wpli: Tensor,
    age: Tensor,
    sex: Tensor,
    ablations: bool = True,
    offset: Tensor | None = None,
    products: Tensor | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Every quantity of the module docs for a batch of S segments.

    Inputs as ``model.forward_with_details`` (coh, wpli (S, T, C, C) on the model's device;
    age, sex (S,)); the model in eval mode. Returns ``{pass: {quantity: float64 (L, S)}}``
    with the passes the model has (``refined`` only with XAI refinement; ``guidance_ratio``
    only there) and the ablation quantities only with ``ablations``; empty for a model
    without transformer layers. ``offset`` (S, n_classes): the forward's (each segment's
    recording's linear logits, for a linear path on recording means); ``products`` (S, K) the
    forward's too (each segment's from its whole recording, ``model/predict.token_products``).
    """
    if model.config.n_layers == 0:
        return {}
    with torch.no_grad(), explicit_attention(model):
        output = model.forward_with_details(coh, wpli, age, sex, offset=offset, products=products)
    traces = {"coarse": output.attention_coarse}
    logits = {"coarse": output.logits_coarse}
    if model.config.xai_refinement:
        traces["refined"], logits["refined"] = output.attention_refined, output.logits_refined
    n_bands = output.attention_coarse[0].weights.shape[-1]
    result = {}
    for name, layers in traces.items():
        values = {
            "entropy": torch.stack([attention_entropy(t.weights) for t in layers]),
            "residual_share": torch.stack([t.residual_share for t in layers]),
        }
        values["entropy_fraction"] = values["entropy"] / math.log(n_bands)
        if name == "refined":
            values["guidance_ratio"] = torch.stack([t.guidance_ratio for t in layers])
        if ablations:
            inputs = (coh, wpli, age, sex, offset, products)
            values.update(_ablations(model, inputs, name, logits[name], len(layers)))
        result[name] = {key: value.double().cpu().numpy() for key, value in values.items()}
    return result


def _ablations(
    model, inputs: tuple, pass_name: str, logits: Tensor, n_layers: int
) -> dict[str, Tensor]:
    """logit_change_* and flips_* (L, S) of pass ``pass_name`` (module docs)."""
    which = PASSES.index(pass_name)
    out = {}
    for kind in ATTENTION_REPLACEMENTS:
        changes, flips = [], []
        for layer in range(n_layers):
            with torch.no_grad(), replaced_attention(model, pass_name, layer, kind):
                replaced = model(*inputs)[which]
            changes.append((_centred(replaced) - _centred(logits)).abs().amax(dim=-1))
            flips.append((replaced.argmax(dim=-1) != logits.argmax(dim=-1)).float())
        out[f"logit_change_{kind}"], out[f"flips_{kind}"] = torch.stack(changes), torch.stack(flips)
    return out


def recording_diagnostics(
    model, recordings: Iterable[tuple], device: torch.device, ablations: bool = True
) -> list[dict | None]:
    """Per recording, the mean over its segments of every quantity, per pass and layer.

    ``recordings``: tuples ``(coh, wpli, age, sex[, covariance])`` as for
    :func:`~eegformer_cli.model.predict.recording_logits` (float32 numpy (S, T, C, C), scalar
    age/sex), read one at a time (a generator may load them lazily). Segments of several
    recordings share forwards of up to
    :data:`~eegformer_cli.model.predict.SEGMENTS_PER_BATCH` segments
    (:func:`~eegformer_cli.model.predict.segment_batches`); only the per-segment quantities
    (float64, a few per layer and segment) are kept, not the connectivity. Returns one summary
    per recording:
    ``{"n_bands": T, "uniform_entropy": ln T, "passes": {pass: {quantity: [per layer]}}}``
    (T: the tokens the attention spreads over, the bands and the interaction token of a model
    that has one)
    (None for a model without transformer layers: it has no attention).
    """
    if model.config.n_layers == 0:
        return [None for _ in recordings]
    model.eval()
    counts: list[int] = []
    parts = []
    threads = one_cpu_thread() if device.type == "cpu" else contextlib.nullcontext()
    with threads:
        batches = segment_batches(
            recordings, counts, offsets=static_offsets(model), products=token_products(model)
        )
        for batch in batches:
            coh, wpli, age, sex, offset, products = batch_tensors(batch, device)
            parts.append(
                segment_diagnostics(model, coh, wpli, age, sex, ablations, offset, products)
            )
    per_segment = {
        name: {key: np.concatenate([p[name][key] for p in parts], axis=1) for key in parts[0][name]}
        for name in parts[0]
    }
    n_bands = len(model.config.token_names())
    return [
        {
            "n_bands": n_bands,
            "uniform_entropy": math.log(n_bands),
            "passes": {
                name: {
                    key: value[:, lo:hi].mean(axis=1).tolist() for key, value in quantities.items()
                }
                for name, quantities in per_segment.items()
            },
        }
        for lo, hi in itertools.pairwise(np.cumsum([0] + counts))
    ]


def mean_diagnostics(summaries: Sequence[dict | None]) -> dict | None:
    """The mean of several summaries of the same model shape (per pass, quantity and layer);
    None for none. Quantities missing from some summaries are averaged over the others."""
    measured = [s for s in summaries if s]
    if not measured:
        return None
    out = {
        "n_bands": measured[0]["n_bands"],
        "uniform_entropy": measured[0]["uniform_entropy"],
        "n": len(measured),
        "passes": {},
    }
    for name in PASSES:
        present = [s["passes"][name] for s in measured if name in s["passes"]]
        if present:
            keys = dict.fromkeys(key for p in present for key in p)
            out["passes"][name] = {
                key: np.mean([p[key] for p in present if key in p], axis=0).tolist() for key in keys
            }
    return out


def layer_mean(summary: dict, pass_name: str, quantity: str) -> float | None:
    """The mean over layers of one quantity of a summary (None when it was not measured)."""
    values = summary.get("passes", {}).get(pass_name, {}).get(quantity)
    return None if values is None else float(np.mean(values))


def describe(summary: dict | None, where: str) -> str:
    """One line: entropies (nats and fraction of ln T), the guidance ratio, the residual
    shares and the effect of uniform attention, per pass, means over layers."""
    if not summary:
        return f"attention ({where}): not measured"
    passes = [name for name in PASSES if name in summary["passes"]]

    def both(quantity: str, fmt: str) -> str:
        values = [layer_mean(summary, name, quantity) for name in passes]
        return " / ".join("n/a" if v is None else format(v, fmt) for v in values)

    label = " / ".join(passes)
    text = (
        f"attention ({where}, {label}, mean over layers): entropy {both('entropy', '.3f')} "
        f"nats of ln {summary['n_bands']} = {summary['uniform_entropy']:.3f} "
        f"({both('entropy_fraction', '.1%')}); residual share "
        f"{both('residual_share', '.3f')}"
    )
    if "refined" in passes:
        text += (
            f"; explanation's part of the refined attention against the rest "
            f"{layer_mean(summary, 'refined', 'guidance_ratio'):.3g}"
        )
    if layer_mean(summary, "coarse", "logit_change_uniform") is not None:
        text += (
            f"; uniform attention moves the logits by {both('logit_change_uniform', '.3f')}"
            f" (flips {both('flips_uniform', '.1%')} of segments)"
        )
    return text
