"""The quota that breathes on this host's real cgroup v1 ``cpu`` hierarchy, with a real busy
process (DESIGN.md "Batch capacity": an LC pod's own quota may rise above its limit while
the node is under its throttle waterline, and is taken back first when it goes over).

The tree is kubelet-shaped (``tests/integration``'s ``tree`` fixture) with the quotas the
kubelet writes; the agent is the product's own loop with the real isolator, reading its
objects from a file. What is checked is what the kernel holds (the quota files read back)
and what the busy process got (``cpuacct.usage``, a kernel counter), never a wall-clock
figure. The kernel's fact that orders the writes is checked too: on v1 a child's quota
above its parent's is refused (EINVAL), so a raise writes the pod's cgroup first and a
take-back writes it last.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from devtools.demo.cgroups import CgroupTree, KernelMeter
from devtools.demo.pods import DemoPod
from tests import builders
from tests.integration.test_cpu_isolation_v1 import (
    NOT_LC,
    agent_loop,
    changes,
    cpu_file,
    kubelet_writes,
    manifest,
    node,
    pin,
    share_of_cpu,
    tick,
    write_objects,
)

pytestmark = pytest.mark.integration

LIMIT = 0.1  # cores: 10 ms a 100 ms period
ABOVE = 100  # percent: the quota may double


def _objects(web: DemoPod, *, line: bool, burst: float | None = None) -> list[dict[str, Any]]:
    """The node, web (latency-critical, limit ``LIMIT``) and the pool's policy: the quota
    burst and, with ``line``, an evict rule in force whatever the load (the node's memory
    above 1 byte; its action's scope leaves web out, so only the take-back is seen)."""
    lc = manifest(web, LIMIT, lc=True)
    lc["spec"]["containers"][0]["resources"]["limits"] = {"cpu": f"{round(LIMIT * 1000)}m"}
    section: dict[str, Any] = {"quotaAboveLimitPercent": ABOVE}
    if burst is not None:
        section["quotaPercent"] = burst
    spec: dict[str, Any] = {"cpuIsolation": {"burst": section}}
    docs = [node(), lc]
    if line:
        spec["objectiveEnsurances"] = [{"name": "any-memory", "actionName": "evict-others",
                                        "metricRule": {"name": "memory_total_usage", "value": "1"}}]  # fmt: skip
        docs.append({"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
                     "metadata": {"name": "evict-others"},
                     "spec": {"eviction": {}, "scope": {"podSelector": NOT_LC}}})  # fmt: skip
    docs.append(builders.policy("colocated", spec=spec))
    return docs


def _recorded(state: Path) -> dict[str, Any]:
    path = state / "cpu-isolation.json"
    return json.loads(path.read_text())["pods"] if path.exists() else {}


def _quotas(tree: CgroupTree, pod: DemoPod) -> tuple[str, str]:
    return cpu_file(tree, pod, "cpu.cfs_quota_us"), cpu_file(tree, pod, "cpu.cfs_quota_us", container=True)


def test_the_quota_rises_above_the_limit_while_under_and_is_taken_back_exactly_when_over(
    tree: CgroupTree, tmp_path: Path
) -> None:
    web = DemoPod("web", "Burstable", None)
    tree.add_pod(web)
    kubelet_writes(tree, web, LIMIT, limit=LIMIT)
    tree.start(web)
    pin(tree, max(os.sched_getaffinity(0)), web)
    kernel = KernelMeter(tree, [web])
    objects, state = tmp_path / "objects.yaml", tmp_path / "state"
    write_objects(objects, _objects(web, line=False))
    loop, isolator = agent_loop(tree, objects, state)
    try:
        # the kernel's fact: a container above its pod's quota is refused on v1
        with pytest.raises(OSError) as refused:
            tree.write(web.container_rel(tree.kubelet_root), "cpu.cfs_quota_us", "20000")
        assert refused.value.errno == errno.EINVAL
        at_limit = share_of_cpu(kernel, 1.5)[web.key]

        tick(loop)  # the first tick has no CPU rate yet: nothing is lent without it
        assert _quotas(tree, web) == ("10000", "10000")
        outcome = tick(loop)
        assert ("quotaBurst", "marked", web.key, "scope") in changes(outcome)
        assert outcome.isolated["quotaBurst"] == [web.key]
        assert _quotas(tree, web) == ("20000", "20000")  # the pod's first, then its container
        saved = _recorded(state)[web.uid]
        assert {n: s["original"] for n, s in saved["quota"].items()} == {"": "10000", "main": "10000"}
        assert saved["quotaPercent"] == ABOVE
        raised = share_of_cpu(kernel, 1.5)[web.key]
        print(f"web's cores: at its limit {at_limit:.3f}, raised {raised:.3f}")
        assert at_limit <= LIMIT * 1.25, at_limit  # the kernel held it to its limit
        assert raised > LIMIT * 1.4, raised  # and now lets it above

        # put back by someone else (the kubelet, systemd): raised again. The section's
        # default CPU burst (100% of the quota in force) is 20 ms now: the kernel refuses a
        # quota below it, so the burst goes first
        container = web.container_rel(tree.kubelet_root)
        tree.write(container, "cpu.cfs_burst_us", "0")
        tree.write(container, "cpu.cfs_quota_us", "10000")
        tick(loop)
        assert _quotas(tree, web) == ("20000", "20000")

        write_objects(objects, _objects(web, line=True))  # a line comes into force
        outcome = tick(loop)
        assert ("quotaBurst", "released", web.key, "over a line") in changes(outcome)
        assert _quotas(tree, web) == ("10000", "10000")  # exactly what the kubelet wrote
        assert "quota" not in _recorded(state).get(web.uid, {}) or not _recorded(state)[web.uid]["quota"]
        back = share_of_cpu(kernel, 1.5)[web.key]
        print(f"web's cores taken back: {back:.3f}")
        assert back <= LIMIT * 1.25, back  # its quota again (with the burst it may borrow)
    finally:
        isolator.release_all()
    assert _quotas(tree, web) == ("10000", "10000")


def test_a_burst_sized_from_the_raised_quota_is_brought_within_before_the_take_back(
    tree: CgroupTree, tmp_path: Path
) -> None:
    """CPU burst at 100% follows the quota in force: raised to 20 ms, the burst is 20 ms,
    and the kernel refuses a quota below the burst. The take-back brings the burst down to
    the original quota first; the uninstall's release writes every original back."""
    web = DemoPod("web", "Burstable", None)
    tree.add_pod(web)
    kubelet_writes(tree, web, LIMIT, limit=LIMIT)
    tree.start(web)
    objects, state = tmp_path / "objects.yaml", tmp_path / "state"
    write_objects(objects, _objects(web, line=False, burst=100))
    loop, isolator = agent_loop(tree, objects, state)
    try:
        tick(loop)
        tick(loop)
        tick(loop)  # the burst follows the raised quota
        assert _quotas(tree, web) == ("20000", "20000")
        assert cpu_file(tree, web, "cpu.cfs_burst_us") == "20000"
        with pytest.raises(OSError) as refused:  # the kernel's fact
            tree.write(web.rel(tree.kubelet_root), "cpu.cfs_quota_us", "10000")
        assert refused.value.errno == errno.EINVAL

        write_objects(objects, _objects(web, line=True, burst=100))
        outcome = tick(loop)
        assert ("quotaBurst", "released", web.key, "over a line") in changes(outcome)
        assert _quotas(tree, web) == ("10000", "10000")
        assert cpu_file(tree, web, "cpu.cfs_burst_us") == "10000"  # 100% of the quota now
    finally:
        released = isolator.release_all()
    assert released == [web.uid]
    assert _quotas(tree, web) == ("10000", "10000")
    assert cpu_file(tree, web, "cpu.cfs_burst_us") == "0"
    assert _recorded(state) == {}
