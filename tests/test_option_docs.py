"""Options documented once: each command's ``--help`` text of an option is its API docstring's
text for the parameter (both from :mod:`eegformer_cli.option_docs`), every parameter of a
``commands.*`` function and of the estimator is documented, the choice lists are the package's
own, and no ``--help`` mentions data a user of the package does not have.
"""

from __future__ import annotations

import inspect
import re

import pytest
import typer.main
from sources import parse_command_line

import eegformer_cli
from eegformer_cli import commands
from eegformer_cli import option_docs as options
from eegformer_cli.cli.app import app, main

COMMANDS = {
    "preprocess": options.PREPROCESS,
    "train": options.TRAIN,
    "predict": options.PREDICT,
    "explain": options.EXPLAIN,
    "report": options.REPORT,
}
#: Options of the CLI alone (no Python parameter): the output format and Typer's context.
CLI_ONLY = {"train": {"as_json"}, "predict": {"output_format"}}
#: Parameters of Python alone: a callback for each row.
API_ONLY = {"predict": {"on_row"}}


def docstring_parameters(obj) -> dict[str, str]:
    """The numpydoc Parameters section of ``obj``'s docstring: name -> text (one line)."""
    doc = inspect.getdoc(obj)
    section = re.search(r"^Parameters\n-+\n(.*?)(?:\n\n\S[^\n]*\n-+\n|\Z)", doc, re.M | re.S)
    assert section, f"{obj.__qualname__}: no Parameters section"
    entries = re.findall(r"^(\w+) : [^\n]*\n((?:    [^\n]*\n?)+)", section.group(1) + "\n", re.M)
    return {name: " ".join(text.split()) for name, text in entries}


def cli_help(text: str) -> str:
    """An option's help as written for Typer, as plain text (``\\[`` escapes a bracket)."""
    return " ".join(text.replace("\\[", "[").split())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_cli_option_says_what_the_api_docstring_says(name):
    function = getattr(commands, name)
    parameters = list(inspect.signature(function).parameters)
    documented = docstring_parameters(function)
    assert list(documented) == parameters  # every parameter, in order
    command = typer.main.get_command(app).commands[name]
    cli_names = {param.name for param in command.params} - {"help"}
    assert cli_names - CLI_ONLY.get(name, set()) == set(parameters) - API_ONLY.get(name, set())
    for param in command.params:
        if param.name in parameters:
            assert cli_help(param.help) == documented[param.name], (name, param.name)
            assert documented[param.name] == " ".join(COMMANDS[name][param.name].text.split())


def test_the_estimator_documents_its_parameters_as_train_does():
    estimator = eegformer_cli.XAIguiFormerClassifier
    documented = docstring_parameters(estimator)
    assert list(documented) == list(inspect.signature(estimator).parameters)
    train = docstring_parameters(commands.train)
    shared = {
        "preset",
        "epochs",
        "batch_size",
        "lr",
        "patience",
        "no_xai",
        "no_interactions",
        "no_age_interactions",
        "frequency_encoding",
    }
    assert all(documented[name] == train[name] for name in shared)


def test_an_undocumented_parameter_is_refused():
    def function(a, b):
        """Summary."""

    with pytest.raises(TypeError, match=r"\['b'\]"):
        options.document(options.Options(a=options.Option("int", "A.")))(function)


def test_choice_lists_are_the_package_s_tuples():
    from eegformer_cli.choices import (
        CAPTUM_METHODS,
        DEVICES,
        FREQUENCY_ENCODING_BY_PRESET,
        FREQUENCY_ENCODINGS,
        PRECISIONS,
        PRESETS,
    )
    from eegformer_cli.model import devices
    from eegformer_cli.model.xaiguiformer import ModelConfig

    assert options.one_of(FREQUENCY_ENCODINGS) in options.TRAIN["frequency_encoding"].text
    assert options.one_of(CAPTUM_METHODS) in options.EXPLAIN["method"].text
    assert options.one_of(DEVICES) in options.PREDICT["device"].text
    assert options.one_of(PRECISIONS) in options.PREDICT["precision"].text
    with pytest.raises(eegformer_cli.UsageError, match="'auto', 'cpu', 'cuda'"):
        devices.resolve_device("tpu")  # the device check lists the same tuple
    # the preset-dependent default of --frequency-encoding is the presets' own value
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


def test_no_help_mentions_data_beside_the_repository_and_its_examples_parse(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    names = sorted(typer.main.get_command(app).commands)
    for name in [None, *names]:
        with pytest.raises(SystemExit) as stopped:
            main(([name] if name else []) + ["--help"])
        text = capsys.readouterr().out
        assert stopped.value.code == 0 and "../shared" not in text and "shared/data" not in text
    for name in names:
        examples = [
            line.strip()
            for line in (typer.main.get_command(app).commands[name].help or "").splitlines()
            if line.strip().startswith(("eegformer ", "torchrun "))
        ]
        assert examples, name
        for line in examples:
            parse_command_line(line.split("   (")[0])  # "   (comment)" in the help


def test_train_help_shows_the_essentials_first_and_the_rest_in_panels(capsys, monkeypatch):
    from eegformer_cli.cli import train

    monkeypatch.setenv("COLUMNS", "250")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    panels = [
        line.split("─ ")[1].split(" ─")[0] for line in text.splitlines() if line.startswith("╭─ ")
    ]
    assert panels[:2] == ["Arguments", "Options"]
    assert set(panels[2:]) == {train.RECIPE, train.ABLATIONS, train.TRUST, train.COMPUTE}
    essentials = text.split("╭─ Options")[1].split("╭─")[0]
    flags = re.findall(r"│ (--[a-z-]+)", essentials)
    assert flags == [
        "--out",
        "--label-column",
        "--cv",
        "--repeats",
        "--holdout",
        "--seed",
        "--n-jobs",
        "--json",
        "--overwrite",
        "--help",
    ]
