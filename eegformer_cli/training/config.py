"""The training recipe: presets ``paper`` and ``default``, TOML files, flag overrides.

Resolution order (later wins): preset -> TOML file (``--config``) -> command-line flags.
The resolved :class:`TrainConfig` is saved as ``RUN_DIR/config.json``; a rerun into the same
folder must resolve to the same config to resume.

``paper`` is reference-method.md, section 5 (the official code's values for lr / wd / batch /
epochs at its own batch size): loss (1-a)·CE(coarse) + a·CE(refined) with a = 0.7 and label
smoothing 0.1; AdamW (0.9, 0.99), eps 1e-8, lr 5e-5, weight decay 1e-5; batch 64 (last partial
batch dropped), 100 epochs; per-step cosine schedule with a 5-epoch warmup from 1e-7, lr_min
1e-7, the cosine spanning the whole run (timm ``warmup_prefix=False``); graphon mixup/cutmix on
every batch (p 1, cutmix half the time, lambda ~ Beta(0.2, 0.2)); no class weighting; no
input standardisation; the official code's "BAC" ((macro specificity + macro recall) / 2) for
selection; model ``ModelConfig.preset("paper")``.

``default`` keeps the method and fixes the defects of reference-method.md, section 9, with sizes
and rates chosen by measured accuracy (docs/benchmarks.md; what was tried:
docs/benchmarks-history.md): the small, regularised ``ModelConfig.preset("default")`` with
weight decay 0.1, inputs z-scored per band and channel pair with training statistics
(:mod:`standardise`), class-balanced loss weights, no mixup/cutmix but segment averaging with
probability 0.5 (a training segment averaged with others of the same recording; dataset.py),
keeping the last partial batch; and a linear path fitted first (:mod:`linear_fit`: L1 or L2,
whichever the inner CV prefers), the transformer trained on its residual and kept only when it
beats it on validation by more than the standard error of its gain (:mod:`transformer_keep`), its
epoch selected by validation log-loss (balanced accuracy on a dozen validation people is
noise). The penalty and the keep rule were chosen on screening splits of the two real sets
(never their acceptance folds) and simulated studies of other seeds than the acceptance one
(docs/benchmarks.md, "The linear path").

Both select the best validation epoch in the second half of training (ties -> later epoch; a
seeded participant-level validation split). ``patience`` (early stop) stays available, off in
both presets.

Splits (``cv``, ``repeats``, ``holdout``, ``val_fraction``, ``seed``) are part of the config,
so a TOML file can hold a whole experiment.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eegformer_cli.choices import (
    DEFAULT_DEVICE,
    DEFAULT_PRECISION,
    DEFAULT_PRESET,
    DEVICES,
    PRECISIONS,
    PRESETS,
)
from eegformer_cli.errors import UsageError, check_choice

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

AUGMENTATIONS = ("graphon", "none")
CLASS_WEIGHTINGS = ("balanced", "none")
SELECTION_METRICS = ("bac", "paper_bac", "log_loss")
#: The linear path's penalty (``linear_fit.py``): the logistic-regression reference's L2, L1, or
#: the better of the two by its inner CV.
LINEAR_PENALTIES = ("l2", "l1", "auto")
#: Whether the transformer path is kept (``transformer_keep.py``): chosen on validation, never
#: trained, always kept.
TRANSFORMER_PATH_MODES = ("auto", "off", "on")
#: The static stage's candidates (``static_choice.py``): the inner CV's rule, or one candidate
#: whatever it says ("connectivity": the linear path alone, as earlier versions).
STATIC_PATHS = ("connectivity", "auto", "tangent_space", "stacked")

# Fields of ModelConfig that come from the data or from the training config itself, not from
# its model overrides.
DATA_DERIVED_MODEL_FIELDS = (
    "n_channels",
    "band_names",
    "band_edges_hz",
    "n_classes",
    "channel_names",
    "linear_path",
    "linear_on_means",
    "linear_segment_products",
    "input_standardisation",
    "tangent_space_bands",
)


@dataclass
class TrainConfig:
    """Every setting of a training run. Units: rates per optimiser step, sizes in samples
    (30 s-style segments), fractions of participants.

    ``model`` holds overrides of the model preset's fields (``ModelConfig.preset(preset,
    **model)``), e.g. ``{"d_model": 64, "n_layers": 4}``.
    """

    preset: str = DEFAULT_PRESET
    # optimisation
    epochs: int = 60
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    warmup_epochs: float = 5.0
    warmup_lr_init: float = 1e-7
    lr_min: float = 1e-7
    drop_last: bool = False
    # inputs (standardise.py): per-entry z-score of coh / wPLI from the training segments
    input_standardisation: bool = True
    # loss
    alpha: float = 0.7
    label_smoothing: float = 0.1
    class_weighting: str = "balanced"
    # augmentation (augment.py; segment_averaging: dataset.py)
    augmentation: str = "graphon"
    segment_averaging: float = 0.0
    augment_prob: float = 1.0
    cutmix_prob: float = 0.5
    mix_beta: float = 0.2
    # model selection (the best validation epoch in the second half of training)
    selection_metric: str = "bac"
    patience: int = 0
    val_fraction: float = 0.2
    # evaluation scheme
    cv: int = 5
    repeats: int = 1
    holdout: float = 0.0  # fraction in (0, 1) held out for test; 0: cross-validation
    seed: int = 0
    device: str = DEFAULT_DEVICE
    precision: str = DEFAULT_PRECISION
    model: dict = field(default_factory=dict)
    # the interaction screen (interaction_screen.py), inside every fit: entry pairs
    # (``interactions``) and entries with age (``age_interactions``), at most
    # ``interaction_max_pairs`` of each, gated by ``interaction_permutations`` label
    # permutations at the null's ``interaction_null_quantile``; ``interaction_proxies``: each
    # place goes to a distinct effect, its proxies (candidates whose products correlate
    # with its own) recorded beside it (off: the best pairs, as earlier versions kept them)
    interactions: bool = False
    age_interactions: bool = False
    interaction_max_pairs: int = 10
    interaction_permutations: int = 20
    interaction_null_quantile: float = 1.0
    interaction_proxies: bool = False
    # ``dynamic_pairs``: beside the screen of means, the within-recording screen (pairs whose
    # segment-wise deviations from their recording's means co-vary differently in the
    # classes: couplings that come and go together); when it keeps a pair, the transformer
    # path reads the kept pairs' per-segment products alone (``model.transformer_inputs``
    # "interactions") over a static stage tempered toward chance, never sharpened (off: the
    # screen of means alone, as earlier versions)
    dynamic_pairs: bool = False
    # ``linear_segment_products``: the linear path on recording means reads the kept pairs'
    # products as each recording's mean of its segments' products (off: the products of its
    # means, as earlier versions)
    linear_segment_products: bool = False
    # the linear path (linear_fit.py, transformer_keep.py): fitted first and convexly with
    # ``linear_penalty``; the transformer path trained on its residual and kept
    # (``transformer_path`` "auto") only when validation cross-entropy improves by more than
    # ``keep_margin`` (nats) plus the standard error of that gain
    linear_path: bool = False
    linear_penalty: str = "l2"
    transformer_path: str = "auto"
    keep_margin: float = 0.0
    # "auto": stop the transformer path's training once ``keep_patience`` epochs in a row
    # missed the keep rule (0: train every epoch, as earlier versions)
    keep_patience: int = 0
    # the final model trains its transformer path only where the cross-validation kept it in
    # some fold (it waits for the folds; off: its own keep rule alone, as earlier versions)
    final_follows_folds: bool = False
    # the linear path on each recording's mean connectivity (the products of the means, one
    # logit per recording: ``model/linear_path.py``); false: per segment, as earlier versions
    linear_means: bool = False
    # the static stage's candidates (static_choice.py): "auto" the connectivity path unless
    # the tangent space or both stacked beat it by the inner CV's margin; "connectivity" the
    # linear path alone (earlier versions); "tangent_space" / "stacked" that candidate
    static_path: str = "connectivity"
    # ``train --learning-curve`` (experiment/learning_curve.py): the nested participant subsets
    # of each outer training part, as fractions of it (the whole part is the run itself)
    learning_curve_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)

    @classmethod
    def preset_config(cls, name: str) -> TrainConfig:
        """The preset ``name`` ("default" or "paper") with nothing overridden."""
        check_choice("preset", name, PRESETS)
        return cls(**_PRESET_VALUES[name])

    def to_dict(self) -> dict:
        """Plain JSON-able dict (tuples become lists)."""
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        out["learning_curve_fractions"] = list(self.learning_curve_fractions)
        return out

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        """Build and validate from a dict holding every field (as :meth:`to_dict` of this or an
        earlier version writes: see :func:`current_train_fields`)."""
        config = cls()
        return apply_overrides(config, current_train_fields(values), source="config")


#: Each preset's keyword arguments of :class:`TrainConfig` (the fields it sets).
_PRESET_VALUES: dict[str, dict[str, Any]] = {
    "paper": {
        "preset": "paper",
        "epochs": 100,
        "batch_size": 64,
        "lr": 5e-5,
        "weight_decay": 1e-5,
        "betas": (0.9, 0.99),
        "eps": 1e-8,
        "warmup_epochs": 5.0,
        "warmup_lr_init": 1e-7,
        "lr_min": 1e-7,
        "drop_last": True,
        "input_standardisation": False,
        "alpha": 0.7,
        "label_smoothing": 0.1,
        "class_weighting": "none",
        "augmentation": "graphon",
        "augment_prob": 1.0,
        "cutmix_prob": 0.5,
        "mix_beta": 0.2,
        "selection_metric": "paper_bac",
        "patience": 0,
        "val_fraction": 0.1,
        "model": {},
    },
    # chosen by measured accuracy (docs/benchmarks-history.md, "Accuracy: how `default` got here")
    "default": {
        "preset": "default",
        "epochs": 40,
        "batch_size": 16,
        "lr": 1e-3,
        "weight_decay": 0.1,
        "warmup_epochs": 3.0,
        "augmentation": "none",
        "segment_averaging": 0.5,
        "patience": 0,
        "interactions": True,
        "age_interactions": True,
        "interaction_proxies": True,
        "dynamic_pairs": True,
        "linear_path": True,
        "linear_penalty": "auto",
        "linear_means": True,
        "static_path": "auto",
        "keep_patience": 3,
        "final_follows_folds": True,
        "selection_metric": "log_loss",
        "model": {},
    },
}

#: Settings that earlier versions stored in run folders and model files, with the value every
#: run of this version has: dropped when a stored config holds it.
RETIRED_SETTINGS = {
    "selection": ("second_half",),
    # opt-ins that ``dynamic_pairs`` replaced (the screen on raw segments; the tempering alone)
    "interaction_segments": (False,),
    "static_temperature": (False,),
}
#: Values of current settings that only experimental variants of earlier versions had.
RETIRED_SETTING_VALUES = {"augmentation": ("mixup",)}
#: Settings of earlier versions under their names of today (stored configs and TOML files
#: read under either name; runs and model files write today's).
RENAMED_SETTINGS = {"residual": "transformer_path", "residual_margin": "keep_margin"}


def renamed_settings(values: dict, source: str) -> dict:
    """``values`` (TrainConfig fields) with :data:`RENAMED_SETTINGS`' earlier names under
    today's; UsageError naming ``source`` when both names are given."""
    out = dict(values)
    for old, new in RENAMED_SETTINGS.items():
        if old in out:
            if new in out:
                raise UsageError(f"{source} sets both {old!r} and {new!r} (its name today)")
            out[new] = out.pop(old)
    return out


def current_train_fields(stored: dict) -> dict:
    """A stored training config (``TrainConfig.to_dict()`` of this or an earlier version) in
    this version's settings: :data:`RETIRED_SETTINGS` holding their surviving value are
    dropped, and so are the retired fields of its model overrides
    (``xaiguiformer.current_model_fields``).

    Raises :class:`UsageError` naming the setting when it holds a value only an experimental
    variant had.
    """
    from eegformer_cli.model.xaiguiformer import (  # loads torch
        current_model_fields,
        without_retired,
    )

    current = without_retired(
        renamed_settings(stored, "a stored training config"),
        RETIRED_SETTINGS,
        RETIRED_SETTING_VALUES,
        "training setting",
    )
    if isinstance(current.get("model"), dict):
        current["model"] = current_model_fields(current["model"])
    return current


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(TrainConfig)}


def load_toml(path: str | os.PathLike) -> dict:
    """Read a TOML config file into a dict (top-level keys = TrainConfig fields, ``[model]`` table).

    Raises UsageError naming the file when it is missing or not valid TOML.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError("config file not found", path=path, hint="check --config") from None
    except OSError as exc:  # a folder, no permission
        raise UsageError(
            f"config file not readable ({exc.strerror})", path=path, hint="check --config"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"not a valid TOML file: {exc}", path=path) from None


def resolve_config(
    preset: str = DEFAULT_PRESET,
    toml_path: str | os.PathLike | dict | None = None,
    overrides: dict | None = None,
) -> TrainConfig:
    """Preset -> TOML file (or a dict of its keys) -> flag overrides, validated. ``None``
    values in ``overrides`` are ignored.

    A TOML file may itself name a ``preset``; an explicit ``preset`` flag (non-default) wins.
    """
    if isinstance(toml_path, dict):
        file_values, source = dict(toml_path), "config"
    else:
        file_values = load_toml(toml_path) if toml_path else {}
        source = f"config file {toml_path}" if toml_path else "config"
    file_values = renamed_settings(file_values, source)
    name = file_values.get("preset", preset) if preset == DEFAULT_PRESET else preset
    config = TrainConfig.preset_config(name)
    config = apply_overrides(
        config, {k: v for k, v in file_values.items() if k != "preset"}, source=source
    )
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    return apply_overrides(config, flags, source="command line")


def ablation_flags(
    no_xai: bool, no_interactions: bool, no_age_interactions: bool, frequency_encoding: str | None
) -> dict:
    """The overrides (for :func:`resolve_config`; None: not given) of ``--no-xai``,
    ``--no-interactions``, ``--no-age-interactions`` and ``--frequency-encoding``, as ``train``
    and the estimator take them."""
    model: dict[str, bool | str] = {}
    if no_xai:
        model["xai_refinement"] = False
    if frequency_encoding is not None:
        model["frequency_encoding"] = frequency_encoding
    return {
        "interactions": False if no_interactions else None,
        "age_interactions": False if no_age_interactions else None,
        "model": model or None,
    }


def apply_overrides(config: TrainConfig, values: dict, source: str) -> TrainConfig:
    """Return a copy of ``config`` with ``values`` applied and validated.

    ``values["model"]`` is merged into the existing model overrides, key by key.
    Raises UsageError naming the key, the source and the allowed keys/values.
    """
    current = config.to_dict()
    for key, value in values.items():
        if key not in _FIELD_TYPES:
            raise UsageError(
                f"unknown training setting {key!r} in {source}; allowed keys are "
                + ", ".join(sorted(_FIELD_TYPES))
            )
        if key == "model":
            if not isinstance(value, dict):
                raise UsageError(f"'model' in {source} must be a table of model settings")
            current["model"] = {**current["model"], **value}
        else:
            current[key] = _coerce(key, value, source)
    current["betas"] = tuple(current["betas"])
    current["learning_curve_fractions"] = tuple(current["learning_curve_fractions"])
    resolved = TrainConfig(**current)
    validate(resolved)
    return resolved


def _coerce(key: str, value, source: str):
    kind = _FIELD_TYPES[key]
    try:
        if kind == "int":
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind == "str":
            return str(value)
        if key == "betas":
            pair = tuple(float(v) for v in value)
            if len(pair) != 2:
                raise ValueError
            return pair
        if key == "learning_curve_fractions":
            if isinstance(value, (str, bytes)) or any(isinstance(v, bool) for v in value):
                raise ValueError
            return tuple(float(v) for v in value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(
            f"invalid value {value!r} for {key!r} in {source}; expected {kind}"
        ) from None
    return value


def validate(config: TrainConfig) -> None:
    """Check choices and ranges; raise UsageError naming the setting and what is allowed."""
    from eegformer_cli.model.xaiguiformer import ModelConfig  # the model loads torch

    check_choice("preset", config.preset, PRESETS)
    check_choice("augmentation", config.augmentation, AUGMENTATIONS)
    check_choice("class_weighting", config.class_weighting, CLASS_WEIGHTINGS)
    check_choice("selection_metric", config.selection_metric, SELECTION_METRICS)
    check_choice("linear_penalty", config.linear_penalty, LINEAR_PENALTIES)
    check_choice("transformer_path", config.transformer_path, TRANSFORMER_PATH_MODES)
    check_choice("static_path", config.static_path, STATIC_PATHS)
    _check_range("keep_margin", config.keep_margin, 0, None)
    _check_range("keep_patience", config.keep_patience, 0, None)
    if config.transformer_path != "auto" and not config.linear_path:
        raise UsageError(
            f"transformer_path={config.transformer_path!r} needs linear_path = true (without "
            "a linear path the transformer path is the whole model)"
        )
    check_choice("device", config.device, DEVICES)
    check_choice("precision", config.precision, PRECISIONS)
    _check_range("epochs", config.epochs, 1, None)
    _check_range("batch_size", config.batch_size, 2, None)
    _check_range("lr", config.lr, 0, None, low_open=True)
    _check_range("weight_decay", config.weight_decay, 0, None)
    _check_range("warmup_epochs", config.warmup_epochs, 0, None)
    _check_range("alpha", config.alpha, 0, 1)
    _check_range("label_smoothing", config.label_smoothing, 0, 1, high_open=True)
    _check_range("augment_prob", config.augment_prob, 0, 1)
    _check_range("segment_averaging", config.segment_averaging, 0, 1)
    _check_range("cutmix_prob", config.cutmix_prob, 0, 1)
    _check_range("mix_beta", config.mix_beta, 0, None, low_open=True)
    _check_range("patience", config.patience, 0, None)
    _check_range("val_fraction", config.val_fraction, 0, 0.5, low_open=True)
    _check_range("cv", config.cv, 2, None)
    _check_range("repeats", config.repeats, 1, None)
    _check_range("interaction_max_pairs", config.interaction_max_pairs, 1, None)
    _check_range("interaction_permutations", config.interaction_permutations, 1, None)
    _check_range("interaction_null_quantile", config.interaction_null_quantile, 0, 1, low_open=True)
    _check_range("seed", config.seed, 0, 2**32 - 1)  # NumPy's and torch's seed range
    if config.holdout != 0:  # 0 is the documented "no holdout": cross-validation
        check_holdout(config.holdout)
    for beta in config.betas:
        _check_range("betas", beta, 0, 1, high_open=True)
    check_fractions(config.learning_curve_fractions)
    allowed = {f.name for f in dataclasses.fields(ModelConfig)} - set(DATA_DERIVED_MODEL_FIELDS)
    for key in config.model:
        if key not in allowed:
            raise UsageError(
                f"unknown model setting {key!r}; allowed model settings are "
                + ", ".join(sorted(allowed))
            )


def check_fractions(fractions, name: str = "learning_curve_fractions") -> None:
    """UsageError unless ``fractions`` are at least 2 fractions strictly between 0 and 1, in
    increasing order, no two in the same whole percent (a refit's file is named by it:
    ``experiment/run_folder.py``)."""
    values = list(fractions)
    finite = all(isinstance(v, float) and math.isfinite(v) for v in values)
    percents = [round(v * 100) for v in values] if finite else []
    if not (
        len(values) >= 2
        and finite
        and all(0 < v < 1 for v in values)
        and all(a < b for a, b in itertools.pairwise(percents))
    ):
        raise UsageError(
            f"invalid value {values!r} for {name}; allowed values are at least 2 fractions "
            "of each fold's training part, strictly between 0 and 1, increasing, no two in the "
            "same whole percent, e.g. [0.25, 0.5, 0.75]"
        )


def check_holdout(holdout: float, name: str = "holdout") -> None:
    """UsageError unless ``holdout`` is a fraction in (0, 1): the share of participants held
    out for test. ``name``: the setting as the caller's user spells it (``--holdout`` for the
    flag, where 0 is no scheme at all; in a config, 0 means cross-validation and is not
    checked)."""
    if not (math.isfinite(holdout) and 0 < holdout < 1):
        raise UsageError(
            f"invalid value {holdout!r} for {name}; allowed range is (0, 1), "
            "the fraction of participants held out for test",
            hint="leave it out for cross-validation with --cv",
        )


def _check_range(name, value, low, high, low_open=False, high_open=False) -> None:
    if not math.isfinite(value):
        raise UsageError(f"invalid value {value!r} for {name}; it must be a finite number")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        span = f"{left}{low}, {'inf' if high is None else high}{right}"
        raise UsageError(f"invalid value {value!r} for {name}; allowed range is {span}")
