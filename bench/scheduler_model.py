"""A model of the stock kube-scheduler's default profile, enough to see where evicted pods'
replacements land (``bench.defrag_e2e``).

Per pod, as ``schedulePod`` does:

* **Filters**: NodeUnschedulable and the not-ready taint (cordoned and NotReady nodes are
  out), NodeResourcesFit (every requested resource and the pod count fit what is bound),
  TaintToleration (NoSchedule/NoExecute), NodeAffinity (nodeSelector and the required
  node affinity), InterPodAffinity for required anti-affinity on
  ``kubernetes.io/hostname`` in both directions. These are ``agent.cluster.placement``'s
  checks, which are written after the scheduler's filters.
* **How many nodes it looks at**: ``percentageOfNodesToScore`` adaptive default: it stops
  after finding ``max(100, N x (50 - N/125)%)`` feasible nodes (at least 5%), starting
  where the previous pod's search stopped (``nextStartNodeIndex``), nodes in name order.
* **Scores** (integers 0..100, as the plugins compute them), weights 1 and 1:
  NodeResourcesFit ``LeastAllocated`` over cpu and memory (weight 1 each) on the
  *non-zero* requests (a container without a cpu request counts 100m, without a memory
  request 200Mi), and NodeResourcesBalancedAllocation: ``(1 - std) x 100`` of the cpu
  and memory requested fractions (actual requests, capped at 1). Highest total wins;
  ties go to the node name that sorts first.

Where the model is simpler than the real scheduler:

* the other default scores are left out: TaintToleration (PreferNoSchedule, weight 3),
  NodeAffinity preferred terms (2), PodTopologySpread's system default spreading (2),
  InterPodAffinity preferred terms (2), ImageLocality (1); so are the zone topology of the
  node tree and pod topology spread constraints;
* ties are broken by name, not at random (the real scheduler samples among the best);
* one pod at a time, with no binding latency and no scheduler cache lag; there is no
  preemption (PostFilter): a pod that fits nowhere waits and is tried again later;
* pods are retried in priority order, then in the order they were created (the active
  queue's PrioritySort), with no backoff;
* init containers and pod overhead count in the requests as the API computes them; the
  non-zero defaults apply per pod, not per container, when a pod requests no cpu or
  memory at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.cluster.placement import NodeState, Snapshot, why_not
from agent.model.objects import Node, Pod

MAX_SCORE = 100
DEFAULT_CPU = 0.1  # cores: a container without a cpu request, for scoring
DEFAULT_MEMORY = 200.0 * 1024 * 1024  # bytes: without a memory request
MIN_FEASIBLE = 100
MIN_PERCENTAGE = 5


def feasible_to_find(nodes: int) -> int:
    """percentageOfNodesToScore, adaptive (kube-scheduler's numFeasibleNodesToFind)."""
    if nodes < MIN_FEASIBLE:
        return nodes
    percentage = max(MIN_PERCENTAGE, 50 - nodes // 125)
    return max(MIN_FEASIBLE, nodes * percentage // 100)


def nonzero(pod: Pod) -> tuple[float, float]:
    """The (cpu, memory) requests the scoring plugins count for a pod."""
    cpu, memory = pod.request("cpu"), pod.request("memory")
    return (cpu if cpu > 0 else DEFAULT_CPU, memory if memory > 0 else DEFAULT_MEMORY)


@dataclass(slots=True)
class SchedulerModel:
    """Binds pods to the nodes of a placement ``Snapshot`` as the scheduler would."""

    snapshot: Snapshot
    #: Nodes that take no new pods (cordoned, NotReady).
    closed: frozenset[str] = frozenset()
    order: list[str] = field(default_factory=list)
    #: Non-zero requested (cpu, memory) per node, for LeastAllocated.
    scored: dict[str, list[float]] = field(default_factory=dict)
    start: int = 0

    @classmethod
    def over(cls, nodes: Iterable[Node], pods: Iterable[Pod]) -> SchedulerModel:
        node_list = sorted(nodes, key=lambda n: n.name)
        snapshot = Snapshot.build(node_list, pods)
        closed = frozenset(n.name for n in node_list if n.unschedulable or not n.ready)
        model = cls(snapshot, closed, [n.name for n in node_list])
        for state in snapshot.states.values():
            totals = [0.0, 0.0]
            for pod in state.pods:
                cpu, memory = nonzero(pod)
                totals[0] += cpu
                totals[1] += memory
            model.scored[state.name] = totals
        return model

    # -- binding ---------------------------------------------------------------------------
    def bind(self, pod: Pod, node: str) -> None:
        self.snapshot.place(pod, node)
        cpu, memory = nonzero(pod)
        totals = self.scored[node]
        totals[0] += cpu
        totals[1] += memory

    def unbind(self, pod: Pod, node: str) -> None:
        self.snapshot.remove(pod, node)
        cpu, memory = nonzero(pod)
        totals = self.scored[node]
        totals[0] -= cpu
        totals[1] -= memory

    def fits(self, pod: Pod, node: str) -> bool:
        """The filters alone (a pod bound by name still passes the kubelet's admission,
        which checks the same resources, selectors and NoExecute taints)."""
        return node not in self.closed and why_not(pod, self.snapshot[node]) is None

    # -- scheduling ---------------------------------------------------------------------------
    def schedule(self, pod: Pod) -> str | None:
        """The node the scheduler binds ``pod`` to (bound here too), or None (it waits)."""
        order, states = self.order, self.snapshot.states
        total = len(order)
        wanted = feasible_to_find(total)
        best: tuple[int, str] | None = None
        found = processed = 0
        for i in range(total):
            name = order[(self.start + i) % total]
            processed += 1
            if name in self.closed or why_not(pod, states[name]) is not None:
                continue
            found += 1
            score = self._score(pod, states[name])
            if best is None or score > best[0] or (score == best[0] and name < best[1]):
                best = (score, name)
            if found >= wanted:
                break
        self.start = (self.start + processed) % total if total else 0
        if best is None:
            return None
        self.bind(pod, best[1])
        return best[1]

    def _score(self, pod: Pod, state: NodeState) -> int:
        alloc = state.node.allocatable
        cpu_alloc, mem_alloc = alloc.get("cpu", 0.0), alloc.get("memory", 0.0)
        pod_cpu, pod_mem = nonzero(pod)
        totals = self.scored[state.name]
        least = (
            _least(totals[0] + pod_cpu, cpu_alloc) + _least(totals[1] + pod_mem, mem_alloc)
        ) // 2
        cpu_share = _share(state.used.get("cpu", 0.0) + pod.request("cpu"), cpu_alloc)
        mem_share = _share(state.used.get("memory", 0.0) + pod.request("memory"), mem_alloc)
        balanced = int((1.0 - abs(cpu_share - mem_share) / 2.0) * MAX_SCORE)
        return least + balanced


def _least(requested: float, allocatable: float) -> int:
    """LeastAllocated for one resource: free share of allocatable, in 0..100 (integer)."""
    if allocatable <= 0 or requested > allocatable:
        return 0
    return int((allocatable - requested) * MAX_SCORE // allocatable)


def _share(requested: float, allocatable: float) -> float:
    return min(1.0, requested / allocatable) if allocatable > 0 else 1.0
