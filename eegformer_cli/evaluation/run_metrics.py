"""``metrics.json`` as a typed object: :class:`RunMetrics` and its parts, read and written by
:mod:`~eegformer_cli.experiment.run_folder` only; every other module reads their attributes.

The tree (each class's fields are its JSON keys, in the file's order):

- :class:`RunMetrics`: ``complete`` / ``incomplete`` (why not, while folds, the final model
  or the permutation test are missing), ``labels``, ``positive_label``, ``label_column``,
  ``scheme`` (``splits.json``'s, a dict: :mod:`splits` owns its keys), ``preset``,
  ``n_folds``, ``cv_seconds``, then
- ``models``: model name (:data:`MODEL_NAME` and the references) -> :class:`ModelScores`:
  ``per_fold`` (:class:`FoldScores`), ``mean`` and ``std`` over folds (:class:`MeanScores`)
  and the summed confusion matrix (rows true class, columns predicted, label order);
- ``comparison`` (the first of) ``comparisons``: :class:`Comparison`, the transformer paired
  with each reference over the same folds (:func:`metrics.compare_folds`);
- ``score``: :class:`Score`, the transformer's BAC against chance (:func:`metrics.against_chance`);
- ``above_chance``: :class:`AboveChance`, whether that score is above chance by the one rule of
  :mod:`~eegformer_cli.experiment.above_chance` (the permutation test when there is one, else
  the interval), and which test it follows;
- ``calibration``: :class:`Calibration` (:class:`CalibrationSummary` per model, reliability
  :class:`ReliabilityBin` s, the :class:`Recalibration` ``predict`` applies);
- ``prediction_sets``: :class:`PredictionSets` (:class:`CoverageLevel` per level);
- ``attention``: the out-of-fold attention diagnostics, a dict (null without them): its keys
  are :func:`model.diagnostics.mean_diagnostics`'s, per pass and layer, plus ``scope`` and
  ``per_fold``; they stay a dict, owned and read by :mod:`model.diagnostics` and the report's
  attention table;
- ``interaction_screens``: :class:`InteractionScreens`, what every fit's screens found
  (:mod:`~eegformer_cli.experiment.screen_outcomes`): a :class:`ScreenOutcome` per fit;
- ``shortcut_audit``: :class:`ShortcutAudit` (:mod:`audit`), one :class:`AuditVariable` per
  variable; a variable's ``by_class`` (class -> level counts or median/min/max) and
  ``per_fold`` (repeat, fold, bac, auroc) stay dicts;
- ``permutation_test``: :class:`PermutationTest` (:mod:`permutation`), a
  :class:`NullComparison` per model and the null values per null model;
- ``linear_path``: the model's linear path over the folds, a dict (how many kept the
  transformer path, the penalties and strengths chosen); ``scored_by``, a dict: the
  model whose out-of-fold predictions the score is, in words and as a model name
  (``linear_path`` where the transformer path was kept in no fold).
- ``sample_size``: :class:`SampleSize`, what the run's number of participants resolves
  (:mod:`~eegformer_cli.evaluation.sample_size`), with :class:`SplitSeeds`, how often another
  split seed would change the headline, and with ``train --learning-curve`` the learning curve
  and its projection (:mod:`~eegformer_cli.evaluation.learning_curve`).

Earlier versions' files load: a key they lack is None (``complete``: None, not known;
``comparisons``: None, use :attr:`RunMetrics.all_comparisons`), and keys this version does not
know are kept (``unknown_keys``) and written back after the known ones. Writing gives today's
file exactly: keys in this order, ``OPTIONAL`` keys left out when None, NaN as null.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass, field, fields
from typing import ClassVar, TypeVar

#: The models of a run, as metrics.json and oof_predictions.tsv name them: XAIguiFormer, the
#: logistic-regression reference, (when the connectome files hold band covariances) the
#: tangent-space reference, and (when the model has one) XAIguiFormer's own linear path alone,
#: without the transformer path.
MODEL_NAME = "xaiguiformer"
REFERENCE_NAME = "logistic_regression"
TANGENT_SPACE_NAME = "tangent_space"
LINEAR_PATH_NAME = "linear_path"
#: How each model is named in a sentence ("not distinguishable from the logistic regression").
MODEL_WORDS = {
    MODEL_NAME: "XAIguiFormer",
    REFERENCE_NAME: "the logistic regression",
    TANGENT_SPACE_NAME: "the Riemannian tangent-space reference",
    LINEAR_PATH_NAME: "the linear path alone",
}


def model_in_words(name: str) -> str:
    """Model ``name`` (a key of ``models``) as a sentence names it (:data:`MODEL_WORDS`)."""
    return MODEL_WORDS.get(name, "the " + name.replace("_", " "))


def nan_to_none(value):
    """``value`` with every non-finite float (in lists and dicts too) replaced by None: JSON
    has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nan_to_none(v) for v in value]
    return value


def _load(hint, value):
    """``value`` (parsed JSON) as the type ``hint`` says: records from dicts, in lists, in
    dicts, or None."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _load(next(a for a in args if a is not type(None)), value)
    if origin is list and args and isinstance(value, list):
        return [_load(args[0], v) for v in value]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: _load(args[1], v) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, Record) and isinstance(value, dict):
        return hint.from_dict(value)
    return nan_to_none(value)


def _dump(value):
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return nan_to_none(value)


#: metrics.json's ``linear_path`` keys of earlier versions under today's names (read under either).
RENAMED_LINEAR_PATH_KEYS = {"residual_kept": "transformer_kept"}
R = TypeVar("R", bound="Record")


@dataclass
class Record:
    """A part of ``metrics.json``: a dataclass whose fields are its keys (module docstring);
    ``unknown_keys``: the keys of the file this version does not know, kept as read."""

    #: Keys left out of the file when None (absent in some runs, or in earlier versions).
    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    unknown_keys: dict = field(default_factory=dict, repr=False, compare=False, kw_only=True)

    @classmethod
    def from_dict(cls: type[R], data: dict) -> R:
        hints = typing.get_type_hints(cls)
        names = {f.name for f in fields(cls)} - {"unknown_keys"}
        return cls(
            **{k: _load(hints[k], v) for k, v in data.items() if k in names},
            unknown_keys={k: v for k, v in data.items() if k not in names},
        )

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "unknown_keys" or (value is None and f.name in self.OPTIONAL):
                continue
            out[f.name] = _dump(value)
        return {**out, **self.unknown_keys}


@dataclass
class FoldScores(Record):
    """One model on one fold's test recordings (:func:`metrics.classification_metrics`);
    ``repeat`` and ``fold`` are left out where the fold's record holds them."""

    OPTIONAL = ("repeat", "fold")
    repeat: int | None = None
    fold: int | None = None
    bac: float | None = None
    paper_bac: float | None = None
    auroc: float | None = None
    auc_pr: float | None = None
    accuracy: float | None = None
    n: int | None = None
    confusion_matrix: list[list[int]] | None = None


@dataclass
class MeanScores(Record):
    """Mean (or sample std) over folds of each scalar metric; None where undefined."""

    bac: float | None = None
    auroc: float | None = None
    auc_pr: float | None = None
    accuracy: float | None = None
    paper_bac: float | None = None


@dataclass
class ModelScores(Record):
    per_fold: list[FoldScores] = field(default_factory=list)
    mean: MeanScores = field(default_factory=MeanScores)
    std: MeanScores = field(default_factory=MeanScores)
    confusion_matrix: list[list[int]] | None = None


@dataclass
class Comparison(Record):
    """``model`` - ``reference`` on the same folds (difference of ``metric``, paired)."""

    OPTIONAL = ("model", "reference", "ci95_clipped")
    model: str | None = None
    reference: str | None = None
    metric: str = "bac"
    n_folds: int | None = None
    mean_difference: float | None = None
    std_difference: float | None = None
    folds_better: int | None = None
    folds_equal: int | None = None
    folds_worse: int | None = None
    ci95: list[float | None] = field(default_factory=lambda: [None, None])
    ci95_clipped: bool | None = None
    p_value: float | None = None
    test: str | None = None


@dataclass
class ChanceTest(Record):
    """A metric's mean over folds tested against chance (:func:`metrics.against_chance`)."""

    mean: float | None = None
    std: float | None = None
    ci95: list[float | None] = field(default_factory=lambda: [None, None])
    p_value: float | None = None
    n_folds: int | None = None
    test: str | None = None


@dataclass
class Score(Record):
    """The transformer's score: :class:`ChanceTest` of ``metric`` with what it is of."""

    model: str = MODEL_NAME
    metric: str = "bac"
    chance: float | None = None
    mean: float | None = None
    std: float | None = None
    ci95: list[float | None] = field(default_factory=lambda: [None, None])
    p_value: float | None = None
    n_folds: int | None = None
    test: str | None = None


@dataclass
class AboveChance(Record):
    """Whether the transformer's score is above chance, by the rule of
    :mod:`~eegformer_cli.experiment.above_chance`: ``above`` the answer, ``follows`` the test it
    comes from (``permutation test`` or ``interval``), ``null_from`` whose null the permutation
    test's is (a model name; None when the interval decides), ``p_value`` and
    ``n_permutations`` (that test's), ``statement`` the answer in the headline's words,
    ``interval_above`` and ``interval`` what the 95 % interval says (also when it does not
    decide), ``meaning`` what the deciding test shows and does not show."""

    above: bool = False
    follows: str = "interval"
    null_from: str | None = None
    p_value: float | None = None
    n_permutations: int | None = None
    statement: str = ""
    interval_above: bool = False
    interval: str = ""
    meaning: str = ""


@dataclass
class ReliabilityBin(Record):
    lower: float | None = None
    upper: float | None = None
    n: int = 0
    mean_predicted: float | None = None
    observed: float | None = None


@dataclass
class CalibrationSummary(Record):
    """:func:`calibration.calibration_summary` of one model's out-of-fold probabilities;
    ``n`` counts predictions, ``n_recordings`` (None in earlier versions) recordings."""

    OPTIONAL = ("n_recordings",)
    target: str | None = None
    n: int = 0
    brier: float | None = None
    log_loss: float | None = None
    ece: float | None = None
    slope: float | None = None
    intercept: float | None = None
    bins: list[ReliabilityBin] = field(default_factory=list)
    n_recordings: int | None = None


@dataclass
class Recalibration(Record):
    """What ``predict`` does to the probabilities (:func:`calibration.choose_recalibration`):
    ``params`` and ``cross_fitted_log_loss`` (method -> nats) stay dicts; ``rows`` the model
    whose out-of-fold rows it was fitted on (``oof_calibration.summarise``; None: the
    transformer's)."""

    OPTIONAL = ("rows",)
    method: str = "none"
    params: dict = field(default_factory=dict)
    cross_fitted_log_loss: dict = field(default_factory=dict)
    n: int | None = None
    reason: str = ""
    after: CalibrationSummary | None = None
    rows: str | None = None


@dataclass
class Calibration(Record):
    bins: str | None = None
    models: dict[str, CalibrationSummary] = field(default_factory=dict)
    recalibration: Recalibration = field(default_factory=Recalibration)


@dataclass
class CoverageLevel(Record):
    coverage: float = 0.0
    empirical_coverage: float | None = None
    mean_size: float | None = None
    share_ambiguous: float | None = None


@dataclass
class PredictionSets(Record):
    """:func:`conformal.coverage_out_of_fold`: levels the recordings cannot give are absent."""

    method: str = ""
    n: int = 0
    levels: list[CoverageLevel] = field(default_factory=list)


@dataclass
class ScreenOutcome(Record):
    """One fit's interaction screen (its record in the fold's file): ``fit`` (``r0_f1``, or
    ``final``), ``recorded`` (False: an earlier version's record lacks it), ``kept`` the kept
    interactions' names, best first (``... (within recordings)``: the within-recording
    screen's); ``top_pair_score`` and ``pair_gate``: the best entry pair's score (how much two
    entries' correlation differs between the classes, 0-2) and the gate it had to beat (None:
    not screened); ``top_age_score`` / ``age_gate`` the same for entries with age (None: not
    screened, or no age known), ``top_within_score`` / ``within_gate`` for the within screen."""

    fit: str = ""
    recorded: bool = True
    kept: list[str] = field(default_factory=list)
    top_pair_score: float | None = None
    pair_gate: float | None = None
    top_age_score: float | None = None
    age_gate: float | None = None
    top_within_score: float | None = None
    within_gate: float | None = None


@dataclass
class InteractionScreens(Record):
    """The run's interaction screens: whether its settings screen entry pairs (``pairs``),
    entries with age (``with_age``) and within recordings (``within``); ``n_folds`` and
    ``folds_kept`` (those whose screen kept something); each fold's :class:`ScreenOutcome`
    (``per_fold``) and the final model's (``final``; None without one, or before it is)."""

    pairs: bool = False
    with_age: bool = False
    within: bool = False
    n_folds: int = 0
    folds_kept: int = 0
    per_fold: list[ScreenOutcome] = field(default_factory=list)
    final: ScreenOutcome | None = None


@dataclass
class AuditVariable(Record):
    """One variable of the shortcut audit (:mod:`audit`): ``status`` flagged, borderline,
    checked, constant, unknown or not recorded; ``bac`` / ``auroc`` None unless checked."""

    name: str = ""
    description: str = ""
    kind: str | None = None
    source: str | None = None
    status: str = "checked"
    reason: str | None = None
    by_class: dict | None = None
    bac: ChanceTest | None = None
    auroc: ChanceTest | None = None
    per_fold: list[dict] | None = None


@dataclass
class ShortcutAudit(Record):
    folds: str = ""
    n_folds: int | None = None
    model: str = ""
    interval: str = ""
    rule: str = ""
    flagged: list[str] = field(default_factory=list)
    borderline: list[str] = field(default_factory=list)
    variables: list[AuditVariable] = field(default_factory=list)


@dataclass
class NullComparison(Record):
    """A model's observed BAC against the null of ``null_from`` (its own when computed)."""

    observed_bac: float | None = None
    p_value: float | None = None
    null_from: str = ""
    null_mean: float | None = None
    null_std: float | None = None


@dataclass
class PermutationTest(Record):
    """``null``: null model -> its BAC on each permutation, in index order."""

    n_permutations: int = 0
    null_model: str = ""
    metric: str = "bac"
    permuted: str = ""
    seed: int | None = None
    p_value_rule: str = ""
    seconds: float | None = None
    models: dict[str, NullComparison] = field(default_factory=dict)
    null: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class SplitSeeds(Record):
    """How often another split seed of the same participants would change the headline
    (:func:`sample_size.split_seeds`): ``flip_share`` per part of it (``score``: above chance
    or not; a reference's name: better, worse or not distinguishable), the share of split
    seeds whose interval gives another answer than this run's (None: no interval);
    ``fragile`` whether a part's share reaches :data:`sample_size.FRAGILE_SHARE`; ``repeats``
    the ``--repeats`` at which every part's answer is settled (None: not fragile, no k-fold
    scheme, or no number up to :data:`sample_size.MAX_REPEATS` settles it); ``statement`` in
    words."""

    flip_share: dict[str, float | None] = field(default_factory=dict)
    fragile: bool = False
    repeats: int | None = None
    statement: str = ""


@dataclass
class CurvePoint(Record):
    """One point of a learning curve (:mod:`learning_curve`): the ``fraction`` of each outer
    training part, the study size it stands for (``n_participants``), the mean training
    participants per fold (``n_training``), the mean BAC over folds, its ``std`` over folds,
    ``n_folds`` and each fold's BAC (``per_fold``, in fold order)."""

    fraction: float = 1.0
    n_participants: float = 0.0
    n_training: float = 0.0
    bac: float | None = None
    std: float | None = None
    n_folds: int = 0
    per_fold: list[float | None] = field(default_factory=list)


@dataclass
class ModelCurve(Record):
    """One model's learning curve: its ``points``, ``status`` (one of
    :data:`learning_curve.STATUSES`), the fitted ``params`` (``a``, ``b``, ``c`` of
    ``a - b n^-c``, n in participants; None when none was fitted), the ``level`` of a flat
    curve and the ``statement`` in words."""

    points: list[CurvePoint] = field(default_factory=list)
    status: str = "fitted"
    params: dict[str, float] | None = None
    level: float | None = None
    statement: str = ""


@dataclass
class ProjectedBac(Record):
    """A learning curve's BAC at a study of ``n_participants``, with its 95 % ``interval``."""

    n_participants: int = 0
    bac: float | None = None
    interval: list[float | None] = field(default_factory=lambda: [None, None])


@dataclass
class LearningCurveRun(Record):
    """How the learning curve was made: the ``fractions`` of each outer training part refit,
    those ``skipped`` (why, in words), the bootstrap's ``n_bootstrap`` draws, the refits'
    ``seconds``, the ``statement`` to quote (``statement`` of the sample size, then the model's
    curve) and the ``method``."""

    fractions: list[float] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    n_bootstrap: int = 0
    seconds: float | None = None
    statement: str = ""
    method: str = ""


@dataclass
class SampleSize(Record):
    """What the run's number of participants resolves (:func:`sample_size.assess`), by the
    corrected resampled t-test the verdict uses: ``n_participants`` (``unit`` s: participants,
    or recordings on recording-wise splits), the score's ``n_folds`` and the folds'
    ``test_train_ratio``; at ``power`` and two-sided ``alpha``: ``half_width`` of the score's
    95 % interval (BAC, unclipped), and per reference (name -> value) the half-width of the
    paired difference's interval (``difference_half_width``), the smallest difference this N
    resolves (``smallest_difference``, BAC) and the participants that would resolve the observed
    difference (``participants_needed``, rounded to two significant figures; None where the
    difference is about zero or favours the reference); ``split_seeds`` (:class:`SplitSeeds`);
    ``statement`` the sentence to quote; ``method`` the assumptions, in words. Figures are None
    where there is no interval (one split, or every fold scored the same). With
    ``train --learning-curve`` (:mod:`learning_curve`; absent otherwise): ``learning_curve``
    per model (:class:`ModelCurve`), ``projection`` per model (:class:`ProjectedBac` at round
    study sizes) and ``learning_curve_run`` (:class:`LearningCurveRun`)."""

    OPTIONAL = ("learning_curve", "projection", "learning_curve_run")
    n_participants: int | None = None
    unit: str = "participant"
    n_folds: int | None = None
    test_train_ratio: float | None = None
    power: float = 0.8
    alpha: float = 0.05
    half_width: float | None = None
    difference_half_width: dict[str, float | None] = field(default_factory=dict)
    smallest_difference: dict[str, float | None] = field(default_factory=dict)
    participants_needed: dict[str, int | None] = field(default_factory=dict)
    split_seeds: SplitSeeds | None = None
    statement: str = ""
    method: str = ""
    learning_curve: dict[str, ModelCurve] | None = None
    projection: dict[str, list[ProjectedBac]] | None = None
    learning_curve_run: LearningCurveRun | None = None


@dataclass
class RunMetrics(Record):
    """``metrics.json`` (module docstring)."""

    OPTIONAL = (
        "complete",
        "incomplete",
        "preset",
        "scheme",
        "comparison",
        "comparisons",
        "score",
        "above_chance",
        "calibration",
        "prediction_sets",
        "interaction_screens",
        "shortcut_audit",
        "permutation_test",
        "linear_path",
        "scored_by",
        "sample_size",
    )
    complete: bool | None = None
    incomplete: str | None = None
    labels: list[str] = field(default_factory=list)
    positive_label: str | None = None
    label_column: str | None = None
    scheme: dict | None = None
    preset: str | None = None
    n_folds: int | None = None
    cv_seconds: float | None = None
    models: dict[str, ModelScores] = field(default_factory=dict)
    comparison: Comparison | None = None
    comparisons: list[Comparison] | None = None
    score: Score | None = None
    above_chance: AboveChance | None = None
    calibration: Calibration | None = None
    prediction_sets: PredictionSets | None = None
    attention: dict | None = None
    interaction_screens: InteractionScreens | None = None
    shortcut_audit: ShortcutAudit | None = None
    permutation_test: PermutationTest | None = None
    #: the model's linear path over the folds (``summaries.linear_path_summary``): None without one
    linear_path: dict | None = None
    #: which model carries the score (``verdict.scored_by``: ``model``, ``transformer_folds``,
    #: ``n_folds``, ``statement``), derived from ``linear_path``: None in earlier versions' files
    scored_by: dict | None = None
    sample_size: SampleSize | None = None

    @classmethod
    def from_dict(cls, data: dict) -> RunMetrics:
        """Also an earlier version's file (``linear_path``: :data:`RENAMED_LINEAR_PATH_KEYS`)."""
        metrics = super().from_dict(data)
        for earlier, today in RENAMED_LINEAR_PATH_KEYS.items():
            if metrics.linear_path and earlier in metrics.linear_path:
                metrics.linear_path = {**metrics.linear_path, today: metrics.linear_path[earlier]}
                del metrics.linear_path[earlier]
        return metrics

    @property
    def transformer(self) -> ModelScores:
        """The scores of XAIguiFormer (:data:`MODEL_NAME`)."""
        return self.models[MODEL_NAME]

    @property
    def all_comparisons(self) -> list[Comparison]:
        """Every comparison with a reference model, the logistic regression's first (an
        earlier version's file has the one ``comparison`` only)."""
        if self.comparisons:
            return self.comparisons
        return [self.comparison] if self.comparison else []

    @property
    def recording_wise(self) -> bool:
        """Whether the splits were recording-wise (``train --split-by recording``)."""
        return (self.scheme or {}).get("unit") == "recording"

    @property
    def chance(self) -> float:
        """Balanced accuracy by chance: 1 / number of classes (0.5 when they are unknown)."""
        return 1 / len(self.labels) if self.labels else 0.5
