"""The code's shape: no import cycle inside ``eegformer_cli``, no import of a higher layer, no
module longer than :data:`MAX_LINES` lines and no function body longer than
:data:`MAX_FUNCTION_LINES`. Imports inside functions count: a cycle or an
upward arrow hidden in a function is still one a reader has to untangle.

The layers, bottom first (:data:`LAYERS`); a module may import its own layer and those below:

1. base (the package root, choices, errors, atomic, console, versions, parallel, provenance,
   overwrite_protection): files, terminal, workers, provenance rules on plain values, which
   outputs may be written over; no EEG idea (the root's public names are loaded by name when first used, not
   imported); ``choices`` holds the user-facing choice tuples and defaults as plain values,
   imported by every layer that checks or documents them (the model, the attributions,
   ``option_docs`` and ``cli/``), so it sits at the bottom and imports nothing;
2. simulation: synthetic recordings for the demo and tests (simulate, scenarios); they import
   only the base, and no product code needs them;
3. recordings: reading EEG files, channel names, cleaning, participants tables;
4. connectivity: frequency bands and a cleaned recording's coherence/wPLI tokens;
5. preprocess.output: the output folder's format (manifest, connectome files), below its
   writer and all its readers so that it is read and written in one module;
6. preprocess: recordings -> an output folder (settings, one recording, a whole run);
7. model: the network and its forward over whole recordings, and the torch devices it runs on;
   it knows no files;
8. evaluation: judging predictions (metrics and their typed ``metrics.json``, calibration,
   conformal sets, the two reference models) on arrays, with no network and no run folder: every
   fit scores itself with them, so they sit below fitting;
9. training: fitting (config, data, splits, the epoch loop, one fold, model files): a preprocess
   folder -> fitted models and their scores;
10. experiment: a ``train`` run and its judgement (the run, its run folder, the shortcut audit,
    the permutation test and its null labels, the verdict): it calls the fold runner of
    ``training`` (the permutation test refits every fold), so it sits above fitting;
11. option_docs: every option's text, once (it reads the training presets), for the estimator's
    docstring, the commands' docstrings and the CLI's help;
12. estimator: the scikit-learn estimator (fits and predicts through ``training``);
13. explain: attributions and the explanation files, from model files and run folders;
14. report: the HTML report of a run folder (its sections read ``explain``'s files);
15. inference: a trained model on new recordings: the Python API's model object
    (``trained_model``), its inputs and predictions (``inputs``), one ``explain`` call
    (``explain_call``, with ``explain``) and what its calls report about their recordings
    (``outcomes``: warnings, failures, the exception at the end);
16. commands: the function behind each command;
17. cli, __main__: arguments, exit codes and the terminal.
"""

from __future__ import annotations

import ast

from sources import PACKAGE, module_name

#: Lines as ruff formats them: a module longer than this holds more than one idea.
MAX_LINES = 600
#: Lines of a function's body, from its first statement (the docstring counts) to its end; the
#: signature does not count, so Typer's option declarations in a command's signature are free.
MAX_FUNCTION_LINES = 60
ROOT = "eegformer_cli"
#: Module names below ``eegformer_cli.`` per layer (module docstring), bottom first; a name
#: covers its submodules, the longest name that covers a module decides its layer, and
#: ``eegformer_cli`` stands for the package root only.
LAYERS = (
    (
        ROOT,
        "choices",
        "errors",
        "atomic",
        "console",
        "versions",
        "parallel",
        "provenance",
        "overwrite_protection",
    ),
    ("simulation",),
    ("recordings",),
    ("connectivity",),
    ("preprocess.output",),
    ("preprocess",),
    ("model",),
    ("evaluation",),
    ("training",),
    ("experiment",),
    ("option_docs",),
    ("estimator",),
    ("explain",),
    ("report",),
    ("inference",),
    ("commands",),
    ("cli", "__main__"),
)


#: The modules at the package root, each with its reason to stand there rather than in a room:
#: the entry points, the public API (``eegformer_cli.__all__``, docs/guide/python.md) and the
#: low-level helpers that rooms of every layer share. A new module goes into the room of its
#: step (``preprocess/``, ``training/``, ``inference/``, ...), not here.
ROOT_MODULES = {
    "__init__": "the public API: the names of __all__, loaded when first used",
    "__main__": "entry point: python -m eegformer_cli",
    "commands": "entry point and public module: the function behind each command",
    "estimator": "public API: the scikit-learn estimator",
    "errors": "public API and shared: the exceptions, each the CLI's exit code",
    "option_docs": "the entry points' option texts, once, for docstrings and --help",
    "choices": "shared: the user-facing choice tuples and defaults, as plain values",
    "atomic": "shared: atomic writes and reads of files",
    "console": "shared: the terminal (messages, warnings, progress)",
    "overwrite_protection": "shared: which outputs may be written over",
    "parallel": "shared: worker processes and their threads",
    "provenance": "shared: provenance rules on plain values (training and inference use them)",
    "versions": "shared: the package versions every output records",
}
#: At most this many modules at the root (issue 47), and at most :data:`MAX_EXPLAIN_MODULES`
#: in ``explain/`` (the report's modules have their own room, ``report/``).
MAX_ROOT_MODULES = 13
MAX_EXPLAIN_MODULES = 8


def package_imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its file (``from a import b`` counts
    as importing ``a.b`` when that is a module, else ``a``)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module in modules and not node.level:
                submodules = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                if len(submodules) < len(node.names):
                    imported.add(node.module)  # some names are the module's own
                imported |= submodules
        graph[name] = imported - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first = last), or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of ``module`` (a dotted name), None when no layer names it."""
    best, found = -1, None
    for index, names in enumerate(LAYERS):
        for name in names:
            full = ROOT if name == ROOT else f"{ROOT}.{name}"
            covers = module == full or (name != ROOT and module.startswith(full + "."))
            if covers and len(full) > best:
                best, found = len(full), index
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module of a higher layer than the importer's, as ``a -> b``."""
    return [
        f"{module} -> {imported}"
        for module in sorted(graph)
        for imported in sorted(graph[module])
        if layer_of(imported) > layer_of(module)
    ]


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_inside_the_package():
    graph = package_imports()
    assert {"eegformer_cli.experiment.run", "eegformer_cli.model.xaiguiformer"} <= graph.keys()
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_every_module_has_a_layer():
    unplaced = [name for name in package_imports() if layer_of(name) is None]
    assert not unplaced, f"add them to LAYERS: {unplaced}"


def test_the_layer_rule_finds_an_upward_import():
    fit, inference = "eegformer_cli.training.fit", "eegformer_cli.inference.inputs"
    assert upward_imports({fit: {inference}, inference: set()}) == [f"{fit} -> {inference}"]
    assert upward_imports({inference: {fit}, fit: set()}) == []
    output, run = "eegformer_cli.preprocess.output", "eegformer_cli.preprocess.run"
    assert layer_of(output) < layer_of(run) and layer_of("eegformer_cli.errors") == 0
    assert upward_imports({output: {run}, run: {output}}) == [f"{output} -> {run}"]


def test_fitting_sits_between_the_scores_and_the_run_that_judges_it():
    """Fitting and judging are two rooms: every fit scores itself with ``evaluation`` (below),
    and the run's judgement (``experiment``, above) refits through ``training``'s fold runner."""
    fit, folds = "eegformer_cli.training.fit", "eegformer_cli.training.run_plan"
    metrics, permutation = (
        "eegformer_cli.evaluation.metrics",
        "eegformer_cli.experiment.permutation",
    )
    assert layer_of(metrics) < layer_of(fit) == layer_of(folds) < layer_of(permutation)
    graph = package_imports()
    assert metrics in graph[fit] and folds in graph[permutation]


def test_no_module_imports_a_higher_layer():
    upward = upward_imports(package_imports())
    assert not upward, "\n".join(upward)


def test_npz_files_are_opened_by_their_formats_owners_only():
    """np.load appears in preprocess/output.py (connectome files) and
    explain/class_summary.py (the class summary) only: every other module reads those files
    through them."""
    loading = {
        module_name(p) for p in PACKAGE.rglob("*.py") if "np.load(" in p.read_text(encoding="utf-8")
    }
    assert loading == {"eegformer_cli.preprocess.output", "eegformer_cli.explain.class_summary"}


#: The file names of each output folder, by the module that owns them: it reads and writes
#: them, and every other module asks it for a path or a value (issue 47). ``np.load`` has its
#: own rule above.
FILE_OWNERS = {
    "eegformer_cli.experiment.run_folder": (
        "config.json",
        "splits.json",
        "history.jsonl",
        "oof_predictions.tsv",
        "metrics.json",
        "model.pt",
        "final.json",
    ),
    "eegformer_cli.preprocess.output": ("manifest.tsv", "preprocess.json", "connectomes"),
    "eegformer_cli.explain.class_summary": ("class_summary.json", "class_summary.npz"),
}
#: The owners' names for those files and paths: a JSON read that names one outside its owner
#: reads the file around it.
OWNED_NAMES = (
    "CONFIG",
    "SPLITS",
    "HISTORY",
    "METRICS",
    "FINAL",
    "SETTINGS_NAME",
    "SUMMARY_JSON",
    "model_path",
    "metrics_path",
)
#: ``overwrite_protection`` (the base layer, below every owner) tells whose folder a folder is
#: by one marker file of each; it names those markers and reads no value from them.
MARKER_READERS = {
    "eegformer_cli.overwrite_protection": ("manifest.tsv", "config.json", "class_summary.json")
}
JSON_READS = ("json.load", "json.loads", "read_json")


def files_read_around_their_owners(sources: dict[str, str]) -> list[str]:
    """``module:line: what`` for every string that is exactly an owned file name outside its
    owner (a path built by hand: ``run_dir / "model.pt"``), and every JSON read outside an
    owner whose argument names an owned file or an owner's name for it."""
    owner_of = {name: owner for owner, names in FILE_OWNERS.items() for name in names}
    found = []
    for module, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and node.value in owner_of:
                allowed = {
                    owner_of[node.value],
                    *(m for m, names in MARKER_READERS.items() if node.value in names),
                }
                if module not in allowed:
                    found.append(f"{module}:{node.lineno}: {node.value!r}")
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(JSON_READS):
                argument = " ".join(ast.unparse(a) for a in node.args)
                named = [n for n in (*owner_of, *OWNED_NAMES) if n in argument]
                if named and module not in FILE_OWNERS:
                    found.append(f"{module}:{node.lineno}: JSON read of {named[0]}")
    return found


def test_the_owner_rule_finds_a_path_built_by_hand_and_a_json_read():
    hand = 'from pathlib import Path\nmodel = Path("run") / "model.pt"\n'
    read = "import json\nfrom eegformer_cli.preprocess import output\n"
    read += "json.loads((data / output.SETTINGS_NAME).read_text())\n"
    assert files_read_around_their_owners({"eegformer_cli.report.build": hand}) == [
        "eegformer_cli.report.build:2: 'model.pt'"
    ]
    assert files_read_around_their_owners({"eegformer_cli.experiment.audit": read}) == [
        "eegformer_cli.experiment.audit:3: JSON read of SETTINGS_NAME"
    ]
    assert files_read_around_their_owners({"eegformer_cli.experiment.run_folder": hand}) == []


def test_run_and_preprocess_folder_files_are_read_by_their_owners_only():
    """Every run-folder path comes from ``experiment/run_folder.py``, ``preprocess.json`` and
    the manifest are read by ``preprocess/output.py`` and the class summary by
    ``explain/class_summary.py``: no other module spells their names or reads their JSON."""
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    found = files_read_around_their_owners(sources)
    assert not found, "\n".join(found)


def test_no_module_is_longer_than_max_lines():
    lengths = {
        module_name(p): len(p.read_text(encoding="utf-8").splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, too_long


def long_functions() -> dict[str, int]:
    """``{"module:function": body lines}`` for every function (methods and nested functions
    too) whose body is longer than :data:`MAX_FUNCTION_LINES`."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.body[0].lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{module_name(path)}:{node.name}"] = lines
    return found


def test_no_function_is_longer_than_max_function_lines():
    too_long = long_functions()
    assert not too_long, too_long


def test_the_root_holds_only_its_named_modules():
    root = {p.stem for p in PACKAGE.glob("*.py")}
    assert root == ROOT_MODULES.keys(), "give a new module a room, or its reason in ROOT_MODULES"
    assert len(root) <= MAX_ROOT_MODULES
    assert len(list((PACKAGE / "explain").glob("*.py"))) <= MAX_EXPLAIN_MODULES
