"""A run's plan and its folds: what a ``train`` run trains, fixed before the first fold.

:func:`plan_run` reads the data (:func:`dataset.load_training_data`), makes or loads the
participant-wise splits (:mod:`splits`) and checks every setting, model settings included, all
before the run folder is created or touched; each fold is then one job of :mod:`.fold_job`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from eegformer_cli import console
from eegformer_cli.errors import UsageError, did_you_mean
from eegformer_cli.model.devices import resolve_train_device
from eegformer_cli.preprocess.output import MANIFEST_NAME
from eegformer_cli.training import splits
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.dataset import (
    RecordingInfo,
    TrainingData,
    load_training_data,
)
from eegformer_cli.training.fit import build_model


@dataclass
class RunPlan:
    """Everything fixed (and checked) before the first fold: data, labels, folds, the final
    model's split (CV only), device, the model's resolved settings."""

    data: TrainingData
    config: TrainConfig
    folds: list[splits.Fold]
    final: splits.Fold | None
    scheme: dict
    positive_label: str | None
    device: torch.device
    model_config: dict

    def final_split(self) -> splits.Fold:
        """The final model's split (ValueError for a holdout run, which has no final model)."""
        if self.final is None:
            raise ValueError("a holdout run trains no final model")
        return self.final


#: Labels that name the comparison group (case and separators ignored): with two classes, the
#: other class is the positive one by default.
CONTROL_LABELS = (
    "control",
    "controls",
    "healthy",
    "healthycontrol",
    "healthycontrols",
    "hc",
    "normal",
    "norm",
    "nc",
    "typical",
    "typicallydeveloping",
    "td",
    "negative",
    "neg",
    "rest",
    "baseline",
    "none",
    "no",
)


def is_control_label(label: str) -> bool:
    """Whether ``label`` names a control-like class (:data:`CONTROL_LABELS`)."""
    return "".join(ch for ch in str(label).lower() if ch.isalnum()) in CONTROL_LABELS


def default_positive_label(label_names: list[str]) -> str:
    """Two classes: the one that is not control-like when exactly one is (``healthy`` vs
    ``schizophrenia`` -> ``schizophrenia``, whatever the sorted order), else the last label in
    sorted order."""
    control = [name for name in label_names if is_control_label(name)]
    if len(control) == 1:
        return next(name for name in label_names if name != control[0])
    return label_names[-1]


def _positive_label(label_names: list[str], positive_label: str | None) -> str | None:
    if len(label_names) != 2:
        if positive_label is not None:
            console.warn(
                "--positive-label is ignored with more than two classes "
                "(metrics are macro averages)"
            )
        return None
    if positive_label is None:
        return default_positive_label(label_names)
    if positive_label not in label_names:
        raise UsageError(
            f"invalid --positive-label {positive_label!r}; allowed values are "
            + ", ".join(repr(n) for n in label_names)
            + did_you_mean(positive_label, label_names)
        )
    return positive_label


def plan_run(
    data_dir,
    label_column: str,
    config: TrainConfig,
    splits_file=None,
    positive_label: str | None = None,
    split_by: str = "participant",
) -> RunPlan:
    """Read the data, fix the folds (made from the config, or read from ``splits_file``) and
    check every setting, so that nothing is created in the run folder for a run that cannot
    start (UsageError / InputDataError). ``split_by``: ``train --split-by``
    (:func:`splits.split_unit`: recordings without a participant are refused unless it is
    ``"recording"``); the scheme's ``unit`` says what the splits keep apart."""
    data = load_training_data(data_dir, label_column)
    unit = splits.split_unit(
        data.without_participant,
        len(data.recordings),
        split_by,
        data.data_dir / MANIFEST_NAME,
    )
    groups = np.array([r.participant_id for r in data.recordings])
    labels = data.label_indices()
    if splits_file is not None:
        scheme, folds = splits.load_splits(splits_file)
        folds = splits.check_folds(folds, set(groups), str(splits_file))
        scheme = {**scheme, "from_file": str(splits_file)}
    elif config.holdout:
        folds = [
            splits.holdout_fold(groups, labels, config.holdout, config.seed, config.val_fraction)
        ]
        scheme = {
            "kind": "holdout",
            "fraction": config.holdout,
            "seed": config.seed,
            "val_fraction": config.val_fraction,
        }
    else:
        folds = splits.cross_validation_folds(
            groups, labels, config.cv, config.repeats, config.seed, config.val_fraction
        )
        scheme = {
            "kind": "cv",
            "k": config.cv,
            "repeats": config.repeats,
            "seed": config.seed,
            "val_fraction": config.val_fraction,
        }
    scheme["unit"] = unit
    final = (
        None
        if scheme.get("kind") == "holdout"
        else splits.final_fit_split(groups, labels, config.seed, config.val_fraction)
    )
    splits.warn_missing_classes(
        folds + ([final] if final else []), groups, labels, data.label_names
    )
    model = build_model(data, config, np.array([np.nan]))
    return RunPlan(
        data,
        config,
        folds,
        final,
        scheme,
        _positive_label(data.label_names, positive_label),
        resolve_train_device(config.device, transformer_parameters(model)),
        model.config.to_dict(),
    )


def transformer_parameters(model) -> int:
    """How many parameters the transformer path of ``model`` (an ``XAIguiFormer``) trains:
    what ``--device auto`` chooses the device by (``devices.resolve_train_device``)."""
    return sum(p.numel() for p in model.transformer.parameters())


def recordings_of(data: TrainingData, participants: list[str]) -> list[RecordingInfo]:
    wanted = set(participants)
    return [r for r in data.recordings if r.participant_id in wanted]
