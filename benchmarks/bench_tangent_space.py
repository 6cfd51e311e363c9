"""The tangent-space reference: checked against an independent pyRiemann pipeline, and what it
costs ``preprocess`` and ``train``.

``--run RUN_DIR`` (a finished ``eegformer train`` run on a folder with band covariances):
refits, fold by fold of RUN_DIR/splits.json, a pipeline written here from pyRiemann and
scikit-learn alone (no eegformer import): each recording's stored covariances
(``connectomes/<id>.npz``'s ``covariance``) -> ``Shrinkage(0.1)`` -> per band
``TangentSpace(metric="riemann")`` fitted on the fold's training part (train + val
participants) -> StandardScaler -> class-balanced LogisticRegression, C from 1e-4 ... 1 by a
participant-wise StratifiedGroupKFold (5 folds, or as many as the smallest class has
participants, at least 2) seeded as the run's fold (``seed + 1000 (repeat + 1) + fold``,
or the fold's own ``seed``). Reports the largest difference from the run's out-of-fold
``tangent_space`` probabilities, both BACs (mean over folds) and the CPU time of this refit
(reading the covariances and every fold: about what the reference adds to ``train``).

``--timing BASELINE_SRC`` (a checkout of the code before the covariances, e.g. ``git archive``
of the previous commit): ``preprocess`` of msu (``--n-jobs 1``, a fresh folder, ``--repeats``
times, alternating ABBA..., median) and ``train`` of msu (split seed 0, ``default``, ``--n-jobs 2``;
once, or not with ``--no-train``) with the baseline code and with this one, each in its own
process; process CPU time (user + sys of the command and its workers, what a loaded shared
machine distorts least), wall time and the size of the connectome files; and, in this
process, the CPU time of the token computation alone with and without the covariances.

Usage:
  python benchmarks/bench_tangent_space.py --run RUN_DIR [--data PREP]
  python benchmarks/bench_tangent_space.py --timing /tmp/base --out /tmp/ts-timing [--no-train]
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

REPO = Path(__file__).resolve().parents[1]
MSU = REPO.parent / "shared" / "data" / "msu-schizophrenia"
C_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def independent_oof(run_dir: Path, data_dir: Path | None) -> dict:
    """The independent pipeline's out-of-fold probabilities against the run's."""
    from pyriemann.estimation import Shrinkage
    from pyriemann.tangentspace import TangentSpace
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score
    from sklearn.model_selection import GridSearchCV, StratifiedGroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    start = time.process_time()
    config = json.loads((run_dir / "config.json").read_text())
    data_dir = data_dir or Path(config["data_dir"])
    labels = config["labels"]
    seed = config["train_config"]["seed"]
    manifest = [
        row
        for row in _rows(data_dir / "manifest.tsv")
        if row["status"] == "ok" and row[config["label_column"]] not in ("", "n/a")
    ]
    ids = [row["recording_id"] for row in manifest]
    groups = np.array([row["participant_id"] for row in manifest])
    y = np.array([labels.index(row[config["label_column"]].strip()) for row in manifest])
    raw = np.stack([np.load(data_dir / row["connectome"])["covariance"] for row in manifest])
    shrunk = np.stack([Shrinkage(shrinkage=0.1).transform(c.astype(np.float64)) for c in raw])
    run_probs = {
        (int(r["repeat"]), int(r["fold"]), r["recording_id"]): [
            float(r[f"prob_{label}"]) for label in labels
        ]
        for r in _rows(run_dir / "oof_predictions.tsv")
        if r["model"] == "tangent_space"
    }
    largest, bac_here, bac_run = 0.0, [], []
    for fold in json.loads((run_dir / "splits.json").read_text())["folds"]:
        fit = np.isin(groups, fold["train"] + fold["val"])
        test = np.isin(groups, fold["test"])
        fold_seed = fold.get("seed", seed + 1000 * (fold["repeat"] + 1) + fold["fold"])
        with threadpool_limits(limits=1):
            spaces = [
                TangentSpace(metric="riemann").fit(shrunk[fit, b]) for b in range(shrunk.shape[1])
            ]
        vectors = np.concatenate(
            [space.transform(shrunk[:, b]) for b, space in enumerate(spaces)], axis=1
        )
        per_class = [len(set(groups[fit][y[fit] == k])) for k in np.unique(y[fit])]
        search = GridSearchCV(
            make_pipeline(
                StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=5000)
            ),
            {"logisticregression__C": list(C_GRID)},
            scoring="balanced_accuracy",
            cv=StratifiedGroupKFold(
                max(2, min(5, min(per_class))), shuffle=True, random_state=fold_seed
            ),
        )
        with threadpool_limits(limits=1):
            search.fit(vectors[fit], y[fit], groups=groups[fit])
        probs = np.zeros((test.sum(), len(labels)))
        probs[:, search.classes_] = search.predict_proba(vectors[test])
        theirs = np.array(
            [run_probs[(fold["repeat"], fold["fold"], rid)] for rid in np.array(ids)[test]]
        )
        largest = max(largest, float(np.abs(probs - theirs).max()))
        bac_here.append(balanced_accuracy_score(y[test], probs.argmax(axis=1)))
        bac_run.append(balanced_accuracy_score(y[test], theirs.argmax(axis=1)))
    cpu_s = time.process_time() - start
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {
        "run": str(run_dir),
        "data": str(data_dir),
        "n_folds": len(bac_here),
        "cpu_s": cpu_s,
        "largest_probability_difference": largest,
        "bac_independent": float(np.mean(bac_here)),
        "bac_run_oof": float(np.mean(bac_run)),
        "bac_metrics_json": metrics["models"]["tangent_space"]["mean"]["bac"],
        "models": {
            name: {"bac": m["mean"]["bac"], "bac_std": m["std"]["bac"], "auroc": m["mean"]["auroc"]}
            for name, m in metrics["models"].items()
        },
        "comparisons": [
            {key: c[key] for key in ("reference", "mean_difference", "ci95", "p_value")}
            for c in metrics.get("comparisons", [])
        ],
    }


def _timed(command: list[str], source: Path) -> dict:
    """Run ``command`` with ``source`` first on PYTHONPATH: wall and CPU seconds (its process
    and every worker it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=source,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(source)},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "load_average_end": os.getloadavg(),
    }


def token_cost(baseline: Path, repeats: int = 3, calls: int = 50) -> dict:
    """CPU ms per msu-shaped recording (4 segments of 5 windows, 16 channels, 3 s at 128 Hz,
    8 bands) of the baseline's ``recording_connectivity`` and this code's ``recording_tokens``
    (the same plus the covariances), in this process, alternating; the best of ``repeats``."""
    import importlib.util

    sys.path.insert(0, str(REPO))
    from eegformer_cli.connectivity.bands import BAND_PRESETS
    from eegformer_cli.connectivity.tokens import recording_tokens

    spec = importlib.util.spec_from_file_location(
        "baseline_tokens", baseline / "eegformer_cli" / "connectivity" / "tokens.py"
    )
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    segments = np.random.default_rng(0).standard_normal((4, 5, 16, 384))
    best = {"baseline": np.inf, "this": np.inf}
    for _ in range(repeats):
        for name, function in (
            ("baseline", old.recording_connectivity),
            ("this", recording_tokens),
        ):
            start = time.process_time()
            for _ in range(calls):
                function(segments, 128.0, BAND_PRESETS["default"])
            best[name] = min(best[name], (time.process_time() - start) / calls * 1e3)
    return {"cpu_ms_per_recording": best}


def timing(baseline: Path, out: Path, repeats: int, train: bool) -> dict:
    """Preprocess msu ``repeats`` times with the baseline code and this code, alternating, each
    into a fresh folder (medians), then train msu once with each (``train``)."""
    import shutil

    sources = {"baseline": baseline.resolve(), "this": REPO}
    results = {name: {"preprocess": []} for name in sources}
    results["tokens"] = token_cost(baseline.resolve())
    for repeat in range(repeats):  # ABBA: a load that drifts weighs on both codes alike
        for name, source in list(sources.items())[:: 1 if repeat % 2 == 0 else -1]:
            prep = out / f"prep-{name}"
            shutil.rmtree(prep, ignore_errors=True)
            results[name]["preprocess"].append(
                _timed(
                    [
                        sys.executable,
                        "-m",
                        "eegformer_cli",
                        "preprocess",
                        str(MSU),
                        "--out",
                        str(prep),
                        "--n-jobs",
                        "1",
                    ],
                    source,
                )
            )
    for name, source in sources.items():
        prep, run = out / f"prep-{name}", out / f"run-{name}"
        files = list((prep / "connectomes").glob("*.npz"))
        results[name].update(
            preprocess_cpu_s=float(np.median([r["cpu_s"] for r in results[name]["preprocess"]])),
            connectome_bytes=sum(f.stat().st_size for f in files),
            n_files=len(files),
        )
        if train:
            results[name]["train"] = _timed(
                [
                    sys.executable,
                    "-m",
                    "eegformer_cli",
                    "train",
                    str(prep),
                    "--out",
                    str(run),
                    "--label-column",
                    "diagnosis",
                    "--seed",
                    "0",
                    "--cv",
                    "5",
                    "--repeats",
                    "3",
                    "--n-jobs",
                    "2",
                    "--overwrite",
                ],
                source,
            )
            results[name]["run"] = str(run)
        print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
    base, this = results["baseline"], results["this"]
    results["growth"] = {
        "preprocess_cpu": this["preprocess_cpu_s"] / base["preprocess_cpu_s"] - 1,
        "connectome_bytes": this["connectome_bytes"] / base["connectome_bytes"] - 1,
    }
    if train:
        results["growth"]["train_cpu"] = this["train"]["cpu_s"] / base["train"]["cpu_s"] - 1
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a finished train run folder to check")
    parser.add_argument("--data", type=Path, help="its preprocess folder (default: config.json's)")
    parser.add_argument(
        "--timing",
        type=Path,
        metavar="BASELINE_SRC",
        help="time preprocess and train against this checkout",
    )
    parser.add_argument("--out", type=Path, help="folder for --timing's outputs")
    parser.add_argument("--repeats", type=int, default=3, help="preprocess runs per code")
    parser.add_argument("--no-train", action="store_true", help="time preprocess only")
    args = parser.parse_args()
    results = {"machine": {**machine(), "load_average_start": os.getloadavg()}}
    if args.timing:
        args.out.mkdir(parents=True, exist_ok=True)
        results["timing"] = timing(args.timing, args.out, args.repeats, not args.no_train)
    if args.run:
        results["check"] = independent_oof(args.run, args.data)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
