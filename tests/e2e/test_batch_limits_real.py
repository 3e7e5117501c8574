"""A batch pod on the real node gets its CPU quota and memory limit from its batch
resources (issue 33, docs/batch-capacity.md "Its limits, from its batch resources").

The agent runs in its pod (the e2e install); a policy gives the real node a batch capacity
(bounded to 1 core, so the figure is exact); the real scheduler places a Deployment's
BestEffort pod requesting ``waterline.io/batch-cpu: 300`` and ``waterline.io/batch-memory:
64Mi``; the kubelet runs it with no quota and no memory limit; what is checked is what the
kernel then holds in the pod's and its container's cgroups (``cpu.cfs_quota_us`` 30000 of
a 100 ms period, ``memory.limit_in_bytes`` 64 MiB) and what its busy loop gets
(``cpuacct.usage``), and its pod cgroup in the idle class (``idle: true``, the
default). The policy removed, the node's status loses the resources. The pod and
policy are deleted at the end; the limits stay with the pod until it goes (they are its own).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agent.model.batch import BATCH_CPU, BATCH_MEMORY
from agent.model.quantity import parse_quantity
from devtools.harness.waiting import wait_until
from tests import builders
from tests.e2e.conftest import RealNodeRun, deployment, report
from tests.e2e.kernel import CPU, PodCgroups, read

MEMORY = Path("/sys/fs/cgroup/memory")
REAL_NODE = {"matchLabels": {"waterline.test/real-node": "true"}}
BURN = "while :; do :; done"
MI = 1024**2


def _allocatable(real: RealNodeRun, resource: str) -> float | None:
    value = real.get("node", real.node.name)["status"].get("allocatable", {}).get(resource)
    return None if value is None else parse_quantity(value)


def test_a_batch_pod_gets_its_quota_and_memory_limit_from_its_batch_resources(real: RealNodeRun) -> None:
    # No rules: the CRD refuses an empty objectiveEnsurances list, so the key is left out.
    batch = {"marginPercent": 0, "windowSeconds": 0, "hysteresisPercent": 0,
             "minIntervalSeconds": 0, "max": {"cpu": "1"}, "min": {"memory": "256Mi"}}  # fmt: skip
    policy: dict[str, Any] = builders.policy("e2e-batch", None, REAL_NODE, spec={"batchCapacity": batch})
    ns = real.kube.namespace("e2e-batch")
    limits = {BATCH_CPU: "300", BATCH_MEMORY: "64Mi"}
    try:
        real.kube.apply([policy])
        wait_until(lambda: _allocatable(real, BATCH_CPU) == 1000, 120, "batch-cpu 1000 published", interval=1)
        real.kube.apply([deployment("batch-limited", ns, BURN, {"role": "batch"},
                                    {"requests": limits, "limits": limits})])  # fmt: skip
        pod = real.ready_pod(ns, "app=batch-limited")
        assert pod["status"]["qosClass"] == "BestEffort"
        cg = PodCgroups.of(pod)
        where = {"pod": cg.rel, "container": cg.container("main")}

        def limited() -> bool:
            return all(read(CPU / rel / "cpu.cfs_quota_us") == "30000"
                       and read(MEMORY / rel / "memory.limit_in_bytes") == str(64 * MI)
                       for rel in where.values())  # fmt: skip

        took = wait_until(limited, 60, "the quota and memory limit in the kernel", interval=0.5,
                          explain=lambda: str({k: (read(CPU / r / "cpu.cfs_quota_us"),
                                                   read(MEMORY / r / "memory.limit_in_bytes"))
                                               for k, r in where.items()}))  # fmt: skip
        wait_until(lambda: read(CPU / cg.rel / "cpu.idle") == "1", 60, "the batch pod in the idle class",
                   interval=0.5)  # batchCapacity's idle: true, the default  # fmt: skip
        used0, t0 = cg.usage_ns(), time.monotonic()
        time.sleep(3)
        cores = (cg.usage_ns() - used0) / 1e9 / (time.monotonic() - t0)
        assert cores <= 0.3 + 0.05, f"the busy loop got {cores:.3f} cores under a 0.3-core quota"
        report("batch limits", f"batch pod {pod['metadata']['name']}: cpu.cfs_quota_us 30000 and "
                               f"memory.limit_in_bytes {64 * MI} on pod and container {took:.1f} s after "
                               f"Ready; its busy loop got {cores:.3f} cores (quota 0.3)")  # fmt: skip
        real.kubectl("delete", "nqp", "e2e-batch", "--wait", timeout=60)
        wait_until(lambda: _allocatable(real, BATCH_CPU) is None and _allocatable(real, BATCH_MEMORY) is None,
                   120, "the batch resources removed from the node's status", interval=1)  # fmt: skip
    finally:
        real.kubectl("delete", "nqp", "e2e-batch", "--ignore-not-found", check=False, timeout=60)
        real.kubectl("delete", "namespace", ns, "--wait", "--timeout", "120s", check=False, timeout=150)
