"""The values a user chooses from, and the defaults they get, as plain Python values: presets,
``--device``, ``--precision``, ``--frequency-encoding``, ``--method``, ``--n-steps`` and the
default channel set.

Defined here once, without importing torch or any other package module, so that the CLI's
help (:mod:`eegformer_cli.option_docs`, ``cli/``) and the modules that check and use the values
(:mod:`eegformer_cli.model.devices`, the model, the attributions, the entry points' signatures) import
the same objects, and ``eegformer --help`` stays fast.
"""

from __future__ import annotations

#: The presets of ``preprocess``, ``train`` and the model (each has its own settings per name).
PRESETS = ("default", "paper")
DEFAULT_PRESET = "default"

#: ``--device`` choices: ``auto`` is cuda when available, else cpu (``devices.resolve_device``;
#: training stays on the cpu for a small transformer path: ``devices.resolve_train_device``).
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_DEVICE = "auto"
#: ``--precision`` choices: ``auto`` is float32 (``devices.resolve_precision`` says why).
PRECISIONS = ("auto", "float32", "bfloat16", "float16")
DEFAULT_PRECISION = "auto"

#: ``--frequency-encoding`` choices (``model/rotary.py`` describes each).
FREQUENCY_ENCODINGS = ("drofe_paper", "drofe_default", "none")
#: Each model preset's frequency encoding (``--frequency-encoding``'s default).
FREQUENCY_ENCODING_BY_PRESET = {"default": "drofe_default", "paper": "drofe_paper"}

#: captum methods of ``explain --method`` (``explain/attributions.py``).
CAPTUM_METHODS = ("integrated_gradients", "saliency", "input_x_gradient", "gradient_shap")
DEFAULT_METHOD = "integrated_gradients"
#: Default number of Integrated Gradients steps (and Gradient SHAP samples): where the
#: completeness gap |sum(attr) - (logit(x) - logit(baseline))| / |logit(x) - logit(baseline)|
#: is below 1 % for every measured recording, at a fraction of a second for a 60 s recording
#: (docs/benchmarks.md, "Completeness of the explanations").
DEFAULT_N_STEPS = 128

#: The 19 channels of the 10-20 system, new names, in the order used for every run by default
#: (``preprocess --channels``' default; the simulator writes them).
STANDARD_1020: tuple[str, ...] = (
    "Fp1",
    "Fp2",
    "F7",
    "F3",
    "Fz",
    "F4",
    "F8",
    "T7",
    "C3",
    "Cz",
    "C4",
    "T8",
    "P7",
    "P3",
    "Pz",
    "P4",
    "P8",
    "O1",
    "O2",
)
