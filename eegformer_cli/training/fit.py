"""One model: the epoch loop, model selection and evaluation.

:func:`fit_model` trains one XAIguiFormer on some participants' recordings and selects its epoch
on others' (what a cross-validation fold, the final model of a run and the scikit-learn
estimator each do once), in named steps as timm's training scripts: set up, then per epoch
:func:`train_one_epoch` and :func:`validate`, then the selection. :func:`evaluate` gives a
dataset's per-recording logits and :func:`attention_summary` what the model's attention does on
it (model/diagnostics.py).

Reproducibility on CPU: Python, NumPy and torch are seeded per fit, ``torch.use_deterministic_
algorithms(True)`` (:func:`deterministic_algorithms`), one data-loading process and a seeded
shuffling generator, so two fits with the same seed give identical numbers.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import softmax
from sklearn.utils.class_weight import compute_class_weight
from torch.utils.data import DataLoader

from eegformer_cli.errors import UsageError
from eegformer_cli.evaluation.metrics import FoldScores, selection_scores
from eegformer_cli.model.devices import autocast, one_cpu_thread, resolve_precision, seed_everything
from eegformer_cli.model.diagnostics import mean_diagnostics, recording_diagnostics
from eegformer_cli.model.interactions import Interaction
from eegformer_cli.model.predict import SEGMENTS_PER_BATCH, recording_logits
from eegformer_cli.training import augment, distributed, splits
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.dataset import (
    ConnectomeDataset,
    RecordingCache,
    RecordingInfo,
    TrainingData,
)
from eegformer_cli.training.epoch_selection import EpochSelection
from eegformer_cli.training.interaction_screen import (
    PROXY_CORRELATION,
    ScreenResult,
    entry_means,
    entry_table,
    screen_interactions,
    screen_within_recordings,
    with_within,
)
from eegformer_cli.training.model_file import demographic_stats
from eegformer_cli.training.standardise import connectivity_stats
from eegformer_cli.training.transformer_keep import TransformerKeep, calibrated_losses, fit_static

if TYPE_CHECKING:
    from eegformer_cli.model.xaiguiformer import XAIguiFormer


@contextlib.contextmanager
def deterministic_algorithms(device: torch.device):
    """``torch.use_deterministic_algorithms(True)`` on CPU for the duration, restored after."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(device.type == "cpu" or previous)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def lr_at_step(
    step: int, total_steps: int, warmup_steps: int, lr: float, lr_min: float, warmup_lr_init: float
) -> float:
    """Learning rate of optimiser step ``step`` (0-based), timm ``CosineLRScheduler`` semantics
    with ``warmup_prefix=False`` as in the paper's code: linear warmup from ``warmup_lr_init`` over
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


@dataclass
class FitResult:
    model: XAIguiFormer
    history: list[dict]
    best_epoch: int  # 1-based
    seconds: float
    screen: dict | None = None  # the interaction screen's record (ScreenResult.summary())
    linear: dict | None = (
        None  # the linear path's record (``transformer_keep.TransformerKeep.record``)
    )


def model_overrides(config: TrainConfig, interactions: list[Interaction]) -> dict:
    """The ``ModelConfig`` fields a fit sets beyond its preset: ``config.model``, the kept
    ``interactions`` and, when the within-recording screen kept a pair, ``transformer_inputs``
    "interactions" (unless ``config.model`` sets it): the transformer reads their products, the
    within pairs' standardised over each recording (``within_per_recording``), each entry with
    its measure twin where the screen found the twin carrying the pair
    (``within_measure_twins``)."""
    out = dict(config.model)
    if interactions:
        out["interactions"] = [i.to_dict() for i in interactions]
    if any(i.within for i in interactions):
        out.setdefault("transformer_inputs", "interactions")
        out["within_per_recording"] = True
        out["within_measure_twins"] = True
    return out


def build_model(
    data: TrainingData,
    config: TrainConfig,
    ages: np.ndarray,
    interactions: list[Interaction] | None = None,
) -> XAIguiFormer:
    """An XAIguiFormer for ``data`` with the config's model preset and overrides (with a
    standardiser when ``config.input_standardisation``; its statistics are set by the
    caller); demographic scaling from the training recordings' ``ages`` (years, NaN =
    unknown); ``interactions`` the screen's kept :class:`Interaction` list (None or empty:
    no interaction path)."""
    from eegformer_cli.model.xaiguiformer import ModelConfig, XAIguiFormer

    model_config = ModelConfig.preset(
        config.preset,
        n_channels=len(data.channels),
        band_names=data.bands,
        band_edges_hz=[tuple(edge) for edge in data.band_edges_hz.tolist()],
        n_classes=len(data.label_names),
        channel_names=data.channels,
        **model_overrides(config, interactions or []),
        linear_path=config.linear_path,
        linear_on_means=config.linear_path and config.linear_means,
        linear_segment_products=config.linear_segment_products,
        tangent_space_bands=tangent_space_bands(data, config),
        input_standardisation=config.input_standardisation,
    )
    model = XAIguiFormer(model_config)
    stats = demographic_stats(ages)
    model.set_demographic_stats(
        *(None, None) if stats is None else (stats["age_mean"], stats["age_std"])
    )
    return model


def tangent_space_bands(data: TrainingData, config: TrainConfig) -> list[str]:
    """The covariance bands of the model's tangent-space path: those of the data when the
    config has a static stage with candidates (``static_path`` not "connectivity", a linear path
    on recording means) and every recording holds band covariances; else [] (no such path;
    ``fold_job`` says when the folder has no covariances)."""
    if config.static_path == "connectivity" or not (config.linear_path and config.linear_means):
        return []
    return data.covariance_bands()


def _loss(logits_coarse, logits_refined, targets, config: TrainConfig, weight):
    def ce(logits):
        return F.cross_entropy(
            logits.float(), targets, weight=weight, label_smoothing=config.label_smoothing
        )

    return (1.0 - config.alpha) * ce(logits_coarse) + config.alpha * ce(logits_refined)


def evaluate(
    model, dataset: ConnectomeDataset, device: torch.device, precision: str = "float32"
) -> np.ndarray:
    """Mean refined logits per recording of ``dataset``: float64 (n_recordings, n_classes),
    computed in ``precision`` (resolved: ``devices.resolve_precision``).

    Recordings go through the model in chunks of at most :data:`SEGMENTS_PER_BATCH` segments,
    one chunk in memory at a time; under torchrun the chunks are shared over the processes and
    the logits gathered on every process (:func:`distributed.map_gathered`).
    """

    def chunk_logits(chunk: list[int]) -> np.ndarray:
        return recording_logits(
            model, [dataset.recording_tuple(r) for r in chunk], device, precision
        )

    chunks = distributed.evaluation_chunks(
        [rec.n_segments for rec in dataset.recordings], SEGMENTS_PER_BATCH
    )
    return np.concatenate(distributed.map_gathered(chunk_logits, chunks))


def attention_summary(
    model, dataset: ConnectomeDataset, device: torch.device, ablations: bool
) -> dict | None:
    """What the model's attention does on ``dataset`` (model/diagnostics.py): every quantity
    per pass and layer, the mean over recordings of each recording's segment mean; the
    replacement ablations only with ``ablations`` (they cost a forward per pass, layer and
    replacement). None for an empty dataset. The recordings are read one at a time (through the
    dataset's cache), never all at once."""
    if not dataset.recordings:
        return None
    recordings = (dataset.recording_tuple(r) for r in range(len(dataset.recordings)))
    return mean_diagnostics(recording_diagnostics(model, recordings, device, ablations))


@one_cpu_thread()
def fit_model(
    data: TrainingData,
    train_recs: list[RecordingInfo],
    val_recs: list[RecordingInfo],
    config: TrainConfig,
    device: torch.device,
    seed: int,
    tag: dict,
    on_epoch=None,
    epoch_attention: bool = True,
    kept_in_no_fold: bool = False,
) -> FitResult:
    """Train one model on ``train_recs``, selecting the epoch on ``val_recs`` (per recording):
    set up, then per epoch :func:`train_one_epoch`, :func:`validate` and the selection, until
    the last epoch or a stop rule (``config.patience`` epochs without a better one;
    ``TransformerKeep.stop_early``), on one CPU thread.

    ``tag`` (``{"repeat", "fold"}``) is copied into every history record; ``on_epoch(record)``
    is called after each epoch (progress display); ``epoch_attention`` False leaves the
    attention summary out of the history (a fit whose history is not kept); ``kept_in_no_fold``
    (the final model of ``final_follows_folds``): the transformer path is not trained. Returns
    the model with the selected epoch's weights, on ``device``, in eval mode.
    """
    start = time.perf_counter()
    loop = _setup(data, train_recs, val_recs, config, device, seed)
    selection = EpochSelection()
    history = []
    keep = loop.keep
    epochs = keep.planned_epochs(config.epochs, kept_in_no_fold) if keep else config.epochs
    for epoch in range(epochs):
        epoch_start = time.perf_counter()
        losses, lr = train_one_epoch(loop, config, device)
        val_loss, scores, attention, calibrated = validate(
            loop, config, device, tag, epoch, epoch_attention
        )
        record = {
            **tag,
            "epoch": epoch + 1,
            "train_loss": float(np.mean(losses)) if losses else None,
            "val_loss": val_loss,
            "val_bac": scores.bac,
            "lr": lr if losses else None,
            "seconds": time.perf_counter() - epoch_start,
            "attention": attention and attention["passes"],
            **({} if calibrated is None else {"val_loss_calibrated": float(calibrated.mean())}),
        }
        history.append(record)
        metric = -val_loss if config.selection_metric == "log_loss" else None
        selection.update(
            config,
            epoch,
            getattr(scores, config.selection_metric) if metric is None else metric,
            loop.model,
            calibrated,
        )
        if on_epoch is not None:
            on_epoch(record)
        if selection.patience_ran_out(config) or (
            loop.keep is not None and loop.keep.stop_early(epoch, calibrated, config.keep_patience)
        ):
            break
    if selection.state is not None:
        loop.model.load_state_dict(selection.state)
    return FitResult(
        loop.model.eval(),
        history,
        selection.epoch,
        time.perf_counter() - start,
        None if loop.screen is None else loop.screen.summary(),
        _finish_keep(loop, selection),
    )


def _finish_keep(loop: _Loop, selection: EpochSelection) -> dict | None:
    """After the epoch loop: keep the transformer path or not (``transformer_keep.py``), the
    model's ``transformer_kept`` saying which; the linear path's record (None without one)."""
    if loop.keep is None:
        return None
    kept = loop.keep.decide(loop.model, selection.val_loss)
    if loop.model.static is not None:
        loop.model.static.clear_cross_fitted()
    if not kept:
        selection.epoch = 0
    n_products = len(loop.screen.kept) if loop.screen else 0
    return loop.keep.record(kept, selection.val_loss, n_products)


@dataclass
class _Loop:
    """One fit's training state (:func:`_setup`); ``step`` counts the optimiser steps so far."""

    model: XAIguiFormer
    train_model: torch.nn.Module  # what batches go through: DDP under torchrun, else model
    train_set: ConnectomeDataset
    val_set: ConnectomeDataset
    loader: DataLoader
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    weight: torch.Tensor | None  # the loss's class weights (None: unweighted)
    precision: str  # resolved (devices.resolve_precision)
    rng: np.random.Generator  # augmentation draws
    n_classes: int
    total_steps: int
    warmup_steps: int
    screen: ScreenResult | None = None
    keep: TransformerKeep | None = None  # the static stage's fit, offsets and keep rule
    label_names: list[str] = field(default_factory=list)
    step: int = 0


def _setup(
    data: TrainingData,
    train_recs: list[RecordingInfo],
    val_recs: list[RecordingInfo],
    config: TrainConfig,
    device: torch.device,
    seed: int,
) -> _Loop:
    """Seed, build the model (input statistics from ``train_recs`` with
    ``config.input_standardisation``), the datasets, the seeded shuffling loader, the class
    weights and the optimiser. The order of these steps is the order of the random draws, so
    it fixes the numbers of a seed."""
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    cache = RecordingCache()  # one budget for both sets' recordings
    train_set = ConnectomeDataset(
        train_recs,
        data.label_names,
        data.channels,
        data.bands,
        segment_averaging=config.segment_averaging,
        rng=rng,
        cache=cache,
    )
    val_set = ConnectomeDataset(val_recs, data.label_names, data.channels, data.bands, cache=cache)
    ages = np.array([r.age for r in train_recs])
    stats = None
    if config.input_standardisation:
        stats = connectivity_stats(train_set.recording_arrays(r) for r in range(len(train_recs)))
    screen = screen_fit(data, train_set, stats, ages, config, seed)
    # the model's parameters are drawn here, after the screen (which draws from a generator
    # of its own), in the order of earlier versions: no kept pair gives their model
    model = build_model(data, config, ages, None if screen is None else screen.kept)
    if stats is not None:  # input_standardisation
        model.set_stats(stats)
    if model.token_reads_recordings:  # each item's products from its whole recording
        train_set.set_token_products(model)
    keep = fit_static(model, train_set, val_set, config, seed) if config.linear_path else None
    model = model.to(device)
    train_model = distributed.wrap_for_training(model)
    loader = _shuffling_loader(train_set, config, seed)
    n_classes = len(data.label_names)
    weight = _class_weight(train_set, n_classes, config, device)
    optimizer = _optimiser(model, config)
    precision = resolve_precision(config.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "float16")
    return _Loop(
        model,
        train_model,
        train_set,
        val_set,
        loader,
        optimizer,
        scaler,
        weight,
        precision,
        rng,
        n_classes,
        total_steps=config.epochs * len(loader),
        warmup_steps=int(round(config.warmup_epochs * len(loader))),
        screen=screen,
        keep=keep,
        label_names=data.label_names,
    )


def _shuffling_loader(train_set: ConnectomeDataset, config: TrainConfig, seed: int) -> DataLoader:
    """The training batches: ``config.batch_size`` items, shuffled by a generator seeded with
    ``seed``, in this process (reproducible; the last short batch dropped with
    ``config.drop_last`` when there is more than one)."""
    return DataLoader(
        train_set,
        batch_size=config.batch_size,
        shuffle=True,
        drop_last=config.drop_last and len(train_set) > config.batch_size,
        generator=torch.Generator().manual_seed(seed),
        num_workers=0,
    )


def _optimiser(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with ``config``'s learning rate, betas, eps and weight decay."""
    # fused: one kernel over all parameters (CPU and CUDA) instead of ~10 small ops per tensor,
    # a few times faster for the paper model's 186 tensors (docs/benchmarks.md, "Training step")
    return torch.optim.AdamW(
        model.parameters(),
        lr=config.lr,
        betas=(config.betas[0], config.betas[1]),
        eps=config.eps,
        weight_decay=config.weight_decay,
        fused=True,
    )


def screen_fit(
    data: TrainingData,
    train_set: ConnectomeDataset,
    stats: dict | None,
    ages: np.ndarray,
    config: TrainConfig,
    seed: int,
) -> ScreenResult | None:
    """The interaction screens on a fit's training recordings (``interaction_screen.py``):
    the screen of their mean standardised entries (raw entries without input
    standardisation: ``entry_means``), labels, participants and z-scored ages; with
    ``config.dynamic_pairs`` the within-recording screen's pairs after its own
    (``with_within``); None when the config screens nothing."""
    if not (config.interactions or config.age_interactions or config.dynamic_pairs):
        return None
    identity = {"coh_mean": 0.0, "coh_std": 1.0, "wpli_mean": 0.0, "wpli_std": 1.0}
    gate: dict[str, Any] = {
        "max_pairs": config.interaction_max_pairs,
        "n_permutations": config.interaction_permutations,
        "null_quantile": config.interaction_null_quantile,
        "seed": seed,
        "proxy_correlation": PROXY_CORRELATION if config.interaction_proxies else None,
    }
    entries = entry_table(data.channels, data.bands)
    groups = np.array([r.participant_id for r in train_set.recordings])
    demographics = demographic_stats(ages)
    age_z = None
    if demographics is not None:
        age_z = np.nan_to_num((ages - demographics["age_mean"]) / demographics["age_std"])

    # one recording at a time (the cache's budget bounds what stays in memory), per screen
    def arrays():
        return (train_set.recording_arrays(r) for r in range(len(train_set.recordings)))

    features = np.stack([entry_means(coh, wpli, stats or identity) for coh, wpli in arrays()])
    means = screen_interactions(
        features,
        train_set.labels,
        groups,
        age_z,
        entries,
        interactions=config.interactions,
        age_interactions=config.age_interactions,
        **gate,
    )
    if not config.dynamic_pairs:
        return means
    within = screen_within_recordings(
        arrays(), stats or identity, train_set.labels, groups, entries, **gate
    )
    return with_within(means, within)


def _class_weight(
    train_set: ConnectomeDataset, n_classes: int, config: TrainConfig, device: torch.device
) -> torch.Tensor | None:
    """float32 (n_classes,) loss weights, "balanced" over the training segments (1 for a class
    without any), or None (``class_weighting`` "none")."""
    if config.class_weighting != "balanced":
        return None
    segment_labels = train_set.labels[train_set.index[:, 0]]
    weights = np.ones(n_classes)
    present = np.unique(segment_labels)
    weights[present] = compute_class_weight("balanced", classes=present, y=segment_labels)
    return torch.tensor(weights, dtype=torch.float32, device=device)


def train_one_epoch(
    loop: _Loop, config: TrainConfig, device: torch.device
) -> tuple[list[float], float | None]:
    """One pass over the shuffled training segments, one optimiser step per batch; returns the
    batches' losses (this process's share under torchrun, averaged over processes) and the
    last learning rate (None without a batch)."""
    loop.model.train()
    losses, lr = [], None
    for batch in loop.loader:
        lr = lr_at_step(
            loop.step,
            loop.total_steps,
            loop.warmup_steps,
            config.lr,
            config.lr_min,
            config.warmup_lr_init,
        )
        for group in loop.optimizer.param_groups:
            group["lr"] = lr
        losses.append(_train_step(loop, batch, config, device))
        loop.step += 1
    return losses, lr


def _train_step(loop: _Loop, batch: dict, config: TrainConfig, device: torch.device) -> float:
    """Augment one batch, take one optimiser step on its loss; returns the batch's loss."""
    targets = F.one_hot(batch["label"], loop.n_classes).float()
    coh, wpli, age, sex, targets = augment.mix_batch(
        batch["coh"],
        batch["wpli"],
        batch["age"],
        batch["sex"],
        targets,
        config.augmentation,
        config.augment_prob,
        config.cutmix_prob,
        config.mix_beta,
        loop.rng,
    )
    # from whole recordings (with mixing: the first item's, as its offset)
    own = [] if "products" not in batch else [batch["products"]]
    (coh, wpli, age, sex, targets, recording, *sliced), loss_scale = distributed.shard_batch(
        coh, wpli, age, sex, targets, batch["recording"], *own
    )  # this process's slice of the batch (torchrun)
    coh, wpli, age, sex = (t.to(device) for t in (coh, wpli, age, sex))
    products = sliced[0].to(device) if sliced else None
    offset = None
    if loop.keep is not None:  # with mixing: the first recording's inner model
        offset = loop.keep.batch_offsets(loop.model, coh, wpli, age, sex, recording)
    with autocast(device, loop.precision):
        coarse, refined = loop.train_model(coh, wpli, age, sex, offset, products)
    loss = _loss(coarse, refined, targets.to(device), config, loop.weight) * loss_scale
    loop.optimizer.zero_grad(set_to_none=True)
    loop.scaler.scale(loss).backward()
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    return distributed.batch_mean_loss(loss)


def validate(
    loop: _Loop,
    config: TrainConfig,
    device: torch.device,
    tag: dict,
    epoch: int,
    attention: bool = True,
) -> tuple[float, FoldScores, dict | None, np.ndarray | None]:
    """The model on the validation recordings after epoch ``epoch`` (0-based): (cross-entropy
    of the per-recording logits, the :func:`selection_scores` of their softmax, the attention
    summary without ablations (None without ``attention``), with a linear path the cross-entropy at the logits' best
    temperature per recording, ``transformer_keep.calibrated_losses``). UsageError when the logits are
    not finite
    (diverged)."""
    if loop.keep is None:
        logits = evaluate(loop.model, loop.val_set, device, loop.precision)
    else:
        logits = loop.keep.validation_logits(
            loop.model,
            loop.val_set,
            loop.label_names,
            lambda subset: evaluate(loop.model, subset, device, loop.precision),
        )
    if not np.isfinite(logits).all():
        where = (
            "final model" if tag["fold"] == -1 else f"repeat {tag['repeat']}, fold {tag['fold']}"
        )
        raise UsageError(
            f"training diverged ({where}, epoch {epoch + 1}): the model's outputs "
            f"are not finite with lr {config.lr:g}",
            hint="lower --lr and rerun with --overwrite",
        )
    labels = loop.val_set.labels
    val_loss = float(F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels)))
    metrics = selection_scores(labels, softmax(logits, axis=1))
    calibrated = None if loop.keep is None else calibrated_losses(logits, labels)
    summary = attention_summary(loop.model, loop.val_set, device, False) if attention else None
    return val_loss, metrics, summary, calibrated
