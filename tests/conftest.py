"""Shared test fixtures: where the real datasets are (skipping cleanly without them), the tiny
runs several modules read (built once per session, and once per worker under pytest-xdist),
and the package's warnings on stderr. The builders behind them are in ``builders.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import build_interaction_run, build_sample_run, shared_dataset


@pytest.fixture
def msu_dir() -> Path:
    return shared_dataset("msu-schizophrenia")


@pytest.fixture
def eegmat_dir() -> Path:
    return shared_dataset("eegmat-subset")


@pytest.fixture
def fixtures_dir() -> Path:
    return shared_dataset("reader-fixtures")


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory) -> dict:
    """12 sample recordings preprocessed and a tiny model trained (25 % holdout): ``prep``,
    ``run`` and ``model`` paths, shared by the tests of a session (of a worker): they read it,
    or change a copy (``report`` without ``--out`` adds its report.html)."""
    return build_sample_run(tmp_path_factory.mktemp("explain-sample-run"))


@pytest.fixture(scope="session")
def interaction_run(tmp_path_factory) -> dict:
    """A tiny model trained on an XOR study whose screen keeps the planted pair: ``prep`` and
    ``run`` paths."""
    return build_interaction_run(tmp_path_factory.mktemp("interaction-run"))


@pytest.fixture(autouse=True)
def package_warnings_on_stderr():
    """eegformer's warnings (``warnings.warn`` with EegformerWarning) as the CLI shows them, one
    ``warning: ...`` line on stderr, for the Python API calls of every test too (a test that
    checks the warnings themselves uses ``pytest.warns``, which records them instead)."""
    from eegformer_cli.console import warnings_on_stderr

    with warnings_on_stderr():
        yield


@pytest.fixture(autouse=True)
def close_figures():
    """Every matplotlib figure a test made is closed after it (a test that draws a figure and
    checks it need not), so that one worker's tests never hold many figures open at once."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
