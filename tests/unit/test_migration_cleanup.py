"""Nothing leaks: drain taints are set while a drain runs and lifted when it ends (freed or
not), orphaned placeholders and unused PriorityClasses are found by label and name; and
the placeholder's body (priority clamp, limits for extended resources, tolerations)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent.cluster import migrator as mg
from agent.cluster.metrics import ControllerMetrics
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.objects import parse_pod
from agent.model.reservation import parse_reservation
from agent.model.store import ObjectStore
from tests.builders import NOW, node, pod
from tests.unit.migration_fakes import Recorder, job, placeholder, reservation

DRAIN_TAINT = {"key": "qos.waterline.io/draining", "effect": "NoSchedule"}


def tainted(name: str) -> dict[str, Any]:
    raw = node(name)
    raw["spec"] = {"taints": [dict(DRAIN_TAINT)]}
    return raw


def view(*objects: dict[str, Any]) -> mg.ClusterView:
    return mg.ClusterView.build(ObjectStore.from_dicts(list(objects)))


def drain_job(
    name: str, reason: str, phase: str = m.RUNNING, pod_name: str = "web-1"
) -> m.PodMigrationJob:
    return job(
        mode=m.RESERVATION_FIRST,
        phase=phase,
        name=name,
        pod_name=pod_name,
        created_by="defrag",
        status={"reason": reason},
        annotations={m.SOURCE_NODE_ANNOTATION: "n1"},
    )


def test_a_drain_taints_its_source_once_it_evicts_and_keeps_it_between_waves() -> None:
    plain = view(node("n1"), node("n2"))
    waiting = drain_job("a", m.REASON_WAIT_RESERVATION)
    assert mg.plan_cleanup([waiting], plain, NOW).taint == ()  # not evicting yet
    evicting = drain_job("b", m.REASON_WAIT_REPLACEMENT)
    assert mg.plan_cleanup([waiting, evicting], plain, NOW).taint == ("n1",)
    # tainted already: the drain keeps it while any job of it remains, even one that waits
    # for its turn (the drain has begun)
    marked = view(tainted("n1"), node("n2"), pod("web-1", node_name="n1"))
    cleanup = mg.plan_cleanup([waiting], marked, NOW)
    assert (cleanup.taint, cleanup.untaint) == ((), ())
    # a job that is not a drain's never taints
    user = job(
        mode=m.RESERVATION_FIRST, phase=m.RUNNING, status={"reason": m.REASON_WAIT_REPLACEMENT}
    )
    assert mg.plan_cleanup([user], plain, NOW).taint == ()
    # what the executor tainted this round is not asked for twice
    marks = mg.Marks(tainted=frozenset({"n1"}))
    assert mg.plan_cleanup([evicting], plain, NOW, marks).taint == ()


def test_the_taint_goes_when_the_drain_ends_freed_or_not() -> None:
    done = drain_job("a", m.REASON_COMPLETED, phase=m.SUCCEEDED)
    ds = pod("agent-x", node_name="n1", owner_kind="DaemonSet")
    freed = mg.plan_cleanup([done], view(tainted("n1"), ds), NOW)
    assert freed.untaint == (mg.DrainEnd("n1", True, ()),)  # a DaemonSet pod stays
    left = pod("db-0", node_name="n1")
    failed = mg.plan_cleanup([done], view(tainted("n1"), ds, left), NOW)
    assert failed.untaint == (mg.DrainEnd("n1", False, ("default/db-0",)),)
    # an orphan taint (no job at all: the controller restarted, the jobs were deleted)
    assert mg.plan_cleanup([], view(tainted("n7")), NOW).untaint == (mg.DrainEnd("n7", True, ()),)


def stamped(name: str, planned: str, taint: bool = True) -> dict[str, Any]:
    raw = tainted(name) if taint else node(name)
    raw["metadata"]["annotations"] = {"qos.waterline.io/last-defrag-time": planned}
    return raw


def test_a_plans_first_eviction_taints_every_source_of_the_plan() -> None:
    """A source whose turn has not come is the emptiest node: untainted, it would take the
    replacements of the others."""
    plan_time = "2026-01-01T00:00:00Z"
    evicting = drain_job("a", m.REASON_WAIT_REPLACEMENT)
    queued = job(
        mode=m.RESERVATION_FIRST, phase="Pending", name="b", pod_name="web-2", created_by="defrag"
    )
    web2 = pod("web-2", node_name="n2")
    same = view(stamped("n1", plan_time, taint=False), stamped("n2", plan_time, taint=False), web2)
    assert mg.plan_cleanup([evicting, queued], same, NOW).taint == ("n1", "n2")
    other = view(
        stamped("n1", plan_time, taint=False),
        stamped("n2", "2026-01-01T01:00:00Z", taint=False),
        web2,
    )
    assert mg.plan_cleanup([evicting, queued], other, NOW).taint == ("n1",)


def test_a_plans_source_with_nothing_to_move_is_drained_with_the_plan() -> None:
    """Stamped with the plan but with no job, it is the emptiest node of all: untainted,
    the real scheduler sent the plan's replacements there (bench/defrag_real.py)."""
    plan_time = "2026-01-01T00:00:00Z"
    evicting = drain_job("a", m.REASON_WAIT_REPLACEMENT)
    ds = pod("agent-x", node_name="n9", owner_kind="DaemonSet")  # stays: nothing to move
    idle = stamped("n9", plan_time, taint=False)
    other_plan = stamped("n8", "2026-01-01T01:00:00Z", taint=False)
    source = stamped("n1", plan_time, taint=False)
    assert mg.plan_cleanup([evicting], view(source, idle, other_plan, ds), NOW).taint == ("n1", "n9")
    # a node of the plan that holds a pod to move and no job (its drain failed) is not one
    busy = pod("db-0", node_name="n9")
    assert mg.plan_cleanup([evicting], view(source, idle, busy), NOW).taint == ("n1",)
    # tainted, it keeps the taint while the plan's drain runs, and is freed when it ends
    cleanup = mg.plan_cleanup([evicting], view(stamped("n1", plan_time), stamped("n9", plan_time), ds), NOW)
    assert (cleanup.taint, cleanup.untaint) == ((), ())
    done = drain_job("a", m.REASON_COMPLETED, phase=m.SUCCEEDED)
    ended = mg.plan_cleanup([done], view(stamped("n1", plan_time), stamped("n9", plan_time), ds), NOW)
    assert ended.untaint == (mg.DrainEnd("n1", True, ()), mg.DrainEnd("n9", True, ()))


def test_a_freed_node_keeps_its_taint_while_its_plans_other_drains_run() -> None:
    """Lifted at once, a freed (empty) node is where LeastAllocated sends the replacements
    of the drains still running."""
    plan_time = "2026-01-01T00:00:00Z"
    done = drain_job("a", m.REASON_COMPLETED, phase=m.SUCCEEDED)
    other = job(
        mode=m.RESERVATION_FIRST,
        phase=m.RUNNING,
        name="b",
        pod_name="web-2",
        created_by="defrag",
        status={"reason": m.REASON_WAIT_REPLACEMENT},
        annotations={m.SOURCE_NODE_ANNOTATION: "n2"},
    )
    same_plan = view(stamped("n1", plan_time), stamped("n2", plan_time))
    assert mg.plan_cleanup([done, other], same_plan, NOW).untaint == ()
    # a newer plan's drain does not hold it
    newer = view(stamped("n1", plan_time), stamped("n2", "2026-01-01T01:00:00Z"))
    assert mg.plan_cleanup([done, other], newer, NOW).untaint == (mg.DrainEnd("n1", True, ()),)
    # a failed drain (pods left) lets go at once: the node must take pods again
    left = view(stamped("n1", plan_time), stamped("n2", plan_time), pod("db-0", node_name="n1"))
    assert mg.plan_cleanup([done, other], left, NOW).untaint == (
        mg.DrainEnd("n1", False, ("default/db-0",)),
    )
    # the plan's last drain ends: every taint goes
    last = replace(other, phase=m.SUCCEEDED)
    ends = mg.plan_cleanup([done, last], same_plan, NOW).untaint
    assert [e.node for e in ends] == ["n1", "n2"]


def test_orphaned_placeholders_and_unused_priority_classes() -> None:
    live = job(mode=m.RESERVATION_FIRST, phase=m.RUNNING, name="j1")
    ended = job(mode=m.RESERVATION_FIRST, phase=m.FAILED, name="j2")
    pcs = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": n},
            "value": v,
        }
        for n, v in (
            ("waterline-reservation--1", -1),
            ("waterline-reservation-99", 99),
            ("online", 100),
        )
    ]
    objects = [
        node("n2"),
        reservation("j1", r.PENDING, "n2"),
        reservation("j2", r.PENDING, "n2", uid="uid-res-2"),
        placeholder("j1"),  # its job runs: kept
        placeholder("j2", priority_class="waterline-reservation-99"),  # its job ended
        placeholder("j3", priority_class="waterline-reservation-99"),  # no reservation at all
        *pcs,
    ]
    cleanup = mg.plan_cleanup([live, ended], view(*objects), NOW)
    assert [p.name for p in cleanup.placeholders] == ["placeholder-pmj-j2", "placeholder-pmj-j3"]
    assert cleanup.priority_classes == ("waterline-reservation-99",)  # "online" is not ours
    # a class created this round for a placeholder not in the snapshot yet is kept
    marks = mg.Marks(priority_classes_used=frozenset({"waterline-reservation-99"}))
    assert mg.plan_cleanup([live, ended], view(*objects), NOW, marks).priority_classes == ()
    # a final reservation's placeholder goes even while its job still runs
    final = reservation("j1", r.SUCCEEDED, "n2")
    stale = mg.plan_cleanup([live], view(node("n2"), final, placeholder("j1")), NOW)
    assert [p.name for p in stale.placeholders] == ["placeholder-pmj-j1"]
    # a placeholder already being deleted is left alone
    going = mg.plan_cleanup([], view(node("n2"), placeholder("j1", deleting=True)), NOW)
    assert going.placeholders == ()


def test_a_users_pod_with_the_reservation_label_is_no_placeholder() -> None:
    """Only pods we made (the reservation label and ``created-by: migration``) are
    placeholders: a user's pod that copies the label is never deleted as an orphan."""
    users = placeholder("j9")
    users["metadata"]["namespace"] = "default"
    del users["metadata"]["labels"][m.CREATED_BY_LABEL]
    seen = view(node("n2"), users)
    assert seen.placeholders == {}
    assert mg.plan_cleanup([], seen, NOW).placeholders == ()
    ours = view(node("n2"), placeholder("j9"))  # ours, its job gone: collected
    assert [p.name for p in mg.plan_cleanup([], ours, NOW).placeholders] == ["placeholder-pmj-j9"]


def test_reconcile_writes_the_cleanup_counts_freed_nodes_and_tells() -> None:
    rec = events = Recorder()
    metrics = ControllerMetrics()
    ex = mg.MigrationExecutor(rec, metrics=metrics)
    done = drain_job("a", m.REASON_COMPLETED, phase=m.SUCCEEDED)
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "waterline-reservation--1"},
        "value": -1,
    }
    ex.reconcile([done], view(tainted("n1"), node("n2"), placeholder("a"), pc), NOW)
    assert rec.calls == [
        ("node_taint", "n1", ("qos.waterline.io/draining", "NoSchedule", False)),
        ("delete_placeholder", "waterline-system/placeholder-pmj-a", "uid-placeholder-a"),
        ("delete_priority_class", "waterline-reservation--1", None),
    ]
    assert metrics.registry.get_sample_value("waterline_controller_nodes_freed_total") == 1
    assert events.about("Node") == [("Node/n1", "Normal", "DrainDone", "drain done: n1 is free")]
    # a taint that cannot be lifted is not counted: the next round tries again
    refused = mg.MigrationExecutor(Recorder(refuse=("node_taint",)), metrics=metrics)
    refused.reconcile([done], view(tainted("n1")), NOW)
    assert metrics.registry.get_sample_value("waterline_controller_nodes_freed_total") == 1


def test_placeholder_body_priority_limits_and_tolerations() -> None:
    assert [mg.placeholder_priority(p) for p in (0, 100, 2_000_000_000, -(2**31))] == [
        -1,
        99,
        1_000_000_000,
        -(2**31),
    ]
    raw = pod(
        "trainer",
        priority=5000,
        requests={"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
        limits={"nvidia.com/gpu": "1"},
    )
    raw["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    res = parse_reservation(reservation())
    body = mg.placeholder_body(res, parse_pod(raw), "g1", namespace="ops", image="mirror/pause:1")
    container = body["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "2000m", "memory": "1073741824", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},  # extended resources may not be overcommitted
    }
    assert container["image"] == "mirror/pause:1" and body["metadata"]["namespace"] == "ops"
    assert body["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert (body["spec"]["priority"], body["spec"]["preemptionPolicy"]) == (4999, "Never")
    # it parses as a placeholder of its reservation, and the reservation's own capacity
    # is not counted twice once the placeholder backs it
    assert parse_pod(body).labels["qos.waterline.io/reservation"] == "pmj-j1"
    backed = parse_reservation(reservation("j1", r.AVAILABLE, "g1"))
    assert backed.placeholder and not backed.holds_capacity(NOW + 10)


def test_the_defrag_act_counts_the_moves_it_plans() -> None:
    from agent.cluster.acting import PlanActs
    from agent.cluster.defrag import DefragPlan, Migration

    class Writer:
        def __init__(self) -> None:
            self.jobs: list[dict[str, Any]] = []
            self.stamped: list[str] = []

        def create_job(self, body: dict[str, Any]) -> bool:
            self.jobs.append(body)
            return len(self.jobs) == 1  # the second create fails

        def annotate_node(self, name: str, annotations: dict[str, str]) -> bool:
            assert annotations == {"qos.waterline.io/last-defrag-time": "2026-01-01T00:00:00Z"}
            self.stamped.append(name)
            return True

    metrics, writer = ControllerMetrics(), Writer()
    acts = PlanActs(writer, metrics, mock_log(), lambda passed: 0)  # type: ignore[arg-type]
    moves = tuple(
        Migration(parse_pod(pod(name, node_name="n3")), "n3", "n1") for name in ("a", "b")
    )
    store = ObjectStore.from_dicts([node("n1"), node("n3"), node("n4")])
    plan = DefragPlan(migrations=moves, freed_nodes=("n3", "n4"))
    acts.defrag(plan, store, view(node("n1")), NOW, True)
    planned = metrics.registry.get_sample_value(
        "waterline_controller_moves_total", {"stage": "planned"}
    )
    assert planned == 1 and writer.jobs[0]["metadata"]["labels"] == {m.CREATED_BY_LABEL: "defrag"}
    # the plan's time on its sources, n4 (nothing to move) too: it is drained with them
    assert writer.stamped == ["n3", "n4"]
    writer.jobs.append({})  # from now on every create fails: no job, no stamp
    acts.defrag(plan, store, view(node("n1")), NOW, True)
    assert writer.stamped == ["n3", "n4"]


def mock_log() -> Any:
    import structlog

    return structlog.get_logger("test")


def test_the_daemonset_act_nominates_the_pending_pod_before_its_victims_go() -> None:
    """The victims' replacements compete for the room they free: the pending DaemonSet pod
    is nominated to its node first, so the scheduler holds the room for it."""
    from agent.cluster.acting import PlanActs
    from agent.cluster.daemonset import DaemonSetPlan, Preemption

    calls: list[tuple[str, str]] = []

    class Writer:
        def nominate(self, p: Any, node_name: str, source: str) -> bool:
            calls.append(("nominate", f"{p.key} -> {node_name}"))
            return True

        def evict(self, p: Any, source: str) -> None:
            calls.append(("evict", p.key))

    acts = PlanActs(Writer(), ControllerMetrics(), mock_log(), lambda passed: 0)  # type: ignore[arg-type]
    ds = pod("logger-x", namespace="kube-system", node_name="")
    victims = [pod(f"filler-{i}", node_name="n1") for i in (1, 2)]
    plan = DaemonSetPlan(preemptions=(
        Preemption("kube-system/logger-x", "n1", "single", ("default/filler-1", "default/filler-2")),
        Preemption("kube-system/gone", "n2", None, ()),  # no victims found: nothing asked
    ))  # fmt: skip
    acts.daemonset(plan, ObjectStore(), view(node("n1"), ds, *victims), NOW, True)
    assert calls == [("nominate", "kube-system/logger-x -> n1"),
                     ("evict", "default/filler-1"), ("evict", "default/filler-2")]
    calls.clear()
    acts.daemonset(plan, ObjectStore(), view(node("n1"), ds, *victims), NOW, False)
    assert calls == []  # not enabled: planned and logged only
