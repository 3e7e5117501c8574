"""The node agent's Prometheus metrics, declared in one place (served by ``agent.serving``).

Two kinds of series:

* process counters and histograms (actions, ticks, collector errors, tick duration), kept
  by prometheus_client and cumulative for the life of the process;
* a *snapshot* of the node after the last tick (usage, waterlines, gaps, rule states,
  per-pod CPU and memory), rendered by a custom collector at scrape time. A pod that left the node is
  simply absent from the next snapshot, so its series vanish instead of going stale, and
  no label set outlives what it describes.

Labels are bounded: metric and action type come from the registry, rules from the
policies, pods from the node (about 250); pods carry ``namespace`` and ``pod`` only.
Node-level values are in the unit of the registry metric they show (cores, bytes or
percent), which is why they share one family with a ``metric`` label rather than
carrying a unit suffix. The node is not a label: one agent serves one node and the scrape
adds the target's labels.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

RULE_STATES = ("normal", "triggered", "restored")
#: The CPU isolation classes (agent.model.isolation), a bounded label.
CPU_CLASSES = ("idle", "burst", "quotaBurst")
#: The safety limits that can stop an eviction round (engine.limits.LIMITS).
EVICTION_LIMITS = ("clusterBrake", "maxPodsPerRound", "evictionRateLimit")
#: The ``control`` of waterline_caps_reverted_total: the CFS quota (cpu.max, cfs_quota_us),
#: the CPU isolation marks (executors.cgroup_isolation: cpu.idle, the CFS burst, the
#: quota raised above the limit), and a batch pod's limits (executors.cgroup_batch_limits:
#: its quota, its memory limit).
CPU_QUOTA_CONTROL = "cpu_quota"
REVERTED_CONTROLS = (CPU_QUOTA_CONTROL, "cpu_idle", "cpu_burst", "cpu_quota_burst",
                     "batch_cpu_limit", "batch_memory_limit")
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True)
class PodFigures:
    namespace: str
    name: str
    cpu: float | None  # cores; None = no figure this tick
    cap: float | None = None  # cores; only for pods this agent throttles
    memory: float | None = None  # working set, bytes


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """What the last tick saw and decided, in plain values."""

    usage: Mapping[str, float] = field(default_factory=dict)
    #: action type -> metric -> value
    waterlines: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    gaps: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: rule key ``policy/rule`` -> normal | triggered | restored
    rules: Mapping[str, str] = field(default_factory=dict)
    pods: tuple[PodFigures, ...] = ()
    throttled: int = 0
    #: kind -> number of objects rejected as invalid
    invalid_objects: Mapping[str, int] = field(default_factory=dict)
    #: CPU isolation class -> pods held in it now
    isolated: Mapping[str, int] = field(default_factory=dict)
    #: CPU isolation class -> whether this host's kernel offers it
    supported: Mapping[str, bool] = field(default_factory=dict)
    #: The batch capacity the node publishes (cpu: cores, memory: bytes); empty: none.
    batch_capacity: Mapping[str, float] = field(default_factory=dict)


class _SnapshotCollector(Collector):
    def __init__(self) -> None:
        self._snapshot: NodeSnapshot | None = None
        self._lock = threading.Lock()

    def set(self, snapshot: NodeSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def describe(self) -> list[Any]:
        return []  # rendered from a snapshot: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            snap = self._snapshot
        if snap is None:
            return
        usage = GaugeMetricFamily(
            "waterline_node_usage",
            "Node usage per registry metric, in the metric's unit (cores, bytes or percent).",
            labels=["metric"],
        )
        for metric, value in sorted(snap.usage.items()):
            usage.add_metric([metric], value)
        yield usage
        lines = GaugeMetricFamily(
            "waterline_node_waterline",
            "Waterline in force per action type and metric, in the metric's unit.",
            labels=["action_type", "metric"],
        )
        gaps = GaugeMetricFamily(
            "waterline_node_gap",
            "Gap to close per action type and metric (positive = acting), in the metric's unit.",
            labels=["action_type", "metric"],
        )
        for family, table in ((lines, snap.waterlines), (gaps, snap.gaps)):
            for action_type in sorted(table):
                for metric, value in sorted(table[action_type].items()):
                    family.add_metric([action_type, metric], value)
            yield family
        rules = GaugeMetricFamily(
            "waterline_rule_state",
            "1 for the state each policy rule is in, 0 for the others.",
            labels=["policy", "rule", "state"],
        )
        for key, status in sorted(snap.rules.items()):
            policy, _, rule = key.partition("/")
            for state in RULE_STATES:
                rules.add_metric([policy, rule, state], 1.0 if status == state else 0.0)
        yield rules
        yield GaugeMetricFamily(
            "waterline_throttled_pods", "Pods whose CPU this agent caps now.", value=snap.throttled
        )
        cpu = GaugeMetricFamily(
            "waterline_pod_cpu_usage_cores",
            "CPU used by each pod on the node over the last tick.",
            labels=["namespace", "pod"],
        )
        caps = GaugeMetricFamily(
            "waterline_pod_cpu_cap_cores",
            "CPU cap this agent enforces on a throttled pod.",
            labels=["namespace", "pod"],
        )
        memory = GaugeMetricFamily(
            "waterline_pod_memory_working_set_bytes",
            "Memory working set of each pod on the node (usage minus inactive file pages).",
            labels=["namespace", "pod"],
        )
        for pod in snap.pods:
            if pod.cpu is not None:
                cpu.add_metric([pod.namespace, pod.name], pod.cpu)
            if pod.cap is not None:
                caps.add_metric([pod.namespace, pod.name], pod.cap)
            if pod.memory is not None:
                memory.add_metric([pod.namespace, pod.name], pod.memory)
        yield cpu
        yield caps
        yield memory
        invalid = GaugeMetricFamily(
            "waterline_invalid_objects",
            "Objects (policies, actions, pods, ...) rejected as invalid, by kind.",
            labels=["kind"],
        )
        for kind, count in sorted(snap.invalid_objects.items()):
            invalid.add_metric([kind], count)
        yield invalid
        isolated = GaugeMetricFamily(
            "waterline_isolated_pods",
            "Pods this agent holds in each CPU isolation class (idle: cpu.idle on the pod's "
            "cgroup; burst: CFS burst on its cgroups; quotaBurst: its CFS quota raised above "
            "its CPU limit while the node is under its lines).",
            labels=["cpu_class"],
        )
        supported = GaugeMetricFamily(
            "waterline_cpu_isolation_supported",
            "1 when this host's kernel offers the CPU isolation class (cpu.idle: 5.15+; "
            "burst: 5.14+; quotaBurst: any), 0 where the policies' section for it is not acted on.",
            labels=["cpu_class"],
        )
        for cls in CPU_CLASSES:
            isolated.add_metric([cls], snap.isolated.get(cls, 0))
            if cls in snap.supported:
                supported.add_metric([cls], 1.0 if snap.supported[cls] else 0.0)
        yield isolated
        yield supported
        batch = GaugeMetricFamily(
            "waterline_batch_capacity",
            "The batch capacity this node publishes in its status (waterline.io/batch-cpu, "
            "waterline.io/batch-memory): cpu in cores, memory in bytes; absent where none is.",
            labels=["resource"],
        )
        for resource, amount in sorted(snap.batch_capacity.items()):
            batch.add_metric([resource], amount)
        yield batch


class AgentMetrics:
    """Every metric of the node agent, in its own registry (tests make as many as they like)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tick_duration = Histogram(
            "waterline_tick_duration_seconds",
            "Time one loop iteration took: collect, decide, act, publish.",
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self.ticks = Counter(
            "waterline_ticks", "Loop iterations by outcome (ok, failed).", ["outcome"], registry=r
        )
        self.actions = Counter(
            "waterline_actions",
            "Actions decided, by action (evict, throttle, restore-step: a cap raised, restore: "
            "the original quota back) and result.",
            ["action", "result"],
            registry=r,
        )
        self.rounds_limited = Counter(
            "waterline_eviction_rounds_limited",
            "Ticks whose eviction was stopped by a safety limit with the gap still open, "
            "by the limit reported (clusterBrake, maxPodsPerRound, evictionRateLimit).",
            ["limit"],
            registry=r,
        )
        for limit in EVICTION_LIMITS:  # every series exists from the start, at 0
            self.rounds_limited.labels(limit)
        self.isolation_changes = Counter(
            "waterline_isolation_changes",
            "Pods joining (marked) or leaving (released; lifted: for an in-place resize) a "
            "CPU isolation class, by class, change and result (applied, failed).",
            ["cpu_class", "change", "result"],
            registry=r,
        )
        self.collector_errors = Counter(
            "waterline_collector_errors",
            "Files or pods that could not be read, and failed stages, by source.",
            ["source"],
            registry=r,
        )
        self.caps_reverted = Counter(
            "waterline_caps_reverted",
            "Caps and CPU isolation marks this agent held that it found lifted in the kernel "
            "(a systemd daemon-reload re-applying a unit's own properties) and wrote back, by "
            "control (cpu_quota, cpu_idle, cpu_burst, cpu_quota_burst, batch_cpu_limit, "
            "batch_memory_limit).",
            ["control"],
            registry=r,
        )
        for control in REVERTED_CONTROLS:
            self.caps_reverted.labels(control)
        self.writes_through_systemd = Gauge(
            "waterline_cgroup_writes_through_systemd",
            "1 when caps and idle marks are set as systemd units' runtime properties (cgroup "
            "v2, the kubelet's systemd driver, systemd's bus reachable: a daemon-reload keeps "
            "them), 0 when they are written straight into the cgroup files.",
            registry=r,
        )
        self.last_success = Gauge(
            "waterline_last_successful_tick_timestamp_seconds",
            "Unix time of the end of the last tick that completed without error.",
            registry=r,
        )
        self._snapshot = _SnapshotCollector()
        r.register(self._snapshot)

    def publish(self, snapshot: NodeSnapshot) -> None:
        self._snapshot.set(snapshot)

    def render(self) -> bytes:
        return generate_latest(self.registry)
