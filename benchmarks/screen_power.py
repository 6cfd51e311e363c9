"""The power scenario's references alone: does the gain reach the band covariances and not the
connectivity tokens?

Simulates ``eegformer simulate --scenario power`` studies (one per seed; the channel and band
from the layout seed, or given), preprocesses them with the real command, and on one
participant-wise 5-fold CV (stratified, shuffled with ``--cv-seed``) fits the two references a
``train`` fits, on the same inputs and with the same inner search over C:

  logistic_regression  the connectivity tokens (coherence and wPLI, every band and pair)
  tangent_space        the band covariances in pyRiemann's tangent space
  oracle               the planted channel's log band power over the other channels' mean
                       (``power.relative_band_power``), a logistic regression

with each one's 95 % interval against chance (the corrected resampled t, as the null study of
``bench_ground_truth.py``). Then the tokens themselves: per coherence and wPLI token of the
planted channel in the planted band (18 pairs each), Welch's t between the groups; the largest
|t| and how many of the 36 have p < 0.05, against every other token's share (the share chance
gives: 5 %). And the planted gain in the recordings: the oracle feature's mean difference
between carriers and the others, against 2 log(gain).

This is a screening tool: never run it on ``bench_ground_truth.POWER_ACCEPTANCE_SEED``.

Usage:
  python benchmarks/screen_power.py --out /tmp/pw --seeds 101,202 [--n 200] [--duration 60]
      [--gain G] [--channel Fz] [--band theta] [--n-jobs 2]
Prints one JSON object (also OUT/screen_power.json).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
from bench_ground_truth import EEGFORMER, run  # the simulate / preprocess runner
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

from eegformer_cli.simulation.power import DEFAULT_GAIN

CV_FOLDS = 5


def study(out: Path, seed: int, args, log: Path) -> tuple[Path, Path]:
    """Simulate and preprocess one power study (reused when there); (study dir, prep dir)."""
    extra = []
    name = f"power-n{args.n}-d{args.duration}-seed{seed}-gain{args.gain:g}"
    if args.channel:
        extra += ["--power-channel", args.channel]
        name += f"-{args.channel}"
    if args.band:
        extra += ["--power-band", args.band]
        name += f"-{args.band}"
    data, prep = out / "studies" / name, out / "prep" / name
    if not (prep / "manifest.tsv").exists():
        run(
            EEGFORMER
            + [
                "simulate",
                "--out",
                str(data),
                "--scenario",
                "power",
                "--n-participants",
                str(args.n),
                "--duration",
                str(args.duration),
                "--seed",
                str(seed),
                "--gain",
                str(args.gain),
                *extra,
                "--overwrite",
            ],
            log,
        )
        run(
            EEGFORMER + ["preprocess", str(data), "--out", str(prep), "--n-jobs", str(args.n_jobs)],
            log,
        )
    return data, prep


def screen(out: Path, seed: int, args, log: Path) -> dict:
    from scipy.stats import ttest_ind
    from sklearn.model_selection import StratifiedKFold

    from eegformer_cli.evaluation.metrics import (
        against_chance,
        classification_metrics,
        summarise_folds,
    )
    from eegformer_cli.evaluation.reference import (
        fit_reference,
        recording_features,
        reference_probabilities,
    )
    from eegformer_cli.evaluation.tangent_space import fit_tangent_space, shrunk_covariances
    from eegformer_cli.preprocess import load_connectome
    from eegformer_cli.simulation.scenarios import (
        LABELS,
        ground_truth_path,
        oracle_features,
        oracle_model,
        read_ground_truth,
    )

    data, prep = study(out, seed, args, log)
    truth = read_ground_truth(ground_truth_path(data))
    people = {p["participant_id"]: p for p in truth["participants"]}
    with open(prep / "manifest.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["status"] == "ok"]
    ids = [r["participant_id"] for r in rows]
    connectomes = {r["participant_id"]: load_connectome(prep / r["connectome"]) for r in rows}
    first = connectomes[ids[0]]
    labels = np.array([LABELS.index(people[p]["diagnosis"]) for p in ids])
    carriers = np.array([people[p]["factors"]["A"] for p in ids])
    tokens = np.stack([recording_features(connectomes[p].coh, connectomes[p].wpli) for p in ids])
    covariances = np.stack([shrunk_covariances(connectomes[p].covariance) for p in ids])
    oracle_by_id = oracle_features(truth, connectomes, {p: people[p]["age"] for p in ids})
    oracle_x = np.stack([oracle_by_id[p] for p in ids])
    groups = np.array(ids)

    per_fold: dict[str, list] = {"logistic_regression": [], "tangent_space": [], "oracle": []}
    splitter = StratifiedKFold(CV_FOLDS, shuffle=True, random_state=args.cv_seed)
    for fold, (train, test) in enumerate(splitter.split(tokens, labels)):
        reference = fit_reference(tokens[train], labels[train], groups[train], fold)
        per_fold["logistic_regression"].append(
            classification_metrics(
                labels[test], reference_probabilities(reference, tokens[test], 2), 1
            )
        )
        tangent = fit_tangent_space(covariances[train], labels[train], groups[train], fold)
        per_fold["tangent_space"].append(
            classification_metrics(labels[test], tangent.predict_proba(covariances[test]), 1)
        )
        oracle = oracle_model(fold).fit(oracle_x[train], labels[train])
        per_fold["oracle"].append(
            classification_metrics(labels[test], oracle.predict_proba(oracle_x[test]), 1)
        )
    models = {}
    for name, folds in per_fold.items():
        summarised = summarise_folds(folds)
        models[name] = {
            "bac": round(summarised["mean"]["bac"], 4),
            "auroc": round(summarised["mean"]["auroc"], 4),
            "bac_ci95": [
                round(v, 3) for v in against_chance(folds, "bac", 0.5, 1 / (CV_FOLDS - 1))["ci95"]
            ],
            "per_fold_bac": [round(float(m.bac), 4) for m in folds],
        }

    planted = truth["power"]
    channels, bands = list(first.channels), list(first.bands)
    n_bands, n_channels = len(bands), len(channels)
    rows_, cols_ = np.triu_indices(n_channels, k=1)
    k, b = channels.index(planted["channel"]), bands.index(planted["token_band"])
    n_pairs = len(rows_)
    measure = np.repeat(["coh", "wpli"], n_bands * n_pairs)
    band_of = np.tile(np.repeat(np.arange(n_bands), n_pairs), 2)
    touches = np.tile(np.tile((rows_ == k) | (cols_ == k), n_bands), 2)
    t, p = ttest_ind(tokens[labels == 1], tokens[labels == 0], equal_var=False)
    own = touches & (band_of == b)
    rest = ~own
    gains = np.array([people[p_]["gains"]["A"] for p_ in ids])
    difference = oracle_x[carriers == 1, 0].mean() - oracle_x[carriers == 0, 0].mean()
    return {
        "seed": seed,
        "n": len(ids),
        "duration_s": args.duration,
        "power": {key: planted[key] for key in ("channel", "token_band", "band_hz")},
        "gain": truth["gain"],
        "models": models,
        "planted_tokens": {
            "n": int(own.sum()),
            "max_abs_t": round(float(np.abs(t[own]).max()), 3),
            "share_p_below_0.05": round(float(np.mean(p[own] < 0.05)), 3),
            "coh_mean_difference": round(
                float(
                    tokens[labels == 1][:, own & (measure == "coh")].mean()
                    - tokens[labels == 0][:, own & (measure == "coh")].mean()
                ),
                5,
            ),
            "wpli_mean_difference": round(
                float(
                    tokens[labels == 1][:, own & (measure == "wpli")].mean()
                    - tokens[labels == 0][:, own & (measure == "wpli")].mean()
                ),
                5,
            ),
        },
        "other_tokens": {
            "n": int(rest.sum()),
            "max_abs_t": round(float(np.abs(t[rest]).max()), 3),
            "share_p_below_0.05": round(float(np.mean(p[rest] < 0.05)), 3),
        },
        "log_power_difference": round(float(difference), 4),
        "two_log_mean_carrier_gain": round(float(2 * np.log(gains[carriers == 1]).mean()), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", required=True, help="comma list of simulation seeds")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--duration", type=int, default=60)
    parser.add_argument("--gain", type=float, default=DEFAULT_GAIN)
    parser.add_argument("--channel", default=None, help="--power-channel (default: drawn)")
    parser.add_argument("--band", default=None, help="--power-band (default: drawn)")
    parser.add_argument("--cv-seed", type=int, default=0)
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    from bench_ground_truth import POWER_ACCEPTANCE_SEED

    seeds = [int(s) for s in args.seeds.split(",")]
    if POWER_ACCEPTANCE_SEED in seeds:
        raise SystemExit(f"{POWER_ACCEPTANCE_SEED} is the acceptance seed: screen on others")
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "screen_power.log"
    started = time.time()
    report = {
        "benchmark": "screen_power",
        "machine": machine(),
        "studies": [screen(args.out, seed, args, log) for seed in seeds],
    }
    report["wall_seconds"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=2)
    (args.out / "screen_power.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
