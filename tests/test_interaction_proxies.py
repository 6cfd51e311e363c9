"""The interaction screen's places go to distinct effects: candidates whose products stand for
one effect (its proxies) are grouped, the group's best kept and the others recorded beside it,
in the fold record, the model file and ``explain``'s interaction table."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from eegformer_cli.explain import export
from eegformer_cli.explain import interactions as table
from eegformer_cli.model.interactions import AGE, Entry, Interaction, Proxy
from eegformer_cli.training import interaction_screen as screen
from eegformer_cli.training.config import TrainConfig


def _entries(n: int) -> list[Entry]:
    return [Entry("coh", "theta", (f"E{k}", f"E{k + 1}")) for k in range(n)]


def two_effects(n: int = 400, n_noise: int = 30, seed: int = 0):
    """Features (n, 6 + n_noise) whose label changes the correlation of entries 0 and 1
    (strongly) and of entries 2 and 3 (less): two distinct effects. Entries 4 and 5 are
    entry 0 seen again with a little noise (what a neighbouring channel pair of a planted one
    carries), so (4, 1) and (5, 1) are proxies of the first effect."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    x = rng.standard_normal((n, 6 + n_noise))
    shared, other = rng.standard_normal(n), rng.standard_normal(n)
    x[:, 0] += 1.5 * labels * shared
    x[:, 1] += 1.5 * labels * shared
    x[:, 2] += 0.8 * labels * other
    x[:, 3] += 0.8 * labels * other
    x[:, 4] = x[:, 0] + 0.2 * rng.standard_normal(n)
    x[:, 5] = x[:, 0] + 0.2 * rng.standard_normal(n)
    return x, labels


def _screen(features, labels, proxy_correlation, max_pairs=3):
    return screen.screen_interactions(
        features,
        labels,
        np.arange(len(labels)).astype(str),
        None,
        _entries(features.shape[1]),
        max_pairs=max_pairs,
        n_permutations=10,
        null_quantile=1.0,
        seed=0,
        proxy_correlation=proxy_correlation,
    )


def test_grouping_puts_correlated_products_together_and_caps_the_groups():
    rng = np.random.default_rng(2)
    base, other, third = rng.standard_normal((3, 200))
    products = np.column_stack(
        [base, base + 0.1 * rng.standard_normal(200), other, -base, third, np.ones(200)]
    )
    groups = screen.group_proxies(products, max_groups=3, level=0.8)
    assert [first for first, _ in groups] == [0, 2, 4]
    members = dict(groups)
    assert [m for m, _ in members[0]] == [1, 3]  # a negative correlation is a proxy too
    assert members[0][0][1] > 0.99 and members[0][1][1] == pytest.approx(-1.0)
    # a constant product correlates with nothing; with three groups full it is left out
    assert all(m != 5 for _, group in groups for m, _ in group)
    assert [first for first, _ in screen.group_proxies(products, 1, 0.8)] == [0]


def test_the_places_go_to_distinct_effects_and_the_proxies_are_recorded():
    features, labels = two_effects()
    before = _screen(features, labels, None)
    after = _screen(features, labels, screen.PROXY_CORRELATION)
    names = {"first": {(0, 1), (1, 4), (1, 5)}, "second": {(2, 3)}}

    def pair(item) -> tuple[int, int]:
        return tuple(sorted(int(e.channels[0][1:]) for e in (item.a, item.b)))

    # without grouping the three places hold the first effect three times
    assert {pair(k) for k in before.kept} == names["first"]
    assert [pair(k) for k in after.kept] == [pair(before.kept[0]), (2, 3)]
    proxies = after.kept[0].proxies
    assert {pair(p) for p in proxies} == names["first"] - {pair(after.kept[0])}
    level = screen.PROXY_CORRELATION
    assert all(abs(p.correlation) >= level and p.score <= after.kept[0].score for p in proxies)
    assert after.proxy_correlation == level and before.proxy_correlation is None
    summary = after.summary()
    assert summary["kept"][0]["proxies"][0]["correlation"] == proxies[0].correlation


def test_without_grouping_the_screen_keeps_what_earlier_versions_kept():
    """``proxy_correlation`` None: the best ``max_pairs`` above the gate, nothing recorded
    as a proxy (the screen of earlier versions, which a run folder of theirs resumes with)."""
    features, labels = two_effects(seed=3)
    found = _screen(features, labels, None, max_pairs=2)
    assert len(found.kept) == 2 and all(k.proxies == () for k in found.kept)
    assert found.kept[0].score >= found.kept[1].score > found.pair_threshold
    stored = TrainConfig.preset_config("default").to_dict()
    assert stored.pop("interaction_proxies") is True
    assert TrainConfig.from_dict(stored).interaction_proxies is False


def test_an_interaction_keeps_its_proxies_through_its_dict_and_an_earlier_dict_has_none():
    a, b, c = _entries(3)
    kept = Interaction(a, b, 0.9, 0.5, (Proxy(c, b, 0.8, -0.7), Proxy(a, AGE, 0.7, 0.65)))
    assert Interaction.from_dict(kept.to_dict()) == kept
    earlier = kept.to_dict()
    del earlier["proxies"]
    assert Interaction.from_dict(earlier) == Interaction(a, b, 0.9, 0.5)
    assert kept.proxies[1].label() == "coh theta E0-E1 x age"


class _Model:
    """What ``explain.interactions.describe`` reads of a model: its config's interactions."""

    def __init__(self, kept: list[Interaction]):
        self.config = type("Config", (), {"interactions": [k.to_dict() for k in kept]})()


def test_the_interaction_table_marks_proxies_across_fold_models():
    a, b, c, d = _entries(4)
    first = Interaction(a, b, 0.9, 0.5, (Proxy(c, b, 0.8, 0.9),))
    seen_as_proxy = Interaction(c, b, 0.85, 0.5)  # another fold model kept the proxy
    other = Interaction(d, AGE, 0.7, 0.4)
    one = table.describe(_Model([first, other]), np.array([0.5, -0.1]))
    two = table.describe(_Model([seen_as_proxy]), np.array([0.3]))
    assert one[0]["proxies"] == [
        {"interaction": seen_as_proxy.label(), "class_difference": 0.8, "correlation": 0.9}
    ]
    assert [row["group"] for row in one] == [first.label(), other.label()]
    rows = {row["interaction"]: row for row in table.merged([one, two])}
    assert rows[seen_as_proxy.label()]["group"] == first.label()  # the stronger row heads it
    assert rows[first.label()]["group"] == first.label()
    assert rows[other.label()]["group"] == other.label()
    assert table.proxies_text(rows[first.label()]) == (
        f"{seen_as_proxy.label()} (class difference 0.80, r 0.90)"
    )
    assert table.proxies_text(rows[other.label()]) == ""
    explained = SimpleNamespace(recording_id="r1", target="patient", interactions=one)
    columns, rows = export.table_rows("interactions", [explained], [], [])
    first_row = dict(zip(columns, next(iter(rows))))
    assert first_row["group"] == first.label()
    assert first_row["proxies"] == table.proxies_text(one[0])
