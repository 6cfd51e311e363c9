"""The self-describing model file (``RUN_DIR/model.pt``): everything ``predict`` needs.

A ``torch.save`` of one dict made of plain types and tensors only (so it loads with
``torch.load(weights_only=True)``, which never runs code from the file):

==========================  ====================================================================
key                         value
==========================  ====================================================================
``format``                  ``"eegformer-model"``
``format_version``          int, :data:`FORMAT_VERSION`; a file with a higher one is refused,
                            one of version 1 maps onto this version's stages
                            (:func:`current_layout`)
``eegformer_version``       the package version that wrote it
``model_config``            ``ModelConfig.to_dict()`` (an earlier version's loads too,
                            ``xaiguiformer.current_model_fields``)
``input_standardisation``   bool: the model has a standardiser (z-scored inputs, statistics
                            in the state dict; ``model/stages.py``), as its config says
``state_dict``              the weights, stage by stage (``standardiser.*``, ``static.*``,
                            ``transformer.*``, ``transformer_kept``; ``model/stages.py``),
                            demographic scaling and input statistics included
``label_names``             class names, index = class index
``label_column``            the manifest column the labels came from
``positive_label``          positive class for two-class metrics (None otherwise)
``channels``                canonical channel names, in the model's order
``bands``                   band names, token order
``band_edges_hz``           [[f_low, f_high], ...]
``preprocess_settings``     ``DIR/preprocess.json`` of the training data (settings used again
                            by ``predict`` on raw recordings)
``demographic_stats``       ``{"age_mean", "age_std"}`` of the training participants (or None)
``train_config``            ``TrainConfig.to_dict()``
``trained_on``              which participants: ``"all"`` (after CV) or ``"holdout"``
``versions``                ``versions.package_versions()`` at training time
``training_data``           what the model was fitted to (fit and epoch-selection recordings):
                            participant and recording ids, the recordings' signal hashes, age
                            range, sexes, sampling-rate and length ranges
                            (:func:`eegformer_cli.provenance.describe_training_data`), and
                            ``bids_selection`` when its preprocess folder selected a BIDS root's
                            recordings (``predict`` on a root selects the same); absent
                            from files written before eegformer kept it (they load, and
                            ``predict`` says once that it cannot check against it)
``baseline_connectome``     ``{"coh", "wpli"}`` float32 tensors (n_bands, C, C): the mean
                            connectome of the recordings the model was fitted to (mean over
                            their segments), the baseline connectome ``explain`` attributes
                            against; ``reference_connectome`` in files of earlier versions;
                            absent from earlier ones (:func:`baseline_connectome` falls back)
``recalibration``           ``{"method": "none"|"temperature"|"platt", "params": {...}}``: what
                            ``predict`` applies to the probabilities (:mod:`calibration`);
                            absent from files written before it (then none)
``conformal``               ``{"probabilities": (m, K), "labels": (m,), "score": "lac"}``: the
                            run's out-of-fold (recalibrated) probabilities, one per recording,
                            with their true class indices: ``predict --coverage``'s
                            calibration set (:mod:`conformal`); absent from files written
                            before it
==========================  ====================================================================

``recalibration`` and ``conformal`` are added by :func:`add_calibration` once the run's
out-of-fold predictions are known (after the model itself is saved).
"""

from __future__ import annotations

import io
import math
import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

import eegformer_cli
from eegformer_cli.atomic import write_bytes
from eegformer_cli.errors import EegformerError, ModelFileError, UsageError
from eegformer_cli.versions import package_versions

if TYPE_CHECKING:
    from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer

FORMAT_NAME = "eegformer-model"
#: 2: the state dict stage by stage (``model/stages.py``); 1: an ``XAIguiFormer`` whose
#: linear path, tangent-space path and static mix were attributes of its own, inside a
#: ``StandardisedModel`` (keys ``coh_mean``, ..., ``model.*``) when the file said
#: ``input_standardisation``, the keep decision in the config (``residual_kept``).
FORMAT_VERSION = 2
#: A model file's keys written by earlier versions under their names of today (read under
#: either).
RENAMED_BUNDLE_KEYS = {"reference_connectome": "baseline_connectome"}
#: Version 1's state-dict prefixes of the static stage's parts, and where they are now; every
#: other key of an ``XAIguiFormer`` was the transformer path's (``transformer.*``).
V1_STATIC_PREFIXES = {
    "linear.": "static.linear.",
    "tangent_space.": "static.tangent_space.",
    "static_mix.": "static.mix.",
}


@dataclass
class ModelBundle:
    """A loaded model file. ``model`` is an ``XAIguiFormer`` (raw connectivity in) in eval mode
    on ``device``; ``model_config`` its config in this version's fields."""

    path: Path
    model: torch.nn.Module
    model_config: dict
    label_names: list[str]
    label_column: str
    positive_label: str | None
    channels: list[str]
    bands: list[str]
    band_edges_hz: np.ndarray
    preprocess_settings: dict
    demographic_stats: dict | None
    train_config: dict
    trained_on: str
    eegformer_version: str
    versions: dict
    training_data: dict | None = None
    baseline: dict | None = None
    recalibration: dict | None = None
    conformal: dict | None = None


def save_model_file(
    path: str | Path,
    model,
    *,
    label_names: list[str],
    label_column: str,
    positive_label: str | None,
    channels: list[str],
    bands: list[str],
    band_edges_hz,
    preprocess_settings: dict,
    demographic_stats: dict | None,
    train_config: dict,
    trained_on: str,
    training_data: dict | None = None,
    baseline_connectome: dict | None = None,
) -> None:
    """Write the bundle atomically (a temporary file renamed over ``path``).

    ``baseline_connectome``: ``{"coh", "wpli"}`` float32 arrays (n_bands, C, C), the mean
    connectome of the fit recordings (module docs); None: not stored."""
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    bundle = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "eegformer_version": eegformer_cli.__version__,
        "model_config": _plain(model.config.to_dict()),
        "input_standardisation": model.standardiser is not None,
        "state_dict": state,
        "label_names": list(label_names),
        "label_column": label_column,
        "positive_label": positive_label,
        "channels": list(channels),
        "bands": list(bands),
        "band_edges_hz": np.asarray(band_edges_hz, dtype=float).tolist(),
        "preprocess_settings": _plain(preprocess_settings),
        "demographic_stats": _plain(demographic_stats),
        "train_config": _plain(train_config),
        "trained_on": trained_on,
        "versions": package_versions(),
        "training_data": _plain(training_data),
    }
    if baseline_connectome is not None:
        bundle["baseline_connectome"] = {
            key: torch.as_tensor(np.asarray(baseline_connectome[key], dtype=np.float32))
            for key in ("coh", "wpli")
        }
    buffer = io.BytesIO()
    torch.save(bundle, buffer)
    write_bytes(path, buffer.getvalue())


def add_calibration(path: str | Path, entry: dict) -> None:
    """Store ``entry`` (``{"recalibration", "conformal"}``, :mod:`oof_calibration`) in the
    model file at ``path``, rewritten atomically (the weights unchanged)."""
    bundle = torch.load(path, map_location="cpu", weights_only=True)
    bundle.update(_plain(entry))
    buffer = io.BytesIO()
    torch.save(bundle, buffer)
    write_bytes(path, buffer.getvalue())


def is_linear_path_alone(path: str | Path) -> bool:
    """Whether the model file at ``path`` holds a model whose transformer path was not kept:
    its logits are its static stage's alone (``model/stages.py``)."""
    config, state = current_layout(torch.load(path, map_location="cpu", weights_only=True))
    return bool(config.get("linear_path")) and not bool(state["transformer_kept"])


def current_layout(bundle: dict) -> tuple[dict, dict]:
    """A model file's ``(model_config, state_dict)`` in this version's stages: a file of
    format version 1 (:data:`FORMAT_VERSION`) maps onto them: ``residual_kept`` (absent: true)
    becomes the ``transformer_kept`` buffer, the file's ``input_standardisation`` the config's,
    a ``StandardisedModel``'s buffers the standardiser's, and each part's keys move under its
    stage (:data:`V1_STATIC_PREFIXES`, else ``transformer.``). Other files as stored."""
    config, state = dict(bundle["model_config"]), dict(bundle["state_dict"])
    if bundle["format_version"] >= 2:
        return config, state
    from eegformer_cli.model.stages import STANDARDISER_BUFFERS

    kept = bool(config.pop("residual_kept", True))
    standardised = bool(bundle["input_standardisation"])
    config["input_standardisation"] = standardised
    staged = {}
    for key, value in state.items():
        if standardised and key in STANDARDISER_BUFFERS:
            staged[f"standardiser.{key}"] = value
            continue
        key = key.removeprefix("model.") if standardised else key
        old = next((p for p in V1_STATIC_PREFIXES if key.startswith(p)), None)
        staged[
            f"transformer.{key}" if old is None else V1_STATIC_PREFIXES[old] + key[len(old) :]
        ] = value
    staged["transformer_kept"] = torch.tensor(kept)
    return config, staged


def _plain(value):
    """Nested containers of numpy/Path values -> plain Python types (weights_only-safe)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return value


def load_model_file(path: str | os.PathLike, device: str | torch.device = "cpu") -> ModelBundle:
    """Load and validate a model file; the model is rebuilt from its config, in eval mode.

    Raises ModelFileError (exit 4) naming the file when it is missing, corrupt or truncated,
    not an eegformer model, from a newer format, made by an experimental variant that this
    version no longer has (naming the field), or its weights do not fit its config. A config
    written by an earlier version loads without its retired fields
    (``xaiguiformer.current_model_fields``).
    """
    from eegformer_cli.model.xaiguiformer import current_model_fields

    path = Path(path)
    bundle = _read_bundle(path)
    if isinstance(bundle.get("model_config"), dict):
        try:  # a config of an earlier version: retired fields, experimental variants
            current_model_fields(bundle["model_config"])
        except UsageError as exc:
            raise ModelFileError(str(exc), path=path, hint=exc.hint) from None
    try:
        result, config = _rebuild(path, bundle, device)
    except (KeyError, TypeError, ValueError, RuntimeError, EegformerError) as exc:
        reason = exc.one_line() if isinstance(exc, EegformerError) else " ".join(str(exc).split())
        raise ModelFileError(
            f"model file is incomplete or inconsistent: {reason[:200]}",
            path=path,
            hint="retrain with this eegformer version",
        ) from None
    if len(result.label_names) != config.n_classes or len(result.channels) != config.n_channels:
        raise ModelFileError("label names or channels do not match the model's config", path=path)
    return result


def _read_bundle(path: Path) -> dict:
    """The dict a model file holds, once it is known to be an eegformer model file of a format
    version this version reads; ModelFileError naming the file otherwise."""
    if not path.is_file():
        raise ModelFileError("model file not found", path=path, hint="pass RUN_DIR/model.pt")
    with open(path, "rb") as handle:  # torch.save writes a zip archive; a .json, .tsv, ... is not
        if handle.read(4) != b"PK\x03\x04":
            raise ModelFileError(
                "not a model file (not a PyTorch archive)",
                path=path,
                hint="pass the model.pt written by `eegformer train`",
            )
    try:
        bundle = torch.load(path, map_location="cpu", weights_only=True)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        zipfile.BadZipFile,
        OSError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
    ):
        # torch's own message is pages of advice about weights_only; the user needs the fact
        raise ModelFileError(
            "not a readable model file (corrupt or truncated, or holding "
            "objects other than eegformer's)",
            path=path,
            hint="retrain or copy the file again",
        ) from None
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT_NAME:
        raise ModelFileError(
            "not an eegformer model file",
            path=path,
            hint="pass the model.pt written by `eegformer train`",
        )
    version = bundle.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise ModelFileError(
            f"model file format version {version!r} is not supported by "
            f"eegformer {eegformer_cli.__version__} (supports "
            f"{FORMAT_VERSION})",
            path=path,
            hint="use the eegformer version that wrote it "
            f"({bundle.get('eegformer_version', 'unknown')}) or retrain",
        )
    return bundle


def _rebuild(
    path: Path, bundle: dict, device: str | torch.device
) -> tuple[ModelBundle, ModelConfig]:
    """The model of a checked model file's ``bundle``, rebuilt from its config with its weights
    loaded, in a :class:`ModelBundle`, and the config. A file whose contents do not fit raises
    KeyError, TypeError, ValueError, RuntimeError or an EegformerError."""
    from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer

    stored_config, state = current_layout(bundle)
    config = ModelConfig.from_dict(stored_config)
    model = XAIguiFormer(config)
    model.load_state_dict(state)
    result = ModelBundle(
        path=path,
        model=model.to(device).eval(),
        model_config=stored_config,
        label_names=[str(n) for n in bundle["label_names"]],
        label_column=str(bundle["label_column"]),
        positive_label=bundle["positive_label"],
        channels=[str(c) for c in bundle["channels"]],
        bands=[str(b) for b in bundle["bands"]],
        band_edges_hz=np.asarray(bundle["band_edges_hz"], dtype=np.float64),
        preprocess_settings=dict(bundle["preprocess_settings"]),
        demographic_stats=bundle["demographic_stats"],
        train_config=bundle["train_config"],
        trained_on=str(bundle["trained_on"]),
        eegformer_version=str(bundle["eegformer_version"]),
        versions=dict(bundle["versions"]),
        training_data=bundle.get("training_data"),
        recalibration=bundle.get("recalibration"),
        conformal=bundle.get("conformal"),
    )
    earlier = {today: name for name, today in RENAMED_BUNDLE_KEYS.items()}
    stored = bundle.get("baseline_connectome", bundle.get(earlier["baseline_connectome"]))
    result.baseline = baseline_connectome(stored, model)
    return result, config


def baseline_connectome(stored: dict | None, model: XAIguiFormer) -> dict:
    """What ``explain`` attributes against: ``{"coh", "wpli"}`` float32 numpy (n_bands, C, C)
    and ``"description"`` (said in the report's captions).

    The file's ``baseline_connectome``; for a file written before eegformer stored it, the
    input standardisation's means (the same mean connectome of the training segments), and
    for one without either, zero connectivity.
    """
    if stored is not None:
        coh, wpli = (stored[key].float().numpy() for key in ("coh", "wpli"))
        description = "the mean connectome of the model's training recordings"
    elif model.standardiser is not None:
        coh = model.standardiser.coh_mean.cpu().numpy()
        wpli = model.standardiser.wpli_mean.cpu().numpy()
        description = "the mean connectome of the model's training recordings"
    else:
        shape = (len(model.config.band_names), model.config.n_channels, model.config.n_channels)
        coh, wpli = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        description = "zero connectivity (this model file stores no training mean connectome)"
    return {"coh": coh, "wpli": wpli, "description": description}


def demographic_stats(ages: np.ndarray) -> dict | None:
    """``{"age_mean", "age_std"}`` (years) of the known ages, or None when none is known.

    With a single known age (or all equal) the std is 1 year, to avoid division by zero.
    """
    known = np.asarray(ages, dtype=float)
    known = known[~np.isnan(known)]
    if not len(known):
        return None
    std = float(known.std())
    return {
        "age_mean": float(known.mean()),
        "age_std": std if std > 0 and math.isfinite(std) else 1.0,
    }
