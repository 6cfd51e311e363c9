"""A trained model file in Python: :func:`load_model` -> :class:`TrainedModel`, whose
``predict``, ``predict_proba`` and ``explain`` take ``mne.io.Raw`` objects (preprocessed in
memory with the model's stored settings) or paths (as ``eegformer predict`` / ``explain``).

``eegformer predict`` and ``eegformer explain`` run on the same code (``commands.py``): rows,
provenance, warnings (one line each on stderr, and in the rows), the error of a recording that
cannot be used (one line on stderr as it fails; the call raises once every other recording is
done, with their results in the exception's ``result``) and ``strict``
(:mod:`eegformer_cli.inference.outcomes`). The explaining side is :mod:`eegformer_cli.inference.explain_call`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from eegformer_cli import console
from eegformer_cli.choices import (
    CAPTUM_METHODS,
    DEFAULT_DEVICE,
    DEFAULT_METHOD,
    DEFAULT_N_STEPS,
    DEFAULT_PRECISION,
    PRECISIONS,
)
from eegformer_cli.errors import UsageError, check_choice
from eegformer_cli.inference.explain_call import (
    ExplainCall,
    Explanations,
    explain_options,
    tidy_out_folder,
)
from eegformer_cli.inference.outcomes import (
    WarningLines,
    note_unchecked,
    print_failure,
    raise_for_outcome,
)
from eegformer_cli.option_docs import Option, Options, document


def load_model(
    path: str | os.PathLike, device: str = DEFAULT_DEVICE, precision: str = DEFAULT_PRECISION
) -> TrainedModel:
    """Load a model file written by ``eegformer train`` (``RUN_DIR/model.pt``).

    Parameters
    ----------
    path : str | os.PathLike
        The model file, or a run folder (its ``model.pt``; then :meth:`TrainedModel.explain`
        explains the run's own recordings with the fold models that did not train on them).
    device : str
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda"``.
    precision : str
        What :meth:`TrainedModel.predict` runs the model in: ``"auto"`` (float32),
        ``"float32"``, ``"bfloat16"`` or
        ``"float16"`` (mixed precision; attention, norms and explanations stay float32).
        Explanations always run in float32.

    Returns
    -------
    TrainedModel
        The model, ready to predict and explain.

    Raises
    ------
    ModelFileError
        The file is missing, corrupt, not an eegformer model or from a newer version
        (``eegformer predict``'s exit code 4).
    UsageError
        An invalid ``device`` or ``precision``.
    """
    from eegformer_cli.experiment import run_folder
    from eegformer_cli.model.devices import resolve_device, resolve_precision
    from eegformer_cli.training.model_file import load_model_file

    torch_device = resolve_device(device)
    check_choice("--precision", precision, PRECISIONS)  # before the model file is read
    run_dir = Path(path) if Path(path).is_dir() else None
    model_file = run_folder.model_path(run_dir) if run_dir is not None else path
    bundle = load_model_file(model_file, torch_device)
    return TrainedModel(bundle, torch_device, resolve_precision(precision), run_dir)


def check_explain_options(method: str, n_steps: int) -> None:
    """UsageError for an unknown captum ``method`` or ``n_steps`` < 1 (``--method``,
    ``--n-steps``): the one check of both, before a model file is read; the attributions
    receive the checked values."""
    check_choice("--method", method, CAPTUM_METHODS)
    if n_steps < 1:
        raise UsageError(f"invalid --n-steps {n_steps}; must be >= 1, e.g. {DEFAULT_N_STEPS}")


#: The parameters that ``predict`` and ``explain`` share (:func:`~eegformer_cli.option_docs.document`
#: writes each method's Parameters section from its table).
_RECORDINGS = Options(
    raw_or_paths=Option(
        "mne.io.Raw | str | os.PathLike | list",
        "An ``mne.io.Raw`` or a list of them (each preprocessed in memory with the model's "
        "settings and channels), or paths as ``eegformer predict`` takes them: recording "
        "files, folders of recordings, ``preprocess`` output folders (made with the model's "
        "settings). Raws and paths cannot be mixed in one call.",
    ),
    age=Option(
        "float | list of float | None",
        "Age in years: one for every recording, or (Raws only) one per Raw; None = from the "
        "participants table (unknown where it gives none).",
    ),
    sex=Option("str | list of str | None", '``"M"`` or ``"F"``, as ``age``.'),
    participants=Option(
        "str | os.PathLike | None",
        "A participants table (``--participants``; default: the one beside the recording "
        "files, a Raw's file too): each recording's participant, age and sex, as "
        "``eegformer predict`` finds them from the file names.",
    ),
    participant_id=Option(
        "str | list of str | None",
        "Raws only: the participant of every Raw, or one per Raw (None: the one the Raw's "
        "file name gives, as for a path; none for a Raw made in memory); its row of "
        "``participants`` gives age and sex.",
    ),
    max_interpolated=Option(
        "int | None",
        "Most missing channels a raw recording may have interpolated (default: the model's "
        "preprocessing setting).",
    ),
    strict=Option(
        "bool",
        "Raise :class:`~eegformer_cli.errors.PartialFailure` when a recording got a warning "
        "(``--strict``), after every row is made (they are in its ``result``).",
    ),
)
_PREDICT = Options(
    **_RECORDINGS,
    on_row=Option(
        "callable | None",
        "Called with each row (a dict) as soon as it is made (``eegformer predict`` prints it).",
    ),
    coverage=Option(
        "float | None",
        "Add ``prediction_set`` (after the probabilities): the classes that hold the true one "
        "with this probability (``--coverage``, e.g. 0.9; split-conformal on the run's "
        "out-of-fold probabilities: one class when the model is sure enough, several when it "
        "cannot tell).",
    ),
)
_EXPLAIN = Options(
    **_RECORDINGS,
    target=Option(
        "str | None", "The class to explain (default: each recording's predicted class)."
    ),
    contrast=Option(
        "sequence of two str | None",
        "Two classes (A, B) compared by the class contrast: the attribution of "
        "``logit(B) - logit(A)``, B's recordings against A's (default: a two-class model's "
        "other class and its positive class; none with more classes).",
    ),
    method=Option(
        "str",
        'captum method for the channel pairs: ``"integrated_gradients"``, ``"saliency"``, '
        '``"input_x_gradient"`` or ``"gradient_shap"``.',
    ),
    n_steps=Option("int", "Integrated Gradients steps (Gradient SHAP samples)."),
    all_heads=Option("bool", "Keep every attention head (default: the mean over heads)."),
    out=Option(
        "str | os.PathLike | None",
        "Also write ``eegformer explain``'s files into this folder (created; the per-recording "
        "files of an earlier run's recordings that this one does not explain are removed). "
        "Default: nothing is written.",
    ),
    overwrite=Option(
        "bool",
        "``out`` may hold files eegformer did not write (they are kept); without it such a "
        "folder is refused with a UsageError (:mod:`eegformer_cli.overwrite_protection`).",
    ),
)


class TrainedModel:
    """A trained XAIguiFormer with what its model file says about it (use :func:`load_model`).

    Attributes
    ----------
    path : pathlib.Path
        The model file.
    classes : list of str
        Class names, in the order of the probability columns.
    channels, bands : list of str
        The model's channels (canonical 10-20 names) and frequency bands, in input order.
    preprocess_settings : PreprocessSettings
        How recordings are preprocessed for it (``preprocess_raw(raw, model.preprocess_settings)``
        gives the connectome it predicts from).
    training_data : dict | None
        What it was trained on (participants, signal hashes, ranges of age, sex, sampling rate
        and length), None for model files written before eegformer kept it.
    run_dir : pathlib.Path | None
        The run folder it was loaded from (None: loaded from a model file).
    """

    def __init__(self, bundle, device, precision: str = "float32", run_dir: Path | None = None):
        from eegformer_cli.preprocess.settings import PreprocessSettings

        self._bundle = bundle
        self._device = device
        self._precision = precision
        self.path = Path(bundle.path)
        self.classes = list(bundle.label_names)
        self.channels = list(bundle.channels)
        self.bands = list(bundle.bands)
        self.preprocess_settings = PreprocessSettings.from_dict(bundle.preprocess_settings)
        self.training_data = bundle.training_data
        self.run_dir = run_dir

    def __repr__(self) -> str:
        return (
            f"<TrainedModel {self.path}: classes {', '.join(self.classes)}; "
            f"{len(self.channels)} channels, {len(self.bands)} bands>"
        )

    # predictions ------------------------------------------------------------------------

    @document(_PREDICT)
    def predict(
        self,
        raw_or_paths,
        age=None,
        sex=None,
        *,
        participants=None,
        participant_id=None,
        max_interpolated: int | None = None,
        strict: bool = False,
        on_row: Callable[[dict], None] | None = None,
        coverage: float | None = None,
    ):
        """Predict the class of each recording: the rows of ``eegformer predict``.

        Returns
        -------
        pandas.DataFrame
            One row per recording: ``recording_id, participant_id``, the BIDS entities of
            recordings of a BIDS dataset (``subject, session, task, acquisition, run``: those
            any of them has), ``predicted, prob_<class>...``
            (recalibrated when ``train`` kept a recalibration), ``prediction_set`` (with
            ``coverage``), then ``source_file, n_segments, n_segments_rejected,
            channels_interpolated, age, age_source, sex, sex_source, warnings`` (lists as lists;
            unknown values None, NaN in numeric columns). Each warning is also one line on
            stderr, as the CLI prints it (the first three of each kind, then a line counting
            the rest).

        Raises
        ------
        RecordingError
            One recording could not be used (its one-line reason, as the CLI prints it); the
            others' rows are in the exception's ``result``.
        InputDataError
            Several recordings could not be used (``result`` as above), or the inputs as a
            whole cannot be (an input that does not exist, a preprocess folder made with other
            settings, an unreadable participants table).
        UsageError
            Invalid ``age``, ``sex``, ``max_interpolated``, Raws mixed with paths, or
            ``participant_id`` with paths.
        PartialFailure
            ``strict`` and a recording got a warning.
        """
        from eegformer_cli.inference.predictions import check_model_coverage

        if coverage is not None:
            check_model_coverage(self._bundle, coverage)
        items = self._inputs(raw_or_paths, age, sex, participants, participant_id, max_interpolated)
        note_unchecked(self._bundle, strict)
        table, failures, warned = self._predicted_table(items, on_row, coverage)
        raise_for_outcome(self._bundle, failures, warned, strict, "predicted", table)
        return table

    def predict_proba(self, raw_or_paths, age=None, sex=None, **options):
        """Class probabilities of each recording (softmax of its segment-mean refined logits,
        through the model file's recalibration when ``train`` kept one).

        Parameters
        ----------
        raw_or_paths, age, sex
            As :meth:`predict`.
        **options
            :meth:`predict`'s keyword-only parameters (``participants``, ``max_interpolated``,
            ``strict``, ``on_row``).

        Returns
        -------
        pandas.DataFrame
            Index ``recording_id``, one column per class (:attr:`classes`): the ``prob_<class>``
            columns of :meth:`predict`'s rows.

        Raises
        ------
        RecordingError, InputDataError, UsageError, PartialFailure
            As :meth:`predict`.
        """
        rows = self.predict(raw_or_paths, age, sex, **options)
        probabilities = rows.set_index("recording_id")[[f"prob_{c}" for c in self.classes]]
        probabilities.columns = list(self.classes)
        return probabilities

    def _predicted_table(self, items, on_row, coverage: float | None):
        """``predict``'s rows of the usable ``items`` as a DataFrame (each row passed to
        ``on_row`` and its warnings printed as it is made), the failures ``(id, error)`` of the
        others (their lines printed as they fail) and the ids of the rows with warnings."""
        import pandas as pd

        from eegformer_cli import provenance
        from eegformer_cli.inference.predictions import predict_recordings

        columns = (
            ["recording_id", "participant_id", *items.entity_columns, "predicted"]
            + [f"prob_{name}" for name in self.classes]
            + ([] if coverage is None else ["prediction_set"])
            + list(provenance.PROVENANCE_COLUMNS)
        )
        rows, failures, warning_lines = [], [], WarningLines()
        predicted = predict_recordings(
            self._bundle,
            items,
            self._device,
            self._precision,
            coverage,
            items.entity_columns,
        )
        with console.progress_lines() as progress:
            task = progress.add_task("predict", total=len(items), status="")
            for row in predicted:
                progress.advance(task)
                if "error" in row:
                    failures.append(print_failure(row["recording_id"], row["error"]))
                    continue
                warning_lines.print(row["recording_id"], row["warnings"])
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        warning_lines.close()
        warned = [row["recording_id"] for row in rows if row["warnings"]]
        return pd.DataFrame(rows, columns=columns), failures, warned

    # explanations -----------------------------------------------------------------------

    @document(_EXPLAIN)
    def explain(
        self,
        raw_or_paths,
        age=None,
        sex=None,
        *,
        participants=None,
        participant_id=None,
        target: str | None = None,
        contrast: Sequence[str] | None = None,
        method: str = DEFAULT_METHOD,
        n_steps: int = DEFAULT_N_STEPS,
        all_heads: bool = False,
        max_interpolated: int | None = None,
        strict: bool = False,
        out: str | os.PathLike | None = None,
        overwrite: bool = False,
    ) -> Explanations:
        """Explain each recording's prediction: the numbers ``eegformer explain`` writes.

        Attributions are against the training recordings' mean connectome. A model loaded
        from a run folder explains each of the run's own recordings with the fold models that
        did not train on it (the mean over repeats; probabilities = its out-of-fold ones) and
        other recordings with the final model (the ``explained_by`` column says which), whose
        probabilities and predicted class are those of :meth:`predict` (through the model
        file's recalibration when ``train`` kept one; the explained class stays the network's
        own most probable class).

        Returns
        -------
        Explanations
            The tables and arrays of ``eegformer explain``'s files (unrounded).

        Raises
        ------
        RecordingError, InputDataError, UsageError, PartialFailure
            As :meth:`predict` (``result``: the :class:`Explanations` of the recordings that
            worked; their files are written); UsageError also for an invalid ``target``,
            ``method`` or ``n_steps``. The inputs as a whole are checked before ``out`` is
            touched.
        """
        from eegformer_cli.connectivity.artefacts import caution_rules

        check_explain_options(method, n_steps)
        options = explain_options(
            self.classes, self._bundle.positive_label, target, contrast, method, n_steps, all_heads
        )
        given = _as_list(raw_or_paths)
        items = self._inputs(given, age, sex, participants, participant_id, max_interpolated)
        caution = caution_rules(self.preprocess_settings.bands, self.channels)
        call = ExplainCall(self._bundle, self._device, self.run_dir, options, caution)
        folder = None if out is None else call.claim_out_folder(out, overwrite, given)
        note_unchecked(self._bundle, strict)
        result, failures, warned = call.explain(items, folder)
        if folder is not None:
            tidy_out_folder(folder, result)
        raise_for_outcome(self._bundle, failures, warned, strict, "explained", result)
        return result

    # inputs -----------------------------------------------------------------------------

    def _inputs(self, raw_or_paths, age, sex, participants, participant_id, max_interpolated):
        """The recordings of a call (:class:`~eegformer_cli.inference.inputs.InputRecordings`),
        checked as a whole before any is read."""
        import mne

        from eegformer_cli.inference.inputs import load_inputs, raw_inputs

        given = _as_list(raw_or_paths)
        if not given:
            raise UsageError("no recording given; pass an mne.io.Raw, a path or a list of them")
        raws = [entry for entry in given if isinstance(entry, mne.io.BaseRaw)]
        if raws and len(raws) < len(given):
            raise UsageError(
                "give recordings as mne.io.Raw objects or as paths, not both in one call"
            )
        if not raws:
            _check_paths(given, age, sex, participant_id)
            return load_inputs(
                self._bundle,
                [Path(entry) for entry in given],
                participants=participants,
                age=age,
                sex=sex,
                max_interpolated=max_interpolated,
            )
        return raw_inputs(
            self._bundle,
            raws,
            _per_recording(age, len(raws), "age"),
            _per_recording(sex, len(raws), "sex"),
            max_interpolated,
            participants,
            _per_recording(participant_id, len(raws), "participant_id"),
        )


def _as_list(raw_or_paths) -> list:
    """One recording (a Raw or a path) or a list of them -> a list."""
    return list(raw_or_paths) if isinstance(raw_or_paths, (list, tuple)) else [raw_or_paths]


def _check_paths(given: list, age, sex, participant_id) -> None:
    """UsageError for an input that is neither a Raw nor a path, for per-recording ``age`` /
    ``sex`` lists with paths, or for ``participant_id`` with paths."""
    for entry in given:
        if not isinstance(entry, (str, os.PathLike)):
            raise UsageError(
                f"invalid recording of type {type(entry).__name__}; give "
                "an mne.io.Raw or a path (file, folder or preprocess "
                "output folder)"
            )
        if isinstance(age, (list, tuple)) or isinstance(sex, (list, tuple)):
            raise UsageError(
                "one age and one sex per recording is for mne.io.Raw "
                "inputs; with paths give one for all (or a participants "
                "table)"
            )
    if participant_id is not None:
        raise UsageError(
            "participant_id= is for mne.io.Raw inputs; recordings given as paths get their "
            "participant from the participants table or their file name"
        )


def _per_recording(value, n: int, name: str) -> list:
    """``age`` / ``sex`` / ``participant_id`` for ``n`` Raws: one value for all, or a list of
    ``n``."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise UsageError(
                f"invalid {name}: {len(value)} values for {n} recordings; give one "
                "for all or one per recording"
            )
        return list(value)
    return [value] * n
