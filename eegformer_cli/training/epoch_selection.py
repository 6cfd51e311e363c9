"""Which epoch a fit keeps: the selection rule and its state across the epoch loop
(``fit.py``).

:func:`selection_improved` is the rule (the paper's: the best validation metric in the second
half of training, ties to the later epoch); :class:`EpochSelection` holds the selected epoch's
weights and the patience count.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from eegformer_cli.training.config import TrainConfig


def selection_improved(config: TrainConfig, epoch: int, metric: float, best: float | None) -> bool:
    """Whether epoch ``epoch`` (0-based) becomes the selected one: only epochs >= epochs / 2
    (the paper's second half), metric >= best (ties -> later epoch).

    The last epoch is always eligible (with ``epochs`` 1 the second half would be empty), and
    the first eligible epoch is always selected, so a run of any length selects an epoch.
    """
    eligible = epoch >= min(config.epochs / 2, config.epochs - 1)
    return eligible and (best is None or metric >= best)


@dataclass
class EpochSelection:
    """The selected epoch so far (:func:`selection_improved`): its validation metric, weights
    and 1-based number, and how many epochs since."""

    best: float | None = None
    state: dict | None = None
    epoch: int = 0
    since_best: int = 0
    val_loss: np.ndarray | None = None  # the selected epoch's calibrated validation losses

    def update(
        self,
        config: TrainConfig,
        epoch: int,
        metric: float,
        model: torch.nn.Module,
        val_loss: np.ndarray | None = None,
    ) -> None:
        """Take epoch ``epoch`` (0-based) when it improves the selection, else count it."""
        if selection_improved(config, epoch, metric, self.best):
            self.best = metric
            self.state = copy.deepcopy(model.state_dict())
            self.epoch, self.since_best = epoch + 1, 0
            self.val_loss = val_loss
        else:
            self.since_best += 1

    def patience_ran_out(self, config: TrainConfig) -> bool:
        """Whether ``config.patience`` epochs (0: no early stop) passed since the selected one
        (never before an epoch is selected)."""
        return (
            bool(config.patience) and self.best is not None and self.since_best >= config.patience
        )
