"""The learning curve of ``train --learning-curve``: how the balanced accuracy grows with the
study's participants, and what a larger study would reach.

Inside each outer fold, the training part (its train + val participants) is cut to nested,
stratified participant subsets (the config's ``learning_curve_fractions`` of it: 25, 50 and
75 % unless a ``--config`` file sets others; drawn with the fold's seed: the same participants
for every model, each subset inside the larger ones); a subset gets its own inner validation
split (the run's ``val_fraction``, with a seed of the fold's) and is refit with the run's
stored config through the fold runner (:func:`~eegformer_cli.training.fold_job.run_fold`:
XAIguiFormer and the references, the transformer's keep rule included), then scored on the
fold's own test participants. The whole
training part is the run itself: its fold records are the last point. A fraction whose subset
is too small for the validation split in some fold is skipped for every fold, and said.

The fit, the bootstrap and the projection are :mod:`eegformer_cli.evaluation.learning_curve`'s;
what this module writes is ``sample_size``'s ``learning_curve``, ``projection`` and
``learning_curve_run`` in ``metrics.json``.

Each refit is stored, atomically, in ``folds/learning_curve/<fold>_<percent>pct.json``
(:mod:`run_folder`) as it finishes, so a rerun (or ``train --merge RUN --learning-curve``, also
of a run of an earlier version) computes only the missing ones; ``--n-jobs`` spreads the refits
over processes, and a ``--fold`` job with ``--learning-curve`` refits its own fold's subsets
beside its fold record, for the merge to collect.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

from eegformer_cli import console
from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.evaluation import learning_curve as curve_maths
from eegformer_cli.evaluation.run_metrics import LearningCurveRun, RunMetrics
from eegformer_cli.experiment import run_folder
from eegformer_cli.parallel import process_pool
from eegformer_cli.training import splits
from eegformer_cli.training.fold_record import FoldRecord

#: What the curve's refits leave to the end of the run, in ``metrics.json``'s ``incomplete``.
PENDING = "the learning curve not finished"


def check_settings(learning_curve: bool, n_folds: int | None = None) -> None:
    """UsageError for ``--learning-curve`` under torchrun (the refits run in one process and
    its ``--n-jobs`` workers) or with fewer than 2 folds (``n_folds``: a holdout has no curve
    over folds)."""
    if not learning_curve:
        return
    from eegformer_cli.training import distributed

    if distributed.process_place().world_size > 1:
        raise UsageError(
            "--learning-curve cannot run under torchrun",
            hint="train without it, then add it to the finished run: "
            "eegformer train --merge RUN_DIR --learning-curve",
        )
    if n_folds is not None and n_folds < 2:
        raise UsageError(
            f"--learning-curve needs cross-validation (at least 2 folds); this run has {n_folds}",
            hint="use --cv 5 instead of --holdout",
        )


def made_before(run_dir: Path) -> bool:
    """Whether RUN_DIR's ``metrics.json`` holds a learning curve: a merge or a rerun without
    ``--learning-curve`` keeps it (its refits read from disk, a lost one refitted), since the
    summaries it rewrites would drop it. A damaged ``metrics.json`` holds none."""
    try:
        metrics = run_folder.read_metrics(run_dir)
    except InputDataError:
        return False
    return bool(metrics and metrics.sample_size and metrics.sample_size.learning_curve is not None)


def _participant_labels(plan) -> dict[str, str]:
    """Participant -> the label of most of its recordings (the first of them on a tie)."""
    counts: dict[str, Counter] = {}
    for rec in plan.data.recordings:
        counts.setdefault(rec.participant_id, Counter())[rec.label] += 1
    return {person: count.most_common(1)[0][0] for person, count in counts.items()}


def subset_fold(plan, fold: splits.Fold, fraction: float, labels: dict[str, str]) -> splits.Fold:
    """``fold`` with its training part cut to ``fraction`` of its participants
    (:func:`learning_curve.nested_subsets`, the fold's seed) and split anew into train and
    val (the run's ``val_fraction``); the test participants and the seed stay the fold's.
    ``labels``: each participant's label. InputDataError when the subset is too small for the
    validation split."""
    from eegformer_cli.training.fit import seed_of
    from eegformer_cli.training.run_plan import recordings_of

    part = sorted(fold.train + fold.val)
    seed = seed_of(fold, plan.config.seed)
    chosen = curve_maths.nested_subsets(part, [labels[p] for p in part], [fraction], seed)[fraction]
    recs = recordings_of(plan.data, chosen)
    train, val = splits.inner_validation_split(
        np.array([r.participant_id for r in recs]),
        plan.data.label_indices(recs),
        plan.config.val_fraction,
        seed + 1,
        f"{fraction:.0%} of the training part of fold {fold.name} ({len(chosen)} participants)",
        "use more participants, or a larger val_fraction in a --config file",
    )
    return splits.Fold(fold.repeat, fold.fold, train, val, fold.test, fold.seed)


def plan_subsets(plan) -> tuple[dict[tuple[str, float], splits.Fold], list[str]]:
    """(fold name, fraction) -> that fold's subset (:func:`subset_fold`), for the fractions
    every fold of ``plan`` can make; and, for each fraction skipped, why (in words)."""
    labels = _participant_labels(plan)
    subsets, skipped = {}, []
    for fraction in plan.config.learning_curve_fractions:
        try:
            made = {fold.name: subset_fold(plan, fold, fraction, labels) for fold in plan.folds}
        except InputDataError as exc:
            skipped.append(f"{fraction:.0%} skipped: {exc.one_line()}")
            continue
        subsets.update({(name, fraction): fold for name, fold in made.items()})
    return subsets, skipped


def subset_record(plan, subset: splits.Fold, fraction: float, features: dict) -> dict:
    """One refit of ``subset`` (:func:`subset_fold`) through the fold runner: what its file
    holds (its participants, each model's scores and test predictions, the seconds)."""
    from eegformer_cli.training.fit import deterministic_algorithms
    from eegformer_cli.training.fold_job import run_fold  # torch: only when training

    start = time.perf_counter()
    with deterministic_algorithms(plan.device):  # a spawned worker does not inherit the flag
        result, _ = run_fold(plan, subset, features, attention=False)
    return {
        "repeat": subset.repeat,
        "fold": subset.fold,
        "fraction": fraction,
        "train": subset.train,
        "val": subset.val,
        "metrics": {name: scores.to_dict() for name, scores in result.metrics.items()},
        "oof": [
            [row["model"], row["participant_id"], row["label"], row["predicted"]]
            for row in result.oof
        ],
        "transformer_kept": (
            bool(result.linear_path["transformer_kept"]) if result.linear_path else None
        ),
        "seconds": time.perf_counter() - start,
    }


def _subset_job(job: tuple) -> dict:
    plan, subset, fraction, features = job
    return subset_record(plan, subset, fraction, features)


def compute_records(
    run_dir: Path, plan, folds: list[splits.Fold], features: dict, n_workers: int
) -> tuple[dict[tuple[str, float], dict], list[str]]:
    """The refits of ``folds``' subsets: read from disk where an earlier run wrote the same
    participants, else computed (on ``n_workers`` processes) and written as each finishes.
    Returns (fold name, fraction) -> record, and the skipped fractions' reasons."""
    subsets, skipped = plan_subsets(plan)
    for reason in skipped:
        console.log(f"learning curve: {reason}")
    wanted = {fold.name for fold in folds}
    records, pending = {}, []
    for (name, fraction), subset in subsets.items():
        if name not in wanted:
            continue
        record = run_folder.read_subset_record(run_dir, name, fraction)
        if record and [record.get(k) for k in ("fraction", "train", "val")] == [
            fraction,
            subset.train,
            subset.val,
        ]:
            records[name, fraction] = record
        else:
            pending.append((plan, subset, fraction, features))
    if pending:
        console.log(
            f"learning curve: {len(pending)} of {len(pending) + len(records)} refits to "
            f"compute (fractions {', '.join(f'{f:.0%}' for f in sorted({j[2] for j in pending}))})"
        )
    with process_pool(min(n_workers, len(pending))) as pool, console.progress_bar() as bar:
        task = bar.add_task(
            "learning curve", total=len(pending) + len(records), completed=len(records), status=""
        )
        done = (
            map(_subset_job, pending) if pool is None else pool.imap_unordered(_subset_job, pending)
        )
        for record in done:
            name = splits.Fold(record["repeat"], record["fold"], [], [], []).name
            run_folder.write_subset_record(run_dir, name, record)
            records[name, record["fraction"]] = record
            bar.advance(task)
    return records, skipped


def _fold_predictions(
    fold: str, n_training: int, scores: dict, rows, label_names: list[str]
) -> dict[str, curve_maths.FoldPredictions]:
    """Model -> its :class:`~learning_curve.FoldPredictions` on one fold: ``scores`` model ->
    its BAC, ``rows`` (model, participant, label, predicted) per test recording."""
    index = {name: i for i, name in enumerate(label_names)}
    by_model: dict[str, list] = {}
    for model, participant, label, predicted in rows:
        by_model.setdefault(model, []).append((participant, index[label], index[predicted]))
    return {
        model: curve_maths.FoldPredictions(
            fold=fold,
            n_training=n_training,
            bac=scores.get(model),
            participants=np.array([r[0] for r in by_model.get(model, [])], dtype=str),
            truth=np.array([r[1] for r in by_model.get(model, [])], dtype=int),
            predicted=np.array([r[2] for r in by_model.get(model, [])], dtype=int),
        )
        for model in scores
    }


def _whole_run(fold: splits.Fold, record: FoldRecord, label_names: list[str]) -> dict:
    """The run's own fold record as the curve's last point (model -> its predictions)."""
    rows = [(r["model"], r["participant_id"], r["label"], r["predicted"]) for r in record.oof]
    scores = {name: s.bac for name, s in record.metrics.items()}
    return _fold_predictions(fold.name, len(fold.train) + len(fold.val), scores, rows, label_names)


def summarise(
    plan, records: dict[tuple[str, float], dict], fold_records: list[FoldRecord], models, sample
) -> tuple[dict, dict]:
    """``sample_size``'s ``learning_curve`` and ``projection`` (model -> its curve, its
    projection) for ``models`` from the subsets' ``records`` and the run's ``fold_records``
    (in the order of ``plan.folds``); ``sample``: the run's :class:`SampleSize`."""
    labels = plan.data.label_names
    fractions = sorted({fraction for _, fraction in records})
    points: dict[str, dict[float, list]] = {model: {} for model in models}
    for fold, whole in zip(plan.folds, fold_records):
        per_fraction = {1.0: _whole_run(fold, whole, labels)}
        for fraction in fractions:
            record = records[fold.name, fraction]
            scores = {name: m.get("bac") for name, m in record["metrics"].items()}
            n = len(record["train"]) + len(record["val"])
            per_fraction[fraction] = _fold_predictions(fold.name, n, scores, record["oof"], labels)
        for model in models:
            for fraction, by_model in per_fraction.items():
                if model in by_model:
                    points[model].setdefault(fraction, []).append(by_model[model])
    share = float(
        np.mean(
            [
                (len(f.train) + len(f.val)) / (len(f.train) + len(f.val) + len(f.test))
                for f in plan.folds
            ]
        )
    )
    draws = curve_maths.bootstrap_draws(
        {fold.name: np.array(fold.test, dtype=str) for fold in plan.folds},
        curve_maths.N_BOOTSTRAP,
        plan.config.seed,
    )
    curves, projection = {}, {}
    for model in models:
        complete = {f: v for f, v in points[model].items() if len(v) == len(plan.folds)}
        curves[model], projection[model] = curve_maths.model_curve(
            complete, share, sample.n_participants, draws, sample.unit, 1 / len(labels)
        )
    return curves, projection


def run_learning_curve(
    run_dir: Path,
    plan,
    features: dict,
    metrics: RunMetrics,
    fold_records: list[FoldRecord],
    n_workers: int,
) -> RunMetrics:
    """Refit the subsets not on disk yet (:func:`compute_records`, on ``n_workers``
    processes), then add the learning curve to ``metrics``' ``sample_size`` and rewrite
    ``RUN_DIR/metrics.json``; returns metrics. ``fold_records``: the run's, in fold order."""
    records, skipped = compute_records(run_dir, plan, plan.folds, features, n_workers)
    sample = metrics.sample_size
    assert sample is not None  # write_summaries always assesses it
    curves, projection = summarise(plan, records, fold_records, list(metrics.models), sample)
    run = LearningCurveRun(
        fractions=sorted({fraction for _, fraction in records}) + [1.0],
        skipped=skipped,
        n_bootstrap=curve_maths.N_BOOTSTRAP,
        seconds=float(sum(record["seconds"] for record in records.values())),
        statement=curve_maths.quoted_sentence(sample.statement, curves),
        method=curve_maths.METHOD,
    )
    sample = replace(sample, learning_curve=curves, projection=projection, learning_curve_run=run)
    metrics = replace(metrics, sample_size=sample)
    run_folder.write_metrics(run_dir, metrics)
    return metrics
