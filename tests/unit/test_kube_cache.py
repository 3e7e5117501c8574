"""The slim cache: relists delete what vanished, bad objects stay out and are logged once,
CRs are kept raw without their heavy metadata."""

from __future__ import annotations

import threading

from structlog.testing import capture_logs

from agent.kube.cache import Cache, slim
from agent.model.objects import Pod
from tests import builders


def pod(name: str, cpu: str = "100m") -> dict:
    return builders.pod(name, namespace="default", requests={"cpu": cpu})


def bad_pod(name: str) -> dict:
    raw = pod(name)
    raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    return raw


def test_relist_replaces_and_deletes_what_vanished() -> None:
    cache = Cache()
    cache.replace("Pod", [pod("a"), pod("b")])
    cache.apply("Pod", "ADDED", pod("c"))
    cache.replace("Pod", [pod("b"), pod("c")])
    assert sorted(p.key for p in cache.records("Pod")) == ["default/b", "default/c"]  # type: ignore[attr-defined]
    assert isinstance(cache.get("Pod", "default/b"), Pod)


def test_watch_events_add_modify_delete() -> None:
    cache = Cache()
    cache.replace("Pod", [])
    cache.apply("Pod", "ADDED", pod("a", cpu="100m"))
    cache.apply("Pod", "MODIFIED", pod("a", cpu="2"))
    got = cache.get("Pod", "default/a")
    assert isinstance(got, Pod) and got.request("cpu") == 2.0
    cache.apply("Pod", "DELETED", pod("a"))
    assert cache.records("Pod") == []


def test_a_malformed_object_is_left_out_logged_once_and_the_rest_kept() -> None:
    cache = Cache()
    with capture_logs() as logs:
        cache.replace("Pod", [pod("a"), bad_pod("bad"), pod("b")])
        cache.replace("Pod", [pod("a"), bad_pod("bad"), pod("b")])  # relist: same error
        cache.apply("Pod", "MODIFIED", bad_pod("bad"))
    assert sorted(p.key for p in cache.records("Pod")) == ["default/a", "default/b"]  # type: ignore[attr-defined]
    assert list(cache.invalid("Pod")) == ["default/bad"]
    assert "spec.containers[0].resources.requests" in cache.invalid("Pod")["default/bad"]
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["key"] == "default/bad"
    # fixed: it enters the cache and leaves the invalid list
    cache.apply("Pod", "MODIFIED", pod("bad"))
    assert cache.get("Pod", "default/bad") is not None and cache.invalid("Pod") == {}


def test_crs_are_kept_raw_without_managed_fields() -> None:
    policy = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "NodeQOSEnsurancePolicy",
        "metadata": {
            "name": "p",
            "managedFields": [{"manager": "kubectl"}] * 50,
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                "keep": "me",
            },
        },
        "spec": {"objectiveEnsurances": []},
    }
    cache = Cache()
    cache.replace("NodeQOSEnsurancePolicy", [policy])
    (kept,) = cache.records("NodeQOSEnsurancePolicy")
    assert kept == slim(policy)
    assert "managedFields" not in kept["metadata"]  # type: ignore[index]
    assert kept["metadata"]["annotations"] == {"keep": "me"}  # type: ignore[index]
    assert "managedFields" in policy["metadata"]  # the input is not changed


def test_change_notification_and_reachability() -> None:
    cache = Cache()
    seen: list[str] = []
    cache.add_listener(seen.append)
    assert not cache.api_reachable  # nothing has answered yet
    start = cache.version
    threading.Timer(0.05, lambda: cache.apply("Pod", "ADDED", pod("a"))).start()
    assert cache.wait_for_change(start, timeout=5) > start
    cache.set_reachable("pods", True)
    cache.set_reachable("nodes", True)
    assert cache.api_reachable
    cache.set_reachable("nodes", False)
    assert not cache.api_reachable
    assert seen == ["Pod", "", "", ""]
    assert not cache.synced(["Pod"])  # an event is not a list
    cache.replace("Pod", [])
    assert cache.synced(["Pod"])
