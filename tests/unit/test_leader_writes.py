"""A leader's writes end with its leadership (issue 11), on a fake clock.

The fake API server commits a write ``commit_after`` seconds after it was sent, unless by
then the client gave up (its read timeout) or the server's own deadline (the request's
``timeout`` parameter, which the real API server enforces on every non-watch request)
passed: then the request is abandoned and nothing is committed, as a real server does
when the request's context ends before the storage write."""

from __future__ import annotations

import random
from typing import Any
from unittest import mock

import pytest
import urllib3

from agent.cluster.metrics import ControllerMetrics
from agent.cluster.writes import GuardedWriter, NotLeader
from agent.kube import evicting
from agent.kube.client import KubeApi
from agent.kube.leases import ElectionArgs, LeaderElector, MemoryLeases
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod

ARGS = ElectionArgs(lease_duration=15, renew_deadline=10.0, retry_period=2.0, jitter=0.2)
T0 = 1000.0  # the scenario's 0 s


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class SlowServer:
    """An ``ApiClient`` stand-in: each request takes ``commit_after`` seconds to commit."""

    def __init__(self, clock: Clock, commit_after: float) -> None:
        self.clock, self.commit_after = clock, commit_after
        self.committed: list[tuple[str, str, float]] = []
        self.requests: list[dict[str, Any]] = []

    def call_api(self, path: str, method: str, **kw: Any) -> Any:
        sent = self.clock.now
        query = dict(kw["query_params"])
        client_timeout = kw["_request_timeout"][1]
        limits = [client_timeout]
        if "timeout" in query:
            limits.append(float(query["timeout"].removesuffix("ms")) / 1000)
        self.requests.append(
            {"path": path, "sent": sent, "query": query, "timeout": client_timeout, "body": kw["body"]}
        )
        if self.commit_after > min(limits):
            self.clock.now = sent + min(limits)
            raise urllib3.exceptions.ReadTimeoutError(None, path, "Read timed out.")  # type: ignore[arg-type]
        self.clock.now = sent + self.commit_after
        self.committed.append((method, path, self.clock.now))
        return mock.Mock(data=b"{}")


def pod() -> Pod:
    return Pod(namespace="default", name="web-1", uid="u1", node_name="n1")


def leader(clock: Clock) -> LeaderElector:
    """A leader whose last renewal was at -5.2 s: it stops leading at 4.8 s."""
    view = MemoryLeases().view()
    elector = LeaderElector(view, "a", ARGS, clock=clock, wall=clock, rng=random.Random(1))
    clock.now = T0 - 5.2
    elector.step(clock.now)
    assert elector.is_leader()
    view.reachable = False  # partitioned: no renewal will succeed
    return elector


def test_a_late_write_is_never_committed_after_leadership_ends() -> None:
    clock = Clock(T0)
    elector = leader(clock)
    server = SlowServer(clock, commit_after=12.0)  # sent at 1.2 s, it would commit at 13.2 s
    writer = GuardedWriter(KubeApi(server), elector.time_left, False, ControllerMetrics())
    clock.now = T0 + 1.2
    result = writer.evict(pod())
    assert result is not None and result[0] is EvictionResult.FAILED
    assert server.committed == []  # abandoned, not committed at 13.2 s
    assert T0 + 4.79 <= clock.now <= T0 + 4.8  # the writer gave up at the deadline
    (request,) = server.requests
    assert request["timeout"] == pytest.approx(3.6)
    server_deadline = float(request["query"]["timeout"].removesuffix("ms")) / 1000
    assert 3.59 <= server_deadline <= 3.6  # the server's own deadline, never past 4.8 s
    clock.now = T0 + 4.8
    assert not elector.is_leader()
    with pytest.raises(NotLeader):  # and nothing more is sent
        writer.evict(pod())
    assert len(server.requests) == 1
    assert writer.take_failures() == 1  # the round counts it as a failed write


def test_without_the_bound_the_same_write_commits_at_13_2_s() -> None:
    """What issue 11 saw: the client's 30 s read timeout let it commit after the end."""
    clock = Clock(T0)
    leader(clock)
    server = SlowServer(clock, commit_after=12.0)
    clock.now = T0 + 1.2
    outcome = evicting.evict(KubeApi(server), "default", "web-1", None, "u1")
    assert outcome.result is EvictionResult.EVICTED
    assert server.committed == [("POST", "/api/v1/namespaces/default/pods/web-1/eviction", T0 + 13.2)]


def test_a_write_that_fits_before_the_deadline_commits() -> None:
    clock = Clock(T0)
    elector = leader(clock)
    server = SlowServer(clock, commit_after=0.5)
    writer = GuardedWriter(KubeApi(server), elector.time_left, False, ControllerMetrics())
    clock.now = T0 + 1.2
    assert writer.job_status("j-1", {"phase": "Running"}, resource_version="42")
    # the status was decided on version 42: a precondition, refused (409) if it moved on
    assert server.requests[0]["body"]["metadata"] == {"resourceVersion": "42"}
    assert server.committed == [
        ("PATCH", "/apis/qos.waterline.io/v1alpha1/podmigrationjobs/j-1/status", T0 + 1.7)
    ]


def test_no_write_is_sent_with_less_than_the_minimum_left() -> None:
    clock = Clock(T0)
    elector = leader(clock)
    server = SlowServer(clock, commit_after=0.01)
    writer = GuardedWriter(KubeApi(server), elector.time_left, False, ControllerMetrics())
    clock.now = T0 + 4.79
    with pytest.raises(NotLeader):
        writer.annotate_node("n1", {"a": "b"})
    assert server.requests == []


class Told:
    """The controller's recorder, as the writer sees it: the Events it was asked for."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def record(self, ref: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((ref.name, reason))


def test_a_job_status_tells_its_phase_once_not_at_every_step() -> None:
    clock = Clock(T0)
    elector = leader(clock)
    metrics = ControllerMetrics()
    writer = GuardedWriter(KubeApi(SlowServer(clock, commit_after=0.0)), elector.time_left, False, metrics)
    told = Told()
    writer.recorder = told  # type: ignore[assignment]
    clock.now = T0 + 1.0
    assert writer.job_status("j-1", {"phase": "Running", "reason": "Started"}, transition=True)
    assert writer.job_status("j-1", {"phase": "Running", "reason": "Evicting"}, transition=False)
    assert writer.job_status("j-1", {"phase": "Succeeded"}, transition=True)
    assert told.events == [("j-1", "MigrationStarted"), ("j-1", "MigrationSucceeded")]
    count = metrics.registry.get_sample_value(
        "waterline_controller_migration_transitions_total", {"phase": "Running"})
    assert count == 1.0
