"""DaemonSet preemption: detection, classes and order, the two strategies (its arguments:
test_args_daemonset.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.cluster.daemonset import (
    OPT_OUT_LABEL,
    OPTED_OUT,
    OWNER,
    REGULAR,
    DaemonSetArgs,
    Preemption,
    decide,
    deviation,
    dominant_resource,
    may_preempt,
    owner_uids,
    pending_daemonset_pods,
    plan,
    victim_class,
)
from agent.cluster.daemonset.plan import LEAVING_SECONDS
from agent.model.objects import MIRROR_ANNOTATION, Node, OwnerRef, Pod
from agent.model.selectors import NodeSelector, NodeSelectorTerm, Requirement
from agent.model.store import ObjectStore
from tests.builders import node_object

NOW = 1_000_000.0
MI = 2.0**20


def node(
    name: str = "n1", cpu: float = 4.0, memory: float = 16 * 2**30, pods: float = 110.0
) -> Node:
    return node_object(name, cpu, memory, pods)


def pod(
    name: str,
    cpu: float | None = 1.0,
    memory: float | None = 100 * MI,
    priority: int = 0,
    age: float = 3600.0,
    labels: dict[str, str] | None = None,
    **kw: object,
) -> Pod:
    requests = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    fields: dict[str, Any] = {
        "node_name": "n1",
        "priority": priority,
        "phase": "Running",
        "creation_time": NOW - age,
        "labels": labels or {},
        "requests": requests,
        "owners": (OwnerRef("ReplicaSet", f"{name}-rs", f"uid-rs-{name}", True),),
    }
    fields.update(kw)
    return Pod("default", name, f"uid-{name}", **fields)  # type: ignore[arg-type]


def ds_pod(
    name: str = "fluentd",
    cpu: float | None = 1.0,
    memory: float | None = 100 * MI,
    on: str = "n1",
    age: float = 120.0,
    **kw: object,
) -> Pod:
    affinity = NodeSelector(
        (NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", (on,)),)),)
    )
    fields: dict[str, Any] = {
        "node_name": "",
        "phase": "Pending",
        "priority": 2_000_001_000,
        "node_affinity": affinity,
        "owners": (OwnerRef("DaemonSet", "logging", "uid-ds", True),),
    }
    fields.update(kw)
    p = pod(name, cpu, memory, age=age, **fields)
    return Pod("kube-system", p.name, p.uid, **{f: getattr(p, f) for f in _FIELDS})


_FIELDS = [f for f in Pod.__dataclass_fields__ if f not in ("namespace", "name", "uid")]


def run(pods: list[Pod], nodes: list[Node] | None = None, **args: object) -> dict[str, Preemption]:
    nodes = nodes or [node()]
    result = decide({n.name: n for n in nodes}, pods, NOW, DaemonSetArgs(**args).validate())  # type: ignore[arg-type]
    assert result.pending
    return {p.pod: p for p in result.preemptions}


# -- detection ----------------------------------------------------------------------------
def test_pending_pods_bound_by_affinity_or_node_name_oldest_first() -> None:
    nodes = {"n1": node(), "n2": node("n2")}
    by_name = ds_pod("by-name", node_name="n2", node_affinity=None, age=50)
    by_affinity = ds_pod("by-affinity", age=500)
    unknown_node = ds_pod("elsewhere", on="n9")
    running = ds_pod("running", phase="Running", node_name="n1")
    not_ds = pod("plain", node_name="", phase="Pending")
    found = pending_daemonset_pods([by_name, by_affinity, unknown_node, running, not_ds], nodes)
    assert [(p.name, n) for p, n in found] == [("by-affinity", "n1"), ("by-name", "n2")]


def test_no_pending_daemonset_pod_means_an_empty_plan() -> None:
    empty = decide({"n1": node()}, [pod("a")], NOW)
    assert empty.pending == () and empty.preemptions == () and empty.victims == ()


def test_plan_reads_the_snapshot_and_lists_every_victim() -> None:
    store = ObjectStore(nodes={"n1": node()}, pods=[pod("a", 4.0), ds_pod(age=40)])
    result = plan(store, DaemonSetArgs(), NOW)
    assert result.pending == ("kube-system/fluentd",)
    assert result.victims == ("default/a",)


def test_start_delay() -> None:
    full = [pod("a", 4.0)]
    assert run([*full, ds_pod(age=20)]) == {}
    assert "kube-system/fluentd" in run([*full, ds_pod(age=40)])
    assert run([*full, ds_pod(age=40)], preemption_start_delay=60) == {}


def test_a_pod_that_fits_gets_no_entry() -> None:
    assert run([pod("a", 2.0), ds_pod(cpu=2.0)]) == {}


def test_fit_counts_every_requested_resource_and_pod_slots() -> None:
    # cpu fits, memory does not
    tight = node(memory=1000 * MI)
    out = run(
        [pod("a", 0.5, 950 * MI), ds_pod(cpu=0.5, memory=100 * MI)], [tight], strategy=("multiple",)
    )
    assert out["kube-system/fluentd"].victims == ("default/a",)
    # plenty of everything but pod slots
    out = run([pod("a", 0.1), pod("b", 0.1), ds_pod(cpu=0.1)], [node(pods=2)])
    assert out["kube-system/fluentd"].victims == ("default/a",)  # full tie: by name


def test_a_stuck_terminating_pod_still_holds_room_but_is_no_victim() -> None:
    stuck = pod("stuck", 2.0, deletion_time=NOW - LEAVING_SECONDS - 1)  # past its deadline
    out = run([stuck, pod("a", 2.0), ds_pod(cpu=2.0)], strategy=("multiple",))
    assert out["kube-system/fluentd"].victims == ("default/a",)


def test_room_on_the_way_means_no_new_victims() -> None:
    """An earlier round's victim still terminating (within its grace period, or just
    past it): the pod fits once it goes, so nobody else is evicted meanwhile; where the
    leaving pod is not enough, victims are found for the rest only."""
    going = pod("going", 2.0, deletion_time=NOW + 30)
    assert run([going, pod("a", 2.0), ds_pod(cpu=2.0)], strategy=("multiple",)) == {}
    just_past = pod("going", 2.0, deletion_time=NOW - LEAVING_SECONDS)
    assert run([just_past, pod("a", 2.0), ds_pod(cpu=2.0)], strategy=("multiple",)) == {}
    small = pod("going", 0.5, deletion_time=NOW + 30)
    out = run([small, pod("a", 2.0), pod("b", 1.5), ds_pod(cpu=2.0)], strategy=("multiple",))
    assert out["kube-system/fluentd"].victims


# -- classes and order ----------------------------------------------------------------------
def test_classes() -> None:
    owner = pod("owner")
    child = pod("child", owners=(OwnerRef("Pod", "owner", "uid-owner"),))
    opted = pod("opted", labels={OPT_OUT_LABEL: "false"})
    both = pod("both", labels={OPT_OUT_LABEL: "false"})
    child_of_both = pod("c2", owners=(OwnerRef("Pod", "both", ""),))
    owners = owner_uids([owner, child, opted, both, child_of_both])
    assert victim_class(owner, owners) == OWNER
    assert victim_class(child, owners) == REGULAR
    assert victim_class(opted, owners) == OPTED_OUT
    assert victim_class(both, owners) == OPTED_OUT  # both: opted-out wins
    assert victim_class(pod("x", labels={OPT_OUT_LABEL: "true"}), owners) == REGULAR


def test_never_victims() -> None:
    ds = ds_pod(priority=100)
    assert may_preempt(pod("same", priority=100), ds)
    assert not may_preempt(pod("higher", priority=101), ds)
    assert not may_preempt(pod("mirror", annotations={MIRROR_ANNOTATION: "x"}), ds)
    assert not may_preempt(pod("other-ds", owners=(OwnerRef("DaemonSet", "x", "u", True),)), ds)


def test_dominant_resource_and_deviation() -> None:
    ds = ds_pod(cpu=1.0, memory=8 * 2**30)
    assert dominant_resource(ds, node(cpu=4.0, memory=16 * 2**30)) == "memory"  # 1/2 > 1/4
    assert dominant_resource(ds, node(cpu=1.0, memory=16 * 2**30)) == "cpu"
    assert dominant_resource(ds_pod(cpu=None, memory=None), node()) is None
    assert deviation(pod("v", 1.1, 8 * 2**30), ds) == pytest.approx(0.1)
    assert deviation(pod("v", 1.0, 4 * 2**30), ds) == pytest.approx(0.5)
    assert deviation(pod("v", 1.0, None), ds) == pytest.approx(1.0)  # requests no memory at all


# -- strategies ------------------------------------------------------------------------------
def test_single_prefers_closest_then_class_order() -> None:
    pods = [
        pod("far", 1.09, priority=0, age=10),
        pod("near", 1.02, priority=5),
        pod("rest", 2.0),
        ds_pod(cpu=1.0),
    ]
    assert run(pods, [node(cpu=4.2)])["kube-system/fluentd"] == Preemption(
        "kube-system/fluentd", "n1", "single", ("default/near",)
    )
    equal = [
        pod("old", 1.0, age=5000),
        pod("young", 1.0, age=50),
        pod("rest", 2.0),
        ds_pod(cpu=1.0),
    ]
    assert run(equal)["kube-system/fluentd"].victims == ("default/young",)
    classes = [
        pod("opted", 1.0, age=50, labels={OPT_OUT_LABEL: "false"}),
        pod("reg", 1.0, priority=9),
        pod("rest", 2.0),
        ds_pod(cpu=1.0),
    ]
    assert run(classes)["kube-system/fluentd"].victims == ("default/reg",)


def test_single_needs_removal_to_fit() -> None:
    """a and b are within deviation but free too little alone: single finds nothing and
    multiple takes the largest request."""
    pods = [pod("a", 0.95), pod("b", 0.95), pod("rest", 2.1), ds_pod(cpu=1.0)]
    out = run(pods)["kube-system/fluentd"]
    assert (out.strategy, out.victims) == ("multiple", ("default/rest",))


def test_deviation_percent_is_configurable() -> None:
    pods = [pod("a", 1.5), pod("b", 2.5), ds_pod(cpu=2.0)]
    roomy = [node(cpu=4.5)]  # either removal makes room
    assert run(pods, roomy, strategy=("single",))["kube-system/fluentd"].strategy is None
    out = run(pods, roomy, strategy=("single",), deviation_percent=30)["kube-system/fluentd"]
    assert out.victims == ("default/a",)  # both 25% off, same class, priority, age: smaller request
    out = run(pods, strategy=("single",), deviation_percent=30)["kube-system/fluentd"]
    assert out.victims == ("default/b",)  # on 4 cpu only b's removal makes room


def test_multiple_walks_classes_in_tiers_largest_first() -> None:
    owner = pod("owner", 2.0)
    child = pod("child", None, None, owners=(OwnerRef("Pod", "owner", "uid-owner"),))
    pods = [
        pod("r", 1.0),
        owner,
        child,
        pod("x", 1.0, labels={OPT_OUT_LABEL: "false"}),
        ds_pod(cpu=2.0),
    ]
    out = run(pods, strategy=("multiple",))["kube-system/fluentd"]
    assert out.victims == ("default/owner",)
    # without the owner class, the opted-out pod is needed with the regular one
    pods = [
        pod("r", 1.0),
        pod("r2", 2.0, priority=10**10),
        pod("x", 1.0, labels={OPT_OUT_LABEL: "false"}),
        ds_pod(cpu=2.0),
    ]
    out = run(pods, strategy=("multiple",))["kube-system/fluentd"]
    assert set(out.victims) == {"default/r", "default/x"}


def test_max_victims_and_no_solution() -> None:
    small = [pod(f"s{i}", 0.5, age=100 * i) for i in range(1, 9)]
    assert run([*small, ds_pod(cpu=2.0)])["kube-system/fluentd"] == Preemption(
        "kube-system/fluentd", "n1", None, ()
    )
    assert len(run([*small, ds_pod(cpu=2.0)], max_victims=4)["kube-system/fluentd"].victims) == 4
    # nothing may go: only a higher-priority pod holds the node
    assert (
        run([pod("h", 4.0, priority=2**31), ds_pod(cpu=1.0)])["kube-system/fluentd"].strategy
        is None
    )
    # the node lacks the resource entirely: no eviction can help
    gpu = ds_pod(cpu=0.1)
    gpu = Pod(
        gpu.namespace,
        gpu.name,
        gpu.uid,
        **{f: getattr(gpu, f) for f in _FIELDS if f != "requests"},
        requests={"nvidia.com/gpu": 1.0},
    )
    assert run([pod("a", 1.0), gpu])["kube-system/fluentd"].victims == ()


def test_strategies_in_configured_order() -> None:
    pods = [
        pod("r1", 1.0, age=3000),
        pod("r2", 2.0, age=2000),
        pod("r3", 1.0, age=100),
        ds_pod(cpu=1.0),
    ]
    assert run(pods)["kube-system/fluentd"].victims == ("default/r3",)
    out = run(pods, strategy=("multiple", "single"))["kube-system/fluentd"]
    assert (out.strategy, out.victims) == ("multiple", ("default/r2",))


def test_later_pending_pods_see_the_updated_snapshot() -> None:
    pods = [pod("r1", 1.0, age=3000), pod("r2", 2.0, age=2000), pod("r3", 1.0, age=100)]
    pods += [ds_pod("b", cpu=1.0, age=60), ds_pod("a", cpu=1.0, age=600)]
    out = run(pods)
    assert out["kube-system/a"].victims == ("default/r3",)
    assert out["kube-system/b"].victims == ("default/r1",)


def test_a_fitting_pod_takes_its_room_before_younger_ones() -> None:
    pods = [pod("a", 3.0), ds_pod("first", cpu=1.0, age=600), ds_pod("second", cpu=1.0, age=60)]
    out = run(pods)
    assert "kube-system/first" not in out
    assert out["kube-system/second"].victims == ("default/a",)  # a is 200% off: multiple


# -- property: whatever is chosen makes the pod fit and respects the rules ----------------
@settings(max_examples=200, deadline=None)
@given(
    victims=st.lists(
        st.tuples(
            st.integers(1, 8),
            st.integers(0, 4),
            st.integers(0, 3),
            st.booleans(),
            st.integers(0, 10_000),
        ),
        min_size=1,
        max_size=10,
    ),
    ds_cpu=st.integers(1, 8),
    max_victims=st.integers(1, 4),
    order=st.sampled_from(
        [("single", "multiple"), ("multiple", "single"), ("single",), ("multiple",)]
    ),
)
def test_chosen_victims_make_room_and_respect_the_rules(
    victims: list[tuple[int, int, int, bool, int]],
    ds_cpu: int,
    max_victims: int,
    order: tuple[str, ...],
) -> None:
    pods = [
        pod(
            f"p{i}",
            cpu / 2,
            mem * 256 * MI,
            priority=prio,
            age=age + 1,
            labels={OPT_OUT_LABEL: "false"} if opted else {},
        )
        for i, (cpu, mem, prio, opted, age) in enumerate(victims)
    ]
    capacity = sum(p.request("cpu") for p in pods)
    ds = ds_pod(cpu=ds_cpu / 2, memory=256 * MI, priority=2)
    result = run([*pods, ds], [node(cpu=capacity)], max_victims=max_victims, strategy=order)
    entry = result["kube-system/fluentd"]
    by_key = {p.key: p for p in pods}
    chosen = [by_key[k] for k in entry.victims]
    if entry.strategy is None:
        assert chosen == []
        return
    assert 1 <= len(chosen) <= max_victims
    assert len(set(entry.victims)) == len(chosen)
    assert all(p.priority <= ds.priority for p in chosen)
    assert sum(p.request("cpu") for p in chosen) >= ds.request("cpu") - 1e-9
    if entry.strategy == "single":
        assert len(chosen) == 1 and deviation(chosen[0], ds) <= 0.1 + 1e-9
