"""What the generator builds before it writes: the shape tables, the node and workload
plans it fills as it places pods, the streaming writer, and the run's mutable state.

Every draw comes from one ``random.Random`` held by :class:`Generator`, in a fixed order:
the same arguments give the same bytes, so a module may reorder its code only where no
draw moves.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from typing import IO, Any

from agent.model.timeutil import parse_time
from devtools.generate.args import GenerateArgs

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


# -- small helpers ------------------------------------------------------------------------


def weighted(rng: random.Random, table: tuple[tuple[Any, float], ...]) -> Any:
    x = rng.random() * sum(w for _, w in table)
    for value, weight in table:
        x -= weight
        if x < 0:
            return value
    return table[-1][0]


def cpu_quantity(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


_ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet Kubernetes uses for name suffixes


def suffix(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_ALNUM) for _ in range(n))


# -- the plans ------------------------------------------------------------------------------


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


class Writer:
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
    """One run's state: the random source, the plans, and what has been placed."""

    def __init__(self, args: GenerateArgs, writer: Writer) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.now = parse_time(args.now) or 0.0
        self.writer = writer
        self.nodes: list[NodePlan] = []
        self.workloads: list[Workload] = []
        #: Workloads still taking pods, by (pool, cpu millicores, gpu).
        self.open: dict[tuple[str, int, bool], list[Workload]] = {}
        self.namespaces: dict[str, list[str]] = {}
        self.queues: list[tuple[str, str, int]] = []  # (name, role, weight)
        #: DaemonSet name -> uid.
        self.ds_uids: dict[str, str] = {}
        #: (namespace, name, node index, owner kind, owner uid) of every placed pod.
        self.placed: list[tuple[str, str, int, str, str]] = []

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
