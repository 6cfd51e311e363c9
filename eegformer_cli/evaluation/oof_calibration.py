"""A run's out-of-fold probabilities -> its calibration entries in ``metrics.json`` and the
recalibration and conformal calibration set kept in ``model.pt``.

``metrics.json``:

- ``calibration``: ``{"bins", "models": {model: calibration summary}, "recalibration":
  {"method", "params", "cross_fitted_log_loss", "n", "reason", "after"}}``
  (:mod:`calibration`; every out-of-fold row, repeats included: ``n`` counts predictions,
  and each summary's ``n_recordings`` the recordings they are of);
- ``prediction_sets``: :func:`conformal.coverage_out_of_fold` of the transformer's
  (recalibrated) probabilities, one per recording (the mean over its repeats).

``model.pt`` (:func:`model_file.add_calibration`): ``recalibration`` ``{"method", "params"}``
and ``conformal`` ``{"probabilities": (m, K), "labels": (m,), "score"}``, what ``predict``
needs for ``--coverage``.
"""

from __future__ import annotations

import numpy as np

from eegformer_cli.evaluation import calibration, conformal
from eegformer_cli.evaluation.metrics import MODEL_NAME


def _arrays(rows: list[dict], label_names: list[str]):
    """(probabilities (n, K), class indices (n,), participants (n,), recording ids (n,))."""
    index = {name: k for k, name in enumerate(label_names)}
    probabilities = np.array(
        [[float(row[f"prob_{name}"]) for name in label_names] for row in rows], dtype=float
    ).reshape(len(rows), len(label_names))
    labels = np.array([index[str(row["label"])] for row in rows], dtype=int)
    participants = np.array([str(row["participant_id"]) for row in rows])
    recordings = np.array([str(row["recording_id"]) for row in rows])
    return probabilities, labels, participants, recordings


def per_recording(
    probabilities: np.ndarray, labels: np.ndarray, participants: np.ndarray, recordings: np.ndarray
):
    """One row per recording (first-seen order): the mean probabilities over its rows."""
    ids = list(dict.fromkeys(recordings.tolist()))
    mean = np.stack([probabilities[recordings == rid].mean(axis=0) for rid in ids])
    first = [int(np.flatnonzero(recordings == rid)[0]) for rid in ids]
    return mean, labels[first], participants[first]


def summarise(
    oof_rows: list[dict],
    label_names: list[str],
    positive_label: str | None,
    shipped: str = MODEL_NAME,
) -> tuple[dict, dict, dict]:
    """(metrics.json's ``calibration``, its ``prediction_sets``, the model file's entry)
    from the out-of-fold rows of every model (``oof_predictions.tsv``'s rows); the
    recalibration and the prediction sets from the rows of ``shipped``, the model name whose
    rows describe the model that ships (its linear path alone when the final model kept no
    residual), recorded as the recalibration's ``rows`` when it is not the transformer's."""
    positive = None if positive_label is None else label_names.index(positive_label)
    models = {}
    for name in dict.fromkeys(row["model"] for row in oof_rows):
        rows = [row for row in oof_rows if row["model"] == name]
        probabilities, labels, _, recordings = _arrays(rows, label_names)
        models[name] = {
            **calibration.calibration_summary(labels, probabilities, positive),
            "n_recordings": len(set(recordings.tolist())),
        }
    rows = [row for row in oof_rows if row["model"] == shipped]
    probabilities, labels, participants, recordings = _arrays(rows, label_names)
    chosen = calibration.choose_recalibration(labels, probabilities, participants, positive)
    if shipped != MODEL_NAME:
        chosen["rows"] = shipped
    if chosen.get("after"):
        chosen["after"]["n_recordings"] = len(set(recordings.tolist()))
    stored = {"method": chosen["method"], "params": chosen["params"]}
    recalibrated = calibration.recalibrate(stored, probabilities)
    mean, recording_labels, recording_participants = per_recording(
        recalibrated, labels, participants, recordings
    )
    sets = conformal.coverage_out_of_fold(
        mean, recording_labels, recording_participants, label_names=label_names
    )
    entry = {
        "bins": f"{calibration.N_BINS} equal-width bins",
        "models": models,
        "recalibration": chosen,
    }
    model_entry = {
        "recalibration": stored,
        "conformal": {
            "probabilities": mean.tolist(),
            "labels": recording_labels.tolist(),
            "score": conformal.SCORE,
        },
    }
    return entry, sets, model_entry
