"""The transformer path: connectome tokenizer -> coarse transformer pass -> explanation of its
predicted class at every layer -> refined pass whose queries and keys come from the
explanations (the paper's XAIguiFormer), with dRoFE's demographic rotation.

:class:`TransformerPath` reads each segment's standardised connectivity (the whole model's
standardiser runs first: ``model/xaiguiformer.py``) and gives the transformer's logits of both
passes; the whole model adds them to the static stage's logits of the segment's recording
(``model/stages.py``). Runs on whatever device its parameters are on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from eegformer_cli.model.deeplift import one_pass_deeplift
from eegformer_cli.model.interactions import InteractionToken, parse_interactions
from eegformer_cli.model.rotary import drofe_default_demographics, drofe_paper_demographics
from eegformer_cli.model.tokenizer import ConnectomeTokenizer
from eegformer_cli.model.transformer import AttentionTrace, BandTransformer

#: ``ModelConfig.transformer_inputs``: every token, or the interaction token alone when kept
#: pairs give the path one (a path that cannot memorise recordings through the band tokens).
TRANSFORMER_INPUTS = ("connectivity", "interactions")


@dataclass
class ModelOutput:
    """Everything one forward computes.

    logits_coarse, logits_refined: (B, n_classes) (equal when xai_refinement is off);
    tokens: (B, T, d); target: (B,) int64, the explained class (coarse argmax unless given);
    explanations: L tensors (B, T, d), the coarse pass's attributions at each layer input
    (empty when xai_refinement is off); attention_coarse / attention_refined: one
    :class:`~eegformer_cli.model.transformer.AttentionTrace` per layer (weights (B, H, T, T),
    residual share, guidance ratio) with explicit attention (``model/diagnostics.py``), else
    empty.
    """

    logits_coarse: Tensor
    logits_refined: Tensor
    tokens: Tensor
    target: Tensor | None = None
    explanations: list[Tensor] = field(default_factory=list)
    attention_coarse: list[AttentionTrace] = field(default_factory=list)
    attention_refined: list[AttentionTrace] = field(default_factory=list)


class TransformerPath(nn.Module):
    """The XAI-guided transformer on connectome sequences, one segment per batch item.

    Inputs: standardised ``coh``, ``wpli`` float32 (B, n_bands, C, C); ``age`` float32 (B,)
    years, NaN = unknown; ``sex`` float32 (B,), 0 = male, 1 = female, NaN = unknown.
    Demographic rule (statistics are buffers in the state dict, :meth:`set_demographic_stats`):
    ``drofe_paper`` multiplies by raw age (unknown -> training mean age, else 1) and adds sex
    (unknown -> 0); the other encodings z-score age and centre sex (unknown -> 0, the
    population average).

    Explanations need gradients: under ``torch.no_grad()`` the path turns grad on for the
    coarse pass and explanation and returns detached outputs; ``torch.inference_mode()`` is not
    supported when ``xai_refinement`` is on.
    """

    age_mean: Tensor
    age_std: Tensor

    def __init__(self, config):
        """``config``: the whole model's ``ModelConfig`` (``model/xaiguiformer.py``)."""
        super().__init__()
        self.config = config
        interactions = parse_interactions(
            config.interactions, config.band_names, config.channel_names
        )
        # the interaction token sits at the frequency origin (0, 0): no rotation of its own
        edges = torch.tensor(
            config.band_edges_hz + [(0.0, 0.0)] * bool(interactions), dtype=torch.float32
        )
        self.tokenizer = ConnectomeTokenizer(
            n_channels=config.n_channels,
            dim=config.d_model,
            n_layers=config.n_gnn_layers,
            norm=config.norm,
            edges=config.edges,
            dropout=config.dropout,
            spatial_encoding=config.spatial_encoding,
            channel_names=config.channel_names,
            n_heads=config.n_heads,
            readout=config.readout,
            channel_embedding=config.channel_embedding,
            node_features=config.node_features,
            n_bands=len(config.band_names),
        )
        self.encoder = BandTransformer(
            dim=config.d_model,
            n_heads=config.n_heads,
            n_layers=config.n_layers,
            n_classes=config.n_classes,
            mlp_ratio=config.mlp_ratio,
            layerscale_init=config.layerscale_init,
            norm=config.norm,
            frequency_encoding=config.frequency_encoding,
            band_edges_hz=edges,
            dropout=config.dropout,
            guidance=config.guidance,
        )
        #: set by :func:`~eegformer_cli.model.deeplift.differentiable_explanations`
        self.differentiable_explanations = False
        self.register_buffer("age_mean", torch.tensor(float("nan")))
        self.register_buffer("age_std", torch.tensor(float("nan")))
        # built last: without kept interactions the parameters are drawn as before
        self.interaction_token = (
            InteractionToken(
                interactions,
                band_names=config.band_names,
                # parse_interactions refused any interaction when there are no channel names
                channel_names=config.channel_names or [],
                dim=config.d_model,
                per_recording=config.within_per_recording,
                measure_twins=config.within_measure_twins,
            )
            if interactions
            else None
        )

    def zero_head(self) -> None:
        """Set the head's output layer to zero: the path adds nothing until trained."""
        nn.init.zeros_(self.encoder.head.fc2.weight)
        nn.init.zeros_(self.encoder.head.fc2.bias)

    def set_demographic_stats(self, age_mean: float | None, age_std: float | None) -> None:
        """Store the training set's age mean and standard deviation (years; None = unknown)."""
        self.age_mean.fill_(float("nan") if age_mean is None else float(age_mean))
        self.age_std.fill_(float("nan") if age_std is None else float(age_std))

    def encode_demographics(self, age: Tensor, sex: Tensor) -> Tensor:
        """(B,) age and sex -> (B, 2) float32 rotary inputs; (0, 0) is the explanation baseline."""
        if self.config.frequency_encoding == "drofe_paper":
            return drofe_paper_demographics(age, sex, self.age_mean)
        return drofe_default_demographics(age, sex, self.age_mean, self.age_std)

    def age_z(self, age: Tensor, sex: Tensor) -> Tensor:
        """(B,) z-scored age with the training statistics, unknown at 0 (the training mean):
        what the interaction token multiplies entries by, whatever the frequency encoding."""
        return drofe_default_demographics(age, sex, self.age_mean, self.age_std)[:, 0]

    def interaction_products(self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor):
        """(B, K) float: the kept pairs' products of each segment on its own, from the
        standardised connectivity (None without an interaction token): what the static stage
        reads, and what the token embeds unless it reads whole recordings
        (:meth:`token_products`)."""
        if self.interaction_token is None:
            return None
        return self.interaction_token.products(coh, wpli, self.age_z(age, sex))

    def token_products(self, coh: Tensor, wpli: Tensor, age: Tensor, sex: Tensor):
        """(S, K) float: the products the interaction token embeds for the S segments of one
        whole recording (standardised connectivity; ``InteractionToken.recording_products``),
        None without an interaction token. A batch of segments of several recordings, or of
        part of one, needs its products from each whole recording (``model/predict.py``)."""
        if self.interaction_token is None:
            return None
        token = self.interaction_token
        return token.recording_products(*token.recording_sides(coh, wpli, self.age_z(age, sex)))

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
        """The transformer's own logits of both passes (the whole model adds the static
        stage's); ``target`` (B,) int64 picks the explained class (default: the argmax of the
        coarse logits plus ``offset`` (B, n_classes), the static logits the whole model adds);
        ``products`` (B, K) replace the interaction products the token would form from ``coh``
        and ``wpli`` (what ``explain`` attributes to beside the connectivity), taking the batch
        for one whole recording (:meth:`token_products`)."""
        demographics = self.encode_demographics(age, sex)
        tokens = self.tokenizer(coh, wpli)
        if self.interaction_token is not None:
            if products is None:
                products = self.token_products(coh, wpli, age, sex)
            token = self.interaction_token.embed(products)
            if self.config.transformer_inputs == "interactions":
                # zero, still in the graph: attributions to the entries are 0, not undefined
                tokens = tokens * 0
            tokens = torch.cat((tokens, token[:, None]), dim=1)
        if not self.config.xai_refinement:
            coarse = self.encoder.run(tokens, demographics)
            return ModelOutput(
                coarse.logits,
                coarse.logits,
                tokens,
                attention_coarse=coarse.attention,
                attention_refined=coarse.attention,
            )
        grad_was_enabled = torch.is_grad_enabled()
        with torch.enable_grad():
            if not tokens.requires_grad:
                tokens = tokens.detach().requires_grad_()
            differentiable = self.differentiable_explanations
            coarse, target, explanations = one_pass_deeplift(
                self.encoder,
                tokens,
                demographics,
                target,
                self.config.detach_explanations and not differentiable,
                create_graph=differentiable,
                offset=offset,
            )
        refined = self.encoder.run(tokens, demographics, explanations)
        output = ModelOutput(
            coarse.logits,
            refined.logits,
            tokens,
            target,
            explanations,
            coarse.attention,
            refined.attention,
        )
        return output if grad_was_enabled else detached(output)


def detached(output: ModelOutput) -> ModelOutput:
    """``output`` with every tensor cut from its graph."""

    def cut(values: list) -> list:
        return [value.detach() for value in values]

    return ModelOutput(
        output.logits_coarse.detach(),
        output.logits_refined.detach(),
        output.tokens.detach(),
        output.target,
        cut(output.explanations),
        cut(output.attention_coarse),
        cut(output.attention_refined),
    )
