"""Batch pods without rewriting manifests, on the real control plane (issue 33): the
MutatingAdmissionPolicy of ``deploy/batch-pods/`` turns a pod of the batch scope created in
an opted-in namespace into a batch pod (its cpu and memory moved to ``waterline.io/batch-cpu``
in millicores and ``waterline.io/batch-memory`` in bytes, other resources kept), and leaves
every other pod as written: one outside the scope, one in a namespace not opted in.

What is asserted is what the API server stored (the pod read back) and the QoS class it
computed, so the test fails if the server does not serve the policy, does not bind it, or
mutates the wrong pods.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent.model.batch import BATCH_CPU, BATCH_MEMORY
from agent.model.quantity import parse_quantity
from devtools.harness.cluster import ROOT, RealCluster, unique
from devtools.harness.waiting import wait_until

pytestmark = pytest.mark.integration

BATCH_PODS = ROOT / "deploy" / "batch-pods"
OPT_IN = {"waterline.io/batch-pods": "enabled"}


@pytest.fixture
def installed(kube: RealCluster) -> Iterator[RealCluster]:
    kube.kubectl("apply", "-k", str(BATCH_PODS))
    try:
        yield kube
    finally:
        kube.kubectl("delete", "-k", str(BATCH_PODS), "--ignore-not-found")


def _pod(name: str, labels: dict[str, str] | None = None, priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "initContainers": [{"name": "init", "image": "pause", "resources": {"requests": {"cpu": "250m"}}}],
        "containers": [
            {"name": "main", "image": "pause", "resources": {
                "requests": {"cpu": "1500m", "memory": "1Gi", "ephemeral-storage": "1Gi"},
                "limits": {"cpu": "2", "memory": "2Gi"}}},
            {"name": "side", "image": "pause"},
        ],
    }  # fmt: skip
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}  # fmt: skip


def _create(kube: RealCluster, namespace: str, pod: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    args = ["-n", namespace, "create", "-o", "json", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    done = kube.kubectl(*args, input=json.dumps(pod))
    created: dict[str, Any] = json.loads(done.stdout)
    return created


def _resources(pod: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Container name -> requests/limits -> resource -> amount (quantities parsed: the
    server writes 2000 as "2k")."""
    out = {}
    for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
        res = c.get("resources", {})
        out[c["name"]] = {part: {k: parse_quantity(v) for k, v in res.get(part, {}).items()}
                          for part in ("requests", "limits")}
    return out


def test_a_pod_of_the_batch_scope_in_an_opted_in_namespace_becomes_a_batch_pod(installed: RealCluster) -> None:
    kube = installed
    opted = kube.namespace("batch", OPT_IN)
    other = kube.namespace("plain")
    labelled = _pod("by-label", {"waterline.io/batch": "true"})
    # The policy is served once the API server's informer has it: probe with a dry run.
    wait_until(lambda: BATCH_CPU in str(_create(kube, opted, labelled, dry_run=True)["spec"]),
               60, "the batch pods policy in force")

    made = _resources(_create(kube, opted, labelled))
    assert made["main"] == {
        "requests": {"ephemeral-storage": 2**30, BATCH_CPU: 2000, BATCH_MEMORY: 2 * 2**30},
        "limits": {BATCH_CPU: 2000, BATCH_MEMORY: 2 * 2**30},
    }
    assert made["init"] == {"requests": {BATCH_CPU: 250}, "limits": {BATCH_CPU: 250}}
    assert made["side"] == {"requests": {}, "limits": {}}
    stored = json.loads(kube.kubectl("-n", opted, "get", "pod", "by-label", "-o", "json").stdout)
    assert stored["status"]["qosClass"] == "BestEffort"

    priority = unique("waterline-batch")
    kube.kubectl("create", "priorityclass", priority, "--value=100")
    try:
        # The scope's PriorityClass is named in the policy: a pod of another class is left alone.
        by_other_class = _resources(_create(kube, opted, _pod("other-class", priority_class=priority)))
        assert by_other_class["main"]["requests"]["cpu"] == 1.5
    finally:
        kube.kubectl("delete", "priorityclass", priority, "--ignore-not-found")
    made_class = kube.kubectl("create", "priorityclass", "waterline-batch", "--value=100",
                              check=False).returncode == 0
    try:
        by_class = _resources(_create(kube, opted, _pod("by-class", priority_class="waterline-batch")))
        assert by_class["main"]["limits"] == {BATCH_CPU: 2000, BATCH_MEMORY: 2 * 2**30}
    finally:
        if made_class:
            kube.kubectl("delete", "priorityclass", "waterline-batch", "--ignore-not-found")

    out_of_scope = _resources(_create(kube, opted, _pod("not-batch")))
    assert out_of_scope["main"]["requests"] == {"cpu": 1.5, "memory": 2**30, "ephemeral-storage": 2**30}
    assert out_of_scope["init"]["requests"] == {"cpu": 0.25}

    elsewhere = _create(kube, other, labelled)
    assert _resources(elsewhere)["main"] == {
        "requests": {"cpu": 1.5, "memory": 2**30, "ephemeral-storage": 2**30},
        "limits": {"cpu": 2, "memory": 2 * 2**30},
    }
    stored = json.loads(kube.kubectl("-n", other, "get", "pod", "by-label", "-o", "json").stdout)
    assert stored["status"]["qosClass"] == "Burstable"
