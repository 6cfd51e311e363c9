"""Nothing overwritten that eegformer did not make: ``report``, ``preprocess``, ``train`` and
``explain`` refuse an output holding a user's file (exit 2, one line, the file untouched and
nothing written beside it) unless ``--overwrite``, which keeps the user's files; folders of
earlier versions (no marker) are recognised by their own files; a rerun or an interrupted run
finds its folder its own; replacing a run deletes only the run's files.
"""

from __future__ import annotations

import json
import shutil

import pytest
from builders import SAMPLE_DATA, make_connectome_folder, run_main, tiny_config

from eegformer_cli.errors import UsageError
from eegformer_cli.experiment.run import run_training
from eegformer_cli.experiment.run_folder import RUN_FILES, _clear_run
from eegformer_cli.overwrite_protection import (
    MARKER,
    check_folder,
    claim_file,
    claim_folder,
    is_report,
    recognised_kinds,
)

NOTES = "my notes: do not lose\n"


def users_folder(path):
    """A folder holding a user's file (and eegformer's own kinds of leftovers, which do not
    make it the user's)."""
    path.mkdir(parents=True)
    (path / "notes.txt").write_text(NOTES)
    return path


def refused(code: int, output: str, folder) -> bool:
    line = output.strip().splitlines()[-1]
    return (
        code == UsageError.exit_code
        and line.startswith("eegformer: error: ")
        and "did not write (notes.txt)" in line
        and "--overwrite" in line
        and sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
        and (folder / "notes.txt").read_text() == NOTES
    )


def test_preprocess_into_a_users_folder_is_refused_and_overwrite_keeps_the_file(tmp_path, capsys):
    out = users_folder(tmp_path / "mine")
    edf = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[0]
    code, output = run_main(capsys, "preprocess", edf, "--out", out)
    assert refused(code, output, out), output
    code, output = run_main(capsys, "preprocess", edf, "--out", out, "--overwrite")
    assert code == 0, output
    assert (out / "notes.txt").read_text() == NOTES and (out / "manifest.tsv").is_file()
    assert recognised_kinds(out) == ["preprocess"]
    code, output = run_main(capsys, "preprocess", edf, "--out", out)  # its own folder now
    assert code == 0 and "1 recordings already done" in output, output


def test_train_into_a_users_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    data = make_connectome_folder(tmp_path / "prep", n_participants=16)
    out = users_folder(tmp_path / "notes")
    code, output = run_main(
        capsys, "train", data, "--out", out, "--label-column", "diagnosis", "--cv", "3"
    )
    assert refused(code, output, out), output
    # a preprocess folder is not a run folder either, and the message says what it is
    with pytest.raises(UsageError, match="holds an eegformer preprocess output"):
        run_training(data, data, "diagnosis", tiny_config())


def test_report_over_a_users_file_is_refused_unless_overwrite(sample_run, tmp_path, capsys):
    run = sample_run["run"]
    page = tmp_path / "existing.html"
    page.write_text("<html><body>my own page</body></html>\n")
    code, output = run_main(capsys, "report", run, "--out", page)
    assert code == UsageError.exit_code and "is not a report eegformer wrote" in output
    assert page.read_text() == "<html><body>my own page</body></html>\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.html"]
    code, output = run_main(capsys, "report", run, "--out", page, "--overwrite")
    assert code == 0 and is_report(page), output
    assert claim_file(page) == page  # its own report: a rerun replaces it


def test_explain_into_a_users_folder_is_refused(sample_run, tmp_path, capsys):
    sample = sample_run
    out = users_folder(tmp_path / "mine")
    edf = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[0]
    code, output = run_main(capsys, "explain", sample["model"], edf, "--out", out)
    assert refused(code, output, out), output
    # nor into the preprocess folder: another command's output
    with pytest.raises(UsageError, match="holds an eegformer preprocess output"):
        check_folder(sample["prep"], "explain")


def test_folders_of_earlier_versions_are_recognised_and_resume(sample_run, tmp_path, capsys):
    """A run folder without the marker (an earlier version made it) is recognised by its
    config.json: the rerun reuses its folds; it is marked from then on."""
    run = tmp_path / "run"
    shutil.copytree(sample_run["run"], run)
    (run / MARKER).unlink()
    assert recognised_kinds(run) == ["train"]
    from eegformer_cli.experiment.run import read_run_request

    request = read_run_request(run)
    capsys.readouterr()
    run_training(request.data_dir, run, request.label_column, request.config)
    assert "already finished" in capsys.readouterr().err
    assert json.loads((run / MARKER).read_text())["contents"] == ["train"]
    prep = tmp_path / "prep"
    prep.mkdir()
    (prep / "manifest.tsv").write_text("recording_id\tparticipant_id\n")
    assert recognised_kinds(prep) == ["preprocess"] and check_folder(prep, "preprocess")


def test_an_interrupted_start_leaves_a_folder_the_rerun_finds_its_own(tmp_path):
    """The marker is written before anything else, so a run stopped just after it (only the
    lock, temporaries and empty folders beside it) resumes; without the marker such a folder
    is still empty to eegformer."""
    run = tmp_path / "run"
    claim_folder(run, "train")
    (run / ".lock").touch()
    (run / "folds").mkdir()
    (run / ".tmp-config.json.x").write_text("{")
    assert check_folder(run, "train") == ["train"]
    (run / MARKER).unlink()
    assert check_folder(run, "train") == []  # empty but for eegformer's own leftovers


def test_replacing_a_run_deletes_only_the_runs_files(tmp_path):
    names = (*RUN_FILES, "folds/r0_f0.json", "folds/r0_f0.pt", "folds/final.json")
    for name in (*names, "permutations/logistic_regression/00000.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("earlier run")
    (tmp_path / "report.html").write_text("<title>XAIguiFormer (default preset) on x</title>")
    for name in ("notes.txt", "folds/mine.txt", "permutations/readme.md"):
        (tmp_path / name).write_text(NOTES)
    _clear_run(tmp_path)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["folds/mine.txt", "notes.txt", "permutations/readme.md"]
    # a report.html that is the user's stays
    (tmp_path / "report.html").write_text(NOTES)
    _clear_run(tmp_path)
    assert (tmp_path / "report.html").read_text() == NOTES
    assert claim_file(tmp_path / "new.html") == tmp_path / "new.html"
