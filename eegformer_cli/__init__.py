"""eegformer: explainable EEG brain-disorder classification (XAIguiFormer) from the shell and
from Python.

The public Python API is the names in :data:`__all__` (docs/guide/python.md):

- :func:`load_model` -> :class:`TrainedModel` (``predict``, ``predict_proba``, ``explain`` on
  ``mne.io.Raw`` objects or paths; :class:`Explanations` is what ``explain`` returns);
- :func:`preprocess_raw` (an ``mne.io.Raw`` -> :class:`Connectome`, in memory),
  :class:`PreprocessSettings`, :func:`load_connectome`;
- :class:`XAIguiFormerClassifier`, a scikit-learn estimator, and :func:`read_preprocessed`
  (a ``preprocess`` folder -> its ``X``);
- :mod:`commands`: ``preprocess``, ``train``, ``predict``, ``explain``, ``report``, the
  functions the ``eegformer`` commands call, with their options as keyword arguments;
- :mod:`errors` and its exceptions (also importable from here), each the CLI's exit code.

Every submodule (``eegformer_cli.preprocess``, ``.training``, ``.model``, ...) is internal: its
names may change between versions; import from ``eegformer_cli`` itself. The names are
imported when first used (PEP 562), so ``import eegformer_cli`` loads neither torch nor MNE nor
scikit-learn.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: Public name -> the internal module that defines it.
_PUBLIC = {
    "load_model": "eegformer_cli.inference.trained_model",
    "TrainedModel": "eegformer_cli.inference.trained_model",
    "Explanations": "eegformer_cli.inference.explain_call",
    "preprocess_raw": "eegformer_cli.preprocess.recording",
    "PreprocessSettings": "eegformer_cli.preprocess.settings",
    "Connectome": "eegformer_cli.preprocess.output",
    "load_connectome": "eegformer_cli.preprocess.output",
    "XAIguiFormerClassifier": "eegformer_cli.estimator",
    "read_preprocessed": "eegformer_cli.estimator",
    "EegformerError": "eegformer_cli.errors",
    "UsageError": "eegformer_cli.errors",
    "InputDataError": "eegformer_cli.errors",
    "RecordingError": "eegformer_cli.errors",
    "ModelFileError": "eegformer_cli.errors",
    "OutputError": "eegformer_cli.errors",
    "PartialFailure": "eegformer_cli.errors",
    "EegformerWarning": "eegformer_cli.errors",
}
#: Public modules (imported when first used, like the names).
_PUBLIC_MODULES = ("commands", "errors")

__all__ = ["__version__", *_PUBLIC, *_PUBLIC_MODULES]


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name in _PUBLIC_MODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
