"""A finished fold's record, ``folds/<name>.json`` of the run folder, as a typed object.

:func:`~eegformer_cli.training.fold_job.run_fold` makes one; the run folder's owner
(:mod:`~eegformer_cli.experiment.run_folder`) writes and reads it (:meth:`FoldRecord.to_dict`,
:meth:`FoldRecord.from_dict`); every other module reads its attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from eegformer_cli.evaluation.run_metrics import FoldScores, Record

#: The keep decision's keys in an earlier version's ``linear_path`` record, under today's
#: names (``val_losses``' own keys: :data:`RENAMED_VAL_LOSSES`).
RENAMED_KEEP_KEYS = {
    "residual": "transformer_kept",
    "residual_mode": "transformer_path",
    "residual_margin": "keep_margin",
    "linear_val_loss": "static_val_loss",
    "residual_val_loss": "transformer_val_loss",
    "residual_gain": "transformer_gain",
    "residual_gain_se": "transformer_gain_se",
}
RENAMED_VAL_LOSSES = {"linear": "static", "residual": "transformer"}


def current_keep_keys(record: dict) -> dict:
    """A fold's ``linear_path`` record (this or an earlier version's) in today's keys."""
    out = {RENAMED_KEEP_KEYS.get(k, k): v for k, v in record.items()}
    if isinstance(out.get("val_losses"), dict):
        out["val_losses"] = {RENAMED_VAL_LOSSES.get(k, k): v for k, v in out["val_losses"].items()}
    return out


@dataclass
class FoldRecord(Record):
    """One fold of a run: its fields are the file's keys, in its order (NaN written as null).

    ``repeat``, ``fold``: which fold; ``best_epoch``: the selected epoch; ``seconds``: fitting
    time (s); ``interaction_screen``: :mod:`interaction_screen`'s ``ScreenResult.summary``
    (None when the config screens nothing, or in an earlier version's record);
    ``linear_path``: the static stage's fit and whether the transformer path was kept
    (``transformer_keep.TransformerKeep.record``; None without a linear path; an earlier version's keys read
    under today's names, :data:`RENAMED_KEEP_KEYS`);
    ``reference_C`` / ``references_C``: the regularisation the logistic regression / each
    reference chose; ``history``: the fold's epoch records (``history.jsonl``'s); ``attention``:
    the attention diagnostics on the fold's test recordings (:mod:`model.diagnostics`, None in
    an earlier version's record); ``oof``: its out-of-fold rows (``oof_predictions.tsv``'s);
    ``metrics``: model name -> its :class:`FoldScores` on the fold's test recordings (without
    ``repeat`` and ``fold``, which the record holds once).
    """

    repeat: int
    fold: int
    best_epoch: int | None = None
    seconds: float = 0.0
    interaction_screen: dict | None = None
    linear_path: dict | None = None
    reference_C: float | None = None
    references_C: dict[str, float] | None = None
    history: list[dict] = field(default_factory=list)
    attention: dict | None = None
    oof: list[dict] = field(default_factory=list)
    metrics: dict[str, FoldScores] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict) -> FoldRecord:
        record = super().from_dict(data)
        if record.linear_path:
            record.linear_path = current_keep_keys(record.linear_path)
        return record

    def scores(self, name: str) -> FoldScores:
        """Model ``name``'s scores on this fold, with the fold's ``repeat`` and ``fold``."""
        return replace(self.metrics[name], repeat=self.repeat, fold=self.fold)
