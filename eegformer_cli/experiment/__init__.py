"""A ``train`` run and its judgement: the cross-validated fits of :mod:`~eegformer_cli.training`
run fold by fold, summarised and judged, in one run folder (above ``training``, whose fold
runner the run and the permutation test call).

- :mod:`~eegformer_cli.experiment.run`         a run from its checks to its judgement:
                                              resume, ``--fold`` jobs and ``--merge``
- :mod:`~eegformer_cli.experiment.fold_training` the folds and the final model, here or on
                                              workers, each saved as it finishes
- :mod:`~eegformer_cli.experiment.worker_progress` the workers' epochs on the progress bar
- :mod:`~eegformer_cli.experiment.summaries`   ``history.jsonl``, ``oof_predictions.tsv``,
                                              ``metrics.json`` from the fold results
- :mod:`~eegformer_cli.experiment.run_folder`  the run folder: every file read and written there
- :mod:`~eegformer_cli.experiment.audit`       shortcut audit: each nuisance variable alone vs
                                              the label
- :mod:`~eegformer_cli.experiment.null_labels` label permutations under the null, their p-value
- :mod:`~eegformer_cli.experiment.permutation` ``--permutations``: the CV refit on permuted labels
- :mod:`~eegformer_cli.experiment.verdict`     what ``metrics.json`` says, in a few lines
"""
