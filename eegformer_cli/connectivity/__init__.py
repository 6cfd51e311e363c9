"""Band definitions (:mod:`.bands`) and connectivity tokens (:mod:`.tokens`)."""
