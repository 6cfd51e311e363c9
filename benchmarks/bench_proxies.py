"""The interaction screen's places: distinct effects, or proxies of one?

On ground-truth studies whose planted sources spread to their channels' neighbours
(``simulate --scenario ... --spread``: one coupling is seen by many channel pairs, each in its
coherence and wPLI form), the screen's ``max_pairs`` places can fill with proxies of one
effect. This measures the screen alone (no transformer), per fold of the participant-wise
5-fold CV that ``train --cv 5 --seed 0`` makes, on the fold's training part (train + val
participants, as ``bench_ground_truth.py``'s ``screen_l1`` row), with the ``default`` preset's
screen settings: the screen runs once with ``CANDIDATES_PER_PLACE`` x ``max_pairs`` candidates
per set, then its candidates above the gate are grouped at each level of ``--levels`` (the
|correlation| of two candidates' recording-level products from which they are one group;
``none``: no grouping, the best ``max_pairs`` as before). Per level and fold:

  planted_kept    the planted pair (the two planted couplings, or the planted coupling with
                  age, any measures) is kept, as a group's first or as a proxy
  planted_first   the first kept pair's group holds the planted pair
  groups          kept groups (with ``none``: kept pairs) of the planted kind (entry pairs, or
                  entry-age pairs in an age study); ``n_kept`` of both kinds
  effect_groups   kept groups whose first is of the planted effect: both sides in the planted
                  bands on channels the planted sources reach (a coupling's own and the
                  neighbours its spread reaches), or such an entry with age
  bac             the screen + L1 logistic regression (``bench_ground_truth.l1_on_products``) on
                  the entries and the kept groups' products, for ``--bac-levels``; ``bac_members``
                  the same with each group's best ``--members`` proxies' products too

and, with ``--time LEVEL``, the whole screen's seconds per fold at ``none`` and at LEVEL (each
screen run as a fit runs it, 20 permutations; twice each, alternating; ``screen_s_median`` per
study).

Usage:
  python benchmarks/bench_proxies.py --out /tmp/gt [--scenarios interaction,age] [--n 300,600]
      [--seeds 17,29,41] [--spread 0.6] [--levels none,0.5,0.6,0.7,0.8,0.9]
      [--bac-levels none,0.8] [--members 2] [--time 0.8]
Studies are made (or reused) as ``bench_ground_truth.py`` makes them, under OUT. Prints one
JSON object (also OUT/bench_proxies.json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from bench_ground_truth import (
    REPO,
    fold_parts,
    l1_on_products,
    planted_test,
    screen_settings,
    study,
)
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

CV_FOLDS = 5


def effect_test(truth: dict):
    """``of_effect(kept)``: whether a kept interaction's dict joins the planted factors where
    their sources reach (module docs: ``effect_groups``)."""
    from eegformer_cli.simulation.scenarios import planted_couplings

    reaches = (truth.get("spread") or {}).get("reaches", {})
    factors: dict[str, list] = {}
    for name, coupling in planted_couplings(truth):
        near = (c for ch in coupling.channels for c in reaches.get(ch, ()))
        channels = {*coupling.channels, *near}
        factors.setdefault(name, []).append((coupling.token_band, channels))

    def touches(side) -> set[str]:
        if side == "age":
            return {"age"}
        _, band, first, second = side
        return {
            name
            for name, places in factors.items()
            for token_band, channels in places
            if band == token_band and {first, second} <= channels
        }

    def of_effect(kept: dict) -> bool:
        a, b = touches(kept["a"]), touches(kept["b"])
        if truth["scenario"] == "age":
            return "A" in a and b == {"age"}
        return ("A" in a and "B" in b) or ("B" in a and "A" in b)

    return of_effect


def regrouped(wide, features: np.ndarray, index: dict, age_z, max_pairs: int, level) -> list:
    """The kept interactions at ``level`` (None: not grouped), from a screen run with
    ``CANDIDATES_PER_PLACE`` x ``max_pairs`` places and no grouping (its kept ones are the
    candidates above the gate, best first per set)."""
    from eegformer_cli.training.interaction_screen import kept_groups

    kept = []
    for with_age, threshold in ((False, wide.pair_threshold), (True, wide.age_threshold)):
        candidates = [k for k in wide.kept if k.with_age == with_age]
        if not candidates:
            continue
        first = features[:, [index[k.a] for k in candidates]]
        second = age_z[:, None] if with_age else features[:, [index[k.b] for k in candidates]]
        kept += kept_groups(
            [(k.a, k.b) for k in candidates],
            np.array([k.score for k in candidates]),
            first * second,
            threshold,
            max_pairs,
            level,
        )
    return kept


def with_members(kept: list, members: int) -> list:
    """Each kept interaction followed by its best ``members`` proxies."""
    return [item for k in kept for item in (k, *k.proxies[:members])]


def screen_inputs(data, parts: dict):
    """The screen's inputs on a fold's training part, as ``fit.screen_fit`` forms them:
    features (n, P), labels, participants, z-scored ages, entries."""
    from eegformer_cli.training.interaction_screen import entry_means, entry_table

    fit_set, demographics = parts["fit_set"], parts["demographics"]
    features = np.stack(
        [
            entry_means(*fit_set.recording_arrays(r), parts["stats"])
            for r in range(len(fit_set.recordings))
        ]
    )
    age_z = np.nan_to_num((parts["ages"] - demographics["age_mean"]) / demographics["age_std"])
    groups = np.array([r.participant_id for r in fit_set.recordings])
    return features, fit_set.labels, groups, age_z, entry_table(data.channels, data.bands)


def run_screen(inputs, config, seed: int, max_pairs: int, level):
    from eegformer_cli.training.interaction_screen import screen_interactions

    return screen_interactions(
        *inputs,
        max_pairs=max_pairs,
        n_permutations=config.interaction_permutations,
        null_quantile=config.interaction_null_quantile,
        seed=seed,
        proxy_correlation=level,
    )


def evaluate_fold(data, fold, truth: dict, args, index: dict) -> dict:
    """Every level's figures on one fold (module docs)."""
    from eegformer_cli.training.fit import seed_of
    from eegformer_cli.training.interaction_screen import CANDIDATES_PER_PLACE

    config, seed = screen_settings(), seed_of(fold, 0)
    parts = fold_parts(data, fold)
    inputs = screen_inputs(data, parts)
    k = config.interaction_max_pairs
    wide = run_screen(inputs, config, seed, CANDIDATES_PER_PLACE * k, None)
    is_planted, of_effect = planted_test(truth), effect_test(truth)
    kind = "age" if truth["scenario"] == "age" else "pair"
    out: dict = {"n_candidates": len(wide.kept), "levels": {}}
    for name in args.levels:
        level = None if name == "none" else float(name)
        kept = regrouped(wide, inputs[0], index, inputs[3], k, level)
        mine = [x for x in kept if x.with_age == (kind == "age")]
        groups = [[x.to_dict(), *(p.to_dict() for p in x.proxies)] for x in mine]
        row = {
            "planted_kept": any(is_planted(m) for g in groups for m in g),
            "planted_first": bool(groups) and any(is_planted(m) for m in groups[0]),
            "groups": len(mine),
            "n_kept": len(kept),
            "effect_groups": sum(of_effect(g[0]) for g in groups),
            "kept": [x.label() for x in mine],
        }
        if name in args.bac_levels:
            row["bac"] = float(l1_on_products(data, parts, kept, index, seed).bac)
            if level is not None and args.members:
                extended = with_members(kept, args.members)
                row["bac_members"] = float(l1_on_products(data, parts, extended, index, seed).bac)
        out["levels"][name] = row
    if args.time is not None:
        settings = {"none": None, f"{args.time:g}": args.time}
        for order in (list(settings), list(settings)[::-1]):  # alternating: load drifts
            for name in order:
                started = time.perf_counter()
                run_screen(inputs, config, seed, k, settings[name])
                out.setdefault(f"screen_s_{name}", []).append(time.perf_counter() - started)
    return out


def evaluate_study(args, scenario: str, n: int, seed: int, log: Path) -> dict:
    from eegformer_cli.simulation.scenarios import ground_truth_path, read_ground_truth
    from eegformer_cli.training.dataset import load_training_data
    from eegformer_cli.training.interaction_screen import entry_table
    from eegformer_cli.training.splits import cross_validation_folds

    data_dir, prep = study(args.out, scenario, n, seed, seed, 2, log, args.spread)
    truth = read_ground_truth(ground_truth_path(data_dir))
    data = load_training_data(prep, "diagnosis")
    config = replace(screen_settings(), cv=CV_FOLDS, seed=0)
    folds = cross_validation_folds(
        np.array([r.participant_id for r in data.recordings]),
        data.label_indices(),
        config.cv,
        1,
        config.seed,
        config.val_fraction,
    )
    index = {e: k for k, e in enumerate(entry_table(data.channels, data.bands))}
    per_fold = [evaluate_fold(data, fold, truth, args, index) for fold in folds]
    summary = {}
    for name in args.levels:
        rows = [f["levels"][name] for f in per_fold]
        summary[name] = {
            "planted_kept_folds": sum(r["planted_kept"] for r in rows),
            "planted_first_folds": sum(r["planted_first"] for r in rows),
            "nothing_kept_folds": sum(r["n_kept"] == 0 for r in rows),
            "groups_mean": float(np.mean([r["groups"] for r in rows])),
            "effect_groups_mean": float(np.mean([r["effect_groups"] for r in rows])),
            **{
                key: float(np.mean([r[key] for r in rows]))
                for key in ("bac", "bac_members")
                if key in rows[0]
            },
        }
    timed = {key for f in per_fold for key in f if key.startswith("screen_s_")}
    summary["screen_s_median"] = {
        key[len("screen_s_") :]: float(np.median([t for f in per_fold for t in f[key]]))
        for key in sorted(timed)
    }
    return {
        "scenario": scenario,
        "n": n,
        "seed": seed,
        "spread": args.spread,
        "factors": truth["factors"],
        "summary": summary,
        "folds": per_fold,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scenarios", default="interaction,age")
    parser.add_argument("--n", default="300,600")
    parser.add_argument("--seeds", default="17,29,41", help="simulation and layout seeds")
    parser.add_argument("--spread", type=float, default=0.6, help="simulate --spread (0: off)")
    parser.add_argument("--levels", default="none,0.5,0.6,0.7,0.8,0.9")
    parser.add_argument("--bac-levels", default="none,0.8")
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--time", type=float, help="time the whole screen at none and this")
    args = parser.parse_args()
    args.levels, args.bac_levels = args.levels.split(","), args.bac_levels.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONPATH", str(REPO))
    log = args.out / "bench_proxies.log"
    started = time.time()
    report = {"benchmark": "proxies", "machine": machine(), "studies": []}
    for scenario in args.scenarios.split(","):
        for n in (int(x) for x in args.n.split(",")):
            for seed in (int(x) for x in args.seeds.split(",")):
                result = evaluate_study(args, scenario, n, seed, log)
                report["studies"].append(result)
                brief = {"study": f"{scenario} n{n} seed{seed}", **result["summary"]}
                print(json.dumps(brief), file=sys.stderr, flush=True)
    report["wall_seconds"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=2)
    (args.out / "bench_proxies.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
