"""One fold's job: XAIguiFormer on the fold's ``train`` participants with the epoch selected on
its ``val`` participants (:func:`fit.fit_model`), the references on train + val (the logistic
regression, :mod:`reference`, and the tangent space, :mod:`tangent_space`, when the connectome
files hold band covariances), all evaluated on the ``test`` participants, per recording
(:func:`run_fold`); its result is what ``folds/<r{repeat}_f{fold}>.json`` holds. The
permutation test and the learning curve rerun folds through it too.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.special import softmax

from eegformer_cli import console
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
from eegformer_cli.model.devices import resolve_precision
from eegformer_cli.training import splits
from eegformer_cli.training.dataset import (
    ConnectomeDataset,
    RecordingInfo,
    TrainingData,
    read_covariances,
)
from eegformer_cli.training.fit import attention_summary, evaluate, fit_model, seed_of
from eegformer_cli.training.fold_record import FoldRecord
from eegformer_cli.training.run_plan import RunPlan, recordings_of

#: Each reference model: the function fitting it on a training part (inputs, labels, groups,
#: seed), in the order of metrics.json.
REFERENCES = {REFERENCE_NAME: fit_reference, TANGENT_SPACE_NAME: fit_tangent_space}


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
    plan: RunPlan,
    fold: splits.Fold,
    features: dict[str, dict[str, np.ndarray]],
    on_epoch=None,
    attention: bool = True,
) -> tuple[FoldRecord, torch.nn.Module]:
    """Train, select and evaluate one fold (XAIguiFormer and the references of ``features``,
    :func:`reference_features`); returns the fold's record (what ``folds/<name>.json`` holds)
    and the selected model. ``attention`` False: no attention diagnostics, on the test
    recordings nor in the history (the learning curve's refits keep their scores alone)."""
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
        epoch_attention=attention,
    )
    positive = None if plan.positive_label is None else data.label_names.index(plan.positive_label)
    test_set = ConnectomeDataset(test_recs, data.label_names, data.channels, data.bands)
    y_test = test_set.labels
    precision = resolve_precision(config.precision)
    probabilities = {
        MODEL_NAME: softmax(evaluate(fit.model, test_set, plan.device, precision), axis=1)
    }
    if fit.linear is not None:  # the same model without the transformer path
        with fit.model.static_alone():
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
        attention=attention_summary(fit.model, test_set, plan.device, ablations=True)
        if attention
        else None,
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
            "tangent-space reference, and its model no tangent-space path; rerun "
            "`eegformer preprocess` with the same inputs and --out to add them"
        )
    else:
        features[TANGENT_SPACE_NAME] = {
            rid: shrunk_covariances(covariance)
            for rid, covariance in covariances.items()
            if covariance is not None  # none is (missing is empty)
        }
    return features
