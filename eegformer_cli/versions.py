"""Versions of the packages that decide a run's numbers, recorded in every output."""

from __future__ import annotations

import platform
from importlib import metadata

import eegformer_cli

_PACKAGES = (
    "numpy",
    "scipy",
    "mne",
    "mne-connectivity",
    "mne-icalabel",
    "mne-bids",
    "torch",
    "captum",
    "scikit-learn",
    "joblib",
)


def package_versions() -> dict[str, str]:
    """``{"python": "3.11.7", "eegformer-cli": "0.1.0", "torch": "2.13.0+cpu", ...}``."""
    versions = {"python": platform.python_version(), "eegformer-cli": eegformer_cli.__version__}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
