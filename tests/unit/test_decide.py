"""The node's decision read with no fakes at all: plain data in, intents and a report out.

``decide`` calls no actuator; ``assume_done`` answers every intent as a success, and a
plan can be walked by hand to see what the engine does with each answer.
"""

from __future__ import annotations

import pytest

from agent.model.eviction import EvictionResult
from agent.model.objects import parse_node, parse_pod
from agent.model.policy import load_policies
from agent.model.usage import PodUsage
from engine.decide import TickInput, decide
from engine.intents import Evict, WriteCap
from engine.state import NodeState
from executors.actuators import EvictionAnswer
from executors.drive import assume_done
from tests.builders import NOW, action, node, pod, policy, rule

NODE = parse_node(node("n1", cpu="8", memory="32Gi"))


def _input(metric: str, value: str, act: dict, metrics: dict, usage: dict, pods: list) -> TickInput:
    policies = load_policies([policy("p", [rule("r", metric, value, act["metadata"]["name"])])], [act])
    return TickInput(now=NOW, node=NODE, pods=[parse_pod(p) for p in pods], metrics=metrics,
                     usage=usage, policies=policies)


def test_a_throttle_decision_is_plain_data_and_leaves_the_memory_it_was_given():
    tick = _input("cpu_total_usage", "6", action("t", throttle={"minCPURatio": 10}),
                  {"cpu_total_usage": 7.0},
                  {"default/a": PodUsage(cpu=3.0), "default/b": PodUsage(cpu=1.0)},
                  [pod("a"), pod("b")])
    before = NodeState()
    decision = assume_done(decide(tick, before))
    assert [(a.action, a.pod, a.cpu_cap) for a in decision.report.actions] == [
        ("throttle", "default/a", pytest.approx(2.0))]
    assert decision.report.rules == {"p/r": "triggered"}
    assert decision.state.caps() == {"default/a": pytest.approx(2.0)}
    assert before.caps() == {} and before.trackers == {}  # nothing handed in changed


def test_a_budget_refusal_moves_the_plan_to_the_next_candidate():
    tick = _input("memory_total_usage", "10Gi", action("e", eviction={}),
                  {"memory_total_usage": 11 * 2**30},
                  {"default/a": PodUsage(memory=3 * 2**30), "default/b": PodUsage(memory=2 * 2**30)},
                  [pod("a"), pod("b")])
    plan = decide(tick, NodeState())
    first = next(plan)
    assert isinstance(first, Evict) and first.pod.key == "default/a"  # the larger first
    second = plan.send(EvictionAnswer(EvictionResult.BLOCKED_BY_PDB))
    assert isinstance(second, Evict) and second.pod.key == "default/b"
    with pytest.raises(StopIteration) as done:
        plan.send(EvictionAnswer(EvictionResult.EVICTED))
    decision = done.value.value
    assert [(a.pod, a.result) for a in decision.report.actions] == [
        ("default/a", "blocked-by-pdb"), ("default/b", "evicted")]
    assert decision.state.terminating() == ["default/b"]


def test_a_cap_not_written_is_neither_held_nor_credited():
    tick = _input("cpu_total_usage", "6", action("t", throttle={}), {"cpu_total_usage": 7.0},
                  {"default/a": PodUsage(cpu=3.0), "default/b": PodUsage(cpu=2.0)},
                  [pod("a"), pod("b")])
    plan = decide(tick, NodeState())
    first = next(plan)
    assert isinstance(first, WriteCap) and first.pod.key == "default/a"
    second = plan.send(False)
    assert isinstance(second, WriteCap) and second.pod.key == "default/b"
    with pytest.raises(StopIteration) as done:
        plan.send(True)
    assert done.value.value.state.caps() == {"default/b": pytest.approx(1.0)}
