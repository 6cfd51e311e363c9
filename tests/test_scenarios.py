"""Ground-truth studies (``eegformer simulate --scenario``): the planted cause is written beside
the study, never in it, and the real pipeline recovers it from the recordings."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from test_simulate import _run_cli

from eegformer_cli import commands
from eegformer_cli.preprocess import load_connectome
from eegformer_cli.scenarios import (
    LABELS,
    MIN_PAIR_DISTANCE_M,
    SCENARIOS,
    draw_layout,
    ground_truth_path,
    oracle_features,
    oracle_model,
    read_ground_truth,
)
from eegformer_cli.simulate import CHANNELS, channel_positions


@pytest.mark.parametrize("scenario", SCENARIOS)
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
        if scenario == "interaction":
            assert len({factor.couplings[0].token_band for factor in layout}) == 2


def test_cli_writes_the_truth_beside_the_study_and_not_in_participants_tsv(tmp_path, capsys):
    out = tmp_path / "study"
    assert (
        _run_cli(
            [
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
            ]
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
    assert _run_cli(["simulate", "--out", str(tmp_path / "x"), "--strength", "2"]) == 2


def test_bad_scenario_is_a_usage_error(tmp_path, capsys):
    assert _run_cli(["simulate", "--out", str(tmp_path / "x"), "--scenario", "quadratic"]) == 2
    assert "'linear'" in capsys.readouterr().err and not (tmp_path / "x").exists()


def _oracle_inputs(tmp_path, scenario: str, seed: int):
    study = tmp_path / scenario
    _run_cli(
        [
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
        ]
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


def test_the_pipeline_recovers_a_planted_coupling_and_null_ties_it_to_nothing(tmp_path):
    x, planted, labels = _oracle_inputs(tmp_path, "linear", seed=8)
    assert roc_auc_score(planted, x[:, 0]) > 0.9  # coherence rose where planted
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    predicted = cross_val_predict(oracle_model(), x, labels, cv=folds)
    assert np.mean(predicted == labels) > 0.8

    x, planted, labels = _oracle_inputs(tmp_path, "null", seed=8)
    assert roc_auc_score(planted, x[:, 0]) > 0.9  # planted, but not the label's cause
    assert 0.25 < roc_auc_score(labels, x[:, 0]) < 0.75
