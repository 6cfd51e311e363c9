"""XAIguiFormer, the whole model: a standardiser, a static stage and the transformer path.

:class:`ModelConfig` holds every architecture choice (``preset("paper")`` is the official model,
reference-method.md, section 4; ``preset("default")`` fixes its known defects, section 9);
:class:`XAIguiFormer` is the ``nn.Module``, its stages modules of their own
(``model/stages.py`` draws how they combine):

- ``standardiser`` (:class:`~eegformer_cli.model.stages.Standardiser`, None without input
  standardisation): per-entry z-scores of coherence and wPLI;
- ``static`` (:class:`~eegformer_cli.model.stages.StaticStage`, None without a linear path):
  one logit per recording from convex fits on its averages;
- ``transformer`` (:class:`~eegformer_cli.model.transformer_path.TransformerPath`): the paper's
  XAI-guided transformer, segment by segment; ``transformer_kept`` (a bool buffer) says whether
  its logits are added to the static stage's.

Runs on whatever device its parameters are on; the inputs must be on the same device.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from eegformer_cli.choices import FREQUENCY_ENCODING_BY_PRESET, FREQUENCY_ENCODINGS, PRESETS
from eegformer_cli.errors import InputDataError, UsageError, check_choice
from eegformer_cli.model.interactions import INTERACTION_TOKEN, parse_interactions
from eegformer_cli.model.layers import NORMS
from eegformer_cli.model.linear_path import linear_features
from eegformer_cli.model.stages import Standardiser, StaticStage
from eegformer_cli.model.tokenizer import EDGES, NODE_FEATURES, READOUTS, SPATIAL_ENCODINGS
from eegformer_cli.model.transformer import GUIDANCES
from eegformer_cli.model.transformer_path import TRANSFORMER_INPUTS, ModelOutput, TransformerPath

__all__ = ["PRESETS", "ModelConfig", "ModelOutput", "XAIguiFormer"]

#: Segments standardised at a time by :meth:`XAIguiFormer.token_products` (bounds memory; the
#: products do not depend on it).
TOKEN_SEGMENTS = 256

#: Field values of each preset (the data-dependent fields n_channels, band_names, band_edges_hz,
#: n_classes and channel_names are always given by the caller).
PRESET_FIELDS = {
    # The official model (reference-method.md, section 4): every quirk kept.
    "paper": {
        "d_model": 128,
        "n_heads": 4,
        "n_layers": 12,
        "n_gnn_layers": 4,
        "mlp_ratio": 4.0,
        "layerscale_init": 1e-3,
        "dropout": 0.0,
        "norm": "timm_rms",
        "edges": "directed",
        "frequency_encoding": FREQUENCY_ENCODING_BY_PRESET["paper"],
        "xai_refinement": True,
        "detach_explanations": False,
        "spatial_encoding": "none",
        "readout": "mean",
        "channel_embedding": False,
        "node_features": "coherence",
        "guidance": "paper",
    },
    # The official model's defects fixed (reference-method.md, section 9): true RMSNorm,
    # undirected edges, a true-rotation dRoFE with z-scored age, detached explanations, a
    # tokenizer that keeps channel identity and sees wPLI as node features, guidance by each
    # band's share of the explanation with LayerScale 1 (with the paper's guidance the refined
    # attention stays uniform), and a small, regularised size chosen by measured accuracy
    # (docs/benchmarks.md, docs/benchmarks-history.md).
    "default": {
        "d_model": 16,
        "n_heads": 2,
        "n_layers": 1,
        "n_gnn_layers": 1,
        "mlp_ratio": 4.0,
        "layerscale_init": 1.0,
        "dropout": 0.1,
        "norm": "rms",
        "edges": "undirected",
        "frequency_encoding": FREQUENCY_ENCODING_BY_PRESET["default"],
        "xai_refinement": True,
        "detach_explanations": True,
        "spatial_encoding": "none",
        "readout": "channel_flatten_per_band",
        "channel_embedding": True,
        "node_features": "coherence_wpli",
        "guidance": "band_share",
    },
}

#: Fields that earlier versions stored in model files and run folders, with the values that
#: compute what this version computes (the captum path equals the one-pass DeepLIFT and the
#: explicit attention the fused one): dropped when a stored config holds one of them.
RETIRED_FIELDS = {
    "explainer": ("deeplift",),
    "explanation_impl": ("one_pass", "captum"),
    "attention_impl": ("fused", "explicit"),
}
#: Values of current fields that only experimental variants of earlier versions had.
RETIRED_VALUES = {
    "guidance": ("rms_token", "rms_sample"),
    "readout": ("channel_flatten",),
    "frequency_encoding": ("rope_band_index",),
}


def current_model_fields(stored: dict) -> dict:
    """A stored model config (``ModelConfig.to_dict()`` of this or an earlier version) in this
    version's fields (:func:`without_retired` of :data:`RETIRED_FIELDS` and
    :data:`RETIRED_VALUES`)."""
    return without_retired(stored, RETIRED_FIELDS, RETIRED_VALUES, "model config")


def without_retired(stored: dict, fields: dict, values: dict, what: str) -> dict:
    """A copy of a stored config dict without the retired ``fields`` (name -> the values that
    compute what this version computes: dropped). Used for the model's and the training's
    configs alike.

    Raises :class:`UsageError` naming ``what`` and the field when it holds a value only an
    experimental variant had: a retired field's other value, or one of ``values`` (name -> such
    values of a current field).
    """
    current = dict(stored)
    for name, kept in fields.items():
        if name in current and current.pop(name) not in kept:
            raise _retired_variant(what, name, stored[name])
    for name, rejected in values.items():
        if current.get(name) in rejected:
            raise _retired_variant(what, name, current[name])
    return current


def _retired_variant(what: str, name: str, value) -> UsageError:
    return UsageError(
        f"{what} {name}={value!r} was made by an experimental variant that this "
        "eegformer version no longer supports",
        hint="use the eegformer version that made it, or retrain",
    )


@dataclass
class ModelConfig:
    """Architecture of an :class:`XAIguiFormer`; validated on construction (MNE-style errors).

    Data fields: ``n_channels`` C, ``band_names`` (T,), ``band_edges_hz`` T pairs (f_low, f_high)
    in Hz (dRoFE coordinates), ``n_classes``, ``channel_names`` (C,) for RoSE montage positions.
    See :data:`PRESET_FIELDS` and the module docs for the meaning of each option;
    ``readout`` ("mean" | "channel_flatten_per_band"), ``channel_embedding`` (bool) and
    ``node_features`` ("coherence" | "coherence_wpli") are explained in
    :class:`~eegformer_cli.model.tokenizer.ConnectomeTokenizer`; ``guidance`` ("paper" |
    "band_share"), how the refined pass uses the explanation, in
    :class:`~eegformer_cli.model.transformer.RotaryAttention`; ``frequency_encoding``
    ("drofe_paper" | "drofe_default" | "none": the ablation without dRoFE) in
    :class:`~eegformer_cli.model.rotary.BandRotaryEncoding`; ``spatial_encoding`` "rose" adds
    RoSE electrode attention to the tokenizer. Ablations: ``xai_refinement`` false (the
    coarse pass alone), and ``n_layers`` 0 without it (the tokenizer and the head alone).
    """

    n_channels: int
    band_names: list[str]
    band_edges_hz: list[tuple[float, float]]
    n_classes: int
    channel_names: list[str] | None = None
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 12
    n_gnn_layers: int = 4
    mlp_ratio: float = 4.0
    layerscale_init: float = 1e-3
    dropout: float = 0.0
    norm: str = "rms"
    edges: str = "undirected"
    frequency_encoding: str = "drofe_default"
    xai_refinement: bool = True
    detach_explanations: bool = False
    spatial_encoding: str = "none"
    readout: str = "mean"
    channel_embedding: bool = False
    node_features: str = "coherence"
    guidance: str = "paper"
    #: Data-derived: the interactions a fit's screen kept (``Interaction.to_dict()`` each;
    #: ``model/interactions.py``); empty: no interaction path, the model of earlier versions.
    interactions: list[dict] = field(default_factory=list)
    #: Data-derived: the model has a static stage with a linear path (``model/stages.py``),
    #: fitted before the transformer path, whose logits the transformer's are added to; false:
    #: the transformer path alone.
    linear_path: bool = False
    #: Data-derived: the linear path reads each recording's mean connectivity (the products of
    #: its means, one logit per recording given to every segment as ``offset``;
    #: ``model/linear_path.py``); false (model files of earlier versions): per segment.
    linear_on_means: bool = False
    #: Data-derived: the linear path reads the mean of each segment's products, not the means'.
    linear_segment_products: bool = False
    #: From the training config: the model standardises its inputs (``model/stages.py``'s
    #: ``Standardiser``) before both the static stage and the transformer path read them.
    input_standardisation: bool = False
    #: Data-derived: the bands of the band covariances a tangent-space path reads
    #: (``model/tangent_space_path.py``; the static stage mixes it with the linear path,
    #: ``model/stages.py``); empty: no tangent-space path, the model of earlier versions.
    tangent_space_bands: list[str] = field(default_factory=list)
    #: What the transformer path reads (:data:`TRANSFORMER_INPUTS`): "connectivity" the band
    #: tokens and the interaction token when there is one; "interactions" the interaction
    #: token alone when there is one (the band tokens held at zero), the band tokens otherwise.
    transformer_inputs: str = "connectivity"
    #: Data-derived: the interaction token's within pairs are products of their entries
    #: standardised over their own recording's segments (``model/interactions.py``); false
    #: (model files of earlier versions): with the training statistics, as the other pairs.
    within_per_recording: bool = False
    #: Data-derived, with ``within_per_recording``: a within pair's entry is read together with
    #: its measure twin (the other measure of its band and channel pair) when the screen found
    #: the twin carrying the pair too (one of its proxies; ``model/interactions.py``); false
    #: (model files of earlier versions): the entry alone.
    within_measure_twins: bool = False

    def __post_init__(self):
        self.band_names = [str(name) for name in self.band_names]
        self.band_edges_hz = [(float(lo), float(hi)) for lo, hi in self.band_edges_hz]
        if self.channel_names is not None:
            self.channel_names = [str(name) for name in self.channel_names]
        self.validate()

    def validate(self) -> None:
        """Raise :class:`UsageError` naming the first invalid field and its allowed values."""
        check_choice("norm", self.norm, NORMS)
        check_choice("edges", self.edges, EDGES)
        check_choice("frequency_encoding", self.frequency_encoding, FREQUENCY_ENCODINGS)
        check_choice("spatial_encoding", self.spatial_encoding, SPATIAL_ENCODINGS)
        check_choice("readout", self.readout, READOUTS)
        check_choice("node_features", self.node_features, NODE_FEATURES)
        check_choice("guidance", self.guidance, GUIDANCES)
        check_choice("transformer_inputs", self.transformer_inputs, TRANSFORMER_INPUTS)
        for name in ("n_channels", "n_classes", "d_model", "n_heads"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"invalid value {getattr(self, name)!r} for {name}; must be >= 1")
        if self.n_layers < (1 if self.xai_refinement else 0):
            raise UsageError(
                f"invalid value {self.n_layers!r} for n_layers; must be >= 1 with "
                "xai_refinement (the refined pass needs a layer to explain), >= 0 "
                "without (0: the tokenizer and the head alone, an ablation)"
            )
        if self.n_classes < 2:
            raise UsageError(f"invalid value {self.n_classes!r} for n_classes; must be >= 2")
        if len(self.band_names) != len(self.band_edges_hz) or not self.band_names:
            raise UsageError(
                f"band_names ({len(self.band_names)}) and band_edges_hz "
                f"({len(self.band_edges_hz)}) must be non-empty and of equal length"
            )
        head_dim, rest = divmod(self.d_model, self.n_heads)
        needed = 4 if self.frequency_encoding == "drofe_paper" else 2
        if rest or head_dim % needed:
            raise UsageError(
                f"invalid d_model={self.d_model} / n_heads={self.n_heads}: the head "
                f"dimension must be an integer divisible by {needed} for "
                f"frequency_encoding={self.frequency_encoding!r}"
            )
        if self.channel_names is not None and len(self.channel_names) != self.n_channels:
            n_names = len(self.channel_names)
            raise UsageError(f"channel_names has {n_names} names for n_channels={self.n_channels}")
        if self.mlp_ratio <= 0 or self.n_gnn_layers < 0:
            raise UsageError(
                f"invalid mlp_ratio={self.mlp_ratio!r} or n_gnn_layers="
                f"{self.n_gnn_layers!r}; need mlp_ratio > 0 and n_gnn_layers >= 0"
            )
        if not isinstance(self.channel_embedding, bool):
            raise UsageError(
                f"invalid value {self.channel_embedding!r} for channel_embedding; "
                "must be true or false"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise UsageError(f"invalid value {self.dropout!r} for dropout; must be in [0, 1)")
        parse_interactions(self.interactions, self.band_names, self.channel_names)
        if self.tangent_space_bands and not (self.linear_path and self.linear_on_means):
            raise UsageError(
                "tangent_space_bands needs linear_path=true and linear_on_means=true: the "
                "tangent-space path is a part of the static stage on whole recordings"
            )

    def token_names(self) -> list[str]:
        """The names of the transformer's tokens, in order: the bands, then
        :data:`INTERACTION_TOKEN` when kept interactions give the model that token."""
        return [*self.band_names, *([INTERACTION_TOKEN] if self.interactions else [])]

    @classmethod
    def preset(cls, name: str, **fields) -> ModelConfig:
        """``"paper"`` (the official model) or ``"default"``; ``fields`` override/complete it
        (n_channels, band_names, band_edges_hz and n_classes are required)."""
        check_choice("preset", name, PRESETS)
        return cls(**{**PRESET_FIELDS[name], **fields})

    def to_dict(self) -> dict:
        """JSON-ready dict (band edges as lists)."""
        out = dataclasses.asdict(self)
        out["band_edges_hz"] = [list(pair) for pair in self.band_edges_hz]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        """Inverse of :meth:`to_dict`, also of an earlier version's (:func:`current_model_fields`);
        unknown keys raise :class:`UsageError` naming them."""
        data = current_model_fields(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(
                f"unknown model config fields {unknown}", hint=f"allowed fields are {sorted(known)}"
            )
        return cls(**data)


class XAIguiFormer(nn.Module):
    """The whole model (module docstring): ``standardiser`` -> ``static`` and ``transformer``.

    Inputs: ``coh``, ``wpli`` float32 (B, n_bands, C, C) raw (the model standardises them),
    symmetric, zero diagonal; ``age`` float32 (B,) years, NaN = unknown; ``sex`` float32 (B,),
    0 = male, 1 = female, NaN = unknown (the demographic rule:
    :class:`~eegformer_cli.model.transformer_path.TransformerPath`).

    Explanations need gradients: under ``torch.no_grad()`` the model turns grad on for the
    coarse pass and explanation and returns detached outputs; ``torch.inference_mode()`` is not
    supported when ``xai_refinement`` is on.
    """

    transformer_kept: Tensor

    def __init__(self, config: ModelConfig):
        super().__init__()
        config.validate()
        self.config = config
        n_bands = len(config.band_names)
        self.standardiser = (
            Standardiser(n_bands, config.n_channels) if config.input_standardisation else None
        )
        self.transformer = TransformerPath(config)
        self.static = None
        if config.linear_path:  # untrained, the model is its static stage
            self.static = StaticStage(
                config.n_channels,
                n_bands,
                len(config.interactions),
                config.n_classes,
                len(config.tangent_space_bands),
                on_means=config.linear_on_means,
            )
            self.transformer.zero_head()
        self.register_buffer("transformer_kept", torch.tensor(True))

    @property
    def kept(self) -> bool:
        """Whether the transformer path's logits are added to the static stage's."""
        return bool(self.transformer_kept)

    def keep_transformer(self, kept: bool) -> None:
        """Store the keep decision (``training/transformer_keep.py``); a model without a static stage
        always keeps its transformer path (it would be empty)."""
        if not kept and self.static is None:
            raise UsageError("a model without a static stage keeps its transformer path")
        self.transformer_kept.fill_(bool(kept))

    @contextlib.contextmanager
    def static_alone(self):
        """Within the block the model gives its static stage's logits alone, as a model whose
        transformer path is not kept; its own decision is restored after."""
        kept = self.kept
        self.keep_transformer(False)
        try:
            yield
        finally:
            self.keep_transformer(kept)

    def describe(self) -> dict:
        """JSON-ready: config, parameter counts (total, trainable, per component), age statistics
        (None when unknown), the stages present and the keep decision."""

        def count(module: nn.Module) -> int:
            return sum(p.numel() for p in module.parameters())

        def stat(value: Tensor) -> float | None:
            return float(value) if torch.isfinite(value) else None

        return {
            "config": self.config.to_dict(),
            "parameters": {
                "total": count(self),
                "trainable": sum(p.numel() for p in self.parameters() if p.requires_grad),
                "tokenizer": count(self.transformer.tokenizer),
                "transformer_layers": count(self.transformer.encoder.layers),
                "head": count(self.transformer.encoder.head),
            },
            "age_mean": stat(self.transformer.age_mean),
            "age_std": stat(self.transformer.age_std),
            "input_standardisation": self.standardiser is not None,
            "static_stage": self.static is not None,
            "transformer_kept": self.kept,
        }

    def set_stats(self, stats: dict) -> None:
        """Store the standardiser's statistics (``training/standardise.connectivity_stats``)."""
        if self.standardiser is None:
            raise UsageError("this model has no input standardisation to set statistics of")
        self.standardiser.set_stats(stats)

    def set_demographic_stats(self, age_mean: float | None, age_std: float | None) -> None:
        """Store the training set's age mean and standard deviation (years; None = unknown)."""
        self.transformer.set_demographic_stats(age_mean, age_std)

    def standardise(self, coh: Tensor, wpli: Tensor) -> tuple[Tensor, Tensor]:
        """Raw (B, T, C, C) connectivity -> what the paths read (the same without a
        standardiser)."""
        return (coh, wpli) if self.standardiser is None else self.standardiser(coh, wpli)

    def _check_inputs(self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor) -> None:
        expected = (len(self.config.band_names), self.config.n_channels, self.config.n_channels)
        for name, value in (("coh", coh), ("wpli", wpli)):
            if value.ndim != 4 or tuple(value.shape[1:]) != expected:
                raise InputDataError(
                    f"{name} has shape {tuple(value.shape)}, the model expects "
                    f"(batch, {', '.join(map(str, expected))})"
                )
        for name, value in (("age", age), ("sex", sex)):
            if tuple(value.shape) != (coh.shape[0],):
                raise InputDataError(
                    f"{name} has shape {tuple(value.shape)}, expected ({coh.shape[0]},)"
                )

    def forward(
        self,
        coh: Tensor,
        wpli: Tensor,
        age: Tensor,
        sex: Tensor,
        offset: Tensor | None = None,
        products: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(logits_coarse, logits_refined), each (B, n_classes); equal without xai_refinement.
        ``offset``, ``products``: :meth:`forward_with_details`."""
        output = self.forward_with_details(coh, wpli, age, sex, offset=offset, products=products)
        return output.logits_coarse, output.logits_refined

    @property
    def token_reads_recordings(self) -> bool:
        """Whether a segment's interaction token depends on its recording's other segments
        (within pairs standardised per recording): then a batch that is not one whole
        recording needs ``products`` from :meth:`token_products`."""
        token = self.transformer.interaction_token
        return token is not None and token.reads_recordings

    def token_products(self, coh, wpli, age, sex) -> Tensor | None:
        """(S, K) float32 on the model's device: the interaction token's products for one whole
        recording, ``coh``, ``wpli`` raw (S, T, C, C) numpy or tensors, ``age``, ``sex``
        numbers (``TransformerPath.token_products``), read :data:`TOKEN_SEGMENTS` segments at
        a time (flat memory for a recording of any length); None without an interaction
        token."""
        token = self.transformer.interaction_token
        if token is None:
            return None
        device = token.embed.weight.device
        sides = []
        with torch.no_grad():
            for start in range(0, len(coh), TOKEN_SEGMENTS):
                coh_block, wpli_block = (
                    torch.as_tensor(x[start : start + TOKEN_SEGMENTS]).to(device)
                    for x in (coh, wpli)
                )
                n = len(coh_block)
                age_block, sex_block = (
                    torch.full((n,), float(v), device=device) for v in (age, sex)
                )
                coh_block, wpli_block = self.standardise(coh_block, wpli_block)
                age_z = self.transformer.age_z(age_block, sex_block)
                sides.append(token.recording_sides(coh_block, wpli_block, age_z))
            return token.recording_products(*(torch.cat(side) for side in zip(*sides))).float()

    def interaction_products(self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor):
        """(B, K) float: the kept pairs' products, from the raw connectivity the model is given
        (None without an interaction token)."""
        return self.transformer.interaction_products(*self.standardise(coh, wpli), age, sex)

    def linear_features(
        self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor, products: Tensor | None = None
    ) -> Tensor:
        """(B, n_features): what the linear path reads (``linear_path.linear_features``) from
        the raw connectivity the model is given; ``products`` as in
        :meth:`forward_with_details`."""
        if products is None:
            products = self.interaction_products(coh, wpli, age, sex)
        return linear_features(*self.standardise(coh, wpli), products)

    def forward_with_details(
        self,
        coh: Tensor,
        wpli: Tensor,
        age: Tensor,
        sex: Tensor,
        target: Tensor | None = None,
        products: Tensor | None = None,
        offset: Tensor | None = None,
    ) -> ModelOutput:
        """Full forward; ``target`` (B,) int64 picks the explained class (default: the argmax
        of the coarse logits); ``products`` (B, K) replace the interaction products the model
        would form from ``coh`` and ``wpli`` (:meth:`token_products`, the batch taken for one
        whole recording; what ``explain`` attributes to beside the connectivity); ``offset``
        (B, n_classes) replaces the static stage's logits (training passes the cross-fitted
        ones; a model on recording means is given its recording's by every caller that has the
        whole recording: ``model/static_paths.py``); without it the static stage reads each
        item's own features.

        Both passes' logits are the static stage's plus the transformer path's (the static
        stage's alone when the transformer path is not kept; the transformer's alone without a
        static stage)."""
        self._check_inputs(coh, wpli, age, sex)
        coh, wpli = self.standardise(coh, wpli)
        if offset is None and self.static is not None:
            # the static stage reads each segment's own products, which a token that reads
            # whole recordings does not embed
            own = None if self.token_reads_recordings else products
            if own is None:
                own = self.transformer.interaction_products(coh, wpli, age, sex)
            offset = self.static(linear_features(coh, wpli, own))
        output = self.transformer.forward_with_details(
            coh, wpli, age, sex, target, products, offset
        )
        if offset is None:
            return output
        offset = offset.to(output.logits_coarse.dtype)
        kept = self.transformer_kept.to(offset.dtype)  # no host synchronisation
        return dataclasses.replace(
            output,
            logits_coarse=offset + kept * output.logits_coarse,
            logits_refined=offset + kept * output.logits_refined,
        )
