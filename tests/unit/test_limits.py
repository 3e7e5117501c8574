"""The safety limits on evictions and the backoff after API faults (engine.limits),
through the engine as the agent drives it. The scenarios in tests/scenarios/node-limit-*
pin the reports; these cover what a scenario cannot script: API faults and Retry-After."""

from __future__ import annotations

import pytest

from agent.model.eviction import EvictionResult
from agent.model.objects import Pod, parse_node, parse_pod
from agent.model.policy import load_policies
from agent.model.settings import AgentSettings, EvictionRateLimit
from agent.model.usage import PodUsage
from agent.node.tick import NodeBrain
from agent.simulate.actuators import SimulatedThrottler
from engine.limits import BACKOFF, FaultBackoff, TokenBucket, backoff_delay, first_limit
from executors.actuators import EvictionAnswer, Evictor
from tests.builders import NOW, action, node, pod, policy, rule

NODE = parse_node(node("n1", cpu="8", memory="32Gi"))
GI = 2**30
PODS = [parse_pod(pod(name)) for name in "abcdef"]
USAGE = {p.key: PodUsage(cpu=0.1, memory=1.0 * GI) for p in PODS}
HOT = {"memory_total_usage": 30.0 * GI}  # line 20Gi: gap 10Gi, more than all six pods


class Scripted(Evictor):
    """An Eviction API answering from a script (the last answer repeats); counts calls."""

    def __init__(self, *answers: EvictionResult | EvictionAnswer) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int | None]] = []

    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionResult | EvictionAnswer:
        self.calls.append((pod.key, grace_seconds))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def policies(**eviction: object):
    act = action("evict", eviction=dict(eviction), cool_down=0)
    return load_policies([policy("p", [rule("r", "memory_total_usage", "20Gi", "evict")])], [act])


def tick(brain: NodeBrain, api: Scripted, at: float, pols=None, brake: bool = False):
    return brain.tick(now=NOW + at, node=NODE, pods=PODS, metrics=HOT, usage=USAGE,
                      policies=pols or policies(), namespace_labels=lambda ns: {},
                      evictor=api, throttler=SimulatedThrottler(), brake=brake)


def test_the_first_server_error_ends_the_round_and_backs_off() -> None:
    brain = NodeBrain(AgentSettings(eviction_rate_limit=EvictionRateLimit(per_minute=0)))
    api = Scripted(EvictionResult.FAILED)
    report = tick(brain, api, 0)
    assert len(api.calls) == 1  # not one per candidate
    assert [(a.pod, a.result) for a in report.actions] == [("default/a", "failed")]
    first = report.eviction_backoff
    assert first == pytest.approx(backoff_delay("n1", 1, None))
    assert BACKOFF.initial * 0.8 <= first <= BACKOFF.initial * 1.2
    # Ticks every second: no request until the backoff has passed, then one, then longer.
    sent_at = [0.0]
    for at in range(1, 40):
        before = len(api.calls)
        report = tick(brain, api, at)
        assert report.limited is None  # a backoff is not a safety limit
        if len(api.calls) > before:
            assert len(api.calls) == before + 1
            sent_at.append(at)
    assert sent_at[1] >= first
    assert sent_at[2] - sent_at[1] >= backoff_delay("n1", 2, None) - 1
    assert len(sent_at) <= 4


def test_an_answer_ends_the_backoff() -> None:
    brain = NodeBrain()
    api = Scripted(EvictionResult.FAILED, EvictionResult.EVICTED)
    tick(brain, api, 0)
    report = tick(brain, api, 60)  # well past the first backoff
    assert [a.result for a in report.actions][:2] == ["evicted", "evicted"]
    assert brain.state.backoff.attempts == 0
    assert report.eviction_backoff is None


def test_retry_after_is_honoured() -> None:
    brain = NodeBrain()
    api = Scripted(EvictionAnswer(EvictionResult.FAILED, retry_after=120.0), EvictionResult.EVICTED)
    report = tick(brain, api, 0)
    assert report.eviction_backoff == pytest.approx(120.0)
    assert tick(brain, api, 119).actions == []
    assert len(api.calls) == 1
    assert [a.result for a in tick(brain, api, 120).actions][0] == "evicted"


def test_budget_refusals_and_gone_pods_neither_take_tokens_nor_end_the_round() -> None:
    brain = NodeBrain(AgentSettings(eviction_rate_limit=EvictionRateLimit(per_minute=6, burst=2)))
    api = Scripted(EvictionResult.BLOCKED_BY_PDB, EvictionResult.GONE, EvictionResult.EVICTED)
    report = tick(brain, api, 0, policies(maxPodsPerRound=2))
    # a refused, b gone (released, but no token and not counted), c and d take the tokens
    assert [(a.pod, a.result) for a in report.actions] == [
        ("default/a", "blocked-by-pdb"), ("default/b", "gone"),
        ("default/c", "evicted"), ("default/d", "evicted"),
    ]  # fmt: skip
    assert report.limited == "maxPodsPerRound"  # both bind: the first of the list is reported
    assert brain.state.bucket is not None and brain.state.bucket.tokens == pytest.approx(0.0)


def test_the_brake_sends_no_request_and_is_reported() -> None:
    brain = NodeBrain()
    api = Scripted(EvictionResult.EVICTED)
    report = tick(brain, api, 0, brake=True)
    assert api.calls == [] and report.actions == []
    assert report.limited == "clusterBrake"
    assert [a.pod for a in tick(brain, api, 1).actions][:1] == ["default/a"]  # lifted


def test_grace_period_is_the_actions_or_none() -> None:
    api = Scripted(EvictionResult.EVICTED)
    tick(NodeBrain(), api, 0, policies(terminationGracePeriodSeconds=7, maxPodsPerRound=1))
    tick(NodeBrain(), api, 0, policies(maxPodsPerRound=1))
    assert api.calls == [("default/a", 7), ("default/a", None)]


def test_the_bucket_refills_by_sample_time_up_to_the_burst() -> None:
    limit = EvictionRateLimit(per_minute=6, burst=3)
    bucket = TokenBucket.full(limit, 100.0)
    for _ in range(3):
        assert bucket.has_token()
        bucket.take()
    assert not bucket.has_token()
    bucket.refill(limit, 109.0)
    assert not bucket.has_token() and bucket.tokens == pytest.approx(0.9)
    bucket.refill(limit, 110.0)
    assert bucket.has_token()
    bucket.refill(limit, 10_000.0)
    assert bucket.tokens == 3.0
    bucket.refill(limit, 50.0)  # a sample back in time adds nothing
    assert bucket.tokens == 3.0 and bucket.at == 10_000.0


def test_backoff_is_deterministic_jittered_and_bounded() -> None:
    assert backoff_delay("n1", 3, None) == backoff_delay("n1", 3, None)
    spread = {round(backoff_delay(f"node-{i}", 1, None), 3) for i in range(50)}
    assert len(spread) > 40  # 5,000 agents do not retry in step
    for attempt in range(1, 30):
        assert backoff_delay("n1", attempt, None) <= BACKOFF.maximum
    assert backoff_delay("n1", 1, 900.0) == 900.0
    state = FaultBackoff()
    state.fault("n1", 0.0, None)
    assert state.waiting(1.0) and state.attempts == 1
    state.answered()
    assert not state.waiting(1.0) and state.attempts == 0


def test_first_limit_follows_the_documented_order() -> None:
    assert first_limit(None, "evictionRateLimit") == "evictionRateLimit"
    assert first_limit("evictionRateLimit", "maxPodsPerRound") == "maxPodsPerRound"
    assert first_limit("maxPodsPerRound", "clusterBrake") == "clusterBrake"
    assert first_limit("clusterBrake", "evictionRateLimit") == "clusterBrake"
