"""A trained model on new recordings: the Python API's model object and what it does.

- :mod:`.trained_model`: :func:`load_model` -> :class:`TrainedModel` (``predict``,
  ``predict_proba``, ``explain``);
- :mod:`.inputs`: a model file's inputs (raw recordings or ``preprocess`` folders), each
  ready for the model or with its reason; :mod:`.predictions`: their predictions;
- :mod:`.explain_call`: one ``explain`` call (what it returns, :class:`Explanations`);
- :mod:`.outcomes`: what a call reports about its recordings.
"""
