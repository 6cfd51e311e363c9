"""The explaining side of :class:`~eegformer_cli.inference.trained_model.TrainedModel`: what ``explain``
returns (:class:`Explanations`), its options (:func:`explain_options`), and one
call's work (:class:`ExplainCall`): the claimed output folder and the settings its JSON files
record, each recording explained by the final model or out of fold (and its files written as
it is explained), then the tables, the recordings table and the class summary; at the end
:func:`tidy_out_folder` removes what an earlier run left in the folder.

The attributions themselves and the files' formats belong to :mod:`eegformer_cli.explain`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eegformer_cli import console
from eegformer_cli.errors import UsageError, did_you_mean
from eegformer_cli.inference.outcomes import WarningLines, print_failure

#: Seed of the random interpolation points of ``gradient_shap`` (the other methods are
#: deterministic); ``explain`` seeds with it before the first recording.
EXPLAIN_SEED = 0


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
        ``wpli_pairs`` (n_bands, n_channels, n_channels) in logit units; ``probabilities``;
        ``segments`` the time course, as its ``ID.segments.csv`` (a ``SegmentTimeline``: per
        segment its onset (s), its part of the explained class's logit and its strongest cells).
    interactions : pandas.DataFrame
        The kept interactions, as ``interactions.csv``: per recording and interaction the two
        sides in words, the screen's class difference and gate, its group (the row heading
        the kept interactions that are proxies of each other) and the screen's proxies of it
        in words, and the attribution of the product (empty for a model that keeps none).
    """

    recordings: object
    band_importance: object
    attention: object
    attention_diagnostics: object
    channel_pairs: object
    contrast: object
    per_recording: list
    interactions: object


@dataclass(frozen=True)
class ExplainOptions:
    """What one ``explain`` call explains and how (checked by :func:`explain_options`)."""

    target: str | None
    contrast: tuple[str, str] | None
    method: str
    n_steps: int
    all_heads: bool


def explain_options(
    classes: list[str],
    positive_label: str | None,
    target: str | None,
    contrast: Sequence[str] | None,
    method: str,
    n_steps: int,
    all_heads: bool,
) -> ExplainOptions:
    """``explain``'s options with ``target`` and ``contrast`` checked against a model's
    ``classes`` (UsageError naming the option; ``method`` and ``n_steps`` come checked by
    ``trained_model.check_explain_options``), and the default contrast of a two-class model
    (``positive_label``: its positive class) filled in."""
    from eegformer_cli.explain.attributions import check_contrast, default_contrast

    if target is not None and target not in classes:
        raise UsageError(
            f"invalid --target {target!r}; the model's classes are {', '.join(classes)}"
            + did_you_mean(target, classes)
        )
    checked = (
        default_contrast(classes, positive_label)
        if contrast is None
        else check_contrast(contrast, classes)
    )
    return ExplainOptions(target, checked, method, n_steps, all_heads)


@dataclass(frozen=True)
class OutFolder:
    """``explain``'s output folder (claimed), the settings its JSON files record, and the
    recordings an earlier run explained into it."""

    path: Path
    settings: dict
    earlier: list[str]


class ExplainCall:
    """One ``explain`` call of a trained model: ``bundle`` (its model file's contents) on
    ``device``, ``run_dir`` (its run folder, for out-of-fold explanations; None: the final
    model explains every recording), the checked ``options`` and ``caution`` (the artefact
    caution rules of its bands and channels)."""

    def __init__(
        self, bundle, device, run_dir: Path | None, options: ExplainOptions, caution: dict
    ) -> None:
        self.bundle = bundle
        self.device = device
        self.run_dir = run_dir
        self.options = options
        self.caution = caution

    def claim_out_folder(self, out: str | os.PathLike, overwrite: bool, given: list) -> OutFolder:
        """``out`` claimed for ``explain`` (:mod:`eegformer_cli.overwrite_protection`), with the settings
        its JSON files record (``given``: the call's inputs) and the recordings an earlier run
        explained into it."""
        from eegformer_cli.explain import class_summary
        from eegformer_cli.overwrite_protection import claim_folder

        path = claim_folder(out, "explain", overwrite)
        options = self.options
        settings = {
            "model": str(Path(self.bundle.path)),
            "target": options.target,
            "method": options.method,
            "n_steps": options.n_steps,
            "all_heads": options.all_heads,
            "device": str(self.device),
            "band_importance": "channel-pair attributions summed per band, abs-sum 1",
            "top_band": "the band with the largest |band importance|; null when every band's is 0 "
            "(no connectivity entry carries any of the logit)",
            "contrast": None if options.contrast is None else list(options.contrast),
            "artefact_caution": self.caution,
            "baseline": self.bundle.baseline["description"],
            # the bands of band_power and covariance_pairs (a tangent-space path's; [] none)
            "covariance_bands": list(self.bundle.model_config.get("tangent_space_bands") or []),
            "inputs": [_described(e) for e in given],
            "model_trained_on": self.bundle.trained_on,
            "run_dir": None if self.run_dir is None else str(self.run_dir),
        }
        return OutFolder(path, settings, class_summary.earlier_recordings(path))

    def explain(
        self, items, folder: OutFolder | None
    ) -> tuple[Explanations, list[tuple[str, str]], list[str]]:
        """The explanations of ``items`` (:class:`~eegformer_cli.inference.inputs.InputRecordings`):
        ``(explanations, failures (id, error), ids of recordings with warnings)``. With
        ``folder``, each recording's files are written as it is explained and the tables at
        the end."""
        from eegformer_cli import provenance
        from eegformer_cli.explain.out_of_fold import OutOfFoldModels
        from eegformer_cli.model.devices import seed_everything

        chooser = (
            None
            if self.run_dir is None
            else OutOfFoldModels(self.run_dir, self.bundle, self.device)
        )
        seed_everything(EXPLAIN_SEED)
        explanations, provenance_rows, failures = [], [], []
        warning_lines = WarningLines()
        with console.progress_bar() as bar:
            task = bar.add_task("explain", total=len(items), status="")
            for item in items:  # a raw recording is preprocessed here
                bar.update(task, status=item.recording_id)
                if item.error is None:
                    explanation = self._explain_recording(item, chooser)
                    warning_lines.print(item.recording_id, item.warnings)
                    provenance_rows.append(
                        {
                            "recording_id": item.recording_id,
                            **{c: item.entities.get(c) for c in items.entity_columns},
                            **provenance.row_fields(item),
                        }
                    )
                    self._write_recording(folder, explanation, provenance_rows[-1])
                    explanations.append(explanation)
                else:
                    failures.append(print_failure(item.recording_id, item.error))
                bar.advance(task)
        warning_lines.close()
        if folder is not None:
            self._write_tables(
                folder, explanations, provenance_rows, failures, items.entity_columns
            )
        return (
            self._explanations(explanations, provenance_rows, items.entity_columns),
            failures,
            [row["recording_id"] for row in provenance_rows if row["warnings"]],
        )

    def _explain_recording(self, item, chooser):
        """One usable recording's :class:`RecordingExplanation`, by the final model or, for a
        run's own recording (``chooser``: the run's fold models), out of fold."""
        from eegformer_cli.explain import attributions

        bundle, options = self.bundle, self.options
        own = [(bundle.model, (bundle.baseline["coh"], bundle.baseline["wpli"]))]
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
            device=self.device,
            covariance=item.covariance,
            onsets_s=item.onsets_s,
        )
        explanation.explained_by = explained_by
        explanation.true_class = item.label
        if explained_by == "model":  # the final model: as predict gives it
            _recalibrate(explanation, bundle)
        return explanation

    def _write_recording(self, folder: OutFolder | None, explanation, provenance_row: dict) -> None:
        """A recording's ``ID.npz`` / ``ID.json`` in ``folder`` (nothing without one)."""
        from eegformer_cli.explain import export

        if folder is not None:
            export.write_recording(
                folder.path,
                explanation,
                self.bundle.bands,
                self.bundle.channels,
                self.bundle.label_names,
                folder.settings,
                provenance_row,
            )

    def _write_tables(
        self,
        folder: OutFolder,
        explanations: list,
        provenance_rows: list[dict],
        failures: list,
        entity_columns: Sequence[str],
    ) -> None:
        """``explain``'s tables, recordings.csv (with the BIDS ``entity_columns``, as
        ``predict``'s rows) and the class summary, once every recording is explained."""
        from eegformer_cli.explain import class_summary, export

        bundle = self.bundle
        contrasted = class_summary.class_contrast(explanations)
        export.write_tables(
            folder.path,
            explanations,
            bundle.bands,
            bundle.channels,
            contrasted,
            folder.settings["artefact_caution"],
        )
        export.write_recordings_table(
            folder.path, explanations, provenance_rows, bundle.label_names, entity_columns
        )
        class_summary.write_class_summary(
            folder.path,
            class_summary.class_means(explanations),
            bundle.bands,
            bundle.channels,
            bundle.label_names,
            folder.settings,
            [e.recording_id for e in explanations],
            dict(failures),
            explanations,
            contrasted,
        )

    def _explanations(
        self, explanations: list, provenance_rows: list[dict], entity_columns: Sequence[str]
    ) -> Explanations:
        """The :class:`Explanations` of the explained recordings (the files' tables as
        DataFrames)."""
        import pandas as pd

        from eegformer_cli.explain import class_summary, export

        bands, channels = list(self.bundle.bands), list(self.bundle.channels)
        classes = list(self.bundle.label_names)
        tables = {}
        for name in export.TABLES:
            columns, rows = export.table_rows(name, explanations, bands, channels)
            tables[name] = pd.DataFrame(list(rows), columns=columns)
        contrast_columns, contrast_rows = export.contrast_rows(
            class_summary.class_contrast(explanations), bands, channels, self.caution
        )
        tables["contrast"] = pd.DataFrame(contrast_rows, columns=contrast_columns)
        recordings = pd.DataFrame(
            export.recording_rows(explanations, provenance_rows, classes),
            columns=export.recording_columns(classes, entity_columns),
        )
        return Explanations(recordings=recordings, per_recording=list(explanations), **tables)


def tidy_out_folder(folder: OutFolder, result: Explanations) -> None:
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
            "(ID.npz/.json/.segments.csv)"
        )
    console.log(
        f"explained {len(result.per_recording)} recording(s) in {folder.path}: "
        "ID.npz/.json/.segments.csv, band_importance.csv, attention.csv, "
        "attention_diagnostics.csv, channel_pairs.csv, contrast_pairs.csv, "
        "interactions.csv, recordings.csv, class_summary.json/.npz"
    )


def _described(entry) -> str:
    """An input as ``explain``'s settings list it: a path, or the file a Raw was read from."""
    if isinstance(entry, (str, os.PathLike)):
        return str(entry)
    return str(entry.filenames[0]) if entry.filenames and entry.filenames[0] else "raw"


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
