"""A model's prediction for whole recordings: the refined logits of all a recording's
segments, averaged (as the paper's code averages a recording's logits). A model whose linear path
reads recording means (``model/linear_path.py``) gets each recording's static logits (the linear
path's, mixed with a tangent-space path's where it has one: ``model/static_paths.py``) as the
``offset`` of every one of its segments, whichever batch they fall in.

:func:`recording_logits` is the one function that does this, for the training run's own
evaluation and for ``predict`` alike, which is why ``predict`` reproduces a run's out-of-fold
probabilities; the probabilities are their row softmax (``scipy.special.softmax(logits,
axis=1)``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from eegformer_cli.model.devices import autocast, one_cpu_thread
from eegformer_cli.model.linear_path import uses_recording_means
from eegformer_cli.model.static_paths import recording_static_logits

#: Segments per forward when averaging logits (bounds memory; results do not depend on it
#: beyond float rounding).
SEGMENTS_PER_BATCH = 256


def segment_batches(
    recordings: Iterable[tuple],
    counts: list[int],
    size: int = SEGMENTS_PER_BATCH,
    offsets: Callable[[tuple], np.ndarray] | None = None,
    products: Callable[[tuple], np.ndarray] | None = None,
) -> Iterator[tuple]:
    """The segments of ``recordings`` in order, ``size`` at a time (the last batch may be
    shorter): ``(coh, wpli, age, sex, offset, products)``, float32 numpy, (n, T, C, C) and
    (n,), the batches the recordings' concatenation would give, without concatenating them;
    ``offset`` (n, n_classes) each segment's recording's offset with ``offsets`` (a
    recording's tuple -> its (n_classes,) offset, :func:`static_offsets`), else None;
    ``products`` (n, K) each segment's interaction products with ``products`` (a recording's
    tuple -> its (S, K) products, :func:`token_products`), else None.

    ``recordings``: tuples ``(coh, wpli, age, sex)`` as for :func:`recording_logits`, read one
    at a time (a generator may load them lazily). A batch within one recording is a view of its
    arrays; one across recordings a copy of its parts. ``counts`` gets each recording's segment
    count appended as it is read.
    """
    pending: list[tuple] = []  # parts of the batch being filled
    filled = 0
    for recording in recordings:
        coh, wpli, age, sex = recording[:4]
        offset = None if offsets is None else np.asarray(offsets(recording), np.float32)
        own = None if products is None else np.asarray(products(recording), np.float32)
        counts.append(len(coh))
        start = 0
        while start < len(coh):
            part = slice(start, start + size - filled)
            n = len(coh[part])
            pending.append(
                (
                    coh[part],
                    wpli[part],
                    *(np.full(n, float(v), np.float32) for v in (age, sex)),
                    None if offset is None else np.repeat(offset[None], n, axis=0),
                    None if own is None else own[part],
                )
            )
            filled, start = filled + n, start + n
            if filled == size:
                yield _joined(pending)
                pending, filled = [], 0
    if pending:
        yield _joined(pending)


def _joined(parts: list[tuple]) -> tuple:
    """One batch from its parts (the parts themselves when there is one: no copy)."""
    if len(parts) == 1:
        return parts[0]
    return tuple(None if column[0] is None else np.concatenate(column) for column in zip(*parts))


def static_offsets(model) -> Callable[[tuple], np.ndarray] | None:
    """For a model on recording means: a recording's tuple ``(coh, wpli, age, sex[,
    covariance])`` -> its static logits (n_classes,) (``static_paths.recording_static_logits``,
    computed where the model is), the offset of each of its segments; None for any other
    model."""
    if not uses_recording_means(model):
        return None
    return lambda recording: recording_static_logits(model, recording).cpu().numpy()


def token_products(model) -> Callable[[tuple], np.ndarray] | None:
    """For a model whose interaction token reads whole recordings
    (``XAIguiFormer.token_reads_recordings``): a recording's tuple -> the (S, K) products of
    its segments (``XAIguiFormer.token_products``); None for any other model (each batch forms
    its own)."""
    if not model.token_reads_recordings:
        return None
    return lambda recording: model.token_products(*recording[:4]).cpu().numpy()


def batch_tensors(batch: tuple, device: torch.device) -> tuple:
    """A batch of :func:`segment_batches` as tensors on ``device`` (None stays None)."""
    return tuple(None if a is None else torch.from_numpy(a).to(device) for a in batch)


def recording_logits(
    model, recordings: Iterable[tuple], device: torch.device, precision: str = "float32"
) -> np.ndarray:
    """Mean refined logits per recording: float64 (n_recordings, n_classes), the model run in
    ``precision`` (resolved: ``devices.resolve_precision``).

    ``recordings``: tuples ``(coh, wpli, age, sex[, covariance])`` with coh/wpli float32 numpy
    (n_segments, n_bands, C, C), scalar age/sex and the band covariances (float32
    (n_covariance_bands, C, C), V^2; ``model/static_paths.py``), needed by a model whose static
    stage reads them. Segments of several recordings share
    forwards of up to :data:`SEGMENTS_PER_BATCH` segments (:func:`segment_batches`: one batch
    in memory beside the recordings); the model runs in eval mode.
    """
    model.eval()
    counts: list[int] = []
    chunks = []
    with torch.no_grad(), one_cpu_thread():
        batches = segment_batches(
            recordings, counts, offsets=static_offsets(model), products=token_products(model)
        )
        for batch in batches:
            coh, wpli, age, sex, offset, products = batch_tensors(batch, device)
            with autocast(device, precision):
                _, refined = model(coh, wpli, age, sex, offset, products)
            chunks.append(refined.float().cpu().numpy().astype(np.float64))
    logits = np.concatenate(chunks)
    bounds = np.cumsum([0] + counts)
    return np.stack([logits[a:b].mean(axis=0) for a, b in itertools.pairwise(bounds)])
