"""Preprocessing settings: everything that decides a connectome's numbers.

:class:`PreprocessSettings` (frozen; ``from_preset``, ``from_dict``, ``to_dict``, ``hash``) is
stored in every output folder's ``preprocess.json`` and in every model file, so ``predict`` and
``explain`` preprocess new recordings exactly as the training data was, and refuse a preprocess
folder whose settings differ from the model's (``differences``: every setting that changes the
tokens, :data:`TOKEN_SETTINGS`; the others, :data:`NOT_COMPARED`, with the reason).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eegformer_cli.choices import DEFAULT_PRESET, PRESETS
from eegformer_cli.connectivity.bands import (
    BAND_PRESETS,
    bands_to_spec,
    check_bands_fit_rate,
    parse_bands,
)
from eegformer_cli.errors import EegformerError, RecordingError, UsageError, check_choice
from eegformer_cli.preprocess.output import read_settings_file
from eegformer_cli.recordings import cleaning

#: The settings that change a recording's tokens, which a model and the preprocess folder it
#: reads must share (:meth:`PreprocessSettings.differences`). Every field of
#: :class:`PreprocessSettings` is here or in :data:`NOT_COMPARED` (a test enumerates them).
TOKEN_SETTINGS = (
    "sfreq",
    "resample_method",
    "l_freq",
    "h_freq",
    "h_trans_bandwidth",
    "epoch_length",
    "window_s",
    "flat_ptp_v",
    "absurd_ptp_v",
    "ica",
    "ica_n_components",
    "ica_random_state",
    "ica_before_reference",
    "bands",
    "channels",
    "crop_s",
)
#: The settings that do not change a recording's tokens, each with the reason.
NOT_COMPARED = {
    "preset": "only names where the other settings came from; they are compared themselves",
    "max_interpolated": "decides which recordings may be repaired, not their tokens: a "
    "recording's channels_interpolated and its interpolated warning say how it was repaired, "
    "and predict and explain take their own limit",
}


@dataclass(frozen=True)
class PreprocessSettings:
    """Everything that decides a connectome's numbers (hashed to detect finished work).

    Attributes
    ----------
    preset : "default" or "paper" (what the other defaults came from).
    sfreq : sampling rate after cleaning, Hz (default 128: enough for bands up to 45 Hz).
    resample_method : "polyphase" (local in time, so a long recording is cleaned chunk by
        chunk) or "fft" (MNE's FFT method, the whole recording at once): settings stored
        without it (preprocess folders and model files of earlier versions) read as "fft",
        what those versions did, so a model preprocesses new recordings as its training data.
    l_freq, h_freq : band-pass edges, Hz.
    h_trans_bandwidth : upper transition band of the FIR band-pass, Hz, or "auto" (MNE's rule,
        the paper's code). The default 5 Hz puts 50 and 60 Hz line noise in the stop band.
    epoch_length : segment length in s (a multiple of ``window_s``, at least 2 windows), or
        "auto": :func:`run_preprocess` resolves it once per run from the shortest recording
        (:func:`cleaning.auto_epoch_length`) so all recordings get the same estimator.
    window_s : the windows inside a segment over which spectra are averaged, s (3 s, the
        paper's code).
    flat_ptp_v, absurd_ptp_v : segment rejection thresholds on 3 s peak-to-peak, volts, or None
        for no rejection (see :func:`cleaning.reject_segments`).
    ica : remove artefact components with ICA + ICLabel (:func:`cleaning.run_ica_iclabel`).
    ica_n_components, ica_random_state : its parameters (components capped at the data's rank).
    ica_before_reference : fit ICA before the average reference (the order of the paper's code)
        instead of after it (what ICLabel expects).
    bands : the tokens, in order (:mod:`eegformer_cli.connectivity.bands`).
    channels : the run's channel names in order, or None to choose them from the input
        (:func:`select_channel_set`).
    max_interpolated : the most missing channels a recording may have filled by interpolation.
    crop_s : analyse only the first ``crop_s`` seconds of every recording (None: all of it), so
        recordings of different lengths give the same number of segments and the same
        estimator bias (the shortcut audit's remedy for a length shortcut); a shorter
        recording is an error (``cleaning.ShorterThanCrop``; ``predict`` analyses it whole,
        with a warning). Left out of :meth:`to_dict` when None, so the settings (and hashes)
        of folders made without it are unchanged.
    """

    preset: str = DEFAULT_PRESET
    sfreq: float = 128.0
    resample_method: str = "polyphase"
    l_freq: float = 1.0
    h_freq: float = 45.0
    h_trans_bandwidth: float | str = cleaning.LINE_NOISE_H_TRANS_HZ
    epoch_length: float | str = "auto"
    window_s: float = cleaning.WINDOW_S
    flat_ptp_v: float | None = cleaning.FLAT_PTP_V
    absurd_ptp_v: float | None = cleaning.ABSURD_PTP_V
    ica: bool = False
    ica_n_components: int = 20
    ica_random_state: int = 0
    ica_before_reference: bool = False
    bands: tuple = BAND_PRESETS["default"]
    channels: tuple[str, ...] | None = None
    max_interpolated: int = 2
    crop_s: float | None = None

    def __post_init__(self) -> None:
        check_choice("--preset", self.preset, PRESETS)
        check_choice("resample_method", self.resample_method, cleaning.RESAMPLE_METHODS)
        numbers = {
            "--sfreq": self.sfreq,
            "l_freq": self.l_freq,
            "h_freq": self.h_freq,
            "window_s": self.window_s,
            "flat_ptp_v": self.flat_ptp_v,
            "absurd_ptp_v": self.absurd_ptp_v,
            "h_trans_bandwidth": self.h_trans_bandwidth,
            "--epoch-length": self.epoch_length,
        }
        for name, value in numbers.items():
            if isinstance(value, (int, float)) and not math.isfinite(value):
                raise UsageError(f"invalid {name} {value}; it must be a finite number")
        if not 0 < self.l_freq < self.h_freq < self.sfreq / 2:
            raise UsageError(
                f"band-pass {self.l_freq:g}-{self.h_freq:g} Hz does not fit below the "
                f"Nyquist frequency of --sfreq {self.sfreq:g} Hz; raise --sfreq"
            )
        try:
            check_bands_fit_rate(self.bands, self.sfreq, what="--sfreq")
        except RecordingError as exc:
            raise UsageError(str(exc), hint="raise --sfreq or change --bands") from None
        for band in self.bands:
            for part in band.ranges:  # spectra have bins every 1 / window_s Hz (1/3 Hz for 3 s)
                if math.ceil(part.f_low * self.window_s - 1e-9) > math.floor(
                    part.f_high * self.window_s + 1e-9
                ):
                    raise UsageError(
                        f"band {band.name!r} ({part.f_low:g}-{part.f_high:g} Hz) "
                        f"holds no frequency bin of {self.window_s:g} s windows "
                        f"(bins every {1 / self.window_s:.3g} Hz); widen it in --bands"
                    )
        if self.epoch_length != "auto":
            n_windows = float(self.epoch_length) / self.window_s
            if n_windows < 2 or not math.isclose(n_windows, round(n_windows)):
                raise UsageError(
                    f"invalid --epoch-length {self.epoch_length}; it must be 'auto' or "
                    f"a multiple of {self.window_s:g} s of at least "
                    f"{2 * self.window_s:g} s"
                )
        if self.crop_s is not None and not (
            math.isfinite(self.crop_s) and self.crop_s >= 2 * self.window_s
        ):
            raise UsageError(
                f"invalid --crop {self.crop_s}; give the seconds to keep from the "
                f"start of every recording, at least {2 * self.window_s:g}"
            )
        if self.max_interpolated < 0:
            raise UsageError(f"invalid --max-interpolated {self.max_interpolated}; it must be >= 0")
        if self.ica_n_components < 2:
            raise UsageError(f"invalid ICA n_components {self.ica_n_components}; it must be >= 2")

    @classmethod
    def from_preset(cls, name: str, **overrides) -> PreprocessSettings:
        """The settings of preset ``name`` ("default" or "paper"), with ``overrides`` applied.

        ``paper`` follows reference-method.md, section 1: 250 Hz, 1-45 Hz with MNE's automatic
        transition bands (no line-noise handling), ICA + ICLabel (20 components, before the
        average reference), 30 s epochs, no amplitude rejection, 8 bands + theta/beta ratio.
        Documented deviations, for generic inputs: PREP's bad-channel detection is skipped
        (pyprep is not a dependency), so only missing channels are interpolated, and before
        ICA rather than after it; every rate is resampled to 250 Hz (the paper's code decimates
        500/512 Hz by 2 and leaves other rates); epochs are consecutive 30 s from the start
        (the paper's code uses overlapping windows on one dataset and crops the first and last
        55 s on the other); ICA has a fixed random state and is fitted on the whole recording.
        """
        check_choice("--preset", name, PRESETS)
        base: dict[str, Any] = {"preset": name}  # PreprocessSettings' keyword arguments
        if name == "paper":
            base.update(
                sfreq=250.0,
                h_trans_bandwidth="auto",
                epoch_length=30.0,
                flat_ptp_v=None,
                absurd_ptp_v=None,
                ica=True,
                ica_before_reference=True,
                bands=BAND_PRESETS["paper"],
            )
        base.update(overrides)
        return cls(**base)

    def to_dict(self) -> dict:
        """JSON-able dict (bands as a ``--bands`` spec, channels as a list)."""
        data = dataclasses.asdict(self)
        data["bands"] = bands_to_spec(self.bands)
        data["channels"] = None if self.channels is None else list(self.channels)
        if self.crop_s is None:
            del data["crop_s"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> PreprocessSettings:
        """Inverse of :meth:`to_dict` (e.g. settings stored in ``preprocess.json`` or a model).

        A setting missing from ``data`` takes its value for the version that wrote ``data``:
        ``resample_method`` "fft" (stored before it was a setting), ``crop_s`` None (no crop,
        left out of :meth:`to_dict`), every other one its default.
        """
        data = dict(data)
        data.setdefault("resample_method", "fft")  # stored before it was a setting
        data["bands"] = parse_bands(data["bands"])
        if data.get("channels") is not None:
            data["channels"] = tuple(data["channels"])
        return cls(**data)

    @classmethod
    def of_folder(cls, folder: str | Path) -> PreprocessSettings | None:
        """The settings in a preprocess output folder's ``preprocess.json`` (:meth:`from_dict`),
        or None when it is missing or they cannot be read (each reader says what that means
        for it)."""
        stored = read_settings_file(folder)
        if stored is None or stored.settings is None:
            return None
        try:
            return cls.from_dict(stored.settings)
        except (KeyError, TypeError, ValueError, EegformerError):
            return None

    def differences(
        self, other: PreprocessSettings, *, tokens_only: bool = True
    ) -> dict[str, tuple[str, str]]:
        """The settings whose values differ between these and ``other``, in field order:
        name -> (this value, ``other``'s value), each as text for a message (``none`` for
        None, ``--bands`` spec for the bands, channels joined by commas).

        Whole settings are compared, so a setting missing from a stored dict (one written
        before the setting existed, or ``crop_s`` without a crop, both read with
        :meth:`from_dict`) counts with its value for that version. ``tokens_only``: compare
        the settings that change a recording's tokens (:data:`TOKEN_SETTINGS`: what a model
        and the preprocess folder it reads must share); else every setting (what
        :meth:`settings_hash` covers).
        """
        names = [
            field.name
            for field in dataclasses.fields(self)
            if field.name in TOKEN_SETTINGS or not tokens_only
        ]
        return {
            name: (
                _setting_text(name, getattr(self, name)),
                _setting_text(name, getattr(other, name)),
            )
            for name in names
            if getattr(self, name) != getattr(other, name)
        }

    def settings_hash(self) -> str:
        """16 hex digits identifying these settings (same settings -> same hash)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _setting_text(name: str, value) -> str:
    """A setting's value as a message shows it."""
    if value is None:
        return "none"
    if name == "bands":
        return bands_to_spec(value)
    if name == "channels":
        return ",".join(value)
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)
