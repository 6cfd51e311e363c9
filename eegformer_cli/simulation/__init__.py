"""Synthetic EEG studies for the demo, the tests and the benchmarks (``eegformer simulate``):
:mod:`.simulate` (the recordings) and :mod:`.scenarios` (planted effects with their ground
truth); no product code needs them."""
