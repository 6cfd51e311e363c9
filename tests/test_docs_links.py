"""Pointers to sections of the benchmark pages name headings those pages have, and
docs/benchmarks.md stays short (today's figures; their history goes to
docs/benchmarks-history.md).

A pointer is a page's name followed by quoted section names, as comments, docstrings and pages
write them: the page, then a comma or an opening parenthesis, then one or more names in double
quotes joined by commas or "and" (with or without the ``docs/`` prefix or backquotes around the
page). A comment or docstring may wrap anywhere, its continuation lines starting with ``#`` or
``#:``. A name matches a heading (a markdown ``#`` line outside code fences) when the heading,
its ``#`` marks left off, is the name or starts with it followed by a non-word character
("Ground truth" names "Ground truth (`bench_ground_truth.py`)"). docs/benchmarks-history.md
itself is not read: its "Moved from" lines record where text stood, not where it is.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = {
    "benchmarks.md": REPO / "docs" / "benchmarks.md",
    "benchmarks-history.md": REPO / "docs" / "benchmarks-history.md",
}
BENCHMARKS_MAX_LINES = 500
#: The page, then "," or "(", then quoted names joined by "," or "and".
_QUOTED = r'"[^"\n]+"'
POINTER = re.compile(
    r"(?<![\w/-])(?:docs/)?(benchmarks(?:-history)?\.md)`?\s*[,(]\s*"
    rf"({_QUOTED}(?:\s*(?:,|and)\s*{_QUOTED})*)"
)
#: A line break inside a comment or docstring, with the next line's indentation and "#"/"#:".
_WRAP = re.compile(r"[ \t]*\n[ \t]*(?:#:?[ \t]*)?")
_FENCE = re.compile(r"^(```|~~~)")


def headings(page: Path) -> list[str]:
    """The text of each markdown heading of ``page``, outside fenced code blocks."""
    found, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def names_a_heading(name: str, titles: list[str]) -> bool:
    return any(
        title == name or (title.startswith(name) and not title[len(name)].isalnum())
        for title in titles
    )


def pointers(text: str) -> list[tuple[str, str]]:
    """(page, section name) of every pointer in ``text``."""
    text = _WRAP.sub(" ", text)
    return [
        (page, name)
        for page, names in POINTER.findall(text)
        for name in re.findall(r'"([^"]+)"', names)
    ]


def sources() -> list[Path]:
    files = [
        *sorted((REPO / "eegformer_cli").rglob("*.py")),
        *sorted((REPO / "benchmarks").rglob("*.py")),
        *sorted((REPO / "benchmarks").rglob("*.sh")),
        *sorted((REPO / "tests").rglob("*.py")),
        REPO / "README.md",
        REPO / "DEVELOPERS.md",
        REPO / "Makefile",
        *sorted((REPO / "docs").rglob("*.md")),
    ]
    skipped = {PAGES["benchmarks-history.md"], Path(__file__).resolve()}
    return [path for path in files if path.is_file() and path not in skipped]


def test_benchmarks_page_is_under_its_line_limit():
    lines = PAGES["benchmarks.md"].read_text(encoding="utf-8").splitlines()
    assert len(lines) < BENCHMARKS_MAX_LINES


def test_every_pointer_names_a_heading_of_its_page():
    titles = {page: headings(path) for page, path in PAGES.items()}
    found, broken = 0, []
    for path in sources():
        for page, name in pointers(path.read_text(encoding="utf-8")):
            found += 1
            if not names_a_heading(name, titles[page]):
                broken.append(f'{path.relative_to(REPO)}: {page}, "{name}"')
    assert found > 20, "the pointer pattern no longer finds the pointers"
    assert not broken, "pointers to no heading:\n" + "\n".join(broken)


def test_the_pointer_pattern_reads_wrapped_and_listed_names():
    page = "benchmarks" + ".md"
    text = f'(docs/{page}, "GPU" and\n    #: "Threads"); `docs/{page}` ("A", "B c")'
    assert pointers(text) == [(page, "GPU"), (page, "Threads"), (page, "A"), (page, "B c")]
    assert pointers(f"see docs/{page}.") == []
    assert names_a_heading("Ground truth", ["Ground truth (`bench_ground_truth.py`)"])
    assert not names_a_heading("Groun", ["Ground truth"])
    assert not names_a_heading("Linear path", ["The linear path"])
