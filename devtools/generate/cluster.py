"""The whole scenario, in the order it is drawn and written: plan the nodes, namespaces
and queues; write the cluster objects; place the pods (fixed parts first); then the
objects whose counts the pods decided (workloads, DaemonSets, PDBs, Queues) and the
PodMigrationJobs on the placed pods."""

from __future__ import annotations

import json
from typing import IO, Any

from devtools.generate.args import GenerateArgs
from devtools.generate.daemonsets import (
    daemonset_objects,
    pending_daemonset_pods,
    place_daemonset_pods,
    plan_daemonsets,
)
from devtools.generate.jobs import migration_jobs
from devtools.generate.model import NEW_DAEMONSET, STATIC_PODS, Generator, Writer
from devtools.generate.nodes import cluster_objects, plan_namespaces, plan_nodes, static_pod
from devtools.generate.placement import Capacity, fill_nodes, place_backlog, plan_budget
from devtools.generate.queues import plan_queues, queue_objects
from devtools.generate.workloads import pdb_objects, workload_objects

#: The engines' configuration in the scenario: every cluster engine on.
CONFIG: dict[str, Any] = {
    "arbitration": {
        "interval": 60,
        "processQueueQPS": 3,
        "jobSelectRatio": 1.2,
        "maxMigratingPerNode": 2,
    },
    "defrag": {
        "resourceType": "cpu",
        "lowThresholds": 30,
        "defragmentThresholds": 70,
        "protectionThresholds": 90,
        "numberOfNodes": 0,
        "coolDownTime": 3600,
        "evictableNamespaces": {"exclude": ["kube-system"]},
    },
    "daemonset": {
        "preemptionStartDelay": 30,
        "strategy": ["single", "multiple"],
        "deviationPercent": 10,
        "maxVictims": 3,
    },
}
NODE_KINDS = ("control-plane", "low", "band", "normal", "full", "gpu")


def generate(args: GenerateArgs, out: IO[str]) -> dict[str, Any]:
    """Write the scenario to `out`; return a summary of what it holds."""
    writer = Writer(out)
    g = Generator(args.validate(), writer)
    plan_nodes(g)
    plan_namespaces(g)
    plan_queues(g)
    out.write(json.dumps({"now": args.now, "config": CONFIG}, separators=(",", ":"))[:-1])
    out.write(',"objects":[')
    for obj in cluster_objects(g):
        writer.add(obj)

    budget = plan_budget(g)
    plan_daemonsets(g)
    for i in budget.control:
        for component in STATIC_PODS:
            writer.add(static_pod(g, g.nodes[i], component))
    place_daemonset_pods(g, budget.daemonsets)
    fill_nodes(g, budget)
    pending_daemonset_pods(g, budget.ds_pending_nodes)
    capacity = Capacity.of(g)
    pod_cpu = place_backlog(g, budget.backlog, capacity)

    for w in g.workloads:
        for obj in workload_objects(w):
            writer.add(obj)
    rolling_out = (NEW_DAEMONSET,) if budget.ds_pending_nodes else ()
    for obj in daemonset_objects(g, budget.daemonsets + rolling_out):
        writer.add(obj)
    for obj in pdb_objects(g):
        writer.add(obj)
    for obj in queue_objects(g, capacity.total, capacity.queue_running):
        writer.add(obj)
    migration_jobs(g)
    out.write("\n]}\n")
    return _summary(g, capacity, budget.backlog * pod_cpu)


def _summary(g: Generator, capacity: Capacity, backlog_cpu: int) -> dict[str, Any]:
    return {
        "objects": g.writer.count,
        "kinds": dict(sorted(g.writer.kinds.items())),
        "nodes": {k: sum(1 for p in g.nodes if p.kind == k) for k in NODE_KINDS},
        "clusterCpuCores": round(capacity.total / 1000),
        "requestedCpuCores": round(sum(p.used_cpu for p in g.nodes) / 1000),
        "queueRunningCpuCores": round(capacity.queue_running / 1000),
        "queueBacklogCpuCores": round(backlog_cpu / 1000),
        "pdbs": g.writer.kinds.get("PodDisruptionBudget", 0),
    }
