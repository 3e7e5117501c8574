"""Differential check of the node engine: random node scenarios through `simulate`.

A refactor of the engine must not change a decision. This makes N random node scenarios
(seeded: the same seed, the same scenarios), runs each through the simulator in this
process and prints one JSON line per scenario (the `nodes` section of the report, or the
error), so two trees can be compared:

    export PYTHONHASHSEED=0  # simulate sums the figures of evicted pods over a set
    PYTHONPATH=/path/to/old/tree .venv/bin/python hack/differential.py 3000 > old.jsonl
    .venv/bin/python hack/differential.py 3000 > new.jsonl
    cmp old.jsonl new.jsonl

It uses only the scenario format (SIMULATE.md), so it runs on any version of the code.
``--within-limit`` keeps every pod's CPU figure at or below its CPU limit (to compare
across a change of how such figures are read).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

METRICS = (
    "cpu_total_usage", "cpu_total_utilization", "memory_total_usage",
    "memory_total_utilization", "cpu_pressure", "memory_pressure", "lc_cpu_wait_ratio",
)  # fmt: skip
GIB = 2**30


def _pod(rng: random.Random, i: int, cores: int) -> dict[str, Any]:
    qos = rng.choice(["BestEffort", "Burstable", "Guaranteed"])
    containers = []
    for c in range(rng.choice([1, 1, 2, 3])):
        resources: dict[str, Any] = {}
        if qos == "Guaranteed":
            cpu = rng.choice(["500m", "1", "2"])
            resources = {"requests": {"cpu": cpu, "memory": "1Gi"},
                         "limits": {"cpu": cpu, "memory": "1Gi"}}
        elif qos == "Burstable":
            if rng.random() < 0.7:
                resources["requests"] = {"cpu": rng.choice(["100m", "250m", "500m"])}
            if rng.random() < 0.6:
                resources["limits"] = {"cpu": rng.choice(["1", "2", "3"])}
            if rng.random() < 0.3:
                resources.setdefault("requests", {})["qos.waterline.io/ext-cpu"] = "1"
        containers.append({"name": f"c{c}", "resources": resources})
    meta: dict[str, Any] = {
        "name": f"p{i}", "namespace": rng.choice(["default", "batch", "kube-system"]),
        "uid": f"uid-{i}",
        "creationTimestamp": f"2025-12-31T{rng.randint(0, 23):02d}:00:00Z",
    }
    x = rng.random()
    if x < 0.8:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                    "name": f"rs{i % 4}", "uid": f"rs{i % 4}", "controller": True}]
        meta["labels"] = {"app": f"rs{i % 4}"}
    elif x < 0.85:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                    "name": "ds", "uid": "ds", "controller": True}]
    annotations = {}
    if rng.random() < 0.05:
        annotations["qos.waterline.io/protected"] = "true"
    if rng.random() < 0.1:
        annotations["qos.waterline.io/evictable"] = "true"
    if annotations:
        meta["annotations"] = annotations
    if rng.random() < 0.04:
        meta["deletionTimestamp"] = "2025-12-31T23:59:00Z"
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"nodeName": "n1" if rng.random() < 0.8 else "n2",
                 "priority": rng.choice([0, 0, 100, 1000, 2000000000]),
                 "containers": containers},
        "status": {"phase": "Running", "qosClass": qos,
                   "startTime": f"2025-12-31T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"},
    }


def _limit(pod: dict[str, Any]) -> float | None:
    total = 0.0
    for c in pod["spec"]["containers"]:
        cpu = c["resources"].get("limits", {}).get("cpu")
        if cpu is None:
            return None
        total += float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    return total


def _usage(rng: random.Random, pod: dict[str, Any], within: bool) -> dict[str, Any] | None:
    if rng.random() < 0.08:
        return None  # no figure this sample
    limit = _limit(pod)
    top = 4.0 if limit is None or not within else limit
    def one(share: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if rng.random() < 0.95:
            out["cpu"] = round(rng.uniform(0, top) * share, 3)
        if rng.random() < 0.95:
            out["memory"] = float(rng.randint(1, 40) * 1e8 * share)
        if rng.random() < 0.2:
            out["extCpu"] = round(rng.uniform(0, 1) * share, 3)
        return out
    names = [c["name"] for c in pod["spec"]["containers"]]
    if len(names) > 1 and rng.random() < 0.6:
        return {"containers": {n: one(1 / len(names)) for n in names}}
    return one(1.0)


def scenario(seed: int, within: bool) -> dict[str, Any]:
    rng = random.Random(seed)
    cores = rng.choice([4, 8, 16])
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": n, "labels": {"pool": rng.choice(["batch", "web"])}},
              "status": {"allocatable": {"cpu": str(cores), "memory": "32Gi", "pods": "110"}}}
             for n in ("n1", "n2")]
    pods = [_pod(rng, i, cores) for i in range(rng.randint(1, 14))]
    actions, rules = [], []
    for a in range(rng.randint(1, 3)):
        spec: dict[str, Any] = {"coolDownSeconds": rng.choice([0, 0, 10, 60, 300])}
        kind = rng.choice(["throttle", "evict", "both"])
        if kind in ("throttle", "both"):
            spec["throttle"] = {"cpuThrottle": {"minCPURatio": rng.choice([0, 5, 10, 30]),
                                                "stepCPURatio": rng.choice([5, 10, 50])}}
        if kind in ("evict", "both"):
            eviction: dict[str, Any] = {}
            if rng.random() < 0.3:
                eviction["maxPodsPerRound"] = rng.randint(1, 3)
            if rng.random() < 0.3:
                eviction["terminationGracePeriodSeconds"] = rng.randint(1, 30)
            spec["eviction"] = eviction
        if rng.random() < 0.3:
            spec["scope"] = {"qosClasses": rng.sample(["BestEffort", "Burstable", "Guaranteed"], 2),
                             "maxPriority": rng.choice([0, 100, 999999])}
        actions.append({"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
                        "metadata": {"name": f"a{a}"}, "spec": spec})
    for r in range(rng.randint(1, 4)):
        metric = rng.choice(METRICS)
        value = {"cpu_total_usage": rng.uniform(0.5, cores),
                 "memory_total_usage": rng.uniform(1, 20) * GIB}.get(metric, rng.uniform(5, 90))
        rule: dict[str, Any] = {
            "name": f"r{r}", "metricRule": {"name": metric, "value": f"{value:.3f}"},
            "avoidanceThreshold": rng.choice([1, 1, 2]),
            "restoreThreshold": rng.choice([1, 1, 2, 3]),
            "actionName": rng.choice(actions)["metadata"]["name"],
        }
        if rng.random() < 0.15:
            rule["strategy"] = "Preview"
        rules.append(rule)
    policy = {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
              "metadata": {"name": "pol"}, "spec": {"objectiveEnsurances": rules}}
    if rng.random() < 0.5:
        policy["spec"]["nodeSelector"] = {"matchLabels": {"pool": "batch"}}
    objects: list[dict[str, Any]] = [*nodes, *pods, *actions, policy]
    if rng.random() < 0.4:
        objects.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "pdb", "namespace": "default"},
                        "spec": {"minAvailable": rng.randint(1, 3),
                                 "selector": {"matchLabels": {"app": "rs0"}}}})
    samples = []
    at = 0
    for _ in range(rng.randint(1, 8)):
        for node in ("n1", "n2"):
            if rng.random() < 0.3:
                continue
            metrics = {}
            for metric in METRICS:
                if rng.random() < 0.85:
                    metrics[metric] = {"cpu_total_usage": rng.uniform(0, cores * 1.2),
                                       "memory_total_usage": rng.uniform(0, 30) * GIB}.get(
                        metric, rng.uniform(0, 100))
            on_node = {}
            for p in pods:
                if p["spec"]["nodeName"] == node:
                    usage = _usage(rng, p, within)
                    if usage is not None:
                        on_node[f"{p['metadata']['namespace']}/{p['metadata']['name']}"] = usage
            samples.append({"at": at, "node": node, "metrics": metrics, "pods": on_node})
        at += rng.choice([1, 5, 10, 30, 60])
    agent: dict[str, Any] = {"executeExcessPercent": rng.choice([0, 0, 10])}
    if rng.random() < 0.5:
        agent["evictionRateLimit"] = {"perMinute": rng.choice([0, 1, 10]), "burst": rng.randint(1, 5)}
    if rng.random() < 0.05:
        agent["clusterBrake"] = True
    return {"now": "2026-01-01T00:00:00Z", "config": {"agent": agent}, "objects": objects,
            "samples": samples}


def main(argv: list[str]) -> int:
    within = "--within-limit" in argv
    args = [a for a in argv if not a.startswith("--")]
    count = int(args[0]) if args else 1000
    first = int(args[1]) if len(args) > 1 else 0
    from agent.errors import InvalidObject
    from agent.scenario import load_scenario
    from agent.simulate.nodes import simulate_nodes

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.json"
        for seed in range(first, first + count):
            path.write_text(json.dumps(scenario(seed, within)))
            try:
                out: Any = simulate_nodes(load_scenario(str(path)))
            except InvalidObject as err:
                out = {"error": str(err)}
            print(json.dumps({"seed": seed, "nodes": out}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
