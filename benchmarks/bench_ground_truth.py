"""Ground truth: what XAIguiFormer learns when the cause of the label is known.

For each scenario of ``eegformer simulate --scenario`` (linear, interaction, age, null, power;
eegformer_cli/simulation/scenarios.py) this simulates a study, preprocesses it with the real command, and
trains every model on the same participant-wise 5-fold CV (one ``train --fold k`` process per
fold, two side by side; no final model):

  oracle            logistic regression on the planted pairs' coherence in the planted bands,
                    with the interaction given (products; age for ``age``): the practical limit
  logistic_regression  the built-in reference (every fold of every run; reported from default's)
  tangent_space     the second reference, the band covariances (reported from default's)
  linear_path       default's linear path alone (reported from default's)
  screen_l1         the interaction screen with default's settings, its kept products added
                    to every entry, a logistic regression with its penalty (L1 or L2) and C
                    chosen as the linear path's are (``linear_fit.fit_linear_path``): what
                    the transformer adds to it
  default           ``--preset default`` (both screens: entry pairs and entries with age)
  no_interactions   ``--no-interactions`` (no screen of entry pairs)
  no_age_interactions  ``--no-age-interactions`` (no screen of entries with age)
  no_screens        both (the model of earlier versions)
  no_xai            ``--no-xai`` (coarse pass only)
  tokenizer_only    the tokenizer and head, no transformer layer
  no_drofe          ``--frequency-encoding none``
  age_withheld      default on the same connectomes with every age set to n/a

Per scenario at ``--n`` (default 300), so that the whole benchmark fits a working session on 2
cores: linear default, no_screens (the screens cost the linear case nothing); interaction
default, no_interactions; age default, no_age_interactions; null default; power default
(``--variants`` runs any list instead). At ``--n-large`` participants (default 1000) interaction default, and age
default, no_drofe and no_age_interactions (the paired differences the acceptance asks for).
``--skip-small`` runs only those, so two processes can share the work. Each fold's kept
interactions are reported, and in how many folds the planted one was kept first.

Paired differences (variant minus default, and default minus the logistic regression) use the
corrected resampled t-test over the same folds. The null scenario also runs the shortcut audit
and a 100-permutation test (``train --permutations 100``, which also fits a final model: the
only one).

Explanations (``--explain``): a model trained on 80 % of the linear / interaction study
(``train --holdout 0.2``) explains a fresh study of the same layout (other participants, same
planted pairs): how often the planted band ranks first by |band importance| in recordings that
carry the coupling, the AUROC of the planted cells' mean |channel-pair attribution| against
every other (pair, band) cell, the rank of the planted bands in mean |band importance|, the
share of recordings whose top 5 cells hold a planted one, and for the interaction study the
kept interaction's attribution against every (band, pair) cell's.

The acceptance seed is ACCEPTANCE_SEED (the power scenario's: POWER_ACCEPTANCE_SEED, used
without ``--seed``): it confirms, it is never used to choose a design. Screen on other seeds
(``--seed``; ``screen_power.py`` fits the power scenario's references alone).

The power scenario (a gain on one channel's own signal in one band: the band covariances see it,
coherence and wPLI do not) reports its oracle (a logistic regression on the planted channel's
log band power over the other channels') and each model's 95 % interval against chance, as the
null study does. ``--power-channel``, ``--power-band`` and ``--gain`` vary its cause (default:
the channel and band drawn from the seed, ``simulate``'s gain).

The dynamic scenario (``--scenarios dynamic``; not in the default list) plants two couplings in
bursts in everyone, together in patients and in turn in controls, so that no entry's recording
mean or spread tells the classes apart, at ``simulate --strength`` 1.5 (``STRENGTH``: a coupling
is on in half the segments). Its recordings last ``DURATION_S`` (120 s) and are
preprocessed with ``--epoch-length`` equal to the burst grid's segment (``SEGMENT_S``, 12 s: 10
segments, each burst on whole segments); its oracle reads the planted pairs' mean per-segment
product of coherence, and it adds the row ``screen_segment_l1`` (``screen_dynamic.py``: a screen
of every per-segment product of two standardised entries, its kept products beside every
entry's recording mean, an L1 logistic regression: the bar the transformer must reach). Its own
acceptance seed: DYNAMIC_ACCEPTANCE_SEED (``screen_dynamic.py`` fits its references alone).
Other layouts of it (screening seeds): ``--duration``, ``--segment-length`` (the burst grid),
``--burst-segments``, ``--strength``, and ``--epoch-length`` (preprocess's segments, default the
grid's; another length or ``auto`` cuts segments that the bursts do not line up with).

Usage:
  python benchmarks/bench_ground_truth.py --out /tmp/gt [--seed 2711] [--n 300] [--n-large 1000]
      [--scenarios linear,interaction,age,null,power,dynamic] [--skip-large] [--explain] [--n-jobs 2]
      [--spread 0.6] [--power-channel Fz] [--power-band theta] [--gain 1.2]
      [--duration 300 --segment-length 21 --burst-segments 2 --epoch-length auto --strength 1.2]
``--spread W`` simulates every study with ``simulate --spread W`` (planted sources reach their
electrodes' neighbours, so each coupling has proxies; 0: off, the studies of earlier runs); each
scenario then also reports in how many folds the planted pair was kept, as a kept pair or one of
its proxies (``planted_kept_in_folds``).
A rerun into the same ``--out`` reuses the studies and every finished fold by name, so it goes on
only where the code that trains is the one that made them (``RUN.code`` beside each run folder);
otherwise it stops and asks for a fresh ``--out``.
Prints one JSON object (also OUT/bench_ground_truth.json).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from machine import machine  # benchmarks/machine.py (scripts run from this folder)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
EEGFORMER = [sys.executable, "-m", "eegformer_cli"]
#: Fixed before any run of the linear path on recording means, used once to confirm it. The
#: earlier acceptance seeds are spent (2711: the interaction screens' design; 9692: their
#: confirmation; 60221: the linear path per segment); their layouts are printed in
#: docs/benchmarks.md.
ACCEPTANCE_SEED = 30506
SPENT_ACCEPTANCE_SEEDS = (2711, 9692, 60221)
#: The power scenario's own acceptance seed, drawn at random and fixed before any run of it.
POWER_ACCEPTANCE_SEED = 22489
#: The dynamic scenario's own acceptance seed, drawn at random and fixed before any run of it.
DYNAMIC_ACCEPTANCE_SEED = 70486
CV_FOLDS = 5
#: Variants that need a config file: the file's text (written beside the runs).
CONFIG_FILES = {
    "tokenizer_only": "[model]\nn_layers = 0\nxai_refinement = false\n",
    "no_dynamic_pairs": "dynamic_pairs = false\n",  # without the within-recording screen
}
VARIANTS = {
    "default": [],
    "no_xai": ["--no-xai"],
    "no_drofe": ["--frequency-encoding", "none"],
    "no_interactions": ["--no-interactions"],
    "no_age_interactions": ["--no-age-interactions"],
    "no_screens": ["--no-interactions", "--no-age-interactions"],
    "age_withheld": [],  # default on a copy of the data without ages
    **{name: ["--config", f"{{{name}_toml}}"] for name in CONFIG_FILES},
}
#: Recording length (s) per scenario (60 s unless named), and preprocess's --epoch-length
#: where it is set: the dynamic scenario's bursts sit on a grid of 12 s segments (simulate
#: --segment-length), which preprocess's segments must be, 10 of them.
DURATION_S = {"dynamic": 120}
SEGMENT_S = {"dynamic": 12}
#: The grids above before ``--segment-length``: a study on another grid is named for it.
DEFAULT_SEGMENT_S = dict(SEGMENT_S)
#: preprocess --epoch-length where it is not the burst grid's segment ("auto": preprocess's own
#: choice), and simulate --burst-segments where given: other layouts of the dynamic study
#: (``--duration``, ``--segment-length``, ``--epoch-length``, ``--burst-segments``, ``--strength``).
EPOCH_S: dict[str, str] = {}
BURST_SEGMENTS: dict[str, int] = {}
#: simulate --strength per scenario where not its default: a dynamic coupling is on in half the
#: segments only, and a stronger source brings its oracle near 1 (docs/benchmarks.md).
STRENGTH = {"dynamic": 1.5}
SMALL = {
    "dynamic": ["default"],
    "power": ["default"],
    "linear": ["default", "no_screens"],
    "interaction": ["default", "no_interactions"],
    "age": ["default", "no_age_interactions"],
    "null": ["default"],
}
LARGE = {
    "interaction": ["default"],
    "age": ["default", "no_drofe", "no_age_interactions"],
}


def run(command: list[str], log: Path) -> None:
    with open(log, "a") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}; see {log}")


def study(
    out: Path,
    scenario: str,
    n: int,
    seed: int,
    layout_seed: int,
    n_jobs: int,
    log: Path,
    spread: float = 0.0,
    power: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    """Simulate and preprocess one study (reused when already there); (study dir, prep dir).
    ``spread``: ``simulate --spread`` (0: off); ``power``: the power scenario's options
    (:func:`power_options`)."""
    name = (
        f"{scenario}-n{n}-seed{seed}-layout{layout_seed}"
        + (f"-spread{spread:g}" if spread else "")
        + "".join(f"-{v}" for v in power[1::2])
        + (f"-d{DURATION_S[scenario]}" if scenario in DURATION_S else "")
        + (f"-strength{STRENGTH[scenario]:g}" if scenario in STRENGTH else "")
        + (f"-s{SEGMENT_S[scenario]}" if _other_layout(scenario) else "")
        + (f"-b{BURST_SEGMENTS[scenario]}" if scenario in BURST_SEGMENTS else "")
        + (f"-e{EPOCH_S[scenario]}" if scenario in EPOCH_S else "")
    )
    segment = ["--segment-length", str(SEGMENT_S[scenario])] if scenario in SEGMENT_S else []
    segment += ["--strength", str(STRENGTH[scenario])] if scenario in STRENGTH else []
    if scenario in BURST_SEGMENTS:
        segment += ["--burst-segments", str(BURST_SEGMENTS[scenario])]
    data, prep = out / "studies" / name, out / "prep" / name
    if not (prep / "manifest.tsv").exists():
        run(
            EEGFORMER
            + [
                "simulate",
                "--out",
                str(data),
                "--scenario",
                scenario,
                "--n-participants",
                str(n),
                "--duration",
                str(DURATION_S.get(scenario, 60)),
                *segment,
                "--seed",
                str(seed),
                "--layout-seed",
                str(layout_seed),
                *(["--spread", str(spread)] if scenario != "power" else []),
                *power,
                "--overwrite",
            ],
            log,
        )
        epoch = EPOCH_S.get(scenario, SEGMENT_S.get(scenario, "auto"))
        epochs = ["--epoch-length", str(epoch)] if epoch != "auto" else []
        run(
            EEGFORMER
            + ["preprocess", str(data), "--out", str(prep), "--n-jobs", str(n_jobs), *epochs],
            log,
        )
    return data, prep


def _other_layout(scenario: str) -> bool:
    """Whether the scenario's burst grid, burst length or preprocess segments are not its own
    (``set_dynamic_layout``): its study's name then says them."""
    return (
        scenario in EPOCH_S
        or scenario in BURST_SEGMENTS
        or SEGMENT_S.get(scenario) != DEFAULT_SEGMENT_S.get(scenario)
    )


def power_options(scenario: str, args) -> tuple[str, ...]:
    """``simulate``'s options of the power scenario from the command line (``--power-channel``,
    ``--power-band``, ``--gain``: those given); none for the others."""
    if scenario != "power":
        return ()
    given = [
        ("--power-channel", args.power_channel),
        ("--power-band", args.power_band),
        ("--gain", args.gain),
    ]
    return tuple(x for option, value in given if value is not None for x in (option, str(value)))


def set_dynamic_layout(args) -> None:
    """The dynamic study's layout from the command line, where given: recording length, burst
    grid, burst length, source strength, and preprocess's segment length (default: the grid's;
    another one, or "auto", cuts segments that the bursts do not line up with)."""
    given = [
        (DURATION_S, args.duration),
        (SEGMENT_S, args.segment_length),
        (EPOCH_S, args.epoch_length),
        (BURST_SEGMENTS, args.burst_segments),
        (STRENGTH, args.strength),
    ]
    for table, value in given:
        if value is not None:
            table["dynamic"] = value


def scenario_seed(scenario: str, seed: int | None) -> int:
    """``--seed``, else the scenario's acceptance seed (power and dynamic have their own)."""
    if seed is not None:
        return seed
    own = {"power": POWER_ACCEPTANCE_SEED, "dynamic": DYNAMIC_ACCEPTANCE_SEED}
    return own.get(scenario, ACCEPTANCE_SEED)


def without_ages(prep: Path) -> Path:
    """A preprocess folder sharing ``prep``'s connectomes with every age set to n/a."""
    copy = prep.parent / f"{prep.name}-noage"
    if not (copy / "manifest.tsv").exists():
        copy.mkdir(parents=True, exist_ok=True)
        if not (copy / "connectomes").exists():
            (copy / "connectomes").symlink_to((prep / "connectomes").resolve())
        shutil.copy(prep / "preprocess.json", copy / "preprocess.json")
        with open(prep / "manifest.tsv", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        for row in rows:
            row["age"] = "n/a"
        with open(copy / "manifest.tsv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
            writer.writeheader()
            writer.writerows(rows)
    return copy


def code_stamp() -> str:
    """The code that trains: the committed ``eegformer_cli`` tree's hash and a hash of its
    uncommitted changes to tracked files (a commit of docs or benchmarks alone leaves it as it
    is; a new file not yet added to git is not seen)."""
    import hashlib

    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True).stdout

    changes = hashlib.sha256(git("diff", "HEAD", "--", "eegformer_cli")).hexdigest()[:12]
    return f"{git('rev-parse', 'HEAD:eegformer_cli').decode().strip()} {changes}"


def reusable(run_dir: Path) -> None:
    """Refuse to go on with a run folder that other code made (its finished folds would be
    reused as they are, by name); stamp a new one with :func:`code_stamp` (``RUN.code``
    beside it: ``train`` makes the folder)."""
    stamp, here = run_dir.parent / f"{run_dir.name}.code", code_stamp()
    if run_dir.exists():
        made = stamp.read_text().strip() if stamp.exists() else "unknown code"
        if made != here:
            raise SystemExit(f"{run_dir} was made by {made}, not {here}: give a fresh --out")
        return
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(here + "\n")


def cross_validate(prep: Path, run_dir: Path, variant: str, n_jobs: int, log: Path) -> float:
    """``train --fold k`` for every fold (``n_jobs`` side by side); returns the wall time (s)."""
    reusable(run_dir)  # makes its parent
    files = {}
    for name, text in CONFIG_FILES.items():
        files[f"{name}_toml"] = run_dir.parent / f"{name}.toml"
        files[f"{name}_toml"].write_text(text)
    flags = [f.format(**files) for f in VARIANTS[variant]]
    base = EEGFORMER + [
        "train",
        str(prep),
        "--out",
        str(run_dir),
        "--label-column",
        "diagnosis",
        "--cv",
        str(CV_FOLDS),
        "--seed",
        "0",
        *flags,
    ]
    started = time.time()
    pending = [k for k in range(CV_FOLDS) if not (run_dir / "folds" / f"r0_f{k}.json").exists()]
    if pending:
        run(base + ["--fold", str(pending[0])], log)  # the first job makes the run folder
        with ThreadPoolExecutor(n_jobs) as pool:
            list(pool.map(lambda k: run(base + ["--fold", str(k)], log), pending[1:]))
    return time.time() - started


def fold_results(run_dir: Path) -> list:
    """The run's fold records (:class:`~eegformer_cli.training.fold_record.FoldRecord`), in
    fold order."""
    from eegformer_cli.experiment.run_folder import read_fold_record

    names = [p.stem for p in (run_dir / "folds").glob("*.json") if p.stem != "final"]
    results = [read_fold_record(run_dir, name) for name in names]
    return sorted(results, key=lambda r: (r.repeat, r.fold))


def oracle_per_fold(truth: dict, prep: Path, run_dir: Path) -> list:
    """The oracle's metrics per fold, on the run's own splits."""
    from eegformer_cli.evaluation.metrics import classification_metrics
    from eegformer_cli.preprocess import load_connectome
    from eegformer_cli.simulation.scenarios import LABELS, oracle_features, oracle_model
    from eegformer_cli.training.splits import load_splits

    with open(prep / "manifest.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["status"] == "ok"]
    by_participant = {r["participant_id"]: r for r in rows}
    truth_age = {p["participant_id"]: p["age"] for p in truth["participants"]}
    connectomes = {r["participant_id"]: load_connectome(prep / r["connectome"]) for r in rows}
    features = oracle_features(truth, connectomes, truth_age)
    labels = {pid: LABELS.index(r["diagnosis"]) for pid, r in by_participant.items()}
    _, folds = load_splits(run_dir / "splits.json")
    out = []
    for fold in folds:
        fit = fold.train + fold.val
        model = oracle_model(fold.fold).fit(
            np.stack([features[p] for p in fit]), [labels[p] for p in fit]
        )
        probs = model.predict_proba(np.stack([features[p] for p in fold.test]))
        out.append(classification_metrics(np.array([labels[p] for p in fold.test]), probs, 1))
    return out


def planted_test(truth: dict):
    """``is_planted(kept)`` for a kept interaction's dict (``Interaction.to_dict``): whether it
    joins two planted couplings (an entry pair, any measures) or a planted coupling with age
    (each coupling in its own token band)."""
    from eegformer_cli.simulation.scenarios import planted_couplings

    sides = {(c.token_band, *sorted(c.channels)) for _, c in planted_couplings(truth)}

    def planted(side) -> bool:
        return side != "age" and (side[1], *sorted(side[2:])) in sides

    return lambda kept: planted(kept["a"]) and (kept["b"] == "age" or planted(kept["b"]))


def planted_first(truth: dict, kept_per_fold: list[list[dict]]) -> dict:
    """Per fold, whether the screen's best entry pair joins the planted couplings of two
    factors (interaction), and whether its best entry-age pair is a planted coupling (age)."""
    is_planted = planted_test(truth)
    out = {}
    for kind, with_age in (("pair", False), ("age", True)):
        firsts = [
            next((k for k in kept if (k["b"] == "age") == with_age), None) for kept in kept_per_fold
        ]
        out[kind] = [None if k is None else is_planted(k) for k in firsts]
    return out


def planted_kept(truth: dict, kept_per_fold: list[list[dict]]) -> dict:
    """Per fold, whether the planted entry pair (pair) and the planted entry-age pair (age) are
    among the kept interactions, as one of them or as one's proxy (``proxies``)."""
    is_planted = planted_test(truth)
    out = {}
    for kind, with_age in (("pair", False), ("age", True)):
        out[kind] = [
            any(
                is_planted(k) or any(is_planted(p) for p in k.get("proxies", []))
                for k in kept
                if (k["b"] == "age") == with_age
            )
            for kept in kept_per_fold
        ]
    return out


def screen_settings():
    """The training config whose screen settings the "screen + L1 logistic" row uses: the
    ``default`` preset's, with both candidate sets on."""
    from eegformer_cli.training.config import TrainConfig

    config = TrainConfig.preset_config("default")
    config.interactions = config.age_interactions = True
    return config


def _screen_design(dataset, stats: dict, demographics: dict, kept: list, index: dict):
    """Every recording's mean standardised entries, then the products of ``kept`` (each with
    sides ``a`` and ``b``: an entry, or age)."""
    from eegformer_cli.training.interaction_screen import entry_means

    x = np.stack(
        [entry_means(*dataset.recording_arrays(r), stats) for r in range(len(dataset.recordings))]
    )
    age_z = np.nan_to_num(
        (np.array([r.age for r in dataset.recordings]) - demographics["age_mean"])
        / demographics["age_std"]
    )
    products = [x[:, index[k.a]] * (age_z if k.b == "age" else x[:, index[k.b]]) for k in kept]
    return np.column_stack([x, *products]) if products else x


def fold_parts(data, fold) -> dict:
    """One fold's training part (train + val participants, as the references, in the fold's
    order) and test part: their datasets, the training statistics of the entries (``stats``)
    and of age (``demographics``), and the training ages."""
    from eegformer_cli.training.dataset import ConnectomeDataset
    from eegformer_cli.training.model_file import demographic_stats
    from eegformer_cli.training.standardise import connectivity_stats

    by_participant: dict[str, list] = {}
    for rec in data.recordings:
        by_participant.setdefault(rec.participant_id, []).append(rec)
    fit = [r for p in fold.train + fold.val for r in by_participant[p]]
    test = [r for p in fold.test for r in by_participant[p]]
    fit_set = ConnectomeDataset(fit, data.label_names, data.channels, data.bands)
    test_set = ConnectomeDataset(test, data.label_names, data.channels, data.bands)
    ages = np.array([r.age for r in fit])
    return {
        "fit_set": fit_set,
        "test_set": test_set,
        "stats": connectivity_stats(fit_set.recording_arrays(r) for r in range(len(fit))),
        "ages": ages,
        "demographics": demographic_stats(ages) or {"age_mean": 0.0, "age_std": 1.0},
    }


def l1_on_products(data, parts: dict, kept: list, index: dict, seed: int):
    """The fold's test metrics of StandardScaler and an L1 logistic regression (balanced, C by
    the references' inner participant-wise CV) on every entry plus the products of ``kept``,
    fitted on the fold's training part (:func:`fold_parts`)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from eegformer_cli.evaluation.metrics import classification_metrics
    from eegformer_cli.evaluation.reference import reference_probabilities, search_logistic_c

    fit_set, test_set = parts["fit_set"], parts["test_set"]
    pipeline = make_pipeline(
        StandardScaler(),
        LogisticRegression(
            l1_ratio=1.0, solver="liblinear", class_weight="balanced", max_iter=5000
        ),
    )
    search = search_logistic_c(
        pipeline,
        _screen_design(fit_set, parts["stats"], parts["demographics"], kept, index),
        fit_set.labels,
        np.array([r.participant_id for r in fit_set.recordings]),
        seed,
    )
    probabilities = reference_probabilities(
        search,
        _screen_design(test_set, parts["stats"], parts["demographics"], kept, index),
        len(data.label_names),
    )
    return classification_metrics(test_set.labels, probabilities, 1)


def linear_path_on_products(data, parts: dict, kept: list, index: dict, seed: int):
    """The fold's test metrics of the linear path's fit (``linear_fit.fit_linear_path``:
    StandardScaler and a balanced logistic regression, L1 or L2 and C by the references' inner
    participant-wise CV, ``auto``) on every entry plus the products of ``kept``, fitted on the
    fold's training part (:func:`fold_parts`)."""
    from scipy.special import softmax

    from eegformer_cli.evaluation.metrics import classification_metrics
    from eegformer_cli.training.linear_fit import fit_linear_path

    fit_set, test_set = parts["fit_set"], parts["test_set"]
    linear = fit_linear_path(
        _screen_design(fit_set, parts["stats"], parts["demographics"], kept, index),
        fit_set.labels,
        np.array([r.participant_id for r in fit_set.recordings]),
        len(data.label_names),
        seed,
        "auto",
    )
    test = _screen_design(test_set, parts["stats"], parts["demographics"], kept, index)
    probabilities = softmax(test @ linear.weight.T + linear.bias, axis=1)
    return classification_metrics(test_set.labels, probabilities, 1)


def screen_l1_per_fold(prep: Path, folds: list, config) -> tuple[list, list[list[str]]]:
    """The "screen + L1 logistic" row, per fold of ``folds`` (the run's own splits): on the
    fold's training part (train + val participants, as the references), the recording means of
    the entries standardised as the model does, the same interaction screen the model runs
    (``config``'s settings, the fold's seed), the kept pairs' products (entry x entry, entry x
    z-scored age) beside every entry, then :func:`linear_path_on_products` (the penalty chosen
    as the linear path's: L1 or L2 by the inner CV). Returns (metrics per fold,
    kept pairs per fold)."""
    from eegformer_cli.training.dataset import load_training_data
    from eegformer_cli.training.fit import screen_fit, seed_of
    from eegformer_cli.training.interaction_screen import entry_table

    data = load_training_data(prep, "diagnosis")
    index = {e: k for k, e in enumerate(entry_table(data.channels, data.bands))}
    out, kept_per_fold = [], []
    for fold in folds:
        parts = fold_parts(data, fold)
        found = screen_fit(
            data, parts["fit_set"], parts["stats"], parts["ages"], config, seed_of(fold, 0)
        )
        kept_per_fold.append([k.label() for k in found.kept])
        out.append(linear_path_on_products(data, parts, found.kept, index, seed_of(fold, 0)))
    return out, kept_per_fold


def segment_l1_per_fold(prep: Path, folds: list) -> tuple[list, list[list[int]]]:
    """The dynamic study's "screen of per-segment products + L1" row, per fold of ``folds``
    (the run's own splits; ``screen_dynamic.screen_segment_l1`` on train + val, tested on the
    fold's test participants). Returns (metrics per fold, kept entry pairs per fold)."""
    from screen_dynamic import screen_segment_l1, segment_entries

    from eegformer_cli.evaluation.metrics import classification_metrics
    from eegformer_cli.preprocess import load_connectome
    from eegformer_cli.simulation.scenarios import LABELS

    with open(prep / "manifest.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["status"] == "ok"]
    index = {r["participant_id"]: k for k, r in enumerate(rows)}
    labels = np.array([LABELS.index(r["diagnosis"]) for r in rows])
    connectomes = [load_connectome(prep / r["connectome"]) for r in rows]
    segments = [segment_entries(c.coh, c.wpli) for c in connectomes]
    out, kept_per_fold = [], []
    for fold in folds:
        fit = np.array([index[p] for p in fold.train + fold.val])
        test = np.array([index[p] for p in fold.test])
        probability, kept = screen_segment_l1(segments, labels, fit, test, fold.fold)
        out.append(
            classification_metrics(labels[test], np.column_stack([1 - probability, probability]), 1)
        )
        kept_per_fold.append(kept)
    return out, kept_per_fold


def summary(per_fold: list) -> dict:
    from eegformer_cli.evaluation.metrics import summarise_folds

    summarised = summarise_folds(per_fold)
    return {
        "bac": summarised["mean"]["bac"],
        "bac_std": summarised["std"]["bac"],
        "auroc": summarised["mean"]["auroc"],
        "per_fold_bac": [round(float(m.bac), 4) for m in per_fold],
    }


def paired(a: list, b: list) -> dict:
    from eegformer_cli.evaluation.metrics import compare_folds

    c = compare_folds(a, b, 1 / (CV_FOLDS - 1))
    return {
        "mean_difference": c["mean_difference"],
        "ci95": c["ci95"],
        "p_value": c["p_value"],
        "better_equal_worse": [c["folds_better"], c["folds_equal"], c["folds_worse"]],
    }


def evaluate_scenario(
    out: Path,
    scenario: str,
    n: int,
    seed: int,
    variants: list[str],
    n_jobs: int,
    log: Path,
    spread: float = 0.0,
    power: tuple[str, ...] = (),
) -> dict:
    from eegformer_cli.evaluation.metrics import against_chance
    from eegformer_cli.simulation.scenarios import ground_truth_path, read_ground_truth
    from eegformer_cli.training.splits import load_splits

    data, prep = study(out, scenario, n, seed, seed, n_jobs, log, spread, power)
    truth = read_ground_truth(ground_truth_path(data))
    result = {
        "n": n,
        "seed": seed,
        "spread": spread,
        "rule": truth["rule"],
        "factors": truth["factors"],
        **({"power": truth["power"], "gain": truth["gain"]} if "power" in truth else {}),
        **({"dynamic": truth["dynamic"]} if "dynamic" in truth else {}),
        "models": {},
        "paired_vs_default": {},
        "seconds": {},
    }
    per_fold = {}
    for variant in variants:
        source = without_ages(prep) if variant == "age_withheld" else prep
        run_dir = out / "runs" / f"{prep.name}-{variant}"
        result["seconds"][variant] = round(cross_validate(source, run_dir, variant, n_jobs, log), 1)
        folds = fold_results(run_dir)
        per_fold[variant] = [f.metrics["xaiguiformer"] for f in folds]
        if variant == "default":
            per_fold["logistic_regression"] = [f.metrics["logistic_regression"] for f in folds]
            for name in ("linear_path", "tangent_space"):  # where the run has them
                if all(name in f.metrics for f in folds):
                    per_fold[name] = [f.metrics[name] for f in folds]
            per_fold["oracle"] = oracle_per_fold(truth, prep, run_dir)
            per_fold["screen_l1"], result["screen_l1_kept"] = screen_l1_per_fold(
                prep, load_splits(run_dir / "splits.json")[1], screen_settings()
            )
            if scenario == "dynamic":
                per_fold["screen_segment_l1"], result["screen_segment_l1_kept"] = (
                    segment_l1_per_fold(prep, load_splits(run_dir / "splits.json")[1])
                )
            result["kept_by_default"] = [
                (f.interaction_screen or {}).get("kept", []) for f in folds
            ]
            result["planted_first_in_folds"] = planted_first(truth, result["kept_by_default"])
            result["planted_kept_in_folds"] = planted_kept(truth, result["kept_by_default"])
    for name, folds in per_fold.items():
        result["models"][name] = summary(folds)
        if scenario in ("null", "power"):
            result["models"][name]["bac_ci95"] = against_chance(
                folds, "bac", 0.5, 1 / (CV_FOLDS - 1)
            )["ci95"]
    for name in per_fold:
        if name != "default":
            result["paired_vs_default"][name] = paired(per_fold["default"], per_fold[name])
    oracle = result["models"]["oracle"]["bac"]
    result["default_over_oracle"] = result["models"]["default"]["bac"] / oracle
    return result


def null_trust(out: Path, seed: int, n: int, n_jobs: int, log: Path, spread: float) -> dict:
    """The null study's shortcut audit and permutation test (a full ``train`` run)."""
    _, prep = study(out, "null", n, seed, seed, n_jobs, log, spread)
    run_dir = out / "runs" / f"{prep.name}-permutations"
    run(
        EEGFORMER
        + [
            "train",
            str(prep),
            "--out",
            str(run_dir),
            "--label-column",
            "diagnosis",
            "--cv",
            str(CV_FOLDS),
            "--seed",
            "0",
            "--permutations",
            "100",
            "--n-jobs",
            str(n_jobs),
        ],
        log,
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    test = metrics["permutation_test"]
    return {
        "flagged": metrics["shortcut_audit"]["flagged"],
        "p_values": {name: m["p_value"] for name, m in test["models"].items()},
        "observed_bac": {name: m["observed_bac"] for name, m in test["models"].items()},
    }


def explanation_check(
    out: Path, scenario: str, n: int, seed: int, n_jobs: int, log: Path, spread: float
) -> dict:
    """Train on one study (80 %), explain a fresh study of the same layout; see module docs."""
    from sklearn.metrics import roc_auc_score

    from eegformer_cli.simulation.scenarios import (
        ground_truth_path,
        planted_couplings,
        read_ground_truth,
    )

    _, prep = study(out, scenario, n, seed, seed, n_jobs, log, spread)
    fresh_data, fresh = study(out, scenario, 100, seed + 1, seed, n_jobs, log, spread)
    truth = read_ground_truth(ground_truth_path(fresh_data))
    run_dir = out / "runs" / f"{prep.name}-holdout"
    reusable(run_dir)
    if not (run_dir / "model.pt").exists():
        run(
            EEGFORMER
            + [
                "train",
                str(prep),
                "--out",
                str(run_dir),
                "--label-column",
                "diagnosis",
                "--holdout",
                "0.2",
                "--seed",
                "0",
            ],
            log,
        )
    explained = out / "explain" / f"{prep.name}-on-{fresh.name}"
    if not (explained / "recordings.csv").exists():
        shutil.rmtree(explained, ignore_errors=True)  # an interrupted earlier try
        run(
            EEGFORMER + ["explain", str(run_dir / "model.pt"), str(fresh), "--out", str(explained)],
            log,
        )
    participants = {p["participant_id"]: p for p in truth["participants"]}
    with open(explained / "recordings.csv", newline="") as handle:
        recordings = list(csv.DictReader(handle))
    planted = planted_couplings(truth)
    importance, pairs, carries = [], [], {name: [] for name, _ in planted}
    bands = channels = None
    for row in recordings:
        with np.load(explained / f"{row['recording_id']}.npz") as saved:
            importance.append(np.abs(saved["band_importance"]))
            pairs.append(np.abs(saved["channel_pairs"]))
            bands = [str(b) for b in saved["bands"]] if "bands" in saved else bands
            channels = [str(c) for c in saved["channels"]] if "channels" in saved else channels
        for name in carries:
            carries[name].append(participants[row["participant_id"]]["factors"][name] == 1)
    importance, pairs = np.stack(importance), np.stack(pairs)  # (n, T), (n, T, C, C)
    result = {"n_fresh": len(recordings)}
    order = np.argsort(-importance.mean(axis=0))
    result["band_rank_by_mean_abs_importance"] = [bands[i] for i in order]
    planted_bands = sorted({c.token_band for _, c in planted}, key=bands.index)
    result["planted_bands"] = planted_bands
    result["planted_band_ranks"] = {
        b: int(list(order).index(bands.index(b))) + 1 for b in planted_bands
    }
    carriers = np.array(carries[planted[0][0]])
    top = importance[carriers].argmax(axis=1)
    result["carriers"] = int(carriers.sum())
    result["planted_band_first_share"] = float(np.mean([bands[t] in planted_bands for t in top]))
    mean_pairs = pairs[carriers].mean(axis=0)  # (T, C, C)
    upper = np.triu_indices(len(channels), 1)
    cells = mean_pairs[:, upper[0], upper[1]]  # (T, n_pairs)
    positive = np.zeros_like(cells, dtype=bool)
    for _, coupling in planted:
        i, j = sorted(channels.index(c) for c in coupling.channels)
        k = list(zip(*upper)).index((i, j))
        positive[bands.index(coupling.token_band), k] = True
    result["planted_cell_auroc"] = float(roc_auc_score(positive.ravel(), cells.ravel()))
    # per carrier: is a planted (band, pair) cell among the recording's 5 strongest cells
    per_recording_cells = pairs[carriers][:, :, upper[0], upper[1]].reshape(int(carriers.sum()), -1)
    top5 = np.argsort(-per_recording_cells, axis=1)[:, :5]
    result["planted_cell_in_top5_share"] = float(
        np.mean([positive.ravel()[row].any() for row in top5])
    )
    if scenario == "interaction":
        result.update(_interaction_attribution(explained, recordings, planted, pairs, upper))
    if scenario == "dynamic":
        result.update(_dynamic_attribution(explained, recordings, participants, planted, truth))
    return result


def _segment_rows(explained: Path, recording_id: str) -> list[dict]:
    """``explain``'s segment table of one recording (its ``ID.segments.csv``)."""
    with open(explained / f"{recording_id}.segments.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _dynamic_attribution(explained: Path, recordings, participants, planted, truth) -> dict:
    """The dynamic study's explanations in time, over the patient recordings explained as
    patients: whether the two planted couplings are the two strongest cells of the transformer
    path's share (each cell's values summed over the segment table's rows, a cell absent from
    a segment's five counting 0), and whether the segments where both couplings burst carry
    more of the logit than the others (their mean contribution against the rest's)."""
    order = {c: i for i, c in enumerate(_channels_of(explained, recordings[0]))}
    planted_cells = {
        f"{c.token_band} " + "-".join(sorted(c.channels, key=order.__getitem__)) for _, c in planted
    }
    segment_s = float(truth["dynamic"]["segment_s"])  # the burst grid's
    top_two, both_higher, gaps = [], [], []
    for row in recordings:
        person = participants[row["participant_id"]]
        if person["diagnosis"] != "patient":
            continue
        segments = _segment_rows(explained, row["recording_id"])
        if not segments or segments[0]["target"] != "patient":
            continue
        totals: dict[str, float] = {}
        for segment in segments:
            for rank in range(1, 6):
                cell = segment.get(f"cell_{rank}") or ""
                if cell:
                    totals[cell] = totals.get(cell, 0.0) + float(segment[f"value_{rank}"])
        strongest = sorted(totals, key=lambda cell: -abs(totals[cell]))[:2]
        top_two.append(set(strongest) == planted_cells)
        bursts = person["bursts"]
        both, rest = [], []
        onsets = [float(segment["onset_s"]) for segment in segments]
        length = min(np.diff(onsets), default=segment_s)  # preprocess's segment
        for onset, segment in zip(onsets, segments):
            grid = int((onset + length / 2) // segment_s)  # at the segment's middle
            on = all(grid < len(on) and on[grid] for on in bursts.values())
            (both if on else rest).append(float(segment["contribution"]))
        if both and rest:
            both_higher.append(np.mean(both) > np.mean(rest))
            gaps.append(float(np.mean(both) - np.mean(rest)))
    return {
        "planted_cells": sorted(planted_cells),
        "patients_explained_as_patients": len(top_two),
        "planted_cells_top_two_share": float(np.mean(top_two)) if top_two else None,
        "both_bursting_segments_carry_more_share": float(np.mean(both_higher))
        if both_higher
        else None,
        "both_bursting_minus_other_segments_mean_contribution": float(np.mean(gaps))
        if gaps
        else None,
    }


def _channels_of(explained: Path, row: dict) -> list[str]:
    """The channel order of an explanation (its ``.npz``'s ``channels``)."""
    with np.load(explained / f"{row['recording_id']}.npz") as saved:
        return [str(c) for c in saved["channels"]]


def _interaction_attribution(explained: Path, recordings, planted, pairs, upper) -> dict:
    """The planted interaction in a fresh study's explanations: its attribution (the kept
    interactions joining the two planted couplings, in any measure: the sum of their
    attributions, absolute) against every (band, pair) cell, per recording."""
    sides = {(coupling.token_band, *sorted(coupling.channels)) for _, coupling in planted}

    def planted_side(side) -> bool:
        return side != "age" and (side[1], *sorted(side[2:])) in sides

    above, kept_names = [], set()
    for row, cells in zip(recordings, pairs):
        saved = json.loads((explained / f"{row['recording_id']}.json").read_text())
        found = [
            r
            for r in saved.get("interactions") or []
            if planted_side(r["a"]) and planted_side(r["b"])
        ]
        kept_names |= {r["interaction"] for r in found}
        value = abs(sum(r["value"] for r in found))
        above.append(bool(found) and value > cells[:, upper[0], upper[1]].max())
    return {
        "planted_interaction_kept_by_the_explaining_model": sorted(kept_names),
        "planted_interaction_above_every_cell_share": float(np.mean(above)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"simulation seed (acceptance: {ACCEPTANCE_SEED}, power {POWER_ACCEPTANCE_SEED}, "
        f"dynamic {DYNAMIC_ACCEPTANCE_SEED}; screen on others)",
    )
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--n-large", type=int, default=1000)
    parser.add_argument("--scenarios", default="linear,interaction,age,null,power")
    parser.add_argument("--power-channel", default=None, help="simulate --power-channel")
    parser.add_argument("--power-band", default=None, help="simulate --power-band")
    parser.add_argument("--gain", type=float, default=None, help="simulate --gain")
    parser.add_argument("--variants", default=None, help="comma list instead of each scenario's")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-small", action="store_true", help="only the --n-large runs")
    parser.add_argument("--skip-null-trust", action="store_true")
    parser.add_argument("--explain", action="store_true", help="the explanation checks too")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="simulate --spread: planted sources reach their channels' neighbours (0: off)",
    )
    layout = parser.add_argument_group("the dynamic study's layout (default: its own)")
    layout.add_argument("--duration", type=int, default=None, help="simulate --duration (s)")
    layout.add_argument("--segment-length", type=int, default=None, help="the burst grid (s)")
    layout.add_argument("--burst-segments", type=int, default=None, help="simulate's")
    layout.add_argument("--strength", type=float, default=None, help="simulate --strength")
    layout.add_argument(
        "--epoch-length", default=None, help="preprocess's (s, or auto; default: the grid's)"
    )
    args = parser.parse_args()
    set_dynamic_layout(args)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "bench_ground_truth.log"
    os.environ.setdefault("PYTHONPATH", str(REPO))
    started = time.time()
    scenarios = args.scenarios.split(",")
    chosen = args.variants.split(",") if args.variants else None
    report = {
        "benchmark": "ground_truth",
        "machine": machine(),
        "seed": args.seed,
        "acceptance_seed": ACCEPTANCE_SEED,
        "power_acceptance_seed": POWER_ACCEPTANCE_SEED,
        "dynamic_acceptance_seed": DYNAMIC_ACCEPTANCE_SEED,
        "small": {},
        "large": {},
    }
    for scenario in [] if args.skip_small else scenarios:
        report["small"][scenario] = evaluate_scenario(
            args.out,
            scenario,
            args.n,
            scenario_seed(scenario, args.seed),
            chosen or SMALL[scenario],
            args.n_jobs,
            log,
            args.spread,
            power_options(scenario, args),
        )
        print(json.dumps({scenario: report["small"][scenario]["models"]}), file=sys.stderr)
    if "null" in scenarios and not (args.skip_null_trust or args.skip_small):
        report["null_trust"] = null_trust(
            args.out, scenario_seed("null", args.seed), args.n, args.n_jobs, log, args.spread
        )
    if args.explain and not args.skip_small:
        report["explanations"] = {
            s: explanation_check(
                args.out, s, args.n, scenario_seed(s, args.seed), args.n_jobs, log, args.spread
            )
            for s in ("linear", "interaction", "dynamic")
            if s in scenarios
        }
    if not args.skip_large:
        for scenario in (s for s in scenarios if s in LARGE):
            report["large"][scenario] = evaluate_scenario(
                args.out,
                scenario,
                args.n_large,
                scenario_seed(scenario, args.seed),
                chosen or LARGE[scenario],
                args.n_jobs,
                log,
                args.spread,
            )
    report["wall_seconds"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=2)
    (args.out / "bench_ground_truth.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
