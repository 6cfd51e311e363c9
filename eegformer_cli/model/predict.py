"""A model's prediction for whole recordings: the refined logits of all a recording's
segments, averaged (the reference's per-recording logit average).

:func:`recording_logits` is the one function that does this, for the training run's own
evaluation and for ``predict`` alike, which is why ``predict`` reproduces a run's out-of-fold
probabilities; the probabilities are their row softmax (``scipy.special.softmax(logits,
axis=1)``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch

from eegformer_cli.devices import autocast, one_cpu_thread

#: Segments per forward when averaging logits (bounds memory; results do not depend on it
#: beyond float rounding).
SEGMENTS_PER_BATCH = 256


def recording_logits(
    model, recordings: Sequence[tuple], device: torch.device, precision: str = "float32"
) -> np.ndarray:
    """Mean refined logits per recording: float64 (n_recordings, n_classes), the model run in
    ``precision`` (resolved: ``devices.resolve_precision``).

    ``recordings``: tuples ``(coh, wpli, age, sex)`` with coh/wpli float32 numpy
    (n_segments, n_bands, C, C) and scalar age/sex. Segments of several recordings share
    forwards of up to :data:`SEGMENTS_PER_BATCH` segments; the model runs in eval mode.
    """
    model.eval()
    counts = [len(r[0]) for r in recordings]
    coh = np.concatenate([r[0] for r in recordings])
    wpli = np.concatenate([r[1] for r in recordings])
    age = np.repeat([float(r[2]) for r in recordings], counts).astype(np.float32)
    sex = np.repeat([float(r[3]) for r in recordings], counts).astype(np.float32)
    chunks = []
    with torch.no_grad(), one_cpu_thread():
        for start in range(0, len(coh), SEGMENTS_PER_BATCH):
            part = slice(start, start + SEGMENTS_PER_BATCH)
            with autocast(device, precision):
                _, refined = model(
                    torch.from_numpy(coh[part]).to(device),
                    torch.from_numpy(wpli[part]).to(device),
                    torch.from_numpy(age[part]).to(device),
                    torch.from_numpy(sex[part]).to(device),
                )
            chunks.append(refined.float().cpu().numpy().astype(np.float64))
    logits = np.concatenate(chunks)
    bounds = np.cumsum([0] + counts)
    return np.stack([logits[a:b].mean(axis=0) for a, b in itertools.pairwise(bounds)])
