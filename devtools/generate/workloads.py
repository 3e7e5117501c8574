"""Workloads: Deployments (through ReplicaSets), StatefulSets and batch Jobs. Pods of a
workload share one template (requests, priority, QoS class, labels); a workload takes
pods until it reaches its replica target. Also their objects and PodDisruptionBudgets."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from agent.model.timeutil import format_time
from devtools.generate.model import (
    MEMORY_PER_CORE,
    PRIORITY_CLASSES,
    Generator,
    Workload,
    suffix,
    weighted,
)
from devtools.generate.queues import pick_queue

REPLICAS = ((1, 0.15), (2, 0.2), (3, 0.2), (5, 0.15), (10, 0.15), (30, 0.1), (100, 0.05))
NAME_BASE = {"Job": "job", "StatefulSet": "db", "Deployment": "app"}


def _kind_and_class(rng: random.Random, pool: str) -> tuple[str, str]:
    """The workload kind and priority class a pool runs (a fifth have no class)."""
    if pool == "batch":
        kind = "Job" if rng.random() < 0.8 else "Deployment"
        pc = "batch"
    else:
        kind = "StatefulSet" if rng.random() < 0.12 else "Deployment"
        pc = rng.choice(("online-high", "online", "online")) if pool == "online" else "general"
    if rng.random() < 0.2:
        pc = ""  # no priority class: priority 0
    return kind, pc


def new_workload(g: Generator, pool: str, cpu: int, gpu: bool) -> Workload:
    """A new workload template of ``cpu`` millicores a pod, in one of the pool's namespaces."""
    rng = g.rng
    namespace = rng.choice(g.namespaces["gpu" if gpu else pool])
    kind, pc = _kind_and_class(rng, pool)
    name = f"{NAME_BASE[kind]}-{len(g.workloads):05d}"
    replicas = weighted(rng, REPLICAS)
    ratio = weighted(rng, MEMORY_PER_CORE)
    mem = max(64, int(cpu * ratio * 1.024)) if cpu else 0  # MiB
    w = Workload(
        kind=kind,
        namespace=namespace,
        name=name,
        uid=g.uid(),
        pool=pool,
        cpu=cpu,
        mem=mem,
        priority_class=pc,
        priority=PRIORITY_CLASSES.get(pc, 0),
        guaranteed=cpu > 0 and rng.random() < 0.25,
        target_replicas=replicas,
        created=g.now - rng.uniform(3600, 60 * 86400),
        gpu=gpu,
        anti_affinity=kind == "Deployment" and pool == "online" and rng.random() < 0.1,
        node_selector=rng.random() < 0.5,
        protected=rng.random() < 0.01,
        opt_out=rng.random() < 0.03,
        sidecar=cpu >= 250 and rng.random() < 0.2,
    )
    if g.queues and pool == "batch":
        w.queue = pick_queue(g, (("overused", 0.55), ("steady", 0.40), ("starving", 0.05)))
    elif g.queues and rng.random() < 0.9:  # a tenth of services run outside queues
        w.queue = pick_queue(g, (("overused", 0.2), ("steady", 0.8)))
    if kind == "Deployment":
        w.rs_name = f"{name}-{suffix(rng, 10)}"
        w.rs_uid = g.uid()
    g.workloads.append(w)
    return w


def workload_for(g: Generator, node_index: int, pool: str, cpu: int, gpu: bool) -> Workload:
    """An open workload of this template that may run a pod on the node (a new one now and
    then, so workloads stay of mixed sizes); it closes when its next pod reaches its target."""
    key = (pool, cpu, gpu)
    bucket = g.open.setdefault(key, [])
    if len(bucket) < 6 or g.rng.random() < 0.05:
        bucket.append(new_workload(g, pool, cpu, gpu))
    for _ in range(4):
        w = g.rng.choice(bucket)
        if not (w.anti_affinity and node_index in w.nodes):
            break
    else:
        w = new_workload(g, pool, cpu, gpu)
        bucket.append(w)
    if w.pods + 1 >= w.target_replicas:
        bucket.remove(w)
    return w


def workload_objects(w: Workload) -> Iterator[dict[str, Any]]:
    """The workload's objects with the replica counts its pods came to (slim: the engines
    read only their identity and replicas)."""
    meta = {
        "name": w.name,
        "namespace": w.namespace,
        "uid": w.uid,
        "creationTimestamp": format_time(w.created),
    }
    running = w.pods - w.pending
    if w.kind == "Job":
        yield {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"parallelism": w.pods, "completions": w.pods},
            "status": {"active": w.pods, "ready": running},
        }
        return
    if w.kind == "StatefulSet":
        yield {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta,
            "spec": {"replicas": w.pods, "serviceName": w.name},
            "status": {"replicas": w.pods, "readyReplicas": running},
        }
        return
    yield {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {"replicas": w.pods},
        "status": {"replicas": w.pods, "readyReplicas": running},
    }
    yield replicaset_object(w, running)


def replicaset_object(w: Workload, running: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": w.rs_name,
            "namespace": w.namespace,
            "uid": w.rs_uid,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": w.name,
                    "uid": w.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": w.pods},
        "status": {"replicas": w.pods, "readyReplicas": running},
    }


def pdb_objects(g: Generator) -> Iterator[dict[str, Any]]:
    """PodDisruptionBudgets for about 30% of the online Deployments of three pods or more."""
    rng = g.rng
    for w in g.workloads:
        if w.kind == "Deployment" and w.pool == "online" and w.pods >= 3 and rng.random() < 0.3:
            spec: dict[str, Any] = {"selector": {"matchLabels": {"app": w.name}}}
            if rng.random() < 0.5:
                spec["minAvailable"] = "80%"
            else:
                spec["maxUnavailable"] = 1
            yield {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": w.name, "namespace": w.namespace},
                "spec": spec,
            }
