"""Event aggregation: repeats patch one Event, many similar messages fold into one,
and a per-object token bucket keeps a hot node from flooding the API."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from agent.kube.errors import KubeNotFound, KubeUnreachable
from agent.kube.events import COMBINED, EventArgs, EventRecorder, ObjectRef, node_ref, pod_ref
from agent.model.objects import Pod


class Sink:
    """Events in memory, answering like the API (404 for an unknown Event)."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls = 0
        self.down = False

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.down:
            raise KubeUnreachable("down")
        self.events[(namespace, body["metadata"]["name"])] = dict(body)
        return body

    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.down:
            raise KubeUnreachable("down")
        if (namespace, name) not in self.events:
            raise KubeNotFound("gone")
        self.events[(namespace, name)].update(patch)
        return self.events[(namespace, name)]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def recorder(sink: Sink, clock: Clock, **args: Any) -> EventRecorder:
    return EventRecorder(sink, "waterline-agent", "node-1", EventArgs(**args), clock=clock)


def test_repeats_patch_the_count_of_one_event() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock)
    ref = pod_ref(Pod("ns", "p", "uid-1"))
    assert rec.record(ref, "Normal", "Throttled", "cpu capped at 1") == "created"
    clock.now += 10
    assert rec.record(ref, "Normal", "Throttled", "cpu capped at 1") == "updated"
    assert rec.record(ref, "Normal", "Throttled", "cpu capped at 1") == "updated"
    (event,) = sink.events.values()
    assert event["count"] == 3
    assert event["involvedObject"] == {
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "uid-1",
        "apiVersion": "v1",
    }
    assert event["firstTimestamp"] != event["lastTimestamp"]
    # the event expired server-side: a new one is created
    sink.events.clear()
    assert rec.record(ref, "Normal", "Throttled", "cpu capped at 1") == "created"


def test_cluster_scoped_objects_get_events_in_default() -> None:
    sink, clock = Sink(), Clock()
    recorder(sink, clock).record(node_ref("node-1"), "Warning", "RuleTriggered", "cpu-high")
    ((namespace, _),) = sink.events
    assert namespace == "default"


def test_many_similar_messages_are_combined() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, similar_limit=3, burst=100)
    ref = node_ref("node-1")
    for i in range(10):
        rec.record(ref, "Warning", "EvictionBlocked", f"pod-{i} blocked")
    assert len(sink.events) == 4  # three distinct, then one combined event
    combined = [e for e in sink.events.values() if e["message"].startswith(COMBINED)]
    assert len(combined) == 1 and combined[0]["count"] == 7
    assert combined[0]["message"] == COMBINED + "pod-9 blocked"  # shows the latest


def test_a_hot_object_is_rate_limited_then_refills() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, burst=5, refill_seconds=60)
    hot, quiet = node_ref("hot"), ObjectRef("Pod", "q", "ns")
    results = [rec.record(hot, "Warning", "RuleTriggered", "same") for _ in range(50)]
    assert results.count("dropped") == 45 and rec.dropped == 45
    assert sink.calls == 5
    assert rec.record(quiet, "Normal", "Evicted", "x") == "created"  # other objects unaffected
    clock.now += 120  # two tokens back
    assert [rec.record(hot, "Warning", "RuleTriggered", "same") for _ in range(3)] == [
        "updated",
        "updated",
        "dropped",
    ]


def test_a_failing_api_is_logged_once_and_never_raises() -> None:
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, burst=100)
    sink.down = True
    with capture_logs() as logs:
        results = [rec.record(node_ref("n"), "Normal", "RuleRestored", f"m{i}") for i in range(5)]
        sink.down = False
        assert rec.record(node_ref("n"), "Normal", "RuleRestored", "back") == "created"
    assert results == ["failed"] * 5
    assert [e["log_level"] for e in logs] == ["warning", "info"]


def test_what_is_kept_of_pods_that_went_is_let_go_once_it_cannot_change_an_answer() -> None:
    """Issue 32: the aggregation keys hold a pod's uid; a node whose pods come and go
    must not keep one entry per pod that ever had an Event (up to MAX_KEYS a cache)."""
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, burst=5, refill_seconds=60, window_seconds=600)
    for i in range(200):  # 200 pods, each throttled once and gone
        assert rec.record(pod_ref(Pod("ns", f"p{i}", f"uid-{i}")), "Normal", "Throttled", "capped") == "created"
    assert rec.remembered == 600  # similar, dedup and bucket entries of each pod
    clock.now += 250  # buckets full again (1 of 5 tokens used, 60 s each), windows still open
    live = pod_ref(Pod("ns", "live", "uid-live"))
    rec.record(live, "Normal", "Throttled", "capped")
    assert rec.remembered == 400 + 3  # the buckets are a fresh one's: gone
    clock.now += 600  # every window of the 200 is over; the live pod's is not
    assert rec.record(live, "Normal", "Throttled", "capped") == "updated"
    assert rec.remembered == 3


def test_letting_go_changes_no_answer() -> None:
    """An entry is dropped only when a fresh one would answer the same: a repeat after the
    window is a new Event, a bucket refilled to its burst lets as many through."""
    sink, clock = Sink(), Clock()
    rec = recorder(sink, clock, burst=2, refill_seconds=60, window_seconds=600, similar_limit=2)
    ref = pod_ref(Pod("ns", "p", "uid-p"))
    assert [rec.record(ref, "Warning", "EvictionBlocked", m) for m in ("a", "b", "c", "d")] == [
        "created", "created", "dropped", "dropped"]  # fmt: skip
    clock.now += 601  # window over, bucket full: exactly a fresh recorder's answers
    fresh = recorder(Sink(), clock, burst=2, refill_seconds=60, window_seconds=600, similar_limit=2)
    other = pod_ref(Pod("ns", "q", "uid-q"))
    rec.record(other, "Normal", "Throttled", "x")  # sweeps
    assert rec.remembered == 3
    answers = [rec.record(ref, "Warning", "EvictionBlocked", m) for m in ("a", "a", "b", "c")]
    assert answers == [fresh.record(ref, "Warning", "EvictionBlocked", m) for m in ("a", "a", "b", "c")]
