"""The class contrast of ``eegformer explain`` and the artefact cautions: the contrast is the
difference of the two classes' attributions (Integrated Gradients is linear in the output), it
groups recordings by true class when known, and on a ``simulate --scenario linear`` study its
strongest pair is a planted one, pushing towards the patients, whose connectivity is higher;
pairs that eye movements or muscle can fake are marked; the report shows coherence and wPLI
each on its own and says the strongest pairs in words.
"""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest
import torch
from builders import random_connectivity, random_model, run_main

from eegformer_cli.connectivity.artefacts import caution_masks, caution_rules, pair_caution
from eegformer_cli.connectivity.bands import BAND_PRESETS, band_names
from eegformer_cli.explain.attributions import default_contrast, explain_recording
from eegformer_cli.explain.class_summary import class_contrast
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


def test_the_contrast_is_the_difference_of_the_two_class_attributions():
    model = random_model()
    coh, wpli = random_connectivity(4, seed=5)
    labels = ["a", "b", "c"]

    def explain(**options):
        return explain_recording(
            model, coh, wpli, 50.0, 0.0, labels, recording_id="r", n_steps=16, **options
        )

    to_c = explain(target="c", contrast=("a", "c"))
    to_a = explain(target="a")
    # Integrated Gradients is linear in the function explained: the attribution of
    # logit(c) - logit(a) is that of logit(c) minus that of logit(a), pair by pair
    np.testing.assert_allclose(
        to_c.contrast_pairs, to_c.channel_pairs - to_a.channel_pairs, atol=1e-5
    )
    np.testing.assert_allclose(to_c.contrast_pairs, to_c.contrast_pairs.transpose(0, 2, 1))
    assert to_c.contrast_classes == ("a", "c") and to_a.contrast_pairs is None
    np.testing.assert_allclose(to_c.mean_coh, coh.mean(axis=0), rtol=1e-6)
    # and it sums (i < j) to the change of the log-odds from zero connectivity (completeness)
    age, sex = torch.full((4,), 50.0), torch.full((4,), 0.0)
    with torch.no_grad():
        at_input = model(torch.from_numpy(coh), torch.from_numpy(wpli), age, sex)[1]
        at_zero = model(torch.zeros(coh.shape), torch.zeros(wpli.shape), age, sex)[1]
    gap = float(((at_input[:, 2] - at_input[:, 0]) - (at_zero[:, 2] - at_zero[:, 0])).mean())
    upper = np.triu_indices(coh.shape[-1], 1)
    assert to_c.contrast_pairs[:, upper[0], upper[1]].sum() == pytest.approx(gap, rel=0.05)
    with pytest.raises(Exception, match="--contrast"):
        explain(contrast=("a", "a"))
    assert default_contrast(["healthy", "depression"], "depression") == ("healthy", "depression")
    assert default_contrast(["a", "b"]) == ("a", "b") and default_contrast(labels) is None


def test_class_contrast_groups_by_true_class_when_every_one_is_known():
    base = explain_recording(
        random_model(2), *random_connectivity(2, seed=1), 30.0, 1.0, ["x", "y"],
        recording_id="r", n_steps=2, contrast=("x", "y"),
    )  # fmt: skip

    def recording(name, true, predicted, value):
        return dataclasses.replace(
            base,
            recording_id=name,
            true_class=true,
            predicted=predicted,
            contrast_pairs=np.full((4, 6, 6), value),
            contrast_coh_pairs=np.full((4, 6, 6), value / 2),
            contrast_wpli_pairs=np.full((4, 6, 6), value / 2),
            mean_coh=np.full((4, 6, 6), value * 10),
            mean_wpli=np.zeros((4, 6, 6)),
        )

    explanations = [
        recording("r1", "x", "x", 1.0),
        recording("r2", "x", "y", 3.0),  # misclassified: grouped by its true class x
        recording("r3", "y", "y", 6.0),
    ]
    contrast = class_contrast(explanations)
    assert contrast["grouped_by"] == "true class" and contrast["n_recordings"] == [2, 1]
    np.testing.assert_allclose(contrast["contrast_pairs"], 6.0 - 2.0)
    np.testing.assert_allclose(contrast["coh_difference"], 60.0 - 20.0)
    np.testing.assert_allclose(contrast["contrast_band"], 4.0 * 15)  # 15 pairs per band
    unknown = [*explanations[:2], dataclasses.replace(explanations[2], true_class=None)]
    contrast = class_contrast(unknown)
    assert contrast["grouped_by"] == "predicted class" and contrast["n_recordings"] == [1, 2]
    np.testing.assert_allclose(contrast["contrast_pairs"], 4.5 - 1.0)
    alone = class_contrast(explanations[:2])
    assert alone["n_recordings"] == [2, 0] and "contrast_pairs" not in alone


@pytest.fixture(scope="module")
def linear_study(tmp_path_factory) -> dict:
    """A ``simulate --scenario linear`` study (24 people, 30 s each; patient <=> two couplings
    planted in one band), preprocessed and a tiny model trained (holdout, 15 epochs)."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.preprocess import PreprocessSettings, run_preprocess
    from eegformer_cli.simulation.scenarios import (
        ground_truth_path,
        read_ground_truth,
        simulate_scenario,
    )
    from eegformer_cli.training.config import resolve_config

    root = tmp_path_factory.mktemp("linear")
    study, prep, run = root / "study", root / "prep", root / "run"
    simulate_scenario(study, "linear", 24, 30, 128, seed=1)
    run_preprocess([study], prep, PreprocessSettings.from_preset("default"), n_jobs=2)
    config = resolve_config(
        "default",
        None,
        {
            "epochs": 15,
            "batch_size": 8,
            "holdout": 0.25,
            "val_fraction": 0.25,
            "device": "cpu",
            "model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "n_gnn_layers": 1},
        },
    )
    run_training(prep, run, "diagnosis", config)
    return {"prep": prep, "run": run, "truth": read_ground_truth(ground_truth_path(study))}


@pytest.mark.slow
def test_the_contrast_of_a_linear_study_is_led_by_a_planted_pair_with_its_sign(
    linear_study, tmp_path, capsys
):
    out = tmp_path / "explanations"
    code, output = run_main(
        capsys, "explain", linear_study["run"], linear_study["prep"], "--out", out, "--n-steps", 8
    )
    assert code == 0, output
    planted = {
        (coupling["token_band"], *coupling["channels"])
        for factor in linear_study["truth"]["factors"]
        for coupling in factor["couplings"]
    }
    contrast = json.loads((out / "class_summary.json").read_text())["contrast"]
    assert contrast["classes"] == ["control", "patient"]  # patient: the positive class
    assert contrast["grouped_by"] == "true class" and contrast["n_recordings"] == [12, 12]
    strongest = contrast["strongest_channel_pairs"][0]
    assert (strongest["band"], strongest["channel_a"], strongest["channel_b"]) in planted
    assert strongest["value"] > 0  # the coupling pushes towards patient
    # the top band is the band chart's tallest bar (the sum over a band's pairs: a dense linear
    # path's many small weights in one band may outweigh the planted pair's band)
    with open(out / "contrast_pairs.csv", newline="") as handle:
        first = next(csv.DictReader(handle))  # the table for people: strongest first
    assert (first["band"], first["channel_a"], first["channel_b"]) == (
        strongest["band"],
        strongest["channel_a"],
        strongest["channel_b"],
    )
    # the planted pair is more coupled in patients: coherence and wPLI both higher
    assert float(first["coh_difference"]) > 0 and float(first["wpli_difference"]) > 0
    assert first["caution"] == pair_caution(
        contrast_settings(out), first["band"], first["channel_a"], first["channel_b"]
    )
    with np.load(out / "class_summary.npz") as data:
        assert list(data["contrast_classes"]) == ["control", "patient"]
        assert data["contrast_pairs"].shape == data["coh_difference"].shape
        tallest = int(np.abs(data["contrast_band"]).argmax())
        assert list(data["bands"])[tallest] == contrast["top_band"]
    one = json.loads((out / "sub-01_task-rest_eeg.json").read_text())
    assert one["true_class"] in ("control", "patient") and one["contrast"]["classes"]

    # the other way round: the log-odds of control, control's recordings minus patient's;
    # control's weaker coupling pushes towards control: the same value, the difference negated
    flipped = tmp_path / "flipped"
    code, output = run_main(
        capsys,
        "explain",
        linear_study["run"],
        linear_study["prep"],
        "--out",
        flipped,
        "--n-steps",
        8,
        "--contrast",
        "patient",
        "control",
    )
    assert code == 0, output
    again = json.loads((flipped / "class_summary.json").read_text())["contrast"]
    assert again["classes"] == ["patient", "control"]
    same = again["strongest_channel_pairs"][0]
    assert {**same, "value": 0} == {**strongest, "value": 0}
    assert same["value"] == pytest.approx(strongest["value"], rel=1e-4)
    with open(flipped / "contrast_pairs.csv", newline="") as handle:
        row = next(csv.DictReader(handle))
    assert float(row["coh_difference"]) == pytest.approx(-float(first["coh_difference"]), 1e-4)
    code, output = run_main(
        capsys, "explain", linear_study["run"], linear_study["prep"], "--out", tmp_path / "x",
        "--contrast", "patient", "nobody",
    )  # fmt: skip
    assert code == 2 and "'control'" in output and "--contrast" in output


def contrast_settings(out) -> dict:
    """The artefact rule ``explain`` stored in its class summary."""
    return json.loads((out / "class_summary.json").read_text())["settings"]["artefact_caution"]


def test_the_contrast_shows_each_measure_on_its_own_and_says_each_top_pair_in_words():
    """Coherence lower and wPLI higher in the second class, in the strongest pair: two heads
    per measure (how it differs, how it pushes), never their sum, and a sentence per pair."""
    import matplotlib.pyplot as plt

    from eegformer_cli.explain.export import contrast_rows
    from eegformer_cli.report.explanation_notes import contrast_sentences_html
    from eegformer_cli.report.figures import contrast_figure

    channels, bands = ["F8", "P3", "Cz", "O1"], ["theta", "alpha"]
    maps = {k: np.zeros((2, 4, 4)) for k in ("coh", "wpli", "coh_push", "wpli_push")}
    for key, value in (("coh", -0.04), ("wpli", 0.03), ("coh_push", 0.01), ("wpli_push", 0.05)):
        maps[key][0, 0, 1] = maps[key][0, 1, 0] = value  # theta F8-P3
    maps["coh"][0, 2, 3] = maps["coh"][0, 3, 2] = 0.02  # a weaker pair, both measures higher
    maps["wpli"][0, 2, 3] = maps["wpli"][0, 3, 2] = 0.01
    maps["coh_push"][0, 2, 3] = maps["coh_push"][0, 3, 2] = -0.01
    summary = {
        "bands": bands,
        "channels": channels,
        "contrast_pairs": maps["coh_push"] + maps["wpli_push"],
        "contrast_coh_pairs": maps["coh_push"],
        "contrast_wpli_pairs": maps["wpli_push"],
        "coh_difference": maps["coh"],
        "wpli_difference": maps["wpli"],
        "contrast_band": np.array([0.05, 0.0]),
    }
    fig = contrast_figure(summary, ["rest", "arithmetic"])
    titles = [ax.get_title() for ax in fig.axes if "\n" in ax.get_title()]
    assert [t.split("\n")[0] for t in titles] == [
        "coherence, arithmetic minus rest:",
        "how the coherence difference pushes:",
        "wPLI, arithmetic minus rest:",
        "how the wPLI difference pushes:",
    ]
    bars = [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel().endswith("difference")]
    assert bars == ["coherence difference", "wPLI difference"]  # each measure, its own scale
    # the strongest pair's line: blue (lower) on the coherence head, red (higher) on wPLI's
    coherence, wpli = (
        ax.collections[-1].get_colors()[-1]  # the strongest pair, drawn last
        for ax in fig.axes
        if ax.get_title().startswith(("coherence,", "wPLI,"))
    )
    assert coherence[2] > coherence[0] and wpli[0] > wpli[2]
    plt.close(fig)
    columns, rows = contrast_rows(
        {**summary, "classes": ["rest", "arithmetic"], "grouped_by": "true class"},
        bands,
        channels,
        {},
    )
    sentences = contrast_sentences_html([dict(zip(columns, row)) for row in rows[:2]])
    assert (
        "<li>theta F8-P3: coherence lower, wPLI higher in arithmetic; pushes towards "
        "arithmetic (+0.06 logit units: coherence +0.01, wPLI +0.05)</li>"
    ) in sentences
    assert "<li>theta Cz-O1: coherence and wPLI higher in arithmetic; pushes towards rest" in (
        sentences
    )
