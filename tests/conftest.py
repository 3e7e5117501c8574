"""Shared test helpers: paths and small object builders."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "scenarios"
SHARED_SCENARIOS = ROOT.parent / "shared" / "scenarios"


@pytest.fixture
def root() -> Path:
    return ROOT
