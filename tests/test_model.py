"""XAIguiFormer: shapes for every preset and ablation, the dense GINE tokenizer against an
explicit edge loop, attention implementations, determinism, config/state-dict round trips,
validation errors, demographics, and CUDA under autocast."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from builders import (
    MODEL_BANDS,
    MODEL_CHANNELS,
    connectome_batch,
    perturb,
    small_config,
)
from tolerance import assert_float32_close

from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.model import ModelConfig, XAIguiFormer
from eegformer_cli.model.layers import GeGLU, TimmRmsNorm, make_norm, norm_then_linear
from eegformer_cli.model.tokenizer import (
    ConnectomeTokenizer,
    DenseGINEConv,
    GineAggregation,
    GnnBlock,
    message_sources,
    message_targets,
)

ABLATIONS = {
    "paper": ("paper", {}),
    "default": ("default", {}),
    "coarse_only": ("default", {"xai_refinement": False}),
    "tokenizer_alone": ("default", {"xai_refinement": False, "n_layers": 0}),
    "no_frequency_encoding": ("default", {"frequency_encoding": "none"}),
    "rose_electrodes": ("default", {"spatial_encoding": "rose", "channel_names": MODEL_CHANNELS}),
    "directed_torch_rms": ("default", {"edges": "directed", "norm": "rms"}),
    "coherence_only_nodes": ("default", {"node_features": "coherence"}),
    "paper_guidance": ("default", {"guidance": "paper"}),
}


@pytest.mark.parametrize("name", ABLATIONS)
def test_every_config_runs_forward_and_backward(name):
    preset, fields = ABLATIONS[name]
    torch.manual_seed(0)
    config = small_config(preset, **fields)
    model = XAIguiFormer(config)
    coh, wpli, age, sex = connectome_batch()
    output = model.forward_with_details(coh, wpli, age, sex)
    assert output.logits_coarse.shape == output.logits_refined.shape == (3, 3)
    assert output.logits_refined.dtype == torch.float32
    assert output.tokens.shape == (3, len(MODEL_BANDS), 32)
    assert torch.isfinite(output.logits_refined).all()
    if config.xai_refinement:
        assert len(output.explanations) == 2
        assert all(e.shape == (3, len(MODEL_BANDS), 32) for e in output.explanations)
    loss = F.cross_entropy(output.logits_coarse, torch.tensor([0, 1, 2])) + F.cross_entropy(
        output.logits_refined, torch.tensor([0, 1, 2])
    )
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    if config.n_layers:
        assert model.transformer.encoder.layers[0].attn.qkv.weight.grad.abs().sum() > 0


def test_timm_rms_norm_divides_by_the_unbiased_std_without_recentring():
    """timm 0.9.5 'RmsNorm' (reference section 4): x / sqrt(var_unbiased(x) + eps), mean kept."""
    x = torch.randn(4, 16, dtype=torch.float64) * 3 + 5
    expected = x.numpy() / np.sqrt(np.var(x.numpy(), axis=-1, ddof=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(TimmRmsNorm(16, eps=1e-5).double()(x).detach(), expected, rtol=1e-12)
    true_rms = torch.nn.RMSNorm(16, eps=1e-5).double()(x).detach()
    assert not torch.allclose(true_rms, torch.from_numpy(expected))


def test_timm_rms_norm_backward_equals_autograd_of_its_formula():
    """The hand-written backward gives autograd's gradients of the written-out formula."""
    torch.manual_seed(3)
    x = (torch.randn(3, 5, 16, dtype=torch.float64) * 3 + 2).requires_grad_()
    norm = TimmRmsNorm(16, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    grad = torch.randn(3, 5, 16, dtype=torch.float64)
    fused = torch.autograd.grad(norm(x), (x, norm.weight), grad)
    written_out = x * torch.rsqrt(x.var(dim=-1, keepdim=True) + 1e-5) * norm.weight
    expected = torch.autograd.grad(written_out, (x, norm.weight), grad)
    for got, want in zip(fused, expected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda z: norm(z), (x,))


def test_timm_rms_norm_float32_gradients_stay_accurate_with_a_large_mean():
    """With a mean 1000x the spread, float32 gradients agree with float64 (at the same float32
    inputs) to 1e-6 of their scale: 3e-7 measured; 5e-5 with x and its mean taken apart in the
    backward, 3e-5 without re-centring the centred x (as autograd through ``torch.var``)."""
    torch.manual_seed(6)
    x32 = (torch.randn(64, 128) + 1000).requires_grad_()
    grad = torch.randn(64, 128)
    fused = torch.autograd.grad(TimmRmsNorm(128)(x32), x32, grad)[0]
    x64 = x32.detach().double().requires_grad_()  # the same float32 values
    exact = torch.autograd.grad(
        x64 * torch.rsqrt(x64.var(dim=-1, keepdim=True) + 1e-6), x64, grad.double()
    )[0]
    assert (fused.double() - exact).abs().max() <= 1e-6 * exact.abs().max()


@pytest.mark.parametrize("kind", ["timm_rms", "rms"])
def test_norm_then_linear_equals_the_linear_of_the_norm(kind):
    """Folding the norm's weight into the Linear changes neither values nor gradients."""
    torch.manual_seed(4)
    norm, linear = make_norm(kind, 8, eps=1e-6).double(), torch.nn.Linear(8, 6).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(4, 3, 8, dtype=torch.float64, requires_grad=True)
    parameters = (x, norm.weight, linear.weight, linear.bias)
    grad = torch.randn(4, 3, 6, dtype=torch.float64)
    folded, unfolded = norm_then_linear(norm, linear, x), linear(norm(x))
    np.testing.assert_allclose(folded.detach(), unfolded.detach(), rtol=1e-12, atol=1e-14)
    for got, want in zip(
        torch.autograd.grad(folded, parameters, grad),
        torch.autograd.grad(unfolded, parameters, grad),
    ):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("norm", ["timm_rms", "rms"])
def test_gnn_block_is_the_official_composition(norm):
    """``x + GeGLU(Linear(Norm(GINE(x))))`` written out with the plain modules, gradients too."""
    torch.manual_seed(5)
    block, edge_embedding = GnnBlock(4, norm, dropout=0.0).double(), torch.nn.Linear(1, 4).double()
    with torch.no_grad():
        block.conv.eps.fill_(0.3)
        block.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    w = torch.rand(2, 2, 5, 5, dtype=torch.float64)
    out = block(x, w, edge_embedding, "directed")
    expected = x + block.act(block.expand(block.norm(block.conv(x, w, edge_embedding, "directed"))))
    np.testing.assert_allclose(out.detach(), expected.detach(), rtol=1e-12, atol=1e-14)
    parameters = (x, *block.parameters())
    for got, want in zip(
        torch.autograd.grad(out.sum(), parameters), torch.autograd.grad(expected.sum(), parameters)
    ):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_geglu_gates_the_first_half_with_erf_gelu_of_the_second():
    x = torch.tensor([[1.5, -2.0, 0.5, 1.0]], dtype=torch.float64)
    gelu = [g * 0.5 * (1 + math.erf(g / math.sqrt(2))) for g in (0.5, 1.0)]
    np.testing.assert_allclose(GeGLU()(x), [[1.5 * gelu[0], -2.0 * gelu[1]]], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------


def gine_by_edge_loop(conv: DenseGINEConv, x, wpli, edge_embedding, edges: str):
    """PyG GINEConv semantics written out: edges from the official construction (row < col,
    source -> target; 'undirected' adds the reverse), out_i = MLP((1+eps) x_i + sum ReLU(x_j + e_ji))."""
    n = x.shape[-2]
    pairs = [(row, col) for row in range(n) for col in range(n) if row < col]
    if edges == "undirected":
        pairs += [(col, row) for row, col in pairs]
    aggregated = torch.zeros_like(x)
    for b in range(x.shape[0]):
        for f in range(x.shape[1]):
            for source, target in pairs:
                e = edge_embedding(wpli[b, f, source, target].reshape(1))
                aggregated[b, f, target] += torch.relu(x[b, f, source] + e)
    return conv.fc2(F.gelu(conv.fc1((1 + conv.eps) * x + aggregated)))


@pytest.mark.parametrize("edges", ["directed", "undirected"])
def test_dense_gine_equals_edge_loop(edges):
    torch.manual_seed(1)
    conv, edge_embedding = DenseGINEConv(4).double(), torch.nn.Linear(1, 4).double()
    with torch.no_grad():
        conv.eps.fill_(0.3)
    x = torch.randn(2, 2, 5, 4, dtype=torch.float64)
    wpli = torch.rand(2, 2, 5, 5, dtype=torch.float64)
    wpli = wpli + wpli.transpose(-1, -2)
    dense = conv(x, wpli.transpose(-1, -2), edge_embedding, edges)
    np.testing.assert_allclose(
        dense.detach(),
        gine_by_edge_loop(conv, x, wpli, edge_embedding, edges).detach(),
        rtol=1e-12,
        atol=1e-12,
    )


def test_gine_aggregation_gradients():
    torch.manual_seed(2)
    u = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, 5, 5, dtype=torch.float64, requires_grad=True)
    a = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(GineAggregation.apply, (u, w, a, "directed"))
    assert torch.autograd.gradcheck(GineAggregation.apply, (u, w, a, "undirected"))


def test_directed_channel_zero_hears_nothing():
    assert list(range(4))[message_sources(0, 4, "directed")] == []
    assert list(range(4))[message_sources(3, 4, "directed")] == [0, 1, 2]
    for edges in ("directed", "undirected"):  # message_targets is the transpose of message_sources
        pairs = {(j, i) for i in range(4) for j in list(range(4))[message_sources(i, 4, edges)]}
        assert pairs == {
            (j, i) for j in range(4) for i in list(range(4))[message_targets(j, 4, edges)]
        }
    u = torch.randn(2, 4, 3)
    messages = GineAggregation.apply(u, torch.rand(2, 4, 4), torch.randn(3), "directed")
    assert messages[:, 0].abs().sum() == 0 and messages[:, 3].abs().sum() > 0


def test_rose_needs_known_channel_names():
    with pytest.raises(UsageError, match="standard_1005"):
        XAIguiFormer(
            small_config(
                spatial_encoding="rose", channel_names=["Fz", "Cz", "Pz", "O1", "O2", "XYZ"]
            )
        )
    with pytest.raises(UsageError, match="channel_names"):
        XAIguiFormer(small_config(spatial_encoding="rose"))


def test_rose_positions_are_a_buffer_in_centimetres():
    model = XAIguiFormer(small_config(spatial_encoding="rose", channel_names=MODEL_CHANNELS))
    positions = model.state_dict()["transformer.tokenizer.spatial.positions_cm"]
    distance_o1_o2 = float((positions[4] - positions[5]).norm())
    assert 3.0 < distance_o1_o2 < 10.0  # O1-O2 on an adult head: about 5-6 cm


# ---------------------------------------------------------------------------------------------
# transformer behaviour
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["paper", "default"])
def test_fused_and_explicit_attention_agree(preset):
    from eegformer_cli.model.diagnostics import explicit_attention

    torch.manual_seed(3)
    model = XAIguiFormer(small_config(preset))
    coh, wpli, age, sex = connectome_batch()
    fused = model.forward_with_details(coh, wpli, age, sex)
    with explicit_attention(model):
        explicit = model.forward_with_details(coh, wpli, age, sex)
    for a, b in (
        (fused.logits_coarse, explicit.logits_coarse),
        (fused.logits_refined, explicit.logits_refined),
    ):
        assert_float32_close(a, b)
    assert fused.attention_refined == [] and all(
        m.fused_attn for m in model.modules() if hasattr(m, "fused_attn")
    )
    assert [a.weights.shape for a in explicit.attention_refined] == [
        (3, 4, len(MODEL_BANDS), len(MODEL_BANDS))
    ] * 2
    np.testing.assert_allclose(
        explicit.attention_coarse[0].weights.sum(-1).detach(), 1.0, rtol=1e-5
    )


def test_coarse_only_ablation_returns_coarse_logits_twice():
    torch.manual_seed(4)
    full = perturb(XAIguiFormer(small_config()))
    coarse_only = XAIguiFormer(small_config(xai_refinement=False))
    coarse_only.load_state_dict(full.state_dict())
    coh, wpli, age, sex = connectome_batch()
    coarse, refined = coarse_only(coh, wpli, age, sex)
    assert torch.equal(coarse, refined)
    full_coarse, full_refined = full(coh, wpli, age, sex)
    assert_float32_close(coarse, full_coarse)  # the coarse pass ran in another batch layout
    assert not torch.allclose(full_coarse, full_refined, atol=1e-7)


def test_same_seed_same_model_and_outputs():
    coh, wpli, age, sex = connectome_batch()
    outputs = []
    for _ in range(2):
        torch.manual_seed(5)
        outputs.append(XAIguiFormer(small_config("paper"))(coh, wpli, age, sex)[1])
    assert torch.equal(outputs[0], outputs[1])


def test_config_and_state_dict_round_trip():
    torch.manual_seed(6)
    model = XAIguiFormer(small_config(frequency_encoding="drofe_default"))
    model.set_demographic_stats(age_mean=44.0, age_std=12.0)
    with torch.no_grad():
        model.transformer.encoder.layers[0].attn.rotary.beta.fill_(0.4)
    config = ModelConfig.from_dict(json.loads(json.dumps(model.config.to_dict())))
    assert config == model.config
    restored = XAIguiFormer(config)
    restored.load_state_dict(model.state_dict())
    assert restored.describe()["age_mean"] == 44.0
    coh, wpli, age, sex = connectome_batch()
    assert torch.equal(model(coh, wpli, age, sex)[1], restored(coh, wpli, age, sex)[1])


def pair_swap(coh: torch.Tensor, delta: float = 0.2) -> torch.Tensor:
    """``coh`` with pairs (0,1), (2,3) raised and (0,3), (1,2) lowered by ``delta`` (both
    triangles): every node strength (row sum) is unchanged, but which pairs are coupled moves."""
    swapped = coh.clone()
    for (i, j), sign in (((0, 1), 1), ((2, 3), 1), ((0, 3), -1), ((1, 2), -1)):
        swapped[..., i, j] += sign * delta
        swapped[..., j, i] += sign * delta
    return swapped


def test_mean_readout_sees_only_node_strengths_and_channel_flatten_sees_pairs():
    """Without GNN layers the mean readout's token is a function of the row sums of coh (the
    information bottleneck the channel_flatten_per_band readout removes): a change of coupled
    pairs that keeps every node strength leaves it unchanged, while the flattened token moves."""
    coh, wpli, _, _ = connectome_batch()
    swapped = pair_swap(coh)
    assert torch.allclose(swapped.sum(-1), coh.sum(-1), atol=1e-6) and not torch.equal(swapped, coh)
    tokens = {}
    for readout in ("mean", "channel_flatten_per_band"):
        torch.manual_seed(0)
        tokenizer = XAIguiFormer(
            small_config(readout=readout, n_gnn_layers=0, channel_embedding=False)
        ).transformer.tokenizer.eval()
        tokens[readout] = (tokenizer(coh, wpli), tokenizer(swapped, wpli))
    torch.testing.assert_close(tokens["mean"][0], tokens["mean"][1], rtol=1e-5, atol=1e-6)
    flattened = tokens["channel_flatten_per_band"]
    assert (flattened[0] - flattened[1]).abs().max() > 1e-3


def test_per_band_readout_is_one_linear_per_band_starting_from_shared_weights():
    torch.manual_seed(4)
    config = small_config(readout="channel_flatten_per_band", n_gnn_layers=0)
    tokenizer = XAIguiFormer(config).transformer.tokenizer.eval()
    readout = tokenizer.output_embedding
    n_bands, n, d = len(MODEL_BANDS), len(MODEL_CHANNELS), config.d_model
    assert readout.weight.shape == (n_bands, d, n * d) and readout.bias.shape == (n_bands, d)
    assert all(torch.equal(readout.weight[0], w) for w in readout.weight)  # shared at start
    with torch.no_grad():
        readout.weight.add_(0.1 * torch.randn_like(readout.weight))
        readout.bias.add_(0.1 * torch.randn_like(readout.bias))
    x = torch.randn(3, n_bands, n * d)
    expected = torch.stack(
        [F.linear(x[:, f], readout.weight[f], readout.bias[f]) for f in range(n_bands)], dim=1
    )
    torch.testing.assert_close(readout(x), expected, rtol=1e-5, atol=1e-6)
    # the same connectome in two bands gives two different tokens only with per-band weights
    coh, wpli, _, _ = connectome_batch()
    coh, wpli = coh[:, :1].expand_as(coh), wpli[:, :1].expand_as(wpli)
    tokens = tokenizer(coh, wpli)
    assert (tokens[:, 0] - tokens[:, 1]).abs().max() > 1e-3
    torch.manual_seed(4)
    shared = XAIguiFormer(config).transformer.tokenizer.eval()  # the weights as initialised
    torch.testing.assert_close(shared(coh, wpli)[:, 0], shared(coh, wpli)[:, 1])
    with pytest.raises(UsageError, match="needs n_bands"):
        ConnectomeTokenizer(
            n_channels=len(MODEL_CHANNELS),
            dim=8,
            n_layers=0,
            norm="rms",
            edges="undirected",
            dropout=0.0,
            readout="channel_flatten_per_band",
        )


def test_wpli_reaches_the_tokens_through_node_features_only_with_coherence_wpli():
    """Without GNN layers wPLI has no edge to travel on: with node_features "coherence" the
    tokens ignore it, with "coherence_wpli" (default) they move with it."""
    coh, wpli, _, _ = connectome_batch()
    other_wpli = wpli.flip(0)
    assert not torch.equal(other_wpli, wpli)
    for node_features, moves in (("coherence", False), ("coherence_wpli", True)):
        torch.manual_seed(0)
        tokenizer = XAIguiFormer(
            small_config(node_features=node_features, n_gnn_layers=0)
        ).transformer.tokenizer.eval()
        change = (tokenizer(coh, wpli) - tokenizer(coh, other_wpli)).abs().max()
        assert (change > 1e-3) if moves else (change == 0), (node_features, change)
    assert tokenizer.node_embedding.in_features == 2 * len(MODEL_CHANNELS)


def test_channel_identity_shapes_parameters_and_round_trip():
    torch.manual_seed(3)
    config = small_config(readout="channel_flatten_per_band", channel_embedding=True)
    model = XAIguiFormer(config)
    n, d = len(MODEL_CHANNELS), config.d_model
    assert model.transformer.tokenizer.channel_embedding.shape == (n, d)
    assert model.transformer.tokenizer.output_embedding.weight.shape == (len(MODEL_BANDS), d, n * d)
    assert (
        XAIguiFormer(small_config("paper")).transformer.tokenizer.channel_embedding is None
    )  # reference
    coh, wpli, age, sex = connectome_batch()
    assert model.transformer.tokenizer(coh, wpli).shape == (3, len(MODEL_BANDS), d)
    restored = XAIguiFormer(ModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))))
    restored.load_state_dict(model.state_dict())
    assert torch.equal(model(coh, wpli, age, sex)[1], restored(coh, wpli, age, sex)[1])
    # the channel embedding is part of the computation: zeroing it changes the tokens
    before = model.transformer.tokenizer(coh, wpli)
    with torch.no_grad():
        model.transformer.tokenizer.channel_embedding.zero_()
    assert (model.transformer.tokenizer(coh, wpli) - before).abs().max() > 1e-4


def test_paper_parameter_count_matches_reference():
    """Reference section 4.2: transformer + head = 3,205,251 for 3 classes; GNN ~285k (26 channels)."""
    bands = [f"b{i}" for i in range(9)]
    config = ModelConfig.preset(
        "paper", n_channels=26, band_names=bands, band_edges_hz=[(1, 2)] * 9, n_classes=3
    )
    description = XAIguiFormer(config).describe()
    assert description["age_mean"] is None  # unknown until the trainer sets it
    json.dumps(description, allow_nan=False)
    counts = description["parameters"]
    assert counts["transformer_layers"] + counts["head"] == 3_205_251
    assert counts["tokenizer"] == pytest.approx(285_000, rel=0.01)


def test_unknown_demographics_follow_the_documented_rule():
    torch.manual_seed(7)
    model = XAIguiFormer(small_config("paper"))
    coh, wpli, _, _ = connectome_batch(batch=2)
    unknown = model(coh, wpli, torch.tensor([float("nan")] * 2), torch.tensor([float("nan")] * 2))[
        1
    ]
    neutral = model(coh, wpli, torch.ones(2), torch.zeros(2))[1]
    torch.testing.assert_close(unknown, neutral)
    model.set_demographic_stats(age_mean=52.0, age_std=None)
    unknown = model(coh, wpli, torch.tensor([float("nan")] * 2), torch.zeros(2))[1]
    torch.testing.assert_close(unknown, model(coh, wpli, torch.full((2,), 52.0), torch.zeros(2))[1])


def test_demographics_change_the_default_prediction():
    torch.manual_seed(8)
    model = perturb(XAIguiFormer(small_config("default")))
    model.set_demographic_stats(40.0, 15.0)
    coh, wpli, _, _ = connectome_batch(batch=2)
    young = model(coh, wpli, torch.full((2,), 20.0), torch.zeros(2))[1]
    old = model(coh, wpli, torch.full((2,), 80.0), torch.zeros(2))[1]
    assert not torch.allclose(young, old, atol=1e-7)


def test_no_grad_forward_gives_the_same_logits_detached():
    torch.manual_seed(9)
    model = XAIguiFormer(small_config("paper"))
    coh, wpli, age, sex = connectome_batch()
    with_grad = model(coh, wpli, age, sex)
    with torch.no_grad():
        without_grad = model.forward_with_details(coh, wpli, age, sex)
    assert not without_grad.logits_refined.requires_grad
    assert not any(e.requires_grad for e in without_grad.explanations)
    assert_float32_close(without_grad.logits_refined, with_grad[1])


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"norm": "layer"}, "invalid value 'layer' for norm; allowed values are 'timm_rms', 'rms'"),
        (
            {"guidance": "rms_token"},
            "invalid value 'rms_token' for guidance; allowed values are 'paper', 'band_share'",
        ),
        (
            {"frequency_encoding": "rope_band_index"},
            "for frequency_encoding; allowed values are 'drofe_paper', 'drofe_default', 'none'",
        ),
        ({"d_model": 30}, "head dimension"),
        ({"frequency_encoding": "drofe_paper", "d_model": 24, "n_heads": 4}, "divisible by 4"),
        ({"n_classes": 1}, "n_classes"),
        (
            {"readout": "max"},
            "invalid value 'max' for readout; allowed values are 'mean', "
            "'channel_flatten_per_band'",
        ),
        ({"channel_embedding": "yes"}, "for channel_embedding; must be true or false"),
        (
            {"node_features": "psd"},
            "invalid value 'psd' for node_features; allowed values are "
            "'coherence', 'coherence_wpli'",
        ),
    ],
)
def test_invalid_config_names_the_field(fields, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        small_config(**fields)


def test_unknown_preset_and_fields_are_refused():
    with pytest.raises(UsageError, match="preset"):
        ModelConfig.preset(
            "fast", n_channels=3, band_names=["a"], band_edges_hz=[(1, 2)], n_classes=2
        )
    with pytest.raises(UsageError, match="unknown model config fields \\['depth'\\]"):
        ModelConfig.from_dict({**small_config().to_dict(), "depth": 3})


def old_style_config(config: ModelConfig, **fields) -> dict:
    """``config`` as an earlier version stored it: with its retired fields, without the
    interactions (which earlier versions did not have)."""
    return {
        **{k: v for k, v in config.to_dict().items() if k != "interactions"},
        "explainer": "deeplift",
        "explanation_impl": "one_pass",
        "attention_impl": "fused",
        **fields,
    }


def test_a_config_stored_by_an_earlier_version_loads_and_predicts_the_same():
    torch.manual_seed(12)
    model = perturb(XAIguiFormer(small_config())).eval()
    coh, wpli, age, sex = connectome_batch()
    for retired in ({}, {"explanation_impl": "captum"}, {"attention_impl": "explicit"}):
        stored = json.loads(json.dumps(old_style_config(model.config, **retired)))
        restored = XAIguiFormer(ModelConfig.from_dict(stored)).eval()
        assert restored.config == model.config
        restored.load_state_dict(model.state_dict())
        assert torch.equal(model(coh, wpli, age, sex)[1], restored(coh, wpli, age, sex)[1])


@pytest.mark.parametrize(
    "fields",
    [
        {"guidance": "rms_sample"},
        {"readout": "channel_flatten"},
        {"frequency_encoding": "rope_band_index"},
        {"explainer": "integrated_gradients"},
    ],
)
def test_a_config_of_a_retired_experimental_variant_is_refused_naming_the_field(fields):
    ((name, value),) = fields.items()
    with pytest.raises(
        UsageError, match=f"model config {name}='{value}' was made by an experimental variant"
    ):
        ModelConfig.from_dict(old_style_config(small_config(), **fields))


def test_wrong_input_shapes_are_clear_errors():
    model = XAIguiFormer(small_config())
    coh, wpli, age, sex = connectome_batch()
    with pytest.raises(InputDataError, match="coh has shape \\(3, 5, 5, 5\\)"):
        model(coh[:, :, :5, :5], wpli, age, sex)
    with pytest.raises(InputDataError, match="age has shape"):
        model(coh, wpli, age[:2], sex)


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("preset", ["paper", "default"])
def test_cuda_forward_backward_under_autocast(preset):
    torch.manual_seed(10)
    model = XAIguiFormer(small_config(preset)).cuda()
    coh, wpli, age, sex = connectome_batch(device="cuda")
    reference = model(coh, wpli, age, sex)[1].float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        coarse, refined = model(coh, wpli, age, sex)
        loss = F.cross_entropy(
            coarse.float(), torch.tensor([0, 1, 2], device="cuda")
        ) + F.cross_entropy(refined.float(), torch.tensor([0, 1, 2], device="cuda"))
    loss.backward()
    assert refined.device.type == "cuda"
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    np.testing.assert_allclose(refined.float().detach().cpu(), reference.detach().cpu(), atol=0.1)
