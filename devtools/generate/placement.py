"""Where the pods go. ``--pods`` is split first into the fixed parts (static pods,
DaemonSet pods, the new DaemonSet's pending pods, the queue backlog), shrunk to fit;
the rest fill the full nodes to the brim and the others toward their CPU target, in
proportion to it. Whatever finds no room waits unscheduled, so the totals are exact."""

from __future__ import annotations

from dataclasses import dataclass

from devtools.generate.model import (
    ALLOCATABLE_PODS,
    CPU_SIZES,
    DAEMONSETS,
    STATIC_PODS,
    Generator,
    Workload,
)
from devtools.generate.pods import pod_object
from devtools.generate.queues import pick_queue
from devtools.generate.workloads import new_workload, workload_for

BACKLOG_FRACTION = 0.05  # pending queue pods, of --pods
BACKLOG_MAX_CPU = 32_000  # millicores of one pending queue pod
DAEMONSET_FRACTION = 0.15  # at most this share of --pods are DaemonSet pods


@dataclass(frozen=True, slots=True)
class Budget:
    """How many pods of each part, and where the fixed ones go."""

    control: list[int]  # control-plane nodes that get static pods
    daemonsets: tuple[tuple[str, str, int, int, int], ...]  # on every node
    backlog: int  # pending queue pods
    full_nodes: list[int]
    ds_pending_nodes: list[int]  # full nodes where a new DaemonSet's pod waits
    regular: int  # workload pods placed on nodes


def plan_budget(g: Generator) -> Budget:
    pods, n_nodes = g.args.pods, len(g.nodes)
    budget = pods
    control = [i for i, p in enumerate(g.nodes) if p.kind == "control-plane"]
    static = min(budget, len(control) * len(STATIC_PODS)) // len(STATIC_PODS) * len(STATIC_PODS)
    budget -= static
    per_node = min(len(DAEMONSETS), int(pods * DAEMONSET_FRACTION) // n_nodes)
    backlog = min(budget - per_node * n_nodes, int(pods * BACKLOG_FRACTION)) if g.queues else 0
    backlog = max(0, backlog)
    budget -= per_node * n_nodes + backlog
    full_nodes = [i for i, p in enumerate(g.nodes) if p.kind == "full"]
    ds_pending_nodes = full_nodes[: max(0, min(len(full_nodes), budget // 20))] if per_node else []
    budget -= len(ds_pending_nodes)
    return Budget(
        control=control[: static // len(STATIC_PODS)],
        daemonsets=DAEMONSETS[:per_node],
        backlog=backlog,
        full_nodes=full_nodes,
        ds_pending_nodes=ds_pending_nodes,
        regular=budget,
    )


def fill_nodes(g: Generator, budget: Budget) -> None:
    """Full nodes first (as many pods as fit), then the rest in proportion to their
    target; what does not fit spills to the full nodes as BestEffort pods, then waits."""
    regular, full_nodes = budget.regular, budget.full_nodes
    placed_full = 0
    for i in full_nodes:
        if placed_full >= regular:
            break
        placed_full += fill_full(g, i, regular - placed_full)
    remaining = regular - placed_full
    others = [i for i, p in enumerate(g.nodes) if p.kind not in ("full", "control-plane")]
    carry = 0
    for i, count in zip(others, _shares(g, others, remaining), strict=True):
        want = count + carry
        carry = want - fill_node(g, i, want)
    if carry and full_nodes:  # no room left on the others: the full nodes take the rest
        for i in full_nodes:
            carry -= fill_best_effort(g, i, carry)
            if not carry:
                break
    while carry > 0:  # still no room anywhere: the rest waits unscheduled
        add_pending(g, workload_for(g, 0, "general", 100, False))
        carry -= 1


def _shares(g: Generator, others: list[int], remaining: int) -> list[int]:
    """``remaining`` pods split over ``others`` by CPU target (largest remainders first)."""
    weights = [max(1.0, g.nodes[i].alloc_cpu * (g.nodes[i].target or 30) / 100) for i in others]
    total_w = sum(weights) or 1.0
    counts = [int(remaining * w / total_w) for w in weights]
    leftover = remaining - sum(counts)
    order = sorted(
        range(len(others)), key=lambda j: -(remaining * weights[j] / total_w - counts[j])
    )
    for j in order[:leftover]:
        counts[j] += 1
    return counts


def add_pending(g: Generator, w: Workload) -> None:
    """One more pod of ``w``, waiting unscheduled."""
    w.pods += 1
    w.pending += 1
    g.writer.add(pod_object(g, w, None, w.pods - 1, pending=True))


def choose_cpu(g: Generator, budget: int, slots_left: int) -> int:
    desired = budget / max(1, slots_left) * g.rng.uniform(0.5, 1.7)
    if g.rng.random() < 0.06:
        return 0  # a BestEffort pod
    cpu = 0
    for size in CPU_SIZES:
        if size <= desired and size <= budget:
            cpu = size
    return cpu


def place(g: Generator, w: Workload, index: int) -> None:
    """Write one running pod of `w` on node `index` and account for it."""
    node = g.nodes[index]
    pod = pod_object(g, w, node, w.pods)
    w.pods += 1
    if w.anti_affinity:
        w.nodes.add(index)
    node.used_cpu += w.cpu
    node.used_mem += w.mem
    node.pods += 1
    g.writer.add(pod)
    meta = pod["metadata"]
    g.placed.append((meta["namespace"], meta["name"], index, w.kind, w.uid))


def fill_node(g: Generator, index: int, count: int) -> int:
    """Place up to `count` pods on a node toward its CPU target; returns how many."""
    node = g.nodes[index]
    slots = max(0, min(count, ALLOCATABLE_PODS - node.pods))
    if node.kind == "gpu":
        slots = min(slots, 8)
    gpu = node.kind == "gpu"
    for placed in range(slots):
        cpu_budget = int(node.alloc_cpu * node.target / 100) - node.used_cpu
        cpu = choose_cpu(g, cpu_budget, slots - placed)
        w = workload_for(g, index, node.pool, cpu, gpu)
        if w.mem > node.alloc_mem - node.used_mem:
            w = workload_for(g, index, node.pool, 0, gpu)
        place(g, w, index)
    return slots


def fill_full(g: Generator, index: int, limit: int) -> int:
    """Fill a node until less than the smallest request size is left (at most `limit`
    pods): big pods first, then smaller ones, as a scheduler packing it would."""
    node = g.nodes[index]
    placed = 0
    while placed < limit and node.pods < ALLOCATABLE_PODS:
        free = node.alloc_cpu - node.used_cpu
        if free < CPU_SIZES[0]:
            break
        want = free // 3 if placed < 6 else free
        cpu = max(s for s in CPU_SIZES if s <= max(CPU_SIZES[0], want))
        w = workload_for(g, index, node.pool, cpu, False)
        if w.mem > node.alloc_mem - node.used_mem:
            break
        place(g, w, index)
        placed += 1
    return placed


def fill_best_effort(g: Generator, index: int, count: int) -> int:
    """Up to `count` BestEffort pods (only when the counts leave no other room)."""
    node = g.nodes[index]
    placed = 0
    while placed < count and node.pods < ALLOCATABLE_PODS:
        place(g, workload_for(g, index, node.pool, 0, False), index)
        placed += 1
    return placed


@dataclass(frozen=True, slots=True)
class Capacity:
    """Millicores: allocatable on ready nodes, free on schedulable ones, held by queue pods."""

    total: int
    free: int
    queue_running: int

    @classmethod
    def of(cls, g: Generator) -> Capacity:
        return cls(
            total=sum(p.alloc_cpu for p in g.nodes if p.ready),
            free=sum(
                max(0, p.alloc_cpu - p.used_cpu) for p in g.nodes if p.ready and not p.cordoned
            ),
            queue_running=sum(w.cpu * (w.pods - w.pending) for w in g.workloads if w.queue),
        )


def place_backlog(g: Generator, backlog: int, capacity: Capacity) -> int:
    """The queue backlog: big pending pods of batch Jobs, mostly in the starving queues;
    returns the CPU of one. Sized to exceed the free capacity a little, so the starving
    queues need more than is free and preemption has to pick victims (the Queue objects
    hold the other half of that)."""
    if not backlog:
        return 0
    per_pod = (capacity.free + 0.015 * capacity.total) / backlog
    # Whole half-cores, at most half of the largest node (training pods are big).
    pod_cpu = min(BACKLOG_MAX_CPU, max(1000, -(-int(per_pod) // 500) * 500))
    jobs: list[Workload] = []
    for _ in range(backlog):
        if not jobs or jobs[-1].pending >= jobs[-1].target_replicas:
            jobs.append(_training_job(g, pod_cpu))
        add_pending(g, jobs[-1])
    return pod_cpu


def _training_job(g: Generator, pod_cpu: int) -> Workload:
    w = new_workload(g, "batch", pod_cpu, False)
    w.kind, w.rs_name, w.mem = "Job", "", pod_cpu * 1024 // 1000  # 1 GiB a core
    w.name = f"train-{len(g.workloads):05d}"
    w.queue = pick_queue(g, (("starving", 0.9), ("steady", 0.1)))
    w.target_replicas = g.rng.choice((4, 8, 16, 32, 64))
    w.created = g.now - g.rng.uniform(600, 6 * 3600)
    return w
