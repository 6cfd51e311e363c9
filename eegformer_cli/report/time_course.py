"""The report's explanations in time, from an ``eegformer explain`` folder's segment tables
(``explain/segment_attributions.timeline_rows``, one per recording): each segment's part of
the explained class's logit against its onset (s), and in words the cells (band and channel
pair) most often among the strongest of the segments where the logit rises (those above their
recording's median contribution), and which two of them come together most often.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from eegformer_cli.report.figures import inches, legend_below
from eegformer_cli.report.page import add_figure, add_note

#: Recordings drawn in the time-course figure (the first ones of ``recordings.csv``).
DRAWN_RECORDINGS = 8
#: Cells named per explained class in the note.
NAMED_CELLS = 3


def segment_tables(folder: Path) -> dict[str, list[dict]]:
    """Each explained recording's segment table (rows of strings), by recording id, in the
    order of ``recordings.csv``; a recording without one (explained by an earlier version) is
    left out."""
    from eegformer_cli.explain.export import read_recordings_table, read_segment_table

    tables = {}
    for row in read_recordings_table(folder) or []:
        table = read_segment_table(folder, row["recording_id"])
        if table:
            tables[row["recording_id"]] = table
    return tables


def _number(text: str) -> float:
    """A table's float, NaN for an empty cell (an unknown onset)."""
    return float(text) if text not in ("", None) else math.nan


def _cells(row: dict) -> set[str]:
    """The cells (``band channel_a-channel_b``) a segment's row names."""
    return {value for key, value in row.items() if key.startswith("cell_") and value}


def time_course_figure(tables: dict[str, list[dict]]):
    """One line per recording (at most :data:`DRAWN_RECORDINGS`): the segment's onset (s; its
    index where the file gives no onsets) against its contribution (logit units), coloured by
    the explained class."""
    fig, ax = plt.subplots(figsize=inches(8.0, 4.0), layout="constrained")
    targets = sorted({table[0]["target"] for table in tables.values()})
    colours = {target: f"C{k % 10}" for k, target in enumerate(targets)}
    onsets_known = True
    for table in itertools.islice(tables.values(), DRAWN_RECORDINGS):
        onsets = np.array([_number(row["onset_s"]) for row in table])
        if np.isnan(onsets).any():
            onsets, onsets_known = np.arange(len(table), dtype=float), False
        target = table[0]["target"]
        ax.plot(
            onsets,
            [_number(row["contribution"]) for row in table],
            marker=".",
            linewidth=1,
            color=colours[target],
            label=f"explained class {target}",
        )
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_xlabel("segment onset (s)" if onsets_known else "segment")
    ax.set_ylabel("contribution to the logit (logit units)")
    legend_below(fig, ax, ncol=min(len(targets), 4))
    return fig


def rising_cells(tables: dict[str, list[dict]]) -> dict[str, dict]:
    """Per explained class, over its recordings: ``n_recordings``, ``n_rising`` (segments whose
    contribution is above their recording's median), ``n_other``, ``rising`` and ``other``
    (Counters: in how many of those segments each cell is among the strongest) and ``together``
    (a Counter of the cell pairs among the strongest of the same rising segment)."""
    classes: dict[str, dict] = {}
    for table in tables.values():
        entry = classes.setdefault(
            table[0]["target"],
            {
                "n_recordings": 0,
                "n_rising": 0,
                "n_other": 0,
                "rising": Counter(),
                "other": Counter(),
                "together": Counter(),
            },
        )
        entry["n_recordings"] += 1
        contributions = np.array([_number(row["contribution"]) for row in table])
        median = float(np.median(contributions))
        for row, contribution in zip(table, contributions):
            cells = _cells(row)
            side = "rising" if contribution > median else "other"
            entry[f"n_{side}"] += 1
            entry[side].update(cells)
            if side == "rising":
                entry["together"].update(itertools.combinations(sorted(cells), 2))
    return classes


def _percent(count: int, total: int) -> str:
    return f"{100 * count / total:.0f} %" if total else "n/a"


def time_course_note(classes: dict[str, dict]) -> str:
    """The note's sentences: per explained class, the :data:`NAMED_CELLS` cells most often
    among the strongest where the logit rises (with how often elsewhere) and the two most
    often there together; that the contributions do not vary where no segment rises."""
    sentences = []
    for name, entry in classes.items():
        head = f"Class {name} ({entry['n_recordings']} recordings)"
        if not entry["n_rising"] or not entry["rising"]:
            sentences.append(
                f"{head}: the segments' contributions do not vary, or no cell carries any of "
                "them (the transformer path adds nothing that changes over time here)"
            )
            continue
        named = ", ".join(
            f"{cell} ({_percent(count, entry['n_rising'])} of them, "
            f"{_percent(entry['other'][cell], entry['n_other'])} of the other segments)"
            for cell, count in entry["rising"].most_common(NAMED_CELLS)
        )
        sentence = (
            f"{head}: where the logit rises (the {entry['n_rising']} segments above their "
            f"recording's median contribution) the cells most often among a segment's "
            f"strongest are {named}"
        )
        if entry["together"]:
            (first, second), count = entry["together"].most_common(1)[0]
            sentence += (
                f"; most often together: {first} with {second} "
                f"({_percent(count, entry['n_rising'])} of them)"
            )
        sentences.append(sentence)
    return ". ".join(sentences) + "."


def add_time_course_section(report, folder: Path, section: str) -> None:
    """The time-course figure and its note (nothing for a folder without segment tables:
    explanations of an earlier version)."""
    from eegformer_cli.explain.export import SEGMENT_TABLE_SUFFIX

    tables = segment_tables(folder)
    if not tables:
        return
    shown = min(len(tables), DRAWN_RECORDINGS)
    add_figure(
        report,
        time_course_figure(tables),
        "Explanations in time",
        section,
        caption=(
            "Each segment's part of its recording's logit of the explained class (the "
            "transformer path's logit of the segment divided by the number of segments; the "
            "static stage's share, from the recording's mean connectivity, is the same for "
            "every segment and not drawn; the two add up to the logit). "
            f"{shown} of the {len(tables)} recordings are drawn; each recording's table is "
            f"`ID{SEGMENT_TABLE_SUFFIX}` in the explanations folder."
        ),
    )
    add_note(
        report,
        "Couplings where the logit rises",
        time_course_note(rising_cells(tables)),
        section,
    )
