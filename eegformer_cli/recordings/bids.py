"""BIDS datasets: which recordings a BIDS root holds (all, or a selection by task, session and
run), the entities a recording's file name carries, and what its ``channels.tsv`` says about its
channels. mne-bids finds the files and matches the sidecars; the recording itself is opened by
:mod:`.reading` like any other file, so it is read lazily, a chunk at a time, with the same
one-line errors.

A folder is a BIDS root when it holds ``dataset_description.json``. A recording belongs to a
BIDS dataset when its file name has a ``sub-`` entity and such a root is its folder or one of
the :data:`ROOT_LEVELS` folders above it (``root/sub-01/ses-1/eeg/``); a folder of BIDS-like
names without ``dataset_description.json`` is not a BIDS dataset, and is read as before.

A BIDS recording's ``channels.tsv`` (:func:`channels_sidecar`, the sidecar mne-bids matches to
it) says which channels are EEG (``type`` EEG; any other type, EOG, ECG, EMG, MISC ..., is not
EEG whatever its name) and which are bad (``status`` ``bad``);
:mod:`eegformer_cli.recordings.channel_facts` applies it as :func:`mne_bids.read_raw_bids` does,
wherever a recording is read. Every channel it names must be one of the file's (mne-bids' own
rule, ``on_ch_mismatch="raise"``): else the recording fails, naming those it lacks.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import eegformer_cli
from eegformer_cli.errors import RecordingError, UsageError, did_you_mean

#: The file whose presence makes a folder a BIDS root.
DESCRIPTION_FILE = "dataset_description.json"
#: How many folders above a recording's own folder its BIDS root may be (``sub-/ses-/eeg/``).
ROOT_LEVELS = 3
#: The entities of a recording's file name that become manifest columns, in this order; the
#: subject is written as its participant id (``sub-01``), the others as their labels.
ENTITIES = ("subject", "session", "task", "acquisition", "run")
#: The selection options (:class:`Selection`) and the entity each selects on.
SELECTION_OPTIONS = {"--task": "task", "--session": "session", "--run": "run"}
#: The BIDS version the derivative description declares.
BIDS_VERSION = "1.9.0"

_SUBJECT = re.compile(r"(?:^|_)sub-[A-Za-z0-9]+")
_LABEL = re.compile(r"^[A-Za-z0-9]+$")


def is_root(folder: Path) -> bool:
    """Whether ``folder`` holds ``dataset_description.json``."""
    return (Path(folder) / DESCRIPTION_FILE).is_file()


def root_of(path: Path) -> Path | None:
    """The root of the BIDS dataset the recording file ``path`` belongs to (module docstring),
    or None: a file name without a ``sub-`` entity, or no root within reach."""
    path = Path(path)
    if not _SUBJECT.search(path.name):
        return None
    folder = path.absolute().parent
    return next(
        (above for above in [folder, *folder.parents][: ROOT_LEVELS + 1] if is_root(above)), None
    )


def entities(path: Path) -> dict[str, str]:
    """The :data:`ENTITIES` of a BIDS recording's file name that it has (``{"subject":
    "sub-01", "session": "1", "task": "rest"}``); {} for a file outside a BIDS dataset."""
    if root_of(path) is None:
        return {}
    import mne_bids

    found = mne_bids.get_entities_from_fname(Path(path).name, on_error="ignore")
    named = {key: str(found[key]) for key in ENTITIES if found.get(key) is not None}
    if "subject" in named:
        named["subject"] = f"sub-{named['subject']}"
    return named


@dataclass(frozen=True)
class Selection:
    """``preprocess --task/--session/--run``: the labels each entity of a BIDS root's recordings
    must have (any of them; an empty tuple selects every recording). It chooses which
    recordings are read, not how: no preprocessing setting (``preprocess.json`` keeps it)."""

    tasks: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        tasks: Iterable[str] | None = None,
        sessions: Iterable[str] | None = None,
        runs: Iterable[str] | None = None,
    ) -> Selection:
        """The selection of the given labels (None: all), each checked to be a BIDS label
        (letters and digits; UsageError naming the option otherwise)."""
        given = {"--task": tasks, "--session": sessions, "--run": runs}
        for option, labels in given.items():
            for label in labels or ():
                if not _LABEL.match(str(label)):
                    raise UsageError(
                        f"invalid {option} {str(label)!r}: a BIDS label is letters and digits "
                        f"only (the part after '{SELECTION_OPTIONS[option]}-' in file names)"
                    )
        return cls(*(tuple(dict.fromkeys(map(str, labels or ()))) for labels in given.values()))

    def __bool__(self) -> bool:
        return bool(self.tasks or self.sessions or self.runs)

    def by_option(self) -> dict[str, tuple[str, ...]]:
        """``{"--task": tasks, "--session": sessions, "--run": runs}``."""
        return dict(zip(SELECTION_OPTIONS, (self.tasks, self.sessions, self.runs)))

    def described(self) -> str:
        """The options as typed: ``--task rest --session 1``."""
        return " ".join(
            f"{option} {label}" for option, labels in self.by_option().items() for label in labels
        )

    def to_json(self) -> dict[str, list[str]]:
        """``{"task": [...], "session": [...], "run": [...]}``: what ``preprocess.json`` keeps."""
        return {
            SELECTION_OPTIONS[option]: list(labels) for option, labels in self.by_option().items()
        }

    def resolved(self, roots: Sequence[Path]) -> Selection:
        """This selection in the labels of the BIDS ``roots``: each label must be one that some
        root's recordings have (a run also matches by number: ``1`` selects ``run-01``).

        Raises UsageError naming the option and listing the labels the roots have.
        """
        import mne_bids

        resolved = []
        for option, labels in self.by_option().items():
            entity = SELECTION_OPTIONS[option]
            present = sorted(
                {str(v) for root in roots for v in mne_bids.get_entity_vals(root, entity)}
            )
            resolved.append(tuple(_resolved_label(option, label, present) for label in labels))
        return Selection(*resolved)


def _resolved_label(option: str, label: str, present: list[str]) -> str:
    """``label`` as the dataset writes it (``present``); UsageError when it has none such."""
    if label in present:
        return label
    if option == "--run" and label.isdigit():
        same = [value for value in present if value.isdigit() and int(value) == int(label)]
        if same:
            return same[0]
    entity = SELECTION_OPTIONS[option]
    if not present:
        raise UsageError(
            f"invalid {option} {label!r}: no recording of the BIDS root has a {entity}"
        )
    raise UsageError(
        f"invalid value {label!r} for {option}; allowed values are "
        f"{', '.join(map(repr, present))} (the {entity} labels of the BIDS root)"
        + did_you_mean(label, present)
    )


def dataset_recordings(root: Path, selection: Selection) -> list[Path]:
    """The data files of the BIDS ``root``'s ``sub-*`` folders whose entities ``selection``
    accepts, as mne-bids finds them (:func:`mne_bids.find_matching_paths`; ``derivatives/``,
    ``sourcedata/`` and ``code/`` are not searched, JSON sidecars are left out, other sidecars
    are not: the caller keeps the recordings)."""
    import mne_bids

    found = mne_bids.find_matching_paths(
        root,
        tasks=selection.tasks or None,
        sessions=selection.sessions or None,
        runs=selection.runs or None,
        ignore_json=True,
        ignore_nosub=True,
    )
    return sorted({Path(bids_path.fpath) for bids_path in found})


@dataclass(frozen=True)
class ChannelsSidecar:
    """What a recording's ``channels.tsv`` says (module docstring): the channels it names, in
    its order, those typed EEG, those typed otherwise, and those marked bad (names as in the
    file); ``has_status``: whether it has a ``status`` column (without one, mne-bids keeps the
    bad channels the recording's own header marks); ``file`` is its path."""

    file: str
    names: tuple[str, ...]
    eeg: tuple[str, ...]
    not_eeg: tuple[str, ...]
    bad: tuple[str, ...]
    has_status: bool = True

    def key(self) -> str:
        """A short hash of what decides the recording's connectome (the types and the bad
        channels): a rerun makes the connectome again when it changes."""
        text = json.dumps([self.eeg, self.not_eeg, self.bad])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def channels_sidecar(path: Path) -> ChannelsSidecar | None:
    """The ``channels.tsv`` of the recording ``path``, as mne-bids matches it
    (:meth:`mne_bids.BIDSPath.find_matching_sidecar`); None outside a BIDS dataset or when it
    has none.

    Raises RecordingError when it cannot be read, lacks a ``name`` column, or mne-bids finds
    more than one that matches.
    """
    root = root_of(path)
    if root is None:
        return None
    import mne_bids

    bids_path = mne_bids.get_bids_path_from_fname(Path(path).absolute(), check=False)
    bids_path.root = root
    try:
        found = bids_path.find_matching_sidecar(
            suffix="channels", extension=".tsv", on_error="ignore"
        )
    except RuntimeError as exc:  # several candidates
        raise RecordingError(
            f"cannot tell which channels.tsv is the recording's ({' '.join(str(exc).split())})",
            path=path,
        ) from None
    return None if found is None else _read_channels_tsv(Path(found))


def _read_channels_tsv(file: Path) -> ChannelsSidecar:
    """A ``channels.tsv`` (tab-separated, UTF-8; ``n/a`` for unknown): ``name`` required,
    ``type`` and ``status`` read when present."""
    try:
        with open(file, newline="", encoding="utf-8-sig") as handle:
            rows = [
                {key.strip(): (value or "").strip() for key, value in row.items() if key}
                for row in csv.DictReader(handle, delimiter="\t")
            ]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RecordingError(f"cannot read {file.name}: {exc}", path=file) from None
    if not rows or "name" not in rows[0]:
        raise RecordingError(
            f"{file.name} has no 'name' column (or no rows)",
            path=file,
            hint="BIDS channels.tsv: columns name, type, units[, status]",
        )
    typed = [row for row in rows if row.get("type", "n/a").lower() not in ("", "n/a")]
    return ChannelsSidecar(
        file=str(file),
        names=tuple(row["name"] for row in rows),
        eeg=tuple(row["name"] for row in typed if row["type"].upper() == "EEG"),
        not_eeg=tuple(row["name"] for row in typed if row["type"].upper() != "EEG"),
        bad=tuple(row["name"] for row in rows if row.get("status", "").lower() == "bad"),
        has_status="status" in rows[0],
    )


def derivative_description(description: str) -> dict:
    """The ``dataset_description.json`` of a folder eegformer derived from recordings: a BIDS
    derivative generated by eegformer (its version), ``description`` saying what it holds."""
    return {
        "Name": "eegformer connectomes",
        "BIDSVersion": BIDS_VERSION,
        "DatasetType": "derivative",
        "GeneratedBy": [
            {"Name": "eegformer", "Version": eegformer_cli.__version__, "Description": description}
        ],
    }
