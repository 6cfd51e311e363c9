"""Frequency bands: one connectivity token per band, in this order.

A :class:`Band` is a frequency range in Hz (both edges inclusive, as mne-connectivity's
``faverage`` treats them). A :class:`RatioBand` is the theta/beta-ratio token of the paper's
code: the element-wise ratio of two band connectomes (numerator / denominator, inf and NaN set to
0), whose ``band_edges_hz`` row is the ratio of the edges, e.g. ``[4/12, 8/30]``
(reference-method.md, section 2; the model's dRoFE uses these numbers as they are).

Presets (``BAND_PRESETS``): ``"default"`` = the 8 bands of the paper's code (delta 2-4 ... gamma
30-45 Hz), ``"paper"`` = the same 8 plus ``theta_beta_ratio`` (theta 4-8 Hz over broad beta
12-30 Hz). ``--bands`` takes a text spec parsed by :func:`parse_bands`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from eegformer_cli.errors import RecordingError, UsageError


@dataclass(frozen=True)
class Band:
    """A frequency band ``f_low``-``f_high`` (Hz, both inclusive)."""

    name: str
    f_low: float
    f_high: float

    @property
    def edges_hz(self) -> tuple[float, float]:
        return (self.f_low, self.f_high)

    @property
    def highest_frequency(self) -> float:
        return self.f_high

    @property
    def ranges(self) -> tuple[Band, ...]:
        """The frequency ranges whose connectivity this token needs: itself."""
        return (self,)

    def to_spec(self) -> str:
        return f"{self.name}:{self.f_low:g}-{self.f_high:g}"


@dataclass(frozen=True)
class RatioBand:
    """Element-wise ratio of two band connectomes (``numerator / denominator``; inf, NaN -> 0).

    The two parts are named ``"<name> numerator"`` and ``"<name> denominator"``.
    """

    name: str
    numerator: Band
    denominator: Band

    @property
    def edges_hz(self) -> tuple[float, float]:
        """``(num.f_low / den.f_low, num.f_high / den.f_high)``, e.g. (4/12, 8/30)."""
        return (
            self.numerator.f_low / self.denominator.f_low,
            self.numerator.f_high / self.denominator.f_high,
        )

    @property
    def highest_frequency(self) -> float:
        return max(self.numerator.f_high, self.denominator.f_high)

    @property
    def ranges(self) -> tuple[Band, Band]:
        """The frequency ranges whose connectivity this token needs: numerator, denominator."""
        return (self.numerator, self.denominator)

    def to_spec(self) -> str:
        return (
            f"{self.name}:{self.numerator.f_low:g}-{self.numerator.f_high:g}/"
            f"{self.denominator.f_low:g}-{self.denominator.f_high:g}"
        )


REFERENCE_BANDS = (
    Band("delta", 2.0, 4.0),
    Band("theta", 4.0, 8.0),
    Band("low_alpha", 8.0, 10.0),
    Band("high_alpha", 10.0, 12.0),
    Band("low_beta", 12.0, 18.0),
    Band("mid_beta", 18.0, 21.0),
    Band("high_beta", 21.0, 30.0),
    Band("gamma", 30.0, 45.0),
)
THETA_BETA_RATIO = RatioBand(
    "theta_beta_ratio",
    Band("theta_beta_ratio numerator", 4.0, 8.0),
    Band("theta_beta_ratio denominator", 12.0, 30.0),
)  # theta / beta

BAND_PRESETS: dict[str, tuple[Band | RatioBand, ...]] = {
    "default": REFERENCE_BANDS,
    "paper": REFERENCE_BANDS + (THETA_BETA_RATIO,),
}

_NUMBER = r"(\d+(?:\.\d+)?)"
_RANGE = rf"{_NUMBER}\s*-\s*{_NUMBER}"
_BAND_RE = re.compile(rf"^\s*([A-Za-z_][\w]*)\s*:\s*{_RANGE}\s*(?:/\s*{_RANGE}\s*)?$")


def parse_bands(spec: str) -> tuple[Band | RatioBand, ...]:
    """Parse ``"delta:2-4,theta:4-8,tbr:4-8/12-30"`` (Hz) into bands, in the given order.

    ``name:LOW-HIGH`` is a band; ``name:LOW-HIGH/LOW-HIGH`` a ratio token (numerator range over
    denominator range). Raises :class:`UsageError` naming ``--bands`` on a malformed entry, an
    empty or inverted range, or a repeated name.
    """
    bands: list[Band | RatioBand] = []
    for entry in spec.split(","):
        match = _BAND_RE.match(entry)
        if match is None:
            raise UsageError(
                f"invalid --bands entry {entry.strip()!r}; expected NAME:LOW-HIGH "
                "or NAME:LOW-HIGH/LOW-HIGH in Hz, e.g. 'theta:4-8,tbr:4-8/12-30'"
            )
        name, low, high, den_low, den_high = match.groups()
        band: Band | RatioBand
        if den_low is None:
            band = _checked_band(name, float(low), float(high))
        else:
            band = RatioBand(
                name,
                _checked_band(f"{name} numerator", float(low), float(high)),
                _checked_band(f"{name} denominator", float(den_low), float(den_high)),
            )
        if any(existing.name == name for existing in bands):
            raise UsageError(f"--bands names {name!r} twice; give each band a distinct name")
        bands.append(band)
    return tuple(bands)


def _checked_band(name: str, low: float, high: float) -> Band:
    if not 0 < low < high:
        raise UsageError(
            f"--bands: band {name!r} has range {low:g}-{high:g} Hz; it needs 0 < LOW < HIGH"
        )
    return Band(name, low, high)


def bands_to_spec(bands) -> str:
    """Inverse of :func:`parse_bands` (stored in ``preprocess.json`` and the settings hash)."""
    return ",".join(band.to_spec() for band in bands)


def band_names(bands) -> list[str]:
    return [band.name for band in bands]


def band_edges_hz(bands) -> np.ndarray:
    """float64 (n_bands, 2): ``(f_low, f_high)`` per token; ratio tokens hold the edge ratios."""
    return np.array([band.edges_hz for band in bands], dtype=np.float64)


def check_bands_fit_rate(bands, sfreq: float, *, what: str = "recording") -> None:
    """Raise :class:`RecordingError` if a band reaches the Nyquist frequency ``sfreq / 2``.

    ``sfreq`` is the rate (Hz) the band is computed from (the recording's own rate, before any
    upsampling, or the target rate of the cleaning). Example: 64 Hz data cannot give the gamma
    band 30-45 Hz (Nyquist 32 Hz).
    """
    nyquist = sfreq / 2.0
    for band in bands:
        if band.highest_frequency >= nyquist:
            raise RecordingError(
                f"sampling rate {sfreq:g} Hz of the {what} is too low for band {band.name!r} "
                f"(up to {band.highest_frequency:g} Hz; Nyquist {nyquist:g} Hz)",
                hint="leave this recording out, or choose bands below the Nyquist frequency "
                "with --bands",
            )
