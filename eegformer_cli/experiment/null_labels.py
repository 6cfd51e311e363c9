"""Labels under the null hypothesis: how a permutation test relabels a dataset, and its
p-value. Used by the permutation test of ``train --permutations`` (:mod:`permutation`) and by
the shortcut audit (:mod:`audit`) where fold-wise figures leave no interval.

How labels are permuted (:func:`permuted_labels`):

- when every participant has one label (a diagnosis): the participants' labels are shuffled
  between participants, each participant's recordings keeping one label; permutations that
  leave a fold's training part without some class are redrawn (the observed labels have every
  class in every training part, so the null is conditioned on the same event);
- when a participant's recordings carry different labels (a condition per recording, e.g.
  rest / mental arithmetic): the labels are shuffled among each participant's recordings.

Each permutation's labels come from its own seeded stream (seed, index), so a permutation is
the same whatever the number of permutations, their order or the process computing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from eegformer_cli.errors import InputDataError

if TYPE_CHECKING:  # the report imports the audit, and so this module, without torch
    from eegformer_cli.training.dataset import TrainingData

#: Mixed into every permutation's seed, apart from the run's other uses of its seed.
SEED_TAG = 7_220
#: Draws of one permutation before giving up on a training part that holds every class.
MAX_DRAWS = 1000
#: Null values within this of the observed value count as reaching it (float rounding).
TIE_TOLERANCE = 1e-12


def labels_vary_within_participants(data: TrainingData) -> bool:
    """Whether some participant's recordings carry different labels."""
    seen: dict[str, str] = {}
    return any(seen.setdefault(r.participant_id, r.label) != r.label for r in data.recordings)


def permuted_labels(data: TrainingData, folds, seed: int, index: int) -> list[str]:
    """Permutation ``index``'s label per recording of ``data`` (module docstring).

    Raises InputDataError when no draw gives every fold's training part every class.
    """
    rng = np.random.default_rng([SEED_TAG, seed, index])
    labels = np.array([r.label for r in data.recordings], dtype=object)
    participants = np.array([r.participant_id for r in data.recordings])
    order = sorted(set(participants))
    within = labels_vary_within_participants(data)
    for _ in range(MAX_DRAWS):
        shuffled = labels.copy()
        if within:
            for participant in order:
                where = np.flatnonzero(participants == participant)
                shuffled[where] = labels[rng.permutation(where)]
        else:
            first = {p: labels[participants == p][0] for p in order}
            drawn = dict(zip(order, rng.permutation([first[p] for p in order])))
            shuffled = np.array([drawn[p] for p in participants], dtype=object)
        if all(
            len(set(shuffled[np.isin(participants, fold.train + fold.val)]))
            == len(data.label_names)
            for fold in folds
        ):
            return shuffled.tolist()
    raise InputDataError(
        f"no permutation of the labels in {MAX_DRAWS} draws keeps every class "
        "in every fold's training part",
        hint="use fewer --cv folds",
    )


def describe_scheme(data: TrainingData) -> str:
    """How :func:`permuted_labels` permutes ``data``'s labels, in words."""
    if labels_vary_within_participants(data):
        return "labels shuffled among each participant's recordings"
    return "participant labels shuffled between participants"


def p_value(null, observed: float) -> float:
    """(1 + #{null >= observed}) / (1 + len(null)); values within :data:`TIE_TOLERANCE` below
    ``observed`` count as reaching it."""
    null = np.asarray(null, dtype=float)
    return float((np.sum(null >= observed - TIE_TOLERANCE) + 1) / (len(null) + 1))
