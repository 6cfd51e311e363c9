"""Explanations in time: each segment's part of the explained logit, with its onset and its
strongest cells (``explain/segment_attributions.SegmentTimeline``), written per recording as
``ID.segments.csv`` and drawn by the report (``report/time_course.py``)."""

from __future__ import annotations

import csv
import shutil
import subprocess

import numpy as np
import pytest
import torch
from builders import (
    BANDS,
    CHANNELS,
    PLANTED,
    RANDOM_BANDS,
    RANDOM_N_CHANNELS,
    dynamic_onsets_s,
    dynamic_study,
    perturb,
    random_connectivity,
    random_model,
    run_main,
    tiny_config,
)
from tolerance import assert_float32_close

from eegformer_cli.explain import segment_attributions
from eegformer_cli.explain.attributions import explain_recording, mean_explanation
from eegformer_cli.explain.export import SEGMENT_TABLE_SUFFIX, read_segment_table
from eegformer_cli.model.interactions import AGE, Interaction, InteractionToken
from eegformer_cli.model.predict import recording_logits
from eegformer_cli.model.static_paths import recording_offset
from eegformer_cli.model.xaiguiformer import XAIguiFormer
from eegformer_cli.report.time_course import (
    rising_cells,
    time_course_figure,
    time_course_note,
)

LABELS = ["a", "b", "c"]


def means_model() -> XAIguiFormer:
    """A random model on recording means (a static stage with non-zero weights, a transformer
    path moved away from its zero head), 4 bands and 6 channels."""
    model = perturb(random_model(len(LABELS), linear_path=True, linear_on_means=True))
    with torch.no_grad():
        model.static.linear.weight.normal_(0.0, 0.3)
    return model.eval()


def _tensors(coh: np.ndarray, wpli: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(coh, wpli, age, sex) as the model takes them, age 40 and sex 1 per segment."""
    n = len(coh)
    return (torch.from_numpy(coh), torch.from_numpy(wpli), torch.full((n,), 40.0), torch.ones(n))


def explained(model, coh, wpli, **options):
    return explain_recording(
        model,
        coh,
        wpli,
        40.0,
        1.0,
        LABELS,
        recording_id="r",
        n_steps=4,
        reference=(0.5 * coh.mean(axis=0), 0.5 * wpli.mean(axis=0)),
        **options,
    )


@pytest.mark.parametrize("target", [None, "c"])
def test_the_segments_and_the_static_share_add_up_to_the_recordings_logit(target):
    model = means_model()
    coh, wpli = random_connectivity(9, seed=4)
    onsets = np.linspace(0.0, 240.0, 9)
    explanation = explained(model, coh, wpli, onsets_s=onsets, target=target)
    timeline = explanation.segments
    logit = recording_logits(model, [(coh, wpli, 40.0, 1.0, None)], torch.device("cpu"))[0]
    explained_class = LABELS.index(explanation.target)
    assert timeline.static_share != 0 and np.ptp(timeline.contributions) > 0
    assert_float32_close(
        timeline.static_share + timeline.contributions.sum(), logit[explained_class]
    )
    tensors = _tensors(coh, wpli)
    offset = recording_offset(model, (*tensors, None))
    assert timeline.static_share == pytest.approx(float(offset[explained_class]), rel=1e-6)
    np.testing.assert_array_equal(timeline.onsets_s, onsets)
    assert timeline.cells.shape == timeline.cell_values.shape == (9, 5)


def test_every_cell_kept_averages_to_the_transformers_pair_attributions(monkeypatch):
    """With every cell kept, each segment's cells are its whole map: their mean over the
    segments plus the linear path's exact attributions is the recording's channel-pair map."""
    model = means_model()
    coh, wpli = random_connectivity(7, seed=5)
    n_cells = len(RANDOM_BANDS) * RANDOM_N_CHANNELS * (RANDOM_N_CHANNELS - 1) // 2
    monkeypatch.setattr(segment_attributions, "TOP_SEGMENT_CELLS", n_cells)
    explanation = explained(model, coh, wpli)
    timeline = explanation.segments
    maps = np.zeros((7, len(RANDOM_BANDS) * RANDOM_N_CHANNELS**2))
    np.put_along_axis(maps, timeline.cells, timeline.cell_values, axis=1)
    maps = maps.reshape(7, len(RANDOM_BANDS), RANDOM_N_CHANNELS, RANDOM_N_CHANNELS)
    mean = maps.mean(axis=0)
    mean = mean + np.swapaxes(mean, -1, -2)
    tensors = _tensors(coh, wpli)
    baseline = tuple(torch.from_numpy(0.5 * x.mean(axis=0)) for x in (coh, wpli))
    linear_coh, linear_wpli, _ = segment_attributions._linear_attributions(
        model, tensors, LABELS.index(explanation.target), baseline
    )
    np.testing.assert_allclose(
        mean + linear_coh + linear_wpli, explanation.channel_pairs, rtol=1e-5, atol=1e-7
    )
    assert np.isnan(timeline.onsets_s).all()  # no onsets given: unknown


def test_the_cells_of_a_long_recording_in_batches_are_those_of_one_batch(monkeypatch):
    model = means_model()
    coh, wpli = random_connectivity(13, seed=6)
    whole = explained(model, coh, wpli).segments
    monkeypatch.setattr(segment_attributions, "SEGMENTS_PER_EXPLANATION", 4)
    batched = explained(model, coh, wpli).segments
    np.testing.assert_array_equal(batched.cells, whole.cells)
    assert_float32_close(batched.cell_values, whole.cell_values)
    assert_float32_close(batched.contributions, whole.contributions)


def test_the_mean_over_models_still_adds_up():
    model = means_model()
    other = perturb(means_model(), seed=3).eval()
    coh, wpli = random_connectivity(6, seed=7)
    explanations = [explained(m, coh, wpli, target="b") for m in (model, other)]
    mean = mean_explanation(explanations, LABELS).segments
    logits = recording_logits(model, [(coh, wpli, 40.0, 1.0, None)], torch.device("cpu"))
    logits += recording_logits(other, [(coh, wpli, 40.0, 1.0, None)], torch.device("cpu"))
    assert_float32_close(mean.static_share + mean.contributions.sum(), logits[0, 1] / 2)
    strongest = np.abs(mean.cell_values)
    assert (np.diff(strongest, axis=1) <= 0).all()  # strongest first


def table(target: str, contributions, cells) -> list[dict]:
    """A segment table's rows as the report reads them (strings)."""
    return [
        {
            "target": target,
            "onset_s": str(4.0 * s),
            "contribution": str(c),
            **{f"cell_{k + 1}": name for k, name in enumerate(names)},
        }
        for s, (c, names) in enumerate(zip(contributions, cells))
    ]


def test_the_note_names_the_cells_that_come_with_a_rising_logit():
    up, down = ["beta F4-C4", "theta C3-P4"], ["alpha F3-F4", "theta C3-P4"]
    tables = {
        "r1": table("patient", [0.3, 0.1, 0.4, 0.0], [up, down, up, down]),
        "r2": table("patient", [0.0, 0.5, 0.2, 0.6], [down, up, down, up]),
        "r3": table("control", [0.1, 0.1, 0.1, 0.1], [up, up, up, up]),
    }
    classes = rising_cells(tables)
    assert classes["patient"]["n_rising"] == 4 and classes["patient"]["rising"]["beta F4-C4"] == 4
    note = time_course_note(classes)
    assert "beta F4-C4 (100 % of them, 0 % of the other segments)" in note
    assert "most often together: beta F4-C4 with theta C3-P4" in note
    assert "Class control (1 recordings): the segments' contributions do not vary" in note
    figure = time_course_figure(tables)
    assert figure.axes[0].get_xlabel() == "segment onset (s)"
    assert len(figure.axes[0].lines) == 3 + 1  # the recordings and the zero line


@pytest.mark.slow
def test_explain_writes_each_recordings_time_course_and_the_report_draws_it(tmp_path, capsys):
    """A dynamic study (its label in which couplings burst together): each explained
    recording's segment table has the connectome file's onsets, adds up to the model's logit
    of the explained class, and the report shows the time course and names a cell (the
    transformer path kept, so the segments carry a part of the logit)."""
    from eegformer_cli.experiment.run import run_training
    from eegformer_cli.training.model_file import load_model_file

    prep = dynamic_study(tmp_path / "dynamic", n=40)
    run_training(
        prep, tmp_path / "run", "diagnosis", tiny_config(holdout=0.25, transformer_path="on")
    )
    out = tmp_path / "explained"
    model_file = tmp_path / "run" / "model.pt"
    code, output = run_main(capsys, "explain", model_file, prep, "--out", out)
    assert code == 0, output
    bundle = load_model_file(model_file)
    with open(out / "recordings.csv", newline="") as handle:
        recordings = list(csv.DictReader(handle))
    assert len(recordings) == 40
    for row in recordings:
        rows = read_segment_table(out, row["recording_id"])
        assert rows is not None and (out / f"{row['recording_id']}{SEGMENT_TABLE_SUFFIX}").is_file()
        with np.load(prep / "connectomes" / f"{row['recording_id']}.npz") as data:
            onsets = data["segment_onsets_s"]
        np.testing.assert_allclose([float(r["onset_s"]) for r in rows], onsets)
        np.testing.assert_array_equal(onsets, dynamic_onsets_s(8))
        assert {r["target"] for r in rows} == {row["target"]}
    # completeness against the model's own logit of one recording, its age and sex as read
    first = recordings[0]
    rows = read_segment_table(out, first["recording_id"])
    with np.load(prep / "connectomes" / f"{first['recording_id']}.npz") as data:
        coh, wpli, covariance = data["coh"], data["wpli"], data["covariance"]
    age = float(first["age"]) if first["age"] not in ("", "n/a") else np.nan
    sex = {"M": 0.0, "F": 1.0}.get(first["sex"], np.nan)
    logit = recording_logits(
        bundle.model, [(coh, wpli, age, sex, covariance)], torch.device("cpu")
    )[0, bundle.label_names.index(first["target"])]
    total = float(rows[0]["static_share"]) + sum(float(r["contribution"]) for r in rows)
    assert total == pytest.approx(logit, rel=1e-4, abs=1e-5)  # the CSV's 6 digits
    report = tmp_path / "report.html"
    code, output = run_main(
        capsys, "report", tmp_path / "run", "--explanations", out, "--out", report
    )
    assert code == 0, output
    page = report.read_text(encoding="utf-8")
    assert "Explanations in time" in page and "Couplings where the logit rises" in page
    assert "the cells most often among a segment&#x27;s strongest are" in page
    # the within-recording screen handed the planted pair to the transformer path
    kept = [Interaction.from_dict(k) for k in bundle.model.config.interactions]
    assert any(k.within and {k.a, k.b} == set(PLANTED) for k in kept)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return  # tests/test_report.py says where Chromium is missing
    shown = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--user-data-dir=" + str(tmp_path / "profile"),
            "--virtual-time-budget=5000",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "Couplings where the logit rises" in shown  # read in headless Chromium
    assert "strongest are" in shown and "most often together" in shown
    for entry in PLANTED:  # the note names the planted couplings
        assert f"{entry.band} {entry.channels[0]}-{entry.channels[1]}" in shown


def test_a_products_attribution_goes_half_to_each_entrys_cell_and_whole_with_age():
    token = InteractionToken(
        [Interaction(*PLANTED, 1.0, 0.5), Interaction(PLANTED[0], AGE, 1.0, 0.5)],
        BANDS,
        CHANNELS,
        dim=4,
    )
    products = torch.tensor([[0.6, -0.2], [1.0, 0.0]])
    cells = segment_attributions.product_cells(products, token, (2, len(BANDS), 6, 6))
    a, b = (entry_slot(entry) for entry in PLANTED)
    assert cells[0][a] == pytest.approx(0.3 - 0.2) and cells[0][b] == pytest.approx(0.3)
    assert cells[1][a] == pytest.approx(0.5) and cells[1][b] == pytest.approx(0.5)
    assert cells.sum().item() == pytest.approx(products.sum().item())  # nothing lost


def entry_slot(entry) -> tuple[int, int, int]:
    """(band, i, j) of a builders entry in the (T, C, C) maps."""
    return BANDS.index(entry.band), *(CHANNELS.index(c) for c in entry.channels)
