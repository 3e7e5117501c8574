"""Defragmentation end to end on a real control plane (issue 20): the strategies of
``bench.defrag_e2e`` carried out by the controller's own code against a real
kube-apiserver, the real kube-scheduler and ReplicaSet controller placing the
replacements on kwok nodes, side by side with the scheduler model on the same cluster.

    python -m bench defrag-e2e --real              # 24 nodes: about 10 minutes on 2 busy cores
    python -m bench defrag-e2e --real --nodes 8

**The cluster** (``layout``, ``build``), the same for every strategy (same seed, a fresh
namespace and fresh kwok nodes each time): N nodes of 8 or 16 cores (4 GiB a core), a
sixth of them built as defrag sources (5..25% of their CPU requested), a third in the
targets' band (72..88%), the rest 40..70% (or less: their pods are large). Every node
runs the agent DaemonSet's pod (deploy/ is installed as a user installs it: it stays, as
DaemonSet pods do); the rest are Deployments of 2 to 4 replicas of one shape (250m..1
core on a source, 1..3 cores elsewhere; 2 to 4 MiB of memory a millicore): arbitration
holds back the job of a one-replica workload (``ExpectedReplicas``), which the planner
plans all the same, so one-replica workloads would only time out. The real scheduler puts each Deployment's
replicas on its node: while the cluster is built every node carries a taint of its own
(``bench.waterline.io/slot=<node>``) that only its Deployments tolerate; those taints go
before anything is planned (a toleration of a taint no node has changes no filter and no
score). Every node keeps ``bench.waterline.io/run=<run>:NoSchedule`` and that label,
which the bench's pods tolerate and select, so nothing else lands on its nodes and its
pods land nowhere else. *Tight* (as in the model): after the plan, a filler Deployment
pinned to each node but the freed sources takes the CPU the plan does not move there.

**Per strategy**: the controller runs in this process with its own ServiceAccount's token
(``waterline-controller``: deploy/'s RBAC is what lets it work), its default config and a
round every ``INTERVAL`` seconds (the model's rounds are a minute; the pace per second is
the same, processQueueQPS 3). Once its caches hold the built cluster, the defrag engine's
``plan`` runs on its snapshot (the bench's nodes), and the plan is carried out:

* **plain eviction** (a descheduler): every planned pod evicted at once through the
  Eviction API, by the controller's writer;
* **drain taints**: the plan's jobs created by the controller's defrag act
  (``PlanActs.create_defrag_jobs``), in mode EvictDirectly;
* **drain taints + placeholders**: the same jobs, ReservationFirst, as the controller
  creates them.

Jobs carry a ttl of ``TTL`` seconds (the default, 5 minutes, is 150 of these rounds).
Done when every job has ended and every replacement runs or the scheduler found no room
for it; two rounds later (the reconcile after the last job's end) what is left is counted:
placeholder pods on the bench's nodes and drain taints (both must be 0). The model
(``bench.defrag_e2e``) carries out the same plan on the same snapshot.

Counted for both: nodes freed (a planned source with no pod that must move), pods moved
(evicted), and where their replacements run: on the planned target, elsewhere, back on
the source, or Pending. A replacement is any new pod of the moved pod's ReplicaSet: per
workload, the landings are matched to the moves target first, then source (the replicas
of one workload are interchangeable; the controller's own ``LandedOnTarget`` pairs them
by creation order). Where the two disagree: per workload, the landings in one and not in
the other, by role (target, source, other node, Pending); how many distinct nodes a
workload's replacements went to; and the placeholders the real scheduler preempted for a
replacement (the model has no preemption).
"""

from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.cluster.access import controller_access
from agent.cluster.acting import PlanActs
from agent.cluster.controller import Controller, ControllerDeps
from agent.cluster.defrag import PLACEHOLDER_LABEL, DefragArgs, DefragPlan, Migration, plan, stays
from agent.cluster.migrator import DRAIN_TAINT_KEY
from agent.cluster.placement import Snapshot
from agent.cluster.resources import MIGRATION_JOBS, WATCHES
from agent.kube.client import ClientArgs, KubeApi, build_api
from agent.kube.fetching import Selectors, list_objects
from agent.kube.patching import merge_patch
from agent.kube.resources import EVENTS, NAMESPACES, NODES, PODS, Resource
from agent.model import migration as m
from agent.model.objects import Pod
from agent.model.store import ObjectStore
from agent.model.timeutil import parse_time_or_none
from bench.defrag_e2e import Case, Outcome, bound_pods, controlled, plain_eviction, tight_rooms
from bench.outcome import NothingMeasured

DEFAULT_NODES = 24
SEED = 1
INTERVAL = 2.0
TTL = 120
RUN_KEY = "bench.waterline.io/run"
SLOT_KEY = "bench.waterline.io/slot"
HOSTNAME = "kubernetes.io/hostname"
IMAGE = "registry.k8s.io/pause:3.10"
AGENT_LABEL = "app.kubernetes.io/name=waterline-agent"
#: Arbitration holds back a job of a one-replica workload (ExpectedReplicas: it would lose
#: all it may lose at once), so every Deployment here has two replicas or more.
MIN_REPLICAS = 2
#: The agent DaemonSet pod's CPU request on every node (deploy/daemonset.yaml), millicores.
DAEMON_CPU_M = 100
#: kind -> (share of the nodes, CPU requested from, to: % of allocatable, pod sizes in m).
KINDS: Mapping[str, tuple[float, float, float, tuple[int, ...]]] = {
    "low": (1 / 6, 5, 25, (250, 500, 750, 1000)),
    "band": (1 / 3, 72, 88, (1000, 1500, 2000, 3000)),
    "normal": (1.0, 40, 70, (1000, 1500, 2000, 3000)),
}
PLAIN, DRAIN, PLACEHOLDERS = "plain eviction (descheduler)", "drain taints", "drain taints + placeholders"
#: strategy -> the model's way of carrying out a plan.
MODEL: Mapping[str, Callable[[Case], Outcome]] = {
    PLAIN: plain_eviction,
    DRAIN: lambda case: controlled(case, False),
    PLACEHOLDERS: lambda case: controlled(case, True),
}
STRATEGIES = (PLAIN, DRAIN, PLACEHOLDERS)
CASES = ("as built", "tight")


# -- the cluster ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """One Deployment: ``replicas`` pods of one shape, built on ``node``."""

    name: str
    node: str
    replicas: int
    cpu_m: int
    memory_mi: int


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cores: int
    kind: str
    workloads: tuple[Workload, ...]


def layout(run: str, nodes: int, seed: int = SEED) -> list[NodeSpec]:
    """The cluster of one run, the same for every run of a seed (names aside)."""
    rng = random.Random(seed)
    kinds: list[str] = []
    for kind, (share, *_) in KINDS.items():
        kinds += [kind] * max(1, min(nodes - len(kinds), round(nodes * share)))
    kinds = kinds[:nodes]
    rng.shuffle(kinds)
    specs = []
    for i, kind in enumerate(kinds):
        name = f"{run}-{i:03d}"
        cores = rng.choice((8, 16))
        _, low, high, sizes = KINDS[kind]
        budget = int(cores * 10 * rng.uniform(low, high)) - DAEMON_CPU_M
        workloads: list[Workload] = []
        used = 0
        while True:
            size, replicas = rng.choice(sizes), rng.randint(MIN_REPLICAS, MIN_REPLICAS + 2)
            while replicas > MIN_REPLICAS and used + size * replicas > budget:
                replicas -= 1
            if used + size * replicas > budget:
                size = sizes[0]
                if used + size * replicas > budget:
                    break
            memory = size * rng.choice((2, 3, 4))
            workloads.append(Workload(f"{name}-w{len(workloads)}", name, replicas, size, memory))
            used += size * replicas
        specs.append(NodeSpec(name, cores, kind, tuple(workloads)))
    return specs


def _toleration(key: str, value: str) -> dict[str, str]:
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}


def deployment(
    name: str, ns: str, run: str, replicas: int, requests: Mapping[str, str],
    select: Mapping[str, str], tolerate: Sequence[dict[str, str]],
) -> dict[str, Any]:  # fmt: skip
    labels = {"app": name, RUN_KEY: run}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {RUN_KEY: run}},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels}, "spec": {
                "nodeSelector": {RUN_KEY: run, **select}, "tolerations": list(tolerate),
                "containers": [{"name": "main", "image": IMAGE,
                                "resources": {"requests": dict(requests)}}],
            }},
        },
    }  # fmt: skip


# -- reading the cluster (the admin's view: set-up and checks only) ------------------------


def _list(api: KubeApi, resource: Resource, **selectors: str) -> list[dict[str, Any]]:
    return list_objects(api, resource, Selectors(**selectors)).items


def _is_settled(pod: Mapping[str, Any], running: bool = False) -> bool:
    """Running, or (unless ``running``) Pending with the scheduler's answer that it fits
    nowhere."""
    status = pod.get("status") or {}
    if status.get("phase") == "Running":
        return True
    return not running and any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or ()
    )


def _wait(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            print(f"    ! {what}: not within {timeout:.0f} s", file=sys.stderr)
            return False
        time.sleep(interval)
    return True


@dataclass
class Pool:
    """One run's nodes and namespace, as built."""

    kube: Any
    run: str
    specs: list[NodeSpec]
    pods: int = 0  # pods of the bench's Deployments in the namespace

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def run_taint(self) -> dict[str, str]:
        return {"key": RUN_KEY, "value": self.run, "effect": "NoSchedule"}

    def state(self) -> ObjectStore:
        """The bench's nodes and every pod on them or in its namespace, as they are now."""
        api, names = self.kube.api, set(self.names)
        nodes = _list(api, NODES, label_selector=f"{RUN_KEY}={self.run}")
        pods = [p for p in _list(api, PODS)
                if (p.get("spec") or {}).get("nodeName") in names
                or p["metadata"]["namespace"] == self.run]  # fmt: skip
        return ObjectStore.from_dicts(nodes + pods)

    def pods_settled(self, running: bool = False) -> bool:
        """Every pod of the namespace there and settled (``_is_settled``)."""
        pods = _list(self.kube.api, PODS, namespace=self.run)
        active = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return len(active) == self.pods and all(_is_settled(p, running) for p in active)

    def pods_running(self) -> bool:
        return self.pods_settled(running=True)

    def jobs(self) -> list[dict[str, Any]]:
        return [j for j in _list(self.kube.api, MIGRATION_JOBS)
                if j["spec"]["podRef"]["namespace"] == self.run]  # fmt: skip

    def leftovers(self) -> tuple[int, int]:
        """Placeholder pods on the bench's nodes, and its nodes with a drain taint."""
        names = set(self.names)
        holders = _list(self.kube.api, PODS, label_selector=PLACEHOLDER_LABEL)
        placeholders = sum((p.get("spec") or {}).get("nodeName") in names for p in holders)
        nodes = _list(self.kube.api, NODES, label_selector=f"{RUN_KEY}={self.run}")
        taints = sum(
            any(t.get("key") == DRAIN_TAINT_KEY for t in (n.get("spec") or {}).get("taints") or ())
            for n in nodes
        )
        return placeholders, taints

    def preempted(self, since: float) -> int:
        """Pods the scheduler preempted on the bench's nodes since ``since`` (placeholders)."""
        names = set(self.names)
        count = 0
        for event in _list(self.kube.api, EVENTS, field_selector="reason=Preempted"):
            node = str(event.get("message") or "").rsplit(" ", 1)[-1]
            stamp = event.get("lastTimestamp") or event.get("eventTime") or ""
            if node in names and (parse_time_or_none(stamp) or 0.0) >= since - 1:
                count += 1
        return count


def build(kube: Any, nodes: int, seed: int, laps: Laps | None = None) -> Pool:
    """A fresh namespace and kwok nodes, the Deployments on their nodes, slot taints off."""
    run = kube.namespace("dfr")
    pool = Pool(kube, run, layout(run, nodes, seed))

    def add(spec: NodeSpec) -> str:
        return kube.node(spec.name, labels={RUN_KEY: run},
                         allocatable={"cpu": str(spec.cores), "memory": f"{4 * spec.cores}Gi", "pods": "110"},
                         taints=[pool.run_taint(), {"key": SLOT_KEY, "value": spec.name, "effect": "NoSchedule"}],
                         ready=False)  # fmt: skip

    with ThreadPoolExecutor(8) as pool_of_threads:  # two requests a node, each its own TLS
        list(pool_of_threads.map(add, pool.specs))
    kube.cluster.wait_nodes_ready(pool.names, time.monotonic() + 120)
    if laps is not None:
        laps.lap("nodes")
    run_toleration = _toleration(RUN_KEY, run)
    manifests = []
    for spec in pool.specs:
        for w in spec.workloads:
            manifests.append(deployment(
                w.name, run, run, w.replicas, {"cpu": f"{w.cpu_m}m", "memory": f"{w.memory_mi}Mi"},
                {}, [run_toleration, _toleration(SLOT_KEY, w.node)]))  # fmt: skip
            pool.pods += w.replicas
    kube.apply(manifests)
    _wait(lambda: pool.pods_running() and _agents_run(pool), 600, "the cluster built")
    for name in pool.names:
        merge_patch(kube.api, NODES, name, {"spec": {"taints": [pool.run_taint()]}})
    return pool


def _agents_run(pool: Pool) -> bool:
    pods = _list(pool.kube.api, PODS, label_selector=AGENT_LABEL)
    running = {p["spec"].get("nodeName") for p in pods if (p.get("status") or {}).get("phase") == "Running"}
    return set(pool.names) <= running


def fill(pool: Pool, rooms: Mapping[str, float]) -> None:
    """Tight: a pinned filler on each node takes the CPU the plan does not move there."""
    run_toleration = _toleration(RUN_KEY, pool.run)
    manifests = []
    for node, room in sorted(rooms.items()):
        milli = int(room * 1000)
        if milli > 0:
            manifests.append(deployment(f"{node}-fill", pool.run, pool.run, 1, {"cpu": f"{milli}m"},
                                        {HOSTNAME: node}, [run_toleration]))  # fmt: skip
            pool.pods += 1
    if manifests:
        pool.kube.apply(manifests)
    _wait(pool.pods_running, 300, "the fillers")


def tear_down(pool: Pool) -> None:
    """The jobs, the namespace (its Deployments and pods) and the nodes go; not waited
    for: the pods left on a deleted node are the pod garbage collector's."""
    api = pool.kube.api
    for job in pool.jobs():
        api.request("DELETE", MIGRATION_JOBS.path(None, job["metadata"]["name"]))
    api.request("DELETE", NAMESPACES.path(None, pool.run))
    for name in pool.names:
        api.request("DELETE", NODES.path(None, name))


# -- the controller ---------------------------------------------------------------------------


@contextmanager
def controller(kube: Any, interval: float = INTERVAL) -> Iterator[Controller]:
    """The controller in this process, with its ServiceAccount's token, leading."""
    api = build_api(str(kube.controller_kubeconfig()), args=ClientArgs(pool_size=len(WATCHES) + 8),
                    access=controller_access())  # fmt: skip
    ctl = Controller(ControllerDeps(api, f"defrag-e2e-{time.monotonic_ns()}"), interval=interval)
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), name="controller", daemon=True)
    thread.start()
    try:
        if not _wait(lambda: ctl.is_leader() and ctl.synced and ctl.rounds > 0, 120, "the controller leading"):
            raise RuntimeError("the controller did not lead with synced caches")
        yield ctl
    finally:
        stop.set()
        thread.join(30)
        api.close()


def snapshot(ctl: Controller, pool: Pool) -> ObjectStore:
    """The controller's snapshot of the bench's nodes, once its cache shows them built."""
    names = set(pool.names)

    def pooled() -> ObjectStore:
        store = ctl.snapshot()
        nodes = {n: node for n, node in store.nodes.items() if n in names}
        return replace(store, nodes=nodes, pods=[p for p in store.pods if p.node_name in nodes])

    def caught_up() -> bool:
        store = pooled()
        ours = [p for p in store.pods if p.namespace == pool.run and p.phase == "Running"]
        slots = any(t.key == SLOT_KEY for n in store.nodes.values() for t in n.taints)
        return len(store.nodes) == len(names) and len(ours) == pool.pods and not slots

    _wait(caught_up, 120, "the controller's cache")
    return pooled()


def carry_out(strategy: str, ctl: Controller, store: ObjectStore, defrag: DefragPlan) -> None:
    if strategy == PLAIN:
        for mig in defrag.migrations:
            ctl.writer.evict(mig.pod)
        return
    acts = PlanActs(ctl.writer, ctl.metrics, ctl.log, lambda passed: 0)
    spec: dict[str, Any] = {"ttl": f"{TTL}s"}
    if strategy == DRAIN:
        spec["mode"] = m.EVICT_DIRECTLY
    acts.create_defrag_jobs(defrag, store, time.time(), **spec)


# -- where the replacements landed --------------------------------------------------------


@dataclass
class Landings:
    freed: int = 0
    moved: int = 0
    on_target: int = 0
    elsewhere: int = 0
    on_source: int = 0
    pending: int = 0
    placeholders_left: int = 0
    taints_left: int = 0
    rounds: int | str = "-"
    seconds: float = 0.0
    #: Pod key of each move -> where its replacement runs ("": Pending).
    where: dict[str, str] = field(default_factory=dict)
    preempted: int = 0
    timed_out: bool = False

    def cells(self) -> tuple[object, ...]:
        return (self.freed, self.moved, self.on_target, self.elsewhere, self.on_source,
                self.pending, self.placeholders_left, self.taints_left, self.rounds,
                f"{self.seconds:.1f}s" + ("!" if self.timed_out else ""))  # fmt: skip


def owner_of(pod: Pod) -> str:
    ctl = pod.controller
    return ctl.uid if ctl is not None else pod.key


def match(migrations: Sequence[Migration], landed: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Each moved pod's replacement, per workload: ``landed`` holds the nodes its new pods
    run on ("" for each Pending one); a move takes its target, else its source, else any."""
    out: dict[str, str] = {}
    by_owner: dict[str, list[Migration]] = {}
    for mig in migrations:
        by_owner.setdefault(owner_of(mig.pod), []).append(mig)
    for owner, migs in by_owner.items():
        left = Counter(landed.get(owner, ()))
        for pick in (lambda g: g.target, lambda g: g.source, None):
            for mig in migs:
                if mig.pod.key in out:
                    continue
                node = pick(mig) if pick is not None else next((n for n in sorted(left) if n and left[n]), "")
                if node and left[node] > 0:
                    left[node] -= 1
                    out[mig.pod.key] = node
        for mig in migs:
            out.setdefault(mig.pod.key, "")
    return out


def tally(moved: Sequence[Migration], landed: Mapping[str, Sequence[str]], freed: int) -> Landings:
    where = match(moved, landed)
    out = Landings(freed=freed, moved=len(moved), where=where)
    for mig in moved:
        node = where[mig.pod.key]
        if not node:
            out.pending += 1
        elif node == mig.target:
            out.on_target += 1
        elif node == mig.source:
            out.on_source += 1
        else:
            out.elsewhere += 1
    return out


def of_model(defrag: DefragPlan, outcome: Outcome, seconds: float) -> Landings:
    moved = [g for g in defrag.migrations if g.pod.key in outcome.where]
    landed: dict[str, list[str]] = {}
    for mig in moved:
        landed.setdefault(owner_of(mig.pod), []).append(outcome.where[mig.pod.key])
    out = tally(moved, landed, outcome.freed)
    out.placeholders_left, out.taints_left = outcome.placeholders_left, outcome.taints_left
    out.rounds, out.seconds = outcome.rounds, seconds
    return out


def of_cluster(defrag: DefragPlan, before: ObjectStore, after: ObjectStore) -> Landings:
    """From the cluster before and after: moved = planned pods gone; a replacement = a
    pod of the same ReplicaSet that was not there before."""
    old = {p.uid for p in before.pods}
    now = {p.uid: p for p in after.pods if not p.is_terminating}
    moved = [g for g in defrag.migrations if g.pod.uid not in now]
    landed: dict[str, list[str]] = {}
    for pod in now.values():
        if pod.uid not in old:
            landed.setdefault(owner_of(pod), []).append(pod.node_name if pod.phase == "Running" else "")
    by_node: dict[str, list[Pod]] = {}
    for pod in now.values():
        by_node.setdefault(pod.node_name, []).append(pod)
    freed = sum(all(stays(p) for p in by_node.get(n, ())) for n in defrag.freed_nodes)
    return tally(moved, landed, freed)


# -- one strategy, both ways ---------------------------------------------------------------


@dataclass
class Result:
    case: str
    strategy: str
    defrag: DefragPlan
    roles: Mapping[str, str]
    model: Landings
    real: Landings


@dataclass
class Laps:
    """How long each phase of a run took: a progress line on stderr."""

    label: str
    last: float = field(default_factory=time.monotonic)
    parts: list[str] = field(default_factory=list)

    def lap(self, what: str) -> None:
        now = time.monotonic()
        self.parts.append(f"{what} {now - self.last:.0f} s")
        self.last = now

    def tell(self) -> None:
        print(f"  {self.label}: {', '.join(self.parts)}", file=sys.stderr, flush=True)


def run_strategy(kube: Any, nodes: int, case: str, strategy: str, seed: int = SEED) -> Result:
    laps = Laps(f"{case} / {strategy}")
    pool = build(kube, nodes, seed, laps)
    laps.lap("built")
    try:
        with controller(kube) as ctl:
            store = snapshot(ctl, pool)
            defrag = plan(store, DefragArgs(), time.time())
            if case == "tight":
                fill(pool, tight_rooms(Snapshot.build(list(store.nodes.values()), bound_pods(store)), defrag))
                store = snapshot(ctl, pool)
            laps.lap("controller leading, planned")
            start = time.perf_counter()
            outcome = MODEL[strategy](Case(store, defrag))
            model = of_model(defrag, outcome, time.perf_counter() - start)
            real = execute(pool, ctl, strategy, store, defrag)
            laps.lap("carried out")
        roles = {n: "target" for n in (g.target for g in defrag.migrations)}
        roles.update({g.source: "source" for g in defrag.migrations})
        return Result(case, strategy, defrag, roles, model, real)
    finally:
        tear_down(pool)
        laps.lap("torn down")
        laps.tell()


def execute(pool: Pool, ctl: Controller, strategy: str, store: ObjectStore, defrag: DefragPlan) -> Landings:
    before, rounds, wall, start = pool.state(), ctl.rounds, time.time(), time.perf_counter()
    carry_out(strategy, ctl, store, defrag)

    def done() -> bool:
        if not pool.pods_settled():
            return False
        return all(j.get("status", {}).get("phase") in m.TERMINAL_PHASES for j in pool.jobs())

    settled = _wait(done, TTL + 240, f"{strategy}: the moves settled")
    seconds, ran = time.perf_counter() - start, ctl.rounds - rounds
    last = ctl.rounds  # the reconcile after the last job's end, and a spare round
    _wait(lambda: ctl.rounds >= last + 2, 60, "two more rounds")
    _wait(pool.pods_settled, 60, "the replacements settled after the taints went")
    out = of_cluster(defrag, before, pool.state())
    out.placeholders_left, out.taints_left = pool.leftovers()
    out.rounds = ran if strategy != PLAIN else "-"  # the controller takes no part
    out.seconds, out.timed_out = seconds, not settled
    out.preempted = pool.preempted(wall)
    return out


# -- the report -----------------------------------------------------------------------------


COLUMNS = ("freed", "moved", "target", "elsewhere", "source", "Pending", "placeholders",
           "taints", "rounds", "time")  # fmt: skip


def _row(name: str, run: str, cells: Sequence[object]) -> str:
    return f"    {name:<30} {run:<5}" + "".join(
        f" {c!s:>{len(h)}}" for c, h in zip(cells, COLUMNS, strict=True)
    )


def disagreement(result: Result) -> str:
    """Per workload, the landings one way and not the other, by role; and the spread."""
    model, real, roles = result.model.where, result.real.where, result.roles
    by_owner: dict[str, tuple[Counter[str], Counter[str]]] = {}
    for mig in result.defrag.migrations:
        pair = by_owner.setdefault(owner_of(mig.pod), (Counter(), Counter()))
        if mig.pod.key in model:
            pair[0][model[mig.pod.key]] += 1
        if mig.pod.key in real:
            pair[1][real[mig.pod.key]] += 1

    def role(node: str) -> str:
        return roles.get(node, "other") if node else "Pending"

    moves: Counter[str] = Counter()
    differ = same = 0
    spread: list[tuple[int, int]] = []
    for one, other in by_owner.values():
        same += sum((one & other).values())
        only_model = sorted(role(n) for n in (one - other).elements())
        only_real = sorted(role(n) for n in (other - one).elements())
        differ += max(len(only_model), len(only_real))
        for a, b in zip(only_model, only_real, strict=False):
            moves[f"{a}->{b}"] += 1
        if sum(one.values()) > 1 or sum(other.values()) > 1:
            spread.append((len([n for n in one if n]), len([n for n in other if n])))
    told = ", ".join(f"{k} {v}" for k, v in moves.most_common()) or "none"
    text = f"same node {same}, differ {differ} (model->real by role: {told})"
    if spread:
        avg = (sum(a for a, _ in spread) / len(spread), sum(b for _, b in spread) / len(spread))
        text += f"; nodes per workload moving 2+ pods: model {avg[0]:.1f}, real {avg[1]:.1f}"
    if result.real.preempted:
        text += f"; placeholders preempted by the real scheduler: {result.real.preempted}"
    return text


def _planned(defrag: DefragPlan) -> str:
    idle = len(set(defrag.freed_nodes) - {g.source for g in defrag.migrations})
    return (f"the plan moves {len(defrag.migrations)} pods to free {len(defrag.freed_nodes)} "
            f"of {len(defrag.source_nodes)} sources ({idle} with nothing to move)")  # fmt: skip


def report(results: Sequence[Result], out: Callable[[str], None] = print) -> None:
    for case in CASES:
        rows = [r for r in results if r.case == case]
        if not rows:
            continue
        out(f"  {case}: {_planned(rows[0].defrag)}")
        out(_row("strategy", "", COLUMNS))
        for r in rows:
            if _planned(r.defrag) != _planned(rows[0].defrag):  # a run's own plan
                out(f"    ({r.strategy}: {_planned(r.defrag)})")
            out(_row(r.strategy, "model", r.model.cells()))
            out(_row("", "real", r.real.cells()))
        out("  where they disagree:")
        for r in rows:
            out(f"    {r.strategy}: {disagreement(r)}")


def run(kube: Any, nodes: int, seed: int = SEED, cases: Sequence[str] = CASES,
        strategies: Sequence[str] = STRATEGIES, out: Callable[[str], None] = print) -> list[Result]:  # fmt: skip
    """Every strategy of every case on a fresh pool of ``kube``'s; the table printed."""
    specs = layout("x", nodes, seed)
    pods = sum(w.replicas for s in specs for w in s.workloads)
    kinds = Counter(s.kind for s in specs)
    out(f"cluster: {nodes} kwok nodes ({kinds['low']} sources, {kinds['band']} in the targets' "
        f"band, {kinds['normal']} others), {pods} pods in "
        f"{sum(len(s.workloads) for s in specs)} Deployments + {nodes} DaemonSet pods (seed {seed}); "
        f"controller round {INTERVAL:g} s, job ttl {TTL} s")  # fmt: skip
    results = []
    for case in cases:
        for strategy in strategies:
            results.append(run_strategy(kube, nodes, case, strategy, seed))
    report(results, out)
    return results


def main(nodes: int = DEFAULT_NODES) -> None:
    """Start a real cluster in a temporary folder, install deploy/, run, stop it."""
    from agent.logs import configure_logging
    from devtools.cluster.launcher import ClusterError
    from devtools.harness.cluster import launch

    configure_logging("console", "error")  # the controller's per-step lines would drown the table
    with tempfile.TemporaryDirectory(prefix="waterline-defrag-real-") as folder:
        start = time.monotonic()
        try:
            kube = launch(Path(folder))
        except ClusterError as err:
            raise NothingMeasured(str(err)) from err
        try:
            kube.install()
            print(f"real control plane up and deploy/ installed in {time.monotonic() - start:.0f} s")
            run(kube, nodes)
        finally:
            kube.close()
        print(f"total {time.monotonic() - start:.0f} s")


__all__ = ["DEFAULT_NODES", "Landings", "Result", "main", "run"]
