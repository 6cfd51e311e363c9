"""The static stage on one whole recording (``model/stages.py``): its logits, given to every
segment of the recording as ``offset``.

A recording is a tuple ``(coh, wpli, age, sex[, covariance])``: ``covariance`` float32
(n_covariance_bands, C, C), V^2, the connectome file's (None or absent: the input has none).
:func:`recording_static_logits` is the one function every caller with a whole recording uses
(``model/predict.py``, explanations, training's validation).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from eegformer_cli.errors import InputDataError
from eegformer_cli.model.linear_path import recording_features, uses_recording_means


def tangent_space_of(model):
    """``model``'s tangent-space path, or None without one."""
    return None if model.static is None else model.static.tangent_space


def reads_covariance(model) -> bool:
    """Whether ``model``'s static logits depend on band covariances
    (``StaticStage.reads_covariance``)."""
    return model.static is not None and model.static.reads_covariance


def covariance_of(recording: tuple):
    """The covariance of a recording tuple (module docstring), None when it has none."""
    return recording[4] if len(recording) > 4 else None


def recording_static_logits(model, recording: tuple) -> Tensor:
    """(n_classes,) float32: the static stage's logits of one recording (module docstring), on
    the device of the model's static stage. Raises :class:`InputDataError` when the model reads
    covariances and the recording has none (a preprocess folder of an earlier version)."""
    coh, wpli, age, sex = recording[:4]
    covariance = covariance_of(recording)
    if covariance is None and reads_covariance(model):
        raise InputDataError(
            "this model's tangent-space path reads band covariances, which this "
            "recording's connectome lacks (preprocessed by an earlier eegformer)",
            hint="rerun `eegformer preprocess` with this version",
        )
    features = recording_features(model, coh, wpli, age, sex)
    if covariance is not None:
        covariance = torch.as_tensor(np.asarray(covariance))[None]
    with torch.no_grad():
        return model.static(features, covariance)[0].float()


def recording_offset(model, recording: tuple) -> Tensor | None:
    """:func:`recording_static_logits` for a model on recording means, else None (the forward
    forms the linear path per segment, as earlier versions did)."""
    if not uses_recording_means(model):
        return None
    return recording_static_logits(model, recording)
