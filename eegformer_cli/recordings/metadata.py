"""Participants and recordings tables: who each recording belongs to, with age and sex.

``participants.tsv`` (BIDS style; TSV or CSV) has one row per participant: an id column
(``participant_id``, or ``participant``/``subject``/``subject_id``/``id``), usually ``age``
and ``sex`` (or ``gender``), and any other columns (diagnosis, group ...). An optional
``recordings.tsv`` has one row per recording: ``file`` (path relative to the table's folder),
``participant_id`` and per-recording columns such as ``condition``.

Age and sex are read by :mod:`.demographics` (its docstring gives the accepted values).
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

from eegformer_cli.errors import InputDataError, UsageError
from eegformer_cli.recordings.demographics import is_missing, parse_age, parse_sex
from eegformer_cli.recordings.reading import recording_suffix

#: Accepted names of the participant id column, in order of preference (case-insensitive).
PARTICIPANT_ID_COLUMNS = ("participant_id", "participant", "subject", "subject_id", "id")
#: How many folders above an input are searched for the tables (a BIDS root is usually 2-3 up).
TABLE_SEARCH_LEVELS = 3

_BIDS_SUBJECT = re.compile(r"(?:^|_)sub-([A-Za-z0-9]+)")


def _delimiter(path: Path, header_line: str) -> str:
    """Tab for ``.tsv``; for other suffixes the first of tab, semicolon, comma in the header."""
    if path.suffix.lower() == ".tsv":
        return "\t"
    for candidate in ("\t", ";", ","):
        if candidate in header_line:
            return candidate
    return ","


def read_table(path: Path) -> list[dict[str, str]]:
    """The rows of a TSV or CSV table as dictionaries keyed by the (stripped) header names.

    UTF-8 (a byte-order mark is tolerated); values stripped of blanks; blank lines skipped.
    The delimiter is a tab for ``.tsv`` and sniffed from the header otherwise (tab, ``;``, ``,``).

    Raises
    ------
    InputDataError : unreadable file, not UTF-8, no header, an empty or repeated column name,
        a row with a different number of fields (naming the line), or no rows.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise InputDataError(f"cannot read table: {exc.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise InputDataError(
            "table is not UTF-8 text", path=path, hint="save it as UTF-8 TSV or CSV"
        ) from None
    lines = text.splitlines()
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise InputDataError(
            "table is empty",
            path=path,
            hint="expected a header line such as participant_id<TAB>age<TAB>sex",
        )
    delimiter = _delimiter(path, numbered[0][1])
    parsed = [
        (number, [cell.strip() for cell in cells])
        for number, cells in zip(
            (n for n, _ in numbered),
            csv.reader((line for _, line in numbered), delimiter=delimiter),
        )
    ]
    (_, header), body = parsed[0], parsed[1:]
    if any(not name for name in header):
        raise InputDataError(f"table header has an empty column name: {header}", path=path)
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise InputDataError(f"table header repeats column(s) {', '.join(repeated)}", path=path)
    rows = []
    for number, cells in body:
        if len(cells) != len(header):
            separator = "tab" if delimiter == "\t" else repr(delimiter)
            raise InputDataError(
                f"line {number} has {len(cells)} fields, the header has {len(header)}",
                path=path,
                hint=f"is the table {separator}-separated?",
            )
        rows.append(dict(zip(header, cells)))
    if not rows:
        raise InputDataError("table has a header but no rows", path=path)
    return rows


def _find_column(header: list[str], candidates: tuple[str, ...]) -> str | None:
    """The header name matching the first of ``candidates`` (case-insensitive), or None."""
    by_lower = {name.lower(): name for name in header}
    return next((by_lower[c] for c in candidates if c in by_lower), None)


def _sex_levels(table_path: Path, column: str) -> dict[str, str]:
    """``{code: label}`` from the BIDS sidecar ``<table>.json`` for ``column``, or {}."""
    sidecar = table_path.with_suffix(".json")
    if not sidecar.is_file():
        return {}
    try:
        description = json.loads(sidecar.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as exc:
        raise InputDataError(f"cannot read the table description: {exc}", path=sidecar) from None
    column_description = description.get(column) if isinstance(description, dict) else None
    levels = column_description.get("Levels") if isinstance(column_description, dict) else None
    if not isinstance(levels, dict):
        return {}
    return {str(code).strip(): str(label) for code, label in levels.items()}


def _add_demographics(path: Path, rows: list[dict], row_names: list[str]) -> None:
    """Replace the ``age`` column by a float|None and set ``sex`` to "M"/"F"/None, in place.

    ``row_names`` name each row in error messages (participant id or file).
    """
    header = list(rows[0])
    age_column = _find_column(header, ("age",))
    sex_column = _find_column(header, ("sex", "gender"))
    levels = _sex_levels(path, sex_column) if sex_column else {}
    # Numbers are read by the documented code only in a "sex" column without declared Levels.
    numeric_codes = sex_column is not None and sex_column.lower() == "sex" and not levels
    for row, name in zip(rows, row_names):
        try:
            row["age"] = parse_age(row[age_column]) if age_column else None
        except ValueError as exc:
            raise InputDataError(
                f"{name}: {exc}", path=path, hint="ages are in years; write n/a when unknown"
            ) from None
        value = row[sex_column] if sex_column else None
        value = levels.get(str(value).strip(), value) if levels else value
        try:
            row["sex"] = parse_sex(value, numeric_codes=numeric_codes)
        except ValueError as exc:
            raise InputDataError(f"{name}, column {sex_column}: {exc}", path=path) from None


def load_participants(path: Path) -> dict[str, dict]:
    """The participants table keyed by participant id.

    Each value holds every column as the string found (the id column also as
    ``participant_id``), except ``age`` (float years or None) and ``sex`` ("M", "F" or None),
    parsed from the ``age`` and ``sex`` (else ``gender``) columns; both keys are always present.

    Raises
    ------
    InputDataError : no id column, an empty or duplicated id (all duplicates listed), or a bad
        age/sex value (naming the participant and the value); errors of :func:`read_table`.
    """
    path = Path(path)
    rows = read_table(path)
    header = list(rows[0])
    id_column = _find_column(header, PARTICIPANT_ID_COLUMNS)
    if id_column is None:
        raise InputDataError(
            f"no participant id column (found columns: {', '.join(header)})",
            path=path,
            hint=f"name it {PARTICIPANT_ID_COLUMNS[0]}",
        )
    ids = [row[id_column] for row in rows]
    if "" in ids:
        raise InputDataError(f"row {ids.index('') + 1} has an empty {id_column}", path=path)
    duplicated = sorted({pid for pid in ids if ids.count(pid) > 1})
    if duplicated:
        raise InputDataError(
            f"duplicated participant ids: {', '.join(duplicated)}",
            path=path,
            hint="list each participant once; put per-recording values in recordings.tsv",
        )
    _add_demographics(path, rows, [f"participant {pid}" for pid in ids])
    for row, pid in zip(rows, ids):
        row["participant_id"] = pid
    return dict(zip(ids, rows))


def _normalised_relative(file: str) -> str:
    """``"./eeg\\\\a.edf" -> "eeg/a.edf"``: a relative path in POSIX form, without ``.``."""
    return Path(os.path.normpath(file.replace("\\", "/"))).as_posix()


def load_recordings_table(path: Path) -> dict[str, dict]:
    """The recordings table keyed by its ``file`` column (POSIX path relative to the table's
    folder, normalised: ``./eeg\\\\a.edf`` -> ``eeg/a.edf``).

    Values hold every column as strings (``participant_id`` if given), with ``age``/``sex``
    parsed as in :func:`load_participants` when the table has such columns (else absent).

    Raises
    ------
    InputDataError : no ``file`` column, an empty or repeated file, a bad age/sex value.
    """
    path = Path(path)
    rows = read_table(path)
    header = list(rows[0])
    if "file" not in header:
        raise InputDataError(
            f"no 'file' column (found columns: {', '.join(header)})",
            path=path,
            hint="list each recording's path relative to this table in 'file'",
        )
    files = [_normalised_relative(row["file"]) if row["file"] else "" for row in rows]
    if "" in files:
        raise InputDataError(f"row {files.index('') + 1} has an empty file", path=path)
    repeated = sorted({file for file in files if files.count(file) > 1})
    if repeated:
        raise InputDataError(f"files listed more than once: {', '.join(repeated)}", path=path)
    has_demographics = _find_column(header, ("age", "sex", "gender")) is not None
    if has_demographics:
        _add_demographics(path, rows, [f"recording {file}" for file in files])
    for row, file in zip(rows, files):
        row["file"] = file
    return dict(zip(files, rows))


def _find_table(inputs: list[Path], names: tuple[str, ...]) -> Path | None:
    for given in inputs:
        start = Path(given).resolve()
        folder = start if start.is_dir() else start.parent
        for candidate_folder in [folder, *folder.parents][: TABLE_SEARCH_LEVELS + 1]:
            for name in names:
                if (candidate_folder / name).is_file():
                    return candidate_folder / name
    return None


def find_participants_file(inputs: list[Path]) -> Path | None:
    """``participants.tsv`` (else ``.csv``) in the first input's folder or up to 3 folders above
    it (a BIDS root); inputs are tried in order, the first match wins; None if there is none."""
    return _find_table(inputs, ("participants.tsv", "participants.csv"))


def find_recordings_file(inputs: list[Path]) -> Path | None:
    """``recordings.tsv`` (else ``.csv``), searched like :func:`find_participants_file`."""
    return _find_table(inputs, ("recordings.tsv", "recordings.csv"))


def _recordings_row(path: Path, recordings: dict, root: Path | None) -> dict | None:
    """The recordings-table row of ``path``: by its path relative to ``root``, else by file name
    when exactly one row has that name."""
    if root is not None:
        relative = os.path.relpath(Path(path).resolve(), Path(root).resolve())
        row = recordings.get(_normalised_relative(relative))
        if row is not None:
            return row
    same_name = [row for file, row in recordings.items() if Path(file).name == Path(path).name]
    return same_name[0] if len(same_name) == 1 else None


def participant_pattern(text: str | None) -> re.Pattern | None:
    """``preprocess --participant-pattern``: a regular expression searched in each recording's
    file name (``Subject15_1.edf``) whose first group is the participant id (``^(.+)_\\d+``
    gives ``Subject15``); None stays None.

    Raises
    ------
    UsageError : not a regular expression, or one without a group.
    """
    if text is None:
        return None
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise UsageError(
            f"invalid --participant-pattern '{text}': {exc}",
            hint="a Python regular expression whose first group is the participant, "
            "e.g. '^(.+)_\\d+' for Subject15_1.edf",
        ) from None
    if pattern.groups < 1:
        raise UsageError(
            f"invalid --participant-pattern '{text}': it has no group (...) for the participant",
            hint="e.g. '^(.+)_\\d+' for Subject15_1.edf",
        )
    return pattern


def participant_named_by(path: Path, pattern: re.Pattern) -> str | None:
    """The first group of ``pattern`` searched in ``path``'s file name; None when it does not
    match or the group is empty."""
    found = pattern.search(Path(path).name)
    return found.group(1) if found and found.group(1) else None


def _participant_from_name(path: Path, participants: dict) -> str | None:
    """The participant id named by a file: the longest id of ``participants`` equal to the file
    name's stem or followed in it by ``_`` or ``-``, else its BIDS ``sub-<label>`` entity (the
    table's id with or without the ``sub-`` prefix; ``sub-<label>`` when the table lacks both,
    or there is no table: the participant is known, its demographics are not)."""
    name = Path(path).name
    entity = _BIDS_SUBJECT.search(name)
    if entity:
        for candidate in (f"sub-{entity.group(1)}", entity.group(1)):
            if candidate in participants:
                return candidate
    suffix = recording_suffix(Path(path))
    stem = name[: len(name) - len(suffix)] if suffix else Path(name).stem
    matches = [
        pid for pid in participants if stem == pid or stem.startswith((pid + "_", pid + "-"))
    ]
    if matches:
        return max(matches, key=len)
    return f"sub-{entity.group(1)}" if entity else None


def match_participant(
    path: Path,
    participants: dict,
    recordings: dict | None,
    root: Path | None,
    named_id: str | None = None,
) -> tuple[str | None, dict]:
    """The participant id of a recording and its metadata.

    Parameters
    ----------
    path : the recording file.
    participants : from :func:`load_participants` (may be empty).
    recordings : from :func:`load_recordings_table`, or None.
    root : the folder the recordings table's ``file`` paths are relative to (its folder).
    named_id : the participant a ``--participant-pattern`` found in the file name
        (:func:`participant_named_by`), or None.

    Returns
    -------
    participant_id : the first of: the recordings table's ``participant_id`` for the file,
        ``named_id``, the id the file name gives (:func:`_participant_from_name`: a
        participants-table id, else the BIDS ``sub-`` entity); None when none names one. An
        id may be missing from ``participants``: check ``id in participants``.
    metadata : the participant's row merged with the recording's row (recording values win);
        ``age`` and ``sex`` always present (None when unknown); empty-ish for no match.
    """
    recording_row = _recordings_row(path, recordings, root) if recordings else None
    listed_id = (recording_row or {}).get("participant_id")
    participant_id = None if is_missing(listed_id) else listed_id
    if participant_id is None:
        participant_id = named_id
    if participant_id is None:
        participant_id = _participant_from_name(path, participants)
    metadata: dict = {"age": None, "sex": None}
    if participant_id is not None:
        metadata.update(participants.get(participant_id, {}))
        metadata["participant_id"] = participant_id
    if recording_row:  # unknown (None) age/sex of a recording keep the participant's values
        metadata.update({key: value for key, value in recording_row.items() if value is not None})
    return participant_id, metadata
