"""The ``eegformer`` commands as Python functions: the CLI's options are keyword arguments.

``eegformer preprocess|train|predict|explain|report`` parse their flags and call these
functions, then print what they return; so a script can run the whole chain, and everything the
CLI does is reachable from Python. Bad input raises the exception of
:mod:`eegformer_cli.errors` that gives the CLI its exit code, with the message the CLI prints.

Each parameter's text is the one ``--help`` shows for the option (both come from
:mod:`eegformer_cli.option_docs`). Imports of MNE, torch and scikit-learn happen inside the
functions, so importing this module is cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eegformer_cli.choices import (
    DEFAULT_DEVICE,
    DEFAULT_METHOD,
    DEFAULT_N_STEPS,
    DEFAULT_PRECISION,
    DEFAULT_PRESET,
)
from eegformer_cli.errors import UsageError
from eegformer_cli.option_docs import EXPLAIN, PREDICT, PREPROCESS, REPORT, TRAIN, document

if TYPE_CHECKING:  # the results' types; importing them at run time would load numpy
    from eegformer_cli.evaluation.run_metrics import RunMetrics
    from eegformer_cli.training.fold_record import FoldRecord

PathLike = str | os.PathLike


def _paths(inputs: PathLike | Sequence[PathLike]) -> list[Path]:
    """One path or a list of them -> a list of Paths."""
    if isinstance(inputs, (str, os.PathLike)):
        return [Path(inputs)]
    return [Path(entry) for entry in inputs]


def _names(value: str | Sequence[str] | None) -> list[str] | None:
    """``"Fp1, Fp2"`` or ``["Fp1", "Fp2"]`` -> ``["Fp1", "Fp2"]``; None stays None."""
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [str(part).strip() for part in parts if str(part).strip()]


def _epoch_length(value: float | str | None) -> float | str | None:
    """``--epoch-length``: None, ``"auto"`` or seconds (a number or its text)."""
    if value is None or value == "auto":
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"invalid --epoch-length {value!r}; give 'auto' or seconds, e.g. 30"
        ) from None


@document(PREPROCESS)
def preprocess(
    inputs: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    participants: PathLike | None = None,
    recordings: PathLike | None = None,
    preset: str = DEFAULT_PRESET,
    channels: str | Sequence[str] | None = None,
    max_interpolated: int | None = None,
    bands: str | None = None,
    epoch_length: float | str | None = None,
    sfreq: float | None = None,
    ica: bool | None = None,
    n_jobs: int = 1,
    strict: bool = False,
    backend: str = "local",
    scheduler: str | None = None,
    overwrite: bool = False,
    crop: float | None = None,
    participant_pattern: str | None = None,
    task: str | Sequence[str] | None = None,
    session: str | Sequence[str] | None = None,
    run: str | Sequence[str] | None = None,
):
    """Turn EEG recordings into band-wise connectivity tokens (``eegformer preprocess``).

    Returns
    -------
    PreprocessSummary
        Counts (``n_recordings``, ``n_ok``, ``n_error``, ``n_skipped``), the channels, the
        epoch length and the paths of the outputs.

    Raises
    ------
    UsageError, InputDataError, OutputError, PartialFailure
        As the CLI's exit codes 2, 3, 5 and 6.
    """
    from eegformer_cli.connectivity.bands import parse_bands
    from eegformer_cli.preprocess.run import run_preprocess
    from eegformer_cli.preprocess.settings import PreprocessSettings
    from eegformer_cli.recordings.bids import Selection

    channel_names = _names(channels)
    overrides = {
        "channels": None if channel_names is None else tuple(channel_names),
        "max_interpolated": max_interpolated,
        "bands": None if bands is None else parse_bands(bands),
        "epoch_length": _epoch_length(epoch_length),
        "sfreq": sfreq,
        "ica": ica,
        "crop_s": crop,
    }
    settings = PreprocessSettings.from_preset(
        preset, **{key: value for key, value in overrides.items() if value is not None}
    )
    return run_preprocess(
        _paths(inputs),
        Path(out),
        settings,
        participants=participants,
        recordings_table=recordings,
        n_jobs=n_jobs,
        strict=strict,
        overwrite=overwrite,
        participant_pattern=participant_pattern,
        backend=backend,
        scheduler=scheduler,
        selection=Selection.of(_names(task), _names(session), _names(run)),
    )


#: ``train``'s settings that ``merge`` takes from the run folder instead, with their defaults
#: (the options, then the argument DATA_DIR, as the refusal names them).
_TRAINING_SETTINGS = {
    "out": None,
    "label_column": None,
    "preset": DEFAULT_PRESET,
    "config": None,
    "cv": None,
    "repeats": None,
    "holdout": None,
    "splits": None,
    "epochs": None,
    "batch_size": None,
    "lr": None,
    "patience": None,
    "seed": None,
    "device": None,
    "precision": None,
    "no_xai": False,
    "no_interactions": False,
    "no_age_interactions": False,
    "frequency_encoding": None,
    "positive_label": None,
    "overwrite": False,
    "fold": None,
    "split_by": "participant",
    "data_dir": None,
}


def _refuse_settings_beside_merge(settings: dict) -> None:
    """UsageError naming the training settings given (not at their defaults) beside ``merge``,
    as the CLI spells them: a merged run's settings come from its folder. The one check of it,
    for the CLI and Python alike."""
    given = [name for name in _TRAINING_SETTINGS if settings[name] != _TRAINING_SETTINGS[name]]
    if given:
        raise UsageError(
            "--merge takes every training setting from RUN_DIR/config.json; remove "
            + ", ".join(
                name.upper() if name == "data_dir" else "--" + name.replace("_", "-")
                for name in given
            )
        )


@document(TRAIN)
def train(
    data_dir: PathLike | None = None,
    out: PathLike | None = None,
    label_column: str | None = None,
    *,
    preset: str = DEFAULT_PRESET,
    config: PathLike | None = None,
    cv: int | None = None,
    repeats: int | None = None,
    holdout: float | None = None,
    splits: PathLike | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    patience: int | None = None,
    seed: int | None = None,
    device: str | None = None,
    precision: str | None = None,
    no_xai: bool = False,
    no_interactions: bool = False,
    no_age_interactions: bool = False,
    frequency_encoding: str | None = None,
    positive_label: str | None = None,
    n_jobs: int = 1,
    overwrite: bool = False,
    fold: int | None = None,
    merge: PathLike | None = None,
    confounds: str | Sequence[str] | None = None,
    permutations: int = 0,
    permutation_model: str = "reference",
    split_by: str = "participant",
    learning_curve: bool = False,
) -> RunMetrics | FoldRecord | None:
    """Cross-validate XAIguiFormer beside the reference models and write the final
    model file (``eegformer train``).

    Returns
    -------
    RunMetrics | FoldRecord | None
        ``metrics.json`` as typed metrics (``RunMetrics.to_dict()`` is the file's dict); with
        ``fold``, that fold's record (``folds/<name>.json``); None on torchrun processes other
        than rank 0.

    Raises
    ------
    UsageError, InputDataError, OutputError
        As the CLI's exit codes 2, 3 and 5.
    """
    from eegformer_cli.experiment.run import merge_run, run_training
    from eegformer_cli.training.config import ablation_flags, resolve_config

    columns = _names(confounds) or []
    if merge is not None:
        given = locals()  # every parameter of train, by name
        _refuse_settings_beside_merge({name: given[name] for name in _TRAINING_SETTINGS})
        return merge_run(
            Path(merge), columns, permutations, permutation_model, n_jobs, learning_curve
        )
    if data_dir is None or out is None or label_column is None:
        raise _missing(data_dir, out, label_column)
    _check_scheme(cv, repeats, holdout, splits)
    flags = {
        "cv": cv,
        "repeats": repeats,
        "holdout": holdout,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "patience": patience,
        "seed": seed,
        "device": device,
        "precision": precision,
        **ablation_flags(no_xai, no_interactions, no_age_interactions, frequency_encoding),
    }
    return run_training(
        Path(data_dir),
        Path(out),
        label_column,
        resolve_config(preset, config, flags),
        splits_file=splits,
        positive_label=positive_label,
        overwrite=overwrite,
        fold_index=fold,
        n_jobs=n_jobs,
        confounds=columns,
        permutations=permutations,
        permutation_model=permutation_model,
        split_by=split_by,
        learning_curve=learning_curve,
    )


def _missing(
    data_dir: PathLike | None, out: PathLike | None, label_column: str | None
) -> UsageError:
    """The UsageError naming what a training run (not ``--merge``) misses of DATA_DIR,
    ``--out`` and ``--label-column``."""
    missing = [
        name
        for name, value in (
            ("DATA_DIR", data_dir),
            ("--out", out),
            ("--label-column", label_column),
        )
        if value is None
    ]
    return UsageError(f"missing {', '.join(missing)} (needed unless --merge RUN_DIR is given)")


def _check_scheme(
    cv: int | None, repeats: int | None, holdout: float | None, splits: PathLike | None
) -> None:
    """UsageError for a ``--holdout`` out of range or for two validation schemes at once
    (``--cv``/``--repeats``, ``--holdout``, ``--splits``)."""
    from eegformer_cli.training.config import check_holdout

    if holdout is not None:  # the flag: 0 is no scheme (in a config it means CV)
        check_holdout(holdout, "--holdout")
    if holdout is not None and (cv is not None or repeats is not None):
        raise UsageError("--holdout cannot be combined with --cv/--repeats; choose one scheme")
    if splits is not None and (holdout is not None or cv is not None or repeats is not None):
        raise UsageError("--splits replaces --cv/--repeats/--holdout; give only --splits")


@document(PREDICT)
def predict(
    model: PathLike,
    inputs: PathLike | Sequence[PathLike],
    *,
    participants: PathLike | None = None,
    age: float | None = None,
    sex: str | None = None,
    max_interpolated: int | None = None,
    device: str = DEFAULT_DEVICE,
    precision: str = DEFAULT_PRECISION,
    strict: bool = False,
    on_row: Callable[[dict], None] | None = None,
    coverage: float | None = None,
):
    """Predict the class of each recording with a trained model (``eegformer predict``).

    Returns
    -------
    pandas.DataFrame
        ``eegformer predict``'s rows (see :meth:`TrainedModel.predict
        <eegformer_cli.TrainedModel.predict>`, which also lists what is raised; ``device``
        and ``precision`` as in :func:`load_model <eegformer_cli.load_model>`).
    """
    from eegformer_cli.inference.trained_model import load_model

    return load_model(model, device, precision).predict(
        _paths(inputs),
        age,
        sex,
        participants=participants,
        max_interpolated=max_interpolated,
        strict=strict,
        on_row=on_row,
        coverage=coverage,
    )


@document(EXPLAIN)
def explain(
    model: PathLike,
    inputs: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    target: str | None = None,
    contrast: Sequence[str] | None = None,
    method: str = DEFAULT_METHOD,
    n_steps: int = DEFAULT_N_STEPS,
    all_heads: bool = False,
    participants: PathLike | None = None,
    max_interpolated: int | None = None,
    device: str = DEFAULT_DEVICE,
    strict: bool = False,
    overwrite: bool = False,
):
    """Explain a trained model's predictions and write the files of ``eegformer explain``.

    Into ``out``: per recording ``ID.npz`` and ``ID.json``; ``band_importance.csv``,
    ``attention.csv``, ``attention_diagnostics.csv``, ``channel_pairs.csv``,
    ``contrast_pairs.csv``, ``recordings.csv`` and ``class_summary.json/.npz``. What is
    raised: as :meth:`TrainedModel.explain <eegformer_cli.TrainedModel.explain>`.

    Returns
    -------
    Explanations
        The written numbers as tables and arrays (unrounded).
    """
    from eegformer_cli.inference.trained_model import check_explain_options, load_model

    check_explain_options(method, n_steps)  # before the model file is read, as the CLI
    return load_model(model, device).explain(
        _paths(inputs),
        participants=participants,
        target=target,
        contrast=contrast,
        method=method,
        n_steps=n_steps,
        all_heads=all_heads,
        max_interpolated=max_interpolated,
        strict=strict,
        out=out,
        overwrite=overwrite,
    )


@document(REPORT)
def report(
    run_dir: PathLike,
    *,
    explanations: PathLike | None = None,
    out: PathLike | None = None,
    band: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write one self-contained HTML report of a training run (``eegformer report``).

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    UsageError, InputDataError, OutputError
        ``out`` is a file eegformer did not write (without ``overwrite``), or ``band`` is not
        one of the explanations' bands; ``run_dir`` is not a run folder (or the explanations
        are another model's); the file cannot be written.
    """
    from eegformer_cli.overwrite_protection import claim_file
    from eegformer_cli.report.build import write_report

    out = Path(out) if out is not None else Path(run_dir) / "report.html"
    return write_report(
        Path(run_dir),
        None if explanations is None else Path(explanations),
        claim_file(out, overwrite),
        band=band,
    )
