"""Which model explains a recording when ``explain`` is given a run folder: out of fold.

``train`` keeps each fold's selected model (``RUN_DIR/folds/<r{repeat}_f{fold}>.pt``, a model
file like ``model.pt``). A recording the run trained on is explained by the fold models whose
test participants it was among (one per repeat; ``oof_predictions.tsv``'s ``xaiguiformer``
rows say which), so its explanation and probabilities come from models that never saw the
person, and equal its out-of-fold predictions. Every other recording (a new one) is explained
by the final model, ``model.pt``.

A recording is the run's when its signal hash is one of the final model's training
recordings' (``training_data``), or, for a connectome without a hash, when its recording id
and participant are those of a training recording.
"""

from __future__ import annotations

from pathlib import Path

from eegformer_cli import console
from eegformer_cli.evaluation.run_metrics import MODEL_NAME
from eegformer_cli.experiment import run_folder


class OutOfFoldModels:
    """The fold models of a run folder, loaded when first needed.

    ``bundle``: the final model's :class:`~eegformer_cli.training.model_file.ModelBundle`
    (``RUN_DIR/model.pt``).
    """

    def __init__(self, run_dir: Path, bundle, device):
        self.run_dir, self.bundle, self.device = Path(run_dir), bundle, device
        self._folds = _test_folds(self.run_dir)
        self._loaded: dict[str, tuple] = {}
        training = bundle.training_data or {}
        self._by_hash = dict(training.get("signal_sha256", {}))
        missing = sorted(
            {
                name
                for _, names in self._folds.values()
                for name in names
                if not run_folder.fold_model_path(self.run_dir, name).is_file()
            }
        )
        if missing:
            console.warn(
                f"{self.run_dir} keeps no model of fold(s) {', '.join(missing[:5])}"
                f"{' ...' if len(missing) > 5 else ''} (a run of an earlier version): "
                "their test recordings are explained by the final model, which was "
                "trained on them"
            )
        self._missing = set(missing)

    def training_id(self, item) -> str | None:
        """The run's recording id of ``item`` (an ``InputRecording``), None for a new one."""
        if item.signal_sha256:
            return self._by_hash.get(item.signal_sha256)
        participant, _ = self._folds.get(item.recording_id, (None, []))
        return (
            item.recording_id
            if participant is not None and participant == item.participant_id
            else None
        )

    def models_for(self, item) -> tuple[list[tuple], str]:
        """``([(model, baseline), ...], explained_by)``: the fold models that tested ``item``
        (``explained_by`` ``"out_of_fold: r0_f1 r1_f0"``), or the final model
        (``"final_model"``) for a recording the run did not train on, or whose fold models
        are missing."""
        _, names = self._folds.get(self.training_id(item) or "", (None, []))
        if not names or self._missing.intersection(names):
            return [(self.bundle.model, _baseline(self.bundle))], "final_model"
        return [self._model(name) for name in names], "out_of_fold: " + " ".join(names)

    def _model(self, name: str) -> tuple:
        from eegformer_cli.training.model_file import load_model_file

        if name not in self._loaded:
            fold = load_model_file(run_folder.fold_model_path(self.run_dir, name), self.device)
            self._loaded[name] = (fold.model, _baseline(fold))
        return self._loaded[name]


def _baseline(bundle) -> tuple:
    return bundle.baseline["coh"], bundle.baseline["wpli"]


def _test_folds(run_dir: Path) -> dict[str, tuple[str, list[str]]]:
    """recording id -> (participant id, the names of the folds (``r{repeat}_f{fold}``) that
    tested it with XAIguiFormer), from ``oof_predictions.tsv`` (empty when there is none)."""
    folds: dict[str, tuple[str, list[str]]] = {}
    for row in run_folder.read_oof_predictions(run_dir):
        if row["model"] == MODEL_NAME:
            folds.setdefault(row["recording_id"], (row["participant_id"], []))[1].append(
                f"r{row['repeat']}_f{row['fold']}"
            )
    return folds
