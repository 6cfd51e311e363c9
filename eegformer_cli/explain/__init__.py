"""Explanations of a trained model (``eegformer explain``) and the HTML run report
(``eegformer report``).

- :mod:`.attributions`: band importance, attention maps and channel-pair attributions of one
  recording, and class means (pure computations).
- :mod:`.export`: the CSV / NPZ / JSON files ``explain`` writes; :mod:`.class_summary` its
  class summary (written and read back).
- :mod:`.report`: the self-contained HTML report of a run folder (its sections and pieces in
  the ``report_*``, ``*_report`` and :mod:`.explanation_notes` modules).
"""
