"""The transformer path trained on top of the static stage, and whether it is kept, inside one
fit (``fit.py``).

Before the epoch loop, :func:`fit_static` fits the model's static stage (the linear path,
``linear_fit.py``, and where the model has one the tangent-space path and the choice among the
candidates, ``static_choice.py``) on the
fit's training part (its training and validation recordings, as the references are fitted) and
stores the refit's weights in the model. The transformer then trains with the linear path's
logits as a fixed offset: for a training batch, each recording's *cross-fitted* logits (the
inner model that did not see its participant, :meth:`TransformerKeep.batch_offsets`), and for the
validation recordings the same (:meth:`TransformerKeep.validation_logits`), so that both the
transformer's gradient and the choice of its epoch see honest linear logits. The linear path
reads each recording's mean connectivity (the products of its means,
``model/linear_path.py``): the features the fit read are each segment's offset's input, and
the validation recordings' offsets come from ``predict.recording_logits`` like a test
recording's. Its head starts at
zero (``model/xaiguiformer.py``): untrained, the model is its linear path.

After the loop :meth:`TransformerKeep.keep` decides on the validation recordings, each candidate's
logits at their own best temperature (:func:`calibrated_losses`): "no residual" (the linear
path's own cross-fitted logits) is always a candidate and wins ties; the transformer is kept
only when its selected epoch lowers the recordings' cross-entropy by more than
``keep_margin`` nats *plus one standard error* of that mean gain (the per-recording gains'
standard deviation over the square root of their number). Why the temperature: a strongly
regularised linear path is under-confident, and a transformer that only sharpens its logits
lowers the plain cross-entropy without reading anything the linear path missed (on a study
with a linear effect alone, the plain comparison "kept" such a transformer in most folds);
``predict``'s
recalibration sets the scale of either. Why the standard error: a dozen validation people
(or four recordings) measure a gain with an error far larger than the gain, and the selected
epoch is the best of many on those same people; without the standard error, a small study's
residual was kept in many folds and lost recordings it did not need to (docs/benchmarks.md,
"The linear path"). ``transformer_path = "off"`` skips the transformer's training (the model
is the static fit);
``"on"`` keeps it whatever validation says (an ablation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import log_softmax

from eegformer_cli.errors import InputDataError
from eegformer_cli.evaluation.calibration import logit_temperature
from eegformer_cli.model.linear_path import recording_features, uses_recording_means
from eegformer_cli.model.static_paths import tangent_space_of
from eegformer_cli.training.config import TrainConfig
from eegformer_cli.training.dataset import ConnectomeDataset
from eegformer_cli.training.linear_fit import LinearFit, fit_linear_path
from eegformer_cli.training.static_choice import fit_static_stage, temper

#: Segments of a recording through the model at a time when averaging its linear features.
FEATURE_SEGMENTS = 256
#: The share of the fit's recordings the static stage may put in the wrong class (out of its
#: inner folds) and still leave the transformer path untrained in "auto": fixing every one of
#: them would move a fold's accuracy by less than this, within what one cross-validation of a
#: few hundred people resolves, while the path's training costs many times the static fit
#: (on near-separable studies the calibrated loss still rewards a transformer that only
#: sharpens the few recordings near the boundary). Below 1 / NOTHING_TO_FIX_SHARE recordings
#: the floor is 0 errors.
NOTHING_TO_FIX_SHARE = 0.02


def calibrated_losses(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """float64 (n,): each recording's cross-entropy, ``logits`` (n, n_classes) against
    ``labels`` (n,), at the one temperature that minimises their mean on these recordings
    (``calibration.logit_temperature``): what the logits say about the classes, whatever their
    scale."""
    scaled = log_softmax(logits / logit_temperature(logits, labels), axis=1)
    return -scaled[np.arange(len(labels)), labels]


def mean_linear_features(model, dataset: ConnectomeDataset) -> np.ndarray:
    """float64 (n_recordings, n_features): what the linear path reads of each recording. For a
    model on recording means (``linear_path.uses_recording_means``) the features of its mean
    connectivity (``linear_path.recording_features``: the products of the means); else the
    mean over its segments of the per-segment features (``model.linear_features``, earlier
    versions), :data:`FEATURE_SEGMENTS` segments at a time; the model is on the CPU."""
    rows = []
    with torch.no_grad():
        for r, rec in enumerate(dataset.recordings):
            coh, wpli = dataset.recording_arrays(r)
            if uses_recording_means(model):
                features = recording_features(model, coh, wpli, rec.age, rec.sex)
                rows.append(features[0].double().numpy())
                continue
            total = torch.zeros((), dtype=torch.float64)
            for start in range(0, len(coh), FEATURE_SEGMENTS):
                part = slice(start, start + FEATURE_SEGMENTS)
                n = len(coh[part])
                features = model.linear_features(
                    torch.from_numpy(coh[part]),
                    torch.from_numpy(wpli[part]),
                    torch.full((n,), float(rec.age)),
                    torch.full((n,), float(rec.sex)),
                ).double()
                total = total + features.sum(0)
            rows.append((total / len(coh)).numpy())
    return np.stack(rows)


@dataclass
class TransformerKeep:
    """What the epoch loop needs of the static stage, and the keep rule: each training
    recording's inner fold (``train_inner`` int64 (n_train,), indexed by the training set's
    recording index), each
    validation recording's (``val_inner`` (n_val,)), and the static stage's own validation
    losses (:func:`calibrated_losses` of its cross-fitted logits)."""

    fit: LinearFit
    train_inner: torch.Tensor
    val_inner: np.ndarray
    linear_val_losses: np.ndarray  # calibrated_losses of the cross-fitted logits, (n_val,)
    mode: str
    margin: float
    #: float32 (n_train, n_classes): the training recordings' cross-fitted static logits, the
    #: offsets of a model on recording means.
    train_offsets: torch.Tensor | None = None
    #: the static stage's choice among its candidates (``static_choice.StaticChoice.record``;
    #: None: a model without a tangent-space path, the linear path alone)
    static: dict | None = None
    #: how many of the fit's recordings (training and validation) the static stage's
    #: cross-fitted logits put in the wrong class: 0 leaves the transformer path nothing to fix
    static_errors: int | None = None
    #: how many recordings the fit has (training and validation)
    n_recordings: int = 0
    #: why the transformer path's training stopped before the last epoch
    #: (:meth:`planned_epochs`, :meth:`stop_early`): ``{"epoch", "reason"}``, None: it did not
    stopped: dict | None = None
    #: the factor the static stage's logits were scaled by (``static_choice.temper``; None:
    #: not tempered)
    static_scale: float | None = None
    _since_promising: int = 0

    def planned_epochs(self, epochs: int, kept_in_no_fold: bool = False) -> int:
        """The epochs the transformer path is trained for: 0 with ``transformer_path`` "off",
        and in "auto" when the static stage put at most :data:`NOTHING_TO_FIX_SHARE` of the
        fit's recordings in the wrong class (out of its inner folds; with fewer than 50
        recordings, none): the transformer's logits could then only sharpen logits that
        recalibration scales anyway, which the keep rule cannot tell from a gain;
        or when the run's cross-validation kept it in no fold (``kept_in_no_fold``: the final
        model follows the folds, whose scores describe the model without it); ``stopped``
        says which. Else ``epochs``."""
        if self.mode == "off":
            return 0
        floor = int(NOTHING_TO_FIX_SHARE * self.n_recordings)
        if self.mode == "auto" and self.static_errors is not None and self.static_errors <= floor:
            reason = "static_stage_made_no_error" if floor == 0 else "static_stage_left_little"
            self.stopped = {"epoch": 0, "reason": reason}
            return 0
        if self.mode == "auto" and kept_in_no_fold:
            self.stopped = {"epoch": 0, "reason": "kept_in_no_fold"}
            return 0
        return epochs

    def stop_early(self, epoch: int, val_losses: np.ndarray | None, patience: int) -> bool:
        """Whether to stop the transformer path's training after epoch ``epoch`` (0-based) in
        "auto": its validation losses ``val_losses`` (:func:`calibrated_losses`) met the keep
        rule (:meth:`keep`'s test on this epoch) in none of the last ``patience`` epochs (0:
        never stop). A stopped path is not kept unless the selection took an epoch that met
        the rule (the cost follows the value: a path that stays below the static stage is not
        trained to the last epoch)."""
        if self.mode != "auto" or not patience:
            return False
        gain = self.gain(val_losses)
        promising = gain is not None and gain[0] > self.margin + gain[1]
        self._since_promising = 0 if promising else self._since_promising + 1
        if self._since_promising < patience:
            return False
        self.stopped = {"epoch": epoch + 1, "reason": "keep_patience"}
        return True

    def batch_offsets(self, model, coh, wpli, age, sex, recording: torch.Tensor) -> torch.Tensor:
        """(B, n_classes) cross-fitted static logits of a training batch (its inputs on the
        model's device; ``recording`` (B,) the items' training-set recording indices): each
        item's recording's for a model on recording means (with mixing: the first
        recording's, as its inner model), else the linear path of the item's own features."""
        with torch.no_grad():
            index = recording.cpu()
            if uses_recording_means(model) and self.train_offsets is not None:
                return self.train_offsets[index].to(coh.device)
            features = model.linear_features(coh, wpli, age, sex)
            return model.static.linear.cross_fitted(features, self.train_inner[index])

    def validation_logits(
        self, model, val_set: ConnectomeDataset, label_names: list[str], evaluate: Callable
    ) -> np.ndarray:
        """float64 (n_val, n_classes): the model's per-recording logits on the validation
        recordings, each with the linear path of the inner model that did not see it
        (``evaluate(dataset)`` gives a dataset's logits with the model as it stands)."""
        logits = np.zeros((len(val_set.recordings), self.fit.weight.shape[0]))
        for k in np.unique(self.val_inner):
            members = np.flatnonzero(self.val_inner == k)
            subset = ConnectomeDataset(
                [val_set.recordings[i] for i in members],
                label_names,
                val_set.channels,
                val_set.bands,
                cache=val_set.cache,
            )
            with model.static.inner(int(k)):
                logits[members] = evaluate(subset)
        return logits

    def gain(self, val_losses: np.ndarray | None) -> tuple[float, float] | None:
        """(mean, standard error) of the per-recording gain of the transformer path over the static
        path alone, ``val_losses`` (n_val,) its selected epoch's :func:`calibrated_losses`
        (None: not trained, no gain)."""
        if val_losses is None:
            return None
        gains = self.linear_val_losses - val_losses
        error = gains.std(ddof=1) / np.sqrt(len(gains)) if len(gains) > 1 else np.inf
        return float(gains.mean()), float(error)

    def keep(self, val_losses: np.ndarray | None) -> bool:
        """Whether the trained transformer stays in the model (module docstring)."""
        if self.mode != "auto":
            return self.mode == "on"
        gain = self.gain(val_losses)
        return gain is not None and gain[0] > self.margin + gain[1]

    def decide(self, model, val_losses: np.ndarray | None) -> bool:
        """Keep the transformer path of ``model`` or not (:meth:`keep`; its
        ``keep_transformer``); a model that does not keep it has its static stage as fitted,
        the tempering (``static_scale``, for the transformer's training) undone. The decision."""
        kept = self.keep(val_losses)
        model.keep_transformer(kept)
        if not kept and self.static_scale is not None:
            model.static.scale(1.0 / self.static_scale)
        return kept

    def record(self, kept: bool, val_losses: np.ndarray | None, n_products: int) -> dict:
        """JSON-ready record for the fold file: the fit, the decision, both candidates' mean
        calibrated validation losses, the gain and its standard error, and the per-recording
        losses (the decision can be recomputed from them)."""
        gain = self.gain(val_losses)
        return {
            **self.fit.summary(n_products),
            **({} if self.static is None else {"static": self.static}),
            "transformer_kept": kept,
            "transformer_path": self.mode,
            "keep_margin": self.margin,
            "static_val_loss": float(self.linear_val_losses.mean()),
            "transformer_val_loss": None if val_losses is None else float(val_losses.mean()),
            "transformer_gain": None if gain is None else gain[0],
            "transformer_gain_se": None if gain is None else gain[1],
            "static_errors": self.static_errors,
            "transformer_stopped": self.stopped,
            **({} if self.static_scale is None else {"static_scale": self.static_scale}),
            "val_losses": {
                "static": self.linear_val_losses.tolist(),
                "transformer": None if val_losses is None else val_losses.tolist(),
            },
        }


def fit_static(
    model,
    train_set: ConnectomeDataset,
    val_set: ConnectomeDataset,
    config: TrainConfig,
    seed: int,
) -> TransformerKeep:
    """Fit the static stage of ``model`` (on the CPU, statistics set) on the training and
    validation recordings: its linear path, and for a model with a tangent-space path that
    path and the choice among the candidates (``static_choice.py``); store the refits and the
    inner models in it; the :class:`TransformerKeep` the epoch loop uses."""
    start = time.perf_counter()
    features = np.concatenate(
        [mean_linear_features(model, train_set), mean_linear_features(model, val_set)]
    )
    labels = np.concatenate([train_set.labels, val_set.labels])
    groups = np.array([r.participant_id for r in train_set.recordings + val_set.recordings])
    n_classes = model.config.n_classes
    fit = fit_linear_path(features, labels, groups, n_classes, seed, config.linear_penalty)
    weight, bias, inner_weight, inner_bias = fit.tensors()
    model.static.linear.set_weights(weight, bias)
    model.static.linear.set_cross_fitted(inner_weight, inner_bias)
    cross_fitted, static = fit.cross_fitted, None
    if tangent_space_of(model) is not None:
        covariances = _covariances(train_set, val_set)
        choice = fit_static_stage(model, fit, covariances, labels, groups, seed, config.static_path)
        cross_fitted, static = choice.cross_fitted, choice.record()
    fit.seconds = time.perf_counter() - start  # the features' and the other candidates' time too
    n_train = len(train_set.recordings)
    # a within-recording pair kept: the transformer path reads it over the tempered stage
    dynamic = config.transformer_path != "off" and any(
        item.get("within") for item in model.config.interactions
    )
    factor = None
    if dynamic:
        factor = temper(model.static, cross_fitted[:n_train], labels[:n_train])
        cross_fitted = cross_fitted * factor
    return TransformerKeep(
        fit,
        torch.from_numpy(fit.inner_fold[:n_train]),
        fit.inner_fold[n_train:],
        calibrated_losses(cross_fitted[n_train:], val_set.labels),
        config.transformer_path,
        config.keep_margin,
        torch.from_numpy(cross_fitted[:n_train]).float(),
        static,
        int((cross_fitted.argmax(axis=1) != labels).sum()),
        len(labels),
        static_scale=factor,
    )


def _covariances(*datasets: ConnectomeDataset) -> np.ndarray:
    """float32 (n, K, C, C): the band covariances of every recording of ``datasets``, in
    order; InputDataError naming one that has none (a folder preprocessed partly by an
    earlier eegformer: ``TrainingData.covariance_bands`` reads every file first, so only a
    file changed since)."""
    out = []
    for dataset in datasets:
        for r, rec in enumerate(dataset.recordings):
            covariance = dataset.recording_covariance(r)
            if covariance is None:
                raise InputDataError(
                    f"recording {rec.recording_id!r} holds no band covariances, which this "
                    "model's tangent-space path reads",
                    path=rec.connectome,
                    hint="rerun `eegformer preprocess` into this folder",
                )
            out.append(covariance)
    return np.stack(out)
