"""A batch pod's limits on this host's real cgroup v1 hierarchies, with real processes
(DESIGN.md "Batch capacity"): the quota and the memory limit the batch limiter writes from
the pod's ``batch-cpu`` / ``batch-memory`` are read back from the kernel, enforced on a
busy process (``cpuacct.usage``), handed back exactly; and the kernel's answer to a limit
below what the pod already uses (docs/batch-capacity.md: v1 reclaims, then refuses with
EBUSY; the limit holds once the pod is under it).

The tree is kubelet-shaped (cgroupfs driver, a unique kubelet ``--cgroup-root``) in the
``cpu`` and ``cpuacct`` hierarchies; in the ``memory`` hierarchy it is made under this
process's own memory cgroup, so the test's processes stay inside whatever limit the
sandbox put on it. Everything made is removed, also on failure.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from agent.model.batch import BATCH_CPU, BATCH_MEMORY, batch_limits
from agent.model.objects import Pod, parse_pod
from collectors.cgroups import CgroupMounts
from collectors.layout import PodCgroupLayout
from devtools.demo.cgroups import CgroupTree, v1_roots
from devtools.demo.pods import DemoPod
from devtools.harness.waiting import wait_until
from executors.batch_limits_state import BatchLimitsState
from executors.cgroup_batch_limits import V1_UNLIMITED, CgroupBatchLimiter
from tests.builders import pod
from tests.need import need

pytestmark = pytest.mark.integration
MI = 1024**2
_COUNTER = itertools.count()


def _own_memory_cgroup() -> str:
    with open(os.path.join(PROC_ROOT, "self/cgroup"), encoding="ascii") as f:
        for line in f:
            _, controllers, path = line.strip().split(":", 2)
            if "memory" in controllers.split(","):
                return path
    raise ValueError("no memory controller in /proc/self/cgroup")


@pytest.fixture
def batch_tree() -> Iterator[tuple[CgroupTree, CgroupMounts]]:
    if os.geteuid() != 0:
        need("root, to create cgroups")
    try:
        cpu, acct, memory = v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        need(f"cgroup v1 cpu and cpuacct hierarchies: {err}")
    if memory is None:
        need("a cgroup v1 memory hierarchy where cgroups can be made")
    own = os.path.join(memory, _own_memory_cgroup().lstrip("/"))
    made = CgroupTree(cpu, acct, own, f"waterline-it-batch-{os.getpid()}-{next(_COUNTER)}")
    try:
        yield made, CgroupMounts(CGROUP_ROOT, {"cpu": cpu, "cpuacct": acct, "memory": own})
    finally:
        left = made.cleanup()
        assert not left, f"cgroups left behind: {left}"


def batch_pod(demo: DemoPod, cpu: str, memory: str) -> Pod:
    limits = {BATCH_CPU: cpu, BATCH_MEMORY: memory}
    return parse_pod(pod(demo.name, namespace=demo.namespace, uid=demo.uid, qos="BestEffort",
                         containers=[{"name": "main", "resources": {"requests": limits, "limits": limits}}],
                         container_ids={"main": f"containerd://{demo.container_id}"}))  # fmt: skip


def read(root: str, rel: str, name: str) -> str:
    return Path(root, rel, name).read_text().strip()


def test_the_quota_and_memory_limit_are_the_kernels_enforced_and_handed_back(
    batch_tree: tuple[CgroupTree, CgroupMounts], tmp_path: Path
) -> None:
    tree, mounts = batch_tree
    demo = DemoPod("batch", "BestEffort", None)
    tree.make(demo.container_rel(tree.kubelet_root))
    tree.start(demo)  # a busy loop
    batch = batch_pod(demo, "200", "64Mi")
    layout = PodCgroupLayout(tree.cpu_root, tree.kubelet_root)
    limiter = CgroupBatchLimiter(mounts, BatchLimitsState(str(tmp_path)), layout)
    cpu, memory = tree.cpu_root, mounts.v1["memory"]
    pod_rel, container_rel = demo.rel(tree.kubelet_root), demo.container_rel(tree.kubelet_root)
    assert read(cpu, container_rel, "cpu.cfs_quota_us") == "-1"

    assert limiter.set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    for rel in (pod_rel, container_rel):
        assert read(cpu, rel, "cpu.cfs_quota_us") == "20000"  # 0.2 core of a 100 ms period
        assert read(memory, rel, "memory.limit_in_bytes") == str(64 * MI)
    # what the kernel lets the busy process have: at most the quota, and a period of slack
    start_used, start = tree.cpu_seconds(demo), time.monotonic()
    time.sleep(1.5)
    used, elapsed = tree.cpu_seconds(demo) - start_used, time.monotonic() - start
    assert used <= 0.2 * elapsed + 0.1, f"{used:.3f} s of CPU in {elapsed:.2f} s under a 0.2-core quota"

    assert limiter.release_all() == [batch.uid]
    for rel in (pod_rel, container_rel):
        assert read(cpu, rel, "cpu.cfs_quota_us") == "-1"
        assert read(memory, rel, "memory.limit_in_bytes") == V1_UNLIMITED
    assert limiter.held() == {}


def test_a_memory_limit_below_what_the_pod_holds_is_refused_then_holds_once_under_it(
    batch_tree: tuple[CgroupTree, CgroupMounts], tmp_path: Path
) -> None:
    """v1 reclaims, and with nothing it can reclaim (anonymous memory, no swap) answers
    EBUSY: the limit is not in force (answered False, the file unchanged, the original
    recorded); the same ask once the pod is under it holds."""
    tree, mounts = batch_tree
    if Path("/proc/swaps").read_text().count("\n") > 1:
        need("no swap (the kernel would swap the pod's memory out rather than refuse)")
    demo = DemoPod("hog", "BestEffort", None)
    tree.make(demo.container_rel(tree.kubelet_root))
    tree.start(demo, ["python3", "-c", "import time; b = b'x' * (64 << 20); time.sleep(120)"])
    memory = mounts.v1["memory"]
    container_rel = demo.container_rel(tree.kubelet_root)
    wait_until(lambda: int(read(memory, container_rel, "memory.usage_in_bytes")) > 64 * MI,
               timeout=30, what="the process to hold 64 MiB")  # fmt: skip
    batch = batch_pod(demo, "1000", "16Mi")
    limiter = CgroupBatchLimiter(mounts, BatchLimitsState(str(tmp_path)),
                                 PodCgroupLayout(tree.cpu_root, tree.kubelet_root))  # fmt: skip
    assert not limiter.set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    assert read(memory, container_rel, "memory.limit_in_bytes") == V1_UNLIMITED
    assert demo.uid in limiter.held()  # recorded before the write, so a release is exact
    # the kernel's own answer, as the limiter met it
    with pytest.raises(OSError) as refused:
        Path(memory, container_rel, "memory.limit_in_bytes").write_text(str(16 * MI))
    assert refused.value.errno == errno.EBUSY

    tree.signal(demo.name, signal.SIGKILL)
    tree.stop(demo.name)
    assert limiter.set_limits(batch, batch_limits(batch))  # type: ignore[arg-type]
    assert read(memory, container_rel, "memory.limit_in_bytes") == str(16 * MI)
    assert limiter.release_all() == [batch.uid]
    assert read(memory, container_rel, "memory.limit_in_bytes") == V1_UNLIMITED
