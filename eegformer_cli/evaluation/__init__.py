"""Judging predictions: the scores and the reference models a run is judged by, on arrays of
labels and probabilities; no network, no run folder (below :mod:`~eegformer_cli.training`,
which scores every fit with them).

- :mod:`~eegformer_cli.evaluation.metrics`         balanced accuracy, AUROC, AUC-PR, confusion
                                                  matrix; their mean over folds, comparisons
- :mod:`~eegformer_cli.evaluation.run_metrics`     ``metrics.json`` as typed dataclasses
- :mod:`~eegformer_cli.evaluation.reference`       the first reference: logistic regression on
                                                  the same tokens and folds
- :mod:`~eegformer_cli.evaluation.tangent_space`   the second reference: band covariances in
                                                  the tangent space, logistic regression
- :mod:`~eegformer_cli.evaluation.calibration`     Brier, ECE, reliability; temperature / Platt
                                                  recalibration
- :mod:`~eegformer_cli.evaluation.conformal`       split-conformal prediction sets (MAPIE)
- :mod:`~eegformer_cli.evaluation.oof_calibration` a run's out-of-fold rows -> both
- :mod:`~eegformer_cli.evaluation.sample_size`     what a run's N resolves: interval widths,
                                                  power, participants needed, split seeds
"""
