"""Atomic file writes, the JSON reader that pairs with them, and a directory lock.

Every output is written to a temporary file in the same folder and renamed over the final
name with :func:`os.replace`, so a reader (or a rerun after a crash) never sees a half-written
file. Temporary names start with ``.tmp-`` and are ignored (and cleaned) by readers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from eegformer_cli.errors import InputDataError, OutputError

TMP_PREFIX = ".tmp-"


def ensure_dir(path: str | Path) -> Path:
    """Create ``path`` (and parents) or raise :class:`OutputError` naming it."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"cannot create folder: {exc.strerror}", path=path, hint="choose another --out"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError("folder is not writable", path=path, hint="choose another --out")
    return path


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write to; rename it to ``path`` on success.

    For writers that want a file name rather than a handle (e.g. ``mne.export.export_raw``;
    ``suffix`` keeps the extension such writers look at). On an exception the temporary file
    is removed and ``path`` is left untouched.
    """
    path = Path(path)
    ensure_dir(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=TMP_PREFIX + path.name + ".", suffix=suffix, dir=path.parent
        )
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror}", path=path) from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_open(
    path: str | Path, mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; rename it to ``path`` on success
    (flushed and fsynced first). On an exception ``path`` is left untouched."""
    with (
        atomic_path(path) as tmp,
        open(tmp, mode, encoding=None if "b" in mode else encoding) as handle,
    ):
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


def write_text(path: str | Path, text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def write_json(path: str | Path, obj) -> None:
    """Write ``obj`` as indented JSON (NaN written as ``null``-safe via ``default=str``)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def read_json(path: str | Path):
    """The JSON in ``path`` (as :func:`write_json` writes it); InputDataError naming the file
    when it is damaged."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: a damaged file
        raise InputDataError(
            f"unreadable JSON ({exc})", path=path, hint="rerun the command that wrote it"
        ) from None


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def save_npz(path: str | Path, **arrays: np.ndarray) -> None:
    """Save ``arrays`` (any names) to ``path`` (a compressed ``.npz``) atomically."""
    with atomic_open(path, "wb") as handle:
        # numpy's default, named so that no array can take the keyword's place
        np.savez_compressed(handle, allow_pickle=True, **arrays)


def remove_stale_temporaries(folder: str | Path) -> int:
    """Delete ``.tmp-*`` leftovers of an interrupted run in ``folder``; return how many."""
    removed = 0
    folder = Path(folder)
    if folder.is_dir():
        for tmp in folder.glob(TMP_PREFIX + "*"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed += 1
    return removed


class DirectoryLock:
    """An exclusive, non-blocking lock on an output folder (``<folder>/.lock``, flock).

    A second process that tries to take it gets :class:`OutputError` at once instead of
    writing into the same folder. The kernel releases the lock if the holder dies.
    ``shared=True`` takes a shared lock instead: any number of shared holders at once (e.g.
    ``train --fold`` jobs of one run), but never alongside an exclusive holder.
    """

    def __init__(
        self, folder: str | Path, what: str = "another eegformer run", shared: bool = False
    ):
        self.folder = ensure_dir(folder)
        self.what = what
        self.shared = shared
        self._handle: IO[str] | None = None

    def __enter__(self) -> DirectoryLock:
        self._handle = open(self.folder / ".lock", "a+")
        try:
            fcntl.flock(
                self._handle.fileno(),
                (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB,
            )
        except BlockingIOError:
            self._handle.close()
            self._handle = None
            raise OutputError(
                f"{self.what} is writing into this folder",
                path=self.folder,
                hint="wait for it to finish or choose another --out",
            ) from None
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
