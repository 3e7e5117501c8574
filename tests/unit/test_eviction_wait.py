"""A slow Eviction API costs the tick at most evictionAnswerSeconds (executors.eviction),
and a late answer that evicted the pod counts as the node's eviction once the watch shows
it terminating (engine.unanswered, through the engine as the agent drives it)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from functools import partial
from typing import Any

import pytest

from agent.errors import InvalidObject
from agent.kube.client import ClientArgs
from agent.kube.errors import KubeError, KubeTooManyRequests, KubeUnreachable
from agent.metrics import AgentMetrics
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod, parse_node, parse_pod
from agent.model.policy import load_policies
from agent.model.settings import AgentSettings, EvictionRateLimit, parse_agent_settings
from agent.model.usage import PodUsage
from agent.node.events import tick_events
from agent.node.loop import TickOutcome
from agent.node.publish import LATE_EVICTION_RESULT, MetricsPublisher
from agent.node.tick import NodeBrain
from agent.serving import Health
from agent.simulate.actuators import SimulatedThrottler
from engine.records import LateEviction
from engine.unanswered import Unanswered, settle
from executors.actuators import EvictionAnswer, Evictor
from executors.eviction import ApiEvictor, answer_wait
from tests.builders import NOW, action, node, pod, policy, rule

FAILED, EVICTED = EvictionResult.FAILED, EvictionResult.EVICTED


class Api:
    """The Eviction API's client side: answers from a script (an exception is raised),
    records each request's path and timeout."""

    def __init__(self, *answers: Any) -> None:
        self.args = ClientArgs()
        self.answers = list(answers) or [{}]
        self.sent: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, *, body: Any = None, timeout: Any = None,
                **_: Any) -> dict[str, Any]:  # fmt: skip
        self.sent.append((path, timeout))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


class Inline(Executor):
    """A worker that answers at once: the API answered within the wait."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class Held(Executor):
    """A worker whose calls run only when the test says (``answer``): a server that has
    not answered yet."""

    def __init__(self) -> None:
        self.held: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.held.append((future, partial(fn, *args, **kwargs)))
        return future

    def answer(self) -> None:
        future, call = self.held.pop(0)
        future.set_result(call())


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        return lambda event, **kw: self.lines.append((level, event, kw))

    def events(self) -> list[str]:
        return [event for _, event, _ in self.lines]


def evictor(api: Api, worker: Executor, answer: float = 1.0, left: float = 5.0,
            clock: Callable[[], float] = lambda: 100.0) -> tuple[ApiEvictor, Log]:
    log = Log()
    return ApiEvictor(api, log, answer_seconds=lambda: answer, budget_left=lambda: left,
                      worker=worker, clock=clock), log  # fmt: skip


POD = Pod("default", "a", "uid-a")


def test_an_answer_in_time_is_mapped_as_before() -> None:
    pdb = KubeTooManyRequests("budget", causes=({"type": "DisruptionBudget"},))
    api = Api({}, pdb, KubeError("boom", status=500, retry_after=7.0))
    ev, _ = evictor(api, Inline(), left=3.0)
    assert ev.evict(POD, 30) == EvictionAnswer(EVICTED)
    assert ev.evict(POD, 30) == EvictionAnswer(EvictionResult.BLOCKED_BY_PDB)
    assert ev.evict(POD, 30) == EvictionAnswer(FAILED, 7.0)
    # Every request is bounded by what is left of the tick's budget (3 s), not 30 s.
    assert api.sent[0] == ("/api/v1/namespaces/default/pods/a/eviction", (3.0, 3.0))


def test_the_wait_is_the_setting_within_the_budget_left() -> None:
    assert answer_wait(1.0, 5.0) == 1.0
    assert answer_wait(1.0, 0.4) == 0.4
    assert answer_wait(1.0, -2.0) == 0.0
    api = Api()
    ev, log = evictor(api, Inline(), left=0.0)
    assert ev.evict(POD, None) == EvictionAnswer(FAILED)  # the budget is spent: not sent
    assert api.sent == []
    assert "budget is spent" in log.lines[-1][2]["error"]


def test_no_answer_in_time_is_a_fault_and_the_request_goes_on() -> None:
    api, worker = Api(), Held()
    ev, log = evictor(api, worker, answer=0.0)
    answer = ev.evict(POD, None)
    assert answer == EvictionAnswer(FAILED, unanswered=True)
    assert "no answer within 0 s" in log.lines[-1][2]["error"]
    assert len(worker.held) == 1  # still running on the worker, not cancelled


def test_a_late_answer_is_logged_with_what_it_means() -> None:
    now = [100.0]
    api, worker = Api(), Held()
    ev, log = evictor(api, worker, answer=0.0, clock=lambda: now[0])
    ev.evict(POD, None)
    now[0] += 2.5
    worker.answer()  # the server evicted the pod after the tick gave up
    level, event, fields = log.lines[-1]
    assert (level, event) == ("warning", "late eviction answer")
    assert (fields["pod"], fields["result"], fields["seconds"]) == ("default/a", "evicted", 2.5)
    assert "terminates" in fields["meaning"]
    ev.evict(POD, None)
    worker.held[0][0].set_exception(KubeUnreachable("gone"))  # the adapter raised: logged too
    assert log.lines[-1][:2] == ("error", "late eviction answer: the request raised")


def test_no_second_request_while_one_is_in_flight() -> None:
    api, worker = Api(), Held()
    ev, log = evictor(api, worker, answer=0.0)
    ev.evict(POD, None)
    other = Pod("default", "b", "uid-b")
    assert ev.evict(other, None) == EvictionAnswer(FAILED)  # a fault, without a request
    assert len(worker.held) == 1
    assert log.lines[-1][2]["error"] == "not sent: the previous eviction is still in flight"
    assert log.lines[-1][2]["in_flight"] == "default/a"
    worker.answer()
    ev.evict(other, None)  # the first one answered: the next is sent
    worker.answer()
    assert [path.split("/")[-2] for path, _ in api.sent] == ["a", "b"]


# -- through the engine ---------------------------------------------------------------

NODE = parse_node(node("n1", cpu="8", memory="32Gi"))
GI = 2**30


class Scripted(Evictor):
    def __init__(self, *answers: EvictionAnswer) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []

    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionAnswer:
        self.calls.append(pod.key)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def pods(deleting: str = "") -> list[Pod]:
    return [parse_pod(pod(n, deleting=n == deleting)) for n in "abc"]


USAGE = {"default/a": PodUsage(cpu=0.1, memory=4.0 * GI), "default/b": PodUsage(cpu=0.1, memory=2.0 * GI),
         "default/c": PodUsage(cpu=0.1, memory=1.0 * GI)}  # fmt: skip


def tick(brain: NodeBrain, api: Scripted, at: float, now_pods: list[Pod], memory: float = 30.0):
    act = action("evict", eviction={}, cool_down=0)
    pols = load_policies([policy("p", [rule("r", "memory_total_usage", "20Gi", "evict")])], [act])
    return brain.tick(now=NOW + at, node=NODE, pods=now_pods, metrics={"memory_total_usage": memory * GI},
                      usage=USAGE, policies=pols, namespace_labels=lambda ns: {}, evictor=api,
                      throttler=SimulatedThrottler())  # fmt: skip


def test_a_pod_a_late_answer_evicted_counts_once_and_is_never_picked_again() -> None:
    brain = NodeBrain(AgentSettings(eviction_rate_limit=EvictionRateLimit(per_minute=1, burst=5)))
    api = Scripted(EvictionAnswer(FAILED, unanswered=True), EvictionAnswer(EVICTED))
    first = tick(brain, api, 0, pods())
    assert [(a.pod, a.result) for a in first.actions] == [("default/a", "failed")]  # round ends
    assert first.eviction_backoff is not None  # and backs off as for a 5xx
    assert brain.state.awaiting_answer() == {"default/a": "evict"}
    # The late answer evicted a: the watch shows it terminating. Its 4 Gi are on their way
    # out, released once: the gap is 30 - 4 - 20 = 6 Gi, which b (2) and c (1) cannot close.
    later = tick(brain, api, 60, pods(deleting="a"))
    assert later.gaps["evict"]["memory_total_usage"] == pytest.approx(6.0 * GI)
    assert api.calls == ["default/a", "default/b", "default/c"]  # a never again
    assert "default/a" in brain.state.terminating() and brain.state.awaiting_answer() == {}
    assert brain.state.tokens() == pytest.approx(5 - 3 + 1)
    again = tick(brain, api, 61, pods(deleting="a"))
    assert again.gaps["evict"]["memory_total_usage"] == pytest.approx((30 - 4 - 3 - 20) * GI)


def test_a_late_failure_leaves_the_pod_a_candidate() -> None:
    brain = NodeBrain()
    api = Scripted(EvictionAnswer(FAILED, unanswered=True), EvictionAnswer(FAILED),
                   EvictionAnswer(EVICTED))  # fmt: skip
    tick(brain, api, 0, pods())
    tick(brain, api, 60, pods())  # still running, the request still in flight: kept
    assert list(brain.state.awaiting_answer()) == ["default/a"]
    report = tick(brain, api, 600, pods())  # answered this time: settled
    assert report.gaps["evict"]["memory_total_usage"] == pytest.approx(10.0 * GI)
    assert api.calls[-3:] == ["default/a", "default/b", "default/c"]
    assert brain.state.awaiting_answer() == {}
    assert "default/a" in brain.state.terminating()


def test_settle_counts_pods_terminating_gone_or_replaced() -> None:
    """Gone or replaced before a tick saw it terminating (grace 0, a slow watch): most
    likely our eviction; the limits rather count one too many than miss one."""
    pending = {"default/a": Unanswered("x", "uid-a"), "default/b": Unanswered("x", "old-uid"),
               "default/c": Unanswered("x", "uid-c"), "default/z": Unanswered("x", "")}  # fmt: skip
    now = {p.key: p for p in pods(deleting="c")}
    assert [key for key, _ in settle(pending, now)] == ["default/b", "default/c", "default/z"]
    assert pending == {"default/a": Unanswered("x", "uid-a")}  # still running: still pending


def test_a_pod_gone_before_it_was_seen_terminating_is_counted_not_released() -> None:
    brain = NodeBrain(AgentSettings(eviction_rate_limit=EvictionRateLimit(per_minute=1, burst=5)))
    api = Scripted(EvictionAnswer(FAILED, unanswered=True), EvictionAnswer(EVICTED))
    tick(brain, api, 0, pods())
    remaining = [p for p in pods() if p.name != "a"]  # deleted at once: never seen terminating
    later = tick(brain, api, 60, remaining)
    assert later.late_evictions == [LateEviction("default/a", "evict")]  # its Event, its count
    assert "default/a" not in brain.state.terminating()  # nothing of it left to release
    assert brain.state.tokens() == pytest.approx(5 - 1 + 1 - 1 - 1)


def test_eviction_answer_seconds_parses_with_the_one_error_format() -> None:
    assert AgentSettings().eviction_answer_seconds == 1.0
    assert parse_agent_settings({"evictionAnswerSeconds": 0.5}).eviction_answer_seconds == 0.5
    with pytest.raises(InvalidObject) as err:
        parse_agent_settings({"evictionAnswerSeconds": 0}, prefix="agent.")
    assert str(err.value) == "config agent: agent.evictionAnswerSeconds must be > 0, got 0"


def test_a_late_eviction_gets_its_event_and_its_count() -> None:
    """The cluster brake counts the agents' Evicted Events: an eviction answered after its
    tick must get one too, and the actions counter says how it ended."""
    brain = NodeBrain()
    api = Scripted(EvictionAnswer(FAILED, unanswered=True), EvictionAnswer(EVICTED))
    first = tick(brain, api, 0, pods())
    assert first.late_evictions == []
    now_pods = pods(deleting="a")
    later = tick(brain, api, 60, now_pods)
    assert later.late_evictions == [LateEviction("default/a", "evict")]
    assert tick(brain, api, 61, now_pods).late_evictions == []  # once
    by_key = {p.key: p for p in now_pods}
    evicted = [e for e in tick_events("n1", later, [], {}, by_key) if e.reason == "Evicted"]
    assert [(e.ref.name, e.type) for e in evicted][0] == ("a", "Warning")
    assert "answered after its tick" in evicted[0].message
    metrics = AgentMetrics()
    publish = MetricsPublisher(metrics, Health(stale_after=60.0))
    publish(TickOutcome(seq=2, at=NOW + 60, duration=0.1, node="n1", report=later))
    counted = metrics.registry.get_sample_value(
        "waterline_actions_total", {"action": "evict", "result": LATE_EVICTION_RESULT})
    assert counted == 1.0
