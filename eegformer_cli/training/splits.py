"""Participant-wise splits: cross-validation, holdout, inner validation; splits.json.

Every split is made on participants, never on recordings or segments: scikit-learn's
``StratifiedGroupKFold`` runs over recordings with the participant as the group, so a
participant's recordings are always on one side, and the label proportions are kept as well
as the groups allow (for one recording per participant it is a stratified k-fold on
participants). A recording without a participant id counts as its own participant (the dataset
loader gives it its recording id), which cannot keep a person's recordings together: a run
with such recordings is refused unless recording-wise splits are asked for
(:func:`split_unit`), and then the scheme's ``unit`` says ``recording``.

Each fold has three disjoint participant sets: ``train`` (fit), ``val`` (model selection and
early stop, an inner split of the outer training part) and ``test`` (never seen until the
fold's final evaluation). Splits too small for the data raise an InputDataError saying which
split, which participants (the data, or a fold's training part) and the real counts; test or
validation sets that lack a class (a small class) are reported once, in one warning line
(:func:`warn_missing_classes`), instead of scikit-learn's warnings.

Seeds: repeat ``r`` of a CV shuffles with ``seed + r``; the inner validation split of fold
``k`` of repeat ``r`` uses ``seed + 1000 * (r + 1) + k``, so every fold is reproducible alone.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from sklearn.model_selection import StratifiedGroupKFold

from eegformer_cli.atomic import write_json
from eegformer_cli.console import log, warn
from eegformer_cli.errors import InputDataError, UsageError, check_choice, first_few

SPLITS_FORMAT = "eegformer-splits"
#: What the splits keep on one side (``train --split-by``): every recording of a participant,
#: or (when participants are unknown) only each recording.
SPLIT_UNITS = ("participant", "recording")
# what to do when an inner validation split has too few participants (after "use ...")
VAL_FRACTION_REMEDY = "a larger val_fraction, up to 0.5, in a --config file, or a larger dataset"


@dataclass
class Fold:
    """One outer split; the lists hold participant ids (sorted). ``seed``: the seed of the
    fold's model, shuffling and augmentation when a splits file gives one (e.g. the
    ``random_state`` of the scikit-learn estimator, to reproduce its fits); None: the run's
    ``fit.fold_seed``."""

    repeat: int
    fold: int
    train: list[str]
    val: list[str]
    test: list[str]
    seed: int | None = None

    @property
    def name(self) -> str:
        """``r{repeat}_f{fold}``, used for file names."""
        return f"r{self.repeat}_f{self.fold}"

    def record(self) -> dict:
        """The fold as ``splits.json`` holds it (``seed`` only when it has one, so the folds of
        runs without one read as they always did)."""
        record = asdict(self)
        if self.seed is None:
            del record["seed"]
        return record


def split_unit(without_participant: list[str], n_recordings: int, split_by: str, where) -> str:
    """The unit of a run's splits: ``"participant"`` when every usable recording has a
    participant id, ``"recording"`` when some do not (``without_participant``: their recording
    ids, of ``n_recordings``) and ``split_by`` is ``"recording"``.

    Raises InputDataError naming the ways out when recordings lack a participant and
    ``split_by`` is ``"participant"`` (``where``: the manifest), UsageError for another
    ``split_by``.
    """
    check_choice("--split-by", split_by, SPLIT_UNITS)
    if not without_participant:
        if split_by == "recording":
            log(
                "train: every recording has a participant id, so the splits keep each "
                "participant's recordings together (participant-wise) all the same"
            )
        return "participant"
    shown = first_few(without_participant)
    if split_by == "participant":
        raise InputDataError(
            f"{len(without_participant)} of {n_recordings} usable recordings have no "
            f"participant id ({shown}), so participant-wise splits cannot keep a person's "
            "recordings on one side",
            path=where,
            hint="rerun eegformer preprocess with --participant-pattern REGEX, a participant_id "
            "column in recordings.tsv or file names participants.tsv lists; or pass "
            "--split-by recording to accept recording-wise splits, whose scores may be "
            "optimistic",
        )
    warn(
        f"recording-wise splits: {len(without_participant)} of {n_recordings} recordings "
        f"have no participant id ({shown}) and each counts as a participant of its own, so "
        "two recordings of one person may be on both sides of a split and the scores may "
        "be optimistic"
    )
    return "recording"


def unit_wise(scheme: dict | None) -> str:
    """``"participant-wise"`` or ``"recording-wise"``: the ``unit`` of a ``splits.json``
    scheme (runs of earlier versions: participant)."""
    return f"{(scheme or {}).get('unit', 'participant')}-wise"


def _group_split(
    groups: np.ndarray,
    labels: np.ndarray,
    n_splits: int,
    seed: int,
    what: str,
    where: str,
    hint: str,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """StratifiedGroupKFold on recordings; returns (train_idx, test_idx) pairs.

    ``what`` names the split and ``where`` the participants it divides (e.g. "the data"), for
    the InputDataError raised when they are too few for ``n_splits``; ``hint`` says what to do.
    scikit-learn's warning about a class with fewer members than folds is not shown:
    :func:`warn_missing_classes` says once what it means for the folds actually made.
    """
    n_groups = len(np.unique(groups))
    if n_groups < n_splits:
        raise InputDataError(
            f"{what} needs at least {n_splits} participants but {where} has {n_groups}", hint=hint
        )
    largest_class = int(np.unique(labels, return_counts=True)[1].max())
    if largest_class < n_splits:  # StratifiedGroupKFold's own ValueError, said for the user
        raise InputDataError(
            f"{what} needs at least {n_splits} recordings of one class but the "
            f"largest class in {where} has {largest_class}",
            hint=hint,
        )
    splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        return list(splitter.split(np.zeros(len(groups)), labels, groups))


def _fraction_split(
    groups: np.ndarray,
    labels: np.ndarray,
    fraction: float,
    seed: int,
    what: str,
    setting: str,
    where: str,
    hint: str,
) -> tuple[list[str], list[str]]:
    """Split participants into (rest, part) with about ``fraction`` of them in ``part``: the
    first fold of a ``round(1 / fraction)``-fold StratifiedGroupKFold. ``what`` names the
    split, ``setting`` the option giving ``fraction``; ``where`` and ``hint``: as
    :func:`_group_split`."""
    n_splits = max(2, int(round(1.0 / fraction)))
    described = f"{what} ({setting} {fraction:g}: 1 participant in {n_splits})"
    rest_idx, part_idx = _group_split(groups, labels, n_splits, seed, described, where, hint)[0]
    return sorted(set(groups[rest_idx])), sorted(set(groups[part_idx]))


def inner_validation_split(
    groups: np.ndarray,
    labels: np.ndarray,
    fraction: float,
    seed: int,
    where: str = "the data",
    hint: str = "use " + VAL_FRACTION_REMEDY,
) -> tuple[list[str], list[str]]:
    """Split participants into (train, val) with about ``fraction`` of them in val.

    ``groups`` (n_recordings,) participant ids, ``labels`` (n_recordings,) labels; ``where``
    names these participants and ``hint`` says what to do, for the InputDataError raised
    when they are too few.
    """
    return _fraction_split(
        groups, labels, fraction, seed, "the validation split", "val_fraction", where, hint
    )


def cross_validation_folds(
    groups: np.ndarray,
    labels: np.ndarray,
    n_splits: int,
    repeats: int,
    seed: int,
    val_fraction: float,
) -> list[Fold]:
    """Repeated stratified k-fold over participants, with an inner validation split per fold.

    ``groups`` (n_recordings,) participant ids; ``labels`` (n_recordings,) labels.
    """
    groups, labels = np.asarray(groups), np.asarray(labels)
    n_participants = len(np.unique(groups))
    inner_hint = "use " + ("fewer --cv folds, " if n_splits > 2 else "") + VAL_FRACTION_REMEDY
    folds = []
    for repeat in range(repeats):
        pairs = _group_split(
            groups,
            labels,
            n_splits,
            seed + repeat,
            f"{n_splits}-fold CV",
            "the data",
            "use fewer --cv folds or a larger dataset",
        )
        for k, (train_idx, test_idx) in enumerate(pairs):
            test = sorted(set(groups[test_idx]))
            where = (
                f"the training part of CV fold {k} (all {n_participants} participants "
                f"but the {len(test)} of its test fold)"
            )
            train, val = inner_validation_split(
                groups[train_idx],
                labels[train_idx],
                val_fraction,
                seed + 1000 * (repeat + 1) + k,
                where,
                inner_hint,
            )
            folds.append(Fold(repeat, k, train, val, test))
    return folds


def holdout_fold(
    groups: np.ndarray, labels: np.ndarray, fraction: float, seed: int, val_fraction: float
) -> Fold:
    """One split with about ``fraction`` of the participants held out for test."""
    groups, labels = np.asarray(groups), np.asarray(labels)
    rest, test = _fraction_split(
        groups,
        labels,
        fraction,
        seed,
        "the test set",
        "--holdout",
        "the data",
        "use a larger --holdout or a larger dataset",
    )
    in_rest = np.isin(groups, rest)
    where = (
        f"the training part (all {len(rest) + len(test)} participants but the {len(test)} held out)"
    )
    train, val = inner_validation_split(
        groups[in_rest],
        labels[in_rest],
        val_fraction,
        seed + 1000,
        where,
        "use a smaller --holdout, " + VAL_FRACTION_REMEDY,
    )
    return Fold(0, 0, train, val, test)


def final_fit_split(groups: np.ndarray, labels: np.ndarray, seed: int, val_fraction: float) -> Fold:
    """The split for the final model after CV: all participants, an inner validation for
    selection, no test set."""
    train, val = inner_validation_split(
        np.asarray(groups), np.asarray(labels), val_fraction, seed + 999
    )
    return Fold(-1, -1, train, val, [])


def test_train_ratio(folds: list[Fold]) -> float:
    """The mean over ``folds`` of test participants / training (train + val) participants: the
    correction of the corrected resampled t-test (:func:`metrics.compare_folds`)."""
    return float(np.mean([len(fold.test) / (len(fold.train) + len(fold.val)) for fold in folds]))


def warn_missing_classes(
    folds: list[Fold], groups: np.ndarray, labels: np.ndarray, label_names: list[str]
) -> None:
    """One warning line when test or validation sets of ``folds`` lack a class.

    ``groups`` (n_recordings,) participant ids, ``labels`` (n_recordings,) class indices into
    ``label_names``. A set without some class still gets a BAC (over the classes present) but
    no AUROC / AUC-PR, and a validation set without it selects the epoch blind to it.
    """
    groups, labels = np.asarray(groups), np.asarray(labels)
    n_classes = len(np.unique(labels))

    def lacking(sets: list[list[str]]) -> int:
        return sum(len(np.unique(labels[np.isin(groups, s)])) < n_classes for s in sets)

    tests, vals = [f.test for f in folds if f.test], [f.val for f in folds]
    test, val = lacking(tests), lacking(vals)
    if not test and not val:
        return
    participants = {int(c): len(np.unique(groups[labels == c])) for c in np.unique(labels)}
    smallest = min(participants, key=participants.__getitem__)
    warn(
        f"{test} of {len(tests)} test set(s) and {val} of {len(vals)} validation set(s) lack "
        f"a class (the smallest, {label_names[smallest]!r}, has {participants[smallest]} "
        "participants): BAC there averages the classes present, AUROC and AUC-PR are n/a, "
        "and epoch selection ignores the missing class (use fewer --cv folds, a larger "
        "--holdout or val_fraction, or more participants of that class)"
    )


def save_splits(path: str | Path, scheme: dict, folds: list[Fold]) -> None:
    """Write ``splits.json``: ``{"format", "scheme", "folds": [{repeat, fold, train, val, test
    [, seed]}]}``."""
    write_json(
        path,
        {"format": SPLITS_FORMAT, "scheme": scheme, "folds": [fold.record() for fold in folds]},
    )


def load_splits(path: str | Path) -> tuple[dict, list[Fold]]:
    """Read a ``splits.json``; raise UsageError naming the file when it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        folds = [
            Fold(
                int(f["repeat"]),
                int(f["fold"]),
                [str(p) for p in f["train"]],
                [str(p) for p in f["val"]],
                [str(p) for p in f["test"]],
                None if f.get("seed") is None else int(f["seed"]),
            )
            for f in data["folds"]
        ]
        scheme = dict(data.get("scheme", {}))
    except FileNotFoundError:
        raise UsageError("splits file not found", path=path, hint="check --splits") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(
            "not a splits.json written by eegformer train",
            path=path,
            hint="pass the splits.json of an earlier run",
        ) from None
    if not folds:
        raise UsageError("splits file has no folds", path=path)
    return scheme, folds


def check_folds(folds: list[Fold], participants: set[str], source: str) -> list[Fold]:
    """Validate ``folds`` against the participants present in the data.

    Every fold must put each participant of the data in exactly one of train/val/test, and
    no participant may be in two of them. Participants named in the splits but absent from
    the data (e.g. their recordings failed preprocessing) are dropped with a warning.
    Returns the folds restricted to ``participants``. Raises InputDataError naming ``source``.
    """
    extra = set()
    checked = []
    for fold in folds:
        parts = [set(fold.train), set(fold.val), set(fold.test)]
        if parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2]:
            raise InputDataError(
                f"fold {fold.name} puts a participant in two of train/val/test", path=source
            )
        missing = participants - set().union(*parts)
        if missing:
            raise InputDataError(
                f"fold {fold.name} does not cover participants "
                f"{', '.join(sorted(missing)[:5])}" + (" ..." if len(missing) > 5 else ""),
                path=source,
                hint="make new splits (drop --splits) for this data",
            )
        extra |= set().union(*parts) - participants
        train, val, test = (sorted(p & participants) for p in parts)
        checked.append(Fold(fold.repeat, fold.fold, train, val, test, fold.seed))
    if extra:
        warn(
            f"{source}: {len(extra)} participant(s) in the splits have no usable recording "
            f"and are ignored: {', '.join(sorted(extra)[:5])}"
        )
    for fold in checked:
        if not fold.train or not fold.val:
            raise InputDataError(
                f"fold {fold.name} has an empty training or validation set", path=source
            )
    return checked
