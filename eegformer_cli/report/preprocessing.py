"""The report's preprocessing table: a preprocess folder's ``preprocess.json`` in words, the
crop first, each setting that did something with its unit (with ICA off, no ICA parameter;
the rejection thresholds in µV, with the segments they rejected, from the folder's manifest),
then the run's other entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eegformer_cli.preprocess.output import PreprocessFile
from eegformer_cli.report.page import inline_code
from eegformer_cli.report.tables import rows_html


def _seconds(value) -> str:
    return f"{value:g} s" if isinstance(value, int | float) else str(value)


def _hertz(value) -> str:
    return f"{value:g} Hz" if isinstance(value, int | float) else str(value)


def _microvolts(value, where: str) -> str:
    """A peak-to-peak threshold in volts as text in µV (and mV from 1 mV), judged ``where``."""
    if value is None:
        return "off"
    millivolts = f" ({value * 1e3:g} mV)" if value >= 1e-3 else ""
    return f"{value * 1e6:g} \u00b5V{millivolts} peak-to-peak {where}"


def _bids_selection_text(selection) -> str:
    """``{"task": ["rest"], "session": [], "run": []}`` -> ``"task rest"``; nothing chosen ->
    ``"none: every task, session and run"``."""
    if not isinstance(selection, dict):
        return str(selection)
    chosen = [f"{key} {', '.join(map(str, values))}" for key, values in selection.items() if values]
    return "; ".join(chosen) if chosen else "none: every task, session and run"


def _bands_text(spec) -> str:
    """``"delta:2-4,theta:4-8,tbr:4-8/12-30"`` -> ``"delta 2-4 Hz, theta 4-8 Hz, tbr
    4-8 Hz / 12-30 Hz"``."""
    if not isinstance(spec, str):
        return str(spec)
    parts = []
    for entry in spec.split(","):
        name, _, ranges = entry.partition(":")
        parts.append(f"{name} " + " / ".join(f"{r} Hz" for r in ranges.split("/")))
    return ", ".join(parts)


#: preprocess.json's ``settings``: key -> (label, value -> text), in the order the report lists
#: them after the crop (a key not listed here is shown as it is, after these).
PREPROCESS_SETTINGS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "preset": ("preset", str),
    "sfreq": ("sampling rate after cleaning", _hertz),
    "l_freq": ("high-pass edge (band-pass low edge)", _hertz),
    "h_freq": ("low-pass edge (band-pass high edge)", _hertz),
    "h_trans_bandwidth": (
        "low-pass transition band",
        lambda v: _hertz(v) if v != "auto" else "auto (MNE's rule)",
    ),
    "epoch_length": (
        "segment length",
        lambda v: "auto (from the shortest recording)" if v == "auto" else _seconds(v),
    ),
    "window_s": ("spectral window inside a segment", _seconds),
    "flat_ptp_v": (
        "segment rejected when a channel is flat: below",
        lambda v: _microvolts(v, "in most of its 3 s windows"),
    ),
    "absurd_ptp_v": (
        "segment rejected when a channel is absurd: above",
        lambda v: _microvolts(v, "in any of its 3 s windows"),
    ),
    "ica": ("ICA + ICLabel artefact removal", lambda v: "on" if v else "off"),
    "ica_n_components": ("ICA components", str),
    "ica_random_state": ("ICA seed", str),
    "ica_before_reference": (
        "ICA fitted",
        lambda v: "before the average reference" if v else "after the average reference",
    ),
    "bands": ("frequency bands (tokens)", _bands_text),
    "channels": ("channels", lambda v: ", ".join(v) if isinstance(v, list) else str(v)),
    "max_interpolated": ("most channels interpolated per recording", str),
    "resample_method": ("resampling", str),
}
#: Entries of preprocess.json beside ``settings`` that the section shows, with their labels
#: (``settings``, ``bands``, ``channels``, ``band_edges_hz`` and ``versions`` repeat what is
#: shown elsewhere; any other entry is shown as it is).
PREPROCESS_RUN_ENTRIES = {
    "epoch_length_s": ("segment length used", _seconds),
    "inputs": ("inputs", lambda v: ", ".join(map(str, v)) if isinstance(v, list) else str(v)),
    "participants_file": ("participants table", str),
    "recordings_file": ("recordings table", str),
    "counts": (
        "recordings",
        lambda v: (
            ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in v.items())
            if isinstance(v, dict)
            else str(v)
        ),
    ),
    "settings_hash": ("settings hash", str),
    "participant_pattern": ("participant id pattern", str),
    "bids_selection": ("BIDS selection", _bids_selection_text),
}
PREPROCESS_REPEATED = ("settings", "bands", "channels", "band_edges_hz", "versions")
#: Settings of ICA, left out of the table where ICA is off (they did nothing).
ICA_SETTINGS = ("ica_n_components", "ica_random_state", "ica_before_reference")
#: The segment-rejection thresholds, each said with what it rejected.
REJECTION_SETTINGS = ("flat_ptp_v", "absurd_ptp_v")


def rejected_segments(manifest: list[dict]) -> tuple[int, int, int] | None:
    """(segments rejected, segments cut, recordings with a rejection) over the manifest's
    usable recordings; None without counts (a manifest without those columns)."""
    ok = [r for r in manifest if r.get("status") == "ok"]
    try:
        kept = [int(float(r["n_segments"])) for r in ok]
        rejected = [int(float(r["n_segments_rejected"])) for r in ok]
    except (KeyError, TypeError, ValueError):
        return None
    return sum(rejected), sum(kept) + sum(rejected), sum(n > 0 for n in rejected)


def _rejection_text(counts: tuple[int, int, int] | None) -> str:
    """What the two thresholds together rejected, in words."""
    if counts is None:
        return "not counted (the manifest has no n_segments_rejected column)"
    rejected, total, recordings = counts
    if not rejected:
        return f"none of the {total} segments: neither threshold rejected any"
    return (
        f"{rejected} of {total} segments ({rejected / max(total, 1):.1%}), in {recordings} "
        "recording" + "s" * (recordings != 1) + " (by either threshold: the manifest does not "
        "say which)"
    )


def preprocessing_html(stored: PreprocessFile, manifest: list[dict] | None = None) -> str:
    """A preprocess folder's ``preprocess.json`` as one table: the crop first, then every
    setting that did something (:data:`PREPROCESS_SETTINGS` order, unknown ones after; with
    ICA off, none of :data:`ICA_SETTINGS`), the average reference (always applied), then the
    run's other entries (inputs, tables, counts, hash). With the folder's ``manifest`` rows,
    the segments the rejection thresholds rejected, after them (a threshold that rejected
    nothing says so)."""
    settings = {key: v for key, v in (stored.settings or {}).items() if key != "crop_s"}
    if "ica" in settings and not settings["ica"]:
        settings = {key: v for key, v in settings.items() if key not in ICA_SETTINGS}
    counts = rejected_segments(manifest) if manifest is not None else None
    crop = stored.crop_s
    rows = [
        (
            "crop",
            inline_code(
                f"the first {crop:g} s of every recording"
                if isinstance(crop, int | float)
                else "none: every recording analysed whole"
            ),
        )
    ]
    for key, (label, text) in PREPROCESS_SETTINGS.items():
        if key not in settings:
            continue
        value = settings.pop(key)
        nothing = key in REJECTION_SETTINGS and value is not None and counts and not counts[0]
        rows.append(
            (label, inline_code(text(value) + ("; rejected no segment here" if nothing else "")))
        )
        if key == REJECTION_SETTINGS[-1] and manifest is not None:
            rows.append(("segments rejected", inline_code(_rejection_text(counts))))
    rows += [(key, inline_code(str(value))) for key, value in settings.items()]
    rows.append(("reference", "average of all channels (always)"))
    for key, value in stored.entries.items():
        if key in PREPROCESS_REPEATED:
            continue
        label, text = PREPROCESS_RUN_ENTRIES.get(key, (key, str))
        rows.append((label, inline_code(text(value) if value is not None else "none")))
    return rows_html(rows)
