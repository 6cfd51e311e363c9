"""A model file + its inputs (:mod:`.inputs`) -> per-recording predictions (``predict``, from
the shell and from Python).

A recording's prediction: the refined logits of all its segments, averaged
(:func:`~eegformer_cli.model.predict.recording_logits`, as the training run's own evaluation),
then a softmax, which is why ``predict`` reproduces a run's out-of-fold probabilities.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from scipy.special import softmax

from eegformer_cli import console, provenance
from eegformer_cli.inference.inputs import InputRecording
from eegformer_cli.model.predict import recording_logits


def predict_recordings(
    bundle,
    items: Iterable[InputRecording],
    device: torch.device,
    precision: str = "float32",
    coverage: float | None = None,
    entity_columns: Sequence[str] = (),
) -> Iterator[dict]:
    """One row per recording: ``recording_id, participant_id``, the ``entity_columns`` (BIDS
    entities: :attr:`.inputs.InputRecordings.entity_columns`; None where a recording has none),
    ``predicted, prob_<label>...``, [``prediction_set``,] then the provenance columns
    (:data:`provenance.PROVENANCE_COLUMNS`:
    ``source_file``, segments used and rejected, interpolated channels, age and sex with their
    sources, ``warnings``; lists as lists).

    ``bundle`` a loaded model file (:class:`~eegformer_cli.training.model_file.ModelBundle`),
    run in ``precision`` (resolved: ``devices.resolve_precision``); its ``recalibration``
    (fitted by ``train`` on the out-of-fold probabilities, when it lowered their log-loss) is
    applied to the probabilities. ``coverage``: add ``prediction_set``, the classes (a list, in
    label order) of the split-conformal set of that coverage
    (:mod:`~eegformer_cli.evaluation.conformal`, calibrated on the run's out-of-fold
    probabilities stored in the model file; :func:`check_model_coverage` first).
    A recording with an ``error`` yields ``{"recording_id", "participant_id", "error"}``.
    """
    from eegformer_cli.evaluation.calibration import recalibrate

    for item in items:
        row = dict[str, object](recording_id=item.recording_id, participant_id=item.participant_id)
        if item.error is not None:
            yield {**row, "error": item.error}
            continue
        row.update({column: item.entities.get(column) for column in entity_columns})
        logits = recording_logits(bundle.model, [item.recording_tuple()], device, precision)
        probabilities = recalibrate(bundle.recalibration, softmax(logits, axis=1))[0]
        row["predicted"] = bundle.label_names[int(probabilities.argmax())]
        row.update({f"prob_{name}": float(p) for name, p in zip(bundle.label_names, probabilities)})
        if coverage is not None:
            row["prediction_set"] = prediction_set(bundle, probabilities, coverage)
        row.update(provenance.row_fields(item))
        yield row


def check_model_coverage(bundle, coverage: float) -> None:
    """UsageError unless ``bundle``'s out-of-fold calibration set can give ``coverage``
    (a model file without one: written before eegformer kept it); a warning when the set
    lacks a class of the model (a holdout's test recordings without it)."""
    from eegformer_cli.evaluation.conformal import absent_classes, check_coverage

    labels = (bundle.conformal or {}).get("labels", [])
    check_coverage(coverage, len(labels))
    absent = [bundle.label_names[k] for k in absent_classes(labels, len(bundle.label_names))]
    if absent:
        console.warn(
            f"--coverage {coverage}: the model's {len(labels)} calibration recordings (its "
            f"run's out-of-fold ones) include none of class {', '.join(map(repr, absent))}, so "
            "the coverage is not guaranteed for recordings of that class (train with "
            "cross-validation, or a larger --holdout, so that its recordings are among them)"
        )


def prediction_set(bundle, probabilities: np.ndarray, coverage: float) -> list[str]:
    """The classes of one recording's split-conformal set: ``probabilities`` (K,) as
    ``predict`` gives them (recalibrated)."""
    from eegformer_cli.evaluation.conformal import prediction_sets

    sets = prediction_sets(
        bundle.conformal["probabilities"],
        bundle.conformal["labels"],
        np.asarray(probabilities, dtype=float).reshape(1, -1),
        coverage,
    )
    return [name for name, member in zip(bundle.label_names, sets[0]) if member]
