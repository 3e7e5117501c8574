"""Faults between the reflector and the API server, over real HTTP: a watch dropped
mid-stream, 410 on resume, 500s, client timeouts, malformed watch lines and a malformed
object in a list. Nothing crashes, nothing is lost, each fault is logged once."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent.kube.backoff import BackoffArgs
from agent.kube.cache import Cache
from agent.kube.creating import create
from agent.kube.deleting import delete
from agent.kube.fetching import Selectors
from agent.kube.resources import PODS
from agent.kube.watching import Reflector, WatchArgs
from devtools.apiserver.server import Fault
from devtools.apiserver.testing import Running, pod, serve
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

FAST = WatchArgs(
    watch_timeout_seconds=5, list_read_timeout=0.3, backoff=BackoffArgs(initial=0.05, maximum=0.2)
)
NODE1 = Selectors(field_selector="spec.nodeName=node-1")




@contextmanager
def reflecting(env: Running, cache: Cache, args: WatchArgs = FAST) -> Iterator[Reflector]:
    reflector = Reflector(env.api, PODS, cache, NODE1, args, random.Random(5))
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    try:
        yield reflector
    finally:
        reflector.stop()
        thread.join(5)
        assert not thread.is_alive()


def names(cache: Cache) -> list[str]:
    return sorted(p.name for p in cache.records("Pod"))  # type: ignore[attr-defined]


def levels(logs: list[dict[str, Any]]) -> list[str]:
    """The severities logged, in order (not the wording: a reworded line is no regression)."""
    return [e["log_level"] for e in logs if e["log_level"] in ("warning", "info", "error")]


def lists(env: Running) -> int:
    return sum(
        1
        for m, q in env.server.requests
        if m == "GET" and q.startswith("/api/v1/pods") and "watch=true" not in q
    )


def test_watch_dropped_mid_stream_resumes_without_loss_or_relist() -> None:
    with serve([pod("a")]) as env, capture_logs() as logs:
        cache = Cache()
        env.server.inject(Fault("/api/v1/pods", watch=True, drop_after=1))
        with reflecting(env, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            for name in ("b", "c", "d"):
                create(env.api, PODS, pod(name))
            wait_until(lambda: names(cache) == ["a", "b", "c", "d"])
            assert cache.api_reachable
        assert lists(env) == 1  # resumed from its resourceVersion, no relist
    assert levels(logs) == ["warning", "info"]  # failed, then recovered


def test_410_on_resume_relists_and_sees_deletions() -> None:
    with serve([pod("a"), pod("b")]) as env, capture_logs() as logs:
        cache = Cache()
        with reflecting(env, cache):
            wait_until(lambda: names(cache) == ["a", "b"])
            blocker = env.server.inject(Fault("/api/v1/pods", watch=True, status=503, times=10**6))
            env.server.drop_watches()
            wait_until(lambda: not cache.api_reachable)  # retrying against the 503s
            delete(env.api, PODS, "a", "default")
            create(env.api, PODS, pod("c"))
            env.server.store.compact()
            blocker.times = 0
            wait_until(lambda: names(cache) == ["b", "c"])
            wait_until(lambda: cache.api_reachable)
        assert lists(env) == 2
    assert levels(logs) == ["warning", "info", "info"]  # failed, recovered, relisted


def test_500s_back_off_then_recover_logged_once() -> None:
    with serve([pod("a")]) as env, capture_logs() as logs:
        env.server.inject(Fault("/api/v1/pods", watch=False, status=500, times=4))
        cache = Cache()
        with reflecting(env, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            assert names(cache) == ["a"] and cache.api_reachable
        assert lists(env) == 5
    assert levels(logs) == ["warning", "info"]  # failed, then recovered


def test_client_side_timeouts_are_retried() -> None:
    with serve([pod("a")]) as env, capture_logs() as logs:
        env.server.inject(Fault("/api/v1/pods", watch=False, status=0, delay=0.8, times=2))
        cache = Cache()
        with reflecting(env, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            assert names(cache) == ["a"]
    assert levels(logs) == ["warning", "info"]  # failed, then recovered
    assert "KubeUnreachable" in logs[0]["error"]


def test_malformed_watch_line_is_skipped_by_resuming() -> None:
    with serve([pod("a")]) as env, capture_logs() as logs:
        env.server.inject(Fault("/api/v1/pods", watch=True, garbage=b"{this is not json"))
        cache = Cache()
        with reflecting(env, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            create(env.api, PODS, pod("b"))
            wait_until(lambda: names(cache) == ["a", "b"])
    assert levels(logs) == ["warning", "info"]  # failed, then recovered
    assert "malformed watch line" in logs[0]["error"]


def test_a_malformed_object_in_a_list_does_not_hide_the_others() -> None:
    bad = pod("bad")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "a lot"
    with serve([pod("a"), bad, pod("c")]) as env, capture_logs() as logs:
        cache = Cache()
        with reflecting(env, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            assert names(cache) == ["a", "c"]
            assert list(cache.invalid("Pod")) == ["default/bad"]
            # the same bad object again (a label change): still one log line
            env.server.store.patch(PODS, "default", "bad", {"metadata": {"labels": {"x": "y"}}})
            create(env.api, PODS, pod("d"))
            wait_until(lambda: names(cache) == ["a", "c", "d"])
    assert levels(logs) == ["warning"]  # the invalid object, once
