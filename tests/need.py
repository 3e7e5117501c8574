"""The one rule for what a test cannot have here: a missing tool, root, a cgroup
hierarchy, the real cluster, the guest, a built program.

On a workstation such a test skips and says what is missing; in CI (``CI=true``) it fails
and says the same, so CI never passes by not running a test. .ci/run installs or builds
everything a test may ``need()``.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def need(reason: str) -> NoReturn:
    """Skip here, fail in CI, with ``reason`` (what is missing and how to get it)."""
    if in_ci():
        pytest.fail(f"needed in CI: {reason}", pytrace=False)
    pytest.skip(reason)
