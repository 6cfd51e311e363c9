"""The interaction path: what the model does with the pairs the interaction screen kept.

The screen (``training/interaction_screen.py``) keeps, per fit, a few pairs of connectivity
entries whose correlation differs between the classes (a cross-band interaction) and a few
entries whose relation to age differs between the classes (an age-dependent effect). They
reach the model as a data-derived part of its config (:attr:`ModelConfig.interactions`, a list
of :meth:`Interaction.to_dict`), so ``predict``, ``explain`` and the Python API need no new
input: the model forms what it needs from the connectome and the age it is given.

:class:`InteractionToken` forms, per segment, each kept pair's product of the standardised
entries the model sees (an entry-age pair: the entry times the z-scored age, unknown age at 0,
the training mean), and embeds the products as one more token after the band tokens: the
transformer attends to it, the explanation that guides the refined pass covers it, and
``explain`` attributes each product beside the connectivity entries.

Why a product, and on the values: dRoFE rotates queries and keys by age, which reweights a
convex mix of the values and cannot flip the sign of an entry's contribution with age; an
entry scaled by age can (the multiplicative half of FiLM, Perez et al., AAAI 2018). On the
simulated age studies the product token did better than FiLM of the entry inside the band
tokens (``x' = (1 + gamma a) x + beta a``, identity at initialisation;
docs/benchmarks-history.md, "The interaction screens").

A pair of the within-recording screen (:attr:`Interaction.within`: two couplings that come
and go together) is, in a model with ``ModelConfig.within_per_recording``, read over *its own
recording's* segments (:meth:`InteractionToken.recording_products`). Each entry's rise in a
segment is its value above the recording's floor (a low quantile over its segments) in units
of its standard deviation over them; the segment's product is the two rises' product less
that of the recording's mean. Over a recording these average to the two entries' correlation,
what the screen selected the pair on; a segment where both couplings burst gets the largest
product whatever the participant's own coupling strength; and where the couplings burst in
half the segments the bursts carry the correlation, not the segments where both are quiet (a
product of deviations from the mean gives both alike). Standardised with the training
statistics instead, a weak participant's bursting segments sit below the training mean, so
where both couplings are off the product is larger than where both burst
(docs/benchmarks-history.md, "The dynamic scenario: within pairs read per recording").
With ``ModelConfig.within_measure_twins`` an entry is read with its *measure twin* (wPLI for
coherence, and back, of the same band and channel pair) where the screen found the twin
carrying the pair (a side of one of the pair's proxies): the entry's rise is the mean of the
two measures' rises. Coherence and wPLI are two noisy readings of one coupling, and the screen
keeps only the best of the four products of two couplings (the others are its proxies); read
together they carry the coupling with less noise (docs/benchmarks.md, "The dynamic scenario").

Sex has no path of its own: no study the screen was measured on plants a sex effect, and the
screen never pairs an entry with sex.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from eegformer_cli.errors import UsageError

#: Connectome measures, as the model's ``forward(coh, wpli, ...)`` takes them.
MEASURES = ("coh", "wpli")
#: Side ``b`` of an entry-age interaction.
AGE = "age"
#: The name of the token that carries the kept interactions (after the band tokens).
INTERACTION_TOKEN = "interactions"
#: Added to a within pair's entry variance over a recording's segments before its square root
#: (the entries are standardised: variance about 1 over the training segments).
WITHIN_VARIANCE_EPS = 1e-6
#: The quantile of a within pair's entry over its recording's segments taken as the entry's
#: floor, the level its rises are measured from (module docs).
WITHIN_FLOOR_QUANTILE = 0.1


@dataclass(frozen=True)
class Entry:
    """One connectivity entry: ``measure`` ("coh" | "wpli") of ``channels`` in ``band``."""

    measure: str
    band: str
    channels: tuple[str, str]

    def label(self) -> str:
        """``coh theta T7-P3``."""
        return f"{self.measure} {self.band} {self.channels[0]}-{self.channels[1]}"

    def to_list(self) -> list[str]:
        return [self.measure, self.band, *self.channels]

    @classmethod
    def from_list(cls, values: list[str]) -> Entry:
        measure, band, first, second = (str(v) for v in values)
        return cls(measure, band, (first, second))


def _side_to_json(side: Entry | str) -> list[str] | str:
    return side.to_list() if isinstance(side, Entry) else AGE


def _side_from_json(value) -> Entry | str:
    return AGE if value == AGE else Entry.from_list(value)


def pair_label(a: Entry, b: Entry | str) -> str:
    """``coh theta T7-P3 x wpli low_beta F7-P8`` or ``coh theta T7-P3 x age``."""
    return f"{a.label()} x {b.label() if isinstance(b, Entry) else AGE}"


@dataclass(frozen=True)
class Proxy:
    """A candidate the screen did not keep because its product stands in for a kept one's:
    entry ``a`` with entry ``b`` (or :data:`AGE`), its screen ``score``, and ``correlation``,
    the Pearson correlation over the fit's training recordings of its recording-level product
    with the kept interaction's (in [-1, 1]; its size at least the screen's grouping level)."""

    a: Entry
    b: Entry | str
    score: float
    correlation: float

    def label(self) -> str:
        return pair_label(self.a, self.b)

    def to_dict(self) -> dict:
        return {
            "a": self.a.to_list(),
            "b": _side_to_json(self.b),
            "score": float(self.score),
            "correlation": float(self.correlation),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Proxy:
        return cls(
            Entry.from_list(data["a"]),
            _side_from_json(data["b"]),
            float(data["score"]),
            float(data["correlation"]),
        )


@dataclass(frozen=True)
class Interaction:
    """A kept interaction: entry ``a`` with entry ``b``, or with age (``b`` = :data:`AGE`).

    ``score`` is its screen statistic (the largest difference of within-class correlations
    over the one-against-rest contrasts, in [0, 2]); ``threshold`` the gate it beat (the
    null's quantile of the largest score under label permutations). ``proxies``: the other
    candidates of its group, best score first (candidates above the gate whose products are
    strongly correlated with this one's: the same effect seen through other entries; the
    screen keeps the group's best only); empty when it has none or the screen did not group
    (model files of earlier versions). ``within``: kept by the within-recording screen (the
    two entries' segment-wise deviations from their recording's means co-vary differently in
    the classes: couplings that come and go together), which only the transformer path reads
    segment by segment; false: kept by the screen of recording means.
    """

    a: Entry
    b: Entry | str
    score: float
    threshold: float
    proxies: tuple[Proxy, ...] = ()
    within: bool = False

    @property
    def with_age(self) -> bool:
        return self.b == AGE

    def label(self) -> str:
        """``coh theta T7-P3 x wpli low_beta F7-P8`` or ``coh theta T7-P3 x age``."""
        return pair_label(self.a, self.b)

    def to_dict(self) -> dict:
        """JSON-ready: what :attr:`ModelConfig.interactions` stores."""
        return {
            "a": self.a.to_list(),
            "b": _side_to_json(self.b),
            "score": float(self.score),
            "threshold": float(self.threshold),
            "proxies": [proxy.to_dict() for proxy in self.proxies],
            # only where set: the pairs of the screen of means are stored as earlier versions
            **({"within": True} if self.within else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Interaction:
        """From :meth:`to_dict` of this or an earlier version (no ``proxies``: none; no
        ``within``: the screen of means')."""
        return cls(
            Entry.from_list(data["a"]),
            _side_from_json(data["b"]),
            float(data["score"]),
            float(data["threshold"]),
            tuple(Proxy.from_dict(item) for item in data.get("proxies", [])),
            bool(data.get("within", False)),
        )


def parse_interactions(
    stored: list[dict], band_names: list[str], channel_names: list[str] | None
) -> list[Interaction]:
    """:attr:`ModelConfig.interactions` as :class:`Interaction` objects, checked against the
    model's bands and channels (UsageError naming the first unknown measure, band or channel)."""
    interactions = []
    for item in stored:
        try:
            interaction = Interaction.from_dict(item)
        except (KeyError, TypeError, ValueError):
            raise UsageError(
                f"invalid interaction {item!r} in the model config",
                hint='each is {"a": [measure, band, channel, channel], "b": [...] or "age", '
                '"score": float, "threshold": float, "proxies": [...] (optional), "within": '
                "bool (optional)}",
            ) from None
        for entry in (interaction.a, interaction.b):
            if not isinstance(entry, Entry):  # the age side
                continue
            if entry.measure not in MEASURES or entry.band not in band_names:
                raise UsageError(
                    f"interaction entry {entry.label()!r}: the measure must be one of "
                    f"{list(MEASURES)} and the band one of {band_names}"
                )
            if channel_names is None or not set(entry.channels) <= set(channel_names):
                raise UsageError(
                    f"interaction entry {entry.label()!r} names channels the model does not "
                    f"have ({channel_names})"
                )
        interactions.append(interaction)
    return interactions


def _entry_index(entries: list[Entry], band_names: list[str], channel_names: list[str]) -> Tensor:
    """int64 (K, 4): (measure, band, i, j) index of each entry."""
    return torch.tensor(
        [
            (
                MEASURES.index(e.measure),
                band_names.index(e.band),
                channel_names.index(e.channels[0]),
                channel_names.index(e.channels[1]),
            )
            for e in entries
        ],
        dtype=torch.int64,
    ).reshape(-1, 4)


def entry_values(coh: Tensor, wpli: Tensor, index: Tensor) -> Tensor:
    """The entries ``index`` (K, 4) of (B, F, C, C) ``coh`` / ``wpli`` -> (B, K)."""
    measures = torch.stack((coh, wpli), dim=1)  # (B, 2, F, C, C)
    return measures[:, index[:, 0], index[:, 1], index[:, 2], index[:, 3]]


class InteractionToken(nn.Module):
    """The kept interactions' products per segment, embedded as one token.

    :meth:`products` (coh, wpli (B, F, C, C), the standardised connectivity the tokenizer
    sees; age_z (B,) z-scored age, unknown at 0) -> (B, K): entry a times entry b, or entry a
    times age, each segment on its own (what the static stage reads). :meth:`recording_products`
    -> (S, K) for the S segments of one whole recording: the same, except that with
    ``per_recording`` a within pair's two entries are first standardised over those segments
    (module docs); what the token embeds. :meth:`embed` (B, K) -> (B, d), a Linear(K -> d): the
    token. Kept apart so that ``explain`` can attribute to the products themselves.
    """

    index_a: Tensor
    index_b: Tensor
    twin_a: Tensor
    twin_b: Tensor
    with_age: Tensor
    per_recording: Tensor

    def __init__(
        self,
        interactions: list[Interaction],
        band_names: list[str],
        channel_names: list[str],
        dim: int,
        per_recording: bool = False,
        measure_twins: bool = False,
    ):
        super().__init__()
        side_a = [i.a for i in interactions]
        # an entry-age pair has no entry b: its own entry stands in, replaced by age below
        side_b = [i.b if isinstance(i.b, Entry) else i.a for i in interactions]
        self.register_buffer("index_a", _entry_index(side_a, band_names, channel_names))
        self.register_buffer("index_b", _entry_index(side_b, band_names, channel_names))
        # each side's twin read with it (itself where there is none: the mean of equal rises)
        twins = [
            measure_twins_of(i) if per_recording and measure_twins and i.within else (None, None)
            for i in interactions
        ]
        for name, side, k in (("twin_a", side_a, 0), ("twin_b", side_b, 1)):
            read = [twin[k] or entry for twin, entry in zip(twins, side)]
            index = _entry_index(read, band_names, channel_names)
            self.register_buffer(name, index, persistent=False)
        self.register_buffer(
            "with_age", torch.tensor([i.with_age for i in interactions]), persistent=False
        )
        self.register_buffer(
            "per_recording",
            torch.tensor([per_recording and i.within for i in interactions]),
            persistent=False,
        )
        self.embed = nn.Linear(len(interactions), dim)

    @property
    def reads_recordings(self) -> bool:
        """Whether a segment's token depends on its recording's other segments."""
        return bool(self.per_recording.any())

    def sides(self, coh: Tensor, wpli: Tensor, age_z: Tensor) -> tuple[Tensor, Tensor]:
        """(a, b), each (B, K): every pair's two factors, age_z in b for an entry-age pair."""
        a = entry_values(coh, wpli, self.index_a)
        b = entry_values(coh, wpli, self.index_b)
        return a, torch.where(self.with_age, age_z.to(a.dtype)[:, None], b)

    def products(self, coh: Tensor, wpli: Tensor, age_z: Tensor) -> Tensor:
        a, b = self.sides(coh, wpli, age_z)
        return a * b

    def recording_sides(self, coh: Tensor, wpli: Tensor, age_z: Tensor) -> tuple[Tensor, ...]:
        """(a, b, twin of a, twin of b), each (B, K): :meth:`sides` and the measure twins a
        within pair's sides are read with (module docs; a side's own values where it has
        none), what :meth:`recording_products` takes."""
        a, b = self.sides(coh, wpli, age_z)
        twin_b = entry_values(coh, wpli, self.twin_b)
        return a, b, entry_values(coh, wpli, self.twin_a), torch.where(self.with_age, b, twin_b)

    def recording_products(self, a: Tensor, b: Tensor, twin_a: Tensor, twin_b: Tensor) -> Tensor:
        """(S, K): the token's products from :meth:`recording_sides` of one whole recording's
        S segments; a within pair's (module docs): ``rise_a * rise_b - k_a * k_b``, where
        ``rise = (x - floor) / sd`` over the S segments (floor: their
        :data:`WITHIN_FLOOR_QUANTILE` quantile), the mean of an entry's and its twin's, and
        ``k`` is the mean's rise. These average to the covariance of the two sides' rises over
        the segments, the entries' correlation where neither has a twin (a recording of one
        segment, or a pair constant over it: 0)."""
        if not self.reads_recordings:
            return a * b
        rise_a, mean_a = _rise_with_twin(a, twin_a)
        rise_b, mean_b = _rise_with_twin(b, twin_b)
        within = rise_a * rise_b - mean_a * mean_b
        return torch.where(self.per_recording, within.to(a.dtype), a * b)


def measure_twins_of(interaction: Interaction) -> tuple[Entry | None, Entry | None]:
    """The measure twins (the other measure of the same band and channel pair) of an entry
    pair's two sides that the screen found carrying the pair too: a side's twin where one of
    the pair's proxies pairs it with the other side or that side's twin; None for a side
    without one (and for an entry-age pair)."""
    a, b = interaction.a, interaction.b
    if not isinstance(b, Entry):
        return None, None
    proxies = {frozenset((proxy.a, proxy.b)) for proxy in interaction.proxies}
    twin_a, twin_b = (
        Entry(MEASURES[1 - MEASURES.index(e.measure)], e.band, e.channels) for e in (a, b)
    )

    def found(side: Entry, partners: tuple[Entry, Entry]) -> bool:
        return any(frozenset((side, partner)) in proxies for partner in partners)

    return (
        twin_a if found(twin_a, (b, twin_b)) else None,
        twin_b if found(twin_b, (a, twin_a)) else None,
    )


def _rise_with_twin(x: Tensor, twin: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`_rise_over_segments` of ``x`` (S, K) and its ``twin`` (S, K), averaged: a column
    whose twin is itself keeps its own rise exactly."""
    rise, mean = _rise_over_segments(x)
    twin_rise, twin_mean = _rise_over_segments(twin)
    return (rise + twin_rise) / 2, (mean + twin_mean) / 2


def _rise_over_segments(x: Tensor) -> tuple[Tensor, Tensor]:
    """(S, K) -> (rise (S, K), its mean over the rows (1, K)), float64: each column minus its
    :data:`WITHIN_FLOOR_QUANTILE` quantile over the S rows, over its population standard
    deviation (:data:`WITHIN_VARIANCE_EPS` added to the variance)."""
    wide = x.double()
    mean = wide.mean(dim=0, keepdim=True)
    scale = torch.rsqrt((wide - mean).square().mean(dim=0, keepdim=True) + WITHIN_VARIANCE_EPS)
    floor = torch.quantile(wide, WITHIN_FLOOR_QUANTILE, dim=0, keepdim=True)
    return (wide - floor) * scale, (mean - floor) * scale
