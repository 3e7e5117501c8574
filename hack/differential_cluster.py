"""Differential check of the cluster planners that read "fits": random clusters through
`simulate`, the `daemonset`, `defrag` and `queues` sections.

A change to the shared fit check must not change a DaemonSet or defrag decision except
where the new check is strictly more correct, and a change made only for speed (queue
reclaim's memos and bounds) must change no plan at all. This makes N random clusters
(seeded: the same seed, the same clusters), runs each through the simulator in this
process and prints one JSON line per cluster, so two trees can be compared (run it from
outside both trees, so that PYTHONPATH, not the current directory, picks the code):

    cd /tmp && PYTHONPATH=/path/to/old/tree .venv/bin/python /path/to/hack/differential_cluster.py 2000 > old.jsonl
    cd /tmp && PYTHONPATH=/path/to/new/tree .venv/bin/python /path/to/hack/differential_cluster.py 2000 > new.jsonl
    diff old.jsonl new.jsonl

The clusters have what the checks read: nodes with labels, taints, pod limits, cordons,
an extended resource on some; running pods with requests (fractional too, for the float
slack), owners, node selectors and tolerations; pending DaemonSet pods bound by
``spec.nodeName`` or by a ``metadata.name`` affinity, with and without tolerations;
defrag thresholds. And queues: donor queues (weights, guarantees, capabilities, some not
reclaimable) whose running pods carry priorities, pod-deletion-cost and eviction-cost
annotations (some not integers), ``volcano.sh/preemptable: "false"``, deletion
timestamps, hostname anti-affinity and PodDisruptionBudgets (matchLabels, matchExpressions,
empty selectors); starving queues whose pending pods come in a few shapes (so the plan's
per-shape memos are reused as pods land), with priorities, ``preemptionPolicy: Never``,
nominations to nodes with pods still terminating, node selectors, node affinity,
tolerations and anti-affinity; small ``exactSearchClasses`` and ``searchSteps`` now and
then, so the greedy fallback and the inexact plan are compared too. It uses only the
scenario format (SIMULATE.md), so it runs on any version of the code.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

NOW = "2026-01-01T00:00:00Z"
TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
TOLERATE = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]


def _node(rng: random.Random, i: int) -> dict[str, Any]:
    cpu = rng.choice([2, 4, 8])
    spec: dict[str, Any] = {}
    if rng.random() < 0.25:
        spec["taints"] = [TAINT]
    if rng.random() < 0.1:
        spec["unschedulable"] = True
    labels = {"kubernetes.io/hostname": f"n{i}", "zone": rng.choice(["a", "b"])}
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": labels},
        "spec": spec,
        "status": {"allocatable": {"cpu": str(cpu), "memory": f"{cpu * 4}Gi",
                                   "pods": str(rng.choice([4, 6, 110]))},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def _requests(rng: random.Random) -> dict[str, str]:
    cpu = rng.choice(["100m", "250m", "500m", "1", "1500m", "2", "333m"])
    return {"cpu": cpu, "memory": rng.choice(["256Mi", "1Gi", "2Gi", "3Gi"])}


def _pod(rng: random.Random, name: str, node: str | None, kind: str = "ReplicaSet") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": rng.choice(["default", "batch"]), "uid": f"uid-{name}",
        "creationTimestamp": f"2025-12-31T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
        "labels": {"app": name.rstrip("0123456789")},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": f"{kind.lower()}-x",
                             "uid": f"uid-{kind}", "controller": True}],
    }  # fmt: skip
    if rng.random() < 0.2:
        meta["labels"]["qos.waterline.io/allow-preemption"] = "false"
    spec: dict[str, Any] = {
        "priority": rng.choice([0, 0, 100]),
        "containers": [{"name": "main", "resources": {"requests": _requests(rng)}}],
    }
    if node is not None:
        spec["nodeName"] = node
    if rng.random() < 0.3:
        spec["tolerations"] = TOLERATE
    status = {"phase": "Running" if node else "Pending", "startTime": meta["creationTimestamp"],
              "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _daemon(rng: random.Random, name: str, node: str) -> dict[str, Any]:
    pod = _pod(rng, name, None, "DaemonSet")
    spec = pod["spec"]
    if rng.random() < 0.5:
        spec["nodeName"] = node  # bound by name: no scheduler
        pod["status"] = {"phase": "Pending"}
    else:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}  # fmt: skip
        if rng.random() < 0.2:
            spec["nodeSelector"] = {"zone": "a"}
    return pod


def scenario(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    nodes = [_node(rng, i) for i in range(rng.randint(2, 6))]
    objects: list[dict[str, Any]] = list(nodes)
    for i in range(rng.randint(2, 24)):
        objects.append(_pod(rng, f"p{i}", rng.choice(nodes)["metadata"]["name"]))
    for i in range(rng.randint(0, 3)):
        objects.append(_daemon(rng, f"ds{i}", rng.choice(nodes)["metadata"]["name"]))
    low = rng.choice([20, 30, 50])
    config = {
        "defrag": {"lowThresholds": low, "defragmentThresholds": low + rng.choice([10, 30]),
                   "protectionThresholds": rng.choice([85, 90, 100]),
                   "resourceType": rng.choice(["cpu", "memory"])},
        "daemonset": {"preemptionStartDelay": 0, "maxVictims": rng.choice([1, 3])},
    }  # fmt: skip
    # the queues draw from their own stream: the clusters above stay what they were
    queues = random.Random(f"queues-{seed}")
    objects.extend(_queues(queues, nodes, [o for o in objects if o["kind"] == "Pod"]))
    config["queues"] = _queue_config(queues)
    return {"now": NOW, "config": config, "objects": objects}


# -- queues ---------------------------------------------------------------------------------
QUEUE_LABEL = "qos.waterline.io/queue"
GPU = "example.com/gpu"
ANTI = "kubernetes.io/hostname"


def _queue_config(rng: random.Random) -> dict[str, int]:
    if rng.random() < 0.5:
        return {}
    return {"exactSearchClasses": rng.choice([0, 1, 2, 3, 16]),
            "searchSteps": rng.choice([0, 3, 20, 200, 200_000])}  # fmt: skip


def _queue(rng: random.Random, name: str, donor: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": rng.choice([1, 1, 2, 3])}
    if rng.random() < 0.2:
        spec["guarantee"] = {"resource": {"cpu": rng.choice(["500m", "1", "2"])}}
    if rng.random() < (0.6 if donor else 0.15):  # a donor held to less than it holds
        spec["capability"] = {"cpu": rng.choice(["2", "4", "8", "64"])}
    if donor and rng.random() < 0.15:
        spec["reclaimable"] = False
    return {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _queue_requests(rng: random.Random, gpu: bool) -> dict[str, str]:
    requests = {"cpu": rng.choice(["250m", "500m", "1", "1", "1500m", "2", "3", "333m"]),
                "memory": rng.choice(["512Mi", "1Gi", "2Gi", "4Gi", "8Gi"])}  # fmt: skip
    if rng.random() < 0.1:
        del requests["memory"]
    if gpu:
        requests[GPU] = rng.choice(["1", "1", "2"])
    return requests


def _anti(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": ANTI}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def _queue_pod(
    rng: random.Random, name: str, queue: str, app: str, requests: dict[str, str], node: str | None
) -> dict[str, Any]:
    created = f"2025-12-31T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    meta: dict[str, Any] = {
        "name": name, "namespace": rng.choice(["default", "batch"]), "uid": f"uid-{name}",
        "creationTimestamp": created, "labels": {QUEUE_LABEL: queue, "app": app},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"rs-{app}",
                             "uid": f"uid-rs-{app}", "controller": True}],
        "annotations": {},
    }  # fmt: skip
    spec: dict[str, Any] = {
        "priority": rng.choice([0, 0, 10, 100]),
        "containers": [{"name": "main", "resources": {"requests": dict(requests)}}],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if node is not None:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": created,
                  "conditions": [{"type": "Ready", "status": rng.choice(["True", "True", "False"])}]}  # fmt: skip
    if rng.random() < 0.25:
        spec["tolerations"] = TOLERATE
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _victim(rng: random.Random, pod: dict[str, Any]) -> None:
    """What makes a running pod a cheaper, dearer or forbidden victim."""
    notes = pod["metadata"]["annotations"]
    if rng.random() < 0.3:
        notes["controller.kubernetes.io/pod-deletion-cost"] = rng.choice(["-5", "0", "10", "100", "x"])
    if rng.random() < 0.2:
        notes["scheduling.koordinator.sh/eviction-cost"] = rng.choice(["-1", "3", "7", "1.5"])
    if rng.random() < 0.08:
        notes["volcano.sh/preemptable"] = "false"
    if rng.random() < 0.05:
        pod["metadata"]["deletionTimestamp"] = NOW
    if rng.random() < 0.08:
        pod["spec"]["affinity"] = _anti(pod["metadata"]["labels"]["app"])


def _waiting(rng: random.Random, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """What changes where and whether a pending pod may take victims."""
    spec = pod["spec"]
    if rng.random() < 0.1:
        spec["preemptionPolicy"] = "Never"
    if rng.random() < 0.2:
        spec["nodeSelector"] = {"zone": rng.choice(["a", "b"])}
    if rng.random() < 0.15:
        names = sorted(rng.sample([n["metadata"]["name"] for n in nodes], k=min(2, len(nodes))))
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": names}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}  # fmt: skip
    if rng.random() < 0.1:
        spec.setdefault("affinity", {}).update(_anti(pod["metadata"]["labels"]["app"]))
    if rng.random() < 0.08:
        pod["status"]["nominatedNodeName"] = rng.choice(nodes)["metadata"]["name"]


def _budget(rng: random.Random, i: int, apps: list[str]) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.6:
        selector: dict[str, Any] = {"matchLabels": {"app": rng.choice(apps)}}
    elif kind < 0.85:
        selector = {"matchExpressions": [{"key": "app", "operator": "In",
                                          "values": rng.sample(apps, k=min(2, len(apps)))}]}  # fmt: skip
    else:
        selector = {}
    spec: dict[str, Any] = {"selector": selector}
    if rng.random() < 0.5:
        spec["maxUnavailable"] = rng.choice([0, 1, 2, "50%"])
    else:
        spec["minAvailable"] = rng.choice([1, 2, "50%"])
    meta = {"name": f"pdb{i}", "namespace": rng.choice(["default", "batch"])}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta, "spec": spec}


def _cpu(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _requests_of(pod: dict[str, Any]) -> dict[str, str]:
    return pod["spec"]["containers"][0]["resources"]["requests"]


def _queues(
    rng: random.Random, shared: list[dict[str, Any]], taken: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Nodes of their own that donor queues fill (and room on the ``shared`` nodes, where
    ``taken`` pods run already), starving queues whose pending pods, of a few shapes, ask
    more than is free: queues, nodes, pods and budgets to add to the cluster."""
    own = [_node(rng, 100 + i) for i in range(rng.randint(2, 6))]
    nodes = shared + own
    gpu_nodes = [n for n in nodes if rng.random() < 0.3]
    for node in gpu_nodes:
        node["status"]["allocatable"][GPU] = str(rng.choice([1, 2, 4]))
    if rng.random() < 0.1:
        rng.choice(own)["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    donors = [f"d{i}" for i in range(rng.randint(1, 3))]
    hungry = [f"s{i}" for i in range(rng.randint(1, 2))]
    out = [_queue(rng, q, donor=True) for q in donors] + [_queue(rng, q, donor=False) for q in hungry]
    apps = [f"a{i}" for i in range(rng.randint(2, 5))]
    free = {n["metadata"]["name"]: _cpu(n["status"]["allocatable"]["cpu"]) for n in nodes}
    for pod in taken:
        if pod["spec"].get("nodeName") in free:
            free[pod["spec"]["nodeName"]] -= _cpu(_requests_of(pod).get("cpu", "0"))
    running: list[dict[str, Any]] = []
    for i in range(rng.randint(10, 70)):
        node = rng.choice(own if rng.random() < 0.8 else nodes)
        gpu = node in gpu_nodes and rng.random() < 0.5
        requests = _queue_requests(rng, gpu)
        name = node["metadata"]["name"]
        if free[name] < _cpu(requests["cpu"]) and rng.random() < 0.95:
            continue  # full nodes, seldom an overcommitted one
        free[name] -= _cpu(requests["cpu"])
        queue = rng.choice(donors) if rng.random() < 0.92 else rng.choice(hungry)
        pod = _queue_pod(rng, f"r{i}", queue, rng.choice(apps), requests, name)
        _victim(rng, pod)
        running.append(pod)
    waiting: list[dict[str, Any]] = []
    shapes = [_queue_requests(rng, rng.random() < 0.2) for _ in range(rng.randint(1, 3))]
    for shape in shapes:  # small ones that fit a victim's room, large ones that need several
        if rng.random() < 0.6:
            shape["cpu"] = rng.choice(["250m", "500m", "1", "2500m", "3", "4"])
    for i in range(rng.randint(2, 24)):
        queue = rng.choice(hungry) if rng.random() < 0.92 else rng.choice(donors)
        pod = _queue_pod(rng, f"w{i}", queue, rng.choice(apps), rng.choice(shapes), None)
        if rng.random() < 0.6:  # the same shape and app as a pod before it: the memos' case
            pod["metadata"]["labels"]["app"] = "same"
            pod["metadata"]["namespace"] = "default"
        _waiting(rng, pod, nodes)
        waiting.append(pod)
    budgets = [_budget(rng, i, apps) for i in range(rng.randint(0, 3))]
    return own + out + running + waiting + budgets


def main(argv: list[str]) -> int:
    from agent.scenario import load_scenario
    from agent.simulate.sections import build_report

    count = int(argv[0]) if argv else 500
    keep = ("daemonset", "defrag", "queues")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.json"
        for seed in range(count):
            path.write_text(json.dumps(scenario(seed)))
            try:
                report = build_report(load_scenario(path))
                line = {k: report.get(k) for k in keep}
            except Exception as err:  # noqa: BLE001 - an error is an outcome to compare
                line = {"error": f"{type(err).__name__}: {err}"}
            print(json.dumps({"seed": seed, **line}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
