"""The node's eviction limits survive a restart: the bucket refills for the time the agent
was down, the cool-downs run on; what cannot be trusted is dropped (agent.node.eviction_memory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.model.eviction import EvictionResult
from agent.model.objects import Pod, parse_node, parse_pod
from agent.model.policy import load_policies
from agent.model.settings import AgentSettings, EvictionRateLimit
from agent.model.usage import PodUsage
from agent.node.eviction_memory import MEMORY_FILE, EvictionMemory
from agent.node.loop import TickOutcome
from agent.node.tick import NodeBrain, TickReport
from agent.simulate.actuators import SimulatedThrottler
from executors.actuators import EvictionAnswer, Evictor
from tests.builders import NOW, action, node, pod, policy, rule

GI = 2**30
NODE = parse_node(node("n1", cpu="8", memory="32Gi"))
PODS = [parse_pod(pod(n)) for n in "abc"]
USAGE = {p.key: PodUsage(cpu=0.1, memory=4.0 * GI) for p in PODS}
POLICIES = load_policies([policy("p", [rule("r", "memory_total_usage", "20Gi", "evict")])],
                         [action("evict", eviction={}, cool_down=300)])  # fmt: skip


class ScriptedEvictor(Evictor):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionAnswer:
        self.calls.append(pod.key)
        return EvictionAnswer(EvictionResult.EVICTED)


def brain() -> NodeBrain:
    return NodeBrain(AgentSettings(eviction_rate_limit=EvictionRateLimit(per_minute=1, burst=3)))


def tick(b: NodeBrain, at: float, evictor: Evictor) -> TickReport:
    """The node 4 Gi over its 20 Gi line: one pod's eviction closes the gap."""
    return b.tick(now=NOW + at, node=NODE, pods=PODS, metrics={"memory_total_usage": 24.0 * GI},
                  usage=USAGE, policies=POLICIES, namespace_labels=lambda ns: {}, evictor=evictor,
                  throttler=SimulatedThrottler())  # fmt: skip


def published(memory: EvictionMemory, report: TickReport) -> None:
    memory(TickOutcome(seq=1, at=report.at, duration=0.1, node="n1", report=report))


def test_a_restarted_agent_keeps_the_cool_down_and_the_bucket(tmp_path: Path) -> None:
    first, evictor = brain(), ScriptedEvictor()
    memory = EvictionMemory(str(tmp_path), first)
    published(memory, tick(first, 0, evictor))
    assert evictor.calls == ["default/a"]
    saved = json.loads((tmp_path / MEMORY_FILE).read_text())
    assert saved["lastEvictionRound"] == {"evict": NOW} and saved["bucket"]["tokens"] == 2.0

    restarted, after = brain(), ScriptedEvictor()  # 10 s later, the node still over its line
    EvictionMemory(str(tmp_path), restarted).load(NOW + 10)
    tick(restarted, 10, after)
    assert after.calls == []  # the action cools down for 300 s, restart or not
    assert restarted.state.tokens() == pytest.approx(2.0 + 10 / 60)  # refilled for the gap

    forgetful = brain()  # what a restart did before: a full bucket, no cool-down
    tick(forgetful, 10, after)
    assert after.calls == ["default/a"]


def test_refills_alone_are_not_written(tmp_path: Path) -> None:
    b, evictor = brain(), ScriptedEvictor()
    memory = EvictionMemory(str(tmp_path), b)
    published(memory, tick(b, 0, evictor))
    stamp = (tmp_path / MEMORY_FILE).stat().st_mtime_ns
    (tmp_path / MEMORY_FILE).write_text((tmp_path / MEMORY_FILE).read_text())  # same text, new time
    written = (tmp_path / MEMORY_FILE).stat().st_mtime_ns
    for second in (1, 2, 3):  # cooling down: the bucket only refills
        published(memory, tick(b, second, evictor))
    assert (tmp_path / MEMORY_FILE).stat().st_mtime_ns == written and written >= stamp


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "the file cannot be read"),
        (json.dumps({"version": 99}), "unknown format"),
    ],
)
def test_a_file_that_cannot_be_trusted_starts_the_limits_afresh(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / MEMORY_FILE).write_text(text)
    b, logged = brain(), []

    class Log:
        def warning(self, event: str, **_: object) -> None:
            logged.append(event)

        info = warning

    EvictionMemory(str(tmp_path), b, Log()).load(NOW)
    assert b.state.tokens() is None and b.state.last_rounds() == {}
    assert any(why in event for event in logged)


def test_times_from_the_future_and_bad_counts_are_dropped(tmp_path: Path) -> None:
    doc = {"version": 1, "bucket": {"tokens": "many", "at": NOW},
           "lastEvictionRound": {"evict": NOW + 3600, "other": NOW - 5, "nan": float("nan")}}  # fmt: skip
    (tmp_path / MEMORY_FILE).write_text(json.dumps(doc))
    b = brain()
    EvictionMemory(str(tmp_path), b).load(NOW)
    assert b.state.tokens() is None  # a full bucket at the first sample, as a first start
    assert b.state.last_rounds() == {"other": NOW - 5}
