"""Differential check of the cluster planners that read "fits": random clusters through
`simulate`, the `daemonset` and `defrag` sections (and `queues`, with ``--queues``).

A change to the shared fit check must not change a DaemonSet or defrag decision except
where the new check is strictly more correct. This makes N random clusters (seeded: the
same seed, the same clusters), runs each through the simulator in this process and prints
one JSON line per cluster, so two trees can be compared:

    PYTHONPATH=/path/to/old/tree .venv/bin/python hack/differential_cluster.py 2000 > old.jsonl
    .venv/bin/python hack/differential_cluster.py 2000 > new.jsonl
    diff old.jsonl new.jsonl

The clusters have what the checks read: nodes with labels, taints, pod limits, cordons;
running pods with requests (fractional too, for the float slack), owners, node
selectors and tolerations; pending DaemonSet pods bound by ``spec.nodeName`` or by a
``metadata.name`` affinity, with and without tolerations; defrag thresholds. It uses only
the scenario format (SIMULATE.md), so it runs on any version of the code.
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
    return {"now": NOW, "config": config, "objects": objects}


def main(argv: list[str]) -> int:
    from agent.scenario import load_scenario
    from agent.simulate.sections import build_report

    count = int(argv[0]) if argv else 500
    keep = ("daemonset", "defrag")
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
