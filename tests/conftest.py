"""Shared test helpers: paths and small object builders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "scenarios"
SHARED_SCENARIOS = ROOT.parent / "shared" / "scenarios"


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _psutil_proc_path() -> Iterator[None]:
    """A node collector points psutil's process-global /proc at its root (a tmp dir in
    tests): put it back after every test, so no test reads another's fake /proc."""
    saved = psutil.PROCFS_PATH
    yield
    psutil.PROCFS_PATH = saved
