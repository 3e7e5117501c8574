"""The migration state machine: pure transitions on a fake clock, then the executor with a
recording writer over a snapshot (every phase and reason, TTL, paused, 429, 404; the
placeholder's life, the drain taint, the landing, the Events)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent.cluster import migrator as mg
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.eviction import EvictionResult
from agent.model.objects import parse_pod
from agent.model.store import ObjectStore
from tests.builders import NOW, node, pod
from tests.unit.migration_fakes import Recorder, job, placeholder, reservation

T0 = NOW  # the job's creationTimestamp


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


HOLDER = parse_pod(placeholder(node_name="n2", phase="Running"))


def test_abort_annotation_aborts_and_releases_reservation_and_placeholder() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    step = mg.advance(
        running,
        world(abort_requested=True, reservation_phase=r.PENDING, placeholder=HOLDER),
    )
    assert step is not None and (step.phase, step.reason) == (m.ABORTED, m.REASON_ABORTED_BY_USER)
    assert step.actions == (mg.RELEASE_RESERVATION, mg.REMOVE_PLACEHOLDER)
    nothing_held = mg.advance(running, world(abort_requested=True))
    assert nothing_held is not None and nothing_held.actions == ()


def test_reservation_first_walks_reserve_place_evict_release_land() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    create = mg.advance(running, world())
    assert create is not None and (create.reason, create.actions) == (
        m.REASON_WAIT_RESERVATION,
        (mg.CREATE_RESERVATION,),
    )
    place = mg.advance(running, world(reservation_phase=r.PENDING))
    assert place is not None and place.actions == (mg.PLACE_RESERVATION,)
    # the placeholder is bound but the kubelet has not started it: wait, do nothing
    pending = replace(HOLDER, phase="Pending")
    wait = mg.advance(running, world(reservation_phase=r.PENDING, placeholder=pending))
    assert wait is not None and wait.actions == ()
    assert wait.message == "waiting for the placeholder on n2 to run"
    # it runs: the reservation is Available, then the eviction, in one step
    evict = mg.advance(running, world(reservation_phase=r.PENDING, placeholder=HOLDER))
    assert evict is not None and (evict.reason, evict.actions) == (
        m.REASON_EVICTING,
        (mg.MARK_AVAILABLE, mg.EVICT),
    )
    assert (evict.node_name, evict.target_node) == ("n2", "n2")
    available = mg.advance(running, world(reservation_phase=r.AVAILABLE, placeholder=HOLDER))
    assert available is not None and available.actions == (mg.EVICT,)
    # evicted: the placeholder holds the room until a replacement appears
    on_target = replace(running, node_name="n2", target_node="n2")
    gone = world(
        pod=None, controller_exists=True, reservation_phase=r.AVAILABLE, placeholder=HOLDER
    )
    wait = mg.advance(on_target, gone)
    assert wait is not None and (wait.reason, wait.actions) == (m.REASON_WAIT_REPLACEMENT, ())
    appeared = mg.advance(on_target, replace(gone, replacement_seen=True))
    assert appeared is not None and appeared.actions == (mg.REMOVE_PLACEHOLDER,)
    assert appeared.reason == m.REASON_WAIT_REPLACEMENT and appeared.target_node == "n2"
    # it runs on the target: done, landed recorded
    landed = replace(gone, placeholder=None, replacement_seen=True, replacement_node="n2")
    done = mg.advance(on_target, landed)
    assert done is not None and (done.phase, done.actions) == (
        m.SUCCEEDED,
        (mg.COMPLETE_RESERVATION,),
    )
    assert (done.landed_node, done.target_node, done.node_name) == ("n2", "n2", "n2")
    # or elsewhere, the placeholder still there: it goes too
    elsewhere = mg.advance(on_target, replace(gone, replacement_seen=True, replacement_node="n5"))
    assert elsewhere is not None and elsewhere.actions == (
        mg.COMPLETE_RESERVATION,
        mg.REMOVE_PLACEHOLDER,
    )
    assert (elsewhere.landed_node, elsewhere.target_node) == ("n5", "n2")
    # a 404 on the eviction completes the reservation and removes the placeholder
    after = mg.after_eviction(running, evict, EvictionResult.GONE)
    assert after.actions == (mg.COMPLETE_RESERVATION, mg.REMOVE_PLACEHOLDER)


def test_a_drains_job_taints_its_source_before_it_evicts() -> None:
    drain = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING, created_by="defrag")
    step = mg.advance(drain, world(reservation_phase=r.AVAILABLE, placeholder=HOLDER))
    assert step is not None and step.actions == (mg.TAINT_SOURCE, mg.EVICT)
    direct = job(phase=m.RUNNING, created_by="defrag")
    step = mg.advance(direct, world())
    assert step is not None and step.actions == (mg.TAINT_SOURCE, mg.EVICT)


def test_a_failed_placeholder_is_removed_and_placed_again() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    refused = replace(HOLDER, phase="Failed")  # the kubelet refused it (OutOfcpu)
    step = mg.advance(running, world(reservation_phase=r.PENDING, placeholder=refused))
    assert step is not None and (step.phase, step.actions) == (m.RUNNING, (mg.REMOVE_PLACEHOLDER,))
    # the scheduler finds no room on the target (it filled up since it was chosen)
    no_room = replace(HOLDER, node_name="", phase="Pending", unschedulable="0/3 nodes are available")
    step = mg.advance(
        running, world(reservation_phase=r.PENDING, reservation_node="n2", placeholder=no_room)
    )
    assert step is not None and (step.phase, step.actions) == (m.RUNNING, (mg.REMOVE_PLACEHOLDER,))
    assert step.message == (
        "the scheduler cannot place the placeholder on n2 (0/3 nodes are available); "
        "placing it again"
    )
    unbound = replace(no_room, unschedulable="")  # not tried yet: it waits
    step = mg.advance(
        running, world(reservation_phase=r.PENDING, reservation_node="n2", placeholder=unbound)
    )
    assert step is not None and step.actions == ()
    assert step.message == "waiting for the placeholder on n2 to run"
    going = replace(HOLDER, deletion_time=T0)
    step = mg.advance(running, world(reservation_phase=r.PENDING, placeholder=going))
    assert step is not None and step.actions == ()
    step = mg.advance(running, world(reservation_phase=r.PENDING))
    assert step is not None and step.actions == (mg.PLACE_RESERVATION,)


def test_reservation_lost_or_on_the_same_node() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    for phase in (r.EXPIRED, r.FAILED):
        step = mg.advance(running, world(reservation_phase=phase, placeholder=HOLDER))
        assert step is not None and (step.phase, step.reason) == (
            m.FAILED,
            m.REASON_MISSING_RESERVATION,
        )
        assert step.actions == (mg.RELEASE_RESERVATION, mg.REMOVE_PLACEHOLDER)
    same = mg.advance(running, world(reservation_phase=r.AVAILABLE, reservation_node="n1"))
    assert same is not None and (same.phase, same.reason) == (
        m.ABORTED,
        m.REASON_RESERVATION_UNSCHEDULABLE,
    )
    on_own_node = replace(HOLDER, node_name="n1")
    same = mg.advance(running, world(reservation_phase=r.PENDING, placeholder=on_own_node))
    assert same is not None and same.phase == m.ABORTED
    assert same.actions == (mg.RELEASE_RESERVATION, mg.REMOVE_PLACEHOLDER)


def test_a_pod_that_keeps_data_on_its_node_fails_before_any_eviction() -> None:
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)
    step = mg.advance(
        running,
        world(storage_reason='LocalStorage emptyDir "cache"', reservation_phase=r.PENDING),
    )
    assert step is not None and (step.phase, step.reason) == (
        m.FAILED,
        m.REASON_FORBIDDEN_MIGRATE_POD,
    )
    assert 'LocalStorage emptyDir "cache"' in step.message and "evictable" in step.message
    assert step.actions == (mg.RELEASE_RESERVATION,)


# -- the executor over a snapshot --------------------------------------------------------


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
    # One phase change (one MigrationStarted Event, one count); the eviction's status is a
    # step within the phase, told by the migrator's own step Event.
    assert [(phase, moved) for _, phase, moved in rec.transitions] == [(m.RUNNING, True), (m.RUNNING, False)]
    # The start is the writer's MigrationStarted on the job: no second "Started" beside it.
    assert [e[2] for e in rec.about(m.KIND)] == [m.REASON_WAIT_REPLACEMENT]
    assert [e[2] for e in rec.about("Pod")] == ["Started", m.REASON_WAIT_REPLACEMENT]


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
    status = rec.calls[-1][2]
    assert {k: status[k] for k in ("phase", "reason", "message", "nodeName", "landedNode")} == {
        "phase": m.SUCCEEDED,
        "reason": m.REASON_COMPLETED,
        "message": "pod default/web-1 moved to n2",
        "nodeName": "n2",
        "landedNode": "n2",
    }
    # an EvictDirectly move has no target: where it landed is known, not whether it is right
    assert status["targetNode"] is None
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        (m.CONDITION_LANDED, "Unknown", m.REASON_NO_TARGET)
    ]


def test_executor_reservation_first_end_to_end_on_snapshots() -> None:
    rec = events = Recorder()
    ex = mg.MigrationExecutor(rec)
    view = mg.ClusterView.build(cluster())
    step = ex.start(
        job(mode=m.RESERVATION_FIRST, phase="Pending"), view.pods["default/web-1"], view, T0 + 1
    )
    assert step is not None and "create_reservation" in rec.kinds() and "evict" not in rec.kinds()
    body = rec.of("create_reservation")[0][2]
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
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-job-j1"  # gone with its job
    assert r.parse_reservation(body).owns(view.pods["default/web-1"])  # the CR parses
    annotations = rec.of("job_annotations")[0][2]
    running = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING)

    # next round: the reservation exists, Pending: its placeholder goes to n2 (n3 is full,
    # n1 is the pod's own node), below the pod's priority, owned by the reservation
    view = mg.ClusterView.build(cluster(reservation()))
    rec.calls.clear()
    step = ex.run(running, annotations, view, T0 + 60)
    assert rec.kinds() == [
        "create_priority_class",
        "create_placeholder",
        "reservation_status",
        "job_status",
    ]
    pc = rec.of("create_priority_class")[0][2]
    assert (pc["metadata"]["name"], pc["value"], pc["preemptionPolicy"]) == (
        "waterline-reservation--1",
        -1,
        "Never",
    )
    holder = rec.of("create_placeholder")[0][2]
    assert holder["metadata"]["namespace"] == "waterline-system"
    assert holder["metadata"]["labels"]["qos.waterline.io/reservation"] == "pmj-j1"
    assert holder["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "qos.waterline.io/v1alpha1",
            "kind": "Reservation",
            "name": "pmj-j1",
            "uid": "uid-res",
            "controller": True,
        }
    ]
    spec = holder["spec"]
    assert "nodeName" not in spec  # the scheduler binds it, to n2 only
    assert spec["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}  # fmt: skip
    assert (mg.target_of(holder), spec["priorityClassName"], spec["priority"]) == (
        "n2",
        "waterline-reservation--1",
        -1,
    )
    assert spec["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "1000m"}}
    assert rec.of("reservation_status")[0][2]["nodeName"] == "n2"
    assert step is not None and (step.reason, step.node_name) == (m.REASON_WAIT_RESERVATION, "n2")

    # the placeholder is bound, not running yet: nothing to do
    running = replace(running, reason=step.reason, message=step.message, node_name="n2")
    view = mg.ClusterView.build(
        cluster(reservation("j1", r.PENDING, "n2"), placeholder(phase="Pending"))
    )
    rec.calls.clear()
    wait = ex.run(running, annotations, view, T0 + 90)
    assert wait is not None and wait.actions == () and rec.calls == []  # nothing changed

    # it runs: Available, then the eviction
    view = mg.ClusterView.build(cluster(reservation("j1", r.PENDING, "n2"), placeholder()))
    rec.calls.clear()
    step = ex.run(running, annotations, view, T0 + 120)
    assert rec.kinds() == ["reservation_status", "evict", "job_status"]
    available = rec.of("reservation_status")[0][2]
    assert (available["phase"], available["nodeName"], available["placeholder"]["name"]) == (
        "Available",
        "n2",
        "placeholder-pmj-j1",
    )
    assert step is not None and (step.reason, step.target_node) == (m.REASON_WAIT_REPLACEMENT, "n2")
    assert rec.of("job_status")[0][2]["targetNode"] == "n2"
    # an Event on the job, the pod and the node of each step
    assert {e[0] for e in events.recorded if e[2] == m.REASON_WAIT_REPLACEMENT} == {
        "PodMigrationJob/j1",
        "Pod/web-1",
        "Node/n1",
    }


def test_executor_removes_the_placeholder_when_the_replacement_appears() -> None:
    rec = events = Recorder()
    ex = mg.MigrationExecutor(rec)
    started = T0 + 100
    annotations = mg.Tracked(
        "uid-web-1", "ReplicaSet", "web-1-owner", "uid-web-1-owner", "n1", started
    ).annotations()
    running = job(
        mode=m.RESERVATION_FIRST,
        phase=m.RUNNING,
        status={"reason": m.REASON_WAIT_REPLACEMENT, "nodeName": "n2", "targetNode": "n2"},
    )
    replacement = pod("web-1-x2", node_name="n5", started="2026-01-01T00:02:00Z")
    replacement["metadata"]["ownerReferences"][0]["uid"] = "uid-web-1-owner"
    replacement["status"]["phase"] = "Pending"  # appeared, not yet scheduled
    replacement["spec"].pop("nodeName")
    objects = [
        node("n1"),
        node("n2"),
        node("n5"),
        rs_object(),
        reservation("j1", r.AVAILABLE, "n2"),
    ]
    view = mg.ClusterView.build(ObjectStore.from_dicts([*objects, placeholder(), replacement]))
    step = ex.run(running, annotations, view, started + 30)
    assert rec.kinds() == ["delete_placeholder", "job_status"]
    assert rec.calls[0][1:] == ("waterline-system/placeholder-pmj-j1", "uid-placeholder-j1")
    assert step is not None and step.phase == m.RUNNING

    # the replacement runs on n5, not the target: done, landed elsewhere
    replacement["spec"]["nodeName"], replacement["status"]["phase"] = "n5", "Running"
    view = mg.ClusterView.build(ObjectStore.from_dicts([*objects, replacement]))
    rec.calls.clear()
    step = ex.run(replace(running, message=step.message), annotations, view, started + 60)
    assert rec.kinds() == ["reservation_status", "job_status"]
    status = rec.of("job_status")[0][2]
    assert (status["phase"], status["landedNode"], status["targetNode"]) == (
        m.SUCCEEDED,
        "n5",
        "n2",
    )
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        (m.CONDITION_LANDED, "False", m.REASON_LANDED_ELSEWHERE)
    ]
    assert ("Node/n5", "Normal", m.REASON_COMPLETED) in [e[:3] for e in events.recorded]


def rs_object() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web-1-owner", "namespace": "default", "uid": "uid-web-1-owner"},
    }


def test_a_rounds_status_is_written_only_over_the_version_it_was_decided_on() -> None:
    """A snapshot that does not show the controller's own last write yet (its watch lags)
    must not write the same step again: the status write carries the job's
    resourceVersion from the snapshot (the server refuses it with 409 if the job moved).
    Right after the start, the job changed since the snapshot: no precondition."""
    view = mg.ClusterView.build(cluster())
    rec = Recorder()
    pending = replace(job(mode=m.RESERVATION_FIRST, phase="Pending"), resource_version="41")
    mg.MigrationExecutor(rec).start(pending, view.pods["default/web-1"], view, T0 + 1)
    assert rec.versions == [("j1", ""), ("j1", "")]  # Started, then its first step
    running = replace(pending, phase=m.RUNNING, reason="Started", resource_version="42")
    rec = Recorder()
    mg.MigrationExecutor(rec).run(running, {}, view, T0 + 2)
    assert rec.versions == [("j1", "42")]


def test_executor_taints_a_drains_source_and_never_evicts_without_the_taint() -> None:
    drain = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING, created_by="defrag")
    view = mg.ClusterView.build(cluster(reservation("j1", r.AVAILABLE, "n2"), placeholder()))
    rec = Recorder()
    step = mg.MigrationExecutor(rec).run(drain, {}, view, T0 + 60)
    assert rec.kinds() == ["node_taint", "evict", "job_status"]
    assert rec.calls[0][1:] == ("n1", ("qos.waterline.io/draining", "NoSchedule", True))
    assert step is not None and step.reason == m.REASON_WAIT_REPLACEMENT
    refused = Recorder(refuse=("node_taint",))
    step = mg.MigrationExecutor(refused).run(drain, {}, view, T0 + 60)
    assert refused.kinds() == ["node_taint", "job_status"]
    assert step is not None and (step.phase, step.reason) == (m.RUNNING, m.REASON_TAINT_FAILED)


def test_a_plans_first_eviction_taints_its_other_sources_before_it_evicts() -> None:
    """Tainted only by the round's cleanup, the plan's other sources were the emptiest
    nodes meanwhile, and a real kube-scheduler sent the first replacements there
    (bench/defrag_real.py). A source of another plan waits for its own drain."""

    def stamped(name: str, planned: str) -> dict[str, Any]:
        raw = node(name, cpu="4")
        raw["metadata"]["annotations"] = {"qos.waterline.io/last-defrag-time": planned}
        return raw

    plan_a, plan_b = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
    store = ObjectStore.from_dicts([
        stamped("n1", plan_a), node("n2", cpu="4"), stamped("n4", plan_a), stamped("n5", plan_b),
        stamped("n6", plan_a),  # a source of the plan with nothing to move
        pod("web-1", node_name="n1"), pod("web-2", node_name="n4"), pod("web-3", node_name="n5"),
    ])  # fmt: skip
    first = job(phase=m.RUNNING, created_by="defrag")
    store.migration_jobs = [
        first,
        job(phase="Pending", name="j2", pod_name="web-2", created_by="defrag"),
        job(phase="Pending", name="j3", pod_name="web-3", created_by="defrag"),
    ]
    view = mg.ClusterView.build(store)
    rec = Recorder()
    ex = mg.MigrationExecutor(rec)
    ex.run(first, {}, view, T0 + 60)
    assert [(c[0], c[1]) for c in rec.calls[:4]] == [
        ("node_taint", "n1"), ("node_taint", "n4"), ("node_taint", "n6"), ("evict", "default/web-1"),
    ]  # fmt: skip
    assert ex.reconcile(store.migration_jobs, view, T0 + 60).taint == ()  # none asked twice
    refused = Recorder(refuse=("node_taint",))
    step = mg.MigrationExecutor(refused).run(first, {}, view, T0 + 60)
    assert "evict" not in refused.kinds()
    assert step is not None and step.reason == m.REASON_TAINT_FAILED


def test_two_jobs_of_one_round_do_not_take_the_same_gap() -> None:
    """n2 has room for one 1-CPU pod: the second job's placeholder goes elsewhere."""
    objects = [
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        node("n3", cpu="4"),
        pod("fill-2", node_name="n2", requests={"cpu": "2.5"}),
        pod("fill-3", node_name="n3", requests={"cpu": "2"}),
        pod("web-1", node_name="n1", requests={"cpu": "1"}),
        pod("web-2", node_name="n1", requests={"cpu": "1"}),
        reservation("j1"),
        reservation("j2", uid="uid-res-2"),
    ]
    view = mg.ClusterView.build(ObjectStore.from_dicts(objects))
    rec = Recorder()
    ex = mg.MigrationExecutor(rec)
    hint = {mg.TARGET_NODE_ANNOTATION: "n2"}
    for name, pod_name in (("j1", "web-1"), ("j2", "web-2")):
        one = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING, name=name, pod_name=pod_name)
        ex.run(one, hint, view, T0 + 60)
    assert [mg.target_of(c[2]) for c in rec.of("create_placeholder")] == ["n2", "n3"]


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


# -- one replacement, one job ---------------------------------------------------------


def _owned(name: str, created: str, node_name: str = "n2", phase: str = "Running") -> dict[str, Any]:
    raw = pod(name, node_name=node_name, started=created)
    raw["metadata"]["ownerReferences"][0]["uid"] = "uid-web-owner"
    raw["status"]["phase"] = phase
    return raw


WEB_RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": "web-owner", "namespace": "default", "uid": "uid-web-owner"}}  # fmt: skip


def _started_job(name: str, pod_name: str, started: float, phase: str = m.RUNNING,
                 present: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    tracked = mg.Tracked(f"uid-{pod_name}", "ReplicaSet", "web-owner", "uid-web-owner", "n1",
                         started, present)  # fmt: skip
    return {"apiVersion": m.API_VERSION, "kind": m.KIND,
            "metadata": {"name": name, "uid": f"uid-job-{name}", "annotations": tracked.annotations()},
            "spec": {"podRef": {"namespace": "default", "name": pod_name}, "mode": m.EVICT_DIRECTLY},
            "status": {"phase": phase}}  # fmt: skip


def _worlds(*objects: dict[str, Any]) -> dict[str, mg.World]:
    store = ObjectStore.from_dicts([node("n1"), node("n2"), WEB_RS, *objects])
    view = mg.ClusterView.build(store)
    return {j.name: mg.observe(j, j.annotations, view, T0 + 200)[0] for j in store.migration_jobs}


def test_two_jobs_of_one_workload_never_take_the_same_replacement() -> None:
    """Two replicas moved at once, one new replica so far: it is the replacement of the job
    that started first; the other waits for a pod of its own."""
    jobs = [_started_job("move-a", "web-a", T0 + 100), _started_job("move-b", "web-b", T0 + 100.5)]
    first = _worlds(*jobs, _owned("web-x", "2026-01-01T00:01:45Z"))  # T0 + 105
    assert (first["move-a"].replacement_node, first["move-b"].replacement_node) == ("n2", "")
    assert not first["move-b"].replacement_seen
    both = _worlds(*jobs, _owned("web-x", "2026-01-01T00:01:45Z"),
                   _owned("web-y", "2026-01-01T00:01:46Z", node_name="n1"))  # fmt: skip
    assert (both["move-a"].replacement_node, both["move-b"].replacement_node) == ("n2", "n1")


def test_a_succeeded_job_keeps_the_replacement_it_landed_as() -> None:
    done = _started_job("move-a", "web-a", T0 + 100, phase=m.SUCCEEDED)
    done["status"]["landedNode"] = "n2"
    later = _started_job("move-b", "web-b", T0 + 150)
    worlds = _worlds(done, later, _owned("web-x", "2026-01-01T00:02:35Z"))  # T0 + 155, after both starts
    assert worlds["move-b"].replacement_node == "" and not worlds["move-b"].replacement_seen


def test_a_sibling_created_just_before_the_start_is_no_replacement() -> None:
    """Created a second before the start (within the slack for whole-second timestamps):
    the executor records it as present at the start, so the job waits for a new pod."""
    rec = Recorder()
    sibling = _owned("web-2", "2026-01-01T00:01:39Z")  # T0 + 99
    mine = _owned("web-1", "2026-01-01T00:00:00Z", node_name="n1")
    store = ObjectStore.from_dicts([node("n1"), node("n2"), WEB_RS, sibling, mine])
    view = mg.ClusterView.build(store)
    step = mg.MigrationExecutor(rec).start(job(phase="Pending"), view.pods["default/web-1"], view, T0 + 100)
    assert step is not None and step.reason == m.REASON_WAIT_REPLACEMENT
    annotations = rec.calls[0][2]
    assert annotations[mg.PRESENT_AT_START_ANNOTATION] == "uid-web-2"
    tracked = mg.tracked_from_annotations(annotations)
    assert tracked is not None and tracked.present_at_start == ("uid-web-2",)
    running = _started_job("j1", "web-1", T0 + 100, present=tracked.present_at_start)
    assert _worlds(running, sibling)["j1"].replacement_node == ""
    without = _started_job("j1", "web-1", T0 + 100)  # what the slack alone would have taken
    assert _worlds(without, sibling)["j1"].replacement_node == "n2"


# -- review6: claims across phases, StatefulSets, deleted and stuck pods -------------------


def _landed(name: str, pod_name: str, started: float, landed: str = "") -> dict[str, Any]:
    raw = _started_job(name, pod_name, started, phase=m.SUCCEEDED)
    if landed:
        raw["status"]["landedNode"] = landed
    return raw


def test_a_job_that_succeeded_on_a_404_takes_no_later_replacement() -> None:
    """Its pod was already gone (no landing): a later job of the workload gets its own."""
    gone = _landed("move-a", "web-a", T0 + 100)
    later = _started_job("move-b", "web-b", T0 + 150)
    worlds = _worlds(gone, later, _owned("web-y", "2026-01-01T00:02:35Z", node_name="n1"))
    assert worlds["move-b"].replacement_node == "n1"


def test_a_succeeded_job_whose_pod_was_moved_again_takes_not_the_next_one() -> None:
    """move-a landed as web-x on n2; move-b then moved web-x: web-x's replacement is
    move-b's, not move-a's second."""
    done = _landed("move-a", "web-a", T0 + 100, landed="n2")
    again = _started_job("move-b", "web-x", T0 + 150)
    moved = _owned("web-x", "2026-01-01T00:01:45Z")
    moved["metadata"]["deletionTimestamp"] = "2026-01-01T00:02:31Z"
    worlds = _worlds(done, again, moved, _owned("web-y", "2026-01-01T00:02:35Z", node_name="n1"))
    assert worlds["move-b"].replacement_node == "n1"


def test_a_pending_replacement_is_not_swapped_for_a_later_jobs_running_one() -> None:
    """move-a's replacement (created first) is still Pending, move-b's runs: move-b is
    done on n1, move-a waits for its own (it would otherwise report move-b's landing)."""
    jobs = [_started_job("move-a", "web-a", T0 + 100), _started_job("move-b", "web-b", T0 + 150)]
    worlds = _worlds(*jobs, _owned("web-x", "2026-01-01T00:01:45Z", phase="Pending"),
                     _owned("web-y", "2026-01-01T00:02:35Z", node_name="n1"))  # fmt: skip
    assert (worlds["move-a"].replacement_node, worlds["move-a"].replacement_seen) == ("", True)
    assert worlds["move-b"].replacement_node == "n1"


def test_a_lone_job_takes_a_running_new_pod_over_a_stuck_one() -> None:
    """One job, two new pods (a scale-up stuck Pending, then its replacement Running):
    nobody else needs the Running one, so the job is done."""
    jobs = [_started_job("move-a", "web-a", T0 + 100)]
    worlds = _worlds(*jobs, _owned("web-s", "2026-01-01T00:01:42Z", phase="Pending"),
                     _owned("web-x", "2026-01-01T00:01:45Z", node_name="n1"))  # fmt: skip
    assert worlds["move-a"].replacement_node == "n1"


def _stateful(name: str, uid: str, created: str, node_name: str, phase: str) -> dict[str, Any]:
    raw = pod(name, node_name=node_name, started=created, owner_kind="StatefulSet")
    raw["metadata"]["uid"] = uid
    raw["metadata"]["ownerReferences"][0].update(name="db", uid="uid-db")
    raw["status"]["phase"] = phase
    return raw


def test_a_statefulset_pod_is_replaced_by_the_pod_of_its_own_name() -> None:
    """db-0 and db-1 moved; the new db-1 runs, the new db-0 is still Pending: the job of
    db-0 waits (db-1 is no replacement of db-0), the job of db-1 is done."""
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "namespace": "default", "uid": "uid-db"}}  # fmt: skip
    jobs = []
    for name, pod_name, started in (("move-0", "db-0", T0 + 100), ("move-1", "db-1", T0 + 150)):
        tracked = mg.Tracked(f"old-{pod_name}", "StatefulSet", "db", "uid-db", "n1", started)
        raw = _started_job(name, pod_name, started)
        raw["metadata"]["annotations"] = tracked.annotations()
        jobs.append(raw)
    worlds = _worlds(sts, *jobs,
                     _stateful("db-0", "new-db-0", "2026-01-01T00:01:45Z", "", "Pending"),
                     _stateful("db-1", "new-db-1", "2026-01-01T00:02:35Z", "n2", "Running"))  # fmt: skip
    assert (worlds["move-0"].replacement_node, worlds["move-0"].replacement_seen) == ("", True)
    assert worlds["move-1"].replacement_node == "n2"


def test_waiting_for_a_replacement_that_appeared_reads_the_same_after_the_release() -> None:
    """The placeholder goes when the replacement appears; the rounds after that while it is
    not Running write nothing new (one Event on the job, not a message flipping back)."""
    running = job(m.RESERVATION_FIRST, m.RUNNING, status={"targetNode": "n2"})
    holder = parse_pod(placeholder("j1", node_name="n2", phase="Running"))
    seen = {"pod": None, "controller_exists": True, "replacement_seen": True}
    release = mg.advance(running, world(placeholder=holder, **seen))
    assert release is not None and mg.REMOVE_PLACEHOLDER in release.actions
    after = replace(running, reason=release.reason, message=release.message)
    assert "placeholder released" in release.message
    assert not mg.changed(after, mg.advance(after, world(**seen)))  # type: ignore[arg-type]
