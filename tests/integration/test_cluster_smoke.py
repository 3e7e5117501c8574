"""The real cluster itself: the fixture's control plane schedules, runs and restarts."""

from __future__ import annotations

import json

import pytest

from devtools.harness.cluster import RealCluster
from devtools.harness.waiting import wait_until

pytestmark = pytest.mark.integration


def test_a_deployment_is_scheduled_onto_a_kwok_node_and_runs(kube: RealCluster) -> None:
    ns = kube.namespace("smoke")
    node = kube.node(labels={"pool": ns})
    kube.apply([{
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": {"pool": ns},
                                       "containers": [{"name": "main", "image": "pause"}]}}},
    }])  # fmt: skip
    wait_until(lambda: len(_running(kube, ns)) == 2)
    assert {p["spec"]["nodeName"] for p in _running(kube, ns)} == {node}


def test_the_apiserver_comes_back_after_kill_9(kube: RealCluster) -> None:
    kube.restart_apiserver()
    assert kube.kubectl("get", "--raw", "/readyz").stdout == "ok"


def _running(kube: RealCluster, ns: str) -> list[dict]:
    pods = json.loads(kube.kubectl("-n", ns, "get", "pods", "-o", "json").stdout)["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]
