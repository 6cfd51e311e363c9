"""What a trained XAIguiFormer bases one recording's prediction on: three kinds of explanation.

For one recording (all its segments, float32 (S, T, C, C) coh and wPLI, T bands, C channels):

Every attribution is against a **baseline connectome** the reader can name: the mean
connectome of the model's training recordings (``model_file.baseline_connectome``; zero
connectivity only for a model file that stores none). So a positive value means "this raises
the explained class's logit compared with the typical training recording", a negative one
"lowers it". Only what ``explain`` reports is measured this way: the explanation that guides
the refined pass (the model's own DeepLIFT against a zero token) is the model's and unchanged.

channel-pair attributions
    A captum attribution (``choices.CAPTUM_METHODS``; Integrated Gradients by default, the
    baseline connectome as its baseline, ``n_steps`` Gauss-Legendre steps) of the explained
    class's refined logit with respect to the raw coh and wPLI inputs, (S, T, C, C) each.
    Combined: ``pair[t, i, j] = coh[t, i, j] + coh[t, j, i] + wpli[t, i, j] + wpli[t, j, i]``,
    the total contribution of pair {i, j} in band t (logit units), averaged over segments ->
    (T, C, C), symmetric with a zero diagonal. Each unordered pair is stored in both entries,
    so the sum over i < j (not the whole matrix) is the total; for Integrated Gradients that
    total is close to ``logit(x) - logit(baseline)`` (completeness). ``coh_pairs`` and
    ``wpli_pairs`` keep the two measures apart (same combination of the two entries).
band importance
    The channel-pair attributions summed over the pairs of each band (i < j): (T,) signed,
    how much each band's connectivity moves the logit away from the baseline's; then divided
    by the sum of its absolute values, so **their absolute values sum to 1** (all zeros when
    every attribution is exactly zero). With Integrated Gradients the undivided values add up
    to the logit's change from the baseline.
interactions
    For a model with kept interactions (``model/interactions.py``: entry pairs, and entries
    with age, that the training screen found acting together), each kept interaction's product
    is an input of its own, attributed beside the entries with the baseline connectome's
    products as baseline: per kept interaction its attribution (logit units, mean over
    segments), in words with what the screen measured (:mod:`.interactions`). What two
    entries do together is there, not in their cells, and pairs and interactions add up to the
    logit's change (Integrated Gradients).

    A model whose linear path reads the recording's means (``model/linear_path.py``): the
    segments are attributed with its recording's linear logits as a fixed offset (their
    attributions are the transformer's), and the linear path's exact attributions are added,
    its weights times the change of its features from the baseline's to the recording's
    means' (the mean entries to their pairs, the products of the means to their
    interactions): the sums still add up to the logit's change.
class contrast
    For two classes A and B (:func:`default_contrast`: a two-class model's other class and its
    positive class), the same captum attribution of ``logit(B) - logit(A)`` (the log-odds of B
    against A), per recording ``contrast_pairs`` (T, C, C) (``contrast_coh_pairs`` and
    ``contrast_wpli_pairs`` apart): positive, the pair's connectivity pushes the recording
    towards B compared with the baseline connectome, negative towards A; one scale for both
    directions, unlike the per-class maps (each against its own logit).
    :func:`class_contrast` compares the two groups of recordings: the mean contrast of B's
    recordings minus A's. For a linear model that is exactly ``w * (mean_B(x) - mean_A(x))``:
    how far the log-odds of B move when the pair's connectivity goes from A's mean to B's (the
    baseline cancels). Positive: the classes' difference in this pair pushes towards the
    class that has it (B's connectivity, against A's, towards B); negative: against it. The
    value is the same with A and B swapped; the direction of the difference itself, which
    pairs are more connected in B, is the difference of the groups' mean connectivity
    (``mean_coh``, ``mean_wpli``). Recordings are grouped by their true class when every one
    has a known one, else by the predicted class.
top band
    :func:`top_band`: the band whose band importance has the largest absolute value, the tallest
    bar of the band-importance chart; the report draws its channel pairs on the head (unless the
    user names another band), so the chart and the head always show the same band. None (JSON
    ``null``) when every band's importance is 0: no connectivity entry carries any of the
    logit (it is the kept interactions' products', or the linear path's other inputs').
attention
    Softmax attention weights of the coarse and refined passes, per layer: (L, T, T) (mean over
    heads and segments; ``all_heads`` keeps (L, H, T, T)). Each row sums to 1 (query band ->
    key bands). The refined pass takes its queries and keys from the explanations, so
    refined minus coarse shows what the XAI guidance changed. With them, what the attention
    does (model/diagnostics.py: entropy, residual share, explanation against qkv bias, the
    logit change when it is replaced by a uniform mean or the identity), per pass and layer,
    means over the recording's segments.

The explained class is ``target`` when given, else the recording's predicted class (argmax of
the segment-mean refined logits, as ``predict`` reports). The model itself always runs as in
``predict`` (its refined pass is guided by the explanation of each segment's coarse argmax);
only what is attributed changes with ``target``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import softmax

from eegformer_cli.choices import DEFAULT_METHOD, DEFAULT_N_STEPS
from eegformer_cli.errors import InputDataError, UsageError, check_choice
from eegformer_cli.explain import interactions as kept_interactions
from eegformer_cli.explain.path_shares import (
    band_power,
    covariance_attributions,
    path_logit_changes,
)
from eegformer_cli.explain.segment_attributions import (
    SegmentCells,
    SegmentTimeline,
    attention_maps,
    channel_pair_attributions,
    exact_segment_mean,
    mean_timelines,
    segment_timeline,
)
from eegformer_cli.model.devices import one_cpu_thread
from eegformer_cli.model.diagnostics import mean_diagnostics, recording_diagnostics
from eegformer_cli.model.predict import recording_logits
from eegformer_cli.model.static_paths import recording_offset


@dataclass
class RecordingExplanation:
    """All explanations of one recording.

    ``probabilities`` float64 (K,) softmax of the segment-mean refined logits (the mean over the
    models when several explain it, :func:`mean_explanation`); ``predicted`` and ``target``
    class names (target = the explained class); ``band_importance`` float64 (T,) signed,
    abs-sum 1; ``attention_coarse`` / ``attention_refined`` float64 (L, T, T) or
    (L, H, T, T); ``channel_pairs``, ``coh_pairs``, ``wpli_pairs`` float64 (T, C, C) symmetric,
    logit units; ``n_segments`` S; ``attention_diagnostics`` the recording's summary from
    :func:`~eegformer_cli.model.diagnostics.recording_diagnostics` (None for a model without
    transformer layers); ``explained_by`` which
    model(s): ``"model"`` (the model file given), ``"final_model"`` (a run folder's
    ``model.pt``) or ``"out_of_fold: r0_f1 ..."`` (its fold models that did not train on it);
    ``interactions`` the kept interactions' rows (:mod:`.interactions`), None for a model
    without; ``paths`` how much of the explained class's logit change (``"target"``) and of
    the contrast's (``"contrast"``) the model's linear path and its transformer carry
    (:func:`.path_shares.path_logit_changes`), None for a model without a linear path;
    ``covariance_pairs`` / ``contrast_covariance_pairs`` float64 (K, C, C) and ``band_power``
    (K, C), the tangent-space path's attributions onto each band's log variances (the
    diagonal, ``band_power``) and correlations (off it)
    (:func:`.path_shares.covariance_attributions`), None for a model that reads none;
    ``segments`` the explained class's logit segment by segment, with each segment's strongest
    cells (:class:`~.segment_attributions.SegmentTimeline`).
    """

    recording_id: str
    participant_id: str | None
    predicted: str
    target: str
    probabilities: np.ndarray
    band_importance: np.ndarray
    attention_coarse: np.ndarray
    attention_refined: np.ndarray
    channel_pairs: np.ndarray
    coh_pairs: np.ndarray
    wpli_pairs: np.ndarray
    n_segments: int
    attention_diagnostics: dict | None
    explained_by: str = "model"
    mean_coh: np.ndarray | None = None
    mean_wpli: np.ndarray | None = None
    contrast_classes: tuple[str, str] | None = None
    contrast_pairs: np.ndarray | None = None
    contrast_coh_pairs: np.ndarray | None = None
    contrast_wpli_pairs: np.ndarray | None = None
    true_class: str | None = None
    interactions: list[dict] | None = None
    paths: dict | None = None
    covariance_pairs: np.ndarray | None = None
    band_power: np.ndarray | None = None
    contrast_covariance_pairs: np.ndarray | None = None
    segments: SegmentTimeline | None = None


#: Every array of a :class:`RecordingExplanation`, in the order its ``ID.npz`` holds them: the
#: one list that the mean over several models, the files (:mod:`.export`) and the Python API
#: read, so a quantity added here is averaged, written and read back with the others. An array
#: that is None (no contrast) is left out.
RECORDING_ARRAYS = (
    "probabilities",
    "band_importance",
    "attention_coarse",
    "attention_refined",
    "channel_pairs",
    "coh_pairs",
    "wpli_pairs",
    "contrast_pairs",
    "contrast_coh_pairs",
    "contrast_wpli_pairs",
    "mean_coh",
    "mean_wpli",
    "covariance_pairs",
    "band_power",
    "contrast_covariance_pairs",
)


#: Arrays of a :class:`RecordingExplanation` indexed by token (the attention maps): a model
#: with kept interactions has one more token than the bands, so these are padded when
#: explanations by models with and without it are averaged (:func:`mean_over`).
TOKEN_ARRAYS = ("attention_coarse", "attention_refined")


def token_names(bands: Sequence[str], n_tokens: int) -> list[str]:
    """Names of ``n_tokens`` attention tokens: the bands, then the interaction token."""
    from eegformer_cli.model.interactions import INTERACTION_TOKEN

    return [*bands, INTERACTION_TOKEN][:n_tokens]


def mean_over(arrays: Sequence[np.ndarray], n_tokens: int | None = None) -> np.ndarray:
    """The mean of ``arrays``; attention maps (..., T', T') of different token counts (or
    fewer than ``n_tokens``) are padded with NaN to the largest and averaged where present,
    so a token only some models have gets the mean of those (equal shapes: a plain mean)."""
    size = max([a.shape[-1] for a in arrays] + [n_tokens or 0])
    if all(a.shape[-1] == size for a in arrays):
        return np.mean(arrays, axis=0)
    padded = []
    for a in arrays:
        extra = size - a.shape[-1]
        padded.append(np.pad(a, [(0, 0)] * (a.ndim - 2) + [(0, extra)] * 2, constant_values=np.nan))
    with warnings.catch_warnings():  # a cell no model has stays NaN: numpy's "empty slice"
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(padded, axis=0)


def normalise_signed(values: np.ndarray) -> np.ndarray:
    """``values / sum(|values|)`` (float64); all zeros stay zeros."""
    values = np.asarray(values, dtype=np.float64)
    total = np.abs(values).sum()
    return values / total if total > 0 else np.zeros_like(values)


def top_band(band_importance: np.ndarray) -> int | None:
    """Index of the band with the largest |band importance| ((T,) in; the first on a tie): the
    tallest bar of the band-importance chart, whose channel pairs the report draws on the
    head. None when no band has a finite non-zero value: no connectivity entry carries any of
    the logit (a model whose linear path reads only its kept interactions' products, its
    transformer path off), and naming the first band would say it does."""
    magnitude = np.abs(np.asarray(band_importance, dtype=np.float64))
    magnitude[~np.isfinite(magnitude)] = 0.0
    if not magnitude.any():
        return None
    return int(np.argmax(magnitude))


def pair_band_sums(pairs: np.ndarray) -> np.ndarray:
    """(..., T) float64: a symmetric (..., T, C, C) map summed over each band's pairs i < j."""
    upper = np.triu_indices(pairs.shape[-1], 1)
    return np.asarray(pairs, dtype=np.float64)[..., upper[0], upper[1]].sum(axis=-1)


def band_totals(coh_pairs: np.ndarray, wpli_pairs: np.ndarray) -> np.ndarray:
    """Band importance (T,) float64, abs-sum 1 (module docs): the pair attributions of each band
    summed over i < j; ``coh_pairs``, ``wpli_pairs`` (T, C, C) symmetric."""
    return normalise_signed(pair_band_sums(coh_pairs + wpli_pairs))


def default_contrast(
    label_names: Sequence[str], positive_label: str | None = None
) -> tuple[str, str] | None:
    """The class contrast explained when none is asked for: (other class, positive class) for a
    two-class model (the positive class the run used, else the second class), so the contrast's
    values are of the positive class's log-odds; None with more than two classes (which two is
    the user's choice: :func:`check_contrast`)."""
    if len(label_names) != 2:
        return None
    second = (
        positive_label
        if positive_label is not None and positive_label in label_names
        else label_names[1]
    )
    return (next(name for name in label_names if name != second), second)


def check_contrast(contrast: Sequence[str], label_names: Sequence[str]) -> tuple[str, str]:
    """``contrast`` as a checked pair (A, B): two different classes of the model (UsageError
    naming ``--contrast`` and the classes otherwise)."""
    contrast = tuple(contrast)
    if len(contrast) != 2 or contrast[0] == contrast[1]:
        raise UsageError(
            f"invalid --contrast {' '.join(contrast)!r}; give two different classes A B "
            f"(values: the log-odds of B against A) of {', '.join(map(repr, label_names))}"
        )
    for name in contrast:
        check_choice("--contrast", name, tuple(label_names))
    return contrast


def explain_recording(
    model,
    coh: np.ndarray,
    wpli: np.ndarray,
    age: float,
    sex: float,
    label_names: Sequence[str],
    *,
    recording_id: str,
    participant_id: str | None = None,
    target: str | None = None,
    contrast: Sequence[str] | None = None,
    method: str = DEFAULT_METHOD,
    n_steps: int = DEFAULT_N_STEPS,
    all_heads: bool = False,
    device: torch.device | str = "cpu",
    reference: tuple[np.ndarray, np.ndarray] | None = None,
    covariance: np.ndarray | None = None,
    onsets_s: np.ndarray | None = None,
) -> RecordingExplanation:
    """All explanations of one recording (module docs).

    ``coh``, ``wpli`` float32 numpy (S, T, C, C) raw connectivity; ``age`` years, ``sex`` 0/1
    (NaN = unknown); ``model`` an ``XAIguiFormer`` in eval mode on ``device``; ``target`` a
    class name or None (= the predicted class);
    ``contrast`` two class names (A, B) whose log-odds ``logit(B) - logit(A)`` is attributed
    too, or None (no contrast); ``reference``, the baseline connectome (coh, wPLI) float32
    (T, C, C) the attributions are against (None: zero connectivity); ``covariance`` the
    recording's band covariances (K, C, C), V^2 (a tangent-space path's input); ``onsets_s``
    float64 (S,) the segments' starts in the recording, s (the connectome file's
    ``segment_onsets_s``; None: unknown), for the time course (``segments``).
    """
    contrast = _checked_inputs(coh, label_names, recording_id, target, contrast)
    device = torch.device(device)
    model.eval()
    tensors = _input_tensors(coh, wpli, age, sex, device)
    with one_cpu_thread() if device.type == "cpu" else contextlib.nullcontext():
        offset = recording_offset(model, (*tensors, covariance))  # a static stage
        coarse, refined, logits = attention_maps(model, *tensors, all_heads, offset)
        probabilities = softmax(logits.mean(axis=0))
        predicted = int(probabilities.argmax())
        target_index = predicted if target is None else list(label_names).index(target)
        baseline = _baseline_tensors(reference, device)
        attribute = functools.partial(
            channel_pair_attributions,
            model,
            *tensors,
            method=method,
            n_steps=n_steps,
            reference=baseline,
            offset=offset,
        )
        cells = SegmentCells()
        coh_pairs, wpli_pairs, interactions = attribute(target=target_index, cells=cells)
        covariance_pairs = covariance_attributions(model, covariance, target_index, n_steps)
        contrasted, contrast_interactions, pair = _contrasted(
            attribute, contrast, label_names, model, covariance, n_steps
        )
        paths = _paths(model, tensors, target_index, pair, baseline, covariance)
        diagnostics = recording_diagnostics(model, [(coh, wpli, age, sex, covariance)], device)[0]
    return RecordingExplanation(
        recording_id=recording_id,
        participant_id=participant_id,
        predicted=label_names[predicted],
        target=label_names[target_index],
        probabilities=probabilities,
        band_importance=band_totals(coh_pairs, wpli_pairs),
        attention_coarse=coarse,
        attention_refined=refined,
        channel_pairs=coh_pairs + wpli_pairs,
        coh_pairs=coh_pairs,
        wpli_pairs=wpli_pairs,
        n_segments=coh.shape[0],
        attention_diagnostics=diagnostics,
        interactions=kept_interactions.describe(model, interactions, contrast_interactions),
        paths=paths,
        segments=segment_timeline(logits, offset, target_index, onsets_s, cells),
        **_recording_fields(coh, wpli, covariance_pairs),
        **contrasted,
    )


def _recording_fields(
    coh: np.ndarray, wpli: np.ndarray, covariance_pairs: np.ndarray | None
) -> dict:
    """The mean connectivity (``mean_coh``, ``mean_wpli`` (T, C, C) of coh, wpli (S, T, C, C))
    and the tangent-space path's fields of a :class:`RecordingExplanation`."""
    return {
        "mean_coh": exact_segment_mean(coh),
        "mean_wpli": exact_segment_mean(wpli),
        "covariance_pairs": covariance_pairs,
        "band_power": band_power(covariance_pairs),
    }


def _input_tensors(
    coh: np.ndarray, wpli: np.ndarray, age: float, sex: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A recording's (coh, wpli, age, sex) as the model takes them: float32 tensors on
    ``device``, age and sex one per segment."""
    n = coh.shape[0]
    coh_t, wpli_t = (torch.as_tensor(x, dtype=torch.float32, device=device) for x in (coh, wpli))
    age_t, sex_t = (
        torch.full((n,), float(v), dtype=torch.float32, device=device) for v in (age, sex)
    )
    return coh_t, wpli_t, age_t, sex_t


def _checked_inputs(
    coh: np.ndarray,
    label_names: Sequence[str],
    recording_id: str,
    target: str | None,
    contrast: Sequence[str] | None,
) -> tuple[str, str] | None:
    """The checked contrast (:func:`check_contrast`; None stays None), after a UsageError for a
    ``target`` that is not a class of the model; then InputDataError for connectivity that is
    not (segments >= 1, bands, channels, channels)."""
    if target is not None and target not in label_names:
        raise UsageError(
            f"invalid --target {target!r}; the model's classes are "
            f"{', '.join(map(repr, label_names))}"
        )
    checked = None if contrast is None else check_contrast(contrast, label_names)
    if coh.ndim != 4 or coh.shape[0] == 0:
        raise InputDataError(
            f"{recording_id}: connectivity has shape {coh.shape}; "
            "expected (segments >= 1, bands, channels, channels)"
        )
    return checked


def _contrasted(attribute, contrast, label_names, model, covariance, n_steps) -> tuple:
    """The contrast's fields (:func:`_contrast_fields`, with the covariance attributions), the
    interactions' attributions and the class pair; ({}, None, None) without a contrast."""
    if contrast is None:
        return {}, None, None
    pair = (list(label_names).index(contrast[0]), list(label_names).index(contrast[1]))
    contrast_coh, contrast_wpli, contrast_interactions = attribute(target=pair)
    fields = _contrast_fields(contrast, contrast_coh, contrast_wpli)
    fields["contrast_covariance_pairs"] = covariance_attributions(model, covariance, pair, n_steps)
    return fields, contrast_interactions, pair


def _contrast_fields(
    contrast: tuple[str, str], coh_pairs: np.ndarray, wpli_pairs: np.ndarray
) -> dict:
    """The contrast's fields of a :class:`RecordingExplanation`: the classes (A, B) and the
    attributions of ``logit(B) - logit(A)``, float64 (T, C, C) each."""
    return {
        "contrast_classes": contrast,
        "contrast_pairs": coh_pairs + wpli_pairs,
        "contrast_coh_pairs": coh_pairs,
        "contrast_wpli_pairs": wpli_pairs,
    }


def explain_with_models(
    models: Sequence[tuple],
    coh: np.ndarray,
    wpli: np.ndarray,
    age: float,
    sex: float,
    label_names: Sequence[str],
    *,
    target: str | None = None,
    device: torch.device | str = "cpu",
    **options,
) -> RecordingExplanation:
    """One recording explained by each of ``models`` (``(model, baseline)`` pairs, e.g. the
    fold models of a run that did not train on it, one per repeat) and averaged
    (:func:`mean_explanation`). All explain the same class: ``target``, else the class of the
    mean probabilities. ``options``: :func:`explain_recording`'s other keywords."""
    covariance = options.get("covariance")
    if len(models) > 1 and target is None:
        recording = [(coh, wpli, age, sex, covariance)]
        mean = np.mean(
            [
                softmax(recording_logits(model, recording, torch.device(device)), axis=1)[0]
                for model, _ in models
            ],
            axis=0,
        )
        target = label_names[int(mean.argmax())]
    return mean_explanation(
        [
            explain_recording(
                model,
                coh,
                wpli,
                age,
                sex,
                label_names,
                target=target,
                device=device,
                reference=baseline,
                **options,
            )
            for model, baseline in models
        ],
        label_names,
    )


def _baseline_tensors(
    baseline: tuple[np.ndarray, np.ndarray] | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The baseline connectome (coh, wPLI) as float32 tensors on ``device`` (None stays)."""
    if baseline is None:
        return None
    coh, wpli = (
        torch.as_tensor(np.asarray(r), dtype=torch.float32, device=device) for r in baseline
    )
    return coh, wpli


def _paths(
    model,
    tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    target: int,
    pair: tuple[int, int] | None,
    baseline: tuple[torch.Tensor, torch.Tensor] | None,
    covariance: np.ndarray | None,
) -> dict | None:
    """:attr:`RecordingExplanation.paths` of the explained class and (``pair``) the contrast;
    None for a model without a linear path."""
    paths = {"target": path_logit_changes(model, *tensors, target, baseline, covariance)}
    if paths["target"] is None:
        return None
    if pair is not None:
        paths["contrast"] = path_logit_changes(model, *tensors, pair, baseline, covariance)
    return paths


def mean_paths(paths: Sequence[dict | None]) -> dict | None:
    """The mean of several :attr:`RecordingExplanation.paths` (several models' of one recording,
    or a class's recordings'; None when any has none: no linear path); an output (the
    contrast) only where all have it."""
    present = [p for p in paths if p is not None]
    if not paths or len(present) < len(paths):
        return None
    return {
        output: {
            key: float(np.mean([p[output][key] for p in present])) for key in present[0][output]
        }
        for output in present[0]
        if all(output in p for p in present)
    }


def mean_explanation(
    explanations: Sequence[RecordingExplanation], label_names: Sequence[str]
) -> RecordingExplanation:
    """The mean of one recording's explanations by several models (same explained class and
    contrast): every array of :data:`RECORDING_ARRAYS` averaged, the predicted class the argmax
    of the mean probabilities, band importance the renormalised mean, the attention diagnostics
    averaged per pass, quantity and layer."""
    first = explanations[0]
    if len(explanations) == 1:
        return first
    means: dict[str, Any] = {  # RecordingExplanation's array fields, named at run time
        field: mean_over([getattr(e, field) for e in explanations])
        for field in RECORDING_ARRAYS
        if getattr(first, field) is not None
    }
    means["band_importance"] = normalise_signed(means["band_importance"])
    diagnostics = mean_diagnostics([e.attention_diagnostics for e in explanations])
    return dataclasses.replace(
        first,
        predicted=label_names[int(means["probabilities"].argmax())],
        interactions=kept_interactions.merged([e.interactions for e in explanations]),
        paths=mean_paths([e.paths for e in explanations]),
        segments=None
        if any(e.segments is None for e in explanations)
        else mean_timelines([e.segments for e in explanations if e.segments is not None]),
        attention_diagnostics=None  # models without transformer layers
        if diagnostics is None
        else {**diagnostics, "n": (first.attention_diagnostics or {}).get("n")},
        **means,
    )
