"""What eegformer may write over: the outputs it made, and nothing else unless asked.

``preprocess``, ``train``, ``explain`` and ``demo`` write into an output folder; before they
write, they claim it (:func:`claim_folder`):

- a folder that does not exist, or holds nothing but eegformer's lock and temporary files
  and empty folders, is created (or taken) and marked: :data:`MARKER` (``.eegformer``, JSON)
  names what made it;
- a folder whose marker names the command is its own: a rerun resumes or adds to it;
- a folder that an earlier version made, without a marker, is recognised by its own files
  (:data:`RECOGNISED_BY`: a preprocess folder by its ``manifest.tsv``, a run folder by its
  ``config.json``, an explain folder by its ``class_summary.json``, a demo folder by the
  ones of its subfolders) and marked;
- anything else (a user's notes, another command's output) is refused with a
  :class:`~eegformer_cli.errors.UsageError` (exit 2, as a folder holding another run), unless
  ``overwrite``: the command then writes its files into it, replacing files of the same names,
  and leaves every other file as it is.

``report`` writes one file and claims it with :func:`claim_file`: a new file, or a report
eegformer wrote (:func:`is_report`), else refused unless ``overwrite``.

Deleting is narrower still: a command deletes only files it names as its own outputs (a run's
files and fold files, an earlier explanation's per-recording files), never a folder's other
files, with or without ``overwrite``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from eegformer_cli.atomic import TMP_PREFIX, ensure_dir, write_json
from eegformer_cli.errors import UsageError, first_few

#: The marker file of a folder eegformer made: ``{"made_by": "eegformer", "contents": [kinds]}``.
MARKER = ".eegformer"
#: What may claim a folder: the commands that write one.
KINDS = ("preprocess", "train", "explain", "demo")
#: Entries that do not make a folder someone's: eegformer's lock and temporary files, and the
#: file macOS's Finder leaves in every folder it shows.
IGNORED = (".lock", MARKER, ".DS_Store")
#: How a folder made before the marker existed is recognised: a file (relative path) and the
#: text its first bytes must hold.
RECOGNISED_BY = {
    "preprocess": (("manifest.tsv", "recording_id\t"),),
    "train": (("config.json", '"identity"'),),
    "explain": (("class_summary.json", '"classes"'),),
    "demo": (
        ("preprocessed/manifest.tsv", "recording_id\t"),
        ("run/config.json", '"identity"'),
    ),
}
#: What a report eegformer wrote holds: the title ``report`` gives it (after about 1 MB of
#: the scripts and styles MNE's report inlines first).
REPORT_SIGNATURE = b"<title>XAIguiFormer ("
#: How much of a folder's file the recognisers read (a manifest's header, a config's keys).
HEAD_BYTES = 1 << 16
#: Bytes read at a time when a report is searched for its signature.
CHUNK_BYTES = 1 << 20
#: How many foreign entries a refusal names.
SHOWN = 3


def _head(path: Path) -> str:
    """The first :data:`HEAD_BYTES` of ``path`` as text ("" when unreadable)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def marked_kinds(folder: Path) -> list[str]:
    """The kinds the marker of ``folder`` names ([] when it has none or it is unreadable)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    contents = marker.get("contents") if isinstance(marker, dict) else None
    return [kind for kind in contents if kind in KINDS] if isinstance(contents, list) else []


def recognised_kinds(folder: Path) -> list[str]:
    """The kinds of eegformer output ``folder`` holds: its marker's, else those its own files
    show (:data:`RECOGNISED_BY`, folders of earlier versions)."""
    return marked_kinds(folder) or [
        kind
        for kind, signs in RECOGNISED_BY.items()
        if any(text in _head(Path(folder) / name) for name, text in signs)
    ]


def _foreign_entries(folder: Path) -> list[str]:
    """The entries of ``folder`` that make it someone's (sorted names; a subfolder counts when
    something in it does): all but :data:`IGNORED`, temporary files and empty folders."""
    found = []
    for entry in sorted(Path(folder).iterdir()):
        if entry.name in IGNORED or entry.name.startswith(TMP_PREFIX):
            continue
        if entry.is_dir() and not entry.is_symlink() and not _foreign_entries(entry):
            continue
        found.append(entry.name + ("/" if entry.is_dir() else ""))
    return found


def check_folder(folder: str | os.PathLike, kind: str, overwrite: bool = False) -> list[str]:
    """Whether ``kind`` (a command of :data:`KINDS`) may write into ``folder``, by the rules of
    the module docstring, without writing anything; returns the kinds of eegformer output it
    holds already.

    Raises
    ------
    UsageError : ``folder`` holds files eegformer did not write, or another command's output,
        and not ``overwrite``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    kinds = recognised_kinds(folder)
    if kind in kinds:
        return kinds
    foreign = _foreign_entries(folder)
    if foreign and not overwrite:
        what = (
            f"an eegformer {' and '.join(kinds)} output"
            if kinds
            else f"files eegformer did not write ({first_few(foreign, SHOWN)})"
        )
        raise UsageError(
            f"{folder} holds {what}; eegformer {kind} writes only into a new or empty "
            "folder or one it made",
            hint="choose another --out, or pass --overwrite to write into it (its other "
            "files are kept)",
        )
    return kinds


def claim_folder(folder: str | os.PathLike, kind: str, overwrite: bool = False) -> Path:
    """:func:`check_folder`, then create ``folder`` if needed and mark it as ``kind``'s output
    (a rerun, or a command interrupted at any later point, finds it its own); returns it.

    Raises
    ------
    UsageError : as :func:`check_folder` (nothing is changed).
    OutputError : ``folder`` cannot be created or written.
    """
    folder = Path(folder)
    kinds = check_folder(folder, kind, overwrite)
    ensure_dir(folder)
    wanted = kinds if kind in kinds else [*kinds, kind]
    if wanted != marked_kinds(folder):
        write_json(folder / MARKER, {"made_by": "eegformer", "contents": wanted})
    return folder


def is_report(path: str | Path) -> bool:
    """Whether ``path`` is an HTML report ``eegformer report`` wrote (:data:`REPORT_SIGNATURE`
    in it, read a chunk at a time)."""
    tail = b""
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                text = tail + chunk
                if REPORT_SIGNATURE in text:
                    return True
                tail = text[-len(REPORT_SIGNATURE) :]
    except OSError:
        return False
    return False


def claim_file(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """``report``'s output file: ``path`` when it does not exist, is a report eegformer wrote
    (:func:`is_report`) or ``overwrite`` is given.

    Raises
    ------
    UsageError : ``path`` is another file and not ``overwrite`` (it is left as it is).
    """
    path = Path(path)
    if path.is_file() and not overwrite and not is_report(path):
        raise UsageError(
            f"{path} exists and is not a report eegformer wrote",
            hint="choose another --out, or pass --overwrite to replace it",
        )
    return path


def remove_outputs(folder: str | Path, patterns: tuple[str, ...]) -> int:
    """Delete the files below ``folder`` that match ``patterns`` (glob patterns naming a
    command's own outputs; an HTML file only when it is an eegformer report, :func:`is_report`),
    with the temporary files of the folders they were in, then those folders when that empties
    them; returns how many files. Every other file stays."""
    folder = Path(folder)
    removed, emptied = 0, set()
    for pattern in patterns:
        for path in folder.glob(pattern):
            if not path.is_file() or (path.suffix == ".html" and not is_report(path)):
                continue
            path.unlink()
            removed += 1
            emptied.add(path.parent)
    for parent in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
        for tmp in parent.glob(TMP_PREFIX + "*"):
            tmp.unlink(missing_ok=True)
        while parent != folder and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return removed
