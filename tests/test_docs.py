"""The README and the user guide (docs/guide/) as a newcomer would use them: every code block
that runs on one CPU machine is run as written, and the others (cluster, several GPUs, ``make``)
have their command lines parsed.

Fences: a ```` ```bash```` or ```` ```python```` block runs, in the order of the page, in one
temporary folder (with ``sample_data`` linked in, as in a source checkout); a block marked
``no-run`` (```` ```bash no-run````) does not, but each ``eegformer`` or ``torchrun -m
eegformer_cli`` line in it must parse (options and their types) and each ``make`` target must
exist. The README runs first; each guide page then runs in the same folder, on its outputs.
Simple ``eegformer ...`` lines run in this process (as the console script does, without paying
its start-up each time); every other line runs in ``bash`` with ``eegformer`` on the PATH.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from sources import parse_command_line

from eegformer_cli.cli.app import main

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "guide"
PAGES = [REPO / "README.md", *sorted(GUIDE.glob("*.md"))]
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.M | re.S)
#: Characters that make a line a shell line rather than one command.
SHELL = set("|<>&;$`*")
README_MAX_LINES = 150


def blocks(page: Path) -> list[tuple[str, bool, str]]:
    """(language, runs, code) of each fenced block of ``page``."""
    return [
        (lang, "no-run" not in flags, code)
        for lang, flags, code in FENCE.findall(page.read_text(encoding="utf-8"))
    ]


def command_lines(code: str) -> list[str]:
    """The lines of a shell block, continuation lines joined, blank lines left out."""
    return [line.strip() for line in code.replace("\\\n", " ").splitlines() if line.strip()]


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8"), re.M))


def check_not_run(code: str) -> None:
    """A no-run block: its eegformer command lines parse, its make targets exist."""
    for line in command_lines(code):
        line = line.split("#")[0].strip()
        words = line.split()
        if words and words[0] == "make":
            assert words[1] in make_targets(), line
        for part in re.split(r"[|;&]+|\bdo\b|\bthen\b", line):
            part = part.strip()
            if part.startswith(("eegformer ", "torchrun ")) or re.match(
                r"^\w+=\S+ torchrun ", part
            ):
                parse_command_line(part)


class Workspace:
    """A temporary folder where pages run: ``sample_data`` linked in, ``eegformer`` on PATH."""

    def __init__(self, root: Path):
        self.root = root
        (root / "sample_data").symlink_to(REPO / "sample_data")
        bin_dir = root.parent / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "eegformer").write_text(
            f'#!/bin/sh\nexec "{sys.executable}" -m eegformer_cli "$@"\n', encoding="utf-8"
        )
        (bin_dir / "eegformer").chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(REPO),
            "COLUMNS": "120",
        }

    def run_page(self, page: Path) -> None:
        for lang, runs, code in blocks(page):
            if not runs:
                check_not_run(code)
            elif lang == "bash":
                for line in command_lines(code):
                    self.run_shell_line(line)
            elif lang == "python":
                self.run(code, [sys.executable, "-"])

    def run_shell_line(self, line: str) -> None:
        words = shlex.split(line, comments=True)
        if not words:
            return
        if words[0] == "eegformer" and not SHELL & set(line.split("#")[0]):
            here = Path.cwd()
            os.chdir(self.root)
            try:
                with pytest.raises(SystemExit) as stopped:
                    main(words[1:])
            finally:
                os.chdir(here)
            assert stopped.value.code == 0, line
        else:
            self.run(line, ["bash", "-e", "-o", "pipefail"])

    def run(self, code: str, command: list[str]) -> None:
        done = subprocess.run(
            command,
            input=code,
            cwd=self.root,
            env=self.env,
            text=True,
            capture_output=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{code}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    """The README's blocks run: the quick start's study, prep, run and explanations."""
    root = tmp_path_factory.mktemp("docs") / "work"
    root.mkdir()
    space = Workspace(root)
    space.run_page(REPO / "README.md")
    return space


@pytest.mark.slow
def test_readme_is_short_and_its_examples_run(workspace):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert (workspace.root / "report.html").is_file()
    for page in ("docs/benchmarks.md", "docs/architecture.md", "docs/guide/README.md"):
        assert f"]({page})" in readme and (REPO / page).is_file(), page


@pytest.mark.slow
@pytest.mark.parametrize("page", [p.name for p in PAGES[1:]])
def test_guide_page_examples_run(workspace, page):
    workspace.run_page(GUIDE / page)


def test_no_page_uses_data_beside_the_repository():
    for page in PAGES:
        assert "../shared" not in page.read_text(encoding="utf-8"), page


def test_not_run_blocks_are_checked():
    """A no-run line with an unknown option or a missing make target fails."""
    check_not_run(
        "torchrun --standalone --nproc_per_node 4 -m eegformer_cli train prep "
        "--out run --label-column diagnosis\nfor i in 0 1; do eegformer train prep "
        "--out run -l diagnosis --fold $i & done"
    )
    with pytest.raises(Exception, match="No such option: --no-such-option"):
        check_not_run("eegformer train prep --out run --no-such-option")
    with pytest.raises(Exception, match="valid integer"):
        check_not_run("eegformer train prep --out run --fold one")
    with pytest.raises(AssertionError):
        check_not_run("make no-such-target")
