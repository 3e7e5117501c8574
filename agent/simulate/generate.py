"""`waterline generate`: a synthetic cluster scenario for benchmarks and demos.

    waterline generate --nodes 5000 --pods 150000 --jobs 10000 --queues 100 --seed 1 \\
        --out /tmp/cluster.json

The output is a `waterline simulate` scenario (../shared/SIMULATE.md) in JSON, the same
Kubernetes-shaped objects as the example scenarios, deterministic from the seed: the same
arguments give the same bytes. It is shaped so that every cluster engine has real work:

* Nodes in three worker pools (online, batch, general) of three sizes, plus a few
  control-plane nodes with static (mirror) pods; some cordoned, NotReady, tainted GPU,
  ``critical=true`` or recently defragmented nodes.
* Requested CPU per node follows a target: about 5% of online/general nodes below 25%
  (defrag sources), a quarter in the 72..88% band (defrag targets), a few filled to the
  brim (where a new DaemonSet's pods wait), the rest 40..70%.
* Pods belong to workloads (Deployments through ReplicaSets, StatefulSets, batch Jobs),
  four DaemonSets run on every node, and a new DaemonSet has pending pods on the full
  nodes. Pods of a workload share one template (requests, priority, QoS class, labels);
  some have required anti-affinity, node selectors, PodDisruptionBudgets, or opt out.
* ``--queues`` Queues: batch pods and most services carry ``qos.waterline.io/queue``. A
  few heavy-weight queues starve with a backlog of big pending pods, a few light-weight
  ones hold more than their share, the rest are steady (some with a guarantee above what
  they use). The backlog exceeds the free capacity a little, so the starving queues need
  more than is free and preemption has victims to pick from the overused queues.
* ``--jobs`` PodMigrationJobs: mostly Pending on migratable pods (some whole batch Jobs
  together), a few Running, a few on DaemonSet pods or on pods that do not exist.

Where the counts leave no room (a tiny --pods for many nodes), the fixed parts (DaemonSet
pods, backlog) shrink first; the totals asked for are always exact.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agent.errors import InvalidObject
from agent.model.timeutil import parse_time

GiB = 1024**3
QUEUE_LABEL = "qos.waterline.io/queue"
PROTECTED_ANNOTATION = "qos.waterline.io/protected"
OPT_OUT_LABEL = "qos.waterline.io/allow-preemption"
LAST_DEFRAG_ANNOTATION = "qos.waterline.io/last-defrag-time"
SYSTEM_NODE_CRITICAL = 2_000_001_000
#: CPU request sizes in millicores a workload template is drawn from.
CPU_SIZES = (100, 250, 500, 1000, 2000, 4000, 8000)
#: Memory per requested core, in GiB (at most 3 keeps memory below CPU utilization).
MEMORY_PER_CORE = ((0.5, 0.15), (1.0, 0.35), (2.0, 0.35), (3.0, 0.15))
#: (cores, GiB) node shapes and their weights.
NODE_SHAPES = (((16, 64), 0.30), ((32, 128), 0.45), ((64, 256), 0.25))
POOLS = (("online", 0.40), ("batch", 0.40), ("general", 0.20))
#: DaemonSets on every node: (namespace, name, cpu millicores, memory MiB, priority).
DAEMONSETS = (
    ("kube-system", "kube-proxy", 100, 128, SYSTEM_NODE_CRITICAL),
    ("monitoring", "node-exporter", 50, 64, SYSTEM_NODE_CRITICAL),
    ("logging", "fluent-bit", 100, 200, 2_000_000_000),
    ("waterline-system", "waterline-agent", 100, 128, SYSTEM_NODE_CRITICAL),
)
#: The DaemonSet being rolled out whose pods wait on the full nodes.
NEW_DAEMONSET = ("kube-system", "security-agent", 250, 256, SYSTEM_NODE_CRITICAL)
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
PRIORITY_CLASSES = {"online-high": 100_000, "online": 10_000, "general": 1_000, "batch": 100}
ALLOCATABLE_PODS = 110
BACKLOG_FRACTION = 0.05  # pending queue pods, of --pods
BACKLOG_MAX_CPU = 32_000  # millicores of one pending queue pod
DAEMONSET_FRACTION = 0.15  # at most this share of --pods are DaemonSet pods


@dataclass(frozen=True, slots=True)
class GenerateArgs:
    nodes: int = 5000
    pods: int = 150_000
    jobs: int = 10_000
    queues: int = 100
    seed: int = 1
    now: str = "2026-01-01T00:00:00Z"

    def validate(self) -> GenerateArgs:
        for name in ("nodes", "pods", "jobs", "queues", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidObject("generate", "", name, f"must be an integer, got {value!r}")
            if value < (1 if name == "nodes" else 0):
                raise InvalidObject(
                    "generate", "", name, f"must be >= {1 if name == 'nodes' else 0}, got {value}"
                )
        try:
            parse_time(self.now)
        except ValueError as err:
            raise InvalidObject("generate", "", "now", str(err)) from None
        return self


# -- small helpers ------------------------------------------------------------------------


def _weighted(rng: random.Random, table: tuple[tuple[Any, float], ...]) -> Any:
    x = rng.random() * sum(w for _, w in table)
    for value, weight in table:
        x -= weight
        if x < 0:
            return value
    return table[-1][0]


def _timestamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _memory(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


_ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet Kubernetes uses for name suffixes


def _suffix(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_ALNUM) for _ in range(n))


# -- the model the generator builds -----------------------------------------------------


@dataclass(slots=True)
class NodePlan:
    name: str
    pool: str
    cores: int
    memory_gib: int
    target: float  # percent of allocatable CPU to request
    kind: str  # low | band | full | normal | gpu | control-plane
    ready: bool = True
    cordoned: bool = False
    used_cpu: int = 0  # millicores requested (DaemonSets included)
    used_mem: int = 0  # MiB
    pods: int = 0
    uid: str = ""

    @property
    def alloc_cpu(self) -> int:
        return self.cores * 1000 - 500  # system-reserved

    @property
    def alloc_mem(self) -> int:
        return (self.memory_gib - 2) * 1024


@dataclass(slots=True)
class Workload:
    kind: str  # Deployment | StatefulSet | Job
    namespace: str
    name: str
    uid: str
    pool: str
    cpu: int  # millicores per pod (0: BestEffort)
    mem: int  # MiB per pod
    priority_class: str
    priority: int
    guaranteed: bool
    target_replicas: int
    created: float
    queue: str = ""
    gpu: bool = False
    anti_affinity: bool = False
    node_selector: bool = False
    protected: bool = False
    opt_out: bool = False
    sidecar: bool = False
    rs_name: str = ""
    rs_uid: str = ""
    pods: int = 0
    pending: int = 0
    nodes: set[int] = field(default_factory=set)


class _Writer:
    """Streams the scenario's objects to a file so 150,000 pods never sit in memory as dicts."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.count = 0
        self.kinds: dict[str, int] = {}

    def add(self, obj: dict[str, Any]) -> None:
        self.out.write(",\n" if self.count else "\n")
        self.out.write(json.dumps(obj, separators=(",", ":")))
        self.count += 1
        self.kinds[obj["kind"]] = self.kinds.get(obj["kind"], 0) + 1


class Generator:
    def __init__(self, args: GenerateArgs) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.now = parse_time(args.now) or 0.0
        self.nodes: list[NodePlan] = []
        self.workloads: list[Workload] = []
        self.open: dict[tuple[str, int, bool], list[Workload]] = {}
        self.namespaces: dict[str, list[str]] = {}
        self.queues: list[tuple[str, str, int]] = []  # (name, role, weight)
        #: (namespace, name, node index, owner kind, owner uid) of every placed pod.
        self.placed: list[tuple[str, str, int, str, str]] = []
        self.writer = _Writer(sys.stdout)

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    # -- nodes -----------------------------------------------------------------------
    def plan_nodes(self) -> None:
        rng, n = self.rng, self.args.nodes
        control = 3 if n >= 20 else 0
        for i in range(n):
            name = f"node-{i:05d}"
            if i < control:
                self.nodes.append(NodePlan(name, "system", 8, 32, 0.0, "control-plane"))
                continue
            pool = _weighted(rng, POOLS)
            cores, mem = _weighted(rng, NODE_SHAPES)
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
            self.nodes.append(plan)
        self.ensure_kinds()

    def ensure_kinds(self) -> None:
        """Small clusters still get one node of each kind the engines need: a defrag
        source, a defrag target and a full node (taken from the normal ones)."""
        normal = [p for p in self.nodes if p.kind == "normal" and not p.cordoned and p.ready]
        for kind, low, high in (("low", 5, 25), ("band", 72, 88), ("full", 100, 100)):
            if any(p.kind == kind for p in self.nodes):
                continue
            fits = [p for p in normal if kind != "low" or p.pool != "batch"]
            if fits:
                plan = fits[0]
                normal.remove(plan)
                plan.kind, plan.target = kind, self.rng.uniform(low, high)

    def node_object(self, plan: NodePlan, index: int) -> dict[str, Any]:
        rng = self.rng
        labels = {
            "kubernetes.io/hostname": plan.name,
            "kubernetes.io/os": "linux",
            "topology.kubernetes.io/zone": f"zone-{'abc'[index % 3]}",
            "node.kubernetes.io/instance-type": f"c{plan.cores}m{plan.memory_gib}",
            "pool": plan.pool,
        }
        annotations: dict[str, str] = {}
        taints: list[dict[str, str]] = []
        capacity = {
            "cpu": str(plan.cores),
            "memory": f"{plan.memory_gib}Gi",
            "pods": str(ALLOCATABLE_PODS),
        }
        allocatable = {
            "cpu": _cpu(plan.alloc_cpu),
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
        if plan.kind != "control-plane" and rng.random() < 0.01:
            labels["critical"] = "true"
        if plan.kind == "low" and rng.random() < 0.15:
            annotations[LAST_DEFRAG_ANNOTATION] = _timestamp(self.now - rng.uniform(60, 1800))
        spec: dict[str, Any] = {"podCIDR": f"10.{index // 256}.{index % 256}.0/24"}
        if taints:
            spec["taints"] = taints
        if plan.cordoned:
            spec["unschedulable"] = True
            spec.setdefault("taints", []).append(
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
            )
        plan.uid = self.uid()
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

    # -- namespaces, queues ------------------------------------------------------------
    def plan_namespaces(self) -> None:
        sizes = {"online": 60, "batch": 30, "general": 30}
        prefix = {"online": "team", "batch": "ml", "general": "svc"}
        for pool, count in sizes.items():
            self.namespaces[pool] = [f"{prefix[pool]}-{i:02d}" for i in range(count)]
        self.namespaces["gpu"] = ["ml-training"]

    def plan_queues(self) -> None:
        rng, q = self.rng, self.args.queues
        for i in range(q):
            if i < max(1, round(q * 0.15)):
                role, weight = "starving", rng.randint(6, 10)
            elif i < max(2, round(q * 0.30)):
                role, weight = "overused", 1
            else:
                role, weight = "steady", rng.randint(1, 4)
            self.queues.append((f"q-{i:03d}", role, weight))

    def pick_queue(self, roles: tuple[tuple[str, float], ...]) -> str:
        if not self.queues:
            return ""
        role = _weighted(self.rng, roles)
        members = [name for name, r, _ in self.queues if r == role] or [
            name for name, _, _ in self.queues
        ]
        return self.rng.choice(members)

    # -- workloads ---------------------------------------------------------------------
    def new_workload(self, pool: str, cpu: int, gpu: bool) -> Workload:
        rng = self.rng
        ns_pool = "gpu" if gpu else pool
        namespace = rng.choice(self.namespaces[ns_pool])
        if pool == "batch":
            kind = "Job" if rng.random() < 0.8 else "Deployment"
            pc = "batch"
        else:
            kind = "StatefulSet" if rng.random() < 0.12 else "Deployment"
            pc = rng.choice(("online-high", "online", "online")) if pool == "online" else "general"
        if rng.random() < 0.2:
            pc = ""  # no priority class: priority 0
        index = len(self.workloads)
        base = {"Job": "job", "StatefulSet": "db", "Deployment": "app"}[kind]
        name = f"{base}-{index:05d}"
        replicas = _weighted(
            rng, ((1, 0.15), (2, 0.2), (3, 0.2), (5, 0.15), (10, 0.15), (30, 0.1), (100, 0.05))
        )
        ratio = _weighted(rng, MEMORY_PER_CORE)
        mem = max(64, int(cpu * ratio * 1.024)) if cpu else 0  # MiB
        w = Workload(
            kind=kind,
            namespace=namespace,
            name=name,
            uid=self.uid(),
            pool=pool,
            cpu=cpu,
            mem=mem,
            priority_class=pc,
            priority=PRIORITY_CLASSES.get(pc, 0),
            guaranteed=cpu > 0 and rng.random() < 0.25,
            target_replicas=replicas,
            created=self.now - rng.uniform(3600, 60 * 86400),
            gpu=gpu,
            anti_affinity=kind == "Deployment" and pool == "online" and rng.random() < 0.1,
            node_selector=rng.random() < 0.5,
            protected=rng.random() < 0.01,
            opt_out=rng.random() < 0.03,
            sidecar=cpu >= 250 and rng.random() < 0.2,
        )
        if self.queues and pool == "batch":
            w.queue = self.pick_queue((("overused", 0.55), ("steady", 0.40), ("starving", 0.05)))
        elif self.queues and rng.random() < 0.9:  # a tenth of services run outside queues
            w.queue = self.pick_queue((("overused", 0.2), ("steady", 0.8)))
        if kind == "Deployment":
            w.rs_name = f"{name}-{_suffix(rng, 10)}"
            w.rs_uid = self.uid()
        self.workloads.append(w)
        return w

    def workload_for(self, node_index: int, pool: str, cpu: int, gpu: bool) -> Workload:
        key = (pool, cpu, gpu)
        bucket = self.open.setdefault(key, [])
        if len(bucket) < 6 or self.rng.random() < 0.05:
            bucket.append(self.new_workload(pool, cpu, gpu))
        for _ in range(4):
            w = self.rng.choice(bucket)
            if not (w.anti_affinity and node_index in w.nodes):
                break
        else:
            w = self.new_workload(pool, cpu, gpu)
            bucket.append(w)
        if w.pods + 1 >= w.target_replicas:
            bucket.remove(w)
        return w

    # -- pods --------------------------------------------------------------------------
    def pod_object(
        self, w: Workload, node: NodePlan | None, index: int, pending: bool = False
    ) -> dict[str, Any]:
        rng = self.rng
        if w.kind == "Deployment":
            name = f"{w.rs_name}-{_suffix(rng, 5)}"
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
            name = f"{w.name}-{_suffix(rng, 5)}"
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": w.name, "uid": w.uid}
        owner.update(controller=True, blockOwnerDeletion=True)
        labels = {"app": w.name}
        if w.queue:
            labels[QUEUE_LABEL] = w.queue
        if w.opt_out:
            labels[OPT_OUT_LABEL] = "false"
        meta: dict[str, Any] = {
            "name": name,
            "namespace": w.namespace,
            "uid": self.uid(),
            "labels": labels,
            "ownerReferences": [owner],
        }
        if w.protected:
            meta["annotations"] = {PROTECTED_ANNOTATION: "true"}
        created = rng.uniform(w.created, self.now - 60)
        meta["creationTimestamp"] = _timestamp(created)
        containers = self.containers(w)
        spec: dict[str, Any] = {"containers": containers, "priority": w.priority}
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
        qos = "BestEffort" if not w.cpu else ("Guaranteed" if w.guaranteed else "Burstable")
        if pending or node is None:
            status: dict[str, Any] = {
                "phase": "Pending",
                "qosClass": qos,
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            }
        else:
            spec["nodeName"] = node.name
            ready = node.ready and rng.random() > 0.01
            status = {
                "phase": "Running",
                "qosClass": qos,
                "startTime": _timestamp(created + rng.uniform(1, 30)),
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            }
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    @staticmethod
    def containers(w: Workload) -> list[dict[str, Any]]:
        if not w.cpu:
            return [{"name": "main", "image": "registry.example/app:1", "resources": {}}]
        parts = [("main", w.cpu, w.mem)]
        if w.sidecar:
            parts = [("main", w.cpu - 50, w.mem - 64), ("proxy", 50, 64)]
        out = []
        for cname, cpu, mem in parts:
            requests: dict[str, str] = {"cpu": _cpu(cpu), "memory": _memory(mem)}
            if w.gpu and cname == "main":
                requests["nvidia.com/gpu"] = "1"
            resources: dict[str, Any] = {"requests": requests}
            if w.guaranteed:
                resources["limits"] = dict(requests)
            elif cname == "main":
                resources["limits"] = {"memory": _memory(mem * 2)}
            out.append({"name": cname, "image": "registry.example/app:1", "resources": resources})
        return out

    def choose_cpu(self, budget: int, slots_left: int) -> int:
        desired = budget / max(1, slots_left) * self.rng.uniform(0.5, 1.7)
        if self.rng.random() < 0.06:
            return 0  # a BestEffort pod
        cpu = 0
        for size in CPU_SIZES:
            if size <= desired and size <= budget:
                cpu = size
        return cpu

    def place(self, w: Workload, index: int) -> None:
        """Write one running pod of `w` on node `index` and account for it."""
        node = self.nodes[index]
        pod = self.pod_object(w, node, w.pods)
        w.pods += 1
        if w.anti_affinity:
            w.nodes.add(index)
        node.used_cpu += w.cpu
        node.used_mem += w.mem
        node.pods += 1
        self.writer.add(pod)
        meta = pod["metadata"]
        self.placed.append((meta["namespace"], meta["name"], index, w.kind, w.uid))

    def fill_node(self, index: int, count: int) -> int:
        """Place up to `count` pods on a node toward its CPU target; returns how many."""
        node = self.nodes[index]
        slots = max(0, min(count, ALLOCATABLE_PODS - node.pods))
        if node.kind == "gpu":
            slots = min(slots, 8)
        gpu = node.kind == "gpu"
        for placed in range(slots):
            cpu_budget = int(node.alloc_cpu * node.target / 100) - node.used_cpu
            cpu = self.choose_cpu(cpu_budget, slots - placed)
            w = self.workload_for(index, node.pool, cpu, gpu)
            if w.mem > node.alloc_mem - node.used_mem:
                w = self.workload_for(index, node.pool, 0, gpu)
            self.place(w, index)
        return slots

    def fill_full(self, index: int, limit: int) -> int:
        """Fill a node until less than the smallest request size is left (at most `limit`
        pods): big pods first, then smaller ones, as a scheduler packing it would."""
        node = self.nodes[index]
        placed = 0
        while placed < limit and node.pods < ALLOCATABLE_PODS:
            free = node.alloc_cpu - node.used_cpu
            if free < CPU_SIZES[0]:
                break
            want = free // 3 if placed < 6 else free
            cpu = max(s for s in CPU_SIZES if s <= max(CPU_SIZES[0], want))
            w = self.workload_for(index, node.pool, cpu, False)
            if w.mem > node.alloc_mem - node.used_mem:
                break
            self.place(w, index)
            placed += 1
        return placed

    def fill_best_effort(self, index: int, count: int) -> int:
        """Up to `count` BestEffort pods (only when the counts leave no other room)."""
        node = self.nodes[index]
        placed = 0
        while placed < count and node.pods < ALLOCATABLE_PODS:
            self.place(self.workload_for(index, node.pool, 0, False), index)
            placed += 1
        return placed


def generate(args: GenerateArgs, out: IO[str]) -> dict[str, Any]:
    """Write the scenario to `out`; return a summary of what it holds."""
    g = Generator(args.validate())
    rng = g.rng
    g.plan_nodes()
    g.plan_namespaces()
    g.plan_queues()
    writer = g.writer = _Writer(out)
    config = {
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
    out.write(json.dumps({"now": args.now, "config": config}, separators=(",", ":"))[:-1])
    out.write(',"objects":[')

    n_nodes = len(g.nodes)
    for i, plan in enumerate(g.nodes):
        writer.add(g.node_object(plan, i))
    for ns in ["kube-system", "monitoring", "logging", "waterline-system"] + [
        n for v in g.namespaces.values() for n in v
    ]:
        pool = next((p for p, names in g.namespaces.items() if ns in names), "system")
        writer.add(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "labels": {"kubernetes.io/metadata.name": ns, "pool": pool},
                },
            }
        )
    for pc, value in PRIORITY_CLASSES.items():
        writer.add(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc},
                "value": value,
            }
        )

    # The fixed parts first, shrunk to fit --pods: static pods, DaemonSet pods, the new
    # DaemonSet's pending pods, the queue backlog.
    budget = args.pods
    control = [i for i, p in enumerate(g.nodes) if p.kind == "control-plane"]
    static = min(budget, len(control) * len(STATIC_PODS)) // len(STATIC_PODS) * len(STATIC_PODS)
    budget -= static
    per_node = min(len(DAEMONSETS), int(args.pods * DAEMONSET_FRACTION) // n_nodes)
    daemonsets = DAEMONSETS[:per_node]
    backlog = min(budget - per_node * n_nodes, int(args.pods * BACKLOG_FRACTION)) if g.queues else 0
    backlog = max(0, backlog)
    budget -= per_node * n_nodes + backlog
    full_nodes = [i for i, p in enumerate(g.nodes) if p.kind == "full"]
    ds_pending_nodes = full_nodes[: max(0, min(len(full_nodes), budget // 20))] if per_node else []
    budget -= len(ds_pending_nodes)

    ds_uids = {ds[1]: g.uid() for ds in DAEMONSETS + (NEW_DAEMONSET,)}
    for i in control[: static // len(STATIC_PODS)]:
        for component in STATIC_PODS:
            writer.add(static_pod(g, g.nodes[i], component))

    for i, node in enumerate(g.nodes):
        for ns, name, cpu, mem, prio in daemonsets:
            writer.add(
                daemonset_pod(g, ns, name, ds_uids[name], cpu, mem, prio, node, pending=False)
            )
            node.used_cpu += cpu
            node.used_mem += mem
            node.pods += 1
            g.placed.append((ns, f"{name}-{node.name}", i, "DaemonSet", ds_uids[name]))

    # Full nodes first (as many pods as fit), then the rest in proportion to their target.
    regular = budget
    placed_full = 0
    for i in full_nodes:
        if placed_full >= regular:
            break
        placed_full += g.fill_full(i, regular - placed_full)
    remaining = regular - placed_full
    others = [i for i, p in enumerate(g.nodes) if p.kind not in ("full", "control-plane")]
    weights = [max(1.0, g.nodes[i].alloc_cpu * (g.nodes[i].target or 30) / 100) for i in others]
    total_w = sum(weights) or 1.0
    counts = [int(remaining * w / total_w) for w in weights]
    leftover = remaining - sum(counts)
    order = sorted(
        range(len(others)), key=lambda j: -(remaining * weights[j] / total_w - counts[j])
    )
    for j in order[:leftover]:
        counts[j] += 1
    carry = 0
    for j, i in enumerate(others):
        want = counts[j] + carry
        got = g.fill_node(i, want)
        carry = want - got
    if carry and full_nodes:  # no room left on the others: the full nodes take the rest
        for i in full_nodes:
            carry -= g.fill_best_effort(i, carry)
            if not carry:
                break
    while carry > 0:  # still no room anywhere: the rest waits unscheduled
        w = g.workload_for(0, "general", 100, False)
        w.pods += 1
        w.pending += 1
        writer.add(g.pod_object(w, None, w.pods - 1, pending=True))
        carry -= 1

    # Pending pods of the new DaemonSet on the full nodes.
    for i in ds_pending_nodes:
        ns, name, cpu, mem, prio = NEW_DAEMONSET
        pod = daemonset_pod(g, ns, name, ds_uids[name], cpu, mem, prio, g.nodes[i], pending=True)
        writer.add(pod)

    # The queue backlog: big pending pods of batch Jobs. Sized to exceed the free capacity
    # a little, so the starving queues need more than is free and preemption has to pick
    # victims (queue_objects holds the other half of that).
    total_cpu = sum(p.alloc_cpu for p in g.nodes if p.ready)
    free_cpu = sum(max(0, p.alloc_cpu - p.used_cpu) for p in g.nodes if p.ready and not p.cordoned)
    queue_running = sum(w.cpu * (w.pods - w.pending) for w in g.workloads if w.queue)
    pod_cpu = 0
    if backlog:
        per_pod = (free_cpu + 0.015 * total_cpu) / backlog
        # Whole half-cores, at most half of the largest node (training pods are big).
        pod_cpu = min(BACKLOG_MAX_CPU, max(1000, -(-int(per_pod) // 500) * 500))
        jobs: list[Workload] = []
        for _ in range(backlog):
            if not jobs or jobs[-1].pending >= jobs[-1].target_replicas:
                w = g.new_workload("batch", pod_cpu, False)
                w.kind, w.rs_name, w.mem = "Job", "", pod_cpu * 1024 // 1000  # 1 GiB a core
                w.name = f"train-{len(g.workloads):05d}"
                w.queue = g.pick_queue((("starving", 0.9), ("steady", 0.1)))
                w.target_replicas = rng.choice((4, 8, 16, 32, 64))
                w.created = g.now - rng.uniform(600, 6 * 3600)
                jobs.append(w)
            w = jobs[-1]
            w.pods += 1
            w.pending += 1
            writer.add(g.pod_object(w, None, w.pods - 1, pending=True))

    # Workload objects with their replica counts.
    for w in g.workloads:
        for obj in workload_objects(w):
            writer.add(obj)
    for ns, name, *_ in daemonsets + ((NEW_DAEMONSET,) if ds_pending_nodes else ()):
        writer.add(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": ns, "uid": ds_uids[name]},
                "spec": {"selector": {"matchLabels": {"app": name}}},
                "status": {"desiredNumberScheduled": n_nodes, "numberReady": n_nodes},
            }
        )
    pdbs = 0
    for w in g.workloads:
        if w.kind == "Deployment" and w.pool == "online" and w.pods >= 3 and rng.random() < 0.3:
            spec: dict[str, Any] = {"selector": {"matchLabels": {"app": w.name}}}
            if rng.random() < 0.5:
                spec["minAvailable"] = "80%"
            else:
                spec["maxUnavailable"] = 1
            writer.add(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": w.name, "namespace": w.namespace},
                    "spec": spec,
                }
            )
            pdbs += 1

    for obj in queue_objects(g, total_cpu, queue_running):
        writer.add(obj)

    migration_jobs(g, writer)
    out.write("\n]}\n")
    return {
        "objects": writer.count,
        "kinds": dict(sorted(writer.kinds.items())),
        "nodes": {
            k: sum(1 for p in g.nodes if p.kind == k)
            for k in ("control-plane", "low", "band", "normal", "full", "gpu")
        },
        "clusterCpuCores": round(total_cpu / 1000),
        "requestedCpuCores": round(sum(p.used_cpu for p in g.nodes) / 1000),
        "queueRunningCpuCores": round(queue_running / 1000),
        "queueBacklogCpuCores": round(backlog * pod_cpu / 1000),
        "pdbs": pdbs,
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
            "creationTimestamp": _timestamp(created),
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
            "startTime": _timestamp(created),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def queue_objects(g: Generator, total_cpu: int, queue_running: int) -> Iterator[dict[str, Any]]:
    """Queue CRs. A fifth of the steady queues hold a guarantee (capacity reserved for a
    team) above what they use: together with the capacity used outside any queue, that
    is what the heavy queues cannot get, so the light overused queues are cut below what
    they hold and become reclaimable victims."""
    rng = g.rng
    outside = sum(p.used_cpu for p in g.nodes if p.ready) - queue_running
    steady = [name for name, role, _ in g.queues if role == "steady"]
    overused = [name for name, role, _ in g.queues if role == "overused"]
    guaranteed = set(steady[::5]) if steady else set()
    per_queue = (outside + 0.10 * total_cpu) / max(1, len(guaranteed))
    allocated: dict[str, int] = {}
    for w in g.workloads:
        if w.queue:
            allocated[w.queue] = allocated.get(w.queue, 0) + w.cpu * (w.pods - w.pending)
    for name, role, weight in g.queues:
        spec: dict[str, Any] = {
            "weight": weight,
            # every fourth overused queue may not be reclaimed from
            "reclaimable": name not in overused[3::4],
        }
        if name in guaranteed:
            cores = max(1, round((allocated.get(name, 0) + per_queue) / 1000))
            spec["guarantee"] = {"resource": {"cpu": str(cores), "memory": "64Gi"}}
        elif role == "steady" and rng.random() < 0.1:
            spec["capability"] = {"cpu": str(rng.choice((1000, 2000, 5000)))}
        yield {
            "apiVersion": "qos.waterline.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name, "labels": {"role": role}},
            "spec": spec,
        }


def daemonset_pod(
    g: Generator,
    ns: str,
    name: str,
    ds_uid: str,
    cpu: int,
    mem: int,
    prio: int,
    node: NodePlan,
    pending: bool,
) -> dict[str, Any]:
    created = g.now - (600 if pending else 30 * 86400)
    meta = {
        "name": f"{name}-{node.name}",
        "namespace": ns,
        "uid": g.uid(),
        "creationTimestamp": _timestamp(created),
        "labels": {"app": name},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": name,
                "uid": ds_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    requests = {"cpu": _cpu(cpu), "memory": _memory(mem)}
    spec: dict[str, Any] = {
        "priority": prio,
        "priorityClassName": "system-node-critical"
        if prio == SYSTEM_NODE_CRITICAL
        else "system-cluster-critical",
        "containers": [
            {
                "name": name,
                "image": f"registry.example/{name}:1",
                "resources": {"requests": requests, "limits": {"memory": _memory(mem * 2)}},
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
            "startTime": _timestamp(created + 5),
            "conditions": [{"type": "Ready", "status": "True" if node.ready else "False"}],
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def workload_objects(w: Workload) -> Iterator[dict[str, Any]]:
    meta = {
        "name": w.name,
        "namespace": w.namespace,
        "uid": w.uid,
        "creationTimestamp": _timestamp(w.created),
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
    yield {
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


def migration_jobs(g: Generator, writer: _Writer) -> None:
    """PodMigrationJobs, at most one per pod: about 4% Running (they count as migrating),
    2% on DaemonSet pods and 1% on pods that do not exist (arbitration fails those), whole
    batch Jobs together for a tenth of them, and the rest on random running pods."""
    rng, total = g.rng, g.args.jobs
    if not total:
        return
    regular = [k for k, p in enumerate(g.placed) if p[3] != "DaemonSet"]
    daemon = [k for k, p in enumerate(g.placed) if p[3] == "DaemonSet"]
    by_job: dict[str, list[int]] = {}
    for k in regular:
        if g.placed[k][3] == "Job":
            by_job.setdefault(g.placed[k][4], []).append(k)
    job_uids = list(by_job)
    rng.shuffle(regular)
    rng.shuffle(job_uids)
    chosen: list[int | None] = []  # indices into g.placed; None = a missing pod
    used: set[int] = set()

    def take(k: int) -> None:
        if k not in used and len(chosen) < total:
            used.add(k)
            chosen.append(k)

    for k in daemon[: int(total * 0.02)]:
        take(k)
    grouped = int(total * 0.10)
    for uid in job_uids:
        if len(chosen) >= int(total * 0.02) + grouped:
            break
        for k in by_job[uid][:16]:
            take(k)
    for k in regular:
        if len(chosen) >= total - max(1, int(total * 0.01)):
            break
        take(k)
    while len(chosen) < total:
        chosen.append(None)
    rng.shuffle(chosen)
    for n, ref in enumerate(chosen):
        if ref is None:
            namespace, pod = "team-00", f"gone-{_suffix(rng, 8)}"
        else:
            namespace, pod = g.placed[ref][0], g.placed[ref][1]
        spec: dict[str, Any] = {
            "podRef": {"namespace": namespace, "name": pod},
            "mode": "ReservationFirst" if rng.random() < 0.8 else "EvictDirectly",
            "ttl": rng.choice(("10m", "30m", "1h")),
        }
        x = rng.random()
        if x < 0.2:
            spec["priority"] = rng.choice((0, 10, 100, 1000))
        elif x < 0.3:
            spec["priorityClassName"] = rng.choice(sorted(PRIORITY_CLASSES))
        phase = "Running" if rng.random() < 0.04 else "Pending"
        writer.add(
            {
                "apiVersion": "qos.waterline.io/v1alpha1",
                "kind": "PodMigrationJob",
                "metadata": {
                    "name": f"pmj-{n:05d}",
                    "uid": g.uid(),
                    "creationTimestamp": _timestamp(g.now - rng.uniform(0, 7200)),
                },
                "spec": spec,
                "status": {"phase": phase},
            }
        )


# -- command ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = GenerateArgs()
    parser.add_argument("--nodes", type=int, default=d.nodes, help="nodes (default %(default)s)")
    parser.add_argument(
        "--pods", type=int, default=d.pods, help="pods, all kinds and phases (default %(default)s)"
    )
    parser.add_argument(
        "--jobs", type=int, default=d.jobs, help="PodMigrationJobs (default %(default)s)"
    )
    parser.add_argument("--queues", type=int, default=d.queues, help="Queues (default %(default)s)")
    parser.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="random seed; same seed, same file (default %(default)s)",
    )
    parser.add_argument("--now", default=d.now, help="the scenario's clock (default %(default)s)")
    parser.add_argument(
        "--out", required=True, help="where to write the JSON scenario ('-' for stdout)"
    )


def run(args: argparse.Namespace) -> int:
    gen_args = GenerateArgs(args.nodes, args.pods, args.jobs, args.queues, args.seed, args.now)
    try:
        gen_args.validate()
    except InvalidObject as err:
        print(f"waterline generate: {err}", file=sys.stderr)
        return 2
    if args.out == "-":
        summary = generate(gen_args, sys.stdout)
    else:
        path = Path(args.out)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w") as out:
            summary = generate(gen_args, out)
        tmp.replace(path)
    print(json.dumps(summary), file=sys.stderr)
    return 0
