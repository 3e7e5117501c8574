"""Fixtures shared by the integration tests."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from devtools.demo.cgroups import CgroupTree, v1_roots
from devtools.harness.agent_env import Pool
from devtools.harness.cluster import RealCluster
from tests.integration.controller_env import Made
from tests.need import need

_COUNTER = itertools.count()


@pytest.fixture
def tree() -> Iterator[CgroupTree]:
    """A kubelet-shaped tree of this host's real cgroup v1 cpu and cpuacct hierarchies,
    under a unique name; every process and cgroup it made is removed, also on failure."""
    if os.geteuid() != 0:
        need("root, to create cgroups")
    try:
        cpu, acct, _memory = v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        need(f"cgroup v1 cpu and cpuacct hierarchies: {err}")
    made = CgroupTree(cpu, acct, None, f"waterline-it-{os.getpid()}-{next(_COUNTER)}")
    try:
        yield made
    finally:
        left = made.cleanup()
        assert not left, f"cgroups left behind: {left}"


@pytest.fixture
def made(kube: RealCluster) -> Iterator[Made]:
    """The cluster-scoped objects a test creates (jobs, PriorityClasses, queues, policies),
    deleted at its end, and the cluster brake lifted (``controller_env.Made``)."""
    done = Made(kube)
    try:
        yield done
    finally:
        done.clean()


@pytest.fixture
def pool(kube: RealCluster) -> Iterator[Pool]:
    """The test's own namespace and kwok nodes on the real cluster (agent_env.Pool)."""
    made = Pool(kube)
    try:
        yield made
    finally:
        made.close()
