"""Comments and docstrings in ``eegformer_cli/`` say what the code does and why, not when it was
tuned, on which dataset, or under which issue: that history lives in docs/benchmarks-history.md.
"""

from __future__ import annotations

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


def diary_lines(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal of ``source`` that reads like a diary."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            match = DATE.search(token.string) or NAMES.search(token.string)
            if match:
                found.append((token.start[0], match.group(0)))
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


def test_no_dates_dataset_names_or_issue_numbers_in_the_package():
    offenders = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if (hits := diary_lines(path.read_text(encoding="utf-8")))
    }
    assert not offenders, offenders
