"""How well ``explain``'s channel-pair attributions add up: Integrated Gradients completeness.

For each recording of a ``preprocess`` folder (the first ``--recordings``), with a trained model
file: the sum of the channel-pair attributions over unordered pairs (coh + wPLI) against the
change of the explained class's refined logit from the reference connectome ``explain``
attributes against (the model file's training mean connectome; ``--zero``: zero
connectivity) to the recording (mean over segments; the refined pass guided, as in the
attributions, by the explanation of the class the coarse pass predicts at the recording). Reports, per number of steps, the median and the
largest relative gap ``|sum - change| / |change|`` (``DEFAULT_N_STEPS`` of
``explain/attributions.py`` was chosen from these) and the seconds per recording.

Example::

    .venv/bin/python benchmarks/bench_completeness.py run-msu/model.pt prep-msu --steps 32,64,128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

from eegformer_cli.explain.segment_attributions import channel_pair_attributions
from eegformer_cli.model.static_paths import recording_offset
from eegformer_cli.training.model_file import load_model_file


def relative_gap(
    model,
    coh: torch.Tensor,
    wpli: torch.Tensor,
    n_steps: int,
    reference: tuple[torch.Tensor, torch.Tensor] | None,
) -> float:
    """|sum of pair (and interaction) attributions - refined logit change| / |change| for one
    recording, against
    ``reference`` (coh, wPLI) (T, C, C) or zero connectivity (None)."""
    nan = torch.full((len(coh),), float("nan"))
    base = (
        (torch.zeros_like(coh), torch.zeros_like(wpli))
        if reference is None
        else (reference[0].expand_as(coh), reference[1].expand_as(wpli))
    )
    # a linear path on recording means: each side's recording offset (None: per segment)
    offset = recording_offset(model, (coh, wpli, nan, nan))
    base_offset = recording_offset(model, (base[0][:1], base[1][:1], nan, nan))

    def rows(value):
        return None if value is None else value.expand(len(coh), -1)

    with torch.no_grad():
        output = model.forward_with_details(coh, wpli, nan, nan, offset=rows(offset))
        target = int(output.logits_refined.mean(dim=0).argmax())
        at_base = model.forward_with_details(
            *base, nan, nan, target=output.target, offset=rows(base_offset)
        ).logits_refined
    change = float((output.logits_refined - at_base)[:, target].mean())
    coh_pairs, wpli_pairs, interactions = channel_pair_attributions(
        model, coh, wpli, nan, nan, target, n_steps=n_steps, reference=reference, offset=offset
    )
    upper = np.triu_indices(coh.shape[-1], 1)
    total = float((coh_pairs + wpli_pairs)[:, upper[0], upper[1]].sum())
    total += 0.0 if interactions is None else float(interactions.sum())
    return abs(total - change) / abs(change)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="model.pt of `eegformer train`")
    parser.add_argument("data", type=Path, help="a `preprocess` output folder")
    parser.add_argument("--recordings", type=int, default=20)
    parser.add_argument("--steps", default="32,64,128")
    parser.add_argument(
        "--zero",
        action="store_true",
        help="against zero connectivity (explain's baseline before it had a reference connectome)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    bundle = load_model_file(args.model)
    model = bundle.model.eval()
    reference = (
        None
        if args.zero
        else tuple(torch.from_numpy(bundle.baseline[key]) for key in ("coh", "wpli"))
    )
    files = sorted((args.data / "connectomes").glob("*.npz"))[: args.recordings]
    results = {
        "machine": machine(),
        "model": str(args.model),
        "data": str(args.data),
        "recordings": len(files),
        "reference": "zero connectivity" if args.zero else bundle.baseline["description"],
        "load_average_start": os.getloadavg(),
        "steps": {},
    }
    for n_steps in (int(s) for s in args.steps.split(",")):
        gaps, seconds = [], []
        for path in files:
            with np.load(path) as data:
                coh, wpli = torch.from_numpy(data["coh"]), torch.from_numpy(data["wpli"])
            start = time.perf_counter()
            gaps.append(relative_gap(model, coh, wpli, n_steps, reference))
            seconds.append(time.perf_counter() - start)
        results["steps"][n_steps] = {
            "median_gap": statistics.median(gaps),
            "max_gap": max(gaps),
            "median_seconds": statistics.median(seconds),
        }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
