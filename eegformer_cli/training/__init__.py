"""Fitting XAIguiFormer on a ``preprocess`` output: config, data, splits, loop, model file, and
one fold of a run. Judging the fits is elsewhere: the scores below (:mod:`eegformer_cli.evaluation`),
the run and its judgement above (:mod:`eegformer_cli.experiment`).

Modules, in the order the data flows through them:

- :mod:`~eegformer_cli.training.config`     presets ``default`` / ``paper``, TOML, flag overrides
- :mod:`~eegformer_cli.training.dataset`    manifest + connectome files -> a lazy torch Dataset
- :mod:`~eegformer_cli.training.splits`     participant-wise CV / holdout / inner validation
- :mod:`~eegformer_cli.training.augment`    graph mixup / cutmix (USVT graphon) of the paper's code
- :mod:`~eegformer_cli.training.standardise` per-entry z-scores of coh / wPLI inside the model
- :mod:`~eegformer_cli.training.interaction_screen` the interactions a fit keeps, on its own
                                           training recordings
- :mod:`~eegformer_cli.training.fit`        one model: epoch loop, selection, evaluation
- :mod:`~eegformer_cli.training.run_plan`      a run's plan (data, splits, settings) and one fold
                                           (the model and both references)
- :mod:`~eegformer_cli.training.model_file` the self-describing model file ``model.pt``
- :mod:`~eegformer_cli.training.distributed` several processes under ``torchrun`` (DDP, gloo/nccl)
"""
