"""The controller's Prometheus metrics, declared once, in their own registry (the node
agent's are in ``agent/metrics.py``); ``render`` serves them on /metrics.

Label values are bounded: outcomes, verdicts, phases, eviction results, move stages and the
engine keys of ``agent.cluster.registry``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class ControllerMetrics:
    """Grouped by what they tell: the loop, the engines' plans and acts, migration on a
    stock scheduler, and the cache work (the cluster brake, the policies' status)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._loop(self.registry)
        self._engines(self.registry)
        self._migration(self.registry)
        self._cache_work(self.registry)

    def _loop(self, r: CollectorRegistry) -> None:
        self.leader = Gauge(
            "waterline_controller_leader", "1 while this replica holds the lease.", registry=r
        )
        self.rounds = Counter(
            "waterline_controller_rounds",
            "Leader rounds by outcome (ok, failed, lost_lease).",
            ["outcome"],
            registry=r,
        )
        self.round_seconds = Histogram(
            "waterline_controller_round_duration_seconds",
            "Time one leader round took (snapshot, migrations, arbitration, planners).",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60),
            registry=r,
        )

    def _engines(self, r: CollectorRegistry) -> None:
        self.arbitration = Counter(
            "waterline_controller_arbitration_jobs",
            "Jobs per arbitration verdict (passed, waiting, failed).",
            ["verdict"],
            registry=r,
        )
        self.migrations = Counter(
            "waterline_controller_migration_transitions",
            "Migration job phase changes, by phase.",
            ["phase"],
            registry=r,
        )
        self.evictions = Counter(
            "waterline_controller_evictions",
            "Evictions by source (migration, queues, daemonset) and result.",
            ["source", "result"],
            registry=r,
        )
        self.planned = Gauge(
            "waterline_controller_planned",
            "Last plan size by planner (defrag migrations, DaemonSet victims, queue victims "
            "evicted this round: not a deferred reclaim's).",
            ["planner"],
            registry=r,
        )
        self.reclaims = Counter(
            "waterline_controller_reclaims",
            "Queue reclaims ended, by outcome: placed (the pending pod bound to the node its "
            "victims were chosen on), elsewhere, gone, expired (the room was not all free "
            "in time), unplaced (not bound after the hand-over).",
            ["outcome"],
            registry=r,
        )

    def _migration(self, r: CollectorRegistry) -> None:
        self.moves = Counter(
            "waterline_controller_moves",
            "Pod moves by stage: planned (defrag jobs created), started (jobs that passed "
            "arbitration), landed_on_target / landed_elsewhere (replacement running, on the "
            "node its placeholder held, or not).",
            ["stage"],
            registry=r,
        )
        self.nodes_freed = Counter(
            "waterline_controller_nodes_freed",
            "Defrag drains that ended with their source holding no pod that must move.",
            registry=r,
        )

    def _cache_work(self, r: CollectorRegistry) -> None:
        self.brake = Gauge(
            "waterline_cluster_brake",
            "1 while the cluster brake (ConfigMap waterline-brake) pauses the agents' evictions.",
            registry=r,
        )
        self.brake_window = Gauge(
            "waterline_cluster_brake_window",
            "What the brake decided on last round: agent evictions and evicting nodes in the "
            "last 60 s (leader only).",
            ["measure"],
            registry=r,
        )
        self.policy_status_writes = Counter(
            "waterline_controller_policy_status_writes",
            "Status writes on NodeQOSEnsurancePolicies and AvoidanceActions, by validity.",
            ["kind", "valid"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
