"""One tick's measurements from the host: the node and pod collectors behind one call.

The collectors (``collectors.node_stats``, ``collectors.pod_stats``) read the files and
log each bad file once; here their warnings are also *counted* per tick, for the
``waterline_collector_errors_total`` metric, so a file that keeps failing stays visible
after its first log line. A feature the kernel lacks (no PSI) is not an error.

``node_cpu`` chooses where ``cpu_total_usage`` comes from: ``proc`` (the host's
/proc/stat, the default and what a node really carries) or ``pods`` (the sum of the pods'
cgroup usage). ``pods`` is for the demo and for experiments on a shared workstation, where
the rest of the machine's load would otherwise move the node figure.

The interference metrics (``lc_*``, ``collectors.interference``) are taken from the
latency-critical pods' figures of the same tick; their task lists come from the cgroups
the pod collector found, read under the same cgroup root and the node collector's /proc.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.model.latency import latency_critical
from agent.model.objects import Node, Pod
from agent.node.loop import Collection
from collectors.files import OnceLog, open_files_budget
from collectors.interference import NO_TASKS_VISIBLE, InterferenceCollector, TaskWaitReader
from collectors.node_stats import CPU_TOTAL_USAGE, CPU_TOTAL_UTILIZATION, NodeStatsCollector
from collectors.pod_stats import PodStatsCollector

NODE_CPU_SOURCES = ("proc", "pods")
#: Warnings that report a missing kernel feature, not a failed read.
_NOT_ERRORS = frozenset({"no PSI file", NO_TASKS_VISIBLE})


class CountingLog(OnceLog):
    """A OnceLog that also counts every problem, logged or suppressed."""

    def __init__(self, logger: Any | None = None) -> None:
        super().__init__(logger)
        self.count = 0

    def warn(self, event: str, path: str, **fields: Any) -> None:
        if event not in _NOT_ERRORS:
            self.count += 1
        super().warn(event, path, **fields)

    def drain(self) -> int:
        count, self.count = self.count, 0
        return count


class HostCollector:
    def __init__(
        self,
        pod_stats: PodStatsCollector,
        node_stats: NodeStatsCollector,
        pod_log: CountingLog,
        node_log: CountingLog,
        node_cpu: str = "proc",
        interference: InterferenceCollector | None = None,
    ) -> None:
        if node_cpu not in NODE_CPU_SOURCES:
            raise ValueError(f"node CPU source must be one of {NODE_CPU_SOURCES}, got {node_cpu!r}")
        self.pod_stats = pod_stats
        self.node_stats = node_stats
        self.pod_log = pod_log
        self.node_log = node_log
        self.node_cpu = node_cpu
        if interference is None:  # the same cgroup tree and /proc as the other two
            interference = InterferenceCollector(
                TaskWaitReader(
                    pod_stats.layout.probe_root,
                    pod_stats.version,
                    node_stats.proc_root,
                    clock=pod_stats.clock,
                    log=pod_log,
                    budget=pod_stats.budget,  # one bound on the descriptors held
                )
            )
        self.interference = interference

    def hold_files(self, max_open_files: int) -> None:
        """A new ``maxOpenFiles``: every held descriptor is closed and the collectors hold
        again from the next tick on, within the new bound (and the process's limit)."""
        self.pod_stats.close()
        self.interference.waits.close()
        self.pod_stats.budget.limit = open_files_budget(max_open_files)

    def collect(self, node: Node, pods: Sequence[Pod]) -> Collection:
        node_sample = self.node_stats.collect(
            node.allocatable.get("cpu"), node.allocatable.get("memory")
        )
        pod_sample = self.pod_stats.collect(pods)
        metrics = dict(node_sample.metrics)
        if self.node_cpu == "pods":
            metrics.pop(CPU_TOTAL_USAGE, None)
            metrics.pop(CPU_TOTAL_UTILIZATION, None)  # derived again from the new usage
            figures = [u.cpu for u in pod_sample.usage.values() if u.cpu is not None]
            if figures:
                metrics[CPU_TOTAL_USAGE] = sum(figures)
        metrics.update(self.interference.collect(latency_critical(pods), pod_sample.stats))
        errors = {"cgroup": self.pod_log.drain(), "proc": self.node_log.drain()}
        return Collection(
            metrics=metrics,
            usage=pod_sample.usage,
            missing=pod_sample.missing,
            errors={k: v for k, v in errors.items() if v},
        )
