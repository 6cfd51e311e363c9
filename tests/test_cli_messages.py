"""What the commands say: every default in ``train --help`` and no
``<bool>`` for flags; a rerun of a finished ``train`` says its folds were reused and which class
is positive; ``preprocess`` of a missing path says it does not exist; Ctrl-C in ``predict``
does not promise a resume; ``predict -`` and ``explain -`` read their inputs from standard input.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from builders import SAMPLE_DATA, make_connectome_folder, run_main

from eegformer_cli.cli.app import app, main
from eegformer_cli.cli.arguments import expand_stdin
from eegformer_cli.errors import UsageError
from eegformer_cli.training.config import PRESETS


def test_train_help_shows_every_default_and_no_bool_type(capsys, monkeypatch):
    from eegformer_cli.choices import FREQUENCY_ENCODING_BY_PRESET
    from eegformer_cli.model.xaiguiformer import ModelConfig

    command = typer.main.get_command(app).commands["train"]
    for param in command.params:
        if param.param_type_name != "option" or param.name == "help":
            continue
        help_text = param.help or ""
        shows = param.show_default and param.default is not None
        assert shows or "[default:" in help_text or "Required" in help_text, param.name
    # the preset-dependent defaults are the presets' own values
    assert {
        name: ModelConfig.preset(
            name,
            n_channels=2,
            band_names=["a"],
            band_edges_hz=[(1, 4)],
            n_classes=2,
            channel_names=["C3", "C4"],
        ).frequency_encoding
        for name in PRESETS
    } == FREQUENCY_ENCODING_BY_PRESET
    monkeypatch.setenv("COLUMNS", "250")  # one line per option: nothing wrapped
    with pytest.raises(SystemExit) as stopped:
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert stopped.value.code == 0
    for fragment in (
        "[default: 40; paper preset: 100]",
        "[default: 16; paper preset: 64]",
        "[default: 0.001; paper preset: 5e-05]",
        "[default: 0; paper preset: 0]",
    ):
        assert fragment in text, fragment
    assert "<bool>" not in text and "--no-xai" in text


def test_a_rerun_of_a_finished_train_says_it_reused_the_folds(sample_run, tmp_path, capsys):
    from eegformer_cli.experiment.run import read_run_request, run_training

    run = sample_run
    rerun = tmp_path / "run"
    shutil.copytree(run["run"], rerun)
    before = (rerun / "model.pt").read_bytes()
    request = read_run_request(rerun)
    capsys.readouterr()
    run_training(request.data_dir, rerun, request.label_column, request.config)
    err = capsys.readouterr().err
    assert "train: 1 of 1 folds already finished in" in err and "reused, not trained again" in err
    # the control-like class is the negative one, although it comes last in sorted order
    assert (
        "train: positive class for AUROC and AUC-PR: depression (the class that is not "
        "control-like; choose another with --positive-label)"
    ) in err
    assert (rerun / "model.pt").read_bytes() == before


def test_preprocess_of_a_missing_path_says_it_does_not_exist(tmp_path, capsys):
    code, output = run_main(
        capsys, "preprocess", tmp_path / "nonexistent", "--out", tmp_path / "out"
    )
    assert code == 3 and f"{tmp_path / 'nonexistent'}: no such file or folder" in output
    assert "holds no recordings" not in output and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_ctrl_c_in_predict_does_not_say_rerun_to_resume(sample_run):
    run = sample_run
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eegformer_cli",
            "predict",
            str(run["model"]),
            str(SAMPLE_DATA / "eeg"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout.readline().startswith("recording_id,")
        assert process.stdout.readline().startswith("sub-01_task-rest_eeg,")  # it is at work
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1] == "eegformer: interrupted"
    assert "Traceback" not in err and "resume" not in err


@pytest.mark.slow
def test_predict_and_explain_read_paths_from_standard_input_with_a_dash(sample_run, tmp_path):
    """``-`` stands for the paths piped in, one per line, as for other shell tools."""
    run = sample_run
    edfs = sorted((SAMPLE_DATA / "eeg").glob("*.edf"))[12:14]
    command = [sys.executable, "-m", "eegformer_cli", "predict", str(run["model"])]
    piped = subprocess.run(
        command + ["-"],
        input="\n".join(map(str, edfs)) + "\n\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    listed = subprocess.run(
        command + [str(p) for p in edfs], capture_output=True, text=True, timeout=300
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == listed.stdout and piped.stdout.count("\n") == 3  # header + 2 rows
    # a dash among other inputs takes its place; a second dash or nothing piped is refused
    mixed = subprocess.run(
        command + [str(edfs[0]), "-"],
        input=f"{edfs[1]}\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert mixed.stdout == listed.stdout
    for args, given, message in (
        (["-", "-"], "x\n", "only once"),
        (["-"], "\n  \n", "holds no path"),
    ):
        refused = subprocess.run(
            command + args, input=given, capture_output=True, text=True, timeout=300
        )
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and refused.stdout == ""
    out = tmp_path / "explanations"
    explained = subprocess.run(
        [
            sys.executable,
            "-m",
            "eegformer_cli",
            "explain",
            str(run["model"]),
            "-",
            "--out",
            str(out),
            "--n-steps",
            "4",
        ],
        input=f"{edfs[0]}\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert explained.returncode == 0, explained.stderr
    assert (out / f"{edfs[0].stem}.json").is_file()


def test_a_dash_with_a_terminal_on_standard_input_is_refused():
    class Terminal:
        def isatty(self):
            return True

    with pytest.raises(UsageError, match="nothing is piped in"):
        expand_stdin([Path("-")], Terminal())
    assert expand_stdin([Path("a.edf")], Terminal()) == [Path("a.edf")]


def test_a_misspelt_column_or_choice_gets_a_did_you_mean(tmp_path, capsys):

    from eegformer_cli.errors import check_choice, did_you_mean

    data = make_connectome_folder(tmp_path / "prep", n_participants=12)
    for flags, suggestion in (
        (["--label-column", "Diagnosis"], "did you mean 'diagnosis'?"),
        (["-l", "diagnosis", "--positive-label", "Patient"], "did you mean 'patient'?"),
        (["-l", "diagnosis", "--confounds", "sexx"], "did you mean 'sex'?"),
        (["-l", "diagnosis", "--split-by", "recordings"], "did you mean 'recording'?"),
    ):
        code, output = run_main(capsys, "train", data, "--out", tmp_path / "run", *flags)
        assert code == UsageError.exit_code and suggestion in output, (flags, output)
        assert len(output.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    with pytest.raises(UsageError, match="allowed values are 'default', 'paper'; did you mean"):
        check_choice("preset", "defualt", ["default", "paper"])
    assert did_you_mean("xyz", ["diagnosis", "age"]) == ""


def test_train_on_a_numeric_column_of_many_values_exits_2_naming_it_and_the_fix(tmp_path, capsys):
    data = make_connectome_folder(tmp_path / "prep", n_participants=24)
    code, output = run_main(capsys, "train", data, "--out", tmp_path / "run", "-l", "age")
    assert code == UsageError.exit_code, output
    assert output.startswith("eegformer: error: label column 'age' is numeric with 16 distinct")
    assert "rerun `eegformer preprocess` into this folder" in output
    assert len(output.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_an_option_of_another_command_points_to_it(tmp_path, capsys):
    """``train --crop`` names ``preprocess --crop`` instead of options of similar spelling; a
    mistyped option still gets Click's suggestions."""
    from eegformer_cli.cli.arguments import ELSEWHERE

    code, output = run_main(capsys, "train", tmp_path, "--crop", "62")
    assert code == UsageError.exit_code == 2
    error = " ".join(output.split()).split("Error: ")[1]
    assert error.startswith("No such option: --crop; it belongs to `eegformer preprocess --crop`")
    assert "--cv" not in error and not (tmp_path / "run").exists()
    code, output = run_main(capsys, "predict", tmp_path / "model.pt", tmp_path, "--target", "a")
    assert code == 2 and "it belongs to `eegformer explain --target`" in output
    code, output = run_main(capsys, "train", tmp_path, "--epoch", "3")
    assert code == 2 and "No such option: --epoch (Possible options: --epochs" in output
    # every option of the table is unknown to the commands given it and known to its owner
    commands = typer.main.get_command(app).commands
    options = {
        name: {opt for param in command.params for opt in param.opts}
        for name, command in commands.items()
    }
    for given_to, names, owner, _why in ELSEWHERE:
        for name in given_to:
            assert not set(names) & options[name], name
        assert set(names) <= options[owner], owner
