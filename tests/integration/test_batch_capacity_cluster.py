"""Batch capacity on the real control plane (issue 33, DESIGN.md "Batch capacity"): the
agent, in-process with its own ServiceAccount token, publishes its node's batch capacity
in the Node's status; the real scheduler places batch pods (requests of
``waterline.io/batch-cpu``, no cpu or memory) only while they fit in it; an uninstall's
release removes it; the agent's token may patch no other node's status, and on its own
node nothing of capacity and allocatable but the two batch resources.

The capacity is moved by the policy's ``max`` bound rather than by load, so what is
published is exact (8 cores, no margin: the bound); the computation from load is
specified by tests/scenarios/node-batch-capacity-*.yaml and tests/unit/test_batch_capacity.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.kube.errors import KubeForbidden
from agent.kube.patching import merge_patch
from agent.kube.resources import NODES, POLICIES
from agent.model.batch import BATCH_CPU, BATCH_MEMORY
from agent.model.quantity import parse_quantity
from agent.node.batch_status import batch_patch
from agent.node.release import release
from devtools.harness.agent_env import QOS, Load, Pool, agent_args, running_agent, tick_until
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.waiting import wait_until

pytestmark = pytest.mark.integration


def _policy(pool: Pool, name: str, max_cpu: str) -> dict[str, Any]:
    return {"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": dict(pool.labels)},
                     "batchCapacity": {"marginPercent": 0, "windowSeconds": 0, "hysteresisPercent": 0,
                                       "minIntervalSeconds": 0, "max": {"cpu": max_cpu}}}}  # fmt: skip


def _batch_pod(pool: Pool, name: str, node: str, millicores: int) -> None:
    pool.kube.apply([{
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": pool.namespace},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                 "containers": [{"name": "main", "image": "pause", "resources": {
                     "requests": {BATCH_CPU: str(millicores)}, "limits": {BATCH_CPU: str(millicores)}}}]},
    }])  # fmt: skip


def _status(pool: Pool, node: str) -> dict[str, Any]:
    return pool.api.request("GET", NODES.path(None, node))["status"]


def _batch_cpu(pool: Pool, node: str, field: str = "allocatable") -> float | None:
    """The node's batch-cpu in millicores, as a number (the server writes "2000" as "2k")."""
    value = _status(pool, node).get(field, {}).get(BATCH_CPU)
    return None if value is None else parse_quantity(value)


def _scheduled(pool: Pool, name: str) -> bool:
    pod = pool.api.request("GET", f"/api/v1/namespaces/{pool.namespace}/pods/{name}")
    return bool(pod["spec"].get("nodeName"))


def test_the_node_publishes_batch_capacity_and_the_scheduler_places_batch_pods_by_it(
    kube: RealCluster, pool: Pool, tmp_path: Path
) -> None:
    node = pool.node(cpu="8")
    pool.replicaset("web", 1, node=node, resources={"requests": {"cpu": "100m"}})
    (web,) = pool.running("web", 1)
    load = Load(tmp_path / "cg", [web])
    policy = unique("batch")
    pool.create(POLICIES, _policy(pool, policy, "2"))
    with running_agent(kube.agent_kubeconfig(node), tmp_path, node) as agent:
        tick_until(agent, load, {}, lambda s: _batch_cpu(pool, node) == 2000)
        assert _batch_cpu(pool, node, "capacity") == 2000
        status = _status(pool, node)
        assert BATCH_MEMORY in status["allocatable"] and BATCH_MEMORY in status["capacity"]
        _batch_pod(pool, "batch-a", node, 1500)
        wait_until(lambda: _scheduled(pool, "batch-a"), 60, "batch-a scheduled")
        _batch_pod(pool, "batch-b", node, 1000)  # 1500 + 1000 > 2000: it waits
        wait_until(lambda: any(c.get("reason") == "Unschedulable" for c in pool.api.request(
            "GET", f"/api/v1/namespaces/{pool.namespace}/pods/batch-b")["status"].get("conditions", [])), 60, "batch-b Unschedulable")
        assert not _scheduled(pool, "batch-b")
        merge_patch(pool.api, POLICIES, policy, {"spec": {"batchCapacity": {"max": {"cpu": "4"}}}})
        tick_until(agent, load, {}, lambda s: _batch_cpu(pool, node) == 4000)
        wait_until(lambda: _scheduled(pool, "batch-b"), 60, "batch-b scheduled")  # it fits now
        agent.restore_all("test: an uninstall")
        status = _status(pool, node)
        assert BATCH_CPU not in status["allocatable"] and BATCH_CPU not in status["capacity"]
        assert BATCH_MEMORY not in status["allocatable"] and BATCH_MEMORY not in status["capacity"]
        assert status["allocatable"]["cpu"] == "8"


def test_the_agents_token_may_patch_only_its_own_nodes_batch_resources(kube: RealCluster, pool: Pool) -> None:
    mine, other = pool.node(), pool.node()
    agent = kube.client(kube.agent_kubeconfig(mine))
    refused: dict[str, str] = {}
    try:
        for what, patch, node in (
            ("publish on another node", batch_patch({BATCH_CPU: "1000"}), other),
            ("raise its own cpu", batch_patch({"cpu": "64"}), mine),
            ("add another resource", batch_patch({"example.com/gpu": "1"}), mine),
        ):
            with pytest.raises(KubeForbidden) as err:
                merge_patch(agent, NODES, node, patch, subresource="status")
            refused[what] = err.value.message
        merge_patch(agent, NODES, mine, batch_patch({BATCH_CPU: "1000", BATCH_MEMORY: "1024"}),
                    subresource="status")  # what the agent is for
        assert _batch_cpu(pool, mine) == 1000
    finally:
        agent.close()
    assert f"may change only the node its token was issued on ({mine}), not {other}" in refused[
        "publish on another node"]
    for what in ("raise its own cpu", "add another resource"):
        assert "may change only waterline.io/batch-cpu and waterline.io/batch-memory" in refused[what]
    assert BATCH_CPU not in _status(pool, other).get("allocatable", {})
    print("\nrefused to the agent's token:")
    for what, message in refused.items():
        print(f"  {what}: {message}")


def test_release_by_hand_removes_the_resources_and_hands_every_batch_limit_back(
    kube: RealCluster, pool: Pool, tmp_path: Path
) -> None:
    """An agent killed with no clean-up (its batch pod limited, the capacity published),
    then `waterline agent release` with the agent's own kubeconfig: the batch pod's quota
    and memory limit are back as the kubelet left them, and the Node's status has neither
    resource (the scheduler no longer places batch pods by figures nobody keeps)."""
    node = pool.node(cpu="8")
    kubeconfig = kube.agent_kubeconfig(node)
    pool.replicaset("web", 1, node=node, resources={"requests": {"cpu": "100m"}})
    load = Load(tmp_path / "cg", pool.running("web", 1))  # a pod measured: the node's CPU
    policy = _policy(pool, unique("batch"), "2")
    policy["spec"]["batchCapacity"]["min"] = {"memory": "128Mi"}  # whatever this host's memory use
    pool.create(POLICIES, policy)
    with running_agent(kubeconfig, tmp_path, node) as agent:  # killed: no clean-up
        tick_until(agent, load, {}, lambda s: _batch_cpu(pool, node) == 2000)
        pool.kube.apply([{
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "batch-a", "namespace": pool.namespace},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "main", "image": "pause", "resources": {
                         "requests": {BATCH_CPU: "1500", BATCH_MEMORY: "64Mi"},
                         "limits": {BATCH_CPU: "1500", BATCH_MEMORY: "64Mi"}}}]},
        }])  # fmt: skip
        path = f"/api/v1/namespaces/{pool.namespace}/pods/batch-a"
        wait_until(lambda: pool.api.request("GET", path)["status"].get("containerStatuses"), 60,
                   "batch-a running", explain=lambda: str(pool.api.request("GET", path)))  # fmt: skip
        batch = pool.api.request("GET", path)
        assert batch["status"]["qosClass"] == "BestEffort"
        load.add(batch)
        pod_rel, container_rel = load.cgroups["batch-a"]
        for rel in (pod_rel, container_rel):
            (load.tree.root / "memory" / rel / "memory.limit_in_bytes").write_text("9223372036854771712\n")
        tick_until(agent, load, {}, lambda s: f"{pool.namespace}/batch-a" in agent.loop.brain.state.limited)
    assert load.tree.quota(pod_rel) == "150000" and load.tree.quota(container_rel) == "150000"
    memory = load.tree.root / "memory" / container_rel / "memory.limit_in_bytes"
    assert memory.read_text().strip() == str(64 * 1024**2)
    assert _batch_cpu(pool, node) == 2000  # a kill leaves it (a restart keeps it)

    assert release(agent_args(kubeconfig, tmp_path, node)) == 0
    assert load.tree.quota(pod_rel) == "-1" and load.tree.quota(container_rel) == "-1"
    assert memory.read_text().strip() == "9223372036854771712"
    assert '"pods": {}' in (tmp_path / "state" / "batch-limits.json").read_text()
    status = _status(pool, node)
    for field in ("capacity", "allocatable"):
        assert BATCH_CPU not in status[field] and BATCH_MEMORY not in status[field]
