"""Comments and docstrings in ``eegformer_cli/`` say what the code does and why, with units and
shapes, not when it was tuned, on which dataset or machine, under which issue, or what a run
measured: the figures live in docs/benchmarks.md (their history in docs/benchmarks-history.md),
where a comment may point.

Two checks, each on the package's comments (``tokenize``) and string literals (``ast``:
docstrings, help texts, messages; implicitly joined pieces read as one):

- the diary (:data:`DATE`, :data:`NAMES`): a date, a benchmark dataset's name, an issue number;
- run results and machines (:data:`MACHINE`, :data:`RUN_FIGURE`): a machine ("H100", "EPYC",
  "Xeon", "this project's CPU", a load average), "N of M folds" (or recordings, seeds, studies,
  ...), "kept in N", a study named by its size ("a 10-person study"), a balanced accuracy or
  AUROC quoted as a result ("BAC 0.65", "0.016 BAC", "0.53 -> 0.65"), a timing or speed-up
  quoted as a result ("4.3x faster", "15 ms per step", "6.7 s of CPU", "instead of 15 ms").

Exempt from the run figures (a machine is refused everywhere): format strings (f-strings and
literals with ``{}`` or ``%`` placeholders: the figures they print come from the run at hand);
in every text, inline literals in double backquotes (:func:`figure_text`: an example of an
output's format, ````"BAC 0.66"````); the chance level (BAC or AUROC 0.5). Settings, shapes and
units are not results ("30 s per segment", "5 folds x 3", "a 0.6 cosine"), and electrode names
(T4, ...) are not machines.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eegformer_cli"

MONTHS = (
    "Jan|January|Feb|February|Mar|March|Apr|April|May|Jun|June|Jul|July|Aug|August|Sep|Sept"
    "|September|Oct|October|Nov|November|Dec|December"
)
#: A date ("22 Nov", "Nov 22", "2026-11-22"; month names as written, capitalised) ...
DATE = re.compile(
    rf"\b\d{{1,2}}(/\d{{1,2}})* ({MONTHS})\b|\b({MONTHS}) \d{{1,2}}\b"
    r"|\b20\d\d-\d\d-\d\d\b"
)
#: ... a benchmark dataset's name, an issue number ("issue 19", "#31").
NAMES = re.compile(
    r"\bmsu\b|msu-schizophrenia|\beegmat|\btdbrain\b|\btuab\b"
    r"|\bissue #?\d+|(?<![\w&])#\d{2,}\b",
    re.IGNORECASE,
)


def _spaced(pattern: str) -> str:
    """``pattern`` with each space matching any run of white space (a docstring wraps anywhere)
    and each optional space (" ?") any, or none."""
    return pattern.replace(" ?", r"\s*").replace(" ", r"\s+")


#: A machine: accelerators and CPUs by name, "this project's CPU", a load average.
MACHINE = re.compile(
    _spaced(
        r"\b(H100|H200|A100|V100|EPYC|Xeon|Ryzen|Threadripper)\b|\bHBM\d?\b|\bRTX ?\d{3,4}\b"
        r"|\b(this|the) project's (\d+-core )?(machine|CPU|VM|GPU)s?\b|\bload average\b|\bVM\b"
    )
)
_NUMBER = r"\d+(?:\.\d+)?"
_SCORE = r"(?:BAC|AUROC|AUC-PR|balanced accuracy)"
_UNITS = r"(?:steps?|fits?|folds?|recordings?|epochs?|calls?|permutations?|matri(?:x|ces)|runs?)"
#: A run's result: "N of M folds", "kept in N", "a 10-person study", a score or a timing.
RUN_FIGURE = re.compile(
    _spaced(
        r"\b\d+ (?:of|/|out of) \d+ (?:folds?|splits?|seeds?|studies|runs?|recordings|participants"
        r"|people)\b"
        r"|\bkept in \d+\b"
        r"|\b\d+-(?:person|participant|people)\b"
        rf"|\b{_SCORE}(?: of| =|:)? ?(?!0?\.50*\b)(?:0?\.\d+|1\.0+)\b"
        rf"|(?<![\w.])(?!0?\.50*\b)0?\.\d+ {_SCORE}\b"
        r"|\b\d\.\d+ ?(?:->|→) ?\d\.\d+\b"
        rf"|\b{_NUMBER} ?x (?:faster|slower)\b"
        rf"|\b{_NUMBER} ?(?:ms|s) (?:per|a|an) {_UNITS}\b"
        rf"|\b{_NUMBER} ?(?:ms|s) of CPU\b"
        rf"|\binstead of (?:about )?{_NUMBER} ?(?:ms|s)\b|\b{_NUMBER} ?(?:ms|s) instead of\b"
    ),
    re.IGNORECASE,
)
#: The marker a comment's continuation line starts with ("# ", "#: ").
COMMENT_MARK = re.compile(r"^#+:? ?")
#: Placeholders of str.format and of printf-style formatting.
PLACEHOLDER = re.compile(r"\{[^{}\s]*\}|%(?:\(\w+\))?[-+ #0]*\d*(?:\.\d+)?[sdifrge]")
#: An inline literal in double backquotes (rst), e.g. an example of an output line.
INLINE_LITERAL = re.compile(r"``.*?``", re.S)


def texts(source: str) -> list[tuple[int, str, bool]]:
    """(line, text, is_format) of every comment and string literal of ``source``.

    Comments come from ``tokenize``, a block of consecutive comment lines as one text; string
    literals from ``ast`` (docstrings included; an implicitly joined literal is one text; an
    f-string is one text, ``{}`` for each of its replacement fields, with ``is_format`` true,
    as is a literal with placeholders)."""
    found: list[tuple[int, str, bool]] = []
    previous = -1
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if line == previous + 1 and found:  # a block of comment lines is one text
            start, text, _ = found.pop()
            found.append((start, f"{text}\n{COMMENT_MARK.sub('', token.string)}", False))
        else:
            found.append((line, token.string, False))
        previous = line
    in_fstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            in_fstrings.update(id(v) for v in node.values)
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            found.append((node.lineno, text, True))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in in_fstrings
        ):
            found.append((node.lineno, node.value, bool(PLACEHOLDER.search(node.value))))
    return sorted(found)


def diary_lines(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal of ``source`` that reads like a diary."""
    found = []
    for line, text, _ in texts(source):
        match = DATE.search(text) or NAMES.search(text)
        if match:
            found.append((line, match.group(0)))
    return found


def figure_text(text: str) -> str:
    """``text`` with its inline literals left out (the exempt examples of an output)."""
    return INLINE_LITERAL.sub(" ", text)


def run_figure_lines(source: str) -> list[tuple[int, str]]:
    """(line, match) of every comment and string literal of ``source`` that quotes a run's
    result or names a machine; format strings are checked for machines alone (see the module's
    docstring)."""
    found = []
    for line, text, is_format in texts(source):
        text = figure_text(text)
        for pattern in (MACHINE,) if is_format else (MACHINE, RUN_FIGURE):
            found += [
                (line + text[: match.start()].count("\n"), match.group(0))
                for match in pattern.finditer(text)
            ]
    return found


def test_the_pattern_finds_dates_datasets_and_issue_numbers_and_passes_plain_text():
    source = (
        "x = 1  # tuned 22 Nov on msu\n"
        'def f():\n    """Chosen in issue 19 (see #31)."""\n'
        'y = "25/26 Nov"\n'
        'z = "a 30 s epoch, 8 bands, 1e-5 eps, 0.9 coverage"  # channel #3? no: one #\n'
    )
    hits = [text for _, text in diary_lines(source)]
    assert hits == ["22 Nov", "issue 19", "25/26 Nov"]
    assert diary_lines('"""Shapes (B, T, d); 16 channels; seeds 0-2."""\n') == []


def test_the_patterns_find_run_figures_and_machines_and_spare_the_exemptions():
    offending = [
        "the residual was kept in 4 of 5 folds",
        "kept in 6 of 15 folds of a 10-person study",
        "measured on an H100",
        "on the 2-core EPYC, load average 7-9",
        "the Xeon VM",
        "on this project's 2-core CPU",
        "test BAC 0.53 on raw inputs against 0.65 standardised",
        "by 0.010 to 0.016 BAC",
        "balanced accuracy 0.74-0.87",
        "z-scored inputs (0.53 -> 0.65)",
        "about 14x faster than plain autograd",
        "3.6 ms instead of 15 ms per step",
        "6.7 s of CPU per fold",
        "an 84-participant clinical set",
    ]
    for text in offending:
        assert run_figure_lines(f"# {text}\n"), text
        assert run_figure_lines(f'def f():\n    """{text}."""\n'), text
    # wrapped lines: a docstring's, a block of comments
    assert run_figure_lines('"""test BAC\n0.53 on raw inputs."""\n')
    assert run_figure_lines("# the residual was kept in\n# 6 of 15 folds\nx = 1\n")
    # implicitly joined pieces (a help text) are one text
    assert run_figure_lines('help = ("float32 (no speed gained on an " "H100)")\n')
    assert run_figure_lines('help = (f"{choices} (float32 on an " "H100)")\n')
    # format strings: spared by the exemption alone (their text matches)
    for code in ('f"{model}: kept in 3 of 5 folds"', '"%s: BAC 0.91 in 3 of 5 folds" % name'):
        assert RUN_FIGURE.search(code)
        assert run_figure_lines(code + "\n") == [], code
    # an inline literal: spared because figure_text leaves it out
    assert RUN_FIGURE.search("``BAC 0.66``") and not RUN_FIGURE.search(figure_text("``BAC 0.66``"))
    spared = [
        'f"{n_kept} of {n_folds} folds, BAC {bac:.3f}"',
        '"kept in %d of %d folds" % (kept, folds)',
        '"""``"AUROC 0.71, 95 % CI 0.58 to 0.84; BAC 0.66"`` for people."""',
        '"""Against chance (AUROC 0.5, BAC 1 / n_classes)."""',
        '"""Electrodes T3/T4/T5/T6 (old names); 4 of the 19 channels; 30 s per segment."""',
        '"""(B, T, C, C) float32; 8 bands; a 0.6 cosine; C by inner CV; 5 folds x 3."""',
        "x = 1  # one BLAS thread: faster for these tiny fits (docs/benchmarks.md)",
    ]
    for code in spared:
        assert run_figure_lines(code + "\n") == [], code


def _offenders(check) -> dict[str, list[tuple[int, str]]]:
    return {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if (hits := check(path.read_text(encoding="utf-8")))
    }


def test_no_dates_dataset_names_or_issue_numbers_in_the_package():
    offenders = _offenders(diary_lines)
    assert not offenders, offenders


def test_no_run_figures_or_machines_in_the_package():
    offenders = _offenders(run_figure_lines)
    assert not offenders, offenders
