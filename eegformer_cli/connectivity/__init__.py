"""Band definitions (:mod:`.bands`), connectivity tokens (:mod:`.tokens`) and the channel pairs
artefacts can fake (:mod:`.artefacts`)."""
