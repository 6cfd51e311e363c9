"""The test tiers: ``make test-fast`` runs the tests not marked ``slow``, so every test that
starts another program (``subprocess``: the CLI, torchrun, Chromium; a Dask ``LocalCluster``),
reads the real datasets beside the repository, or runs the demo must be marked ``slow``, with
``@pytest.mark.slow`` or its module's ``pytestmark``. A test reaches them through its own body,
the module's helpers and fixtures it names, and theirs in turn.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
#: Names whose use makes a test slow, and why.
SLOW_NAMES = {
    "subprocess": "another process",
    "LocalCluster": "a Dask cluster",
    "shared_dataset": "the real datasets",
    "msu_dir": "the real datasets",
    "eegmat_dir": "the real datasets",
    "fixtures_dir": "the real datasets",
}
#: The command whose command line (a list starting with its name) makes a test slow.
SLOW_COMMAND = "demo"


def _is_slow_mark(node: ast.expr) -> bool:
    return ast.unparse(node) == "pytest.mark.slow"


def _is_demo_command(node: ast.AST) -> bool:
    first = node.elts[0] if isinstance(node, ast.List) and node.elts else None
    return isinstance(first, ast.Constant) and first.value == SLOW_COMMAND


def unmarked_slow_tests(source: str) -> dict[str, set[str]]:
    """Test function -> why it is slow, for each test of ``source`` that is slow but not
    marked ``slow``."""
    tree = ast.parse(source)
    marked_module = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and _is_slow_mark(node.value)
        for node in tree.body
    )
    definitions: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            definitions[node.name] = node
        elif isinstance(node, ast.Assign):
            definitions.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
    reasons: dict[str, set[str]] = {}

    def why(name: str, seen: frozenset[str]) -> set[str]:
        if name in reasons:
            return reasons[name]
        found = {SLOW_NAMES[name]} if name in SLOW_NAMES else set()
        node = definitions.get(name)
        if node is not None:
            for sub in ast.walk(node):
                if _is_demo_command(sub):
                    found.add("the demo")
                used = sub.id if isinstance(sub, ast.Name) else getattr(sub, "arg", None)
                if isinstance(used, str) and used != name and used not in seen:
                    found |= why(used, seen | {name})
        if not seen:
            reasons[name] = found
        return found

    return {
        name: why(name, frozenset())
        for name, node in definitions.items()
        if name.startswith("test_")
        and isinstance(node, ast.FunctionDef)
        and not marked_module
        and not any(_is_slow_mark(d) for d in node.decorator_list)
        and why(name, frozenset())
    }


def test_the_rule_finds_a_test_that_reaches_another_process_through_a_fixture():
    source = """
import subprocess
import pytest

@pytest.fixture
def finished():
    return subprocess.run(["true"])

def test_reaches_it(finished):
    assert finished.returncode == 0

@pytest.mark.slow
def test_marked(finished):
    assert finished.returncode == 0

def test_demo(tmp_path):
    main(["demo", "--out", str(tmp_path)])

def test_plain():
    assert 1 + 1 == 2
"""
    assert unmarked_slow_tests(source) == {
        "test_reaches_it": {"another process"},
        "test_demo": {"the demo"},
    }
    assert unmarked_slow_tests("import pytest\npytestmark = pytest.mark.slow\n" + source) == {}


def test_every_test_that_starts_a_program_reads_real_data_or_runs_the_demo_is_slow():
    offenders = {
        f"{path.name}::{name}": sorted(reasons)
        for path in sorted(TESTS.glob("test_*.py"))
        for name, reasons in unmarked_slow_tests(path.read_text(encoding="utf-8")).items()
    }
    assert not offenders, offenders
