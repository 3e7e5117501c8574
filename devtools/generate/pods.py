"""A workload's pods: name and owner, labels (queue, opt-out), priority, requests and
limits by QoS class, node selectors, GPU tolerations, required anti-affinity; running on a
node or pending."""

from __future__ import annotations

from typing import Any

from agent.model.timeutil import format_time
from devtools.generate.model import (
    OPT_OUT_LABEL,
    PROTECTED_ANNOTATION,
    QUEUE_LABEL,
    Generator,
    NodePlan,
    Workload,
    cpu_quantity,
    memory_quantity,
    suffix,
)

IMAGE = "registry.example/app:1"
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def pod_object(
    g: Generator, w: Workload, node: NodePlan | None, index: int, pending: bool = False
) -> dict[str, Any]:
    """Pod number ``index`` of ``w``, running on ``node`` or (no node, or ``pending``) waiting."""
    name, owner = _name_and_owner(g, w, index)
    meta = _metadata(g, w, name, owner)
    created = g.rng.uniform(w.created, g.now - 60)
    meta["creationTimestamp"] = format_time(created)
    spec = _spec(w)
    qos = "BestEffort" if not w.cpu else ("Guaranteed" if w.guaranteed else "Burstable")
    if pending or node is None:
        status: dict[str, Any] = {
            "phase": "Pending",
            "qosClass": qos,
            "conditions": [dict(UNSCHEDULABLE)],
        }
    else:
        spec["nodeName"] = node.name
        ready = node.ready and g.rng.random() > 0.01
        status = {
            "phase": "Running",
            "qosClass": qos,
            "startTime": format_time(created + g.rng.uniform(1, 30)),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _name_and_owner(g: Generator, w: Workload, index: int) -> tuple[str, dict[str, Any]]:
    """The pod's name and controller reference, as its workload's controller names them."""
    if w.kind == "Deployment":
        name = f"{w.rs_name}-{suffix(g.rng, 5)}"
        owner: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": w.rs_name,
            "uid": w.rs_uid,
        }
    elif w.kind == "StatefulSet":
        name = f"{w.name}-{index}"
        owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": w.name, "uid": w.uid}
    else:
        name = f"{w.name}-{suffix(g.rng, 5)}"
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": w.name, "uid": w.uid}
    owner.update(controller=True, blockOwnerDeletion=True)
    return name, owner


def _metadata(g: Generator, w: Workload, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": w.name}
    if w.queue:
        labels[QUEUE_LABEL] = w.queue
    if w.opt_out:
        labels[OPT_OUT_LABEL] = "false"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": w.namespace,
        "uid": g.uid(),
        "labels": labels,
        "ownerReferences": [owner],
    }
    if w.protected:
        meta["annotations"] = {PROTECTED_ANNOTATION: "true"}
    return meta


def _spec(w: Workload) -> dict[str, Any]:
    """The spec without a node: what the workload's template says."""
    spec: dict[str, Any] = {"containers": containers(w), "priority": w.priority}
    if w.priority_class:
        spec["priorityClassName"] = w.priority_class
    if w.node_selector:
        spec["nodeSelector"] = {"pool": w.pool}
    if w.gpu:
        spec["nodeSelector"] = {"accelerator": "nvidia"}
        spec["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    if w.anti_affinity:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": w.name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    return spec


def containers(w: Workload) -> list[dict[str, Any]]:
    """One container (two with a proxy sidecar); Guaranteed pods get limits equal to their
    requests, Burstable ones a memory limit on the main container."""
    if not w.cpu:
        return [{"name": "main", "image": IMAGE, "resources": {}}]
    parts = [("main", w.cpu, w.mem)]
    if w.sidecar:
        parts = [("main", w.cpu - 50, w.mem - 64), ("proxy", 50, 64)]
    out = []
    for cname, cpu, mem in parts:
        requests: dict[str, str] = {"cpu": cpu_quantity(cpu), "memory": memory_quantity(mem)}
        if w.gpu and cname == "main":
            requests["nvidia.com/gpu"] = "1"
        resources: dict[str, Any] = {"requests": requests}
        if w.guaranteed:
            resources["limits"] = dict(requests)
        elif cname == "main":
            resources["limits"] = {"memory": memory_quantity(mem * 2)}
        out.append({"name": cname, "image": IMAGE, "resources": resources})
    return out
