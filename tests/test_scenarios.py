"""Ground-truth studies (``eegformer simulate --scenario``): the planted cause is written beside
the study, never in it, and the real pipeline recovers it from the recordings."""

from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest
from builders import exit_code
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict

from eegformer_cli import commands
from eegformer_cli.preprocess import load_connectome
from eegformer_cli.preprocess.recording import preprocess_raw
from eegformer_cli.simulation.dynamic import (
    BURST_SEGMENT_CHOICES,
    burst_envelope,
    burst_grid,
    draw_bursts,
)
from eegformer_cli.simulation.power import (
    DEFAULT_GAIN,
    PowerGain,
    power_filter,
    power_log_gains,
    relative_band_power,
)
from eegformer_cli.simulation.scenarios import (
    LABELS,
    MIN_PAIR_DISTANCE_M,
    PLANTABLE,
    SCENARIOS,
    SOURCE_BANDS,
    SPREAD_NEIGHBOURS,
    draw_layout,
    draw_power,
    ground_truth_path,
    oracle_features,
    oracle_model,
    planted_couplings,
    planted_signals,
    read_ground_truth,
    simulate_scenario,
    spread_neighbours,
)
from eegformer_cli.simulation.simulate import (
    CHANNELS,
    channel_positions,
    draw_participants,
    simulate_participant,
)

#: SHA-256 of every file of ``simulate --scenario interaction --n-participants 4 --duration 10
#: --seed 3`` (its folder and ground truth) as made before ``--spread`` existed.
SPREAD_OFF_FILES = {
    "study.ground_truth.json": "f57db043ac026d537e673fe99e837e20b902be415ed7eda9f2bfeda8c42507b6",
    "study/eeg/sub-01_task-rest_eeg.edf": (
        "29920eed63134c53929b6ea5d3b795139c0f2d05c769f32fea12247b4830fc45"
    ),
    "study/eeg/sub-02_task-rest_eeg.edf": (
        "8039962100b519921abdb0d046633024a9ffbfbb0865dd5fd1c34df03405439d"
    ),
    "study/eeg/sub-03_task-rest_eeg.edf": (
        "aad462f5ac7c36a42efce4d61cebe44151cccb24dd0b281dc33caf499a1d139f"
    ),
    "study/eeg/sub-04_task-rest_eeg.edf": (
        "6a629c152113e17915994f60e9de0cf588669d120fb21d92e80a0c74c2368fe9"
    ),
    "study/participants.tsv": "c262bcb1db5f71ab5be0a01c095f326ebb7c55efb3c48ece3d6f52d50582a3e7",
}


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "power"])
def test_layouts_follow_the_layout_seed_with_distant_distinct_pairs(scenario):
    positions = dict(zip(CHANNELS, channel_positions()))
    layouts = [draw_layout(scenario, seed) for seed in range(6)]
    assert draw_layout(scenario, 3) == layouts[3]
    assert len(set(layouts)) > 1  # the seed moves the cause
    for layout in layouts:
        couplings = [c for factor in layout for c in factor.couplings]
        channels = [name for c in couplings for name in c.channels]
        assert len(channels) == len(set(channels)) and not {"Fp1", "Fp2"} & set(channels)
        for c in couplings:
            first, second = (positions[name] for name in c.channels)
            assert np.linalg.norm(first - second) >= MIN_PAIR_DISTANCE_M
        if scenario in ("interaction", "dynamic"):
            assert len({factor.couplings[0].token_band for factor in layout}) == 2


def test_cli_writes_the_truth_beside_the_study_and_not_in_participants_tsv(tmp_path, capsys):
    out = tmp_path / "study"
    assert (
        exit_code(
            "simulate",
            "--out",
            str(out),
            "--scenario",
            "age",
            "--n-participants",
            "6",
            "--duration",
            "10",
            "--seed",
            "4",
        )
        == 0
    )
    with open(out / "participants.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert list(rows[0]) == ["participant_id", "diagnosis", "age", "sex"]
    assert all(20 <= int(r["age"]) <= 80 and r["sex"] in ("M", "F") for r in rows)
    truth = json.loads(ground_truth_path(out).read_text())
    assert ground_truth_path(out).parent == tmp_path and not list(out.glob("*.json"))
    for row, person in zip(rows, truth["participants"]):
        planted = person["factors"]["A"] == 1
        assert row["diagnosis"] == LABELS[int(planted != (person["age"] > truth["age_cut"]))]
        assert (person["strengths"]["A"] > 0) == planted
    assert "age" in capsys.readouterr().err
    assert exit_code("simulate", "--out", str(tmp_path / "x"), "--strength", "2") == 2


def test_bad_scenario_is_a_usage_error(tmp_path, capsys):
    assert exit_code("simulate", "--out", str(tmp_path / "x"), "--scenario", "quadratic") == 2
    assert "'linear'" in capsys.readouterr().err and not (tmp_path / "x").exists()


def _oracle_inputs(tmp_path, scenario: str, seed: int):
    study = tmp_path / scenario
    exit_code(
        "simulate",
        "--out",
        str(study),
        "--scenario",
        scenario,
        "--n-participants",
        "40",
        "--duration",
        "30",
        "--seed",
        str(seed),
    )
    prep = tmp_path / f"prep-{scenario}"
    commands.preprocess(study, prep)
    truth = read_ground_truth(ground_truth_path(study))
    people = {p["participant_id"]: p for p in truth["participants"]}
    connectomes = {
        pid: load_connectome(prep / "connectomes" / f"{pid}_task-rest_eeg.npz") for pid in people
    }
    features = oracle_features(truth, connectomes, {pid: p["age"] for pid, p in people.items()})
    ids = sorted(people)
    x = np.stack([features[pid] for pid in ids])
    planted = np.array([people[pid]["factors"]["A"] for pid in ids])
    labels = np.array([LABELS.index(people[pid]["diagnosis"]) for pid in ids])
    return x, planted, labels


@pytest.mark.slow
def test_the_pipeline_recovers_a_planted_coupling_and_null_ties_it_to_nothing(tmp_path):
    x, planted, labels = _oracle_inputs(tmp_path, "linear", seed=8)
    assert roc_auc_score(planted, x[:, 0]) > 0.9  # coherence rose where planted
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    predicted = cross_val_predict(oracle_model(), x, labels, cv=folds)
    assert np.mean(predicted == labels) > 0.8

    x, planted, labels = _oracle_inputs(tmp_path, "null", seed=8)
    assert roc_auc_score(planted, x[:, 0]) > 0.9  # planted, but not the label's cause
    assert 0.25 < roc_auc_score(labels, x[:, 0]) < 0.75


def test_without_spread_a_study_is_byte_for_byte_what_it_was(tmp_path):
    simulate_scenario(tmp_path / "study", "interaction", 4, 10, 128, seed=3, spread=0.0)
    written = {
        str(path.relative_to(tmp_path)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(tmp_path.rglob("*"))
        if path.is_file()
    }
    assert written == SPREAD_OFF_FILES


def test_spread_carries_each_planted_source_to_its_channels_nearest_neighbours(tmp_path):
    factors = draw_layout("interaction", 5)
    person = draw_participants(2, 5)[0]
    strengths = {"A": 1.0, "B": 0.0}
    rng_seed = [5, 0, 1]
    off = planted_signals(factors, strengths, person)(np.random.default_rng(rng_seed), 512, 128)
    on = planted_signals(factors, strengths, person, 0.6)(np.random.default_rng(rng_seed), 512, 128)
    coupling = factors[0].couplings[0]  # factor B has strength 0: it adds nothing
    reaches, planted = spread_neighbours(coupling), set(coupling.channels)
    positions = dict(zip(CHANNELS, channel_positions()))
    for name, near in reaches.items():
        assert len(near) == SPREAD_NEIGHBOURS and not set(near) & set(coupling.channels)
        others = [c for c in CHANNELS if c not in coupling.channels and c not in near]
        farthest = max(np.linalg.norm(positions[c] - positions[name]) for c in near)
        assert all(np.linalg.norm(positions[c] - positions[name]) >= farthest for c in others)
    reached = {name: [ch for ch, near in reaches.items() if name in near] for name in CHANNELS}
    once = [name for name, by in reached.items() if len(by) == 1]
    assert len(once) >= 4  # each gets 0.6 times the copy of the one planted channel it neighbours
    for name in once:
        k, source = CHANNELS.index(name), CHANNELS.index(reached[name][0])
        np.testing.assert_allclose(on[k], 0.6 * off[source])
    for name in coupling.channels:
        np.testing.assert_array_equal(on[CHANNELS.index(name)], off[CHANNELS.index(name)])
    untouched = [CHANNELS.index(n) for n, by in reached.items() if not by and n not in planted]
    np.testing.assert_array_equal(on[untouched], 0.0)
    truth = simulate_scenario(tmp_path / "s", "age", 2, 10, 128, seed=5, spread=0.6)
    assert truth["spread"]["weight"] == 0.6
    layout = draw_layout("age", 5)[0].couplings[0]
    assert truth["spread"]["reaches"] == {k: list(v) for k, v in spread_neighbours(layout).items()}
    assert json.loads(ground_truth_path(tmp_path / "s").read_text())["spread"] == truth["spread"]


def test_spread_is_checked_and_goes_with_a_scenario(tmp_path, capsys):
    out = str(tmp_path / "x")
    assert exit_code("simulate", "--out", out, "--spread", "0.5") == 2
    assert "--spread" in capsys.readouterr().err
    assert exit_code("simulate", "--out", out, "--scenario", "age", "--spread", "1.0") == 2
    assert "[0, 1)" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_the_power_scenario_draws_its_channel_and_band_from_the_layout_seed_unless_given():
    drawn = [draw_power(seed) for seed in range(8)]
    assert draw_power(3) == drawn[3] and len(set(drawn)) > 1
    assert all(p.channel in PLANTABLE and p.token_band in SOURCE_BANDS for p in drawn)
    assert draw_power(3, "Fz", "low_beta") == PowerGain("Fz", "low_beta", SOURCE_BANDS["low_beta"])
    assert draw_layout("power", 3)[0].couplings == ()  # no coupling is planted


def test_the_power_truth_records_channel_band_gain_and_carriers(tmp_path, capsys):
    out = tmp_path / "study"
    args = ["--scenario", "power", "--n-participants", "8", "--duration", "10", "--seed", "6"]
    options = ["--power-channel", "Fz", "--power-band", "low_beta", "--gain", "1.3"]
    assert exit_code("simulate", "--out", str(out), *args, *options) == 0
    assert "Fz in low_beta" in capsys.readouterr().err
    truth = json.loads(ground_truth_path(out).read_text())
    assert truth["scenario"] == "power" and truth["gain"] == 1.3
    assert {k: truth["power"][k] for k in ("channel", "token_band", "band_hz")} == {
        "channel": "Fz",
        "token_band": "low_beta",
        "band_hz": list(SOURCE_BANDS["low_beta"]),
    }
    assert truth["factors"] == [{"name": "A", "couplings": []}]
    people = truth["participants"]
    assert sum(p["factors"]["A"] for p in people) == 4
    for person in people:
        carrier = person["factors"]["A"] == 1
        assert person["diagnosis"] == LABELS[int(carrier)]
        assert (person["gains"]["A"] > 1) if carrier else person["gains"]["A"] == 1.0
    with open(out / "participants.tsv", newline="") as handle:
        assert list(next(csv.DictReader(handle, delimiter="\t"))) == [
            "participant_id",
            "diagnosis",
            "age",
            "sex",
        ]


@pytest.mark.parametrize(
    "options, message",
    [
        (["--gain", "1.3"], "--gain"),  # without a scenario
        (["--scenario", "linear", "--power-band", "theta"], "--scenario power"),
        (["--scenario", "power", "--spread", "0.5"], "--spread"),
        (["--scenario", "power", "--gain", "1"], "--gain"),
        (["--scenario", "power", "--power-band", "alpha"], "'theta'"),
        (["--scenario", "power", "--power-channel", "Fp1"], "--power-channel"),
    ],
)
def test_power_settings_are_checked(tmp_path, capsys, options, message):
    out = tmp_path / "x"
    assert exit_code("simulate", "--out", str(out), "--n-participants", "4", *options) == 2
    assert message in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("band", list(SOURCE_BANDS))
def test_a_gain_raises_the_channels_band_power_and_leaves_its_coherence_and_wpli(band):
    """The same participant with and without the gain, through the real preprocessing (average
    reference included): the planted channel's power in the band rises by about 2 log(gain),
    its coherence and wPLI with every other channel move by far less than the tokens' spread
    between people; an independent source of the same power would lower its coherence by a
    factor 1 / gain."""
    power = PowerGain("C3", band, SOURCE_BANDS[band])
    person = draw_participants(2, 9)[1]
    none = np.zeros((len(CHANNELS), 60 * 128))
    connectomes = [
        preprocess_raw(
            simulate_participant(
                person,
                60,
                128,
                planted=lambda rng, n_times, sfreq: none,
                filtered=power_filter(
                    power_log_gains(power, log_gain, person, SOURCE_BANDS), SOURCE_BANDS
                ),
            )
        )
        for log_gain in (0.0, np.log(DEFAULT_GAIN))
    ]
    before, after = connectomes
    k, b = before.channels.index("C3"), before.bands.index(band)
    rise = relative_band_power(after, "C3", band) - relative_band_power(before, "C3", band)
    assert 0.6 * 2 * np.log(DEFAULT_GAIN) < rise < 1.05 * 2 * np.log(DEFAULT_GAIN)
    moved = {
        measure: np.delete(
            getattr(after, measure).mean(0)[b, k] - getattr(before, measure).mean(0)[b, k], k
        )
        for measure in ("coh", "wpli")
    }
    for measure, change in moved.items():
        assert np.abs(change).max() < 0.025 and abs(change.mean()) < 0.005, measure
    strongest = np.delete(before.coh.mean(0)[b, k], k).max()
    assert strongest * (1 - 1 / DEFAULT_GAIN) > 2 * np.abs(moved["coh"]).max()


def test_power_carriers_differ_in_band_power_and_the_oracle_reads_it(tmp_path):
    """A small power study through ``preprocess``: the planted channel's relative band power
    (the oracle's input) is higher in every carrier's group by about 2 log(gain), and the
    planted channel's tokens in the band do not separate the groups."""
    study = tmp_path / "power"
    truth = simulate_scenario(
        study, "power", 12, 30, 128, seed=11, power_channel="Pz", power_band="theta", gain=1.5
    )
    prep = tmp_path / "prep"
    commands.preprocess(study, prep)
    people = {p["participant_id"]: p for p in truth["participants"]}
    connectomes = {
        pid: load_connectome(prep / "connectomes" / f"{pid}_task-rest_eeg.npz") for pid in people
    }
    features = oracle_features(truth, connectomes, {pid: p["age"] for pid, p in people.items()})
    carriers = np.array([people[pid]["factors"]["A"] for pid in sorted(people)])
    x = np.array([features[pid][0] for pid in sorted(people)])
    gains = np.array([people[pid]["gains"]["A"] for pid in sorted(people)])
    difference = x[carriers == 1].mean() - x[carriers == 0].mean()
    expected = 2 * np.log(gains[carriers == 1]).mean()
    assert 0.5 * expected < difference < 1.3 * expected
    assert roc_auc_score(carriers, x) == 1.0
    first = connectomes[sorted(people)[0]]
    k, b = first.channels.index("Pz"), first.bands.index("theta")
    for measure in ("coh", "wpli"):
        tokens = np.stack(
            [
                np.delete(getattr(connectomes[pid], measure).mean(0)[b, k], k)
                for pid in sorted(people)
            ]
        )
        spread = tokens.std(axis=0, ddof=1)
        gap = tokens[carriers == 1].mean(axis=0) - tokens[carriers == 0].mean(axis=0)
        assert np.abs(gap / spread).mean() < 1.0, measure  # the groups overlap


def test_bursts_sit_on_the_grid_co_occur_in_patients_and_alternate_in_controls():
    """Every participant's bursts: whole blocks of ``burst_segments`` segments, each coupling on
    in half the blocks (so its share of segments on and its spread over segments are the same
    in everyone), B in A's blocks for a patient and in none of them for a control; the
    envelope is 1 exactly in the samples of the segments on."""
    drawn = {burst_grid(seed, 120, 12, None).burst_segments for seed in range(12)}
    assert drawn == set(BURST_SEGMENT_CHOICES)  # the layout seed draws the burst length
    for burst_segments, duration in ((1, 120), (2, 120), (3, 100)):
        grid = burst_grid(0, duration, 12, burst_segments)
        assert grid.n_segments == duration // 12
        shares = set()
        for index in range(40):
            patient = index % 2 == 1
            on = draw_bursts(grid, patient, 3, index)
            for states in on.values():
                blocks = states[: grid.n_blocks * burst_segments].reshape(grid.n_blocks, -1)
                assert set(np.unique(blocks.std(axis=1))) == {0.0}  # whole blocks
                assert not states[grid.n_blocks * burst_segments :].any()
                shares.add((int(states.sum()), round(float(states.std()), 9)))
            together = on["A"] & on["B"]
            if patient:
                np.testing.assert_array_equal(on["A"], on["B"])
            else:
                assert not together.any()
        assert len(shares) == 1  # every coupling's mean and spread over segments, everyone
    envelope = burst_envelope(np.array([0, 1, 0, 1]), 6)(26 * 128, 128)
    segments = envelope[: 24 * 128].reshape(4, -1)
    np.testing.assert_array_equal(segments.min(axis=1), [0, 1, 0, 1])
    np.testing.assert_array_equal(segments.max(axis=1), [0, 1, 0, 1])
    assert not envelope[24 * 128 :].any()


def test_blocks_of_a_coupling_do_not_depend_on_the_label():
    grid = burst_grid(0, 120, 12, 1)
    for index in range(10):
        patient, control = (draw_bursts(grid, p, 4, index) for p in (True, False))
        np.testing.assert_array_equal(patient["A"], control["A"])


@pytest.mark.parametrize(
    "options, message",
    [
        (["--scenario", "dynamic", "--segment-length", "10"], "multiple of 3"),
        (["--scenario", "dynamic", "--duration", "30", "--burst-segments", "2"], "2 bursts"),
        (["--scenario", "linear", "--burst-segments", "2"], "--scenario dynamic"),
        (["--segment-length", "6"], "--segment-length"),
    ],
)
def test_dynamic_settings_are_checked(tmp_path, capsys, options, message):
    out = tmp_path / "x"
    assert exit_code("simulate", "--out", str(out), "--n-participants", "4", *options) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_a_dynamic_study_through_preprocess_hides_the_label_from_means_and_spreads(tmp_path):
    """A small dynamic study through ``preprocess`` with ``--epoch-length`` the grid's segment:
    the truth records each participant's bursts on the segment grid, the planted pairs'
    coherence is higher in the segments recorded as bursts, each planted entry's recording mean
    and spread over segments do not separate the classes beyond noise, and the oracle's mean
    per-segment product does (at the bench's strength)."""
    study = tmp_path / "dynamic"
    truth = simulate_scenario(
        study, "dynamic", 16, 60, 128, seed=12, strength=1.5, segment_s=6, burst_segments=1
    )
    assert truth["dynamic"]["n_segments"] == 10 and truth["dynamic"]["segment_s"] == 6
    written = json.loads(ground_truth_path(study).read_text())
    assert written["participants"] == truth["participants"]
    assert written["dynamic"] == truth["dynamic"]
    prep = tmp_path / "prep"
    commands.preprocess(study, prep, epoch_length=6)
    people = {p["participant_id"]: p for p in truth["participants"]}
    ids = sorted(people)
    connectomes = {
        pid: load_connectome(prep / "connectomes" / f"{pid}_task-rest_eeg.npz") for pid in ids
    }
    labels = np.array([LABELS.index(people[pid]["diagnosis"]) for pid in ids])
    first = connectomes[ids[0]]
    for name, coupling in planted_couplings(truth):
        b = first.bands.index(coupling.token_band)
        i, j = (first.channels.index(c) for c in coupling.channels)
        series = np.stack([connectomes[pid].coh[:, b, i, j] for pid in ids])  # (n, segments)
        assert series.shape == (16, 10)
        on = np.stack([people[pid]["bursts"][name] for pid in ids])
        assert on.shape == (16, 10) and set(on.sum(axis=1)) == {5}
        assert roc_auc_score(on.ravel(), (series - series.mean(1, keepdims=True)).ravel()) > 0.95
        for summary in (series.mean(axis=1), series.std(axis=1)):
            gap = summary[labels == 1].mean() - summary[labels == 0].mean()
            assert abs(gap) < 2.5 * summary.std(ddof=1) / np.sqrt(4), (name, gap)  # noise
    features = oracle_features(truth, connectomes, {})
    product = np.array([features[pid][0] for pid in ids])
    assert product[labels == 1].min() > 0.3 > -0.3 > product[labels == 0].max()
