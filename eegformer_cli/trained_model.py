"""A trained model file in Python: :func:`load_model` -> :class:`TrainedModel`, whose
``predict``, ``predict_proba`` and ``explain`` take ``mne.io.Raw`` objects (preprocessed in
memory with the model's stored settings) or paths (as ``eegformer predict`` / ``explain``).

``eegformer predict`` and ``eegformer explain`` run on the same code (``commands.py``): rows,
provenance, warnings (one line each on stderr, and in the rows), the error of a recording that
cannot be used (one line on stderr as it fails; the call raises once every other recording is
done, with their results in the exception's ``result``) and ``strict``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from eegformer_cli import console
from eegformer_cli.choices import (
    CAPTUM_METHODS,
    DEFAULT_DEVICE,
    DEFAULT_METHOD,
    DEFAULT_N_STEPS,
    DEFAULT_PRECISION,
    PRECISIONS,
)
from eegformer_cli.errors import (
    InputDataError,
    PartialFailure,
    RecordingError,
    UsageError,
    check_choice,
    did_you_mean,
)

#: Seed of the random interpolation points of ``gradient_shap`` (the other methods are
#: deterministic); ``explain`` seeds with it before the first recording.
EXPLAIN_SEED = 0


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
        What :meth:`TrainedModel.predict` runs the model in: ``"auto"`` (bfloat16 for a
        ``default``-preset model on CUDA, else float32), ``"float32"``, ``"bfloat16"`` or
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
    from eegformer_cli.devices import resolve_device, resolve_precision
    from eegformer_cli.training.model_file import load_model_file

    torch_device = resolve_device(device)
    check_choice("--precision", precision, PRECISIONS)  # before the model file is read
    run_dir = Path(path) if Path(path).is_dir() else None
    model_file = Path(path) / "model.pt" if run_dir is not None else path
    bundle = load_model_file(model_file, torch_device)
    preset = bundle.train_config.get("preset", "default")
    return TrainedModel(
        bundle, torch_device, resolve_precision(precision, torch_device, preset), run_dir
    )


@dataclass
class Explanations:
    """What ``eegformer explain`` writes, as Python objects (the same numbers, unrounded).

    Attributes
    ----------
    recordings : pandas.DataFrame
        One row per explained recording, as ``recordings.csv``: ``recording_id,
        participant_id, predicted, target, prob_<class>..., explained_by`` and the provenance
        columns of ``predict`` (lists as lists, unknown values None).
    band_importance, attention, attention_diagnostics, channel_pairs : pandas.DataFrame
        The long-format tables of the files of the same names (``NAME.csv``).
    contrast : pandas.DataFrame
        The class contrast, as ``contrast_pairs.csv``: per band and channel pair, the
        attribution of ``logit(class_b) - logit(class_a)``, the mean over class_b's recordings
        minus the mean over class_a's, and the difference of their mean connectivity, strongest
        first, with each pair's artefact caution (empty without a contrast).
    per_recording : list of RecordingExplanation
        Each recording's arrays, as in its ``ID.npz``: ``band_importance`` (n_bands,) signed,
        absolute values summing to 1; ``attention_coarse`` / ``attention_refined`` (n_layers,
        n_bands, n_bands) (or with a heads axis); ``channel_pairs``, ``coh_pairs``,
        ``wpli_pairs`` (n_bands, n_channels, n_channels) in logit units; ``probabilities``.
    interactions : pandas.DataFrame
        The kept interactions, as ``interactions.csv``: per recording and interaction the two
        sides in words, the screen's class difference and gate, and the attribution of the
        product (empty for a model that keeps none).
    """

    recordings: object
    band_importance: object
    attention: object
    attention_diagnostics: object
    channel_pairs: object
    contrast: object
    per_recording: list
    interactions: object


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

    def predict(
        self,
        raw_or_paths,
        age=None,
        sex=None,
        *,
        participants=None,
        max_interpolated: int | None = None,
        strict: bool = False,
        on_row: Callable[[dict], None] | None = None,
        coverage: float | None = None,
    ):
        """Predict the class of each recording: the rows of ``eegformer predict``.

        Parameters
        ----------
        raw_or_paths : mne.io.Raw | str | os.PathLike | list
            An ``mne.io.Raw`` or a list of them (each preprocessed in memory with the model's
            settings and channels), or paths as ``eegformer predict`` takes them: recording
            files, folders of recordings, ``preprocess`` output folders (made with the model's
            settings). Raws and paths cannot be mixed in one call.
        age : float | list of float | None
            Age in years: one for every recording, or (Raws only) one per Raw; None = from the
            participants table for paths, unknown for Raws.
        sex : str | list of str | None
            ``"M"`` or ``"F"``, as ``age``.
        participants : str | os.PathLike | None
            A participants table for recordings given as paths (``--participants``; default:
            the one beside them).
        max_interpolated : int | None
            Most missing channels a raw recording may have interpolated (default: the model's
            preprocessing setting).
        strict : bool
            Raise :class:`~eegformer_cli.errors.PartialFailure` when a recording got a warning
            (``--strict``), after every row is made (they are in its ``result``).
        on_row : callable | None
            Called with each row (a dict) as soon as it is made (``eegformer predict`` prints
            it).
        coverage : float | None
            Add ``prediction_set`` (after the probabilities): the classes that hold the true
            one with this probability (``--coverage``, e.g. 0.9; split-conformal on the run's
            out-of-fold probabilities: one class when the model is sure enough, several when
            it cannot tell).

        Returns
        -------
        pandas.DataFrame
            One row per recording: ``recording_id, participant_id, predicted, prob_<class>...``
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
            Invalid ``age``, ``sex``, ``max_interpolated``, or Raws mixed with paths.
        PartialFailure
            ``strict`` and a recording got a warning.
        """
        import pandas as pd

        from eegformer_cli import provenance
        from eegformer_cli.inference import check_coverage, predict_recordings

        if coverage is not None:
            check_coverage(self._bundle, coverage)
        items = self._inputs(raw_or_paths, age, sex, participants, max_interpolated)
        self._note_unchecked(strict)
        columns = (
            ["recording_id", "participant_id", "predicted"]
            + [f"prob_{name}" for name in self.classes]
            + ([] if coverage is None else ["prediction_set"])
            + list(provenance.PROVENANCE_COLUMNS)
        )
        rows, failures, warning_lines = [], [], _WarningLines()
        predicted = predict_recordings(self._bundle, items, self._device, self._precision, coverage)
        with console.progress_lines() as progress:
            task = progress.add_task("predict", total=len(items), status="")
            for row in predicted:
                progress.advance(task)
                if "error" in row:
                    failures.append(_print_failure(row["recording_id"], row["error"]))
                    continue
                warning_lines.print(row["recording_id"], row["warnings"])
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        warning_lines.close()
        table = pd.DataFrame(rows, columns=columns)
        self._finish(
            failures,
            [row["recording_id"] for row in rows if row["warnings"]],
            strict,
            "predicted",
            table,
        )
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

    # explanations -----------------------------------------------------------------------

    def explain(
        self,
        raw_or_paths,
        age=None,
        sex=None,
        *,
        participants=None,
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

        Parameters
        ----------
        raw_or_paths, age, sex, participants, max_interpolated, strict
            As :meth:`predict`.
        target : str | None
            The class to explain (default: each recording's predicted class).
        contrast : sequence of two str | None
            Two classes (A, B) compared by the class contrast: the attribution of
            ``logit(B) - logit(A)``, B's recordings against A's (default: a two-class
            model's other class and its positive class; none with more classes).
        method : str
            captum method for the channel pairs: ``"integrated_gradients"``, ``"saliency"``,
            ``"input_x_gradient"`` or ``"gradient_shap"``.
        n_steps : int
            Integrated Gradients steps (Gradient SHAP samples).
        all_heads : bool
            Keep every attention head (default: the mean over heads).
        out : str | os.PathLike | None
            Also write ``eegformer explain``'s files into this folder (created; the
            per-recording files of an earlier run's recordings that this one does not explain
            are removed). Default: nothing is written.
        overwrite : bool
            ``out`` may hold files eegformer did not write (they are kept); without it such a
            folder is refused with a UsageError (:mod:`eegformer_cli.ownership`).

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
        from eegformer_cli.explain.attributions import check_contrast, default_contrast

        check_explain_options(method, n_steps)
        self._check_target(target)
        contrast = (
            default_contrast(self.classes, self._bundle.positive_label)
            if contrast is None
            else check_contrast(contrast, self.classes)
        )
        options = _ExplainOptions(target, contrast, method, n_steps, all_heads)
        given = _as_list(raw_or_paths)
        items = self._inputs(given, age, sex, participants, max_interpolated)
        folder = None if out is None else self._out_folder(out, overwrite, options, given)
        result, failures, warned = self._explain(items, options, strict, folder)
        if folder is not None:
            _tidy_out_folder(folder, result)
        self._finish(failures, warned, strict, "explained", result)
        return result

    def _out_folder(
        self, out: str | os.PathLike, overwrite: bool, options: _ExplainOptions, given: list
    ) -> _OutFolder:
        """``out`` claimed for ``explain`` (:mod:`eegformer_cli.ownership`), with the settings
        its JSON files record and the recordings an earlier run explained into it."""
        from eegformer_cli.connectivity.artefacts import caution_rules
        from eegformer_cli.explain import export
        from eegformer_cli.ownership import claim_folder

        path = claim_folder(out, "explain", overwrite)
        settings = {
            "model": str(self.path),
            "target": options.target,
            "method": options.method,
            "n_steps": options.n_steps,
            "all_heads": options.all_heads,
            "device": str(self._device),
            "band_importance": "channel-pair attributions summed per band, abs-sum 1",
            "top_band": "the band with the largest |band importance|",
            "contrast": None if options.contrast is None else list(options.contrast),
            "artefact_caution": caution_rules(self.preprocess_settings.bands, self.channels),
            "baseline": self._bundle.reference["description"],
            "inputs": [_described(e) for e in given],
            "model_trained_on": self._bundle.trained_on,
            "run_dir": None if self.run_dir is None else str(self.run_dir),
        }
        return _OutFolder(path, settings, export.earlier_recordings(path))

    def _explain(
        self, items, options: _ExplainOptions, strict: bool, folder: _OutFolder | None
    ) -> tuple[Explanations, list, list[str]]:
        """The explanations of ``items`` (:class:`~eegformer_cli.inference.InputRecordings`):
        ``(explanations, failures (id, error), ids of recordings with warnings)``. With
        ``folder``, each recording's files are written as it is explained and the tables at
        the end."""
        from eegformer_cli import provenance
        from eegformer_cli.devices import seed_everything
        from eegformer_cli.explain import export
        from eegformer_cli.explain.out_of_fold import OutOfFoldModels

        self._note_unchecked(strict)
        chooser = (
            None
            if self.run_dir is None
            else OutOfFoldModels(self.run_dir, self._bundle, self._device)
        )
        seed_everything(EXPLAIN_SEED)
        explanations, provenance_rows, failures = [], [], []
        warning_lines = _WarningLines()
        with console.progress_bar() as bar:
            task = bar.add_task("explain", total=len(items), status="")
            for item in items:  # a raw recording is preprocessed here
                bar.update(task, status=item.recording_id)
                if item.error is None:
                    explanation = self._explain_recording(item, options, chooser)
                    warning_lines.print(item.recording_id, item.warnings)
                    provenance_rows.append(
                        {"recording_id": item.recording_id, **provenance.row_fields(item)}
                    )
                    if folder is not None:
                        export.write_recording(
                            folder.path,
                            explanation,
                            self._bundle.bands,
                            self._bundle.channels,
                            self._bundle.label_names,
                            folder.settings,
                            provenance_rows[-1],
                        )
                    explanations.append(explanation)
                else:
                    failures.append(_print_failure(item.recording_id, item.error))
                bar.advance(task)
        warning_lines.close()
        if folder is not None:
            self._write_tables(folder, explanations, provenance_rows, failures)
        return (
            self._explanations(explanations, provenance_rows),
            failures,
            [row["recording_id"] for row in provenance_rows if row["warnings"]],
        )

    def _explain_recording(self, item, options: _ExplainOptions, chooser):
        """One usable recording's :class:`RecordingExplanation`, by the final model or, for a
        run's own recording (``chooser``: the run's fold models), out of fold."""
        from eegformer_cli.explain import attributions

        bundle = self._bundle
        own = [(bundle.model, (bundle.reference["coh"], bundle.reference["wpli"]))]
        models, explained_by = (own, "model") if chooser is None else chooser.models_for(item)
        if explained_by.startswith("out_of_fold"):  # the prediction is honest
            item.warnings = [w for w in item.warnings if not w.startswith("in_training_data:")]
        explanation = attributions.explain_with_models(
            models,
            item.coh,
            item.wpli,
            item.age,
            item.sex,
            bundle.label_names,
            recording_id=item.recording_id,
            participant_id=item.participant_id,
            target=options.target,
            contrast=options.contrast,
            method=options.method,
            n_steps=options.n_steps,
            all_heads=options.all_heads,
            device=self._device,
        )
        explanation.explained_by = explained_by
        explanation.true_class = item.label
        if explained_by == "model":  # the final model: as predict gives it
            _recalibrate(explanation, bundle)
        return explanation

    def _write_tables(
        self, folder: _OutFolder, explanations: list, provenance_rows: list[dict], failures: list
    ) -> None:
        """``explain``'s tables, recordings.csv and the class summary, once every recording
        is explained."""
        from eegformer_cli.explain import attributions, class_summary, export

        bundle = self._bundle
        contrasted = attributions.class_contrast(explanations)
        export.write_tables(
            folder.path,
            explanations,
            bundle.bands,
            bundle.channels,
            contrasted,
            folder.settings["artefact_caution"],
        )
        export.write_recordings_table(
            folder.path, explanations, provenance_rows, bundle.label_names
        )
        class_summary.write_class_summary(
            folder.path,
            attributions.class_means(explanations),
            bundle.bands,
            bundle.channels,
            bundle.label_names,
            folder.settings,
            [e.recording_id for e in explanations],
            dict(failures),
            explanations,
            contrasted,
        )

    def _explanations(self, explanations: list, provenance_rows: list[dict]) -> Explanations:
        import pandas as pd

        from eegformer_cli.connectivity.artefacts import caution_rules
        from eegformer_cli.explain import attributions, export

        tables = {}
        for name in export.TABLES:
            columns, rows = export.table_rows(name, explanations, self.bands, self.channels)
            tables[name] = pd.DataFrame(list(rows), columns=columns)
        contrast_columns, contrast_rows = export.contrast_rows(
            attributions.class_contrast(explanations),
            self.bands,
            self.channels,
            caution_rules(self.preprocess_settings.bands, self.channels),
        )
        tables["contrast"] = pd.DataFrame(contrast_rows, columns=contrast_columns)
        recordings = pd.DataFrame(
            export.recording_rows(explanations, provenance_rows, self.classes),
            columns=export.recording_columns(self.classes),
        )
        return Explanations(recordings=recordings, per_recording=list(explanations), **tables)

    def _check_target(self, target: str | None) -> None:
        """UsageError for a ``target`` class the model does not have."""
        if target is not None and target not in self.classes:
            raise UsageError(
                f"invalid --target {target!r}; the model's classes are {', '.join(self.classes)}"
                + did_you_mean(target, self.classes)
            )

    # inputs and outcome -----------------------------------------------------------------

    def _inputs(self, raw_or_paths, age, sex, participants, max_interpolated):
        """The recordings of a call (:class:`~eegformer_cli.inference.InputRecordings`),
        checked as a whole before any is read."""
        import mne

        from eegformer_cli.inference import load_inputs, raw_inputs

        given = _as_list(raw_or_paths)
        if not given:
            raise UsageError("no recording given; pass an mne.io.Raw, a path or a list of them")
        raws = [entry for entry in given if isinstance(entry, mne.io.BaseRaw)]
        if raws and len(raws) < len(given):
            raise UsageError(
                "give recordings as mne.io.Raw objects or as paths, not both in one call"
            )
        if not raws:
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
            return load_inputs(
                self._bundle,
                [Path(entry) for entry in given],
                participants=participants,
                age=age,
                sex=sex,
                max_interpolated=max_interpolated,
            )
        if participants is not None:
            raise UsageError(
                "participants= is for recordings given as paths (a table is "
                "matched by file name); give age= and sex= for mne.io.Raw inputs"
            )
        return raw_inputs(
            self._bundle,
            raws,
            _per_recording(age, len(raws), "age"),
            _per_recording(sex, len(raws), "sex"),
            max_interpolated,
        )

    def _note_unchecked(self, strict: bool) -> None:
        """One line when the model file does not describe its training data (written before
        eegformer kept it): no recording can be checked against it; under ``strict`` that is
        itself a reason for :class:`PartialFailure` (see :meth:`_finish`)."""
        bundle = self._bundle
        if bundle.training_data is None:
            console.warn(
                escape(
                    f"{bundle.path} does not describe its training data (written by eegformer "
                    f"{bundle.eegformer_version}): no check whether a recording was in it or is "
                    "outside its range of age, sex, sampling rate and length"
                    + ("; --strict: exit 6" if strict else "; retrain to get these checks")
                )
            )

    def _finish(
        self,
        failures: list[tuple[str, str]],
        warned_ids: list[str],
        strict: bool,
        what: str,
        result,
    ) -> None:
        """Raise for recordings that could not be used (their lines are already on stderr),
        then, under ``strict``, for warnings; ``result`` goes with the exception."""
        if len(failures) == 1:
            raise RecordingError(failures[0][1], result=result, printed=True)
        if failures:
            ids = [recording_id for recording_id, _ in failures]
            raise InputDataError(
                f"{len(ids)} recording(s) could not be {what}: {_shown(ids)}", result=result
            )
        if not strict:
            return
        if warned_ids:
            raise PartialFailure(
                f"--strict: {len(warned_ids)} {what} recording(s) got warnings "
                f"(on stderr and in the output): {_shown(warned_ids)}",
                result=result,
            )
        if self._bundle.training_data is None:
            raise PartialFailure(
                f"--strict: {self._bundle.path} does not describe its "
                "training data, so the recordings could not be checked "
                "against it",
                hint="retrain with this eegformer version",
                result=result,
            )


def check_explain_options(method: str, n_steps: int) -> None:
    """UsageError for an unknown captum ``method`` or ``n_steps`` < 1 (``--method``,
    ``--n-steps``): the one check of both, before a model file is read; the attributions
    receive the checked values."""
    check_choice("--method", method, CAPTUM_METHODS)
    if n_steps < 1:
        raise UsageError(f"invalid --n-steps {n_steps}; must be >= 1, e.g. {DEFAULT_N_STEPS}")


@dataclass(frozen=True)
class _ExplainOptions:
    """What one ``explain`` call explains and how (checked by :meth:`TrainedModel.explain`)."""

    target: str | None
    contrast: tuple[str, str] | None
    method: str
    n_steps: int
    all_heads: bool


@dataclass(frozen=True)
class _OutFolder:
    """``explain``'s output folder (claimed), the settings its JSON files record, and the
    recordings an earlier run explained into it."""

    path: Path
    settings: dict
    earlier: list[str]


def _tidy_out_folder(folder: _OutFolder, result: Explanations) -> None:
    """Remove the files of the recordings an earlier run explained into ``folder`` and this one
    did not (so the folder describes one run), and say what is there (stderr)."""
    from eegformer_cli.explain import export

    explained = {e.recording_id for e in result.per_recording}
    left_over = [rid for rid in folder.earlier if rid not in explained]
    removed = export.remove_recordings(folder.path, left_over)
    if removed:
        console.log(
            f"explain: removed {removed} files of {len(left_over)} recordings "
            f"that an earlier run explained into {folder.path} and this one did not "
            "(ID.npz/.json)"
        )
    console.log(
        f"explained {len(result.per_recording)} recording(s) in {folder.path}: "
        "ID.npz/.json, band_importance.csv, attention.csv, "
        "attention_diagnostics.csv, channel_pairs.csv, contrast_pairs.csv, "
        "interactions.csv, recordings.csv, class_summary.json/.npz"
    )


def _as_list(raw_or_paths) -> list:
    """One recording (a Raw or a path) or a list of them -> a list."""
    return list(raw_or_paths) if isinstance(raw_or_paths, (list, tuple)) else [raw_or_paths]


def _described(entry) -> str:
    """An input as ``explain``'s settings list it: a path, or the file a Raw was read from."""
    if isinstance(entry, (str, os.PathLike)):
        return str(entry)
    return str(entry.filenames[0]) if entry.filenames and entry.filenames[0] else "raw"


def _shown(ids: Sequence[str]) -> str:
    """The first five ids, ``...`` after them when there are more."""
    return ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")


def _per_recording(value, n: int, name: str) -> list:
    """``age`` / ``sex`` for ``n`` Raws: one value for all, or a list of ``n``."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise UsageError(
                f"invalid {name}: {len(value)} values for {n} recordings; give one "
                "for all or one per recording"
            )
        return list(value)
    return [value] * n


def _recalibrate(explanation, bundle) -> None:
    """Put a final-model explanation's probabilities (and predicted class) through the model
    file's recalibration, so ``explain`` and ``predict`` report the same numbers for a new
    recording; the explained class stays the network's own argmax. Out-of-fold explanations
    keep the fold models' raw probabilities, which are the run's out-of-fold predictions."""
    from eegformer_cli.evaluation.calibration import recalibrate

    explanation.probabilities = recalibrate(bundle.recalibration, explanation.probabilities[None])[
        0
    ]
    explanation.predicted = bundle.label_names[int(explanation.probabilities.argmax())]


class _WarningLines:
    """Recordings' warnings on stderr, one line each (``warning: ID: KIND: text``), the first
    :attr:`shown` of each kind in full; the rest of a kind are counted and summed up in one line
    by :meth:`close` (a model predicting its own 24 training recordings would otherwise print 24
    lines that say the same). Every row keeps all its warnings."""

    shown = 3

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def print(self, recording_id: str, warnings: Iterable[str]) -> None:
        for line in warnings:
            kind = line.split(":", 1)[0]
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if self.counts[kind] <= self.shown:
                console.warn(escape(f"{recording_id}: {line}"))

    def close(self) -> None:
        for kind, count in self.counts.items():
            if count > self.shown:
                console.warn(
                    escape(
                        f"{kind} on {count - self.shown} more recording(s), not "
                        "repeated here; each row's warnings column lists it"
                    )
                )


def _print_failure(recording_id: str, error: str) -> tuple[str, str]:
    """A recording's error line on stderr, as it fails; returns ``(recording_id, error)``."""
    console.stderr.print(f"eegformer: error: {error}", markup=False)
    return recording_id, error
