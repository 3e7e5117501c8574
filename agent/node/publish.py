"""A tick's outcome, published: the Prometheus snapshot and counters, the health beats."""

from __future__ import annotations

from agent.metrics import AgentMetrics, NodeSnapshot, PodFigures
from agent.node.loop import TickOutcome, action_result
from agent.serving import Health
from engine.decide import TickReport

#: The result of an eviction whose answer came after its tick (counted ``failed`` there,
#: for want of an answer) once the watch shows the pod terminating.
LATE_EVICTION_RESULT = "evicted-late"


def snapshot_of(outcome: TickOutcome) -> NodeSnapshot:
    report = outcome.report
    invalid = dict(outcome.invalid)
    if outcome.policy_errors:
        invalid["NodeQOSEnsurancePolicy/AvoidanceAction"] = len(outcome.policy_errors)
    pods = []
    for pod in sorted(outcome.pods, key=lambda p: p.key):
        usage = outcome.usage.get(pod.key)
        pods.append(
            PodFigures(
                pod.namespace,
                pod.name,
                usage.cpu if usage is not None else None,
                outcome.caps.get(pod.key),
                usage.memory if usage is not None else None,
            )
        )
    return NodeSnapshot(
        usage=dict(report.usage) if report else {},
        waterlines=report.waterlines if report else {},
        gaps=report.gaps if report else {},
        rules=dict(report.rules) if report else {},
        pods=tuple(pods),
        throttled=len(outcome.caps),
        invalid_objects=invalid,
        isolated={cls: len(pods) for cls, pods in outcome.isolated.items()},
        supported={"idle": report.support.idle, "burst": report.support.burst,
                   "quotaBurst": report.support.quota} if report else {},
        batch_capacity=_batch(report),
    )


def _batch(report: TickReport | None) -> dict[str, float]:
    published = report.batch_capacity if report is not None else None
    return {} if published is None else {"cpu": published.cpu, "memory": published.memory}


class MetricsPublisher:
    """Feeds every tick into the metrics and the health checks."""

    def __init__(self, metrics: AgentMetrics, health: Health) -> None:
        self.metrics = metrics
        self.health = health

    def __call__(self, outcome: TickOutcome) -> None:
        m = self.metrics
        m.tick_duration.observe(outcome.duration)
        m.ticks.labels("ok" if outcome.ok else "failed").inc()
        for source, count in outcome.errors.items():
            m.collector_errors.labels(source).inc(count)
        if outcome.report is not None:
            for record in outcome.report.actions:
                m.actions.labels(record.label, action_result(record, outcome)).inc()
            for _ in outcome.report.late_evictions:
                m.actions.labels("evict", LATE_EVICTION_RESULT).inc()
            if outcome.report.limited is not None:
                m.rounds_limited.labels(outcome.report.limited).inc()
            for change in outcome.report.isolation:
                result = "dry-run" if outcome.mode == "dry-run" else change.result or "applied"
                m.isolation_changes.labels(change.kind, change.change, result).inc()
        if outcome.ok:
            m.last_success.set(outcome.at)
        # On a failed tick keep the last good snapshot: the gauges age, the counters tell.
        if outcome.report is not None:
            m.publish(snapshot_of(outcome))
        self.health.beat(outcome.ok)
