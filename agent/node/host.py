"""The agent's hands and eyes on this host: the cgroup tree, the collectors over it, the
CPU throttler and the CPU isolator (or their dry-run stand-ins)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agent.model.settings import AgentSettings
from agent.node.dryrun import dry_run_isolator, dry_run_limiter, dry_run_throttler
from agent.node.sampling import CountingLog, HostCollector
from executors.actuators import Actuator, Holder
from executors.cgroup_batch_limits import CgroupBatchLimiter
from executors.cgroup_isolation import CgroupIsolator
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


@dataclass(frozen=True, slots=True)
class HostParts:
    """The collector and the actuators over this host's cgroup tree and /proc: the ones
    the loop carries its intents with (``actuators``: real, or reported in a dry run), and
    the real cgroup writers among them, which hold caps and marks across ticks and
    restarts (None in a dry run, or where the host has no cpu controller)."""

    collector: HostCollector
    actuators: tuple[Actuator, ...]
    throttler: CgroupThrottler | None = None
    isolator: CgroupIsolator | None = None
    #: Caps and marks set as systemd units' properties (``executors.cgroup_writes``).
    through_systemd: bool = False
    limiter: CgroupBatchLimiter | None = None

    @property
    def holders(self) -> tuple[Holder, ...]:
        """The writers that hold something on the host (what an uninstall hands back), in
        the order they give it back: the caps before the batch limits they sit under (the
        throttler's original of a batch pod is its limit), then the marks."""
        return tuple(h for h in (self.throttler, self.limiter, self.isolator) if h is not None)


def build_host_parts(
    cgroup_root: str,
    proc_root: str,
    kubelet_root: str,
    state_dir: str,
    dry_run: bool,
    settings: AgentSettings,
    node_cpu: str = "proc",
    clock: Callable[[], float] | None = None,
) -> HostParts:
    """The collector, the throttler and the isolator over the host's cgroup tree and
    /proc. The actuators share the state directory, one file each."""
    from collectors.files import FileBudget, open_files_budget
    from collectors.node_stats import NodeStatsCollector
    from collectors.pod_stats import PodStatsCollector
    from executors.batch_limits_state import BatchLimitsState
    from executors.cgroup_writes import choose_writes
    from executors.isolation_state import IsolationState
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
        budget=FileBudget(open_files_budget(settings.max_open_files)),
        **clocks,
    )
    node_stats = NodeStatsCollector(proc_root, log=node_log, **clocks)
    collector = HostCollector(pod_stats, node_stats, pod_log, node_log, node_cpu)
    if dry_run:
        return HostParts(collector, (dry_run_throttler(), dry_run_isolator(), dry_run_limiter()))
    # Through systemd or straight into the files: what the host is decides (detected once).
    writes = choose_writes(mounts.version, layout.detect_driver(), state_dir)
    try:
        throttler = CgroupThrottler(mounts, QuotaState(state_dir), layout, writes=writes)
        isolator = CgroupIsolator(mounts, IsolationState(state_dir), layout, writes=writes)
        limiter = CgroupBatchLimiter(mounts, BatchLimitsState(state_dir), layout, writes=writes)
    except ValueError as err:
        log.error("cannot throttle on this host: quotas, batch limits and CPU isolation will "
                  "not be written", error=str(err))
        return HostParts(collector, (dry_run_throttler(),))  # no isolator: no class offered
    return HostParts(collector, (throttler, isolator, limiter), throttler, isolator,
                     writes.through_systemd, limiter)
