"""Defragmentation end to end: how many nodes a plan frees once a stock kube-scheduler has
placed the replacements (issue 13).

On a generated cluster (``python -m devtools generate``: N nodes, 30 pods a node, cached under
/tmp) the defrag engine plans once; then the plan is carried out against
``bench.scheduler_model`` (the default kube-scheduler profile) with the workload
controllers recreating every evicted pod at once, in four ways, side by side:

* **plan**: the nodes the plan meant to free;
* **plain eviction**, what a descheduler does: every planned pod evicted in one pass, the
  replacements scheduled as they come;
* **drain taints**: the controller's pace (below), EvictDirectly, and the sources tainted
  ``qos.waterline.io/draining:NoSchedule`` as the controller does it
  (``agent/cluster/migrator/cleanup.py``): every source of the plan (those with nothing
  to move too) from the plan's first eviction; a failed drain's taint lifted when it
  ends, a freed node's when the plan's drains have all ended; and, to show why, "per
  node": each source with pods to move tainted from its own first eviction and lifted
  when its own drain ends;
* **drain taints + placeholders**: ReservationFirst: before each eviction a placeholder
  bound to the planned target (or, when that no longer fits, the least requested node
  that does, as the controller chooses) holds the room; the replacement is scheduled with
  the placeholder still there, and if it fits nowhere the placeholder goes (the controller
  deletes it when the replacement appears) and it is tried again.

For each: nodes freed (a planned source holding no pod that must move: DaemonSet and
mirror pods stay), replacements that landed on their planned target, replacements left
Pending (pods the move took down and could not bring back), rounds and time.

The controller's pace, as its defaults give it: one round a minute; at most 2 jobs of a
source in flight (maxMigratingPerNode) and 180 starts a round (processQueueQPS 3/s); a job
ends when its replacement is bound (or fails at its 5-minute TTL, its placeholder
removed, its replacement left Pending); a drain ends when its source has no job left, and
then its taint is lifted; pending replacements are tried again every round.

Where this is simpler than a cluster (besides the scheduler model's own list): everything
a round does happens at once and in order (placeholders start, evictions are immediate,
no graceful termination, no kubelet admission lag); no other pod arrives or leaves; the
generated cluster's pending pods (the queue backlog) are left out; the plan is made once,
not every round.

    python -m bench defrag-e2e                  # 1,000 nodes
    python -m bench defrag-e2e --nodes 5000     # (or WATERLINE_E2E_NODES=5000)
    python -m bench defrag-e2e --real           # on a real control plane, beside this model

``--real`` (``bench.defrag_real``) carries the same strategies out on a real
kube-apiserver, kube-scheduler and kube-controller-manager with kwok nodes, through the
controller's own code and ServiceAccount, and prints them beside this model run on the
same cluster: what "lands on a stock scheduler" means on the scheduler itself.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from agent.cluster.defrag import PLACEHOLDER_LABEL, DefragArgs, DefragPlan, Migration, plan, stays
from agent.cluster.migrator import DRAIN_TAINT_EFFECT, DRAIN_TAINT_KEY
from agent.cluster.placement import Snapshot
from agent.model.objects import Pod, Taint
from agent.model.store import ObjectStore
from agent.scenario import Scenario, load_scenario
from bench.flags import OneLine
from bench.scheduler_model import SchedulerModel
from devtools import generate as generator

NODES = int(os.environ.get("WATERLINE_E2E_NODES", "1000"))
PODS_PER_NODE, SEED = 30, 1
CACHE = Path(tempfile.gettempdir()) / "waterline-bench"
DRAIN_TAINT = Taint(DRAIN_TAINT_KEY, "", DRAIN_TAINT_EFFECT)
PER_NODE = 2  # maxMigratingPerNode
STARTS_PER_ROUND = 180  # processQueueQPS x interval
TTL_ROUNDS = 5  # the job's 5-minute TTL at one round a minute
MAX_ROUNDS = 1000


@dataclass
class Outcome:
    freed: int = 0
    #: Replacements bound to their own planned target, and to any planned target.
    on_target: int = 0
    on_a_target: int = 0
    pending: int = 0
    rounds: int = 1
    #: Where each evicted pod's replacement was bound, by the pod's key ("": Pending).
    where: dict[str, str] = field(default_factory=dict)
    #: Placeholder pods and drain taints still there at the end.
    placeholders_left: int = 0
    taints_left: int = 0

    def landed(self, node: str, mig: Migration, targets: frozenset[str]) -> None:
        self.on_target += node == mig.target
        self.on_a_target += node in targets
        self.where[mig.pod.key] = node

    def waits(self, mig: Migration) -> None:
        self.pending += 1
        self.where[mig.pod.key] = ""

    def left(self, model: SchedulerModel) -> None:
        states = model.snapshot.states.values()
        self.placeholders_left = sum(PLACEHOLDER_LABEL in p.labels for s in states for p in s.pods)
        self.taints_left = sum(any(t.key == DRAIN_TAINT_KEY for t in s.node.taints) for s in states)


@dataclass
class Move:
    mig: Migration
    replacement: Pod
    placeholder: Pod | None = None
    placeholder_node: str = ""
    node: str = ""  # where the replacement was bound
    started: int = 0


@dataclass
class Drain:
    source: str
    todo: deque[Migration]
    running: list[Move] = field(default_factory=list)


# -- the cluster ----------------------------------------------------------------------------


def scenario_path(nodes: int) -> Path:
    """The generated cluster, cached (keyed by the generator's source)."""
    digest = hashlib.sha256()
    for module in sorted(Path(generator.__file__).parent.glob("*.py")):
        digest.update(module.name.encode() + b"\0" + module.read_bytes())
    path = CACHE / f"defrag-e2e-{nodes}n-s{SEED}-{digest.hexdigest()[:12]}.json"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        args = generator.GenerateArgs(nodes, nodes * PODS_PER_NODE, 0, 0, SEED)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        with tmp.open("w") as out:
            generator.generate(args, out)
        tmp.replace(path)
    return path


def bound_pods(store: ObjectStore) -> list[Pod]:
    """The pods that hold their node (the pending ones are left out)."""
    return [p for p in store.pods if p.is_active]


@dataclass(frozen=True)
class Case:
    """A cluster and its plan; ``tight``: every node but the plan's sources filled (by one
    pod that stays) so that the CPU left is exactly what the plan moves onto each target:
    the only room is the room the plan counted on (pods that request no CPU still fit
    anywhere)."""

    store: ObjectStore
    defrag: DefragPlan
    tight: bool = False

    @property
    def targets(self) -> frozenset[str]:
        return frozenset(m.target for m in self.defrag.migrations)

    def model(self) -> SchedulerModel:
        model = SchedulerModel.over(self.store.nodes.values(), bound_pods(self.store))
        if self.tight:
            for node, room in tight_rooms(model.snapshot, self.defrag).items():
                model.bind(filler(node, room), node)
        return model


def tight_rooms(snapshot: Snapshot, defrag: DefragPlan) -> dict[str, float]:
    """The CPU to fill on every node but the plan's freed sources so that what is left is
    exactly what the plan moves onto it (nothing, on a node that is no target)."""
    incoming: dict[str, float] = {}
    for mig in defrag.migrations:
        incoming[mig.target] = incoming.get(mig.target, 0.0) + mig.pod.request("cpu")
    sources = set(defrag.freed_nodes)
    rooms = {}
    for state in snapshot.states.values():
        room = state.allocatable("cpu") - state.used.get("cpu", 0.0) - incoming.get(state.name, 0.0)
        if state.name not in sources and room > 0:
            rooms[state.name] = room
    return rooms


def filler(node: str, cpu: float) -> Pod:
    return Pod("bench", f"filler-{node}", f"filler-{node}", node_name=node, requests={"cpu": cpu})


def replacement_of(pod: Pod, seq: int) -> Pod:
    """What the workload controller creates for an evicted pod: the same template."""
    return replace(pod, name=f"{pod.name}-r{seq}", uid=f"{pod.uid}-r{seq}", node_name="")


def placeholder_of(pod: Pod, node: str) -> Pod:
    return Pod(
        "waterline-system",
        f"placeholder-{pod.name}",
        f"placeholder-{pod.uid}",
        node_name=node,
        labels={PLACEHOLDER_LABEL: pod.name},
        priority=pod.priority - 1,
        requests=pod.requests,
        phase="Running",
    )


def freed(model: SchedulerModel, sources: Iterable[str]) -> int:
    states = model.snapshot.states
    return sum(1 for s in sources if not any(not stays(p) for p in states[s].pods))


def taint(model: SchedulerModel, node: str, on: bool) -> None:
    state = model.snapshot[node]
    kept = tuple(t for t in state.node.taints if t.key != DRAIN_TAINT_KEY)
    state.node = replace(state.node, taints=(*kept, DRAIN_TAINT) if on else kept)


def queue_order(pods: Sequence[tuple[int, Pod]]) -> list[tuple[int, Pod]]:
    """The scheduler's active queue: higher priority first, then older."""
    return sorted(pods, key=lambda item: (-item[1].priority, item[0]))


# -- plain eviction: the descheduler's way ---------------------------------------------------


def plain_eviction(case: Case) -> Outcome:
    """Every planned pod evicted in one pass; the replacements scheduled as they come."""
    defrag, model = case.defrag, case.model()
    waiting: list[tuple[int, Pod]] = []
    planned: dict[str, Migration] = {}
    for seq, mig in enumerate(defrag.migrations):
        model.unbind(mig.pod, mig.source)
        repl = replacement_of(mig.pod, seq)
        planned[repl.uid] = mig
        waiting.append((seq, repl))
    out = Outcome()
    for _, repl in queue_order(waiting):
        node = model.schedule(repl)
        if node is None:
            out.waits(planned[repl.uid])
        else:
            out.landed(node, planned[repl.uid], case.targets)
    out.freed = freed(model, defrag.freed_nodes)
    out.left(model)
    return out


# -- the controller's way: drains in rounds ------------------------------------------------


@dataclass
class Controlled:
    """One run of the controller's drains, with or without placeholders."""

    model: SchedulerModel
    placeholders: bool
    drains: list[Drain]
    targets: frozenset[str]
    #: Each source tainted at its own first eviction and lifted when its own drain ends
    #: (else: all at the plan's first eviction; a freed node's lifted when all have ended).
    per_node: bool = False
    #: The plan's sources with nothing to move: drained with it (unless per node).
    idle: tuple[str, ...] = ()
    pending: list[tuple[int, Move]] = field(default_factory=list)
    seq: itertools.count[int] = field(default_factory=itertools.count)
    outcome: Outcome = field(default_factory=Outcome)

    def run(self) -> Outcome:
        rnd = 0
        while any(d.todo or d.running for d in self.drains) and rnd < MAX_ROUNDS:
            rnd += 1
            budget = STARTS_PER_ROUND
            for drain in self.drains:
                while drain.todo and len(drain.running) < PER_NODE and budget > 0:
                    budget -= 1
                    self.start(drain, drain.todo.popleft(), rnd)
            self.schedule_pending()
            self.end_jobs(rnd)
        for source in [*(d.source for d in self.drains), *self.idle]:  # all have ended
            taint(self.model, source, False)
        self.outcome.rounds = rnd
        self.schedule_pending()  # the replacements left go on waiting for room
        for _, move in self.pending:
            self.outcome.waits(move.mig)
        self.outcome.left(self.model)
        return self.outcome

    def start(self, drain: Drain, mig: Migration, rnd: int) -> None:
        """ReservationFirst: a placeholder first (the job waits while none fits); then the
        source's taint, the eviction, and the replacement joins the scheduler's queue."""
        move = Move(mig, replacement_of(mig.pod, next(self.seq)), started=rnd)
        drain.running.append(move)
        if self.placeholders:
            node = self.place(mig)
            if node is None:
                move.node = "waiting"  # no room anywhere yet: tried again next round
                return
            move.placeholder = placeholder_of(mig.pod, node)
            move.placeholder_node = node
            self.model.bind(move.placeholder, node)
        self.evict(move)

    def place(self, mig: Migration) -> str | None:
        """The planned target when it still fits, else the least requested node that does
        (the controller's choice); never the source."""
        model = self.model
        if model.fits(mig.pod, mig.target):
            return mig.target
        free = [
            s
            for s in model.snapshot.states.values()
            if s.name != mig.source and model.fits(mig.pod, s.name)
        ]
        return min(free, key=lambda s: (s.utilization("cpu"), s.name)).name if free else None

    def evict(self, move: Move) -> None:
        sources = [d.source for d in self.drains] + list(self.idle)
        for source in [move.mig.source] if self.per_node else sources:
            taint(self.model, source, True)
        self.model.unbind(move.mig.pod, move.mig.source)
        self.pending.append((next(self.seq), move))

    def schedule_pending(self) -> None:
        left: list[tuple[int, Move]] = []
        for seq, move in queue_order_moves(self.pending):
            node = self.model.schedule(move.replacement)
            if node is None and move.placeholder is not None:
                self.drop_placeholder(move)  # it appeared: the placeholder goes, room is made
                node = self.model.schedule(move.replacement)
            if node is None:
                left.append((seq, move))
                continue
            move.node = node
            self.drop_placeholder(move)
            self.outcome.landed(node, move.mig, self.targets)
        self.pending = left

    def drop_placeholder(self, move: Move) -> None:
        if move.placeholder is not None:
            self.model.unbind(move.placeholder, move.placeholder_node)
            move.placeholder = None

    def end_jobs(self, rnd: int) -> None:
        """Jobs whose replacement is bound end; others time out at their TTL; a drain
        with no job left ends and its taint is lifted."""
        for drain in self.drains:
            still = []
            for move in drain.running:
                if move.node == "waiting":
                    self.retry(move)
                if move.node and move.node != "waiting":
                    continue
                if rnd - move.started >= TTL_ROUNDS:
                    self.drop_placeholder(move)
                    continue
                still.append(move)
            drain.running = still
            if not drain.todo and not drain.running and (self.per_node or not self.is_free(drain)):
                taint(self.model, drain.source, False)

    def is_free(self, drain: Drain) -> bool:
        return freed(self.model, [drain.source]) == 1

    def retry(self, move: Move) -> None:
        node = self.place(move.mig) if self.placeholders else None
        if node is not None:
            move.node = ""
            move.placeholder = placeholder_of(move.mig.pod, node)
            move.placeholder_node = node
            self.model.bind(move.placeholder, node)
            self.evict(move)


def queue_order_moves(pending: list[tuple[int, Move]]) -> list[tuple[int, Move]]:
    return sorted(pending, key=lambda item: (-item[1].replacement.priority, item[0]))


def controlled(case: Case, placeholders: bool, per_node: bool = False) -> Outcome:
    defrag = case.defrag
    by_source: dict[str, Drain] = {}
    for mig in defrag.migrations:
        by_source.setdefault(mig.source, Drain(mig.source, deque())).todo.append(mig)
    idle = () if per_node else tuple(sorted(set(defrag.freed_nodes) - set(by_source)))
    run = Controlled(
        case.model(), placeholders, list(by_source.values()), case.targets, per_node, idle
    )
    out = run.run()
    out.freed = freed(run.model, defrag.freed_nodes)
    return out


# -- the table --------------------------------------------------------------------------------


STRATEGIES: tuple[tuple[str, Callable[[Case], Outcome]], ...] = (
    ("plain eviction (descheduler)", plain_eviction),
    ("drain taints, per node", lambda case: controlled(case, False, True)),
    ("drain taints", lambda case: controlled(case, False)),
    ("drain taints + placeholders", lambda case: controlled(case, True)),
)


COLUMNS = ("nodes freed", "on its target", "on a target", "left Pending", "rounds", "time")


def _row(name: str, cells: Sequence[object]) -> str:
    return f"    {name:<30}" + "".join(
        f" {c!s:>{len(h)}}" for c, h in zip(cells, COLUMNS, strict=True)
    )


def table(title: str, case: Case) -> None:
    moves = len(case.defrag.migrations)
    print(f"  {title}")
    print(_row("strategy", COLUMNS))
    print(_row("plan", (len(case.defrag.freed_nodes), moves, moves, "-", "-", "-")))
    for name, strategy in STRATEGIES:
        start = time.perf_counter()
        out = strategy(case)
        seconds = f"{time.perf_counter() - start:.1f}s"
        cells = (out.freed, out.on_target, out.on_a_target, out.pending, out.rounds, seconds)
        print(_row(name, cells))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = OneLine("defrag-e2e", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--real", action="store_true",
                   help="also on a real control plane with kwok nodes (bench/defrag_real.py)")
    p.add_argument("--nodes", type=int, default=None,
                   help=f"cluster size (default: {NODES} for the model, "
                   "bench.defrag_real.DEFAULT_NODES with --real)")  # fmt: skip
    args = p.parse_args(list(argv))
    if args.nodes is not None and args.nodes < (2 if args.real else 1):
        p.error(f"--nodes must be >= {2 if args.real else 1}, got {args.nodes}")
    return args


def main(argv: Sequence[str] = ()) -> None:
    args = parse_args(argv)
    if args.real:
        from bench import defrag_real

        defrag_real.main(args.nodes or defrag_real.DEFAULT_NODES)
        return
    path = scenario_path(args.nodes or NODES)
    start = time.perf_counter()
    scenario: Scenario = load_scenario(path)
    store = scenario.store
    loaded = time.perf_counter() - start
    defrag_args = DefragArgs.from_config(scenario.config_section("defrag"))
    start = time.perf_counter()
    defrag = plan(store, defrag_args, scenario.now)
    planned_s = time.perf_counter() - start
    idle = len(set(defrag.freed_nodes) - {m.source for m in defrag.migrations})
    print(
        f"cluster: {len(store.nodes)} nodes, {len(bound_pods(store))} bound pods (seed {SEED}), "
        f"loaded in {loaded:.1f} s; defrag plan: {len(defrag.migrations)} moves to free "
        f"{len(defrag.freed_nodes)} of {len(defrag.source_nodes)} sources ({idle} of them "
        f"with nothing to move) in {planned_s:.1f} s"
    )
    table("as generated (much free room outside the targets)", Case(store, defrag))
    table(
        "tight: no CPU left but what the plan moves onto each target",
        Case(store, defrag, tight=True),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
