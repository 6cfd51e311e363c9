"""Every option of the commands, documented once: the text of ``eegformer COMMAND --help`` and
the numpydoc "Parameters" of :mod:`eegformer_cli.commands`' functions come from these tables.

One table per command, parameter name -> :class:`Option` (its numpydoc type and its text).
``cli/`` gives Typer :meth:`Options.help`; :func:`document` writes the Parameters section of a
function's (or class's) docstring from the same table, so the CLI and the API cannot describe
an option differently. The texts spell options as the CLI does (``--n-jobs``); in Python that
is the keyword ``n_jobs``. Options of the CLI alone (``--format``, ``--json``) stay in ``cli/``.

Lists of choices are the tuples that check them, from :mod:`eegformer_cli.choices` (torch-free:
neither ``--help`` nor ``import eegformer_cli.commands`` should wait for torch, about 2 s).
"""

from __future__ import annotations

import inspect
import re
import textwrap
from dataclasses import dataclass

from eegformer_cli.choices import (
    CAPTUM_METHODS,
    DEVICES,
    FREQUENCY_ENCODING_BY_PRESET,
    FREQUENCY_ENCODINGS,
    PRECISIONS,
    PRESETS,
)
from eegformer_cli.training.config import TrainConfig

#: Width of the generated docstring lines, indentation included.
DOC_WIDTH = 92


@dataclass(frozen=True)
class Option:
    """One parameter: ``type`` as numpydoc writes it, ``text`` what it does (plain text)."""

    type: str
    text: str


class Options(dict):
    """A command's options: parameter name -> :class:`Option`."""

    def help(self, name: str) -> str:
        """The option's text for Typer's ``help=`` (rich markup: ``[`` escaped)."""
        return self[name].text.replace("[", "\\[")


def one_of(values: tuple[str, ...]) -> str:
    """``("a", "b", "c")`` -> ``"a, b or c"``."""
    return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]


def preset_default(field: str) -> str:
    """``[default: 40; paper preset: 100]``: a training setting's value in each preset (the
    options default to None, so that a ``--config`` file can set them too)."""
    values = {name: getattr(TrainConfig.preset_config(name), field) for name in PRESETS}
    return (
        "[default: "
        + str(values["default"])
        + "".join(
            f"; {name} preset: {value}" for name, value in values.items() if name != "default"
        )
        + "]"
    )


def document(table: Options):
    """Decorator: insert the numpydoc Parameters section of ``table`` into the docstring, in
    the order of the signature, before its first section (Returns, Raises, ...) or at its end,
    indented as those sections (a method's by 8 spaces).

    Raises TypeError when a parameter has no entry or an entry no parameter, so an option
    cannot go undocumented.
    """

    def decorate(obj):
        names = [name for name in inspect.signature(obj).parameters if name != "self"]
        if sorted(names) != sorted(table):
            raise TypeError(
                f"{obj.__qualname__}: parameters {sorted(set(names) ^ set(table))} "
                "are documented in eegformer_cli.option_docs or in the signature, not both"
            )
        doc = obj.__doc__
        heading = re.search(r"^( *)\w[\w ]*\n *-{3,}\n", doc, re.M)
        indent = heading.group(1) if heading else " " * 4  # a method's sections: 8 spaces
        lines = [f"{indent}Parameters", f"{indent}----------"]
        for name in names:
            lines.append(f"{indent}{name} : {table[name].type}")
            lines += textwrap.wrap(
                table[name].text,
                DOC_WIDTH,
                initial_indent=indent + " " * 4,
                subsequent_indent=indent + " " * 4,
                break_on_hyphens=False,
            )
        section = "\n".join(lines) + "\n\n"
        obj.__doc__ = (
            doc[: heading.start()] + section + doc[heading.start() :]
            if heading
            else doc.rstrip() + "\n\n" + section + indent
        )
        return obj

    return decorate


_DEVICES = one_of(DEVICES)
_PRECISIONS = one_of(PRECISIONS)

_INPUTS = (
    "Recordings (files or folders) or preprocess output folders; - reads paths from "
    "standard input, one per line."
)
_PARTICIPANTS = "Participants table for age and sex [default: participants.tsv beside the inputs]."
_MAX_INTERPOLATED = (
    "Most missing channels a raw recording may have interpolated [default: "
    "the model's preprocessing setting]."
)
_DEVICE = f"{_DEVICES}."

PREPROCESS = Options(
    inputs=Option(
        "path or list of paths",
        "Recording files (EDF, BDF, GDF, BrainVision, EEGLAB, FIF), folders or a BIDS root.",
    ),
    out=Option(
        "path",
        "Output folder (created; a rerun resumes): connectomes/RECORDING_ID.npz, "
        "manifest.tsv, preprocess.json.",
    ),
    participants=Option(
        "path | None",
        "Participants table (TSV or CSV) [default: participants.tsv at the dataset root].",
    ),
    recordings=Option(
        "path | None",
        "Recordings table (file, participant_id, per-recording "
        "columns) [default: recordings.tsv at the dataset root, if any].",
    ),
    preset=Option(
        "str",
        "Settings preset: default (128 Hz, 1-45 Hz, line noise removed, "
        "amplitude rejection, 8 bands) or paper (the steps of the paper's code: 250 Hz, ICA + "
        "ICLabel, 30 s epochs, 8 bands + theta/beta ratio).",
    ),
    channels=Option(
        "str | list of str | None",
        "Channels, in order, comma-separated (e.g. "
        "Fp1,Fp2,F3; in Python also a list) [default: the standard 10-20 channels "
        "every recording has].",
    ),
    max_interpolated=Option(
        "int | None", "Most missing channels a recording may have interpolated [default: 2]."
    ),
    bands=Option(
        "str | None",
        "Bands as NAME:LOW-HIGH (Hz), ratio tokens as "
        "NAME:LOW-HIGH/LOW-HIGH, comma-separated [default: the preset's].",
    ),
    epoch_length=Option(
        "float | str | None",
        "Segment length in s (a multiple of 3, at least "
        "6) or 'auto': one length for the run, 30 s or shorter so the shortest "
        "recording gives 4 segments [default: auto; paper: 30].",
    ),
    sfreq=Option("float | None", "Sampling rate after cleaning, Hz [default: 128; paper: 250]."),
    ica=Option(
        "bool | None", "Remove artefact components with ICA + ICLabel [default: off; paper: on]."
    ),
    n_jobs=Option("int", "Recordings processed in parallel (-1: all cores)."),
    strict=Option(
        "bool",
        "Exit with code 6 (Python: raise PartialFailure) if any recording "
        "fails, after every output is written.",
    ),
    backend=Option(
        "str",
        "Where recordings run: local (--n-jobs processes here) or dask (a "
        "Dask cluster; needs pip install 'eegformer-cli[dask]').",
    ),
    scheduler=Option(
        "str | None",
        "Dask scheduler address, e.g. tcp://10.0.0.5:8786 (with "
        "--backend dask) [default: a local cluster of --n-jobs workers].",
    ),
    overwrite=Option(
        "bool",
        "OUT may hold recordings preprocessed with other settings (they "
        "leave the manifest) or files eegformer did not write (they are kept) [default: "
        "off: refused].",
    ),
    crop=Option(
        "float | None",
        "Analyse only this many seconds at the start of every "
        "recording, so recordings of different lengths give the same segments (the "
        "remedy when train's shortcut audit flags duration_s or n_segments); a shorter "
        "recording fails [default: all of it].",
    ),
    participant_pattern=Option(
        "str | None",
        "Regular expression searched in each file name whose first group is the "
        "participant, for recordings of one person named alike: '^(.+)_\\d+' makes "
        "Subject15_1.edf and Subject15_2.edf participant Subject15 (after recordings.tsv's "
        "participant_id, before participants.tsv's ids; kept in preprocess.json, no setting) "
        "[default: none: the tables' ids, else the BIDS sub- entity].",
    ),
    task=Option(
        "str | list of str | None",
        "Read only the BIDS root's recordings of this task (the label after task- in file "
        "names); repeat it for several (in Python a list) [default: every task; several are "
        "pooled, with a warning counting each].",
    ),
    session=Option(
        "str | list of str | None",
        "Read only the BIDS root's recordings of this session (ses- label); repeatable "
        "[default: every session: a participant's sessions stay on one side of train's splits].",
    ),
    run=Option(
        "str | list of str | None",
        "Read only the BIDS root's recordings of this run (run- label; 1 selects run-01); "
        "repeatable [default: every run].",
    ),
)

TRAIN = Options(
    data_dir=Option("path | None", "A preprocess output folder. Required (except with --merge)."),
    out=Option(
        "path | None", "Run folder (created; a rerun resumes). Required (except with --merge)."
    ),
    label_column=Option(
        "str | None",
        "Manifest column holding the class labels (a numeric column of more than 10 values, "
        "such as age, is refused: make classes of it first). Required (except with --merge).",
    ),
    preset=Option(
        "str",
        "Training recipe: default (defects fixed, tuned on measured "
        "accuracy) or paper (the paper's code).",
    ),
    config=Option(
        "path | None",
        "TOML file of training settings (keys of TrainConfig, [model] "
        "table) [default: none, the preset's].",
    ),
    cv=Option("int | None", "Folds of participant-wise stratified CV [default: 5]."),
    repeats=Option("int | None", "Repeats of the CV with other shuffles [default: 1]."),
    holdout=Option(
        "float | None",
        "Instead of CV: hold out this fraction of the participants "
        "for test, in (0, 1), e.g. 0.2 [default: none, CV].",
    ),
    splits=Option(
        "path | None",
        "Reuse the splits.json of an earlier run, or one written by "
        "hand (a fold may carry its own seed, e.g. the scikit-learn estimator's "
        "random_state) [default: none, new splits from --seed].",
    ),
    epochs=Option(
        "int | None", "Training epochs (maximum, with --patience) " + preset_default("epochs") + "."
    ),
    batch_size=Option("int | None", "Segments per batch " + preset_default("batch_size") + "."),
    lr=Option("float | None", "Peak learning rate " + preset_default("lr") + "."),
    patience=Option(
        "int | None",
        "Early stop after this many epochs without a better "
        "validation score (0 = off) " + preset_default("patience") + ".",
    ),
    seed=Option(
        "int | None", "Seed of splits, initialisation, shuffling and augmentation [default: 0]."
    ),
    device=Option(
        "str | None",
        f"{_DEVICES} [default: auto]. auto: cuda when there is a GPU and the transformer path "
        "has a million parameters or more (the paper preset's), else cpu (the default "
        "preset's trains faster on the CPU).",
    ),
    precision=Option(
        "str | None",
        f"{_PRECISIONS} (mixed precision; attention, norms and "
        "explanations stay float32); auto: float32 (bfloat16 gained no speed "
        "on a GPU at this model's sizes); recorded in config.json [default: auto].",
    ),
    no_xai=Option(
        "bool", "Ablation: coarse pass only (no explanation-guided refinement) [default: off]."
    ),
    no_interactions=Option(
        "bool",
        "Ablation: no screen of connectivity pairs whose correlation differs between the "
        "classes, so no interaction token from them (the default preset screens; the paper "
        "preset does not) [default: off].",
    ),
    no_age_interactions=Option(
        "bool",
        "Ablation: no screen of connectivity entries whose relation to age differs between "
        "the classes, so no entry-times-age products (the default preset screens; the paper "
        "preset does not) [default: off].",
    ),
    frequency_encoding=Option(
        "str | None",
        "Ablation/option: "
        + one_of(FREQUENCY_ENCODINGS)
        + " (none: no dRoFE) [default: "
        + "; ".join(
            f"{encoding} ({name} preset)" for name, encoding in FREQUENCY_ENCODING_BY_PRESET.items()
        )
        + "].",
    ),
    positive_label=Option(
        "str | None",
        "Positive class for AUROC / AUC-PR with two classes "
        "[default: the class that is not control-like (control, healthy, "
        "HC, normal, ...), else the last label in sorted order, said on "
        "stderr].",
    ),
    n_jobs=Option(
        "int",
        "Folds trained side by side in this many CPU processes (-1: one per "
        "core); the results are the same as with 1.",
    ),
    overwrite=Option(
        "bool",
        "Replace a different run already in --out (its files only), or write into a folder "
        "holding files eegformer did not write (they are kept) [default: off: refused].",
    ),
    fold=Option(
        "int | None",
        "Train only this fold of the splits (0-based; repeat r fold k is "
        "r * cv + k), as a job of its own; then --merge [default: all folds].",
    ),
    merge=Option(
        "path | None",
        "Finish a run whose folds were trained by --fold jobs: final "
        "model and summaries (also adds --confounds, --permutations or --learning-curve to a finished "
        "run; every training setting comes from the run folder) [default: none].",
    ),
    confounds=Option(
        "str | list of str | None",
        "Manifest (participants, recordings) columns "
        "the shortcut audit checks too (COL,COL or, in Python, a list), beside "
        "recording duration, segments, original sampling rate, interpolated "
        "channels, input folder, age and sex [default: none, those only].",
    ),
    permutations=Option(
        "int",
        "Permutation test: refit the CV N times with the labels "
        "permuted between participants (same folds) and report each model's "
        "BAC p-value; 0 = off, 100 resolves p down to 0.0099. Resumable, spread "
        "by --n-jobs.",
    ),
    split_by=Option(
        "str",
        "What the splits keep apart: participant (each person's recordings on one side; "
        "refused when a recording's participant is unknown) or recording (recordings without "
        "a participant id count as participants of their own; the run and its report then say "
        "recording-wise, as a person's recordings may be on both sides).",
    ),
    learning_curve=Option(
        "bool",
        "Learning curve: refit every model on nested, stratified participant subsets (25, 50, "
        "75 %; learning_curve_fractions in a --config file) of each fold's training part, scored on the fold's test participants, and "
        "project the BAC to larger studies (an inverse power law, with a bootstrap interval); "
        "in metrics.json's sample_size and the report. Resumable, spread by --n-jobs "
        "[default: off].",
    ),
    permutation_model=Option(
        "str",
        "Model refit on permuted labels: reference (the logistic regression, cheap; "
        "the other models' p is then measured against its null), tangent_space (the same with "
        "the tangent-space reference) or xaiguiformer (every model retrained: a full CV per "
        "permutation).",
    ),
)

PREDICT = Options(
    model=Option("path", "A model.pt written by eegformer train."),
    inputs=Option("path or list of paths", _INPUTS),
    participants=Option("path | None", _PARTICIPANTS),
    age=Option("float | None", "Age in years for every recording (overrides tables)."),
    sex=Option("str | None", "Sex for every recording: M or F (overrides tables)."),
    max_interpolated=Option("int | None", _MAX_INTERPOLATED),
    device=Option("str", _DEVICE),
    precision=Option(
        "str",
        f"{_PRECISIONS} (mixed precision); auto: float32.",
    ),
    strict=Option(
        "bool",
        "Exit with code 6 (Python: raise PartialFailure) when a recording "
        "got a warning; every row is still printed [default: off].",
    ),
    on_row=Option(
        "callable | None",
        "Python only: called with each row (a dict) as soon as it is made (the CLI prints it).",
    ),
    coverage=Option(
        "float | None",
        "Add prediction_set: the classes that hold the true one "
        "with this probability, e.g. 0.9 (split-conformal on the run's out-of-fold "
        "probabilities; one class, or several when the model cannot tell) "
        "[default: none].",
    ),
)

EXPLAIN = Options(
    model=Option(
        "path",
        "A model.pt written by eegformer train, or its run folder (the "
        "run's own recordings are then explained out of fold, by the fold models "
        "that did not train on them).",
    ),
    inputs=Option("path or list of paths", _INPUTS),
    out=Option(
        "path",
        "Output folder (created; eegformer's files are replaced, a folder holding other "
        "files is refused without --overwrite).",
    ),
    target=Option(
        "str | None", "Class to explain, e.g. healthy [default: each recording's predicted class]."
    ),
    contrast=Option(
        "tuple of two str | None",
        "Two classes A B to compare: which channel pairs' connectivity differs between B's "
        "and A's recordings and how that pushes the prediction (attributions of logit(B) - "
        "logit(A), one signed scale), e.g. healthy depression [default: a two-class model's "
        "other class, then its positive class; none with more classes].",
    ),
    method=Option(
        "str",
        "captum method for channel pairs: " + one_of(CAPTUM_METHODS) + ".",
    ),
    n_steps=Option("int", "Integrated Gradients steps (gradient_shap samples)."),
    all_heads=Option("bool", "Keep every attention head [default: mean over heads]."),
    participants=Option("path | None", _PARTICIPANTS),
    max_interpolated=Option("int | None", _MAX_INTERPOLATED),
    device=Option("str", _DEVICE),
    strict=Option(
        "bool",
        "Exit with code 6 (Python: raise PartialFailure) when a recording "
        "got a warning; every file is still written [default: off].",
    ),
    overwrite=Option(
        "bool",
        "Write into an --out folder that holds files eegformer did not write (they are kept) "
        "[default: off: refused].",
    ),
)

REPORT = Options(
    run_dir=Option("path", "The --out folder of eegformer train."),
    explanations=Option(
        "path | None", "An eegformer explain output folder (adds the explanation figures)."
    ),
    out=Option("path | None", "HTML file to write [default: RUN_DIR/report.html]."),
    band=Option(
        "str | None",
        "Band whose channel pairs the head plots show, e.g. theta [default: each chart's "
        "top band, the one with the largest |band importance|].",
    ),
    overwrite=Option(
        "bool",
        "Replace --out when it is a file eegformer did not write (a report it wrote is "
        "always replaced) [default: off: refused].",
    ),
)

#: The scikit-learn estimator's parameters: ``train``'s where they mean the same.
ESTIMATOR = Options(
    preset=TRAIN["preset"],
    config=Option(
        "str | os.PathLike | dict | None",
        "Training settings over the preset: a "
        "TOML file (as train --config) or a dict of the same keys (TrainConfig "
        'fields, "model": a dict of model settings); the other parameters, where '
        "not None, override it.",
    ),
    epochs=TRAIN["epochs"],
    batch_size=TRAIN["batch_size"],
    lr=TRAIN["lr"],
    patience=TRAIN["patience"],
    val_fraction=Option(
        "float | None",
        "Share of the training participants held out to "
        "select the epoch " + preset_default("val_fraction") + ".",
    ),
    no_xai=TRAIN["no_xai"],
    no_interactions=TRAIN["no_interactions"],
    no_age_interactions=TRAIN["no_age_interactions"],
    frequency_encoding=TRAIN["frequency_encoding"],
    random_state=Option(
        "int",
        "Seed of the inner validation split, the initialisation, "
        "shuffling and augmentation: the seed of one fold of train (a fold of "
        "train's own splits uses seed + 1000 * (repeat + 1) + fold).",
    ),
    device=Option("str", _DEVICE),
)
