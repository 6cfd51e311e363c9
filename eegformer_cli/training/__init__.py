"""Training XAIguiFormer on a ``preprocess`` output: config, data, splits, loop, model file.

Modules, in the order the data flows through them:

- :mod:`~eegformer_cli.training.config`     presets ``default`` / ``paper``, TOML, flag overrides
- :mod:`~eegformer_cli.training.dataset`    manifest + connectome files -> a lazy torch Dataset
- :mod:`~eegformer_cli.training.splits`     participant-wise CV / holdout / inner validation
- :mod:`~eegformer_cli.training.augment`    graph mixup / cutmix (USVT graphon) of the reference
- :mod:`~eegformer_cli.training.standardise` per-entry z-scores of coh / wPLI inside the model
- :mod:`~eegformer_cli.training.metrics`    balanced accuracy, AUROC, AUC-PR, confusion matrix
- :mod:`~eegformer_cli.training.reference`  logistic regression on the same tokens and folds
- :mod:`~eegformer_cli.training.fit`        one model: epoch loop, selection, evaluation
- :mod:`~eegformer_cli.training.folds`      a run's plan (data, splits, settings) and one fold
- :mod:`~eegformer_cli.training.run`        folds here or on workers, summaries, final model,
                                           resume, ``--fold`` jobs and ``--merge``
- :mod:`~eegformer_cli.training.run_folder` the run folder: every file read and written there
- :mod:`~eegformer_cli.training.run_metrics` ``metrics.json`` as typed dataclasses
- :mod:`~eegformer_cli.training.model_file` the self-describing model file ``model.pt``
- :mod:`~eegformer_cli.training.distributed` several processes under ``torchrun`` (DDP, gloo/nccl)
- :mod:`~eegformer_cli.training.audit`      shortcut audit: each nuisance variable alone vs the label
- :mod:`~eegformer_cli.training.null_labels` label permutations under the null, their p-value
- :mod:`~eegformer_cli.training.permutation` ``--permutations``: the CV refit on permuted labels
"""
