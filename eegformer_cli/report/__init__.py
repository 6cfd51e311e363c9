"""The HTML report of a run folder (``eegformer report``): :mod:`.build` assembles the
sections; :mod:`.page`, :mod:`.figures` and :mod:`.tables` are its pieces; :mod:`.verdict_box`
its first item; :mod:`.trust`, :mod:`.calibration`, :mod:`.interactions` and
:mod:`.explanations` (with :mod:`.explanation_notes`, its words and tables) its sections."""
