"""A ``train`` run and its judgement: the cross-validated fits of :mod:`~eegformer_cli.training`
run fold by fold, summarised and judged, in one run folder (above ``training``, whose fold
runner the run and the permutation test call).

- :mod:`~eegformer_cli.experiment.run`         folds here or on workers, summaries, final
                                              model, resume, ``--fold`` jobs and ``--merge``
- :mod:`~eegformer_cli.experiment.run_folder`  the run folder: every file read and written there
- :mod:`~eegformer_cli.experiment.audit`       shortcut audit: each nuisance variable alone vs
                                              the label
- :mod:`~eegformer_cli.experiment.null_labels` label permutations under the null, their p-value
- :mod:`~eegformer_cli.experiment.permutation` ``--permutations``: the CV refit on permuted labels
- :mod:`~eegformer_cli.experiment.verdict`     what ``metrics.json`` says, in a few lines
"""
