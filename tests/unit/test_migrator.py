"""The migration state machine: pure transitions on a fake clock, then the executor with a
recording writer over a snapshot (every phase and reason, TTL, paused, 429, 404)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from agent.cluster import migrator as mg
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.eviction import EvictionResult
from agent.model.objects import parse_pod
from agent.model.store import ObjectStore
from tests.unit.builders import NOW, node, pod

T0 = NOW  # the job's creationTimestamp


def job(mode: str = m.EVICT_DIRECTLY, phase: str = "", **spec: Any) -> m.PodMigrationJob:
    raw: dict[str, Any] = {
        "metadata": {"name": "j1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"podRef": {"namespace": "default", "name": "web-1"}, "mode": mode, **spec},
        "status": {"phase": phase} if phase else {},
    }
    return m.parse_pod_migration_job(raw)


POD = parse_pod(pod("web-1", node_name="n1", requests={"cpu": "1"}))


def world(at: float = 10.0, **kw: Any) -> mg.World:
    return mg.World(now=T0 + at, **{"pod": POD, **kw})


# -- pure transitions ------------------------------------------------------------------


def test_pending_job_waits_for_arbitration_and_terminal_jobs_do_nothing() -> None:
    pending = job(phase="Pending")
    step = mg.advance(pending, world())
    assert step is not None and step.phase == m.PENDING and not step.actions
    for phase in (m.SUCCEEDED, m.FAILED, m.ABORTED):
        assert mg.advance(job(phase=phase), world()) is None


def test_evict_directly_evicts_then_waits_for_replacement_then_succeeds() -> None:
    running = job(phase=m.RUNNING)
    step = mg.advance(running, world())
    assert step == mg.Step(m.RUNNING, m.REASON_EVICTING, "evicting pod default/web-1", (mg.EVICT,))
    after = mg.after_eviction(running, step, EvictionResult.EVICTED)
    assert (after.phase, after.reason) == (m.RUNNING, m.REASON_WAIT_REPLACEMENT)
    # pod gone, controller exists, no replacement yet: keep waiting
    waiting = mg.advance(running, world(pod=None, controller_exists=True))
    assert waiting is not None and (waiting.phase, waiting.reason) == (
        m.RUNNING,
        m.REASON_WAIT_REPLACEMENT,
    )
    # a terminating pod is as good as gone
    terminating = replace(POD, deletion_time=T0)
    assert mg.advance(running, world(pod=terminating, controller_exists=True)) == waiting
    done = mg.advance(running, world(pod=None, controller_exists=True, replacement_node="n2"))
    assert done is not None and (done.phase, done.reason, done.node_name) == (
        m.SUCCEEDED,
        m.REASON_COMPLETED,
        "n2",
    )
    assert not done.actions  # EvictDirectly has no reservation to complete


def test_pod_gone_and_controller_gone_succeeds_without_a_replacement() -> None:
    step = mg.advance(job(phase=m.RUNNING), world(pod=None, controller_exists=False))
    assert step is not None and step.phase == m.SUCCEEDED


@pytest.mark.parametrize(
    ("result", "phase", "reason"),
    [
        (EvictionResult.BLOCKED_BY_PDB, m.RUNNING, m.REASON_EVICTION_BLOCKED),  # 429
        (
            EvictionResult.FAILED,
            m.RUNNING,
            m.REASON_EVICTION_FAILED,
        ),  # 500, network, 429 throttling
        (EvictionResult.GONE, m.SUCCEEDED, m.REASON_COMPLETED),  # 404
        (EvictionResult.EVICTED, m.RUNNING, m.REASON_WAIT_REPLACEMENT),
    ],
)
def test_eviction_answers(result: EvictionResult, phase: str, reason: str) -> None:
    running = job(phase=m.RUNNING)
    step = mg.advance(running, world())
    assert step is not None
    after = mg.after_eviction(running, step, result, "budget web needs 2")
    assert (after.phase, after.reason) == (phase, reason)


def test_429_retries_next_round_while_the_pod_is_still_there() -> None:
    running = job(phase=m.RUNNING)
    first = mg.advance(running, world(at=10))
    assert first is not None
    blocked = mg.after_eviction(running, first, EvictionResult.BLOCKED_BY_PDB)
    later = replace(running, reason=blocked.reason, message=blocked.message)
    again = mg.advance(later, world(at=70))
    assert again is not None and mg.EVICT in again.actions


def test_ttl_default_five_minutes_from_creation() -> None:
    running = job(phase=m.RUNNING)
    before = mg.advance(running, world(at=299.9))
    assert before is not None and before.phase == m.RUNNING
    after = mg.advance(running, world(at=300))
    assert after is not None and (after.phase, after.reason) == (m.FAILED, m.REASON_TIMEOUT)
    assert not after.actions  # EvictDirectly holds nothing
    pending = mg.advance(job(phase="Pending"), world(at=301))
    assert pending is not None and pending.phase == m.FAILED  # stale in arbitration too


def test_custom_ttl_and_timeout_releases_the_reservation() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING, ttl="1m")
    step = mg.advance(running, world(at=60, reservation_phase=r.AVAILABLE, reservation_node="n2"))
    assert (
        step is not None
        and step.reason == m.REASON_TIMEOUT
        and step.actions == (mg.RELEASE_RESERVATION,)
    )
    never = job(phase=m.RUNNING, ttl="0s")
    step = mg.advance(never, world(at=10**6))
    assert step is not None and step.phase == m.RUNNING


def test_paused_stays_where_it_is_and_never_times_out() -> None:
    pending = job(phase="Pending", paused=True)
    step = mg.advance(pending, world(at=10**6))
    assert step is not None and (step.phase, step.reason, step.actions) == (
        m.PENDING,
        m.REASON_PAUSED,
        (),
    )
    running = job(phase=m.RUNNING, paused=True)
    step = mg.advance(running, world())
    assert step is not None and (step.phase, step.actions) == (m.RUNNING, ())


def test_abort_annotation_aborts_and_releases() -> None:
    step = mg.advance(job(mode=m.RESERVATION_FIRST, phase=m.RUNNING), world(abort_requested=True))
    assert step is not None and (step.phase, step.reason) == (m.ABORTED, m.REASON_ABORTED_BY_USER)
    assert step.actions == (mg.RELEASE_RESERVATION,)


def test_reservation_first_walks_create_schedule_evict_wait_complete() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    create = mg.advance(running, world())
    assert create is not None and (create.reason, create.actions) == (
        m.REASON_WAIT_RESERVATION,
        (mg.CREATE_RESERVATION,),
    )
    schedule = mg.advance(running, world(reservation_phase=r.PENDING))
    assert schedule is not None and schedule.actions == (mg.SCHEDULE_RESERVATION,)
    evict = mg.advance(running, world(reservation_phase=r.AVAILABLE, reservation_node="n2"))
    assert evict is not None and (evict.reason, evict.actions, evict.node_name) == (
        m.REASON_EVICTING,
        (mg.EVICT,),
        "n2",
    )
    gone = world(
        pod=None, controller_exists=True, reservation_phase=r.AVAILABLE, reservation_node="n2"
    )
    wait = mg.advance(running, gone)
    assert wait is not None and wait.reason == m.REASON_WAIT_REPLACEMENT
    done = mg.advance(running, replace(gone, replacement_node="n2"))
    assert done is not None and (done.phase, done.actions) == (
        m.SUCCEEDED,
        (mg.COMPLETE_RESERVATION,),
    )
    # a 404 on the eviction completes the reservation too
    after = mg.after_eviction(running, evict, EvictionResult.GONE)
    assert after.actions == (mg.COMPLETE_RESERVATION,)


def test_reservation_lost_or_on_the_same_node() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    for phase in (r.EXPIRED, r.FAILED):
        step = mg.advance(running, world(reservation_phase=phase))
        assert step is not None and (step.phase, step.reason) == (
            m.FAILED,
            m.REASON_MISSING_RESERVATION,
        )
    same = mg.advance(running, world(reservation_phase=r.AVAILABLE, reservation_node="n1"))
    assert same is not None and (same.phase, same.reason) == (
        m.ABORTED,
        m.REASON_RESERVATION_UNSCHEDULABLE,
    )


# -- the executor over a snapshot --------------------------------------------------------


class Recorder:
    def __init__(self, evict_answer: EvictionResult = EvictionResult.EVICTED) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        self.evict_answer = evict_answer

    def job_status(self, name: str, status: Mapping[str, Any]) -> bool:
        self.calls.append(("job_status", name, dict(status)))
        return True

    def job_annotations(self, name: str, annotations: Mapping[str, str]) -> bool:
        self.calls.append(("job_annotations", name, dict(annotations)))
        return True

    def create_reservation(self, body: Mapping[str, Any]) -> bool:
        self.calls.append(("create_reservation", body["metadata"]["name"], body))
        return True

    def reservation_status(self, name: str, status: Mapping[str, Any]) -> bool:
        self.calls.append(("reservation_status", name, dict(status)))
        return True

    def delete_reservation(self, name: str) -> bool:
        self.calls.append(("delete_reservation", name, None))
        return True

    def evict(self, p: Any) -> tuple[EvictionResult, str] | None:
        self.calls.append(("evict", p.key, None))
        return self.evict_answer, ""

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


def cluster(*extra: dict[str, Any]) -> ObjectStore:
    objects = [
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        node("n3", cpu="4"),
        pod("big", node_name="n3", requests={"cpu": "3.5"}),
        pod("web-1", node_name="n1", requests={"cpu": "1"}),
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "web-1-owner", "namespace": "default", "uid": "uid-web-1-owner"},
            "spec": {"replicas": 2},
        },
        *extra,
    ]
    return ObjectStore.from_dicts(objects)


def test_executor_start_records_then_evicts_directly() -> None:
    rec = Recorder()
    view = mg.ClusterView.build(cluster())
    pending = job(phase="Pending")
    step = mg.MigrationExecutor(rec).start(pending, view.pods["default/web-1"], view, T0 + 5)
    assert rec.kinds() == ["job_annotations", "job_status", "evict", "job_status"]
    assert rec.calls[0][2][mg.POD_UID_ANNOTATION] == "uid-web-1"
    assert rec.calls[0][2][mg.OWNER_ANNOTATION] == "ReplicaSet/web-1-owner/uid-web-1-owner"
    assert rec.calls[1][2]["phase"] == m.RUNNING
    assert step is not None and step.reason == m.REASON_WAIT_REPLACEMENT


def test_executor_waits_for_a_replacement_of_the_recorded_owner() -> None:
    running = job(phase=m.RUNNING)
    annotations = mg.Tracked(
        "uid-web-1", "ReplicaSet", "web-1-owner", "uid-web-1-owner", "n1"
    ).annotations()
    base = [node("n1"), node("n2")]
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-1-owner", "namespace": "default", "uid": "uid-web-1-owner"},
    }
    rec = Recorder()
    no_pod = mg.ClusterView.build(ObjectStore.from_dicts([*base, rs]))
    step = mg.MigrationExecutor(rec).run(running, annotations, no_pod, T0 + 20)
    assert step is not None and step.reason == m.REASON_WAIT_REPLACEMENT
    replacement = pod("web-1", node_name="n2")  # same name, new uid (a StatefulSet's way)
    replacement["metadata"]["uid"] = "uid-web-1-new"
    replacement["metadata"]["ownerReferences"][0]["uid"] = "uid-web-1-owner"
    view = mg.ClusterView.build(ObjectStore.from_dicts([*base, rs, replacement]))
    step = mg.MigrationExecutor(rec).run(running, annotations, view, T0 + 30)
    assert step is not None and (step.phase, step.node_name) == (m.SUCCEEDED, "n2")
    assert rec.calls[-1] == (
        "job_status",
        "j1",
        {
            "phase": m.SUCCEEDED,
            "reason": m.REASON_COMPLETED,
            "message": "pod default/web-1 moved to n2",
            "nodeName": "n2",
        },
    )


def test_executor_reservation_first_end_to_end_on_snapshots() -> None:
    rec = Recorder()
    ex = mg.MigrationExecutor(rec)
    view = mg.ClusterView.build(cluster())
    step = ex.start(
        job(mode=m.RESERVATION_FIRST, phase="Pending"), view.pods["default/web-1"], view, T0 + 1
    )
    assert step is not None and "create_reservation" in rec.kinds() and "evict" not in rec.kinds()
    body = next(c[2] for c in rec.calls if c[0] == "create_reservation")
    assert body["spec"]["owners"] == [
        {
            "controller": {
                "kind": "ReplicaSet",
                "name": "web-1-owner",
                "uid": "uid-web-1-owner",
                "namespace": "default",
            }
        }
    ]
    assert r.parse_reservation(body).owns(view.pods["default/web-1"])  # the CR parses
    annotations = next(c[2] for c in rec.calls if c[0] == "job_annotations")
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    # next round: the reservation exists, Pending -> the stand-in scheduler picks n2
    # (n3 is full, n1 is the pod's own node)
    created = {
        **body,
        "metadata": {**body["metadata"], "creationTimestamp": "2026-01-01T00:00:01Z"},
    }
    view = mg.ClusterView.build(cluster(created))
    rec.calls.clear()
    step = ex.run(running, annotations, view, T0 + 60)
    assert rec.calls[0][0] == "reservation_status" and rec.calls[0][2]["nodeName"] == "n2"
    assert step is not None and step.node_name == "n2"
    # then: Available -> evict
    available = {
        **created,
        "status": {"phase": "Available", "nodeName": "n2", "allocatable": {"cpu": "1"}},
    }
    view = mg.ClusterView.build(cluster(available))
    rec.calls.clear()
    step = ex.run(running, annotations, view, T0 + 120)
    assert rec.kinds() == ["evict", "job_status"]
    assert step is not None and step.reason == m.REASON_WAIT_REPLACEMENT


def test_executor_unschedulable_reservation_keeps_running() -> None:
    rec = Recorder()
    huge = pod("web-1", node_name="n1", requests={"cpu": "16"})
    store = ObjectStore.from_dicts([node("n1", cpu="4"), node("n2", cpu="4"), huge])
    view = mg.ClusterView.build(store)
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    body = mg.reservation_body(
        running, view.pods["default/web-1"], mg.tracked_from_pod(view.pods["default/web-1"])
    )
    body["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01Z"
    view = mg.ClusterView.build(
        ObjectStore.from_dicts([node("n1", cpu="4"), node("n2", cpu="4"), huge, body])
    )
    step = mg.MigrationExecutor(rec).run(running, {}, view, T0 + 30)
    assert step is not None and (step.phase, step.reason) == (
        m.RUNNING,
        m.REASON_RESERVATION_UNSCHEDULABLE,
    )
    assert "reservation_status" not in rec.kinds()


def test_unchanged_status_is_not_rewritten() -> None:
    rec = Recorder()
    view = mg.ClusterView.build(cluster())
    paused = job(phase="Pending", paused=True)
    paused = replace(paused, reason=m.REASON_PAUSED, message="spec.paused is true")
    mg.MigrationExecutor(rec).run(paused, {}, view, T0 + 5)
    assert rec.calls == []


def test_siblings_running_before_the_start_are_not_replacements() -> None:
    started = T0 + 100
    annotations = mg.Tracked(
        "uid-web-1", "ReplicaSet", "web-1-owner", "uid-web-1-owner", "n1", started
    ).annotations()
    assert mg.tracked_from_annotations(annotations) == mg.Tracked(
        "uid-web-1", "ReplicaSet", "web-1-owner", "uid-web-1-owner", "n1", started
    )
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-1-owner", "namespace": "default", "uid": "uid-web-1-owner"},
    }

    def sibling(name: str, created: str) -> dict[str, Any]:
        raw = pod(name, node_name="n2", started=created)
        raw["metadata"]["ownerReferences"][0]["uid"] = "uid-web-1-owner"
        return raw

    old = sibling("web-2", "2026-01-01T00:00:00Z")  # T0: long before the start
    view = mg.ClusterView.build(ObjectStore.from_dicts([node("n1"), node("n2"), rs, old]))
    world, _ = mg.observe(job(phase=m.RUNNING), annotations, view, started + 30)
    assert world.pod is None and world.controller_exists and world.replacement_node == ""
    new = sibling("web-1-abcde", "2026-01-01T00:01:41Z")  # T0 + 101
    view = mg.ClusterView.build(ObjectStore.from_dicts([node("n1"), node("n2"), rs, old, new]))
    world, _ = mg.observe(job(phase=m.RUNNING), annotations, view, started + 30)
    assert world.replacement_node == "n2"
