"""Explanations of a trained model (``eegformer explain``).

- :mod:`.attributions`: band importance, attention maps and channel-pair attributions of one
  recording, and class means (pure computations).
- :mod:`.export`: the CSV / NPZ / JSON files ``explain`` writes; :mod:`.class_summary` its
  class summary (written and read back).

The HTML report of a run folder (``eegformer report``) is :mod:`eegformer_cli.report`.
"""
