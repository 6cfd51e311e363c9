"""Recordings -> connectome tokens, in modules that follow the data:

- :mod:`~eegformer_cli.preprocess.settings`: :class:`PreprocessSettings`, everything that
  decides a connectome's numbers (stored in every output folder and model file);
- :mod:`~eegformer_cli.preprocess.output`: the output folder's format, the manifest and the
  ``.npz`` file of one recording's tokens (:class:`Connectome`, :func:`load_connectome`), read
  and written there only (training and inference read through it);
- :mod:`~eegformer_cli.preprocess.recording`: one recording -> its connectome, from a file
  (:func:`process_recording`) or an ``mne.io.Raw`` in memory (:func:`process_raw`,
  :func:`preprocess_raw`);
- :mod:`~eegformer_cli.preprocess.run`: a whole input -> an output folder (the manifest,
  ``preprocess.json``): :func:`run_preprocess`, the ``eegformer preprocess`` command, with
  :mod:`~eegformer_cli.preprocess.inputs` (the input recordings, their ids, participants and
  headers, the run's channels and epoch length), :mod:`~eegformer_cli.preprocess.workers`
  (recordings spread over workers, each saving its connectome) and
  :mod:`~eegformer_cli.preprocess.earlier_runs` (resume, ids and manifest rows of earlier runs
  into the folder).

The names below are importable from this package, as they were when it was one module; each is
imported with its module on first use (PEP 562), so reading a connectome file does not import
MNE.
"""

from __future__ import annotations

import importlib

_MODULES = {
    "PRESETS": "settings",
    "PreprocessSettings": "settings",
    "Connectome": "output",
    "load_connectome": "output",
    "clean_segments": "recording",
    "process_recording": "recording",
    "process_raw": "recording",
    "preprocess_raw": "recording",
    "CONNECTOME_DIR": "output",
    "MANIFEST_NAME": "output",
    "SETTINGS_NAME": "output",
    "PreprocessSummary": "run",
    "recording_workers": "workers",
    "run_preprocess": "run",
}
__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))
