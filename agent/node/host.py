"""The agent's hands and eyes on this host: the cgroup tree, the collectors over it and
the CPU throttler (or its dry-run stand-in)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from agent.model.settings import AgentSettings
from agent.node.dryrun import DryRunThrottler
from agent.node.sampling import CountingLog, HostCollector
from executors.actuators import CpuThrottler
from executors.cgroup_throttle import CgroupThrottler

if TYPE_CHECKING:
    from collectors.cgroups import CgroupMounts
    from collectors.layout import PodCgroupLayout


def host_cgroups(cgroup_root: str, proc_root: str, kubelet_root: str) -> tuple[CgroupMounts, PodCgroupLayout]:
    """The host's cgroup mounts (v1 or v2, detected) and where the kubelet puts pods in
    them, probed under the cpu (else cpuacct) controller; raises OSError/ValueError."""
    from collectors.cgroups import detect_mounts
    from collectors.layout import PodCgroupLayout

    mounts = detect_mounts(cgroup_root, proc_root)
    probe = mounts.controller_root("cpu") or mounts.controller_root("cpuacct") or cgroup_root
    return mounts, PodCgroupLayout(probe, kubelet_root)


def build_host_parts(
    cgroup_root: str,
    proc_root: str,
    kubelet_root: str,
    state_dir: str,
    dry_run: bool,
    settings: AgentSettings,
    node_cpu: str = "proc",
    clock: Callable[[], float] | None = None,
) -> tuple[HostCollector, CpuThrottler]:
    """The collector and the throttler over the host's cgroup tree and /proc."""
    from collectors.node_stats import NodeStatsCollector
    from collectors.pod_stats import PodStatsCollector
    from executors.quota_state import QuotaState

    log = structlog.get_logger()
    mounts, layout = host_cgroups(cgroup_root, proc_root, kubelet_root)
    pod_log, node_log = CountingLog(), CountingLog()
    clocks: dict[str, Any] = {"clock": clock} if clock is not None else {}
    pod_stats = PodStatsCollector(
        mounts,
        layout,
        ext_cpu_resource=settings.ext_cpu_resource,
        kubelet_root=kubelet_root,
        log=pod_log,
        **clocks,
    )
    node_stats = NodeStatsCollector(proc_root, log=node_log, **clocks)
    collector = HostCollector(pod_stats, node_stats, pod_log, node_log, node_cpu)
    throttler: CpuThrottler
    if dry_run:
        throttler = DryRunThrottler()
    else:
        try:
            throttler = CgroupThrottler(mounts, QuotaState(state_dir), layout)
        except ValueError as err:
            log.error("cannot throttle on this host: quotas will not be written", error=str(err))
            throttler = DryRunThrottler()
    return collector, throttler
