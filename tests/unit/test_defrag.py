"""Defragmentation (its arguments: test_args_defrag.py): source/target rules, the all-or-nothing drain, reservations,
fragmentation, and properties every plan must have."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.cluster.defrag import DefragArgs, DefragPlan, plan_defrag, stays
from agent.cluster.defrag.targets import Targets
from agent.cluster.placement import Snapshot, holds_by_node, why_not
from agent.errors import InvalidObject
from agent.model.objects import Node, Pod, parse_node, parse_pod
from agent.model.reservation import parse_reservation
from agent.model.timeutil import format_time, parse_time
from agent.scenario import Scenario, parse_scenario
from agent.simulate.sections import run_section
from tests import builders

NOW = parse_time("2026-01-01T00:00:00Z") or 0.0


def node(name: str, cpu: float = 10, labels: dict[str, str] | None = None, **extra: Any) -> Node:
    return parse_node(builders.node(
        name, str(cpu), "64Gi", labels, pods=str(extra.pop("pods", 110)),
        annotations=extra.pop("annotations", {}), spec=extra.pop("spec", None),
        alloc=extra.pop("alloc", None), ready=extra.pop("ready", "True") == "True", hostname=True))


def pod(
    name: str,
    node_name: str,
    cpu: float,
    ns: str = "default",
    owner: str | None = "ReplicaSet",
    **spec: Any,
) -> Pod:
    return parse_pod(builders.pod(
        name, namespace=ns, node_name=node_name, uid=f"uid-{ns}-{name}", started=None, ready=None,
        labels=spec.pop("labels", None), annotations=spec.pop("annotations", None),
        requests={"cpu": str(cpu), **spec.pop("requests", {})}, owner_kind=owner,
        owner_name=f"{name}-{(owner or '').lower()}", owner_uid=f"{owner}-{name}",
        container_name="m", spec=spec))


def plan(
    nodes: list[Node], pods: list[Pod], args: DefragArgs | None = None, holds: Any = None
) -> DefragPlan:
    by_node: dict[str, list[Pod]] = defaultdict(list)
    for p in pods:
        by_node[p.node_name].append(p)
    return plan_defrag(nodes, by_node, args or DefragArgs(), NOW, holds)


def simulate_section(scenario: Scenario) -> dict[str, Any] | None:
    return run_section("defrag", scenario)


def moves(result: DefragPlan) -> list[tuple[str, str, str]]:
    return [(m.pod.name, m.source, m.target) for m in result.migrations]


def basic() -> tuple[list[Node], list[Pod]]:
    """The shared defrag-basic example: n1 75%, n2 80%, n3 20% (1.5 + 0.5), n4 50%."""
    nodes = [node("n1"), node("n2"), node("n3"), node("n4")]
    pods = [
        pod("a0", "n1", 4), pod("a1", "n1", 3.5),
        pod("b0", "n2", 4), pod("b1", "n2", 4),
        pod("p3a", "n3", 1.5), pod("p3b", "n3", 0.5),
        pod("d0", "n4", 5),
    ]  # fmt: skip
    return nodes, pods


# -- the worked example ---------------------------------------------------------------------------


def test_basic_example_by_hand() -> None:
    """n3 (20%) is the only source. Targets n2 (80%) then n1 (75%). p3a (1.5 = 15%) cannot
    go to n2 (95% > 90%) and goes to n1 (90%, which leaves the target set); p3b (0.5)
    goes to n2 (85%). n4 (50%) is neither source nor target."""
    nodes, pods = basic()
    result = plan(nodes, pods)
    assert moves(result) == [("p3a", "n3", "n1"), ("p3b", "n3", "n2")]
    assert result.source_nodes == ("n3",) and result.freed_nodes == ("n3",)
    assert result.utilization_before == {"n1": 75.0, "n2": 80.0, "n3": 20.0, "n4": 50.0}
    assert result.utilization_after == pytest.approx(
        {"n1": 90.0, "n2": 85.0, "n3": 0.0, "n4": 50.0}
    )


def test_fragmentation_before_and_after() -> None:
    """Median pod 4 cores. Free before: n1 2.5, n2 2, n3 8, n4 5 -> 4.5 of 17.5 stranded;
    after: n1 1, n2 1.5, n3 10, n4 5 -> 2.5 of 17.5."""
    nodes, pods = basic()
    result = plan(nodes, pods)
    assert result.fragmentation_before == pytest.approx(4.5 / 17.5)
    assert result.fragmentation_after == pytest.approx(2.5 / 17.5)


def test_plan_does_not_change_its_inputs() -> None:
    nodes, pods = basic()
    first = plan(nodes, pods)
    assert moves(plan(nodes, pods)) == moves(first)


# -- sources ------------------------------------------------------------------------------------


def test_number_of_nodes_is_a_gate() -> None:
    nodes, pods = basic()
    gated = plan(nodes, pods, DefragArgs(number_of_nodes=1))
    assert gated.migrations == () and not gated.acted
    assert gated.source_nodes == ("n3",)
    nodes.append(node("n5"))
    pods.append(pod("e0", "n5", 1))
    opened = plan(nodes, pods, DefragArgs(number_of_nodes=1))
    assert opened.acted and opened.source_nodes == ("n5", "n3")  # 10% before 20%


def test_sources_least_used_first() -> None:
    nodes = [node("t1"), node("t2"), node("s1"), node("s2")]
    pods = [pod("x1", "t1", 8), pod("x2", "t2", 7.5), pod("a", "s1", 2), pod("b", "s2", 1)]
    result = plan(nodes, pods)
    assert result.source_nodes == ("s2", "s1")
    # s2's 1 core takes t1 from 80% to 90%; s1's 2 cores would take t2 from 75% to 95%.
    assert moves(result) == [("b", "s2", "t1")]
    assert result.freed_nodes == ("s2",)
    assert result.skipped["s1"].startswith("NoTarget")


def test_critical_nodes_are_never_sources() -> None:
    nodes, pods = basic()
    nodes[2] = node("n3", labels={"critical": "true"})
    result = plan(nodes, pods)
    assert result.source_nodes == () and result.migrations == ()
    assert result.skipped == {"n3": "Critical"}


@pytest.mark.parametrize(
    ("age_seconds", "source"), [(60, False), (3599, False), (3600, True), (7200, True)]
)
def test_cool_down_after_the_last_defrag(age_seconds: int, source: bool) -> None:
    nodes, pods = basic()
    stamp = NOW - age_seconds
    nodes[2] = node("n3", annotations={"qos.waterline.io/last-defrag-time": format_time(stamp)})
    result = plan(nodes, pods, DefragArgs(cool_down_seconds=3600))
    assert (result.source_nodes == ("n3",)) is source
    assert plan(nodes, pods, DefragArgs(cool_down_seconds=0)).source_nodes == ("n3",)


def test_node_holding_a_reservation_is_not_a_source() -> None:
    nodes, pods = basic()
    res = parse_reservation(_reservation("r", "n3", "1"))
    result = plan(nodes, pods, holds=holds_by_node([res], NOW))
    assert result.source_nodes == () and result.skipped == {"n3": "HoldsReservation"}


# -- pods of a source -------------------------------------------------------------------------------


def test_daemonset_and_mirror_pods_stay_and_do_not_block() -> None:
    nodes, pods = basic()
    pods.append(pod("ds", "n3", 0.2, owner="DaemonSet"))
    pods.append(
        pod("static", "n3", 0.1, owner=None, annotations={"kubernetes.io/config.mirror": "x"})
    )
    result = plan(nodes, pods)
    assert result.freed_nodes == ("n3",)
    assert {m.pod.name for m in result.migrations} == {"p3a", "p3b"}
    assert result.utilization_after["n3"] == pytest.approx(3.0)


@pytest.mark.parametrize(
    "blocker",
    [
        pod("bare", "n3", 0.1, owner=None),
        pod("guarded", "n3", 0.1, annotations={"qos.waterline.io/protected": "true"}),
        pod("system", "n3", 0.1, ns="kube-system"),
    ],
)
def test_one_unmigratable_pod_keeps_the_whole_source(blocker: Pod) -> None:
    nodes, pods = basic()
    result = plan(nodes, pods + [blocker])
    assert result.migrations == () and result.freed_nodes == ()
    assert result.skipped["n3"].startswith("NotMigratable")


def test_evictable_namespaces_include() -> None:
    nodes, pods = basic()
    assert plan(nodes, pods, DefragArgs(include_namespaces=("batch",))).migrations == ()
    assert len(plan(nodes, pods, DefragArgs(include_namespaces=("default",))).migrations) == 2


def test_a_source_is_drained_only_when_all_of_it_can_move() -> None:
    """n3 (20%): p3a (1.5) fits n1, then p3b (0.5) fits nowhere, so p3a's placement is
    undone and n1 keeps its headroom for the next source n5 (24%), which is freed."""
    nodes, pods = basic()
    pods[5] = pod("p3b", "n3", 0.5, nodeSelector={"pool": "gpu"})
    nodes.append(node("n5"))
    pods += [pod("p5a", "n5", 1.5), pod("p5b", "n5", 0.9)]
    result = plan(nodes, pods)
    assert result.source_nodes == ("n3", "n5")
    assert result.freed_nodes == ("n5",)
    assert moves(result) == [("p5a", "n5", "n1"), ("p5b", "n5", "n2")]
    assert result.skipped["n3"] == "NoTarget default/p3b"
    assert result.utilization_after["n3"] == 20.0


def test_largest_pod_first() -> None:
    nodes = [node("t1"), node("t2"), node("s")]
    pods = [
        pod("f1", "t1", 7.5),
        pod("f2", "t2", 7.2),
        pod("small", "s", 0.5),
        pod("large", "s", 1.5),
    ]
    result = plan(nodes, pods)
    # t1 (75%) first: large 1.5 -> 90%; then small to t2 (72% -> 77%).
    assert moves(result) == [("large", "s", "t1"), ("small", "s", "t2")]


# -- targets ---------------------------------------------------------------------------------------


def test_cordoned_and_not_ready_nodes_are_never_targets() -> None:
    nodes, pods = basic()
    nodes[0] = node("n1", spec={"unschedulable": True})
    nodes[1] = node("n2", ready="False")
    result = plan(nodes, pods)
    assert result.migrations == () and result.skipped["n3"].startswith("NoTarget")


def test_target_window_is_open_on_both_ends() -> None:
    nodes = [node("at70"), node("at90"), node("s")]
    pods = [pod("a", "at70", 7), pod("b", "at90", 9), pod("m", "s", 0.1)]
    result = plan(nodes, pods)
    assert result.migrations == ()


def test_sources_are_never_targets() -> None:
    nodes = [node("s1"), node("s2")]
    pods = [pod("a", "s1", 1), pod("b", "s2", 2)]
    result = plan(nodes, pods, DefragArgs(low_threshold=50, defragment_threshold=5))
    assert result.migrations == ()


@pytest.mark.parametrize(
    ("blocking", "label"),
    [
        ({"nodeSelector": {"pool": "batch"}}, "nodeSelector"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "matchFields",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["batch"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "matchExpressions",
        ),
    ],
)
def test_pods_follow_node_selection_to_the_less_full_target(
    blocking: dict[str, Any], label: str
) -> None:
    """n2 (80%) is the first choice; a pod restricted to n1 goes to n1 instead."""
    nodes, pods = basic()
    nodes[0] = node("n1", labels={"pool": "batch"})
    pods[4] = pod("p3a", "n3", 0.5)
    pods[5] = pod("p3b", "n3", 0.4, **blocking)
    assert moves(plan(nodes, pods)) == [("p3a", "n3", "n2"), ("p3b", "n3", "n1")], label


def test_taints_block_targets_unless_tolerated() -> None:
    nodes, pods = basic()
    nodes[0] = node(
        "n1", spec={"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}
    )
    result = plan(nodes, pods)
    assert result.migrations == ()  # p3a does not fit n2 and n1 is tainted
    tolerant = [{"key": "dedicated", "operator": "Exists"}]
    pods[4] = pod("p3a", "n3", 1.5, tolerations=tolerant)
    assert moves(plan(nodes, pods)) == [("p3a", "n3", "n1"), ("p3b", "n3", "n2")]
    nodes[0] = node(
        "n1", spec={"taints": [{"key": "dedicated", "value": "db", "effect": "PreferNoSchedule"}]}
    )
    assert len(plan(nodes, basic()[1]).migrations) == 2


def test_pod_count_blocks_a_full_target() -> None:
    nodes, pods = basic()
    nodes[0] = node("n1", pods=2)
    assert plan(nodes, pods).migrations == ()


def test_anti_affinity_against_a_pod_moved_earlier_in_the_plan() -> None:
    """Two replicas that must not share a host: the second one goes elsewhere."""
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    aff = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    nodes = [node("t1"), node("t2"), node("s")]
    pods = [
        pod("f1", "t1", 7.5), pod("f2", "t2", 7.2),
        pod("web-1", "s", 0.6, labels={"app": "web"}, affinity=aff),
        pod("web-2", "s", 0.5, labels={"app": "web"}, affinity=aff),
    ]  # fmt: skip
    assert moves(plan(nodes, pods)) == [("web-1", "s", "t1"), ("web-2", "s", "t2")]


def test_anti_affinity_of_a_pod_already_on_the_target() -> None:
    term = {
        "labelSelector": {"matchLabels": {"role": "batch"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    aff = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    nodes, pods = basic()
    pods[2] = pod("b0", "n2", 4, affinity=aff)  # n2 is the first choice
    pods[4] = pod("p3a", "n3", 0.5, labels={"role": "batch"})
    result = plan(nodes, pods)
    assert moves(result) == [("p3a", "n3", "n1"), ("p3b", "n3", "n1")]
    pods[4] = pod("p3a", "n3", 0.5)
    assert moves(plan(nodes, pods))[0] == ("p3a", "n3", "n2")


def test_every_requested_resource_must_fit() -> None:
    """n2 has the cpu but not the memory: p3a goes to n1."""
    nodes, pods = basic()
    nodes[1] = node("n2", alloc={"memory": "3Gi"})
    pods[2] = pod("b0", "n2", 4, requests={"memory": "2Gi"})
    pods[4] = pod("p3a", "n3", 0.5, requests={"memory": "2Gi"})
    result = plan(nodes, pods)
    assert moves(result)[0] == ("p3a", "n3", "n1")


def test_gpu_resource_type() -> None:
    gpu = {"nvidia.com/gpu": "8"}
    nodes = [node("g1", alloc=gpu), node("g2", alloc=gpu), node("cpu-only")]
    pods = [
        pod("train", "g1", 1, requests={"nvidia.com/gpu": "6"}),
        pod("infer", "g2", 1, requests={"nvidia.com/gpu": "1"}),
        pod("web", "cpu-only", 1),
    ]
    result = plan(
        nodes,
        pods,
        DefragArgs(resource_type="nvidia.com/gpu", low_threshold=20, defragment_threshold=70),
    )
    assert moves(result) == [("infer", "g2", "g1")]
    assert "cpu-only" not in result.utilization_before
    assert result.utilization_after == {"g1": 87.5, "g2": 0.0}


# -- reservations ----------------------------------------------------------------------------------


def _reservation(
    name: str, node_name: str, cpu: str, owners: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": cpu}}}]}
            },
            "owners": owners or [{"labelSelector": {"matchLabels": {"app": "incoming"}}}],
            "ttl": "0",
        },
        "status": {"phase": "Available", "nodeName": node_name},
    }


def test_reserved_capacity_on_a_target_is_not_free_for_others() -> None:
    nodes, pods = basic()
    res = parse_reservation(_reservation("r", "n1", "1"))
    result = plan(nodes, pods, holds=holds_by_node([res], NOW))
    assert result.migrations == ()  # p3a would take n1 to 75 + 10 reserved + 15 > 90


def test_owners_may_use_the_reservation() -> None:
    nodes, pods = basic()
    pods[4] = pod("p3a", "n3", 1.5, labels={"app": "incoming"})
    res = parse_reservation(_reservation("r", "n1", "1"))
    result = plan(nodes, pods, holds=holds_by_node([res], NOW))
    assert moves(result) == [("p3a", "n3", "n1"), ("p3b", "n3", "n2")]


# -- the simulate section --------------------------------------------------------------------------


def test_simulate_section_absent_without_config() -> None:
    assert simulate_section(parse_scenario({"objects": []})) is None


def test_simulate_section_report_shape_and_reservations() -> None:
    doc = {
        "now": "2026-01-01T00:00:00Z",
        "config": {"defrag": {"resourceType": "cpu"}},
        "objects": [
            {
                "kind": "Node",
                "metadata": {"name": "n1"},
                "status": {"allocatable": {"cpu": "10", "pods": "110"}},
            },
            {
                "kind": "Node",
                "metadata": {"name": "n2"},
                "status": {"allocatable": {"cpu": "10", "pods": "110"}},
            },
            {
                "kind": "Pod",
                "metadata": {
                    "name": "a",
                    "namespace": "default",
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": "a", "uid": "a", "controller": True}
                    ],
                },
                "spec": {
                    "nodeName": "n1",
                    "containers": [{"name": "m", "resources": {"requests": {"cpu": "8"}}}],
                },
                "status": {"phase": "Running"},
            },
            {
                "kind": "Pod",
                "metadata": {
                    "name": "b",
                    "namespace": "default",
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": "b", "uid": "b", "controller": True}
                    ],
                },
                "spec": {
                    "nodeName": "n2",
                    "containers": [{"name": "m", "resources": {"requests": {"cpu": "1"}}}],
                },
                "status": {"phase": "Running"},
            },
            _reservation("r", "n1", "500m"),
        ],
    }
    out = simulate_section(parse_scenario(doc))
    assert out is not None
    # 80% + 5% reserved + 10% = 95% > 90%: the reservation keeps b where it is.
    assert out["migrations"] == []
    assert out["utilization"] == {
        "before": {"n1": 80.0, "n2": 10.0},
        "after": {"n1": 80.0, "n2": 10.0},
    }
    assert set(out["fragmentation"]) == {"before", "after"}
    assert out["sourceNodes"] == ["n2"] and out["freedNodes"] == []


def test_simulate_section_rejects_bad_args_naming_the_field() -> None:
    doc = {"config": {"defrag": {"protectionThresholds": 150}}, "objects": []}
    with pytest.raises(InvalidObject, match="protectionThresholds"):
        simulate_section(parse_scenario(doc))


# -- properties ------------------------------------------------------------------------------------

LABELS = st.sampled_from(["a", "b", "c"])


def _constraints(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"labels": {"app": draw(LABELS)}}
    if draw(st.integers(0, 4)) == 0:
        spec["nodeSelector"] = {"pool": draw(LABELS)}
    if draw(st.integers(0, 3)) == 0:
        term = {
            "labelSelector": {"matchLabels": {"app": draw(LABELS)}},
            "topologyKey": "kubernetes.io/hostname",
        }
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "t", "operator": "Exists"}]
    return spec


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod]]:
    """Nodes that are mostly either nearly empty (sources) or well filled (targets), with
    every placement constraint drawn now and then."""
    nodes: list[Node] = []
    pods: list[Pod] = []
    for i in range(draw(st.integers(3, 9))):
        effect = draw(st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", None, None]))
        cpu = draw(st.sampled_from([8, 10, 16]))
        n = node(
            f"n{i}",
            cpu=cpu,
            labels={"pool": draw(LABELS)},
            pods=draw(st.integers(3, 10)),
            alloc={"memory": f"{draw(st.sampled_from([8, 16, 64]))}Gi"},
            spec={
                "taints": [{"key": "t", "value": "x", "effect": effect}] if effect else [],
                "unschedulable": draw(st.integers(0, 6)) == 0,
            },
            ready=draw(st.sampled_from(["True"] * 6 + ["False"])),
        )
        nodes.append(n)
        if draw(st.integers(0, 2)) > 0:  # a well-filled node: one big filler pod
            fill = draw(st.sampled_from([0.55, 0.65, 0.7, 0.75, 0.8]))
            pods.append(pod(f"fill{i}", n.name, round(cpu * fill, 2), **_constraints(draw)))
        for j in range(draw(st.integers(0, 3))):
            owner = draw(st.sampled_from(["ReplicaSet"] * 4 + ["DaemonSet", None]))
            size = draw(st.sampled_from([0.1, 0.25, 0.5, 0.8, 1.0, 1.5]))
            memory = f"{draw(st.integers(0, 6))}Gi"
            pods.append(
                pod(
                    f"p{i}-{j}",
                    n.name,
                    size,
                    owner=owner,
                    requests={"memory": memory},
                    **_constraints(draw),
                )
            )
    return nodes, pods


ARGS = st.builds(
    DefragArgs,
    low_threshold=st.sampled_from([20.0, 30.0, 50.0]),
    defragment_threshold=st.sampled_from([50.0, 60.0, 70.0]),
    protection_threshold=st.sampled_from([80.0, 90.0, 100.0]),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), ARGS)
def test_plan_never_overfills_breaks_a_constraint_or_half_drains(
    cluster: tuple[list[Node], list[Pod]], args: DefragArgs
) -> None:
    nodes, pods = cluster
    result = plan(nodes, pods, args)
    by_name = {n.name: n for n in nodes}
    moved = {m.pod.uid: m.target for m in result.migrations}
    sources = set(result.source_nodes)

    # Only freed nodes lose pods, and a freed node keeps only pods that stay.
    assert {m.source for m in result.migrations} <= set(result.freed_nodes) <= sources
    for name in result.freed_nodes:
        assert all(stays(p) for p in pods if p.node_name == name and p.uid not in moved)

    # Targets were in the window, never sources, cordoned or NotReady.
    before = result.utilization_before
    for m in result.migrations:
        target = by_name[m.target]
        assert m.target not in sources and target.ready and not target.unschedulable
        assert args.defragment_threshold < before[m.target] < args.protection_threshold

    # Replaying the migrations in plan order, each passes every placement check.
    snap = Snapshot.build(nodes, [p for p in pods if p.uid not in moved])
    start = {m.target: dict(snap[m.target].used) for m in result.migrations}
    for m in result.migrations:
        assert why_not(m.pod, snap[m.target], ("cpu", args.protection_threshold)) is None
        snap.place(m.pod, m.target)

    # The final state: nothing overfilled, no hostname anti-affinity broken by a move.
    for name in {m.target for m in result.migrations}:
        state, target = snap[name], by_name[name]
        for resource, used in state.used.items():
            # A node already over on a resource (the generator allows it) gets none of it.
            room = max(target.allocatable.get(resource, 0.0), start[name].get(resource, 0.0))
            assert used <= room + 1e-6
        assert state.utilization("cpu") <= args.protection_threshold + 1e-6
        assert len(state.pods) <= target.max_pods
        for p in state.pods:
            for o in state.pods:
                if o is p or (p.uid not in moved and o.uid not in moved):
                    continue
                for term in p.anti_affinity:
                    if term.topology_key == "kubernetes.io/hostname":
                        selects = o.namespace in (term.namespaces or (p.namespace,))
                        assert not (selects and term.selector.matches(o.labels))


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), ARGS)
def test_the_blocked_target_index_never_changes_the_plan(
    cluster: tuple[list[Node], list[Pod]], args: DefragArgs
) -> None:
    """Tiny blocks (many splits, removals and block skips) plan exactly as one big block."""
    nodes, pods = cluster
    saved = Targets.BLOCK
    try:
        Targets.BLOCK = 1
        small = plan(nodes, pods, args)
        Targets.BLOCK = 10_000
        large = plan(nodes, pods, args)
    finally:
        Targets.BLOCK = saved
    assert moves(small) == moves(large)
    assert small.freed_nodes == large.freed_nodes


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(50, 95), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 29), st.integers(-20, 20)), max_size=60),
    st.integers(1, 4),
)
def test_target_index_invariants_under_updates(
    fills: list[int], changes: list[tuple[int, int]], block: int
) -> None:
    """After any sequence of usage changes: the index holds exactly the nodes inside the
    window, sorted fullest first, and no block under-states its best headroom (a block
    skipped for lack of room really has none)."""
    args = DefragArgs()
    nodes = [node(f"n{i:02d}") for i in range(len(fills))]
    pods = [
        pod(f"f{i}", n.name, fill / 10)
        for i, (n, fill) in enumerate(zip(nodes, fills, strict=True))
    ]
    snap = Snapshot.build(nodes, pods)
    saved = Targets.BLOCK
    try:
        Targets.BLOCK = block
        index = Targets(list(snap.states.values()), args)
        for which, delta in changes:
            state = snap.states[nodes[which % len(nodes)].name]
            old = index.key_of(state)
            state.used["cpu"] = max(0.0, state.used["cpu"] + delta / 10)
            index.update(state, old)
            inside = sorted(
                (-s.utilization("cpu"), s.name)
                for s in snap.states.values()
                if args.defragment_threshold < s.utilization("cpu") < args.protection_threshold
            )
            assert [k for b in index.blocks for k in b] == inside
            for b, best in zip(index.blocks, index.maxes, strict=True):
                assert best >= max(index.limit[n] - snap[n].used["cpu"] for _, n in b) - 1e-9
    finally:
        Targets.BLOCK = saved
