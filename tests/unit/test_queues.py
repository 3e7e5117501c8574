"""Queue-proportional preemption: Queue parsing, water-filling, starving/need, victims (its
arguments: test_args_queues.py)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.cluster.queues import (
    QueueArgs,
    VictimCandidate,
    decide,
    deserved,
    need,
    queue_usage,
    select_victims,
    starving,
)
from agent.errors import InvalidObject
from agent.model.objects import Node, Pod
from agent.model.queue import QUEUE_LABEL, Queue, parse_queue
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


# -- the victim search ----------------------------------------------------------------------
def cand(key: str, queue: str, *frees: float, priority: int = 0) -> VictimCandidate:
    return VictimCandidate(key, queue, priority, 0.0, tuple(frees))


def test_exact_search_finds_what_the_greedy_walk_misses() -> None:
    cands = [cand("b2", "q", 2), cand("a3", "q", 3), cand("c2", "q", 2)]
    found = select_victims(cands, {"q": (3.0,)}, (3.0,), (10.0,))
    assert found is not None
    picks, excess, exact = found
    assert [cands[p].key for p in picks] == ["a3"]
    assert excess == 0.0 and exact


def test_least_excess_then_fewest_then_order() -> None:
    cands = [cand("x1", "q", 1), cand("x2", "q", 1), cand("y2", "q", 2), cand("z3", "q", 3)]
    picks, _, _ = select_victims(cands, {"q": (10.0,)}, (2.0,), (10.0,)) or ((), 0, True)
    assert [cands[p].key for p in picks] == ["y2"]  # x1+x2 also exact, but two pods
    picks, _, _ = select_victims(cands, {"q": (10.0,)}, (1.0,), (10.0,)) or ((), 0, True)
    assert [cands[p].key for p in picks] == ["x1"]  # x1 and x2 tie: earlier in order


def test_no_cover_no_victims() -> None:
    cands = [cand("a", "q", 3), cand("b", "q", 3)]
    assert select_victims(cands, {"q": (2.0,)}, (2.0,), (10.0,)) is None
    assert select_victims([], {}, (1.0,), (10.0,)) is None


def test_bounded_search_reports_when_it_is_not_exact() -> None:
    cands = [cand(f"p{i}", f"q{i}", 1.0 + i / 100) for i in range(30)]
    headroom = {f"q{i}": (5.0,) for i in range(30)}
    found = select_victims(cands, headroom, (2.0,), (100.0,), QueueArgs(exact_search_classes=5))
    assert found is not None and found[2] is False
    found = select_victims(
        cands, headroom, (2.0,), (100.0,), QueueArgs(exact_search_classes=30, search_steps=3)
    )
    assert found is not None and found[2] is False
    found = select_victims(cands, headroom, (2.0,), (100.0,), QueueArgs(exact_search_classes=30))
    assert found is not None and found[2] is True


def brute_force(
    cands: list[VictimCandidate],
    headroom: dict[str, tuple[float, ...]],
    want: tuple[float, ...],
    totals: tuple[float, ...],
) -> tuple[float, int, tuple[int, ...]] | None:
    best = None
    dims = range(len(want))
    for n in range(1, len(cands) + 1):
        for combo in itertools.combinations(range(len(cands)), n):
            taken: dict[str, list[float]] = {}
            for p in combo:
                row = taken.setdefault(cands[p].queue, [0.0] * len(want))
                for i in dims:
                    row[i] += cands[p].frees[i]
            if any(row[i] > headroom[q][i] + 1e-9 for q, row in taken.items() for i in dims):
                continue
            freed = [sum(cands[p].frees[i] for p in combo) for i in dims]
            if any(freed[i] < want[i] - 1e-9 for i in dims):
                continue
            excess = sum((freed[i] - want[i]) / totals[i] for i in dims)
            key = (round(excess, 9), n, combo)
            if best is None or key < best:
                best = key
    return best


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 6), st.integers(0, 4)), min_size=1, max_size=8
    ),
    rooms=st.tuples(st.integers(1, 12), st.integers(1, 12), st.integers(1, 12)),
    want=st.tuples(st.integers(1, 12), st.integers(0, 6)),
)
def test_search_is_exact_on_small_instances(
    sizes: list[tuple[int, int, int]], rooms: tuple[int, int, int], want: tuple[int, int]
) -> None:
    cands = [cand(f"p{i}", f"q{q}", float(c), float(m)) for i, (q, c, m) in enumerate(sizes)]
    headroom: dict[str, tuple[float, ...]] = {f"q{q}": (float(rooms[q]), 12.0) for q in range(3)}
    need_vec = tuple(float(w) for w in want if w) if want[1] else (float(want[0]),)
    if len(need_vec) == 1:
        cands = [VictimCandidate(c.key, c.queue, 0, 0.0, c.frees[:1]) for c in cands]
        headroom = {q: h[:1] for q, h in headroom.items()}
    totals = tuple(50.0 for _ in need_vec)
    expected = brute_force(cands, headroom, need_vec, totals)
    found = select_victims(cands, headroom, need_vec, totals)
    if expected is None:
        assert found is None
        return
    assert found is not None
    picks, excess, exact = found
    assert exact
    assert (round(excess, 9), len(picks), picks) == expected


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
    pods = [
        qpod(f"p{i}", f"q{q}", c, m * 1e9, running=run, priority=prio, started=NOW - 10 * i)
        for i, (q, c, m, run, prio) in enumerate(pods_spec)
    ]
    result = decide(queues, [node(cpu=float(cpu), memory=16e9)], pods, NOW)
    by_key = {p.key: p for p in pods}
    victims = [by_key[k] for k in result.victims]
    for q in queues:
        mine = [v for v in victims if v.labels[QUEUE_LABEL] == q.name]
        if mine:
            assert q.reclaimable
        for r in result.need:
            left = result.status[q.name].allocated[r] - sum(v.request(r) for v in mine)
            if mine and any(v.request(r) > 0 for v in mine):
                assert left >= result.status[q.name].deserved[r] - 1e-6
    if victims:
        for r, amount in result.need.items():
            assert sum(v.request(r) for v in victims) >= amount - 1e-6
        assert all(v.node_name for v in victims)


def test_greedy_alone_is_tidied() -> None:
    """With the exact search off, the greedy cover a + b (excess 1) becomes a + c: the last
    pick is swapped for the one that closes the gap exactly; redundant picks are dropped."""
    cands = [cand("a", "q", 2), cand("b", "q", 2), cand("c", "q", 1)]
    off = QueueArgs(exact_search_classes=0)
    picks, excess, exact = select_victims(cands, {"q": (10.0,)}, (3.0,), (10.0,), off) or (
        (),
        0,
        True,
    )
    assert ([cands[p].key for p in picks], excess, exact) == (["a", "c"], 0.0, False)
    # two resources: m (memory only) then big (both) -> m is no longer needed
    cands = [cand("m", "q", 0, 2), cand("big", "q", 2, 2)]
    picks, _, _ = select_victims(cands, {"q": (10.0, 10.0)}, (2.0, 2.0), (10.0, 10.0), off) or (
        (),
        0,
        True,
    )
    assert [cands[p].key for p in picks] == ["big"]
