"""DaemonSets: the system ones with a pod on every node, and a new one being rolled out
whose pods wait on the full nodes (where DaemonSet preemption has work)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent.model.timeutil import format_time
from devtools.generate.model import (
    DAEMONSETS,
    NEW_DAEMONSET,
    SYSTEM_NODE_CRITICAL,
    Generator,
    NodePlan,
    cpu_quantity,
    memory_quantity,
)

#: (namespace, name, cpu millicores, memory MiB, priority)
DaemonSet = tuple[str, str, int, int, int]


def plan_daemonsets(g: Generator) -> None:
    g.ds_uids = {ds[1]: g.uid() for ds in (*DAEMONSETS, NEW_DAEMONSET)}


def place_daemonset_pods(g: Generator, daemonsets: tuple[DaemonSet, ...]) -> None:
    """A running pod of each of ``daemonsets`` on every node, accounted on the node."""
    for i, node in enumerate(g.nodes):
        for ds in daemonsets:
            ns, name, cpu, mem, _prio = ds
            g.writer.add(daemonset_pod(g, ds, node, pending=False))
            node.used_cpu += cpu
            node.used_mem += mem
            node.pods += 1
            g.placed.append((ns, f"{name}-{node.name}", i, "DaemonSet", g.ds_uids[name]))


def pending_daemonset_pods(g: Generator, nodes: list[int]) -> None:
    """The new DaemonSet's pods, waiting on ``nodes`` (full ones: they do not fit)."""
    for i in nodes:
        g.writer.add(daemonset_pod(g, NEW_DAEMONSET, g.nodes[i], pending=True))


def daemonset_objects(g: Generator, daemonsets: tuple[DaemonSet, ...]) -> Iterator[dict[str, Any]]:
    for ns, name, *_ in daemonsets:
        yield {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns, "uid": g.ds_uids[name]},
            "spec": {"selector": {"matchLabels": {"app": name}}},
            "status": {"desiredNumberScheduled": len(g.nodes), "numberReady": len(g.nodes)},
        }


def daemonset_pod(g: Generator, ds: DaemonSet, node: NodePlan, pending: bool) -> dict[str, Any]:
    """The DaemonSet's pod for ``node``: pinned to it by node affinity, bound unless pending."""
    ns, name, cpu, mem, prio = ds
    created = g.now - (600 if pending else 30 * 86400)
    meta = {
        "name": f"{name}-{node.name}",
        "namespace": ns,
        "uid": g.uid(),
        "creationTimestamp": format_time(created),
        "labels": {"app": name},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": name,
                "uid": g.ds_uids[name],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    spec = _spec(name, cpu, mem, prio, node)
    if pending:
        status: dict[str, Any] = {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    else:
        spec["nodeName"] = node.name
        status = {
            "phase": "Running",
            "qosClass": "Burstable",
            "startTime": format_time(created + 5),
            "conditions": [{"type": "Ready", "status": "True" if node.ready else "False"}],
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _spec(name: str, cpu: int, mem: int, prio: int, node: NodePlan) -> dict[str, Any]:
    requests = {"cpu": cpu_quantity(cpu), "memory": memory_quantity(mem)}
    return {
        "priority": prio,
        "priorityClassName": "system-node-critical"
        if prio == SYSTEM_NODE_CRITICAL
        else "system-cluster-critical",
        "containers": [
            {
                "name": name,
                "image": f"registry.example/{name}:1",
                "resources": {"requests": requests, "limits": {"memory": memory_quantity(mem * 2)}},
            }
        ],
        "tolerations": [{"operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node.name]}
                            ]
                        }
                    ]
                }
            }
        },
    }
