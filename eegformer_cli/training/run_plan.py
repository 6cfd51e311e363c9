"""A run's plan and its folds: what a ``train`` run trains, fixed before the first fold.

:func:`plan_run` reads the data (:func:`dataset.load_training_data`), makes or loads the
participant-wise splits (:mod:`splits`) and checks every setting, model settings included, all
before the run folder is created or touched. :func:`run_fold` trains one fold: XAIguiFormer on
the fold's ``train`` participants with the epoch selected on its ``val`` participants
(:func:`fit.fit_model`), the references on train + val (the logistic regression,
:mod:`reference`, and the tangent space, :mod:`tangent_space`, when the connectome files hold
band covariances), all evaluated on the ``test`` participants, per recording; its result is what
``folds/<r{repeat}_f{fold}>.json`` holds. The permutation test reruns folds through it too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import softmax

from eegformer_cli import console
from eegformer_cli.errors import UsageError, did_you_mean
from eegformer_cli.evaluation.metrics import (
    LINEAR_PATH_NAME,
    MODEL_NAME,
    REFERENCE_NAME,
    TANGENT_SPACE_NAME,
    classification_metrics,
)
from eegformer_cli.evaluation.reference import (
    fit_reference,
    recording_features,
    reference_probabilities,
)
from eegformer_cli.evaluation.tangent_space import fit_tangent_space, shrunk_covariances
from eegformer_cli.model.devices import resolve_device, resolve_precision
from eegformer_cli.preprocess.output import MANIFEST_NAME
from eegformer_cli.training import splits
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.dataset import (
    ConnectomeDataset,
    RecordingInfo,
    TrainingData,
    load_training_data,
    read_covariances,
)
from eegformer_cli.training.fit import attention_summary, build_model, evaluate, fit_model, seed_of
from eegformer_cli.training.fold_record import FoldRecord
from eegformer_cli.training.residual import linear_path_alone

#: Each reference model: the function fitting it on a training part (inputs, labels, groups,
#: seed), in the order of metrics.json.
REFERENCES = {REFERENCE_NAME: fit_reference, TANGENT_SPACE_NAME: fit_tangent_space}


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
    model_config = build_model(data, config, np.array([np.nan])).config.to_dict()
    return RunPlan(
        data,
        config,
        folds,
        final,
        scheme,
        _positive_label(data.label_names, positive_label),
        resolve_device(config.device),
        model_config,
    )


def recordings_of(data: TrainingData, participants: list[str]) -> list[RecordingInfo]:
    wanted = set(participants)
    return [r for r in data.recordings if r.participant_id in wanted]


def _oof_rows(
    model_name: str,
    fold: splits.Fold,
    recs: list[RecordingInfo],
    probabilities: np.ndarray,
    label_names: list[str],
) -> list[dict]:
    rows = []
    for rec, probs in zip(recs, probabilities):
        row = {
            "model": model_name,
            "repeat": fold.repeat,
            "fold": fold.fold,
            "recording_id": rec.recording_id,
            "participant_id": rec.participant_id,
            "label": rec.label,
            "predicted": label_names[int(np.argmax(probs))],
        }
        row.update({f"prob_{name}": float(p) for name, p in zip(label_names, probs)})
        rows.append(row)
    return rows


def run_fold(
    plan: RunPlan, fold: splits.Fold, features: dict[str, dict[str, np.ndarray]], on_epoch=None
) -> tuple[FoldRecord, torch.nn.Module]:
    """Train, select and evaluate one fold (XAIguiFormer and the references of ``features``,
    :func:`reference_features`).

    Returns the fold's record (what ``folds/<name>.json`` holds) and the selected model.
    """
    data, config = plan.data, plan.config
    train_recs, val_recs = recordings_of(data, fold.train), recordings_of(data, fold.val)
    test_recs = recordings_of(data, fold.test)
    seed = seed_of(fold, config.seed)
    fit = fit_model(
        data,
        train_recs,
        val_recs,
        config,
        plan.device,
        seed,
        {"repeat": fold.repeat, "fold": fold.fold},
        on_epoch,
    )
    positive = None if plan.positive_label is None else data.label_names.index(plan.positive_label)
    test_set = ConnectomeDataset(test_recs, data.label_names, data.channels, data.bands)
    y_test = test_set.labels
    precision = resolve_precision(config.precision)
    probabilities = {
        MODEL_NAME: softmax(evaluate(fit.model, test_set, plan.device, precision), axis=1)
    }
    if fit.linear is not None:  # the same model without the transformer's residual
        with linear_path_alone(fit.model):
            logits = evaluate(fit.model, test_set, plan.device, precision)
        probabilities[LINEAR_PATH_NAME] = softmax(logits, axis=1)
    chosen_c = {}
    for name in features:
        reference, probabilities[name] = fit_fold_reference(plan, fold, features, name)
        chosen_c[name] = chosen_regularisation(reference)
    record = FoldRecord(
        repeat=fold.repeat,
        fold=fold.fold,
        best_epoch=fit.best_epoch,
        seconds=fit.seconds,
        interaction_screen=fit.screen,
        linear_path=fit.linear,
        reference_C=chosen_c[REFERENCE_NAME],
        references_C=chosen_c,
        history=fit.history,
        attention=attention_summary(fit.model, test_set, plan.device, ablations=True),
        oof=[
            row
            for name, probs in probabilities.items()
            for row in _oof_rows(name, fold, test_recs, probs, data.label_names)
        ],
        metrics={
            name: classification_metrics(y_test, probs, positive)
            for name, probs in probabilities.items()
        },
    )
    return record, fit.model


def chosen_regularisation(reference) -> float:
    """The C a fitted reference chose (a GridSearchCV, or a Pipeline ending in one)."""
    search = reference[-1] if hasattr(reference, "steps") else reference
    return float(search.best_params_["logisticregression__C"])


def fit_fold_reference(
    plan: RunPlan,
    fold: splits.Fold,
    features: dict[str, dict[str, np.ndarray]],
    name: str = REFERENCE_NAME,
) -> tuple[object, np.ndarray]:
    """Reference ``name`` (a key of :data:`REFERENCES`) of ``fold``: fit on its train + val
    participants' recordings with the fold's seed; returns the fitted model and its
    probabilities (n_test, n_classes) on the fold's test recordings (in :func:`recordings_of`
    order). ``features``: :func:`reference_features`."""
    data, inputs = plan.data, features[name]
    fit_recs = recordings_of(data, fold.train) + recordings_of(data, fold.val)
    test_recs = recordings_of(data, fold.test)
    model = REFERENCES[name](
        np.stack([inputs[r.recording_id] for r in fit_recs]),
        data.label_indices(fit_recs),
        np.array([r.participant_id for r in fit_recs]),
        seed_of(fold, plan.config.seed),
    )
    return model, reference_probabilities(
        model, np.stack([inputs[r.recording_id] for r in test_recs]), len(data.label_names)
    )


def reference_features(data: TrainingData) -> dict[str, dict[str, np.ndarray]]:
    """The references' inputs of every recording (the coherence/wPLI arrays, then the band
    covariances: two reads of each connectome file, a few ms per recording):
    ``{reference name: {recording id: array}}``, the logistic regression's features and, when
    every file holds band covariances, the tangent space's shrunk covariances; without them
    (a folder preprocessed by an earlier eegformer) a warning says the run goes without it."""
    dataset = ConnectomeDataset(
        data.recordings, data.label_names, data.channels, data.bands, cache_bytes=0
    )
    features = {
        REFERENCE_NAME: {
            rec.recording_id: recording_features(*dataset.recording_arrays(r))
            for r, rec in enumerate(data.recordings)
        }
    }
    covariances = {
        rec.recording_id: read_covariances(rec, data.channels) for rec in data.recordings
    }
    missing = [rid for rid, covariance in covariances.items() if covariance is None]
    if missing:
        console.warn(
            f"{len(missing)} of {len(covariances)} connectome files hold no band "
            "covariances (preprocessed by an earlier eegformer): this run has no "
            "tangent-space reference; rerun `eegformer preprocess` with the same "
            "inputs and --out to add them"
        )
    else:
        features[TANGENT_SPACE_NAME] = {
            rid: shrunk_covariances(covariance)
            for rid, covariance in covariances.items()
            if covariance is not None  # none is (missing is empty)
        }
    return features
