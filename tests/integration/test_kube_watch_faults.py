"""Faults between the reflector and the real kube-apiserver: a watch dropped mid-stream,
a real 410 on resume (the apiserver restarted under the reflector: its new watch cache
starts past the reflector's resourceVersion), 500s, client timeouts, a malformed watch
line and a malformed object. Nothing crashes, nothing is lost, each fault is logged once.

The reflector watches its node's pods with the agent's own token, through the fault proxy;
the pods come from a ReplicaSet (scaled to make new ones) on the test's kwok node.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent.kube.backoff import BackoffArgs
from agent.kube.cache import Cache
from agent.kube.client import KubeApi
from agent.kube.fetching import Selectors
from agent.kube.resources import PODS
from agent.kube.watching import Reflector, WatchArgs
from devtools.harness.agent_env import Pool, name_of
from devtools.harness.cluster import NAMESPACE, RealCluster
from devtools.harness.faultproxy import Fault, FaultProxy
from devtools.harness.waiting import wait_until

pytestmark = pytest.mark.integration

FAST = WatchArgs(
    watch_timeout_seconds=5, list_read_timeout=2.0, backoff=BackoffArgs(initial=0.05, maximum=0.2)
)
ALL_PODS = "/api/v1/pods"


@contextmanager
def reflecting(api: KubeApi, node: str, cache: Cache, args: WatchArgs = FAST) -> Iterator[Reflector]:
    reflector = Reflector(api, PODS, cache, Selectors(field_selector=f"spec.nodeName={node}"), args,
                          random.Random(5))  # fmt: skip
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    try:
        yield reflector
    finally:
        reflector.stop()
        thread.join(5)
        assert not thread.is_alive()


@contextmanager
def watched(kube: RealCluster, pool: Pool, replicas: int) -> Iterator[tuple[FaultProxy, KubeApi, str]]:
    """The test's node running ``replicas`` pods of ReplicaSet "w", and the agent's API
    through a fault proxy."""
    node = pool.node()
    pool.running(pool.replicaset("w", replicas, node=node), replicas)
    with kube.proxy() as proxy:
        api = kube.client(kube.agent_kubeconfig(node, proxy.url))
        try:
            yield proxy, api, node
        finally:
            api.close()


def names(cache: Cache) -> list[str]:
    """The cached pods of the test (the node also runs the agent DaemonSet's pod)."""
    return sorted(p.name for p in cache.records("Pod") if p.namespace != NAMESPACE)  # type: ignore[attr-defined]


def running(pool: Pool) -> list[str]:
    """The ReplicaSet's pods as the server has them (bound to the node, not deleted)."""
    return sorted(name_of(p) for p in pool.pods("w")
                  if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"))  # fmt: skip


def scale(kube: RealCluster, pool: Pool, replicas: int) -> None:
    kube.kubectl("-n", pool.namespace, "scale", "rs", "w", f"--replicas={replicas}")
    wait_until(lambda: len(running(pool)) == replicas, 60)


def events(logs: list[dict[str, Any]]) -> list[str]:
    """level:code of each event the watch logged (its stable code, not its sentence)."""
    return [
        f"{e['log_level']}:{e.get('code')}"
        for e in logs
        if e["log_level"] in ("warning", "info", "error")
    ]


def lists(proxy: FaultProxy) -> int:
    return len(proxy.seen("GET", ALL_PODS, watch=False))


def test_watch_dropped_mid_stream_resumes_without_loss_or_relist(kube: RealCluster, pool: Pool) -> None:
    with watched(kube, pool, 1) as (proxy, api, node), capture_logs() as logs:
        cache = Cache()
        proxy.inject(Fault(ALL_PODS, watch=True, drop_after=1))
        with reflecting(api, node, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            scale(kube, pool, 4)
            wait_until(lambda: names(cache) == running(pool), 30)
            assert cache.api_reachable
        assert lists(proxy) == 1  # resumed from its resourceVersion, no relist
    assert events(logs) == ["warning:watch-failed", "info:watch-recovered"]


def test_410_on_resume_after_an_apiserver_restart_relists_and_sees_deletions(
    kube: RealCluster, pool: Pool
) -> None:
    """The watch is cut and held off (503) while a pod goes and another comes; the
    kube-apiserver is restarted (kill -9): its watch cache starts at etcd's current
    revision, past the reflector's resourceVersion, so the resumed watch gets the real
    server's 410 Gone ("too old resource version") and the reflector relists."""
    with watched(kube, pool, 2) as (proxy, api, node), capture_logs() as logs:
        cache = Cache()
        with reflecting(api, node, cache) as reflector:
            wait_until(lambda: names(cache) == running(pool) and len(names(cache)) == 2, 30)
            blocker = proxy.inject(Fault(ALL_PODS, watch=True, status=503, times=10**6))
            proxy.drop_watches()
            wait_until(lambda: not cache.api_reachable)  # retrying against the 503s
            held_at = reflector.resource_version
            gone = running(pool)[0]
            kube.kubectl("-n", pool.namespace, "delete", "pod", gone)  # the ReplicaSet replaces it
            wait_until(lambda: gone not in running(pool) and len(running(pool)) == 2, 60)
            started = time.monotonic()
            kube.restart_apiserver()
            restart = time.monotonic() - started
            blocker.times = 0
            wait_until(lambda: names(cache) == running(pool), 60)
            wait_until(lambda: cache.api_reachable, 60)
        assert gone not in names(cache)
        assert lists(proxy) == 2  # the first list, and the relist after the 410
    gones = [(path, code) for path, code in proxy.watch_errors if code == 410]
    assert gones and f"resourceVersion={held_at}" in gones[0][0], proxy.watch_errors
    seen = events(logs)
    assert seen.count("info:watch-relist") == 1, seen
    assert seen[0] == "warning:watch-failed", seen
    print(f"\nkube-apiserver restarted in {restart:.1f} s; the watch resumed at "
          f"resourceVersion={held_at} got 410 from the real server, then one relist")


def test_500s_back_off_then_recover_logged_once(kube: RealCluster, pool: Pool) -> None:
    with watched(kube, pool, 1) as (proxy, api, node), capture_logs() as logs:
        proxy.inject(Fault(ALL_PODS, watch=False, status=500, times=4))
        cache = Cache()
        with reflecting(api, node, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            assert names(cache) == running(pool) and cache.api_reachable
        assert lists(proxy) == 5
    assert events(logs) == ["warning:watch-failed", "info:watch-recovered"]


def test_client_side_timeouts_are_retried(kube: RealCluster, pool: Pool) -> None:
    with watched(kube, pool, 1) as (proxy, api, node), capture_logs() as logs:
        proxy.inject(Fault(ALL_PODS, watch=False, status=0, delay=3.0, times=2))
        cache = Cache()
        with reflecting(api, node, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            assert names(cache) == running(pool)
    assert events(logs) == ["warning:watch-failed", "info:watch-recovered"]
    assert "KubeUnreachable" in logs[0]["error"]


def test_malformed_watch_line_is_skipped_by_resuming(kube: RealCluster, pool: Pool) -> None:
    with watched(kube, pool, 1) as (proxy, api, node), capture_logs() as logs:
        proxy.inject(Fault(ALL_PODS, watch=True, garbage=b"{this is not json"))
        cache = Cache()
        with reflecting(api, node, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            scale(kube, pool, 2)
            wait_until(lambda: names(cache) == running(pool), 30)
    assert events(logs) == ["warning:watch-failed", "info:watch-recovered"]
    assert "malformed watch line" in logs[0]["error"]


def test_a_malformed_object_does_not_hide_the_others(kube: RealCluster, pool: Pool) -> None:
    """One pod's CPU request reads "a lot" in every answer and event the proxy passes on
    (the real server refuses such a pod, so the proxy makes it)."""
    with watched(kube, pool, 3) as (proxy, api, node), capture_logs() as logs:
        bad = running(pool)[1]

        def spoil(obj: dict[str, Any]) -> None:
            if obj.get("metadata", {}).get("name") == bad:
                obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "a lot"}}

        proxy.inject(Fault(ALL_PODS, status=0, edit=spoil, times=10**6))
        cache = Cache()
        with reflecting(api, node, cache):
            wait_until(lambda: cache.synced(["Pod"]))
            assert names(cache) == [n for n in running(pool) if n != bad]
            assert list(cache.invalid("Pod")) == [f"{pool.namespace}/{bad}"]
            # the same bad object again (a label change): still one log line
            kube.kubectl("-n", pool.namespace, "label", "pod", bad, "x=y")
            scale(kube, pool, 4)
            wait_until(lambda: names(cache) == [n for n in running(pool) if n != bad], 30)
            assert "spec.containers[0].resources.requests" in cache.invalid("Pod")[f"{pool.namespace}/{bad}"]
    assert events(logs) == ["warning:invalid-object-skipped"]
