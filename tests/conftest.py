"""Shared test fixtures: where the real datasets are, and skipping cleanly without them."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
SAMPLE_DATA = REPO / "sample_data"


def shared_dataset(name: str) -> Path:
    """Path of ``../shared/data/<name>``; skips the test with a clear message when absent."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(
            f"real dataset {name!r} not found at {path} (clone the project beside ../shared)"
        )
    return path


@pytest.fixture
def msu_dir() -> Path:
    return shared_dataset("msu-schizophrenia")


@pytest.fixture
def eegmat_dir() -> Path:
    return shared_dataset("eegmat-subset")


@pytest.fixture
def fixtures_dir() -> Path:
    return shared_dataset("reader-fixtures")


@pytest.fixture(autouse=True)
def package_warnings_on_stderr():
    """eegformer's warnings (``warnings.warn`` with EegformerWarning) as the CLI shows them, one
    ``warning: ...`` line on stderr, for the Python API calls of every test too (a test that
    checks the warnings themselves uses ``pytest.warns``, which records them instead)."""
    from eegformer_cli.console import warnings_on_stderr

    with warnings_on_stderr():
        yield
