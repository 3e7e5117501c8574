"""Queue-proportional preemption: Queue parsing, water-filling, starving/need, victims (its
arguments: test_args_queues.py)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.cluster.placement import Snapshot, why_not
from agent.cluster.queues import QueueArgs, Reclaim, decide, deserved, need, queue_usage, starving
from agent.errors import InvalidObject
from agent.model.objects import Node, Pod, PodDisruptionBudget, Taint, Toleration
from agent.model.queue import QUEUE_LABEL, Queue, parse_queue
from agent.model.selectors import LabelSelector, NodeSelector, NodeSelectorTerm, Requirement
from agent.model.store import ObjectStore
from tests.builders import node_object

NOW = 1_000_000.0


def qraw(name: str = "q1", **spec: Any) -> dict[str, object]:
    return {"kind": "Queue", "metadata": {"name": name}, "spec": spec}


def node(name: str = "n1", cpu: float = 8.0, memory: float = 64e9, **kw: Any) -> Node:
    return node_object(name, cpu, memory, **kw)


def qpod(
    name: str,
    queue: str,
    cpu: float,
    memory: float = 0.0,
    running: bool = True,
    priority: int = 0,
    started: float = NOW - 600,
) -> Pod:
    requests = {"cpu": cpu}
    if memory:
        requests["memory"] = memory
    return Pod(
        "default",
        name,
        f"uid-{name}",
        node_name="n1" if running else "",
        labels={QUEUE_LABEL: queue},
        priority=priority,
        phase="Running" if running else "Pending",
        start_time=started if running else None,
        creation_time=started,
        requests=requests,
    )


# -- parsing ------------------------------------------------------------------------------
def test_queue_defaults() -> None:
    q = parse_queue(qraw())
    assert (q.weight, dict(q.capability), dict(q.guarantee), q.reclaimable) == (1, {}, {}, True)


def test_queue_shapes_as_in_volcano() -> None:
    q = parse_queue(
        qraw(
            weight=3,
            capability={"cpu": "8", "memory": "16Gi"},
            guarantee={"resource": {"cpu": "500m"}},
            reclaimable=False,
        )
    )
    assert q.weight == 3
    assert q.capability == {"cpu": 8.0, "memory": 16 * 2**30}
    assert q.guarantee == {"cpu": 0.5}
    assert q.reclaimable is False


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"weight": 0}, "spec.weight"),
        ({"weight": True}, "spec.weight"),
        ({"weight": "2"}, "spec.weight"),
        ({"capability": {"cpu": "-1"}}, "spec.capability.cpu"),
        ({"capability": {"cpu": "many"}}, "spec.capability.cpu"),
        ({"capability": ["cpu"]}, "spec.capability"),
        (
            {"guarantee": {"cpu": "1"}, "capability": {"cpu": "2"}},
            None,
        ),  # no resource: key -> nothing guaranteed
        (
            {"guarantee": {"resource": {"cpu": "3"}}, "capability": {"cpu": "2"}},
            "spec.guarantee.resource.cpu",
        ),
        ({"guarantee": "1"}, "spec.guarantee"),
        ({"reclaimable": "no"}, "spec.reclaimable"),
    ],
)
def test_queue_validation_names_the_field(spec: dict[str, Any], field: str | None) -> None:
    if field is None:
        assert parse_queue(qraw(**spec)).guarantee == {}
        return
    with pytest.raises(InvalidObject) as err:
        parse_queue(qraw("bad", **spec))
    assert err.value.field == field
    assert str(err.value).startswith("Queue bad: ")


def test_queue_needs_a_name_and_is_unique() -> None:
    with pytest.raises(InvalidObject, match="metadata.name"):
        parse_queue({"kind": "Queue", "metadata": {}})
    with pytest.raises(InvalidObject, match="must be unique"):
        ObjectStore.from_dicts([qraw("a"), qraw("a")])


# -- deserved ------------------------------------------------------------------------------
def test_equal_weights_split_evenly_capped_by_request() -> None:
    qs = [Queue("a"), Queue("b")]
    d = deserved(qs, {"a": {"cpu": 6.0}, "b": {"cpu": 4.0}}, {"cpu": 8.0})
    assert d == {"a": {"cpu": 4.0}, "b": {"cpu": 4.0}}
    d = deserved(qs, {"a": {"cpu": 6.0}, "b": {"cpu": 1.0}}, {"cpu": 8.0})
    assert d == {"a": {"cpu": 6.0}, "b": {"cpu": 1.0}}  # a takes what b leaves, up to its request


def test_weights_and_capability_redistribute() -> None:
    qs = [Queue("qa", capability={"cpu": 3.0}), Queue("qb", weight=2), Queue("qc")]
    d = deserved(qs, {"qa": {"cpu": 8.0}, "qb": {"cpu": 10.0}, "qc": {"cpu": 2.0}}, {"cpu": 12.0})
    assert d["qa"]["cpu"] == pytest.approx(3.0)
    assert d["qb"]["cpu"] == pytest.approx(7.0)
    assert d["qc"]["cpu"] == pytest.approx(2.0)


def test_guarantee_raises_and_reserves() -> None:
    qs = [Queue("q1", guarantee={"cpu": 6.0}), Queue("q2", weight=3)]
    d = deserved(qs, {"q1": {"cpu": 6.0}, "q2": {"cpu": 7.0}}, {"cpu": 10.0})
    assert d == {"q1": {"cpu": 6.0}, "q2": {"cpu": 4.0}}


def test_guarantee_then_further_rounds_follow_volcano() -> None:
    """Round 1 raises q1 to its guarantee 8; later rounds add on top of it (path as in
    Volcano's proportion plugin, not a single max-min level): 15 / 12 / 3."""
    qs = [Queue("q1", guarantee={"cpu": 8.0}), Queue("q2"), Queue("q3", weight=4)]
    d = deserved(qs, {"q1": {"cpu": 30.0}, "q2": {"cpu": 30.0}, "q3": {"cpu": 3.0}}, {"cpu": 30.0})
    assert [d[n]["cpu"] for n in ("q1", "q2", "q3")] == pytest.approx([15.0, 12.0, 3.0])


def test_guarantee_overshoot_is_handed_back() -> None:
    """Raising q1 to 5 in round 1 overcommits 12 cpu; more rounds take it back from the
    others (Volcano would stop at 13)."""
    qs = [Queue("q1", guarantee={"cpu": 5.0}), Queue("q2"), Queue("q3")]
    d = deserved(qs, {n: {"cpu": 10.0} for n in ("q1", "q2", "q3")}, {"cpu": 12.0})
    assert [d[n]["cpu"] for n in ("q1", "q2", "q3")] == pytest.approx([5.0, 3.5, 3.5])


def test_oversubscribed_guarantees_are_scaled_to_the_total() -> None:
    qs = [Queue("a", guarantee={"cpu": 6.0}), Queue("b", guarantee={"cpu": 6.0})]
    d = deserved(qs, {"a": {"cpu": 10.0}, "b": {"cpu": 10.0}}, {"cpu": 8.0})
    assert d["a"]["cpu"] + d["b"]["cpu"] == pytest.approx(8.0)


# -- starving and need ---------------------------------------------------------------------
def test_starving_and_need_subtract_free_capacity() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [
        qpod("a", "q1", 2),
        qpod("b", "q1", 2),
        qpod("c", "q1", 2),
        qpod("w1", "q2", 2, running=False),
        qpod("w2", "q2", 2, running=False),
    ]
    usage = queue_usage(qs, pods)
    shares = deserved(qs, {n: u.request for n, u in usage.items()}, {"cpu": 8.0})
    assert starving(qs, usage, shares) == ["q2"]
    assert need(["q2"], usage, shares, {"cpu": 2.0}) == {"cpu": 2.0}
    assert need(["q2"], usage, shares, {"cpu": 5.0}) == {}  # free room covers it


def test_pods_of_unknown_queues_and_finished_pods_are_left_out() -> None:
    qs = [Queue("q1")]
    done = Pod(
        "default",
        "done",
        "u-done",
        node_name="n1",
        labels={QUEUE_LABEL: "q1"},
        phase="Succeeded",
        requests={"cpu": 5.0},
    )
    usage = queue_usage(qs, [qpod("x", "nope", 3), done, qpod("a", "q1", 1)])
    assert usage["q1"].allocated == {"cpu": 1.0}


def test_decide_basic_example() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [
        qpod("q1-low", "q1", 2, priority=0),
        qpod("q1-mid", "q1", 2, priority=50),
        qpod("q1-top", "q1", 2, priority=100),
        qpod("q2-a", "q2", 2, running=False),
        qpod("q2-b", "q2", 2, running=False),
    ]
    result = decide(qs, [node()], pods, NOW)
    assert result.starving == ("q2",)
    assert result.need == {"cpu": 2.0}
    assert result.victims == ("default/q1-low",)
    assert result.exact


def test_cordoned_node_room_is_not_free() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [qpod("a", "q1", 2), qpod("b", "q1", 2), qpod("c", "q1", 2)]
    pods += [qpod("w1", "q2", 2, running=False), qpod("w2", "q2", 2, running=False)]
    assert decide(qs, [node(), node("n2", cpu=4.0)], pods, NOW).need == {}
    cordoned = decide(qs, [node(), node("n2", cpu=4.0, unschedulable=True)], pods, NOW)
    assert cordoned.need == {"cpu": 2.0}  # only n1's 2 free cpu can take q2's pods


def test_shorter_running_time_first_at_equal_priority() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [
        qpod("old", "q1", 2, started=NOW - 7200),
        qpod("young", "q1", 2, started=NOW - 60),
        qpod("mid", "q1", 2, started=NOW - 600),
        qpod("w1", "q2", 2, running=False),
        qpod("w2", "q2", 2, running=False),
    ]
    assert decide(qs, [node()], pods, NOW).victims == ("default/young",)


def test_terminating_pods_are_not_victims() -> None:
    qs = [Queue("q1"), Queue("q2")]
    going = Pod(
        "default",
        "going",
        "u-going",
        node_name="n1",
        labels={QUEUE_LABEL: "q1"},
        phase="Running",
        deletion_time=NOW,
        requests={"cpu": 2.0},
    )
    pods = [
        going,
        qpod("a", "q1", 2, priority=5),
        qpod("b", "q1", 2, priority=9),
        qpod("w1", "q2", 2, running=False),
        qpod("w2", "q2", 2, running=False),
    ]
    assert decide(qs, [node()], pods, NOW).victims == ("default/a",)


# -- fit-aware reclaim ---------------------------------------------------------------------
def on(pod: Pod, node_name: str) -> Pod:
    return replace(pod, node_name=node_name)


def test_two_nodes_one_pod_victims_on_one_node() -> None:
    """Two 1-cpu victims on two nodes free 2 cpu for the queue's arithmetic, yet a 2-cpu
    pod still fits neither: the victims are taken on one node, where the pod then fits."""
    qs = [Queue("q1"), Queue("q2")]
    pods = [
        on(qpod("a1", "q1", 1, started=NOW - 60), "n1"),
        on(qpod("a2", "q1", 1, started=NOW - 600), "n1"),
        on(qpod("b1", "q1", 1, started=NOW - 30), "n2"),
        on(qpod("b2", "q1", 1, started=NOW - 900), "n2"),
        qpod("w", "q2", 2, running=False),
    ]
    nodes = [node("n1", cpu=2.0), node("n2", cpu=2.0)]
    result = decide(qs, nodes, pods, NOW)
    assert result.need == {"cpu": 2.0}
    # b1 (30 s) and a1 (60 s) are the two youngest, but on two nodes; two on one node it
    # is, and n2's pair is the cheaper (its first, b1, comes before a1 in victim order)
    assert result.reclaims == (Reclaim("default/w", "n2", ("default/b1", "default/b2")),)
    assert result.chosen_for()["default/b2"].node == "n2"


def test_a_node_with_room_needs_no_victim() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [on(qpod("a", "q1", 2), "n1"), on(qpod("b", "q1", 1), "n2"), qpod("w", "q2", 1, running=False)]
    result = decide(qs, [node("n1", cpu=2.0), node("n2", cpu=2.0)], pods, NOW)
    assert result.victims == () and result.fits_now == ("default/w",)


def test_fewest_victims_then_cheapest_across_nodes() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [
        on(qpod("s1", "q1", 1, priority=0), "n1"),
        on(qpod("s2", "q1", 1, priority=0), "n1"),
        on(qpod("big", "q1", 2, priority=5), "n2"),
        qpod("w", "q2", 2, running=False),
    ]
    result = decide(qs, [node("n1", cpu=2.0), node("n2", cpu=2.0)], pods, NOW)
    assert result.reclaims == (Reclaim("default/w", "n2", ("default/big",)),)  # one, not two


def test_exact_search_finds_what_the_greedy_walk_misses() -> None:
    """q1 may lose 3 cpu. In victim order b2, a3, c2: b2 leaves room for nothing else, so
    the greedy walk finds no set; the exact search takes a3 alone."""
    qs = [Queue("q1", guarantee={"cpu": 3.0}), Queue("q2", guarantee={"cpu": 3.0})]
    pods = [
        qpod("b2", "q1", 2, priority=0),
        qpod("a3", "q1", 3, priority=1),
        qpod("c2", "q1", 1, priority=2),
        qpod("w", "q2", 3, running=False),
    ]
    result = decide(qs, [node(cpu=6.0)], pods, NOW)
    assert result.victims == ("default/a3",)
    assert result.exact


def test_bounded_search_reports_when_it_is_not_exact() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [qpod(f"p{i}", "q1", 1, started=NOW - i) for i in range(8)] + [qpod("w", "q2", 2, running=False)]
    assert decide(qs, [node(cpu=8.0)], pods, NOW).exact
    assert not decide(qs, [node(cpu=8.0)], pods, NOW, QueueArgs(exact_search_classes=3)).exact
    assert not decide(qs, [node(cpu=8.0)], pods, NOW, QueueArgs(search_steps=0)).exact
    # the greedy walk still finds the victims
    assert decide(qs, [node(cpu=8.0)], pods, NOW, QueueArgs(search_steps=0)).victims == (
        "default/p0", "default/p1")  # fmt: skip


def test_a_pod_that_fits_nowhere_gets_no_victims_and_a_reason() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [qpod("a", "q1", 2), qpod("b", "q1", 2), qpod("w", "q2", 5, running=False)]
    result = decide(qs, [node(cpu=4.0)], pods, NOW)
    assert result.victims == ()
    assert result.unplaced["default/w"] == "AboveDeserved"  # 5 > its deserved 2
    pods = [qpod("a", "q1", 2), qpod("b", "q1", 2), qpod("w", "q2", 2, running=False)]
    pods[2] = replace(pods[2], node_selector={"disk": "ssd"})
    result = decide(qs, [node(cpu=4.0)], pods, NOW)
    assert result.victims == ()
    assert result.unplaced["default/w"] == "NoNodeFits: 0/1 nodes (1 NodeSelector)"


def test_fits_nowhere_says_when_the_room_is_held_by_pods_that_may_not_go() -> None:
    """n1 is full of q1's pods, every one protected, and n3 of q2's own (never its
    victims): the room is there, no victim is allowed (said apart from a node too small).
    n2 is full of pods in no queue, which queue preemption never takes: short of cpu."""
    qs = [Queue("q1"), Queue("q2")]
    protect = {"volcano.sh/preemptable": "false"}
    guarded = [replace(qpod(n, "q1", 2), annotations=protect) for n in ("a", "b", "c")]
    stray = replace(qpod("s", "q1", 2), labels={}, node_name="n2")
    own = replace(qpod("o", "q2", 2), node_name="n3")
    nodes = [node("n1", cpu=6.0), node("n2", cpu=2.0), node("n3", cpu=2.0)]
    result = decide(qs, nodes, [*guarded, stray, own, qpod("w", "q2", 2, running=False)], NOW)
    assert result.victims == ()
    assert result.unplaced["default/w"] == (
        "NoNodeFits: 0/3 nodes (2 no allowed victims for cpu, 1 Insufficient cpu)"
    )
    # the same with the protection a disruption budget gives: still no allowed victim
    budget = PodDisruptionBudget("default", "all", LabelSelector(((QUEUE_LABEL, "q1"),)),
                                 max_unavailable=0)  # fmt: skip
    plain = [qpod(n, "q1", 2) for n in ("a", "b", "c")]
    result = decide(qs, [node("n1", cpu=6.0)], [*plain, qpod("w", "q2", 2, running=False)], NOW,
                    pdbs=[budget])  # fmt: skip
    assert result.unplaced["default/w"] == "NoNodeFits: 0/1 nodes (1 no allowed victims for cpu)"


def test_preemption_policy_never_triggers_nothing() -> None:
    qs = [Queue("q1"), Queue("q2")]
    waiting = replace(qpod("w", "q2", 2, running=False), preemption_policy="Never")
    result = decide(qs, [node(cpu=4.0)], [qpod("a", "q1", 2), qpod("b", "q1", 2), waiting], NOW)
    assert result.victims == () and result.unplaced == {"default/w": "PreemptionPolicyNever"}
    # it still takes room that is free
    result = decide(qs, [node(cpu=6.0)], [qpod("a", "q1", 2), qpod("b", "q1", 2), waiting], NOW)
    assert result.fits_now == ("default/w",)


@pytest.mark.parametrize(
    ("annotations", "victim"),
    [
        ({}, "default/a"),  # the youngest
        ({"a": {"volcano.sh/preemptable": "false"}}, "default/b"),
        # as Volcano reads it (Go's ParseBool): any spelling of false, or not a boolean
        ({"a": {"volcano.sh/preemptable": "False"}}, "default/b"),
        ({"a": {"volcano.sh/preemptable": "0"}}, "default/b"),
        ({"a": {"volcano.sh/preemptable": "nope"}}, "default/b"),
        ({"a": {"volcano.sh/preemptable": "true"}}, "default/a"),
        ({"a": {"volcano.sh/preemptable": "T"}}, "default/a"),
        ({"a": {"controller.kubernetes.io/pod-deletion-cost": "10"}}, "default/b"),
        ({"b": {"controller.kubernetes.io/pod-deletion-cost": "-5"}}, "default/b"),
        ({"a": {"scheduling.koordinator.sh/eviction-cost": "3"}}, "default/b"),
        ({"a": {"controller.kubernetes.io/pod-deletion-cost": "-1"},
          "b": {"controller.kubernetes.io/pod-deletion-cost": "0",
                "scheduling.koordinator.sh/eviction-cost": "-100"}}, "default/a"),  # fmt: skip
    ],
)
def test_victim_order_follows_the_annotations_users_set(
    annotations: dict[str, dict[str, str]], victim: str
) -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [
        replace(qpod(n, "q1", 2, started=NOW - age), annotations=annotations.get(n, {}))
        for n, age in (("a", 60), ("b", 600), ("c", 6000))
    ]
    result = decide(qs, [node(cpu=6.0)], [*pods, qpod("w", "q2", 2, running=False)], NOW)
    assert result.victims == (victim,)


def test_preemptable_as_a_label_protects_the_pod_unless_the_annotation_says_otherwise() -> None:
    qs = [Queue("q1"), Queue("q2")]
    young = qpod("a", "q1", 2, started=NOW - 60)
    labelled = replace(young, labels={**young.labels, "volcano.sh/preemptable": "false"})
    pods = [qpod("b", "q1", 2, started=NOW - 600), qpod("w", "q2", 2, running=False)]
    result = decide(qs, [node(cpu=4.0)], [labelled, *pods], NOW)
    assert result.victims == ("default/b",)
    overridden = replace(labelled, annotations={"volcano.sh/preemptable": "true"})
    result = decide(qs, [node(cpu=4.0)], [overridden, *pods], NOW)
    assert result.victims == ("default/a",)


def test_priority_comes_before_the_costs() -> None:
    qs = [Queue("q1"), Queue("q2")]
    cheap = replace(qpod("a", "q1", 2, priority=5), annotations={"controller.kubernetes.io/pod-deletion-cost": "-100"})
    pods = [cheap, qpod("b", "q1", 2, priority=1), qpod("c", "q1", 2, priority=9)]
    result = decide(qs, [node(cpu=6.0)], [*pods, qpod("w", "q2", 2, running=False)], NOW)
    assert result.victims == ("default/b",)


def test_a_victim_its_disruption_budget_forbids_is_skipped() -> None:
    qs = [Queue("q1"), Queue("q2")]
    pods = [
        replace(qpod(n, "q1", 2, started=NOW - age), labels={QUEUE_LABEL: "q1", "app": app})
        for n, age, app in (("a", 60, "db"), ("b", 600, "db"), ("c", 6000, "web"), ("d", 9000, "web"))
    ]
    waiting = [qpod("w1", "q2", 2, running=False), qpod("w2", "q2", 2, running=False)]
    budget = PodDisruptionBudget("default", "db", LabelSelector((("app", "db"),)), max_unavailable=1)
    result = decide(qs, [node(cpu=8.0)], [*pods, *waiting], NOW, pdbs=[budget])
    # a goes for w1; the budget then allows no other db pod to go: c, not b, for w2
    assert result.victims == ("default/a", "default/c")
    none_left = PodDisruptionBudget("default", "db", LabelSelector((("app", "db"),)), min_available=2)
    result = decide(qs, [node(cpu=8.0)], [*pods, *waiting], NOW, pdbs=[none_left])
    assert result.victims == ("default/c", "default/d")


def test_taints_and_affinity_choose_the_node() -> None:
    qs = [Queue("q1"), Queue("q2")]
    tainted = node("n1", cpu=2.0, taints=(Taint("dedicated", "gpu", "NoSchedule"),))
    labelled = node("n3", cpu=2.0, labels={"zone": "b"})
    pods = [on(qpod("a", "q1", 2, started=NOW - 10), "n1"), on(qpod("b", "q1", 2, started=NOW - 20), "n2"),
            on(qpod("c", "q1", 2, started=NOW - 30), "n3")]  # fmt: skip
    waiting = qpod("w", "q2", 2, running=False)
    nodes = [tainted, node("n2", cpu=2.0), labelled]
    # a is the cheapest, but on a node the pod does not tolerate
    assert decide(qs, nodes, [*pods, waiting], NOW).reclaims == (Reclaim("default/w", "n2", ("default/b",)),)
    term = NodeSelector((NodeSelectorTerm((Requirement("zone", "In", ("b",)),)),))
    picky = replace(waiting, node_affinity=term)
    assert decide(qs, nodes, [*pods, picky], NOW).reclaims == (Reclaim("default/w", "n3", ("default/c",)),)
    tolerant = replace(waiting, tolerations=(Toleration("dedicated", "Exists", "", "NoSchedule"),))
    assert decide(qs, nodes, [*pods, tolerant], NOW).reclaims == (Reclaim("default/w", "n1", ("default/a",)),)


def test_a_full_pod_count_needs_a_victim_too() -> None:
    """w1 fits the cpu but not the pod count: a goes. w2 would need another slot, but b
    would take q1 below its deserved cpu (when only slots are short, the pod's own
    resources are the ones no donor may go below deserved in)."""
    qs = [Queue("q1"), Queue("q2")]
    pods = [qpod(n, "q1", 1, started=NOW - age) for n, age in (("a", 10), ("b", 20), ("c", 30))]
    waiting = [qpod("w1", "q2", 1, running=False), qpod("w2", "q2", 1, running=False)]
    result = decide(qs, [node(cpu=4.0, pods=3.0)], [*pods, *waiting], NOW)
    assert result.victims == ("default/a",)
    assert result.unplaced["default/w2"].startswith("NoNodeFits")


def test_later_pods_see_the_room_earlier_ones_took() -> None:
    """Served in the queue's order (higher priority first): the first takes the free room,
    the second gets a victim."""
    qs = [Queue("q1"), Queue("q2")]
    pods = [qpod("a", "q1", 2), qpod("b", "q1", 2), qpod("c", "q1", 2)]
    waiting = [qpod("w-low", "q2", 2, running=False, priority=1), qpod("w-high", "q2", 2, running=False, priority=7)]
    result = decide(qs, [node(cpu=8.0)], [*pods, *waiting], NOW)
    assert result.fits_now == ("default/w-high",)
    assert [r.pod for r in result.reclaims] == ["default/w-low"]


def brute_force(
    pods: list[Pod], room: float, room_of: dict[str, float], want: float
) -> tuple[int, tuple[int, ...]] | None:
    """Fewest victims, then the earliest in victim order (positions in ``pods``, which are
    in victim order): pods' cpu must free ``want`` within each queue's room."""
    for n in range(1, len(pods) + 1):
        for combo in itertools.combinations(range(len(pods)), n):
            taken: dict[str, float] = {}
            for i in combo:
                q = pods[i].labels[QUEUE_LABEL]
                taken[q] = taken.get(q, 0.0) + pods[i].request("cpu")
            if any(v > room_of[q] + 1e-9 for q, v in taken.items()):
                continue
            if room + sum(pods[i].request("cpu") for i in combo) >= want - 1e-9:
                return n, combo
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.integers(0, 1), st.integers(1, 4)), min_size=1, max_size=8),
    want=st.integers(1, 8),
)
def test_search_is_exact_on_small_instances(sizes: list[tuple[int, int]], want: int) -> None:
    """One node, donors d0 and d1 over their deserved, one pending pod: the victims are the
    fewest, then the first in victim order, that free enough within each donor's room."""
    running = [
        qpod(f"p{i}", f"d{q}", float(c), started=NOW - 10 * (i + 1)) for i, (q, c) in enumerate(sizes)
    ]
    used = sum(p.request("cpu") for p in running)
    qs = [Queue("d0"), Queue("d1"), Queue("s", weight=20)]
    waiting = qpod("w", "s", float(want), running=False)
    result = decide(qs, [node(cpu=used)], [*running, waiting], NOW)
    shares = {n: s.deserved.get("cpu", 0.0) for n, s in result.status.items()}
    room_of = {q: max(0.0, result.status[q].allocated["cpu"] - shares[q]) for q in ("d0", "d1")}
    if want > shares["s"] + 1e-9:
        assert result.unplaced.get("default/w") == "AboveDeserved"
        return
    ordered = sorted(running, key=lambda p: p.running_seconds(NOW))  # victim order: youngest first
    expected = brute_force(ordered, 0.0, room_of, float(want))
    if expected is None:
        assert result.victims == ()
        return
    assert result.exact
    assert result.victims == tuple(ordered[i].key for i in expected[1])


# -- properties ------------------------------------------------------------------------------
queue_specs = st.lists(
    st.tuples(
        st.integers(1, 5),  # weight
        st.one_of(st.none(), st.integers(0, 40)),  # capability cpu
        st.integers(0, 10),  # guarantee cpu
        st.integers(0, 40),  # request cpu
        st.integers(0, 40),  # request memory (GB)
    ),
    min_size=1,
    max_size=7,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(specs=queue_specs, total_cpu=st.integers(0, 60), total_mem=st.integers(0, 60))
def test_deserved_bounds(
    specs: list[tuple[int, int | None, int, int, int]], total_cpu: int, total_mem: int
) -> None:
    queues = []
    requests = {}
    for i, (weight, cap, guar, req_cpu, req_mem) in enumerate(specs):
        capability = {"cpu": float(cap)} if cap is not None else {}
        guarantee = {"cpu": float(min(guar, cap) if cap is not None else guar)}
        queues.append(Queue(f"q{i}", weight, capability, guarantee))
        requests[f"q{i}"] = {"cpu": float(req_cpu), "memory": float(req_mem)}
    total = {"cpu": float(total_cpu), "memory": float(total_mem)}
    d = deserved(queues, requests, total)
    for r in ("cpu", "memory"):
        assert sum(d[q.name][r] for q in queues) <= total[r] + 1e-6
        for q in queues:
            value = d[q.name][r]
            assert value >= -1e-9
            g = q.guarantee.get(r, 0.0)
            assert value <= max(min(q.capability.get(r, math.inf), requests[q.name][r]), g) + 1e-6
    if sum(q.guarantee["cpu"] for q in queues) <= total_cpu:
        for q in queues:
            assert d[q.name]["cpu"] >= q.guarantee["cpu"] - 1e-6


pod_specs = st.lists(
    st.tuples(
        st.integers(0, 3),  # queue
        st.integers(1, 3),  # cpu
        st.integers(0, 2),  # memory (GB)
        st.sampled_from([True, True, False]),  # running (else pending)
        st.integers(0, 3),  # priority
    ),
    min_size=2,
    max_size=16,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    pods_spec=pod_specs,
    weights=st.tuples(*[st.integers(1, 3)] * 4),
    reclaimable=st.tuples(*[st.sampled_from([True, True, False])] * 4),
    guarantees=st.tuples(*[st.integers(0, 3)] * 4),
    cpu=st.integers(4, 16),
)
def test_victims_never_take_a_queue_below_deserved(
    pods_spec: list[tuple[int, int, int, bool, int]],
    weights: tuple[int, ...],
    reclaimable: tuple[bool, ...],
    guarantees: tuple[int, ...],
    cpu: int,
) -> None:
    queues = [
        Queue(f"q{i}", weights[i], {}, {"cpu": float(guarantees[i])}, reclaimable[i])
        for i in range(4)
    ]
    # cpu only (a victim may take its queue below deserved only in a resource the pod is
    # not short of), on two nodes, running pods alternating between them
    pods = [
        on(qpod(f"p{i}", f"q{q}", c, running=run, priority=prio, started=NOW - 10 * i), f"n{i % 2}")
        if run else qpod(f"p{i}", f"q{q}", c, running=False, priority=prio)
        for i, (q, c, _m, run, prio) in enumerate(pods_spec)
    ]  # fmt: skip
    nodes = [node("n0", cpu=float(cpu)), node("n1", cpu=float(cpu))]
    result = decide(queues, nodes, pods, NOW)
    by_key = {p.key: p for p in pods}
    victims = [by_key[k] for k in result.victims]
    assert len(set(result.victims)) == len(victims)
    for q in queues:
        mine = [v for v in victims if v.labels[QUEUE_LABEL] == q.name]
        if mine:
            assert q.reclaimable
            left = result.status[q.name].allocated["cpu"] - sum(v.request("cpu") for v in mine)
            assert left >= result.status[q.name].deserved["cpu"] - 1e-6
    # replayed in order on a snapshot, each pod fits its node once its victims are gone
    snap = Snapshot.build(nodes, pods)
    for key in result.fits_now:
        pod = by_key[key]
        there = next(n.name for n in nodes if why_not(pod, snap[n.name]) is None)
        snap.place(pod, there)
    for r in result.reclaims:
        pod = by_key[r.pod]
        assert why_not(pod, snap[r.node]) is not None  # it needed them
        for v in r.victims:
            assert by_key[v].node_name == r.node
            snap.remove(by_key[v], r.node)
        assert why_not(pod, snap[r.node]) is None
        snap.place(pod, r.node)


def test_no_more_victims_while_the_last_ones_are_leaving() -> None:
    """The next round, the victim is still terminating and the pod still pending, nominated
    to its node: no second victim (the scheduler's rule), and its room stays counted."""
    qs = [Queue("q1"), Queue("q2")]
    pods = [qpod("a", "q1", 2, started=NOW - 10), qpod("b", "q1", 2), qpod("c", "q1", 2)]
    waiting = [qpod("w1", "q2", 2, running=False), qpod("w2", "q2", 2, running=False)]
    first = decide(qs, [node(cpu=6.0)], [*pods, *waiting], NOW)
    assert [(r.pod, r.victims) for r in first.reclaims] == [("default/w1", ("default/a",))]
    leaving = replace(pods[0], deletion_time=NOW)
    nominated = replace(waiting[0], nominated_node="n1")
    # (w2: q2 deserves 3 cpu, so one 2-cpu pod is its share)
    second = decide(qs, [node(cpu=6.0)], [leaving, *pods[1:], nominated, waiting[1]], NOW)
    assert second.victims == ()
    assert second.unplaced["default/w1"] == "VictimsLeaving n1"
