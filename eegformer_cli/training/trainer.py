"""The training run: folds, epochs, model selection, resume, and the run folder's files.

``run_training`` does, in order:

1. read the data (:func:`dataset.load_training_data`), make or load the participant-wise
   splits (:mod:`splits`) and check every setting (model settings included), all before the
   run folder is created or touched; write ``config.json`` and ``splits.json`` (or check that
   the run folder holds the same run, to resume it);
2. for every fold not finished before: train XAIguiFormer on the fold's ``train``
   participants, select the epoch on its ``val`` participants (:func:`fit_model`), predict the
   ``test`` participants per recording; fit the logistic-regression reference
   (:mod:`reference`) on train + val and predict the same test recordings; write
   ``folds/<r{repeat}_f{fold}>.json`` atomically (history, out-of-fold rows, metrics);
3. write ``history.jsonl``, ``oof_predictions.tsv`` and ``metrics.json`` from all fold files;
4. the model file ``model.pt``: with ``holdout`` it is the model evaluated on the held-out
   participants (so ``predict`` on them reproduces ``oof_predictions.tsv``); with CV it is a
   model retrained on all participants with the same recipe (an inner validation split for
   selection), since every fold model saw only part of the data.

An interrupted run (Ctrl-C, SIGTERM, a crash) leaves only whole files; rerunning the same
command skips the finished folds. Reproducibility on CPU: Python, NumPy and torch are seeded
per fold, ``torch.use_deterministic_algorithms(True)``, one data-loading process and a seeded
shuffling generator, so two runs with the same seed give identical numbers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.utils.class_weight import compute_class_weight
from torch.utils.data import DataLoader

from eegformer_cli import console
from eegformer_cli.atomic import ensure_dir, remove_stale_temporaries, write_json, write_text
from eegformer_cli.devices import autocast, one_cpu_thread, resolve_device, seed_everything
from eegformer_cli.errors import UsageError
from eegformer_cli.inference import SEGMENTS_PER_BATCH, recording_logits, softmax
from eegformer_cli.model.diagnostics import mean_diagnostics, recording_diagnostics
from eegformer_cli.parallel import process_pool, worker_count
from eegformer_cli.training import audit, augment, distributed, merge, permutation, splits
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.dataset import (ConnectomeDataset, RecordingInfo, TrainingData,
                                            load_training_data, read_manifest)
from eegformer_cli.training.metrics import (classification_metrics, compare_folds,
                                             summarise_folds)
from eegformer_cli.training.model_file import demographic_stats, save_model_file
from eegformer_cli.training.reference import fit_reference, recording_features, reference_probabilities
from eegformer_cli.training.standardise import StandardisedModel, connectivity_stats
from eegformer_cli.versions import package_versions

MODEL_NAME = "xaiguiformer"
REFERENCE_NAME = "logistic_regression"
RUN_FILES = ("config.json", "splits.json", "history.jsonl", "oof_predictions.tsv", "metrics.json",
             "model.pt", "report.html")  # report.html: `eegformer report`'s default output


# ------------------------------------------------------------------------------------------
# small pure pieces


@contextlib.contextmanager
def deterministic_algorithms(device: torch.device):
    """``torch.use_deterministic_algorithms(True)`` on CPU for the duration, restored after."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(device.type == "cpu" or previous)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def lr_at_step(step: int, total_steps: int, warmup_steps: int, lr: float, lr_min: float,
               warmup_lr_init: float) -> float:
    """Learning rate of optimiser step ``step`` (0-based), timm ``CosineLRScheduler`` semantics
    with ``warmup_prefix=False`` as the reference: linear warmup from ``warmup_lr_init`` over
    ``warmup_steps``, and a cosine from ``lr`` to ``lr_min`` over all ``total_steps`` (the
    warmup steps included)."""
    if step < warmup_steps:
        return warmup_lr_init + step * (lr - warmup_lr_init) / warmup_steps
    progress = min(step / max(total_steps, 1), 1.0)
    return lr_min + 0.5 * (lr - lr_min) * (1.0 + np.cos(np.pi * progress))


def fold_seed(seed: int, repeat: int, fold: int) -> int:
    """Seed of one fold's model, shuffling and augmentation (the final model uses ``seed``)."""
    return seed if repeat < 0 else seed + 1000 * (repeat + 1) + fold


def seed_of(fold: splits.Fold, seed: int) -> int:
    """The seed ``fold`` is trained with: its own (given by a splits file), else
    :func:`fold_seed` of the run's ``seed``."""
    return fold.seed if fold.seed is not None else fold_seed(seed, fold.repeat, fold.fold)


def selection_improved(config: TrainConfig, epoch: int, metric: float, loss: float,
                       best: tuple | None) -> bool:
    """Whether epoch ``epoch`` (0-based) becomes the selected one.

    ``second_half`` (paper): only epochs >= epochs / 2, metric >= best (ties -> later epoch).
    ``best`` (default): any epoch; higher metric wins, ties broken by lower validation loss,
    then the earlier epoch.
    In every mode the last epoch is eligible (with ``epochs`` 1 the second half would be
    empty), and the first eligible epoch is always selected, so a run of any length selects
    an epoch.
    """
    if config.selection == "second_half":
        eligible = epoch >= min(config.epochs / 2, config.epochs - 1)
        return eligible and (best is None or metric >= best[0])
    return best is None or (metric, -loss) > best


# ------------------------------------------------------------------------------------------
# one model


@dataclass
class FitResult:
    model: torch.nn.Module
    history: list[dict]
    best_epoch: int          # 1-based
    seconds: float


def build_model(data: TrainingData, config: TrainConfig, ages: np.ndarray):
    """An XAIguiFormer for ``data`` with the config's model preset and overrides (inside a
    :class:`StandardisedModel` when ``config.input_standardisation``; its statistics are set
    by the caller); demographic scaling from the training recordings' ``ages`` (years, NaN =
    unknown)."""
    from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer

    model_config = ModelConfig.preset(
        config.preset, n_channels=len(data.channels), band_names=data.bands,
        band_edges_hz=[tuple(edge) for edge in data.band_edges_hz.tolist()],
        n_classes=len(data.label_names), channel_names=data.channels, **config.model)
    model = XAIguiFormer(model_config)
    if config.input_standardisation:
        model = StandardisedModel(model)
    stats = demographic_stats(ages)
    model.set_demographic_stats(*(None, None) if stats is None else (stats["age_mean"],
                                                                      stats["age_std"]))
    return model


def _loss(logits_coarse, logits_refined, targets, config: TrainConfig, weight):
    def ce(logits):
        return F.cross_entropy(logits.float(), targets, weight=weight,
                               label_smoothing=config.label_smoothing)
    return (1.0 - config.alpha) * ce(logits_coarse) + config.alpha * ce(logits_refined)


def evaluate(model, dataset: ConnectomeDataset, device: torch.device) -> np.ndarray:
    """Mean refined logits per recording of ``dataset``: float64 (n_recordings, n_classes).

    Recordings go through the model in chunks of at most :data:`SEGMENTS_PER_BATCH` segments,
    one chunk in memory at a time; under torchrun the chunks are shared over the processes and
    the logits gathered on every process (:func:`distributed.map_gathered`).
    """
    def chunk_logits(chunk: list[int]) -> np.ndarray:
        return recording_logits(model, [(*dataset.recording_arrays(r), dataset.recordings[r].age,
                                         dataset.recordings[r].sex) for r in chunk], device)

    chunks = distributed.evaluation_chunks([rec.n_segments for rec in dataset.recordings],
                                           SEGMENTS_PER_BATCH)
    return np.concatenate(distributed.map_gathered(chunk_logits, chunks))


def attention_summary(model, dataset: ConnectomeDataset, device: torch.device,
                      ablations: bool) -> dict | None:
    """What the model's attention does on ``dataset`` (model/diagnostics.py): every quantity
    per pass and layer, the mean over recordings of each recording's segment mean; the
    replacement ablations only with ``ablations`` (they cost a forward per pass, layer and
    replacement). None for an empty dataset."""
    if not dataset.recordings:
        return None
    recordings = [(*dataset.recording_arrays(r), rec.age, rec.sex)
                  for r, rec in enumerate(dataset.recordings)]
    return mean_diagnostics(recording_diagnostics(model, recordings, device, ablations))


def fit_model(data: TrainingData, train_recs: list[RecordingInfo], val_recs: list[RecordingInfo],
              config: TrainConfig, device: torch.device, seed: int, tag: dict,
              on_epoch=None) -> FitResult:
    """Train one model on ``train_recs``, selecting the epoch on ``val_recs`` (per recording).

    ``tag`` (``{"repeat", "fold"}``) is copied into every history record; ``on_epoch(record)``
    is called after each epoch (progress display). Returns the model with the selected
    epoch's weights, on ``device``, in eval mode.
    """
    with one_cpu_thread():
        return _fit_model(data, train_recs, val_recs, config, device, seed, tag, on_epoch)


def _fit_model(data, train_recs, val_recs, config, device, seed, tag, on_epoch) -> FitResult:
    start = time.perf_counter()
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    model = build_model(data, config, np.array([r.age for r in train_recs]))
    train_set = ConnectomeDataset(train_recs, data.label_names, data.channels, data.bands,
                                  segment_averaging=config.segment_averaging, rng=rng)
    val_set = ConnectomeDataset(val_recs, data.label_names, data.channels, data.bands)
    if config.input_standardisation:
        model.set_stats(connectivity_stats(train_set.recording_arrays(r)
                                           for r in range(len(train_recs))))
    model = model.to(device)
    train_model = distributed.wrap_for_training(model)  # DDP under torchrun, else model
    generator = torch.Generator().manual_seed(seed)
    drop_last = config.drop_last and len(train_set) > config.batch_size
    loader = DataLoader(train_set, batch_size=config.batch_size, shuffle=True,
                        drop_last=drop_last, generator=generator, num_workers=0)
    n_classes = len(data.label_names)
    weight = None
    if config.class_weighting == "balanced":
        segment_labels = train_set.labels[train_set.index[:, 0]]
        weights = np.ones(n_classes)
        present = np.unique(segment_labels)
        weights[present] = compute_class_weight("balanced", classes=present, y=segment_labels)
        weight = torch.tensor(weights, dtype=torch.float32, device=device)
    # fused: one kernel over all parameters (CPU and CUDA) instead of ~10 small ops per tensor;
    # 3.6 ms instead of 15 ms per step for the paper model's 186 tensors on this project's CPU
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=tuple(config.betas),
                                  eps=config.eps, weight_decay=config.weight_decay, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=device.type == "cuda"
                                  and not torch.cuda.is_bf16_supported())
    steps_per_epoch = len(loader)
    total_steps = config.epochs * steps_per_epoch
    warmup_steps = int(round(config.warmup_epochs * steps_per_epoch))
    val_labels = val_set.labels
    history, best, best_state, best_epoch, since_best, step = [], None, None, 0, 0, 0
    for epoch in range(config.epochs):
        epoch_start = time.perf_counter()
        model.train()
        losses = []
        for batch in loader:
            lr = lr_at_step(step, total_steps, warmup_steps, config.lr, config.lr_min,
                            config.warmup_lr_init)
            for group in optimizer.param_groups:
                group["lr"] = lr
            targets = F.one_hot(batch["label"], n_classes).float()
            coh, wpli, age, sex, targets = augment.mix_batch(
                batch["coh"], batch["wpli"], batch["age"], batch["sex"], targets,
                config.augmentation, config.augment_prob, config.cutmix_prob, config.mix_beta, rng)
            (coh, wpli, age, sex, targets), loss_scale = distributed.shard_batch(
                coh, wpli, age, sex, targets)  # this process's slice of the batch (torchrun)
            with autocast(device):
                coarse, refined = train_model(coh.to(device), wpli.to(device), age.to(device),
                                              sex.to(device))
            loss = _loss(coarse, refined, targets.to(device), config, weight) * loss_scale
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(distributed.batch_mean_loss(loss))
            step += 1
        logits = evaluate(model, val_set, device)
        if not np.isfinite(logits).all():
            where = ("final model" if tag["fold"] == -1
                     else f"repeat {tag['repeat']}, fold {tag['fold']}")
            raise UsageError(f"training diverged ({where}, epoch {epoch + 1}): the model's outputs "
                             f"are not finite with lr {config.lr:g}",
                             hint="lower --lr and rerun with --overwrite")
        val_loss = float(F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(val_labels)))
        metrics = classification_metrics(val_labels, softmax(logits), None)
        metric = metrics[config.selection_metric]
        attention = attention_summary(model, val_set, device, ablations=False)
        record = {**tag, "epoch": epoch + 1, "train_loss": float(np.mean(losses)) if losses else None,
                  "val_loss": val_loss, "val_bac": metrics["bac"], "lr": lr if losses else None,
                  "seconds": time.perf_counter() - epoch_start,
                  "attention": attention and attention["passes"]}
        history.append(record)
        if selection_improved(config, epoch, metric, val_loss, best):
            best = (metric, -val_loss)
            best_state = copy.deepcopy(model.state_dict())
            best_epoch, since_best = epoch + 1, 0
        else:
            since_best += 1
        if on_epoch is not None:
            on_epoch(record)
        if config.patience and best is not None and since_best >= config.patience:
            break
    model.load_state_dict(best_state)
    return FitResult(model.eval(), history, best_epoch, time.perf_counter() - start)


# ------------------------------------------------------------------------------------------
# the run


@dataclass
class RunPlan:
    """Everything fixed (and checked) before the first fold: data, labels, folds, the final
    model's split (CV only), device, the model's resolved settings."""

    data: TrainingData
    config: TrainConfig
    folds: list[splits.Fold]
    final: splits.Fold | None
    scheme: dict
    positive_label: str | None
    device: torch.device
    model_config: dict


def _positive_label(label_names: list[str], positive_label: str | None) -> str | None:
    if len(label_names) != 2:
        if positive_label is not None:
            console.warn("--positive-label is ignored with more than two classes "
                         "(metrics are macro averages)")
        return None
    if positive_label is None:
        return label_names[-1]
    if positive_label not in label_names:
        raise UsageError(f"invalid --positive-label {positive_label!r}; allowed values are "
                         + ", ".join(repr(n) for n in label_names))
    return positive_label


def plan_run(data_dir, label_column: str, config: TrainConfig, splits_file=None,
             positive_label: str | None = None) -> RunPlan:
    """Read the data, fix the folds (made from the config, or read from ``splits_file``) and
    check every setting, so that nothing is created in the run folder for a run that cannot
    start (UsageError / InputDataError)."""
    data = load_training_data(data_dir, label_column)
    groups = np.array([r.participant_id for r in data.recordings])
    labels = data.label_indices()
    if splits_file is not None:
        scheme, folds = splits.load_splits(splits_file)
        folds = splits.check_folds(folds, set(groups), str(splits_file))
        scheme = {**scheme, "from_file": str(splits_file)}
    elif config.holdout:
        folds = [splits.holdout_fold(groups, labels, config.holdout, config.seed, config.val_fraction)]
        scheme = {"kind": "holdout", "fraction": config.holdout, "seed": config.seed,
                  "val_fraction": config.val_fraction}
    else:
        folds = splits.cross_validation_folds(groups, labels, config.cv, config.repeats,
                                              config.seed, config.val_fraction)
        scheme = {"kind": "cv", "k": config.cv, "repeats": config.repeats, "seed": config.seed,
                  "val_fraction": config.val_fraction}
    final = None if scheme.get("kind") == "holdout" else splits.final_fit_split(
        groups, labels, config.seed, config.val_fraction)
    splits.warn_missing_classes(folds + ([final] if final else []), groups, labels,
                                data.label_names)
    model_config = build_model(data, config, np.array([np.nan])).config.to_dict()
    return RunPlan(data, config, folds, final, scheme,
                   _positive_label(data.label_names, positive_label),
                   resolve_device(config.device), model_config)


def _identity(plan: RunPlan) -> dict:
    """What must be equal for a rerun to resume this run folder."""
    return {"train_config": plan.config.to_dict(), "data_dir": str(plan.data.data_dir),
            "label_column": plan.data.label_column, "labels": plan.data.label_names,
            "positive_label": plan.positive_label, "device": plan.device.type,
            "folds": [f.record() for f in plan.folds]}


def prepare_run_dir(run_dir: Path, plan: RunPlan, overwrite: bool) -> None:
    """Create/claim the run folder: write config.json and splits.json, or check they match.

    A folder holding a different run is refused (UsageError) unless ``overwrite``, which
    deletes the run's files (and only those) first.
    """
    config_path = run_dir / "config.json"
    identity = _identity(plan)
    if config_path.exists():
        try:
            previous = json.loads(config_path.read_text(encoding="utf-8")).get("identity")
        except (OSError, ValueError):
            previous = None
        if previous != identity and not overwrite:
            changed = sorted(k for k in identity if (previous or {}).get(k) != identity[k])
            if "train_config" in changed and previous:
                old = previous["train_config"]
                changed += [f"train_config.{k}" for k in identity["train_config"]
                            if old.get(k) != identity["train_config"][k]]
            raise UsageError(f"{run_dir} holds another run (different: {', '.join(changed)})",
                             hint="use --overwrite to replace it, or choose another --out")
        if previous != identity:
            _clear_run(run_dir)
    write_json(config_path, {
        "identity": identity, "preset": plan.config.preset, "train_config": plan.config.to_dict(),
        "model_config": plan.model_config, "data_dir": str(plan.data.data_dir),
        "label_column": plan.data.label_column, "labels": plan.data.label_names,
        "positive_label": plan.positive_label, "device": plan.device.type,
        "n_recordings": len(plan.data.recordings),
        "n_participants": len({r.participant_id for r in plan.data.recordings}),
        "versions": package_versions()})
    splits.save_splits(run_dir / "splits.json", plan.scheme, plan.folds)


def _clear_run(run_dir: Path) -> None:
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "folds", ignore_errors=True)
    shutil.rmtree(run_dir / "permutations", ignore_errors=True)


def _recordings_of(data: TrainingData, participants: list[str]) -> list[RecordingInfo]:
    wanted = set(participants)
    return [r for r in data.recordings if r.participant_id in wanted]


def _oof_rows(model_name: str, fold: splits.Fold, recs: list[RecordingInfo],
              probabilities: np.ndarray, label_names: list[str]) -> list[dict]:
    rows = []
    for rec, probs in zip(recs, probabilities):
        row = {"model": model_name, "repeat": fold.repeat, "fold": fold.fold,
               "recording_id": rec.recording_id, "participant_id": rec.participant_id,
               "label": rec.label, "predicted": label_names[int(np.argmax(probs))]}
        row.update({f"prob_{name}": float(p) for name, p in zip(label_names, probs)})
        rows.append(row)
    return rows


def run_fold(plan: RunPlan, fold: splits.Fold, features: dict[str, np.ndarray],
             on_epoch=None) -> tuple[dict, torch.nn.Module]:
    """Train, select and evaluate one fold (XAIguiFormer and the reference).

    Returns the fold's result dict (what ``folds/<name>.json`` holds) and the selected model.
    """
    data, config = plan.data, plan.config
    train_recs, val_recs = _recordings_of(data, fold.train), _recordings_of(data, fold.val)
    test_recs = _recordings_of(data, fold.test)
    seed = seed_of(fold, config.seed)
    fit = fit_model(data, train_recs, val_recs, config, plan.device, seed,
                    {"repeat": fold.repeat, "fold": fold.fold}, on_epoch)
    positive = None if plan.positive_label is None else data.label_names.index(plan.positive_label)
    test_set = ConnectomeDataset(test_recs, data.label_names, data.channels, data.bands)
    y_test = test_set.labels
    model_probs = softmax(evaluate(fit.model, test_set, plan.device))
    fit_recs = train_recs + val_recs
    reference = fit_reference(np.stack([features[r.recording_id] for r in fit_recs]),
                              data.label_indices(fit_recs),
                              np.array([r.participant_id for r in fit_recs]), seed)
    reference_probs = reference_probabilities(
        reference, np.stack([features[r.recording_id] for r in test_recs]), len(data.label_names))
    result = {
        "repeat": fold.repeat, "fold": fold.fold, "best_epoch": fit.best_epoch,
        "seconds": fit.seconds, "reference_C": float(reference.best_params_["logisticregression__C"]),
        "history": fit.history,
        "attention": attention_summary(fit.model, test_set, plan.device, ablations=True),
        "oof": (_oof_rows(MODEL_NAME, fold, test_recs, model_probs, data.label_names)
                + _oof_rows(REFERENCE_NAME, fold, test_recs, reference_probs, data.label_names)),
        "metrics": {
            MODEL_NAME: classification_metrics(y_test, model_probs, positive),
            REFERENCE_NAME: classification_metrics(y_test, reference_probs, positive)},
    }
    return result, fit.model


def _save_model(path: Path, model, plan: RunPlan, fit_recs: list[RecordingInfo],
                trained_on: str, seen_recs: list[RecordingInfo]) -> None:
    """``model.pt``: demographic scaling from ``fit_recs``; ``training_data`` describes
    ``seen_recs``, every recording that shaped the model (fit and epoch selection)."""
    from eegformer_cli.provenance import describe_training_data

    data = plan.data
    manifest = {row["recording_id"]: row for row in read_manifest(data.data_dir)}
    save_model_file(path, model, label_names=data.label_names, label_column=data.label_column,
                    positive_label=plan.positive_label, channels=data.channels, bands=data.bands,
                    band_edges_hz=data.band_edges_hz,
                    preprocess_settings=data.preprocess.get("settings", {}),
                    demographic_stats=demographic_stats(np.array([r.age for r in fit_recs])),
                    train_config=plan.config.to_dict(), trained_on=trained_on,
                    training_data=describe_training_data(seen_recs, manifest, data.data_dir))


def _nan_to_none(value):
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def write_summaries(run_dir: Path, plan: RunPlan, results: list[dict],
                    final_history: list[dict] | None = None, extra: dict | None = None) -> dict:
    """history.jsonl, oof_predictions.tsv and metrics.json from the fold results; returns metrics.

    ``extra``: more top-level entries of metrics.json (``shortcut_audit``)."""
    history = [record for result in results for record in result["history"]]
    history += final_history or []
    write_text(run_dir / "history.jsonl", "".join(json.dumps(_nan_to_none(r)) + "\n" for r in history))
    label_names = plan.data.label_names
    columns = (["model", "repeat", "fold", "recording_id", "participant_id", "label", "predicted"]
               + [f"prob_{name}" for name in label_names])
    lines = ["\t".join(columns)]
    for result in results:
        for row in result["oof"]:
            lines.append("\t".join(repr(row[c]) if isinstance(row[c], float) else str(row[c])
                                   for c in columns))
    write_text(run_dir / "oof_predictions.tsv", "\n".join(lines) + "\n")
    models = {}
    for name in (MODEL_NAME, REFERENCE_NAME):
        per_fold = [{"repeat": r["repeat"], "fold": r["fold"], **r["metrics"][name]}
                    for r in results]
        models[name] = {"per_fold": per_fold, **summarise_folds(per_fold)}
    test_train_ratio = float(np.mean([len(fold.test) / (len(fold.train) + len(fold.val))
                                      for fold in plan.folds]))
    comparison = compare_folds(models[MODEL_NAME]["per_fold"], models[REFERENCE_NAME]["per_fold"],
                               test_train_ratio)
    metrics = {"labels": label_names, "positive_label": plan.positive_label,
               "label_column": plan.data.label_column, "scheme": plan.scheme,
               "preset": plan.config.preset, "n_folds": len(results),
               "cv_seconds": float(sum(r["seconds"] for r in results)),
               "models": models,
               "comparison": {"model": MODEL_NAME, "reference": REFERENCE_NAME, **comparison},
               "attention": _attention_out_of_fold(results),
               **(extra or {})}
    metrics = _nan_to_none(metrics)
    write_json(run_dir / "metrics.json", metrics)
    return metrics


def _attention_out_of_fold(results: list[dict]) -> dict | None:
    """The folds' attention summaries (test recordings) and their mean over folds; None when
    no fold has one (a run folder of an earlier version)."""
    per_fold = [{"repeat": r["repeat"], "fold": r["fold"], **r["attention"]}
                for r in results if r.get("attention")]
    mean = mean_diagnostics([r["attention"] for r in results if r.get("attention")])
    if mean is None:
        return None
    return {"scope": "test recordings of every fold: mean over a fold's recordings, then over "
                     "folds", **mean, "per_fold": per_fold}


def run_training(data_dir, run_dir, label_column: str, config: TrainConfig, splits_file=None,
                 positive_label: str | None = None, overwrite: bool = False,
                 fold_index: int | None = None, n_jobs: int = 1, confounds=(),
                 permutations: int = 0, permutation_model: str = "reference") -> dict | None:
    """The whole ``eegformer train``; returns the metrics dict (also in ``metrics.json``).

    ``fold_index``: train only that fold (``train --fold``, a job of its own, merged later by
    ``train --merge``; see :mod:`merge`) and return its result (``folds/<name>.json``).
    ``n_jobs``: folds trained side by side in that many worker processes on the CPU (-1: one
    per core; :func:`parallel.process_pool`), the final model queued behind them; every number
    is the same as with 1, since each fold is seeded on its own and runs on one thread either
    way.
    Under torchrun the processes share the work (:mod:`distributed`); only rank 0 writes,
    and the other processes return None.
    ``confounds``: manifest columns the shortcut audit (:mod:`audit`) checks beside the
    built-in nuisance variables; ``permutations``: refit the CV that many times on permuted
    labels, the null model being ``permutation_model`` (:mod:`permutation`). Both concern the
    whole run (and ``train --merge``), not a fold job.

    Raises UsageError (bad settings, a run folder holding another run), InputDataError (data
    that cannot make a classification task) and OutputError (run folder not writable/locked).
    """
    n_workers = worker_count(n_jobs)
    permutation.check_settings(permutations, permutation_model)
    if fold_index is not None and (confounds or permutations):
        raise UsageError("--confounds and --permutations concern the whole run: give them to "
                         "`eegformer train --merge RUN_DIR` once the --fold jobs are done")
    plan = plan_run(data_dir, label_column, config, splits_file, positive_label)
    audit_plan = (None if fold_index is not None else
                  audit.plan_audit(plan.data, plan.folds, plan.scheme, config, confounds))
    folds = merge.folds_to_run(plan.folds, fold_index, overwrite)
    if n_workers > 1 and plan.device.type == "cuda":
        raise UsageError(f"--n-jobs {n_jobs} trains folds in CPU worker processes, but the "
                         "device is cuda", hint="use --device cpu, or --n-jobs 1 on the GPU")
    if n_workers > 1 and distributed.process_place().world_size > 1:
        raise UsageError(f"--n-jobs {n_jobs} cannot be combined with torchrun (its processes "
                         "already share every fold)", hint="use --n-jobs 1")
    run_dir = Path(run_dir)
    ensure_dir(run_dir)
    with distributed.process_group(plan.device), merge.run_folder_lock(run_dir, fold_index), \
            deterministic_algorithms(plan.device):
        writer = distributed.is_writer()
        folds_dir = ensure_dir(run_dir / "folds")
        if writer and fold_index is None:  # fold jobs run side by side: keep their temporaries
            remove_stale_temporaries(run_dir)
            remove_stale_temporaries(folds_dir)
        if writer:
            prepare_run_dir(run_dir, plan, overwrite)
            if positive_label is None and plan.positive_label is not None:
                console.log(f"train: positive class for AUROC and AUC-PR: {plan.positive_label} "
                            "(the last label in sorted order; choose another with "
                            "--positive-label)")
        extra = ({"shortcut_audit": audit.run_audit(audit_plan, plan.positive_label)}
                 if writer and audit_plan is not None else None)
        distributed.barrier()  # the other processes read the folder once rank 0 prepared it
        features = _reference_features(plan.data)
        holdout = plan.scheme.get("kind") == "holdout"
        results = {}  # fold name -> result; folds finished by an earlier, interrupted run first
        for fold in folds:
            fold_file = folds_dir / f"{fold.name}.json"
            if fold_file.exists() and (not holdout or (run_dir / "model.pt").exists()):
                results[fold.name] = json.loads(fold_file.read_text(encoding="utf-8"))
        pending = [fold for fold in folds if fold.name not in results]
        if results:
            console.log(f"train: {len(results)} of {len(folds)} folds already finished in "
                        f"{run_dir} (an earlier run or --fold jobs): reused, not trained again")
        train_final = fold_index is None and not holdout and not (run_dir / "model.pt").exists()
        if fold_index is None and not holdout and not train_final:
            console.log(f"train: final model reused: {run_dir / 'model.pt'} of the earlier run")
        with process_pool(min(n_workers, len(pending) + train_final)) as pool, \
                console.progress_bar() as bar:
            folds_task = bar.add_task("folds", total=len(folds), completed=len(results), status="")
            if pool is None:
                trained = _folds_here(plan, pending, features, bar)
            else:  # the final model is queued behind the folds, on the first free worker
                trained = _folds_on_workers(pool, plan, pending, features)
                final_job = pool.apply_async(_fit_final, (plan,)) if train_final else None
            for fold, result, model in trained:
                if holdout and writer:
                    _save_model(run_dir / "model.pt", model, plan,
                                _recordings_of(plan.data, fold.train), "holdout",
                                _recordings_of(plan.data, fold.train + fold.val))
                if writer:
                    write_json(folds_dir / f"{fold.name}.json", _nan_to_none(result))
                results[fold.name] = result
                bar.advance(folds_task)
                if writer and fold_index is None:  # a fold job leaves the summaries to --merge
                    write_summaries(run_dir, plan, _in_fold_order(results, folds), extra=extra)
                m = result["metrics"]
                console.log(f"fold {fold.name}: BAC {m[MODEL_NAME]['bac']:.3f} "
                            f"(logistic regression {m[REFERENCE_NAME]['bac']:.3f}), best epoch "
                            f"{result['best_epoch']}, {result['seconds']:.0f} s")
            if fold_index is not None:
                return results[folds[0].name] if writer else None
            final_history = None
            if train_final:
                if pool is None:
                    final_task = bar.add_task("final model (all participants)",
                                              total=config.epochs, status="")
                    fit = _fit_final(plan, lambda record: bar.update(
                        final_task, completed=record["epoch"]))
                else:
                    fit = final_job.get()
                final_history = _write_final(run_dir, plan, fit)
            elif not holdout:
                final_history = _final_history(run_dir)
        metrics = (write_summaries(run_dir, plan, _in_fold_order(results, folds), final_history,
                                   extra) if writer else None)
        if metrics is not None and permutations:
            metrics = permutation.run_permutation_test(run_dir, plan, features, metrics,
                                                       permutations, permutation_model, n_workers)
        return metrics


def _in_fold_order(results: dict[str, dict], folds: list[splits.Fold]) -> list[dict]:
    """The finished folds' results in the order of the splits (whatever order they ended in)."""
    return [results[fold.name] for fold in folds if fold.name in results]


def _folds_here(plan: RunPlan, folds: list[splits.Fold], features: dict[str, np.ndarray], bar):
    """Train ``folds`` in this process, one after the other, each with an epoch bar; yields
    (fold, result, selected model)."""
    for fold in folds:
        epoch_task = bar.add_task(f"fold {fold.name}", total=plan.config.epochs, status="")

        def on_epoch(record, task=epoch_task):
            bar.update(task, completed=record["epoch"],
                       status=f"loss {record['train_loss']:.3f} val BAC {record['val_bac']:.3f}")

        result, model = run_fold(plan, fold, features, on_epoch)
        bar.remove_task(epoch_task)
        yield fold, result, model


def _folds_on_workers(pool, plan: RunPlan, folds: list[splits.Fold],
                      features: dict[str, np.ndarray]):
    """Queue ``folds`` on ``pool`` now; yields (fold, result, None) in the order they finish
    (the models stay in the workers: only a holdout run saves a fold's model, and it has one)."""
    by_name = {fold.name: fold for fold in folds}
    finished = pool.imap_unordered(_fold_job, [(plan, fold, features) for fold in folds])
    return ((by_name[name], result, None) for name, result in finished)


def _fold_job(job: tuple) -> tuple[str, dict]:
    """One fold in a worker process: (plan, fold, features) -> (fold name, result)."""
    plan, fold, features = job
    with deterministic_algorithms(plan.device):  # a spawned worker does not inherit the flag
        result, _ = run_fold(plan, fold, features)
    return fold.name, result


def _fit_final(plan: RunPlan, on_epoch=None) -> FitResult:
    """The final model: all participants, the final split's inner validation for selection."""
    data, fold = plan.data, plan.final
    with deterministic_algorithms(plan.device):
        return fit_model(data, _recordings_of(data, fold.train), _recordings_of(data, fold.val),
                         plan.config, plan.device, plan.config.seed, {"repeat": -1, "fold": -1},
                         on_epoch)


def _write_final(run_dir: Path, plan: RunPlan, fit: FitResult) -> list[dict]:
    """``folds/final.json`` and ``model.pt`` of the final model; returns its history."""
    fold = plan.final
    if distributed.is_writer():
        write_json(run_dir / "folds" / "final.json", _nan_to_none(
            {"history": fit.history, "best_epoch": fit.best_epoch, "seconds": fit.seconds,
             "train": fold.train, "val": fold.val}))
        seen = _recordings_of(plan.data, fold.train) + _recordings_of(plan.data, fold.val)
        _save_model(run_dir / "model.pt", fit.model, plan, seen, "all", seen)
    console.log(f"final model: best epoch {fit.best_epoch}, {fit.seconds:.0f} s -> "
                f"{run_dir / 'model.pt'}")
    return fit.history


def _final_history(run_dir: Path) -> list[dict] | None:
    path = run_dir / "folds" / "final.json"
    return json.loads(path.read_text(encoding="utf-8"))["history"] if path.exists() else None


def _reference_features(data: TrainingData) -> dict[str, np.ndarray]:
    """Reference-model features of every recording (one pass over the connectome files)."""
    dataset = ConnectomeDataset(data.recordings, data.label_names, data.channels, data.bands,
                                cache_bytes=0)
    return {rec.recording_id: recording_features(*dataset.recording_arrays(r))
            for r, rec in enumerate(data.recordings)}

