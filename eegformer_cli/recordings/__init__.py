"""From files on disk to MNE recordings with canonical channels and known participants.

- :mod:`.reading`: find recording files (files, folders, BIDS roots) and read them with MNE,
  turning every failure into a one-line :class:`~eegformer_cli.errors.RecordingError`.
- :mod:`.bids`: a BIDS root's recordings through mne-bids (``--task``/``--session``/``--run``),
  a recording's entities, and its ``channels.tsv`` (channel types, bad channels).
- :mod:`.channels`: channel names to canonical 10-20 names, the run's channel set, montage and
  interpolation of a few missing channels.
- :mod:`.metadata`: participants/recordings tables, matching a recording to its participant.
- :mod:`.demographics`: age and sex, every reading of them (tables, manifests, flags, the
  scikit-learn table) as the model's inputs.
- :mod:`.cleaning`: resampling, filtering, epochs, ICA.
"""
