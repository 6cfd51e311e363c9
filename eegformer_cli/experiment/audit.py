"""The shortcut audit: does a nuisance variable alone predict the label?

Clinical EEG sets are small and full of shortcuts (patients recorded longer, at another site,
on another amplifier, at another age). A classifier can score well on them while learning
nothing about the brain; e.g. in a public rest vs mental-arithmetic set the rest recordings are
180 s and the arithmetic ones 62 s, and the connectivity estimator's bias follows the length.
So every ``train`` run (and ``train --merge``) checks, on the same participant-wise folds as
the models, how well each nuisance variable predicts the label by itself:

- ``duration_s`` (numeric): recording duration, s (the part analysed, at most ``preprocess
  --crop``, when given);
- ``n_segments`` (numeric): segments kept after rejection;
- ``source_sfreq`` (categorical): the file's own sampling rate, Hz (amplifier, site);
- ``n_channels_interpolated`` (numeric): channels filled by interpolation;
- ``input_folder`` (categorical): the ``preprocess`` input (folder) holding the file;
- ``task`` (categorical): the BIDS task of the recording (a manifest of a BIDS dataset's
  recordings has it), like a site: recordings of two tasks pooled into one study differ in
  more than the brain (length, state, setup); not when it is the label itself;
- ``age`` (numeric, years) and ``sex`` (categorical);
- every column named with ``--confounds COL,...`` (any manifest, participants or recordings
  column).

A ``--confounds`` column of numbers is used as a number (a monotone model), any other as
categories (write codes such as site 1 / 2 / 3 as text to have them taken as categories).

Model: a class-balanced logistic regression (scikit-learn) on the variable alone, fit on each
fold's training part (train + val participants, as the reference model) and scored on its test
participants per recording. Numeric: median imputation with a missing-value indicator (being
unknown can itself be a shortcut), standardised. Categorical: one-hot, ``n/a`` being a level of
its own, levels unseen in training ignored.

Interval: the mean over folds with the 95 % interval of the corrected resampled t-test
(Nadeau & Bengio 2003), the interval of ``metrics.json``'s model comparison, here of the
fold-wise metric against chance (AUROC 0.5, BAC 1 / n_classes). It allows for folds sharing
training participants, and for the training-set variability a pooled out-of-fold bootstrap
would ignore (a bootstrap would also collapse to a point at AUROC 1). When every fold gives
the same value (e.g. AUROC 1.00 on every fold, the length in that set) the t-interval has no
spread to work with and is not given (n/a); a variable that high is then tested by permutation
instead: the one-variable model refit on :data:`N_PERMUTATIONS` label permutations
(:func:`null_labels.permuted_labels`) on the same folds, p = (1 + #{null mean AUROC >=
observed}) / (1 + N). It costs a second or two and runs only in that case.

Graded, each with its ``reason``: flagged: AUROC >= :data:`AUROC_FLAG` and beyond chance
(interval's lower bound above 0.5, or, without an interval, permutation p < 0.05);
borderline: beyond chance so, but AUROC below :data:`AUROC_FLAG` (a weak shortcut: "0.64,
p = 0.0008" is not "cleared"); checked: neither. Flagged and borderline variables get one
warning line each on stderr, a length variable (:data:`LENGTH_VARIABLES`) with its remedy
(``preprocess --crop``). More than two classes: macro one-vs-rest AUROC, as the models'
metrics. Variables that are constant, unknown for every recording or not in the manifest are
reported as such, never flagged.
With ``--holdout`` the single split gives no interval, so the audit (about the data, not the
model, and cheap) runs on a participant-wise ``cv``-fold CV of all participants with the
run's seed instead, and says so.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from threadpoolctl import threadpool_limits

from eegformer_cli.console import warn
from eegformer_cli.errors import InputDataError, UsageError, did_you_mean
from eegformer_cli.evaluation.metrics import against_chance, classification_metrics
from eegformer_cli.evaluation.run_metrics import AuditVariable, FoldScores, ShortcutAudit
from eegformer_cli.experiment.null_labels import p_value, permuted_labels
from eegformer_cli.preprocess import output
from eegformer_cli.recordings import demographics
from eegformer_cli.recordings.reading import input_folder
from eegformer_cli.training import splits
from eegformer_cli.training.config import TrainConfig

if TYPE_CHECKING:  # the report imports this module's words without torch (dataset.py's)
    from eegformer_cli.training.dataset import TrainingData

#: AUROC from which a variable that beats chance is flagged.
AUROC_FLAG = 0.65
#: Significance level of the permutation test used when every fold gives the same AUROC.
SIGNIFICANCE = 0.05
#: Label permutations of that test (p down to 0.01).
N_PERMUTATIONS = 99
#: Manifest columns that describe the processing, not the recording: never confounds.
BOOKKEEPING_COLUMNS = ("status", "error", "connectome", "settings_hash")
MISSING = "n/a"
STATUS_ORDER = ("flagged", "borderline", "checked", "constant", "unknown", "not recorded")
#: Variables whose shortcut is the recordings' length (:func:`length_remedy` for them).
LENGTH_VARIABLES = ("duration_s", "n_segments")


def length_remedy(durations: list[float] | None) -> str:
    """The remedy offered for a length shortcut: crop every recording to the shortest one's
    length, in whole seconds (``durations``: the recordings' analysed lengths, s, NaN =
    unknown; without any, the rule instead of the number)."""
    known = [value for value in durations or [] if math.isfinite(value)]
    crop = (
        f"--crop {math.floor(min(known))}` (the shortest recording's length, {min(known):g} s)"
        if known
        else "--crop SECONDS` (at most the shortest recording's length)"
    )
    return (
        f"remedy: compare like with like: `eegformer preprocess ... {crop} analyses the same "
        "length of every recording; train again and see whether the score holds"
    )


@dataclass(frozen=True)
class Variable:
    """One audited variable: ``values`` per usable recording (in :class:`TrainingData` order),
    float (NaN = unknown) when ``kind`` is "numeric", str (``n/a`` = unknown) when
    "categorical"; ``values`` is None when the manifest does not record it."""

    name: str
    description: str
    kind: str
    values: list | None
    source: str = "manifest"


@dataclass(frozen=True)
class AuditPlan:
    """What :func:`run_audit` checks: the variables, the participant-wise folds and how the
    folds were chosen (words for people)."""

    data: TrainingData
    variables: list[Variable]
    folds: list[splits.Fold]
    folds_description: str
    seed: int


def plan_audit(
    data: TrainingData, folds: list[splits.Fold], scheme: dict, config: TrainConfig, confounds=()
) -> AuditPlan:
    """The audit of ``data`` on the run's ``folds`` (``scheme`` as in ``splits.json``).

    ``confounds``: extra manifest columns; UsageError naming the available ones when a column
    does not exist or is the label itself. Reads the manifest (nothing is written).
    """
    rows = output.read_manifest(data.data_dir)
    _check_confounds(list(rows[0]), list(confounds), data)
    by_id = {row["recording_id"]: row for row in rows}
    recording_rows = [by_id[rec.recording_id] for rec in data.recordings]
    variables = _builtin_variables(recording_rows, data)
    names = {variable.name for variable in variables}
    variables += [
        _column_variable(recording_rows, column, "--confounds column", "--confounds")
        for column in dict.fromkeys(confounds)
        if column not in names
    ]
    audit_folds, description = _audit_folds(data, folds, scheme, config)
    return AuditPlan(data, variables, audit_folds, description, config.seed)


def _check_confounds(columns: list[str], confounds: list[str], data: TrainingData) -> None:
    available = [c for c in columns if c not in BOOKKEEPING_COLUMNS and c != data.label_column]
    for column in confounds:
        if column == data.label_column:
            raise UsageError(
                f"--confounds {column!r} is the label column; a label predicts itself",
                hint="name nuisance columns only",
            )
        if column not in available:
            raise UsageError(
                f"--confounds column {column!r} is not in {data.data_dir / output.MANIFEST_NAME}"
                f"{did_you_mean(column, available)}; available columns are "
                f"{', '.join(available)}"
            )


def _builtin_variables(rows: list[dict], data: TrainingData) -> list[Variable]:
    """The nuisance variables every manifest may have (module docstring's table)."""
    interpolated = (
        None
        if "channels_interpolated" not in rows[0]
        else [
            0.0
            if demographics.is_missing(row["channels_interpolated"])
            else float(len(row["channels_interpolated"].split(",")))
            for row in rows
        ]
    )
    ages = None if "age" not in rows[0] else [demographics.age_value(row["age"]) for row in rows]
    crop = data.preprocess.crop_s if data.preprocess else None
    duration = _column_variable(rows, "duration_s", "recording duration, s", kind="numeric")
    if crop is not None and duration.values is not None:  # what the tokens were computed on
        duration = Variable(
            "duration_s",
            f"recording duration analysed (--crop {crop:g}), s",
            "numeric",
            [min(value, crop) for value in duration.values],
        )
    return [
        duration,
        _column_variable(rows, "n_segments", "segments kept", kind="numeric"),
        _column_variable(rows, "source_sfreq", "original sampling rate, Hz", kind="categorical"),
        Variable("n_channels_interpolated", "interpolated channels", "numeric", interpolated),
        Variable(
            "input_folder",
            "input folder (site)",
            "categorical",
            _input_folders(rows, data.preprocess.inputs if data.preprocess else None),
        ),
        Variable("age", "age, years", "numeric", ages),
        _column_variable(rows, "sex", "sex", kind="categorical"),
        *(
            [_column_variable(rows, "task", "BIDS task", kind="categorical")]
            if "task" in rows[0] and data.label_column != "task"
            else []
        ),
    ]


def _column_variable(
    rows: list[dict],
    column: str,
    description: str,
    source: str = "manifest",
    kind: str | None = None,
) -> Variable:
    """A manifest column as a variable: numeric when ``kind`` says so or (``kind`` None) when
    every known value is a number, else categorical; values None when the column is absent."""
    if column not in rows[0]:
        return Variable(column, description, kind or "numeric", None, source)
    texts = [row[column] for row in rows]
    known = [text for text in texts if not demographics.is_missing(text)]
    if kind is None:
        kind = "numeric" if all(_is_number(text) for text in known) else "categorical"
    values: list[float] | list[str]
    if kind == "numeric":
        values = [
            float("nan") if demographics.is_missing(text) or not _is_number(text) else float(text)
            for text in texts
        ]
    else:
        values = [MISSING if demographics.is_missing(text) else text.strip() for text in texts]
    return Variable(column, description, kind, values, source)


def _is_number(text: str) -> bool:
    try:
        return np.isfinite(float(text))
    except ValueError:
        return False


def _input_folders(rows: list[dict], inputs: list[str] | None) -> list[str] | None:
    """The ``preprocess`` input folder holding each recording (a file input: its folder), from
    ``preprocess.json``'s inputs (absolute; older folders' relative ones are taken from the
    current folder) and the manifest's ``source_file``; ``n/a`` where none holds it, None when
    either is not recorded."""
    if not inputs or "source_file" not in rows[0]:
        return None
    # the innermost input wins (``preprocess data/ data/site2/`` puts site2's files in site2)
    roots = sorted(
        {input_folder(name) for name in inputs}, key=lambda root: len(root.parts), reverse=True
    )
    return [
        next(
            (str(root) for root in roots if Path(row["source_file"]).is_relative_to(root)), MISSING
        )
        for row in rows
    ]


def _audit_folds(
    data: TrainingData, folds: list[splits.Fold], scheme: dict, config: TrainConfig
) -> tuple[list[splits.Fold], str]:
    """The folds of the audit: the run's own, or for a holdout run a participant-wise
    ``config.cv``-fold CV of all participants (seed ``config.seed``), since one split gives
    no interval; the holdout split itself when the data are too few for that CV."""
    wise = splits.unit_wise(scheme)
    if scheme.get("kind") != "holdout":
        return folds, f"the run's {len(folds)} {wise} folds"
    groups = np.array([rec.participant_id for rec in data.recordings])
    try:
        cv_folds = splits.cross_validation_folds(
            groups, data.label_indices(), config.cv, 1, config.seed, config.val_fraction
        )
    except InputDataError:
        return folds, "the holdout split (too few participants for a CV: no interval)"
    return cv_folds, (
        f"a {wise} {config.cv}-fold CV of all participants (seed "
        f"{config.seed}; the holdout split alone would give no interval)"
    )


# ------------------------------------------------------------------------------------------
# the audit


def run_audit(plan: AuditPlan, positive_label: str | None) -> ShortcutAudit:
    """Check every variable of ``plan``; warn (one line each) about the flagged ones and
    return the ``metrics.json`` entry ``shortcut_audit`` (module docstring; None where a
    figure is undefined)."""
    data = plan.data
    labels = data.label_indices()
    positive = None if positive_label is None else data.label_names.index(positive_label)
    # one BLAS thread: faster for these tiny fits than OpenBLAS's threads
    with threadpool_limits(limits=1):
        entries = [
            AuditVariable.from_dict(_audit_variable(variable, plan, labels, positive))
            for variable in plan.variables
        ]
    entries.sort(
        key=lambda e: (
            STATUS_ORDER.index(e.status),
            -(e.auroc.mean or 0.0) if e.auroc else 0.0,
        )
    )
    flagged = [entry for entry in entries if entry.status == "flagged"]
    durations = next((v.values for v in plan.variables if v.name == "duration_s"), None)
    for entry in entries:
        if entry.status not in ("flagged", "borderline"):
            continue
        named = (
            entry.name if entry.description == entry.name else f"{entry.name} ({entry.description})"
        )
        what = "shortcut: " if entry.status == "flagged" else "possible shortcut (borderline): "
        how = "alone predicts" if entry.status == "flagged" else "weakly predicts"
        remedy = f"; {length_remedy(durations)}" if entry.name in LENGTH_VARIABLES else ""
        warn(
            f"{what}{named} {how} {data.label_column!r} "
            f"({describe_figure(entry)}); the models may score on it rather than on the EEG "
            f"(see shortcut_audit in metrics.json and the report){remedy}"
        )
    return ShortcutAudit(
        folds=plan.folds_description,
        n_folds=len(plan.folds),
        model="class-balanced logistic regression on the variable alone, fit on each "
        "fold's train + val participants, scored per recording on its test "
        "participants",
        interval="95 % corrected resampled t-test over folds against chance (Nadeau & "
        "Bengio 2003), as the model comparison; n/a when every fold gives the same "
        f"value (then a permutation test, {N_PERMUTATIONS} permutations)",
        rule=f"flagged when AUROC >= {AUROC_FLAG} and the interval's lower bound is above 0.5 "
        f"(or, with no interval, the permutation p < {SIGNIFICANCE}); borderline when "
        f"beyond chance so but AUROC < {AUROC_FLAG}; checked otherwise",
        flagged=[entry.name for entry in flagged],
        borderline=[entry.name for entry in entries if entry.status == "borderline"],
        variables=entries,
    )


def _audit_variable(
    variable: Variable, plan: AuditPlan, labels: np.ndarray, positive: int | None
) -> dict:
    entry: dict[str, object] = {
        "name": variable.name,
        "description": variable.description,
        "kind": variable.kind,
        "source": variable.source,
        "status": None,
        "reason": None,
        "by_class": None,
        "bac": None,
        "auroc": None,
        "per_fold": None,
    }
    if variable.values is None:
        return {**entry, "status": "not recorded"}
    values = variable.values
    known = [v for v in values if not demographics.is_missing(v)]
    entry["by_class"] = _by_class(variable, plan.data.label_names, labels)
    if not known:
        return {**entry, "status": "unknown"}
    if len(known) == len(values) and len(set(known)) == 1:
        return {**entry, "status": "constant"}
    per_fold = _fold_metrics(variable, plan, labels, positive)
    n_classes = len(plan.data.label_names)
    ratio = splits.test_train_ratio(plan.folds)
    bac = against_chance(per_fold, "bac", 1.0 / n_classes, ratio)
    auroc = against_chance(per_fold, "auroc", 0.5, ratio)
    candidate = bool(np.isfinite(auroc["mean"]) and auroc["mean"] >= AUROC_FLAG)
    if candidate and not np.isfinite(auroc["ci95"][0]):
        auroc["p_value"] = _permutation_p_value(variable, plan, positive, auroc["mean"])
        auroc["test"] = (
            f"permutation test ({N_PERMUTATIONS} label permutations on the same "
            "folds; no spread over folds for an interval)"
        )
    beyond_chance = bool(
        auroc["ci95"][0] > 0.5
        if np.isfinite(auroc["ci95"][0])
        else np.isfinite(auroc["p_value"]) and auroc["p_value"] < SIGNIFICANCE
    )
    status = (
        "flagged" if candidate and beyond_chance else "borderline" if beyond_chance else "checked"
    )
    return {
        **entry,
        "status": status,
        "reason": _reason(status, auroc, candidate),
        "bac": bac,
        "auroc": auroc,
        "per_fold": [
            {"repeat": f.repeat, "fold": f.fold, "bac": f.bac, "auroc": f.auroc} for f in per_fold
        ],
    }


def _reason(status: str, auroc: dict, candidate: bool) -> str:
    """Why a variable got its status, in words."""
    interval = np.isfinite(auroc["ci95"][0])
    evidence = (
        "its interval lies above chance (0.5)" if interval else f"permutation p < {SIGNIFICANCE}"
    )
    if status == "flagged":
        return f"AUROC >= {AUROC_FLAG} and {evidence}"
    if status == "borderline":
        return (
            f"predicts the label beyond chance ({evidence}) but its AUROC is below "
            f"{AUROC_FLAG}: a weak shortcut the models may still use"
        )
    if candidate:
        return f"AUROC >= {AUROC_FLAG} but not beyond chance on these folds"
    return (
        f"AUROC below {AUROC_FLAG} and not beyond chance (interval reaches 0.5)"
        if interval
        else f"AUROC below {AUROC_FLAG}"
    )


def _permutation_p_value(
    variable: Variable, plan: AuditPlan, positive: int | None, observed: float
) -> float:
    """p of the mean AUROC ``observed`` against the one-variable model refit on
    :data:`N_PERMUTATIONS` permutations of the labels on the same folds."""
    index = {name: i for i, name in enumerate(plan.data.label_names)}
    null = []
    for permutation in range(N_PERMUTATIONS):
        labels = permuted_labels(plan.data, plan.folds, plan.seed, permutation)
        per_fold = _fold_metrics(
            variable, plan, np.array([index[label] for label in labels]), positive
        )
        values = [
            fold.auroc for fold in per_fold if fold.auroc is not None and np.isfinite(fold.auroc)
        ]
        # undefined when every test fold lacks a class: counted as reaching (conservative)
        null.append(np.mean(values) if values else np.inf)
    return p_value(null, observed)


def _fold_metrics(
    variable: Variable, plan: AuditPlan, labels: np.ndarray, positive: int | None
) -> list[FoldScores]:
    """BAC and AUROC of the one-variable model on each fold's test recordings."""
    participants = np.array([rec.participant_id for rec in plan.data.recordings])
    n_classes = len(plan.data.label_names)
    if variable.kind == "numeric":
        x = np.asarray(variable.values, dtype=float).reshape(-1, 1)
    else:
        x = np.asarray(variable.values, dtype=object).reshape(-1, 1)
    per_fold = []
    with warnings.catch_warnings():  # a column unknown in a whole training part, a tiny fit
        warnings.filterwarnings("ignore", category=UserWarning, module=r"sklearn\.")
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        for fold in plan.folds:
            per_fold.append(
                _fold_metric(variable, fold, x, participants, labels, positive, n_classes)
            )
    return per_fold


def _fold_metric(
    variable: Variable,
    fold: splits.Fold,
    x: np.ndarray,
    participants: np.ndarray,
    labels: np.ndarray,
    positive: int | None,
    n_classes: int,
) -> FoldScores:
    """BAC and AUROC of the one-variable model fit on ``fold``'s training part, on its test
    recordings (chance probabilities when the training part holds one class)."""
    fit = np.isin(participants, fold.train + fold.val)
    test = np.isin(participants, fold.test)
    probabilities = np.full((int(test.sum()), n_classes), 1.0 / n_classes)
    if len(np.unique(labels[fit])) > 1:
        model = _one_variable_model(variable.kind).fit(x[fit], labels[fit])
        probabilities[:] = 0.0
        probabilities[:, model.classes_] = model.predict_proba(x[test])
    scores = classification_metrics(labels[test], probabilities, positive)
    return FoldScores(repeat=fold.repeat, fold=fold.fold, bac=scores.bac, auroc=scores.auroc)


def _one_variable_model(kind: str):
    """An unfitted scikit-learn pipeline for one numeric or categorical column."""
    if kind == "numeric":
        encode = [SimpleImputer(strategy="median", add_indicator=True), StandardScaler()]
    else:
        encode = [OneHotEncoder(handle_unknown="ignore")]
    return make_pipeline(*encode, LogisticRegression(class_weight="balanced", max_iter=1000))


def _by_class(variable: Variable, label_names: list[str], labels: np.ndarray) -> dict:
    """Per class: numeric -> median, min, max and unknown count; categorical -> counts per
    level (``n/a`` included)."""
    summary = {}
    values = np.asarray(variable.values, dtype=float if variable.kind == "numeric" else object)
    for index, name in enumerate(label_names):
        members = values[labels == index]
        if variable.kind == "numeric":
            known = members[np.isfinite(members)]
            summary[name] = (
                {
                    "median": float(np.median(known)),
                    "min": float(known.min()),
                    "max": float(known.max()),
                    "unknown": int(len(members) - len(known)),
                }
                if len(known)
                else {"unknown": len(members)}
            )
        else:
            levels, counts = np.unique(members.astype(str), return_counts=True)
            summary[name] = {str(level): int(count) for level, count in zip(levels, counts)}
    return summary


# ------------------------------------------------------------------------------------------
# words for people


def describe_figure(entry: AuditVariable) -> str:
    """``"AUROC 0.71, 95 % CI 0.58 to 0.84; BAC 0.66"``, or ``"AUROC 1.00 on all 5 folds,
    permutation p = 0.01; BAC 1.00"`` when the folds agree (no interval), from an audited
    variable (NaN or None where unknown)."""
    auroc, bac = entry.auroc, entry.bac
    if auroc is None or bac is None:
        return ""

    def number(value) -> str:
        return "n/a" if value is None or not np.isfinite(value) else f"{value:.2f}"

    low, high = auroc.ci95
    if low is not None and np.isfinite(low):
        how = f", 95 % CI {number(low)} to {number(high)}"
    else:
        folds = f"all {auroc.n_folds} folds" if (auroc.n_folds or 0) > 1 else "1 fold"
        how = (
            f" on {folds}, permutation p = {auroc.p_value:.2g}"
            if (auroc.test or "").startswith("permutation")
            else f" on {folds}, no interval"
        )
    return f"AUROC {number(auroc.mean)}{how}; BAC {number(bac.mean)}"


def describe_by_class(entry: AuditVariable) -> str:
    """``"rest: 182 (170-182); arithmetic: 62 (62-62)"`` (numeric: median (min-max)) or
    ``"healthy: 10 x F, 29 x M; ..."`` (categorical), from an audited variable."""
    parts = []
    for name, summary in (entry.by_class or {}).items():
        if entry.kind == "numeric":
            text = (
                "n/a"
                if "median" not in summary
                else f"{summary['median']:g} ({summary['min']:g}-{summary['max']:g})"
            )
            if summary["unknown"] and "median" in summary:
                text += f", n/a {summary['unknown']}"
        else:
            text = ", ".join(f"{count} x {level}" for level, count in summary.items())
        parts.append(f"{name}: {text}")
    return "; ".join(parts)


def describe_audit(audit: ShortcutAudit) -> str:
    """One line for ``train``'s summary: the flagged variables with their figures, then the
    others by status."""
    graded = []
    for status in ("flagged", "borderline"):
        parts = [f"{e.name} ({describe_figure(e)})" for e in audit.variables if e.status == status]
        if parts:
            graded.append(f"{status} " + ", ".join(parts))
    flagged = "; ".join(graded) or "no variable predicts the label alone"
    others = [
        f"{status} " + ", ".join(e.name for e in audit.variables if e.status == status)
        for status in STATUS_ORDER[2:]
        if any(e.status == status for e in audit.variables)
    ]
    return "shortcut audit: " + "; ".join([flagged, *others])
