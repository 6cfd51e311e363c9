"""Where each prediction comes from, and whether the model is on familiar ground with it.

Two halves of one idea:

- what a model was fitted to: :func:`describe_training_data`, stored in ``model.pt`` as
  ``training_data`` (``training/model_file.py``) by ``train``;
- what ``predict`` and ``explain`` say about each recording against it: its provenance columns
  (:func:`row_fields`: source file, interpolated channels, segments used and rejected, the age
  and sex used and where they came from) and its warnings (:func:`recording_warnings`).

A warning is one line, ``KIND: text``, KIND one of :data:`WARNING_KINDS`:

==================  ===========================================================================
kind                when
==================  ===========================================================================
``interpolated``    channels the model expects were missing or marked bad, and were interpolated
``not_in_table``    a participants table was used but does not list the recording's participant
``age``             the age is outside the training recordings' range (or known where no
                    training recording had one, or unknown where every one had one)
``sex``             a sex no training recording had (the same rule for unknown)
``sampling_rate``   the recording's own sampling rate is more than :data:`FAR_FACTOR` times
                    outside the training recordings' range
``duration``        its length is, likewise
``crop``            it is shorter than the crop the model's training recordings were cut to:
                    it is analysed whole (fewer segments: a noisier score than theirs)
``in_training_data`` the same signal (:func:`~eegformer_cli.recordings.reading.signal_sha256`),
                    a copy of a training recording that was cropped, filtered or resampled (its
                    connectivity fingerprint, :func:`fingerprint`), or the same participant id
                    was in the model's training data: its prediction is optimistic, the run's
                    ``oof_predictions.tsv`` has the honest ones
==================  ===========================================================================

The connectivity fingerprint: a recording's mean coherence and wPLI of every channel pair and
band, minus those of the model's training recordings, as a unit vector. A copy cropped to a
third, band-passed or resampled keeps a cosine to its original above :data:`FINGERPRINT_MATCH`,
while two distinct people, or one person's recordings of different conditions, stay below it
(docs/benchmarks.md, "Training-data check"). The signal hash recognises
an unchanged copy under any name; the fingerprint a changed one; neither recognises another
recording of the same person, which only the participant id can.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

#: Kinds of warning, in the order they are listed.
WARNING_KINDS = (
    "in_training_data",
    "interpolated",
    "not_in_table",
    "age",
    "sex",
    "sampling_rate",
    "duration",
    "crop",
)
#: A sampling rate or a length more than this factor below the training recordings' smallest or
#: above their largest is "far outside" the training data (a 256 Hz recording for a model
#: trained on 128 Hz ones is not: it is resampled to the model's rate like them; 500 Hz is).
FAR_FACTOR = 2.0
#: Where the age or sex used for a recording came from (``age_source`` / ``sex_source``).
SOURCES = ("flag", "table", "manifest", "none")
#: The provenance columns of a ``predict`` / ``explain`` row, after the prediction's own.
PROVENANCE_COLUMNS = (
    "source_file",
    "n_segments",
    "n_segments_rejected",
    "channels_interpolated",
    "age",
    "age_source",
    "sex",
    "sex_source",
    "warnings",
)
SEX_NAMES = {0.0: "M", 1.0: "F"}
#: Cosine similarity of connectivity fingerprints from which a recording is taken for a copy of
#: a training recording (module docstring).
FINGERPRINT_MATCH = 0.6


def connectivity_vector(coh: np.ndarray, wpli: np.ndarray) -> np.ndarray:
    """(coh, wpli) float (n_segments, n_bands, C, C), or (n_bands, C, C) for a mean connectome
    -> float64 (2 · n_bands · C(C-1)/2,): the means over segments of every band's upper
    triangle, coherence then wPLI."""
    rows, cols = np.triu_indices(coh.shape[-1], k=1)
    means = [
        (x if x.ndim == 3 else x.mean(axis=0, dtype=np.float64))[:, rows, cols].ravel()
        for x in (coh, wpli)
    ]
    return np.concatenate(means).astype(np.float64)


def fingerprint(coh: np.ndarray, wpli: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """A recording's connectivity fingerprint (module docstring): float32 unit vector, its
    :func:`connectivity_vector` minus ``centre`` (that of the training mean connectome)."""
    deviation = connectivity_vector(coh, wpli) - centre
    norm = np.linalg.norm(deviation)
    return (deviation / norm if norm > 0 else deviation).astype(np.float32)


def training_fingerprints(arrays: Iterable[tuple], mean_connectome: dict) -> dict:
    """``training_data``'s fingerprint entries: ``fingerprint_reference`` float32 (the
    :func:`connectivity_vector` of ``mean_connectome``, ``{"coh", "wpli"}`` (n_bands, C, C), the
    training mean connectome) and ``fingerprints`` float16 (n_recordings, n_features), one per
    (coh, wpli) of ``arrays``, in the order of ``training_data["recordings"]``."""
    centre = connectivity_vector(mean_connectome["coh"], mean_connectome["wpli"])
    return {
        "fingerprint_reference": centre.astype(np.float32),
        "fingerprints": np.array(
            [fingerprint(coh, wpli, centre) for coh, wpli in arrays], dtype=np.float16
        ),
    }


def _copied_recording(item, training: dict) -> tuple[str, float] | None:
    """(training recording id, similarity) when ``item``'s fingerprint matches one
    (:data:`FINGERPRINT_MATCH`); None otherwise, or when the model file stores none."""
    stored = training.get("fingerprints")
    if stored is None or item.coh is None or not len(training["recordings"]):
        return None
    centre = np.asarray(training["fingerprint_reference"], dtype=np.float64)
    prints = np.asarray(stored, dtype=np.float32)
    if prints.shape[1] != len(centre):
        return None
    similarity = prints @ fingerprint(item.coh, item.wpli, centre)
    best = int(np.argmax(similarity))
    if similarity[best] < FINGERPRINT_MATCH:
        return None
    return training["recordings"][best], float(similarity[best])


def _known(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _float_or_nan(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


def _range(values: Iterable[float]) -> list[float] | None:
    known = [v for v in values if _known(v)]
    return [min(known), max(known)] if known else None


def describe_training_data(
    recordings: list, manifest_rows: dict[str, dict], data_dir: str | Path
) -> dict:
    """``model.pt``'s ``training_data``: what the model was fitted to (plain types only).

    ``recordings``: the :class:`~eegformer_cli.training.dataset.RecordingInfo` of every
    recording whose data shaped the model (fit and epoch selection); ``manifest_rows``: the
    preprocess manifest's rows by recording id (for the columns RecordingInfo does not keep;
    rows of folders made before eegformer kept them lack ``source_sfreq`` and
    ``signal_sha256``, which then stay unknown). Returns ``{"data_dir", "n_recordings",
    "recordings", "participants", "signal_sha256": {hash: recording_id}, "age_years": {"range":
    [min, max] | None, "n_unknown"}, "sex": {"M": n, "F": n, "n/a": n}, "source_sfreq_hz":
    [min, max] | None, "duration_s": [min, max] | None}``.
    """
    rows = [manifest_rows.get(rec.recording_id, {}) for rec in recordings]
    participants = sorted(
        {
            str(row["participant_id"])
            for row in rows
            if row.get("participant_id") not in (None, "", "n/a")
        }
    )
    hashes = {
        row["signal_sha256"]: rec.recording_id
        for rec, row in zip(recordings, rows)
        if row.get("signal_sha256") not in (None, "", "n/a")
    }
    sexes = Counter(SEX_NAMES.get(rec.sex, "n/a") for rec in recordings)
    return {
        "data_dir": str(data_dir),
        "n_recordings": len(recordings),
        "recordings": [rec.recording_id for rec in recordings],
        "participants": participants,
        "signal_sha256": hashes,
        "age_years": {
            "range": _range(rec.age for rec in recordings),
            "n_unknown": sum(not _known(rec.age) for rec in recordings),
        },
        "sex": {name: sexes.get(name, 0) for name in ("M", "F", "n/a")},
        "source_sfreq_hz": _range(_float_or_nan(row.get("source_sfreq")) for row in rows),
        "duration_s": _range(_float_or_nan(row.get("duration_s")) for row in rows),
    }


def _span(values: list[float], unit: str) -> str:
    low, high = values
    return f"{low:g} {unit}" if low == high else f"{low:g}-{high:g} {unit}"


def _far_outside(value: float, span: list[float] | None) -> bool:
    return (
        _known(value)
        and span is not None
        and (value < span[0] / FAR_FACTOR or value > span[1] * FAR_FACTOR)
    )


def _demographic_warnings(item, training: dict) -> list[str]:
    """``age`` and ``sex`` warnings of ``item`` against the training recordings."""
    out = []
    ages, n = training["age_years"], training["n_recordings"]
    if _known(item.age):
        if ages["range"] is None:
            out.append(
                f"age: {item.age:g} years given, but no training recording had an age "
                "(the model never used one)"
            )
        elif not ages["range"][0] <= item.age <= ages["range"][1]:
            out.append(
                f"age: {item.age:g} years is outside the training recordings' ages "
                f"({_span(ages['range'], 'years')})"
            )
    elif ages["n_unknown"] == 0 and n:
        out.append(
            f"age: unknown, but every training recording had one ({_span(ages['range'], 'years')})"
        )
    sexes = training["sex"]
    seen = ", ".join(f"{name} {count}" for name, count in sexes.items() if count)
    sex = SEX_NAMES.get(item.sex, "n/a")
    if not sexes.get(sex):
        what = "unknown" if sex == "n/a" else sex
        out.append(f"sex: {what}, which no training recording had (training: {seen})")
    return out


def _recording_warnings(item, training: dict) -> list[str]:
    """``sampling_rate`` and ``duration`` warnings of ``item`` against the training recordings."""
    out = []
    if _far_outside(item.source_sfreq, training["source_sfreq_hz"]):
        out.append(
            f"sampling_rate: {item.source_sfreq:g} Hz is far outside the training "
            f"recordings' {_span(training['source_sfreq_hz'], 'Hz')}"
        )
    if _far_outside(item.duration_s, training["duration_s"]):
        out.append(
            f"duration: {item.duration_s:g} s is far outside the training recordings' "
            f"{_span(training['duration_s'], 's')}"
        )
    return out


def _membership_warning(item, training: dict, oof_file: Path) -> list[str]:
    """The ``in_training_data`` warning, or none: the same signal, else a copy of a training
    recording (its fingerprint), else the same participant."""
    same_signal = training["signal_sha256"].get(item.signal_sha256 or "")
    if same_signal == item.recording_id:
        why = "the model was trained on this recording"
    elif same_signal is not None:
        why = f"the model was trained on this signal (training recording {same_signal})"
    elif copied := _copied_recording(item, training):
        why = (
            f"its connectivity matches training recording {copied[0]}'s (fingerprint "
            f"similarity {copied[1]:.2f}): a cropped, filtered or resampled copy of it?"
        )
    elif item.participant_id is not None and item.participant_id in training["participants"]:
        why = (
            f"participant {item.participant_id} was in the training data (if this is another "
            "dataset whose ids coincide, ignore this)"
        )
    else:
        return []
    where = (
        str(oof_file) if oof_file.is_file() else "oof_predictions.tsv of the run that trained it"
    )
    return [
        f"in_training_data: {why}, so this prediction is optimistic; honest out-of-fold "
        f"ones: {where}"
    ]


def recording_warnings(item, training: dict | None, oof_file: str | Path) -> list[str]:
    """Every warning of one usable recording (module docs), in :data:`WARNING_KINDS` order.

    ``item``: an :class:`~eegformer_cli.inference.inputs.InputRecording`; ``training``: the model
    file's ``training_data`` (None for a model file written before eegformer kept it: only the
    warnings about the recording itself are possible then); ``oof_file``: the out-of-fold
    predictions of the run that trained the model (``oof_predictions.tsv`` beside its model
    file, named in the ``in_training_data`` warning when it is there).
    """
    out = []
    if training is not None:
        out += _membership_warning(item, training, Path(oof_file))
    if item.channels_interpolated:
        marked = [name for name in item.channels_interpolated if name in item.channels_marked_bad]
        absent = [name for name in item.channels_interpolated if name not in marked]
        why = [
            f"{', '.join(names)} {reason}"
            for names, reason in (
                (marked, "marked bad"),
                (absent, "missing from the recording"),
            )
            if names
        ]
        out.append(
            f"interpolated: channel(s) {' and '.join(why)}, interpolated from their neighbours"
        )
    if item.table is not None and not item.table_lists_participant:
        who = (
            "no participant matched"
            if item.participant_id is None
            else f"no row for {item.participant_id}"
        )
        fallback = (
            "age and sex from the preprocess manifest"
            if item.age_source == "manifest" or item.sex_source == "manifest"
            else "age and sex unknown unless given by --age / --sex"
        )
        out.append(f"not_in_table: {item.table} does not list this recording ({who}); {fallback}")
    if training is not None:
        out += _demographic_warnings(item, training) + _recording_warnings(item, training)
    if item.shorter_than_crop_s is not None:
        out.append(
            f"crop: {item.duration_s:.1f} s long, shorter than the {item.shorter_than_crop_s:g} "
            "s the model's training recordings were cropped to: analysed whole, "
            f"{item.coh.shape[0]} segment(s), so its score is noisier than theirs"
        )
    return out


def row_fields(item) -> dict:
    """The provenance columns (:data:`PROVENANCE_COLUMNS`) of a usable recording, JSON-able:
    ``channels_interpolated`` and ``warnings`` as lists, unknown values None, ``age`` in years
    and ``sex`` as ``M``/``F``."""
    return {
        "source_file": item.source_file,
        "n_segments": None if item.coh is None else int(item.coh.shape[0]),
        "n_segments_rejected": item.n_segments_rejected,
        "channels_interpolated": list(item.channels_interpolated),
        "age": item.age if _known(item.age) else None,
        "age_source": item.age_source,
        "sex": SEX_NAMES.get(item.sex),
        "sex_source": item.sex_source,
        "warnings": list(item.warnings),
    }


def flat_row(row: dict) -> dict:
    """A row for a CSV file: ``warnings`` joined by `` | `` (a warning's text holds commas),
    other lists (``channels_interpolated``) by ``,``, None as ``n/a``."""

    def cell(key, value):
        if isinstance(value, list):
            return (" | " if key == "warnings" else ",").join(map(str, value))
        return "n/a" if value is None else value

    return {key: cell(key, value) for key, value in row.items()}
