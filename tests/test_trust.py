"""Is the score real? The shortcut audit (experiment/audit.py), the permutation test
(experiment/permutation.py), their train options and their report section.

Synthetic ``preprocess`` folders (builders.make_connectome_folder's, a learnable coherence difference)
get nuisance columns that do or do not carry the label; the permutation test's small p-value
is checked on the committed sample_data, its uniformity on labels shuffled once.
"""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from builders import EARLIER_RUN, exit_code, make_connectome_folder, metrics_of, tiny_config

from eegformer_cli.evaluation.metrics import MODEL_NAME, REFERENCE_NAME, TANGENT_SPACE_NAME
from eegformer_cli.evaluation.run_metrics import AuditVariable, RunMetrics, ShortcutAudit
from eegformer_cli.experiment import audit, null_labels, permutation
from eegformer_cli.experiment.run import run_training
from eegformer_cli.training.dataset import RecordingInfo, TrainingData
from eegformer_cli.training.fold_job import reference_features
from eegformer_cli.training.run_plan import plan_run

SAMPLE_DATA = Path(__file__).resolve().parents[1] / "sample_data"


def set_column(root: Path, column: str, values: list) -> Path:
    """Add (or replace) ``column`` of ``root/manifest.tsv``, one value per row in order."""
    path = root / "manifest.tsv"
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    for row, value in zip(rows, values, strict=True):
        row[column] = str(value)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows)
    return root


def audit_of(root: Path, label_column: str = "diagnosis", confounds=(), **settings) -> dict:
    """The shortcut audit of ``root``, as metrics.json holds it."""
    plan = plan_run(root, label_column, tiny_config(**settings))
    return audit.run_audit(
        audit.plan_audit(plan.data, plan.folds, plan.scheme, plan.config, confounds),
        plan.positive_label,
    ).to_dict()


def entry(result: dict, name: str) -> dict:
    return next(e for e in result["variables"] if e["name"] == name)


def labels_of(n_participants: int) -> list[str]:
    """make_connectome_folder's labels: odd participants are patients."""
    return ["patient" if p % 2 else "control" for p in range(n_participants)]


# ------------------------------------------------------------------------------------------
# the shortcut audit


def test_a_duration_that_carries_the_label_is_flagged_with_its_figure(tmp_path, capsys):
    rng = np.random.default_rng(0)
    durations = [rng.normal(120 if label == "patient" else 90, 15) for label in labels_of(24)]
    root = set_column(
        make_connectome_folder(tmp_path / "prep"), "duration_s", [f"{d:.1f}" for d in durations]
    )
    result = audit_of(root)
    assert result["flagged"] == ["duration_s"] and result["variables"][0]["name"] == "duration_s"
    duration = entry(result, "duration_s")
    assert duration["auroc"]["mean"] >= 0.8 and duration["auroc"]["ci95"][0] > 0.5
    assert duration["bac"]["mean"] > 0.6 and len(duration["per_fold"]) == 5
    warnings = [line for line in capsys.readouterr().err.splitlines() if "shortcut:" in line]
    assert len(warnings) == 1 and "duration_s" in warnings[0]
    assert f"AUROC {duration['auroc']['mean']:.2f}" in warnings[0]
    # what cannot carry the label is said, never flagged: 2 segments everywhere, no sampling
    # rate column in this (older style) manifest
    assert entry(result, "n_segments")["status"] == "constant"
    assert entry(result, "source_sfreq")["status"] == "not recorded"
    assert entry(result, "sex")["status"] == "checked"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_duration_independent_of_the_label_is_not_flagged(tmp_path, capsys, seed):
    durations = np.random.default_rng(seed).normal(100, 15, 24)
    root = set_column(
        make_connectome_folder(tmp_path / "prep"), "duration_s", [f"{d:.1f}" for d in durations]
    )
    result = audit_of(root)
    duration = entry(result, "duration_s")
    assert result["flagged"] == [] and duration["status"] == "checked"
    assert duration["auroc"]["mean"] < 0.65 or duration["auroc"]["ci95"][0] <= 0.5
    assert "shortcut:" not in capsys.readouterr().err


def test_a_weak_but_real_duration_difference_is_borderline_with_its_remedy(tmp_path, capsys):
    # AUROC about 0.6: below the flag's 0.65, but 600 participants put it beyond chance
    n = 600
    rng = np.random.default_rng(3)
    durations = [rng.normal(105 if label == "patient" else 100, 15) for label in labels_of(n)]
    root = set_column(
        make_connectome_folder(tmp_path / "prep", n_participants=n, n_segments=1),
        "duration_s",
        [f"{d:.1f}" for d in durations],
    )
    result = audit_of(root)
    duration = entry(result, "duration_s")
    assert duration["status"] == "borderline" and result["borderline"] == ["duration_s"]
    assert result["flagged"] == [] and result["variables"][0]["name"] == "duration_s"
    assert duration["auroc"]["ci95"][0] > 0.5 and duration["auroc"]["mean"] < audit.AUROC_FLAG
    assert "beyond chance" in duration["reason"] and "below 0.65" in duration["reason"]
    assert entry(result, "sex")["reason"].startswith("AUROC below 0.65")
    warnings = [line for line in capsys.readouterr().err.splitlines() if "shortcut" in line]
    assert len(warnings) == 1 and warnings[0].startswith(
        "warning: possible shortcut (borderline): duration_s"
    )
    # the remedy names the number: the shortest recording's length, in whole seconds
    shortest = min(float(f"{d:.1f}") for d in durations)
    assert (
        f"--crop {int(shortest)}` (the shortest recording's length, {shortest:g} s)"
        in (warnings[0])
    )
    assert audit.describe_audit(ShortcutAudit.from_dict(result)).startswith(
        "shortcut audit: borderline duration_s (AUROC"
    )


@pytest.mark.slow
def test_crop_gives_every_recording_the_same_length_and_the_audit_sees_it(tmp_path, capsys):
    from eegformer_cli.errors import RecordingError, UsageError
    from eegformer_cli.preprocess import PreprocessSettings, preprocess_raw
    from eegformer_cli.simulation.simulate import draw_participants, simulate_participant

    # the remedy: only the first 30 s of a 40 s and a 60 s recording are analysed
    settings = PreprocessSettings.from_preset("default", crop_s=30.0, epoch_length=6.0)
    raw = simulate_participant(draw_participants(1, seed=0)[0], duration_s=60.0)
    short, long = (
        preprocess_raw(raw.copy().crop(0, d, include_tmax=False), settings) for d in (40.0, 60.0)
    )
    assert len(short.coh) == len(long.coh) == 5 and long.segment_onsets_s.max() < 30
    # the same first 30 s, the same tokens (but near the cut, where the filter saw more data)
    assert np.allclose(short.coh[:3], long.coh[:3], atol=1e-3)
    with pytest.raises(RecordingError, match="too short for a crop of 30 s: 20.0 s long"):
        preprocess_raw(raw.copy().crop(0, 20.0, include_tmax=False), settings)
    with pytest.raises(UsageError, match="invalid --crop 2.0"):
        PreprocessSettings.from_preset("default", crop_s=2.0)
    # folders made without it keep their settings and hashes
    assert "crop_s" not in PreprocessSettings.from_preset("default").to_dict()
    assert settings.to_dict()["crop_s"] == 30.0
    assert PreprocessSettings.from_dict(settings.to_dict()) == settings
    # the audit then judges the length analysed: the lengths that carried the label are equal
    durations = [120 if label == "patient" else 60 for label in labels_of(24)]
    root = set_column(make_connectome_folder(tmp_path / "prep"), "duration_s", durations)
    assert entry(audit_of(root), "duration_s")["status"] == "flagged"
    stored = json.loads((root / "preprocess.json").read_text())
    stored["settings"]["crop_s"] = 60.0
    (root / "preprocess.json").write_text(json.dumps(stored))
    cropped = entry(audit_of(root), "duration_s")
    assert cropped["status"] == "constant" and "--crop 60" in cropped["description"]


@pytest.mark.slow
def test_confounds_are_audited_as_categories_with_three_classes(tmp_path):
    # make_connectome_folder's sex follows p % 3 and its ages p % 20: the labels do not
    labels = [["a", "b", "c"][(p // 3) % 3] for p in range(24)]
    root = make_connectome_folder(tmp_path / "prep", labels=labels)
    set_column(root, "site", [f"site-{(p // 3) % 3}" for p in range(24)])  # carries the label
    set_column(root, "scanner", [f"s{p % 2}" for p in range(24)])  # does not
    result = audit_of(root, confounds=["site", "scanner", "age"])  # age: a built-in
    site, scanner = entry(result, "site"), entry(result, "scanner")
    assert result["flagged"] == ["site"] and site["kind"] == "categorical"
    assert site["source"] == "--confounds" and scanner["status"] == "checked"
    assert site["auroc"]["mean"] == 1.0  # macro one-vs-rest AUROC
    assert site["bac"]["mean"] == 1.0 and scanner["bac"]["mean"] < 0.6  # chance is 1/3
    assert [e["name"] for e in result["variables"]].count("age") == 1
    assert "a: 9 x site-0; b: 9 x site-1" in audit.describe_by_class(AuditVariable.from_dict(site))


def test_a_holdout_run_is_audited_on_a_cv_of_all_participants(tmp_path):
    root = make_connectome_folder(tmp_path / "prep")
    result = audit_of(root, holdout=0.25)
    assert result["n_folds"] == 5 and "5-fold CV of all participants" in result["folds"]


def test_bad_flags_are_one_line_usage_errors_before_the_run_folder(tmp_path, capsys):
    root = make_connectome_folder(tmp_path / "prep")
    run = tmp_path / "run"
    cases = [
        (["--confounds", "site"], "available columns are recording_id, participant_id"),
        (["--confounds", "diagnosis"], "is the label column"),
        (["--permutations", "-1"], "invalid value -1 for --permutations"),
        (
            ["--permutation-model", "svm"],
            "allowed values are 'reference', 'tangent_space', 'xaiguiformer'",
        ),
        (["--fold", "0", "--permutations", "5"], "give them to `eegformer train --merge"),
    ]
    for flags, message in cases:
        code = exit_code("train", root, "--out", run, "-l", "diagnosis", "--epochs", "1", *flags)
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (flags, err)
        assert not run.exists()


def test_train_help_documents_the_new_options(capsys):
    assert exit_code("train", "--help") == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--confounds", "--permutations", "--permutation-model", "Is the score real?"):
        assert option in text


# ------------------------------------------------------------------------------------------
# the permutation test


def recordings(labels_by_participant: dict[str, list[str]]) -> TrainingData:
    recs = [
        RecordingInfo(f"{p}_{i}", p, label, float("nan"), float("nan"), Path("x.npz"), 1)
        for p, labels in labels_by_participant.items()
        for i, label in enumerate(labels)
    ]
    return TrainingData(
        Path("."), "label", recs, sorted({r.label for r in recs}), [], [], np.zeros((0, 2)), None
    )


def test_labels_are_permuted_between_participants_or_within_them():
    from eegformer_cli.training.splits import Fold

    one_label = recordings({f"p{i}": [["x", "y"][i % 2]] * 2 for i in range(10)})
    folds = [
        Fold(0, k, [f"p{i}" for i in range(10) if i % 5 != k], [], [f"p{k}", f"p{k + 5}"])
        for k in range(5)
    ]
    drawn = [null_labels.permuted_labels(one_label, folds, 0, i) for i in range(20)]
    for labels in drawn:
        assert sorted(labels) == sorted(r.label for r in one_label.recordings)
        assert all(labels[2 * i] == labels[2 * i + 1] for i in range(10))  # one per participant
    assert len({tuple(labels) for labels in drawn}) > 10
    assert drawn[3] == null_labels.permuted_labels(one_label, folds, 0, 3)  # seeded per index
    assert null_labels.describe_scheme(one_label).startswith("participant labels shuffled")
    conditions = recordings({f"p{i}": ["rest", "task"] for i in range(10)})
    for i in range(20):
        labels = null_labels.permuted_labels(conditions, folds, 0, i)
        assert all(sorted(labels[2 * p : 2 * p + 2]) == ["rest", "task"] for p in range(10))
    assert "each participant's recordings" in null_labels.describe_scheme(conditions)


@pytest.mark.slow
def test_run_with_audit_and_permutations_resumes_and_merge_adds_more(tmp_path, capsys):
    rng = np.random.default_rng(0)
    root = set_column(
        make_connectome_folder(tmp_path / "prep"),
        "duration_s",
        [f"{rng.normal(130 if label == 'patient' else 80, 10):.1f}" for label in labels_of(24)],
    )
    run = tmp_path / "run"
    config = tiny_config(cv=3)
    metrics = run_training(root, run, "diagnosis", config, permutations=3, n_jobs=2)
    assert metrics.shortcut_audit.flagged == ["duration_s"]
    test = metrics.permutation_test
    assert test.n_permutations == 3 and test.null_model == REFERENCE_NAME
    assert set(permutation.NULL_MODELS.values()) == {MODEL_NAME, REFERENCE_NAME, TANGENT_SPACE_NAME}
    assert test.models["xaiguiformer"].null_from == "logistic_regression"
    written = json.loads((run / "metrics.json").read_text())
    assert written["permutation_test"] == test.to_dict()
    assert written["complete"] is True and "incomplete" not in written  # the test is done
    test = written["permutation_test"]
    files = sorted((run / "permutations" / "logistic_regression").glob("*.json"))
    assert [f.name for f in files] == ["00000.json", "00001.json", "00002.json"]
    # the test refits exactly the run's reference: on the real labels it gets the run's BAC
    plan = plan_run(root, "diagnosis", config)
    features = reference_features(plan.data)
    refit = permutation.refit_scores(
        plan, features, [r.label for r in plan.data.recordings], "logistic_regression"
    )
    assert refit["bac"]["logistic_regression"] == metrics.models["logistic_regression"].mean.bac
    capsys.readouterr()
    # merge adds permutations to the finished run: only the missing ones are computed, the
    # same numbers in this process as in the workers
    assert exit_code("train", "--merge", run, "--permutations", "5") == 0
    out, err = capsys.readouterr()
    assert "2 of 5 permutations to compute" in err and "permutation test (5 permutations" in out
    assert "shortcut audit: flagged duration_s" in out
    merged = json.loads((run / "metrics.json").read_text())["permutation_test"]
    assert merged["null"]["logistic_regression"][:3] == test["null"]["logistic_regression"]
    again = permutation.null_scores(plan, features, 1, "logistic_regression")
    assert again["bac"] == json.loads(files[1].read_text())["bac"]
    assert merged["models"]["logistic_regression"]["p_value"] == null_labels.p_value(
        merged["null"]["logistic_regression"],
        metrics.models["logistic_regression"].mean.bac,
    )
    # the full null: both models retrained on each permutation, each against its own null;
    # the reference refit inside it is the same as the reference-only null's
    assert (
        exit_code(
            "train",
            "--merge",
            run,
            "--permutations",
            "2",
            "--permutation-model",
            "xaiguiformer",
            "-j",
            "2",
        )
        == 0
    )
    full = json.loads((run / "metrics.json").read_text())["permutation_test"]
    assert full["null_model"] == MODEL_NAME and len(full["null"][MODEL_NAME]) == 2
    assert all(model["null_from"] == name for name, model in full["models"].items())
    assert full["null"][REFERENCE_NAME] == merged["null"][REFERENCE_NAME][:2]
    assert "2 of 2 permutations to compute, null model xaiguiformer" in capsys.readouterr().err
    # the report's section
    from eegformer_cli.report.build import write_report

    html = write_report(run, None, tmp_path / "report.html").read_text()
    assert "Is the score real?" in html and "table-warning" in html
    assert "Permutation test: null distribution" in html


def observed_and_p(root: Path, run_dir: Path, n_permutations: int, **settings) -> tuple:
    """The reference's BAC on ``root``'s real labels and its p-value against
    ``n_permutations`` refits on permuted labels (2 workers), without training XAIguiFormer."""
    plan = plan_run(root, "diagnosis", tiny_config(**settings))
    features = reference_features(plan.data)
    observed = permutation.refit_scores(
        plan, features, [r.label for r in plan.data.recordings], "logistic_regression"
    )["bac"]["logistic_regression"]
    metrics = RunMetrics.from_dict({"models": {"logistic_regression": {"mean": {"bac": observed}}}})
    result = permutation.run_permutation_test(
        run_dir, plan, features, metrics, n_permutations, "reference", 2
    )
    return observed, result.permutation_test.models["logistic_regression"].p_value


@pytest.mark.slow
def test_permutation_p_value_is_small_on_sample_data(tmp_path):
    from eegformer_cli.preprocess import PreprocessSettings, run_preprocess

    prep = tmp_path / "prep"  # all 24 recordings, a few seconds
    run_preprocess(
        [SAMPLE_DATA / "eeg"],
        prep,
        PreprocessSettings.from_preset("default"),
        participants=SAMPLE_DATA / "participants.tsv",
        n_jobs=2,
    )
    observed, p = observed_and_p(prep, tmp_path / "run", 24, cv=3)
    assert observed > 0.75 and p == 1 / 25  # no permutation reaches it: p < 0.05


@pytest.mark.slow
def test_permutation_p_value_is_near_uniform_when_the_label_was_shuffled_once(tmp_path):
    p_values = []
    for seed in range(6):  # the coherence difference stays with the original labels
        root = make_connectome_folder(tmp_path / f"prep{seed}")
        set_column(root, "diagnosis", np.random.default_rng(seed).permutation(labels_of(24)))
        p_values.append(observed_and_p(root, tmp_path / f"run{seed}", 9, cv=2)[1])
    # p is uniform on {0.1, ..., 1} under the null (mean 0.55, sd 0.29; of 6: sd 0.12)
    assert 0.25 <= np.mean(p_values) <= 0.85, p_values
    assert sum(p <= 0.1 for p in p_values) <= 2, p_values


# ------------------------------------------------------------------------------------------
# one rule for "above chance"


def run_judged_by(tmp_path: Path, fold_bacs: tuple, null_bac: float, capsys) -> tuple:
    """A copy of the earlier run folder of tests/data whose two folds scored ``fold_bacs`` and
    whose 20 permutations of XAIguiFormer's own null (written as the test writes them) all
    reached ``null_bac``, merged by ``train --merge RUN --permutations 20 --permutation-model
    xaiguiformer`` (nothing retrained) and reported: (metrics.json, train's stdout, the
    report's HTML)."""

    from eegformer_cli.experiment import run_folder

    prep = make_connectome_folder(tmp_path / "prep", n_participants=20)
    run = tmp_path / "run"
    shutil.copytree(EARLIER_RUN, run)
    config = (run / "config.json").read_text().replace('"/data/prep"', json.dumps(str(prep)))
    (run / "config.json").write_text(config)
    for path, bac in zip(sorted((run / "folds").glob("r0_f*.json")), fold_bacs):
        record = json.loads(path.read_text())
        record["metrics"][MODEL_NAME]["bac"] = bac
        path.write_text(json.dumps(record))
    models = (MODEL_NAME, REFERENCE_NAME, TANGENT_SPACE_NAME)
    for index in range(20):
        result = {"index": index, "null_model": MODEL_NAME, "per_fold": [], "seconds": 0.1}
        run_folder.write_permutation_result(
            run, MODEL_NAME, {**result, "bac": dict.fromkeys(models, null_bac)}
        )
    capsys.readouterr()
    merge = ("train", "--merge", run, "--permutations", 20, "--permutation-model", MODEL_NAME)
    assert exit_code(*merge) == 0
    stdout = capsys.readouterr().out
    assert exit_code("report", run, "--out", tmp_path / "report.html") == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    return json.loads((run / "metrics.json").read_text()), stdout, page


def verdict_rows(page: str) -> dict[str, tuple[str, str]]:
    """The report's verdict box: topic -> (tone, text) of each row."""
    box = page[page.index('id="eeg-verdict"') :]
    box = box[: box.index("</table>")]
    return {
        topic: (tone, text)
        for topic, tone, text in re.findall(
            r'<th scope="row">([^<]*)</th><td class="eeg-(\w+)">(.*?)</td>', box
        )
    }


@pytest.mark.parametrize(
    ("fold_bacs", "null_bac", "above"),
    [
        ((1.0, 0.6), 0.5, True),  # the interval includes chance, no permutation reaches 0.8
        ((0.9, 0.92), 0.95, False),  # the interval lies above chance, every permutation beyond
    ],
)
def test_the_headline_box_stdout_metrics_and_report_follow_one_rule(
    tmp_path, capsys, fold_bacs, null_bac, above
):
    metrics, stdout, page = run_judged_by(tmp_path, fold_bacs, null_bac, capsys)
    rule = metrics["above_chance"]
    p = 1 / 21 if above else 1.0
    assert rule["above"] is above and rule["interval_above"] is not above
    assert rule["follows"] == "permutation test" and rule["null_from"] == MODEL_NAME
    assert rule["p_value"] == pytest.approx(p) and rule["n_permutations"] == 20
    answer = "above chance" if above else "not shown to be above chance"
    assert rule["statement"] == f"{answer} (permutation p = {p:.2g}, 20 permutations)"
    assert "XAIguiFormer's own null" in rule["meaning"] and "interval disagrees" in rule["meaning"]
    # train's stdout: the headline opens the verdict box (wrapped by the terminal's width)
    flat = " ".join(re.sub("[│╭╮╰╯─]", " ", stdout).split())
    assert flat.startswith(f"Verdict XAIguiFormer: {rule['statement']};")
    assert "the headline follows this test" in flat
    assert (
        "but the permutation test" in flat and "(the headline follows the permutation test)" in flat
    )
    # the report: the same headline, and no row of its box answers otherwise
    headline = re.search(r'class="eeg-headline">([^<]*)<', page).group(1)
    assert headline.startswith(f"XAIguiFormer: {html.escape(rule['statement'])};")
    rows = verdict_rows(page)
    assert rows["permutation test"][0] == ("good" if above else "warn")
    assert (
        rows["score"][0] == "neutral"
        and "the headline follows the permutation test" in rows["score"][1]
    )
    assert "the headline follows this test" in rows["permutation test"][1]
    # ... and the section "Is the score real?" says which test and why
    assert "Above chance: the test the verdict follows" in page
    assert f"<b>XAIguiFormer: {html.escape(rule['statement'])}.</b>" in page


def test_the_rule_says_whose_null_and_follows_the_interval_without_a_test():

    from eegformer_cli.experiment.above_chance import above_chance
    from eegformer_cli.experiment.verdict import headline, verdict_lines

    interval = above_chance(metrics_of())  # 95 % interval 0.66 to 0.84 of a 0.75 score
    assert interval.follows == "interval" and interval.above and interval.null_from is None
    assert "`--permutations 100` adds a permutation test" in interval.meaning
    with_reference_null = metrics_of(
        permutation_test={
            "n_permutations": 100,
            "null_model": REFERENCE_NAME,
            "models": {
                MODEL_NAME: {"p_value": 0.0099, "null_from": REFERENCE_NAME},
                REFERENCE_NAME: {"p_value": 0.04, "null_from": REFERENCE_NAME},
            },
        }
    )
    rule = above_chance(with_reference_null)
    assert rule.statement == (
        "above chance (permutation p = 0.0099, 100 permutations, against the logistic "
        "regression's null)"
    )
    assert "not an exact test of XAIguiFormer" in rule.meaning
    assert "beyond what chance gives on these folds" in rule.meaning
    assert headline(with_reference_null).startswith(f"XAIguiFormer: {rule.statement};")
    line = {topic: text for topic, text, _ in verdict_lines(with_reference_null)}
    assert "the logistic regression's null" in line["permutation test"]
    assert "its own p = 0.04" in line["permutation test"]
    # too few permutations for any p below 0.05: said, and not above chance
    few = metrics_of(
        permutation_test={
            "n_permutations": 3,
            "models": {MODEL_NAME: {"p_value": 0.25, "null_from": MODEL_NAME}},
        }
    )
    assert not above_chance(few).above and "cannot go below 0.25" in above_chance(few).meaning
