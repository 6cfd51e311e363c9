"""The code's shape: no import cycle inside ``eegformer_cli`` (imports inside functions count:
a cycle hidden in a function is still a cycle a reader has to untangle) and no module longer
than :data:`MAX_LINES` lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eegformer_cli"
MAX_LINES = 700


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
                    imported.add(node.module)        # some names are the module's own
                imported |= submodules
        graph[name] = imported - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first = last), or None (depth-first search)."""
    state: dict[str, int] = {}                     # 1 = on the current path, 2 = finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
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


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_inside_the_package():
    graph = package_imports()
    assert {"eegformer_cli.training.run", "eegformer_cli.model.xaiguiformer"} <= graph.keys()
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_no_module_is_longer_than_700_lines():
    lengths = {module_name(p): len(p.read_text(encoding="utf-8").splitlines())
               for p in PACKAGE.rglob("*.py")}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, too_long
