"""The nodes: pools, shapes and CPU targets, the Node objects, the namespaces and
priority classes every workload refers to, and the control plane's static pods."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent.model.timeutil import format_time
from devtools.generate.model import (
    ALLOCATABLE_PODS,
    LAST_DEFRAG_ANNOTATION,
    NODE_SHAPES,
    POOLS,
    PRIORITY_CLASSES,
    SYSTEM_NODE_CRITICAL,
    Generator,
    NodePlan,
    cpu_quantity,
    weighted,
)

#: Namespaces of the system DaemonSets, before the workload namespaces.
SYSTEM_NAMESPACES = ("kube-system", "monitoring", "logging", "waterline-system")


def plan_nodes(g: Generator) -> None:
    """Each node's pool, shape and kind: a few control-plane nodes, GPU nodes in the batch
    pool, defrag sources (low), defrag targets (band), full nodes, the rest normal."""
    rng, n = g.rng, g.args.nodes
    control = 3 if n >= 20 else 0
    for i in range(n):
        name = f"node-{i:05d}"
        if i < control:
            g.nodes.append(NodePlan(name, "system", 8, 32, 0.0, "control-plane"))
            continue
        pool = weighted(rng, POOLS)
        cores, mem = weighted(rng, NODE_SHAPES)
        x = rng.random()
        if pool == "batch" and x < 0.05:
            kind, target = "gpu", 0.0
        elif pool != "batch" and x < 0.06:
            kind, target = "low", rng.uniform(5, 25)
        elif x < 0.085:
            kind, target = "full", 100.0
        elif x < 0.33:
            kind, target = "band", rng.uniform(72, 88)
        else:
            kind, target = (
                "normal",
                rng.uniform(45, 75) if pool == "batch" else rng.uniform(40, 70),
            )
        plan = NodePlan(name, pool, cores, mem, target, kind)
        y = rng.random()
        plan.cordoned = y < 0.01
        plan.ready = not (0.01 <= y < 0.015)
        g.nodes.append(plan)
    ensure_kinds(g)


def ensure_kinds(g: Generator) -> None:
    """Small clusters still get one node of each kind the engines need: a defrag
    source, a defrag target and a full node (taken from the normal ones)."""
    normal = [p for p in g.nodes if p.kind == "normal" and not p.cordoned and p.ready]
    for kind, low, high in (("low", 5, 25), ("band", 72, 88), ("full", 100, 100)):
        if any(p.kind == kind for p in g.nodes):
            continue
        fits = [p for p in normal if kind != "low" or p.pool != "batch"]
        if fits:
            plan = fits[0]
            normal.remove(plan)
            plan.kind, plan.target = kind, g.rng.uniform(low, high)


def _node_shape(
    plan: NodePlan, index: int
) -> tuple[dict[str, str], list[dict[str, str]], dict[str, str], dict[str, str]]:
    """Labels, taints, capacity and allocatable: what the node's kind and shape decide."""
    labels = {
        "kubernetes.io/hostname": plan.name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": f"zone-{'abc'[index % 3]}",
        "node.kubernetes.io/instance-type": f"c{plan.cores}m{plan.memory_gib}",
        "pool": plan.pool,
    }
    taints: list[dict[str, str]] = []
    capacity = {
        "cpu": str(plan.cores),
        "memory": f"{plan.memory_gib}Gi",
        "pods": str(ALLOCATABLE_PODS),
    }
    allocatable = {
        "cpu": cpu_quantity(plan.alloc_cpu),
        "memory": f"{plan.memory_gib - 2}Gi",
        "pods": str(ALLOCATABLE_PODS),
    }
    if plan.kind == "control-plane":
        labels["node-role.kubernetes.io/control-plane"] = ""
        taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
    if plan.kind == "gpu":
        labels["accelerator"] = "nvidia"
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = "8"
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    return labels, taints, capacity, allocatable


def node_object(g: Generator, plan: NodePlan, index: int) -> dict[str, Any]:
    """The Node; a few are ``critical=true``, a few defrag sources were defragmented lately."""
    rng = g.rng
    labels, taints, capacity, allocatable = _node_shape(plan, index)
    annotations: dict[str, str] = {}
    if plan.kind != "control-plane" and rng.random() < 0.01:
        labels["critical"] = "true"
    if plan.kind == "low" and rng.random() < 0.15:
        annotations[LAST_DEFRAG_ANNOTATION] = format_time(g.now - rng.uniform(60, 1800))
    spec: dict[str, Any] = {"podCIDR": f"10.{index // 256}.{index % 256}.0/24"}
    if taints:
        spec["taints"] = taints
    if plan.cordoned:
        spec["unschedulable"] = True
        spec.setdefault("taints", []).append(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        )
    plan.uid = g.uid()
    meta: dict[str, Any] = {"name": plan.name, "uid": plan.uid, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if plan.ready else "Unknown"}],
        },
    }


def plan_namespaces(g: Generator) -> None:
    sizes = {"online": 60, "batch": 30, "general": 30}
    prefix = {"online": "team", "batch": "ml", "general": "svc"}
    for pool, count in sizes.items():
        g.namespaces[pool] = [f"{prefix[pool]}-{i:02d}" for i in range(count)]
    g.namespaces["gpu"] = ["ml-training"]


def cluster_objects(g: Generator) -> Iterator[dict[str, Any]]:
    """The Nodes, then the Namespaces (labelled with their pool), then the PriorityClasses."""
    for i, plan in enumerate(g.nodes):
        yield node_object(g, plan, i)
    for ns in [*SYSTEM_NAMESPACES, *(n for v in g.namespaces.values() for n in v)]:
        pool = next((p for p, names in g.namespaces.items() if ns in names), "system")
        yield {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {"kubernetes.io/metadata.name": ns, "pool": pool},
            },
        }
    for pc, value in PRIORITY_CLASSES.items():
        yield {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": pc},
            "value": value,
        }


def static_pod(g: Generator, node: NodePlan, component: str) -> dict[str, Any]:
    """The mirror pod of a control-plane static pod (owned by its Node, never migratable)."""
    created = g.now - 90 * 86400
    node.used_cpu += 250
    node.used_mem += 256
    node.pods += 1
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{component}-{node.name}",
            "namespace": "kube-system",
            "uid": g.uid(),
            "creationTimestamp": format_time(created),
            "labels": {"component": component, "tier": "control-plane"},
            "annotations": {
                "kubernetes.io/config.mirror": g.uid().replace("-", ""),
                "kubernetes.io/config.source": "file",
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node.name,
                    "uid": node.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node.name,
            "priority": SYSTEM_NODE_CRITICAL,
            "priorityClassName": "system-node-critical",
            "containers": [
                {
                    "name": component,
                    "image": f"registry.k8s.io/{component}:v1.31.0",
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "startTime": format_time(created),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
