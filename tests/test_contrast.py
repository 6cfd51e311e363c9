"""The artefact cautions: pairs that eye movements or muscle can fake are marked."""

from __future__ import annotations

from eegformer_cli.connectivity.artefacts import caution_masks, caution_rules, pair_caution
from eegformer_cli.connectivity.bands import BAND_PRESETS, band_names
from eegformer_cli.recordings.channels import STANDARD_1020


def test_artefact_rule_marks_frontal_slow_and_frontotemporal_fast_pairs():
    bands = BAND_PRESETS["paper"]  # the 8 bands and the theta/beta ratio
    rules = caution_rules(bands, STANDARD_1020)
    assert rules["eye movements"] == {
        "bands": ["delta", "theta", "theta_beta_ratio"],
        "channels": ["Fp1", "Fp2", "F7", "F8"],
    }
    assert rules["muscle"]["bands"] == ["high_beta", "gamma", "theta_beta_ratio"]
    assert {"Fp1", "F3", "Fz", "F8", "T7", "T8", "P7", "P8"} <= set(rules["muscle"]["channels"])
    assert not {"C3", "Cz", "P3", "Pz", "O1", "O2"} & set(rules["muscle"]["channels"])
    assert pair_caution(rules, "theta", "Fp1", "O2") == "eye movements"  # one end is enough
    assert pair_caution(rules, "gamma", "C3", "T8") == "muscle"
    assert pair_caution(rules, "theta_beta_ratio", "F7", "O1") == "eye movements, muscle"
    assert pair_caution(rules, "low_alpha", "Fp1", "Fp2") == ""
    assert pair_caution(rules, "mid_beta", "T7", "T8") == ""
    assert pair_caution(rules, "delta", "C3", "P4") == ""
    masks = caution_masks(rules, band_names(bands), STANDARD_1020)
    index = {name: k for k, name in enumerate(STANDARD_1020)}
    assert masks[1, index["Fp1"], index["O2"]] and masks[1, index["O2"], index["Fp1"]]
    assert not masks[2].any()  # low alpha: nothing
    assert caution_rules(BAND_PRESETS["default"][2:4], STANDARD_1020) == {}  # alpha only
