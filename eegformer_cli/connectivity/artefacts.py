"""Channel pairs whose connectivity artefacts can fake: eye movements and muscle.

Eye movements and blinks are large slow potentials picked up most at the frontopolar and
lateral frontal electrodes (Fp1, Fp2, F7, F8); their energy lies in delta and theta. Muscle
(frontalis, temporalis) adds broadband activity above about 20 Hz at frontal and temporal
electrodes: high beta and gamma. A shared artefact raises coherence (and can raise wPLI)
between the electrodes it reaches, so an attribution to such a pair in such a band may
reflect the artefact rather than the brain. Nothing is removed: the pairs are marked, and the
reader decides (ICA with ``preprocess --ica`` removes much of both).

The rule, per kind (:data:`RULES`): a band is affected when any of its frequency ranges (a
ratio token has two) reaches into the kind's range (below :data:`EYE_BELOW_HZ`, above
:data:`MUSCLE_ABOVE_HZ`), and a pair is affected when either of its channels is prone (one
contaminated end is enough to change a pair's coherence). :func:`caution_rules` instantiates
the rule for a model's bands and channels as plain lists (stored in ``explain``'s
``class_summary.json``); :func:`pair_caution` and :func:`caution_masks` apply it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Bands reaching below this frequency (Hz) are exposed to eye movements: delta, theta.
EYE_BELOW_HZ = 8.0
#: Bands reaching above this frequency (Hz) are exposed to muscle: high beta, gamma.
MUSCLE_ABOVE_HZ = 21.0
EYE = "eye movements"
MUSCLE = "muscle"


def _eye_channel(name: str) -> bool:
    """Frontopolar and lateral frontal electrodes (Fp1, Fp2, F7, F8 and, in 10-10 and 10-05
    montages, Fpz, AF*, F9, F10), closest to the eyes."""
    return name.startswith(("Fp", "AF")) or name in ("F7", "F8", "F9", "F10")


def _muscle_channel(name: str) -> bool:
    """Frontal (Fp*, AF*, F* except the fronto-central FC*) and temporal (FT*, T*, TP*, and
    P7, P8, P9, P10, the old T5 and T6) electrodes, over the frontalis and temporalis."""
    frontal = name.startswith(("Fp", "AF", "F")) and not name.startswith("FC")
    temporal = name.startswith(("FT", "T")) or name in ("P7", "P8", "P9", "P10")
    return frontal or temporal


#: kind -> (does a frequency range (f_low, f_high) in Hz reach it, is a channel prone).
RULES = {
    EYE: (lambda low, high: low < EYE_BELOW_HZ, _eye_channel),
    MUSCLE: (lambda low, high: high > MUSCLE_ABOVE_HZ, _muscle_channel),
}


def caution_rules(bands: Sequence, channels: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """The rule for these ``bands`` (:class:`~eegformer_cli.connectivity.bands.Band` or
    ``RatioBand``, in model order) and ``channels``: ``{kind: {"bands": [names],
    "channels": [names]}}`` for each kind of :data:`RULES` that concerns at least one band
    and one channel."""
    out = {}
    for kind, (reaches, prone) in RULES.items():
        affected = [band.name for band in bands if any(reaches(*r.edges_hz) for r in band.ranges)]
        exposed = [name for name in channels if prone(name)]
        if affected and exposed:
            out[kind] = {"bands": affected, "channels": exposed}
    return out


def pair_caution(rules: dict, band: str, channel_a: str, channel_b: str) -> str:
    """The kinds of artefact (``", "``-joined, e.g. ``"eye movements"``) that ``rules``
    (:func:`caution_rules`) say can fake the connectivity of this pair in this band; ``""``
    for none."""
    return ", ".join(
        kind
        for kind, rule in rules.items()
        if band in rule["bands"]
        and (channel_a in rule["channels"] or channel_b in rule["channels"])
    )


def caution_masks(rules: dict, bands: Sequence[str], channels: Sequence[str]) -> np.ndarray:
    """bool (T, C, C), symmetric: whether any kind of ``rules`` concerns band t and pair
    {i, j} (the diagonal included, as the rule gives it)."""
    mask = np.zeros((len(bands), len(channels), len(channels)), dtype=bool)
    for rule in rules.values():
        band_on = np.isin(list(bands), rule["bands"])
        channel_on = np.isin(list(channels), rule["channels"])
        pair_on = channel_on[:, None] | channel_on[None, :]
        mask |= band_on[:, None, None] & pair_on[None]
    return mask
