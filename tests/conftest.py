"""Shared test helpers: paths and small object builders."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import settings

from devtools.cluster.launcher import ClusterError
from devtools.harness.cluster import RealCluster
from devtools.harness.cluster import start as start_cluster
from tests.need import need

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "scenarios"
SHARED_SCENARIOS = ROOT.parent / "shared" / "scenarios"

# The dev tools (devtools/) are not installed: they run from the checkout. The commands
# tests start as `python -m devtools ...` find them, wherever their working directory.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


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


# Property tests are deterministic by default (the same examples on every run and in CI);
# `HYPOTHESIS_PROFILE=explore make test` draws new ones, as a developer's hunt for bugs.
settings.register_profile("default", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The real cluster, started once per test run, with deploy/ installed (devtools/harness/cluster.py)."""
    try:
        running = start_cluster(tmp_path_factory.mktemp("cluster"))
    except ClusterError as err:
        need(str(err))
    try:
        running.install()
        yield running
    finally:
        running.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration (and every other that needs the real cluster) is
    ``integration`` and ``slow`` (real cgroups, processes, servers): ``make test-fast``
    (``-m "not slow"``) leaves them out."""
    for item in items:
        if "integration" in item.path.parts or "kube" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)
