"""Defragmentation: empty the least-used nodes by moving their pods onto the fullest ones.

Utilization of a node = sum of the requests of its active pods / allocatable, in percent,
of one resource (``resourceType``: cpu, memory, or an extended resource such as
nvidia.com/gpu). The plan is a list of ``<pod, source node, target node>`` triplets:

* Acts only when there are more source nodes than ``numberOfNodes`` (as the descheduler's
  HighNodeUtilization does: a gate, not a cap).
* Sources: utilization below ``lowThresholds``, least used first (then by name); never
  nodes labelled ``critical=true``, never nodes whose ``qos.waterline.io/last-defrag-time``
  annotation is younger than ``coolDownTime`` (an unreadable annotation counts as young:
  we would rather skip a node than churn it), and never nodes that hold an Available
  reservation (that capacity is promised to an incoming pod, so the node will not empty).
* Targets: utilization in (``defragmentThresholds``, ``protectionThresholds``), fullest
  first (then by name); never sources, cordoned or NotReady nodes.
* Pods of a source, largest request first (then namespace/name): DaemonSet pods, mirror
  pods and pods already terminating stay and do not keep the node from being freed; every
  other pod must be migratable (a controller owner that is not a DaemonSet, not a mirror
  pod, not annotated protected, namespace allowed by ``evictableNamespaces``) and must
  find a target that passes every placement check (agent/cluster/placement.py, with the
  protection threshold) -- otherwise nothing moves off that source.
* The snapshot is updated as the plan grows: a target's utilization, pods, pod count and
  reservations include what was planned onto it, and the target order follows it.
* Nodes with no allocatable of the resource take no part (neither source nor target) and
  are left out of the utilization report.
* A source with nothing that must move (empty, or only DaemonSet/mirror pods) counts as
  freed: after the plan it can be drained and removed like the others.

The plan also reports, for the resource, the cluster's *fragmentation* before and after:
the share (0..1) of free capacity, over Ready and schedulable nodes, that sits on nodes
whose free capacity is smaller than the median pod request (median over active pods that
request the resource). Free capacity excludes what reservations hold.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.cluster.placement import EPSILON, NodeState, Snapshot, why_not
from agent.cluster.reservation import KIND as RESERVATION_KIND
from agent.cluster.reservation import Hold, holds_by_node, parse_duration, parse_reservations
from agent.errors import InvalidObject
from agent.model.objects import Node, Pod
from agent.model.timeutil import parse_time
from agent.scenario import Scenario

ARGS_KIND = "DefragmentationArgs"
ARGS_NAME = "config.defrag"
CRITICAL_LABEL = "critical"
LAST_DEFRAG_ANNOTATION = "qos.waterline.io/last-defrag-time"
_NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_FIELDS = frozenset(
    {
        "resourceType",
        "lowThresholds",
        "defragmentThresholds",
        "protectionThresholds",
        "numberOfNodes",
        "coolDownTime",
        "evictableNamespaces",
    }
)


@dataclass(frozen=True, slots=True)
class DefragArgs:
    resource_type: str = "cpu"
    low_threshold: float = 30.0
    defragment_threshold: float = 70.0
    protection_threshold: float = 90.0
    number_of_nodes: int = 0
    cool_down_seconds: float = 0.0
    include_namespaces: tuple[str, ...] | None = None
    exclude_namespaces: tuple[str, ...] = ("kube-system",)

    def namespace_allowed(self, namespace: str) -> bool:
        if self.include_namespaces is not None:
            return namespace in self.include_namespaces
        return namespace not in self.exclude_namespaces


def _bad(fieldname: str, message: str) -> InvalidObject:
    return InvalidObject(ARGS_KIND, ARGS_NAME, fieldname, message)


def _percent(raw: Mapping[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise _bad(key, f"must be a number (percent), got {value!r}")
    if not 0 <= value <= 100:
        raise _bad(key, f"must be between 0 and 100, got {value!r}")
    return float(value)


def _valid_resource_name(name: str) -> bool:
    if name in _NATIVE_RESOURCES or name.startswith("hugepages-"):
        return True
    domain, slash, rest = name.partition("/")
    return bool(slash and domain and rest and "." in domain and "/" not in rest)


def _namespaces(raw: object, key: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        raise _bad(f"evictableNamespaces.{key}", f"must be a list of namespace names, got {raw!r}")
    return tuple(raw)


def parse_args(raw: Mapping[str, Any] | None) -> DefragArgs:
    """DefragArgs from the ``config.defrag`` section, with SIMULATE.md's defaults; raises
    InvalidObject naming the bad field."""
    raw = raw or {}
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise _bad(unknown[0], f"unknown field (known: {sorted(_FIELDS)})")
    resource = raw.get("resourceType", "cpu")
    if not isinstance(resource, str) or not _valid_resource_name(resource):
        raise _bad(
            "resourceType",
            f"must be cpu, memory, ephemeral-storage, hugepages-* or an extended resource "
            f"such as nvidia.com/gpu, got {resource!r}",
        )
    low = _percent(raw, "lowThresholds", 30.0)
    defrag = _percent(raw, "defragmentThresholds", 70.0)
    protection = _percent(raw, "protectionThresholds", 90.0)
    count = raw.get("numberOfNodes", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise _bad("numberOfNodes", f"must be an integer >= 0, got {count!r}")
    try:
        cool = parse_duration(raw.get("coolDownTime", 0))
    except ValueError as err:
        raise _bad("coolDownTime", f"must be a duration in seconds >= 0 ({err})") from None
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ("kube-system",)
    if "evictableNamespaces" in raw:
        ens = raw["evictableNamespaces"] or {}
        if not isinstance(ens, dict):
            raise _bad("evictableNamespaces", "must be a mapping with include or exclude")
        extra = sorted(set(ens) - {"include", "exclude"})
        if extra:
            raise _bad(f"evictableNamespaces.{extra[0]}", "unknown field (known: include, exclude)")
        if "include" in ens and "exclude" in ens:
            raise _bad("evictableNamespaces", "include and exclude are mutually exclusive")
        exclude = ()
        if "include" in ens:
            include = _namespaces(ens["include"], "include")
        elif "exclude" in ens:
            exclude = _namespaces(ens["exclude"], "exclude")
    args = DefragArgs(resource, low, defrag, protection, count, cool, include, exclude)
    validate(args)
    return args


def validate(args: DefragArgs) -> None:
    """Cross-field rules: sources sit below targets, targets below protection."""
    if args.low_threshold > args.defragment_threshold:
        raise _bad(
            "lowThresholds",
            f"must be <= defragmentThresholds ({args.defragment_threshold:g}), got {args.low_threshold:g}",
        )
    if args.defragment_threshold >= args.protection_threshold:
        raise _bad(
            "defragmentThresholds",
            f"must be < protectionThresholds ({args.protection_threshold:g}), "
            f"got {args.defragment_threshold:g}",
        )


# -- the plan ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Migration:
    pod: Pod
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class DefragPlan:
    migrations: tuple[Migration, ...] = ()
    source_nodes: tuple[str, ...] = ()
    freed_nodes: tuple[str, ...] = ()
    #: Whether there were more sources than numberOfNodes (else nothing was planned).
    acted: bool = False
    #: Nodes below lowThresholds left out, and sources not freed: node -> reason.
    skipped: Mapping[str, str] = field(default_factory=dict)
    utilization_before: Mapping[str, float] = field(default_factory=dict)
    utilization_after: Mapping[str, float] = field(default_factory=dict)
    fragmentation_before: float = 0.0
    fragmentation_after: float = 0.0


def stays(pod: Pod) -> bool:
    """Pods that stay on a freed node without keeping it from being freed."""
    return pod.is_daemonset or pod.is_mirror or pod.is_terminating


def migratable(pod: Pod, args: DefragArgs) -> bool:
    ctl = pod.controller
    return (
        ctl is not None
        and ctl.kind != "DaemonSet"
        and not pod.is_mirror
        and not pod.is_protected
        and args.namespace_allowed(pod.namespace)
    )


def _cooling(node: Node, now: float, cool_down: float) -> bool:
    if cool_down <= 0:
        return False
    text = node.annotations.get(LAST_DEFRAG_ANNOTATION)
    if not text:
        return False
    try:
        last = parse_time(text)
    except ValueError:
        return True
    return last is not None and now - last < cool_down


# Orderings, primary key first.
SOURCE_ORDER: Sequence[Callable[[NodeState, str], Any]] = (
    lambda s, r: s.utilization(r),  # least used first
    lambda s, r: s.name,
)
POD_ORDER: Sequence[Callable[[Pod, str], Any]] = (
    lambda p, r: -p.request(r),  # largest request of the resource first
    lambda p, r: p.key,
)


def _key(order: Sequence[Callable[[Any, str], Any]], item: Any, resource: str) -> tuple[Any, ...]:
    return tuple(f(item, resource) for f in order)


class _Targets:
    """The target set, fullest first (then name), kept sorted as utilizations change.

    Keys live in consecutive blocks that each know the largest headroom (protection limit
    minus used, of the resource) among their nodes, so a pod skips whole blocks of full
    nodes: a plan over thousands of targets does not test every node for every pod.
    """

    BLOCK = 48

    def __init__(self, states: Iterable[NodeState], args: DefragArgs) -> None:
        self.args = args
        self.resource = args.resource_type
        self.states: dict[str, NodeState] = {}
        self.limit: dict[str, float] = {}
        #: Headroom of each filed node as of its last filing (update() keeps it current).
        self.head: dict[str, float] = {}
        keys: list[tuple[float, str]] = []
        for state in states:
            total = state.allocatable(self.resource)
            self.states[state.name] = state
            # The protection limit with the float slack of the per-node check folded in.
            self.limit[state.name] = total * args.protection_threshold / 100.0 + EPSILON * max(
                1.0, total
            )
            key = self.key_of(state)
            if key is not None:
                keys.append(key)
                self.head[state.name] = self._headroom(state.name)
        keys.sort()
        size = self.BLOCK
        self.blocks: list[list[tuple[float, str]]] = [
            keys[i : i + size] for i in range(0, len(keys), size)
        ]
        self.firsts = [b[0] for b in self.blocks]
        self.maxes = [self._max(b) for b in self.blocks]

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)

    def names(self) -> list[str]:
        return [name for block in self.blocks for _, name in block]

    def key_of(self, state: NodeState) -> tuple[float, str] | None:
        util = state.utilization(self.resource)
        inside = self.args.defragment_threshold < util < self.args.protection_threshold
        return (-util, state.name) if inside else None

    def _headroom(self, name: str) -> float:
        return self.limit[name] - self.states[name].used.get(self.resource, 0.0)

    def _max(self, block: list[tuple[float, str]]) -> float:
        head = self.head
        return max([head[name] for _, name in block])

    def _block_of(self, key: tuple[float, str]) -> int:
        return max(0, bisect.bisect_right(self.firsts, key) - 1)

    def _remove(self, key: tuple[float, str]) -> None:
        if not self.blocks:
            return
        i = self._block_of(key)
        block = self.blocks[i]
        j = bisect.bisect_left(block, key)
        if j == len(block) or block[j] != key:
            return
        del block[j]
        room = self.head.pop(key[1])
        if block:
            self.firsts[i] = block[0]
            if room >= self.maxes[i]:
                self.maxes[i] = self._max(block)
        else:
            del self.blocks[i], self.firsts[i], self.maxes[i]

    def _add(self, key: tuple[float, str]) -> None:
        room = self.head[key[1]] = self._headroom(key[1])
        if not self.blocks:
            self.blocks, self.firsts, self.maxes = [[key]], [key], [room]
            return
        i = self._block_of(key)
        block = self.blocks[i]
        bisect.insort(block, key)
        if len(block) > 2 * self.BLOCK:
            half = len(block) // 2
            self.blocks[i : i + 1] = [block[:half], block[half:]]
            self.firsts[i : i + 1] = [block[0], block[half]]
            self.maxes[i : i + 1] = [self._max(block[:half]), self._max(block[half:])]
        else:
            self.firsts[i] = block[0]
            self.maxes[i] = max(self.maxes[i], room)

    def update(self, state: NodeState, old_key: tuple[float, str] | None) -> None:
        """Re-file a node whose usage changed (``old_key`` = its key before)."""
        if old_key is not None:
            self._remove(old_key)
        key = self.key_of(state)
        if key is not None:
            self._add(key)

    def find(self, pod: Pod) -> NodeState | None:
        """The first target, in order, that passes every placement check."""
        need = pod.request(self.resource)
        threshold = (self.resource, self.args.protection_threshold)
        head = self.head
        for block, best in zip(self.blocks, self.maxes, strict=True):
            if need > best:
                continue
            for _, name in block:
                if need > head[name]:  # necessary; reservations only add to it
                    continue
                state = self.states[name]
                if why_not(pod, state, threshold) is None:
                    return state
        return None


def plan_defrag(
    nodes: Iterable[Node],
    pods_by_node: Mapping[str, Sequence[Pod]],
    args: DefragArgs,
    now: float,
    holds: Mapping[str, list[Hold]] | None = None,
) -> DefragPlan:
    """Plan the migrations. Pure: the inputs are not changed."""
    resource = args.resource_type
    node_list = sorted(nodes, key=lambda n: n.name)
    copied_holds = {
        name: [Hold(h.reservation, dict(h.remaining)) for h in hs]
        for name, hs in (holds or {}).items()
    }
    snapshot = Snapshot.build(
        node_list, (p for n in node_list for p in pods_by_node.get(n.name, ())), copied_holds
    )
    states = [snapshot[n.name] for n in node_list if n.allocatable.get(resource, 0.0) > 0]
    before = {s.name: s.utilization(resource) for s in states}
    frag_before = fragmentation(states, resource)

    skipped: dict[str, str] = {}
    sources: list[NodeState] = []
    for state in states:
        if before[state.name] >= args.low_threshold:
            continue
        node = state.node
        if node.labels.get(CRITICAL_LABEL) == "true":
            skipped[state.name] = "Critical"
        elif _cooling(node, now, args.cool_down_seconds):
            skipped[state.name] = "CoolingDown"
        elif state.holds:
            skipped[state.name] = "HoldsReservation"
        else:
            sources.append(state)
    sources.sort(key=lambda s: _key(SOURCE_ORDER, s, resource))
    source_names = {s.name for s in sources}
    acted = len(sources) > args.number_of_nodes

    migrations: list[Migration] = []
    freed: list[str] = []
    if acted:
        targets = _Targets(
            (
                s
                for s in states
                if s.name not in source_names and s.node.ready and not s.node.unschedulable
            ),
            args,
        )
        all_holds = [h for hs in copied_holds.values() for h in hs]
        planner = _Planner(
            snapshot,
            targets,
            args,
            lambda pod: any(h.reservation.owns(pod) for h in all_holds),
        )
        for source in sources:
            moved, reason = planner.drain(source)
            if reason is not None:
                skipped[source.name] = reason
                continue
            migrations.extend(moved)
            freed.append(source.name)

    after = {s.name: s.utilization(resource) for s in states}
    return DefragPlan(
        migrations=tuple(migrations),
        source_nodes=tuple(s.name for s in sources),
        freed_nodes=tuple(freed),
        acted=acted,
        skipped=skipped,
        utilization_before=before,
        utilization_after=after,
        fragmentation_before=frag_before,
        fragmentation_after=fragmentation(states, resource),
    )


def _signature(pod: Pod, resource: str) -> tuple[Any, ...]:
    """Everything the placement checks read from a pod except its name, uid and its
    request of ``resource``: two pods with one signature fit the same targets, the larger
    one no more often."""
    return (
        pod.namespace,
        tuple(sorted(pod.labels.items())),
        tuple(sorted((r, q) for r, q in pod.requests.items() if r != resource)),
        tuple(sorted(pod.node_selector.items())),
        pod.node_affinity,
        pod.anti_affinity,
        pod.tolerations,
    )


@dataclass(slots=True)
class _Planner:
    """One planning pass: the snapshot, the targets and what is known not to fit.

    Committed plan states only ever get fuller (targets gain pods and lose headroom, the
    target set shrinks), so a pod shape that found no target in a committed state never
    will later; ``unplaceable`` keeps the smallest such request per signature so that the
    many sources holding a replica of an unplaceable pod are rejected without a scan.
    """

    snapshot: Snapshot
    targets: _Targets
    args: DefragArgs
    reservation_owners: Callable[[Pod], bool]
    unplaceable: dict[tuple[Any, ...], float] = field(default_factory=dict)

    def _known_unplaceable(self, pod: Pod, sig: tuple[Any, ...] | None) -> bool:
        if sig is None or sig not in self.unplaceable:
            return False
        return pod.request(self.args.resource_type) >= self.unplaceable[sig]

    def _remember(self, pod: Pod, sig: tuple[Any, ...] | None) -> None:
        if sig is not None:
            need = pod.request(self.args.resource_type)
            self.unplaceable[sig] = min(need, self.unplaceable.get(sig, need))

    def drain(self, source: NodeState) -> tuple[list[Migration], str | None]:
        """Place every pod that must leave ``source``, or nothing: on the first pod that
        cannot move, undo this source's placements and say why."""
        args, targets, snapshot = self.args, self.targets, self.snapshot
        resource = args.resource_type
        movers = [p for p in source.pods if not stays(p)]
        for pod in movers:
            if not migratable(pod, args):
                return [], f"NotMigratable {pod.key}"
        movers.sort(key=lambda p: _key(POD_ORDER, p, resource))
        sigs = [None if self.reservation_owners(p) else _signature(p, resource) for p in movers]
        for pod, sig in zip(movers, sigs, strict=True):
            if self._known_unplaceable(pod, sig):
                return [], f"NoTarget {pod.key}"
        placed: list[tuple[Pod, NodeState, list[tuple[Hold, dict[str, float]]]]] = []
        for pod, sig in zip(movers, sigs, strict=True):
            target = targets.find(pod)
            if target is None:
                for done, state, taken in reversed(placed):
                    old = targets.key_of(state)
                    snapshot.remove(done, state.name, taken)
                    targets.update(state, old)
                # Back at a committed state: learn whether the pod fits there at all.
                if not placed or targets.find(pod) is None:
                    self._remember(pod, sig)
                return [], f"NoTarget {pod.key}"
            old = targets.key_of(target)
            taken = snapshot.place(pod, target.name)
            targets.update(target, old)
            placed.append((pod, target, taken))
        for pod in movers:
            snapshot.remove(pod, source.name)
        return [Migration(pod, source.name, state.name) for pod, state, _ in placed], None


def fragmentation(states: Iterable[NodeState], resource: str) -> float:
    """Share of free capacity on Ready, schedulable nodes that sits on nodes whose free
    capacity is smaller than the median pod request of the resource."""
    states = [s for s in states if s.node.ready and not s.node.unschedulable]
    sizes = [q for s in states for p in s.pods if (q := p.request(resource)) > 0]
    if not sizes:
        return 0.0
    median = statistics.median(sizes)
    free_total = stranded = 0.0
    for s in states:
        held = sum(h.remaining.get(resource, 0.0) for h in s.holds)
        free = max(0.0, s.allocatable(resource) - s.used.get(resource, 0.0) - held)
        free_total += free
        if free + EPSILON < median:
            stranded += free
    return stranded / free_total if free_total > 0 else 0.0


# -- simulate ----------------------------------------------------------------------------


def _round(value: float) -> float:
    return round(value, 4) + 0.0


def report(plan: DefragPlan) -> dict[str, Any]:
    return {
        "migrations": [
            {"pod": m.pod.key, "source": m.source, "target": m.target} for m in plan.migrations
        ],
        "sourceNodes": list(plan.source_nodes),
        "freedNodes": list(plan.freed_nodes),
        "acted": plan.acted,
        "skipped": dict(sorted(plan.skipped.items())),
        "utilization": {
            "before": {n: _round(u) for n, u in plan.utilization_before.items()},
            "after": {n: _round(u) for n, u in plan.utilization_after.items()},
        },
        "fragmentation": {
            "before": _round(plan.fragmentation_before),
            "after": _round(plan.fragmentation_after),
        },
    }


def simulate_section(scenario: Scenario) -> dict[str, Any] | None:
    """The `defrag` report section; None when the scenario has no ``config.defrag``.

    Beyond SIMULATE.md's keys: ``acted`` (false when numberOfNodes gated the plan),
    ``skipped`` (node -> why it was not a source or was not freed: Critical, CoolingDown,
    HoldsReservation, ``NotMigratable ns/pod``, ``NoTarget ns/pod``) and
    ``fragmentation`` {before, after} as a share in 0..1."""
    raw = scenario.config_section("defrag")
    if raw is None:
        return None
    args = parse_args(raw)
    store = scenario.store
    reservations = parse_reservations(store.raw.get(RESERVATION_KIND, []))
    plan = plan_defrag(
        store.nodes.values(),
        store.pods_by_node(),
        args,
        scenario.now,
        holds_by_node(reservations, scenario.now),
    )
    return report(plan)
