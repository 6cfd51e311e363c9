"""What a ``predict`` or ``explain`` call of :class:`~eegformer_cli.inference.trained_model.TrainedModel`
tells about its recordings, and when: each recording's warnings and each recording's error
as one line on stderr as it happens (:class:`WarningLines`, :func:`print_failure`), the line
for a model file that cannot check recordings against its training data
(:func:`note_unchecked`), and the one exception the call raises once every recording is done
(:func:`raise_for_outcome`: RecordingError, InputDataError, or PartialFailure under
``strict``), with the call's result in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.markup import escape

from eegformer_cli import console
from eegformer_cli.errors import InputDataError, PartialFailure, RecordingError


def note_unchecked(bundle, strict: bool) -> None:
    """One line when the model file ``bundle`` does not describe its training data (written
    before eegformer kept it): no recording can be checked against it; under ``strict`` that is
    itself a reason for :class:`PartialFailure` (see :func:`raise_for_outcome`)."""
    if bundle.training_data is None:
        console.warn(
            escape(
                f"{bundle.path} does not describe its training data (written by eegformer "
                f"{bundle.eegformer_version}): no check whether a recording was in it or is "
                "outside its range of age, sex, sampling rate and length"
                + ("; --strict: exit 6" if strict else "; retrain to get these checks")
            )
        )


def raise_for_outcome(
    bundle,
    failures: list[tuple[str, str]],
    warned_ids: list[str],
    strict: bool,
    what: str,
    result,
) -> None:
    """Raise for recordings that could not be used (their lines are already on stderr),
    then, under ``strict``, for warnings or a model file (``bundle``) without its training
    data; ``result`` goes with the exception. ``what``: the call's past participle
    (``"predicted"``, ``"explained"``)."""
    if len(failures) == 1:
        raise RecordingError(failures[0][1], result=result, printed=True)
    if failures:
        ids = [recording_id for recording_id, _ in failures]
        raise InputDataError(
            f"{len(ids)} recording(s) could not be {what}: {_shown(ids)}", result=result
        )
    if not strict:
        return
    if warned_ids:
        raise PartialFailure(
            f"--strict: {len(warned_ids)} {what} recording(s) got warnings "
            f"(on stderr and in the output): {_shown(warned_ids)}",
            result=result,
        )
    if bundle.training_data is None:
        raise PartialFailure(
            f"--strict: {bundle.path} does not describe its "
            "training data, so the recordings could not be checked "
            "against it",
            hint="retrain with this eegformer version",
            result=result,
        )


def _shown(ids: Sequence[str]) -> str:
    """The first five ids, ``...`` after them when there are more."""
    return ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")


class WarningLines:
    """Recordings' warnings on stderr, one line each (``warning: ID: KIND: text``), the first
    :attr:`shown` of each kind in full; the rest of a kind are counted and summed up in one line
    by :meth:`close` (a model predicting its own 24 training recordings would otherwise print 24
    lines that say the same). Every row keeps all its warnings."""

    shown = 3

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def print(self, recording_id: str, warnings: Iterable[str]) -> None:
        for line in warnings:
            kind = line.split(":", 1)[0]
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if self.counts[kind] <= self.shown:
                console.warn(escape(f"{recording_id}: {line}"))

    def close(self) -> None:
        for kind, count in self.counts.items():
            if count > self.shown:
                console.warn(
                    escape(
                        f"{kind} on {count - self.shown} more recording(s), not "
                        "repeated here; each row's warnings column lists it"
                    )
                )


def print_failure(recording_id: str, error: str) -> tuple[str, str]:
    """A recording's error line on stderr, as it fails; returns ``(recording_id, error)``."""
    console.stderr.print(f"eegformer: error: {error}", markup=False)
    return recording_id, error
