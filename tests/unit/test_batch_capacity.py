"""Batch capacity (DESIGN.md "Batch capacity"): the policy section parsed at the edge, and
the pure computation of what a node publishes (``engine.batch_capacity``). Over time,
through `simulate`, in tests/scenarios/node-batch-capacity-*.yaml."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import InvalidObject
from agent.model.batch import BATCH_CPU, BATCH_MEMORY, Amounts, BatchCapacity, is_batch_pod
from agent.model.objects import Pod, parse_pod
from agent.model.policy import load_policies, parse_policy
from agent.model.usage import PodUsage
from engine.batch_capacity import (
    BatchMemory,
    Published,
    UseSample,
    next_published,
    non_batch_use,
    step,
    target,
)
from tests.builders import pod

GI = 1024**3
ALLOC = {"cpu": 8.0, "memory": 32.0 * GI}


def _policy(section: Any, name: str = "colocated", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"batchCapacity": section, **spec}}


def test_defaults_are_the_documented_ones() -> None:
    policy = parse_policy(_policy({}))
    assert policy.rules == ()
    assert policy.batch_capacity == BatchCapacity(10.0, 300.0, 5.0, 60.0, Amounts(0.0, 0.0), Amounts(), True)


def test_every_field_is_read() -> None:
    section = parse_policy(_policy({
        "marginPercent": 20, "windowSeconds": 60, "hysteresisPercent": 0, "minIntervalSeconds": 0,
        "min": {"cpu": "500m"}, "max": {"cpu": 4, "memory": "8Gi"}, "idle": False,
    })).batch_capacity
    assert section == BatchCapacity(20.0, 60.0, 0.0, 0.0, Amounts(0.5, 0.0), Amounts(4.0, 8.0 * GI), False)


@pytest.mark.parametrize(("section", "field"), [
    ({"marginPercent": -1}, "spec.batchCapacity.marginPercent"),
    ({"hysteresisPercent": "5"}, "spec.batchCapacity.hysteresisPercent"),
    ({"minIntervalSeconds": 3601}, "spec.batchCapacity.minIntervalSeconds"),
    ({"windowSeconds": True}, "spec.batchCapacity.windowSeconds"),
    ({"min": {"memory": "-1Gi"}}, "spec.batchCapacity.min.memory"),
    ({"min": {"gpu": 1}}, "spec.batchCapacity.min.gpu"),
    ({"min": {"memory": "8Gi"}, "max": {"memory": "4Gi"}}, "spec.batchCapacity.max.memory"),
    ({"idle": "yes"}, "spec.batchCapacity.idle"),
    ([], "spec.batchCapacity"),
])
def test_bad_fields_are_named(section: Any, field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        parse_policy(_policy(section))
    assert err.value.kind == "NodeQOSEnsurancePolicy" and err.value.name == "colocated"
    assert err.value.field == field


def test_the_first_policy_by_name_decides_for_a_node() -> None:
    policies = load_policies([_policy({"marginPercent": 30}, "b"), _policy({"marginPercent": 20}, "a"),
                              _policy({}, "c", nodeSelector={"matchLabels": {"pool": "x"}})], [])
    assert policies.errors == ()
    chosen = policies.batch_capacity_for_node({})
    assert chosen is not None and chosen[0] == "a" and chosen[1].margin_percent == 20
    assert load_policies([], []).batch_capacity_for_node({}) is None


def _pod(name: str, requests: dict[str, Any] | None, **kw: Any) -> Pod:
    return parse_pod(pod(name, requests=requests, **kw))


def test_a_batch_pod_asks_for_batch_resources_and_no_cpu_or_memory() -> None:
    assert is_batch_pod(_pod("b", {BATCH_CPU: "1000"}))
    assert is_batch_pod(_pod("b", {BATCH_MEMORY: "1Gi"}))
    assert not is_batch_pod(_pod("b", {BATCH_CPU: "1000", "cpu": "100m"}))
    assert not is_batch_pod(_pod("b", {BATCH_MEMORY: "1Gi", "memory": "1Gi"}))
    assert not is_batch_pod(_pod("be", None))
    assert not is_batch_pod(_pod("web", {"cpu": "1"}))


def test_non_batch_use_is_the_total_less_the_batch_pods() -> None:
    pods = [_pod("batch", {BATCH_CPU: "2000"}), _pod("web", {"cpu": "2"}), _pod("quiet", {BATCH_CPU: "1000"})]
    usage = {"default/batch": PodUsage(cpu=1.5, memory=2e9), "default/web": PodUsage(cpu=2.0, memory=1e9)}
    sample = non_batch_use(5.0, {"cpu_total_usage": 4.0, "memory_total_usage": 5e9}, pods, usage)
    # the system (0.5 core, 2e9 bytes) counts as non-batch; a batch pod with no figure adds nothing
    assert sample == UseSample(5.0, 2.5, 3e9)
    assert non_batch_use(5.0, {}, pods, usage) == UseSample(5.0, None, None)


def test_the_target_is_the_high_water_mark_within_bounds() -> None:
    section = BatchCapacity(margin_percent=10, maximum=Amounts(None, 16.0 * GI))
    window = (UseSample(0, 2.0, 4.0 * GI), UseSample(10, 4.0, 2.0 * GI), UseSample(20, 1.0, None))
    cpu, memory = target(section, ALLOC, window)
    assert cpu == 3.2  # 8 - 4.0 (the peak, not the last 1.0) - 0.8
    assert memory == 16.0 * GI  # 32Gi - 4Gi - 3.2Gi = 24.8Gi, above max
    assert target(section, ALLOC, (UseSample(0, 9.0, None),)) == (0.0, None)
    floor = BatchCapacity(minimum=Amounts(1.0, 0.0))
    assert target(floor, ALLOC, (UseSample(0, 9.0, 0.0),))[0] == 1.0


def test_changes_wait_for_the_interval_and_pass_the_hysteresis() -> None:
    section = BatchCapacity(hysteresis_percent=5, min_interval_seconds=60)  # 0.4 core, 1.6Gi
    first = next_published(section, ALLOC, None, (4.0, 8.0 * GI), 0)
    assert first == Published(4.0, 8.0 * GI, 0)
    assert next_published(section, ALLOC, first, (1.0, 8.0 * GI), 59) is first  # the interval
    assert next_published(section, ALLOC, first, (4.3, 9.0 * GI), 60) is first  # inside both
    moved = next_published(section, ALLOC, first, (3.5, 8.0 * GI), 60)
    assert moved == Published(3.5, 8.0 * GI, 60)  # one resource moved: one publication
    assert next_published(section, ALLOC, moved, (3.3, 8.0 * GI), 120) is moved
    assert next_published(section, ALLOC, moved, (0.0, 8.0 * GI), 120) == Published(0.0, 8.0 * GI, 120)
    # nothing is published before both resources have a figure; a missing one keeps its figure
    assert next_published(section, ALLOC, None, (4.0, None), 0) is None
    assert next_published(section, ALLOC, first, (None, 1.0 * GI), 60) == Published(4.0, 1.0 * GI, 60)


def test_a_step_keeps_the_window_and_rounds_to_what_a_node_status_holds() -> None:
    section = BatchCapacity(margin_percent=0, window_seconds=10, hysteresis_percent=0, min_interval_seconds=0)
    memory = BatchMemory()
    for at, cpu in ((0, 3.0), (5, 1.0), (11, 1.0)):
        memory = step(section, memory, at, {"cpu": 4.0, "memory": 1000.5},
                      {"cpu_total_usage": cpu + 0.0004, "memory_total_usage": 0.0}, [], {})
    assert [s.at for s in memory.window] == [5, 11]
    # 4 - 1.0004 = 2.9996 cores: 2999 whole millicores; 1000.5 bytes: 1000
    assert memory.published == Published(2.999, 1000.0, 11)
    assert memory.published.to_report() == {"cpu": 2.999, "memory": 1000}


# -- the phase: what is asked of the node's status writer -------------------------------------
class _Status:
    """A node status writer that answers as told, and remembers what it was asked."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.asked: list[Any] = []

    def __call__(self, intent: Any) -> bool:
        self.asked.append(intent)
        return self.answers.pop(0) if self.answers else True


def _tick(policies: list[dict[str, Any]], cpu: float, now: float) -> Any:
    from agent.model.objects import parse_node
    from engine.decide import TickInput
    from tests.builders import NOW, node

    return TickInput(now=NOW + now, node=parse_node(node("n1", cpu="8", memory="32Gi")), pods=[],
                     metrics={"cpu_total_usage": cpu, "memory_total_usage": 0.0}, usage={},
                     policies=load_policies(policies, []))


def _run(state: Any, tick: Any, status: _Status) -> Any:
    from engine.decide import decide

    plan = decide(tick, state)
    answer = None
    try:
        while True:
            intent = plan.send(answer)
            answer = status(intent)
    except StopIteration as done:
        return done.value


def test_the_phase_writes_only_changes_retries_a_failed_write_and_removes_at_the_end() -> None:
    from engine.intents import PublishBatchCapacity, RemoveBatchCapacity
    from engine.state import NodeState

    section = {"marginPercent": 0, "windowSeconds": 0, "hysteresisPercent": 0, "minIntervalSeconds": 0}
    policies = [_policy(section)]
    status = _Status([True, False, True, True])
    state = NodeState()
    for at, cpu in ((0, 2.0), (1, 2.0), (2, 3.0), (3, 3.0), (4, 3.0)):
        decision = _run(state, _tick(policies, cpu, at), status)
        state = decision.state
    published = state.batch_capacity()
    assert published is not None and published.cpu == 5.0
    # at 0 the first figure; at 1 nothing changed: nothing asked; at 2 the write failed,
    # so at 3 it is asked again; at 4 it is written: nothing asked
    assert status.asked == [PublishBatchCapacity(6000, 32 * GI), PublishBatchCapacity(5000, 32 * GI),
                            PublishBatchCapacity(5000, 32 * GI)]
    assert decision.report.to_report()["batchCapacity"] == {"cpu": 5.0, "memory": 32 * GI}
    decision = _run(state, _tick([], 3.0, 5), status)  # the policy is gone
    assert status.asked[-1] == RemoveBatchCapacity()
    assert decision.state.batch_capacity() is None and "batchCapacity" not in decision.report.to_report()
    status.asked.clear()
    _run(decision.state, _tick([], 3.0, 6), status)
    assert status.asked == []  # nothing published, nothing to remove


def test_a_status_write_that_raises_is_counted_and_answered_not_done() -> None:
    from engine.intents import PublishBatchCapacity
    from executors.actuators import Guarded, Hands, NodeStatusWriter

    class Refused(NodeStatusWriter):
        def publish(self, millicores: int, bytes_: int) -> bool:
            raise OSError("refused")

        def remove(self) -> bool:
            return True

    class Log:
        def __init__(self) -> None:
            self.lines: list[tuple[str, dict[str, Any]]] = []

        def error(self, what: str, **fields: Any) -> None:
            self.lines.append((what, fields))

    errors: dict[str, int] = {}
    log = Log()
    hands = Hands(Guarded(Refused(), errors, log))
    assert hands.carry(PublishBatchCapacity(1000, 1)) is False
    assert errors == {"node-status": 1}
    assert log.lines[0][0] == "batch capacity raised" and "pod" not in log.lines[0][1]


def test_batch_pods_are_idle_where_the_section_says_so() -> None:
    from engine.cpu_classes import idle_members

    batch, plain = _pod("b", {BATCH_CPU: "1000"}, qos="BestEffort"), _pod("be", None, qos="BestEffort")
    pods = {p.key: p for p in (batch, plain)}

    def labels(namespace: str) -> dict[str, str]:
        return {}

    for idle, members in ((True, ["default/b"]), (False, [])):
        sections = load_policies([_policy({"idle": idle})], []).isolation_for_node({})
        assert sorted(idle_members(pods, sections, labels, {})) == members


def test_nothing_is_written_or_removed_on_the_saved_copy_of_the_objects() -> None:
    from dataclasses import replace

    from engine.state import NodeState

    section = {"marginPercent": 0, "windowSeconds": 0, "hysteresisPercent": 0, "minIntervalSeconds": 0}
    status = _Status([])
    state = NodeState()
    for policies in ([_policy(section)], []):  # written at once; the copy has no policy
        decision = _run(state, replace(_tick(policies, 2.0, 0), provisional=True), status)
        assert status.asked == [] and decision.state.batch == state.batch
    state = _run(state, _tick([_policy(section)], 2.0, 0), status).state
    assert len(status.asked) == 1
    decision = _run(state, replace(_tick([], 2.0, 1), provisional=True), status)
    assert len(status.asked) == 1 and decision.state.batch_capacity() == state.batch_capacity()


def test_the_html_report_shows_the_published_capacity_tick_by_tick() -> None:
    from pathlib import Path

    from agent.scenario import load_scenario
    from agent.simulate.html import render_html
    from agent.simulate.sections import build_report

    scenarios = Path(__file__).resolve().parents[1] / "scenarios"
    html = render_html(build_report(load_scenario(scenarios / "node-batch-capacity-over-time.yaml")))
    assert 'id="batch-capacity"' in html
    assert "<td>30</td><td>3.2</td><td>21.35Gi</td>" in html  # 22,923,764,531 bytes
    plain = render_html(build_report(load_scenario(scenarios / "node-idle-class.yaml")))
    assert 'id="batch-capacity"' not in plain
