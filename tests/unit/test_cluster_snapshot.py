"""The controller's custom resources are parsed once, where they enter the watch cache: an
invalid one is named, logged once and left out, the others reach the engines as records."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from agent.cluster.resources import MIGRATION_JOBS, PRIORITY_CLASSES, QUEUES, RESERVATIONS, snapshot
from agent.kube.cache import Cache
from agent.model.migration import PodMigrationJob


def job(name: str, namespace: str | None = "default", **meta: Any) -> dict[str, Any]:
    ref = {"name": "web-1"} if namespace is None else {"namespace": namespace, "name": "web-1"}
    return {
        "kind": "PodMigrationJob",
        "metadata": {"name": name, **meta},
        "spec": {"podRef": ref},
    }


def reservation(name: str, owners: list[Any]) -> dict[str, Any]:
    spec = {"template": {"spec": {"containers": [{"name": "c"}]}}, "owners": owners}
    return {"kind": "Reservation", "metadata": {"name": name}, "spec": spec}


def test_invalid_custom_resources_are_left_out_once_and_the_rest_kept() -> None:
    cache = Cache()
    with capture_logs() as logs:
        for _ in range(2):  # a relist with the same error logs nothing new
            cache.replace(
                MIGRATION_JOBS.kind,
                [job("ok", annotations={"qos.waterline.io/abort": "true"}), job("bad", None)],
            )
            cache.replace(
                RESERVATIONS.kind,
                [reservation("r", [{"object": {"name": "web-1"}}]), reservation("no-owners", [])],
            )
            cache.replace(
                QUEUES.kind, [{"kind": "Queue", "metadata": {"name": "q"}, "spec": {"weight": 0}}]
            )
            cache.replace(
                PRIORITY_CLASSES.kind,
                [
                    {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
                    {"kind": "PriorityClass", "metadata": {"name": "odd"}, "value": "1"},
                ],
            )
    store = snapshot(cache)
    assert [j.name for j in store.migration_jobs] == ["ok"]
    assert isinstance(store.migration_jobs[0], PodMigrationJob)
    assert store.migration_jobs[0].annotations == {"qos.waterline.io/abort": "true"}
    assert [r.name for r in store.reservations] == ["r"]
    assert store.queues == []
    assert store.priority_classes == {"high": 1000}
    assert cache.invalid(MIGRATION_JOBS.kind) == {
        "bad": "PodMigrationJob bad: spec.podRef.namespace must be set, got ''"
    }
    assert cache.invalid(QUEUES.kind) == {"q": "Queue q: spec.weight must be >= 1, got 0"}
    warned = sorted(e["key"] for e in logs if e["log_level"] == "warning")
    assert warned == ["bad", "no-owners", "odd", "q"]
