"""Co-location: does Waterline keep a latency-critical pod healthy beside batch work, and
how much batch work does it take away to do so? (``python -m bench colocation``)

On this host's real cgroup v1 hierarchies (root only; skipped with the reason elsewhere),
a kubelet-shaped tree (cgroupfs driver, kubelet's ``cpu.shares`` and quotas) stands for a
node of one CPU: every pod's processes are pinned to that CPU, so the contention is real
and the rest of the machine is left to the agent and to whoever else shares it.

* ``web``: a latency-critical pod, an open-loop Poisson request generator
  (``devtools.demo.load``, which the demo's third phase runs too): fixed CPU work per request, every response time recorded,
  queueing included. Three cases of it (``bench.colocation_cases``): Guaranteed, Burstable,
  and Guaranteed with a limit close to its use; one server process, moved into the case's
  pod cgroup (the kubelet's shares written for that case) before the case's turn.
  Measured alone first in every round of every case (the baseline).
* ``batch-1``, ``batch-2`` (Burstable, 0.15 core requested each) and ``batch-3``
  (BestEffort): one busy worker each, whose demand steps up and down along a timeline.

The same timeline runs under each strategy (``bench.colocation_strategies``), interleaved
(round 1: case 1: A B C ..., case 2: A B C ..., round 2: ...), each with the product's own
loop, collectors, engine, quota writes and CPU isolator, one tick a second. The agent's
node CPU is the sum of the bench pods (``--node-cpu pods``): the benchmark is confined to
the cgroups it makes.

Reported per case and strategy, medians over the rounds [min-max]: the web pod's p50 /
p99 / p99.9 response time as a ratio to the baseline (the median of the case's baselines:
a noise burst in one baseline must not turn every ratio of its round); seconds above the
node CPU line and above the wait line (the kernel's per-tick figures); best-effort CPU kept
(cpuacct.usage, core-seconds, and as a share of the no-agent run of the round); CPU taken
beyond what was needed to close the gap (the room left under the CPU line, while a cap was
in force, that the capped pods wanted: core-seconds); the node's utilization (the bench
pods' CPU over the one-core node); how often web's own quota throttled it. Then the
kernel's figures beside the agent's, and the issue's goal for the idle strategies (p99
within 1.2x of alone, p99.9 within 1.5x, batch CPU at least 95% of no agent's). The noise
of the machine is printed first: the baseline's own spread, and how much of the bench CPU
other processes took. ``--quick`` is a smoke run of a few minutes; its figures are noise.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.colocation_cases import BURSTABLE, Case, chosen_cases
from devtools.demo.load import load_argv

ROOT = Path(__file__).resolve().parent.parent
NODE = "bench-node"
NAMESPACE = "bench"
#: (fraction of the phase, demand of batch-1, batch-2, batch-3 in cores)
TIMELINE = (
    (0.0, (0.10, 0.10, 0.10)),
    (1 / 6, (0.60, 0.50, 0.40)),
    (7 / 12, (0.25, 0.25, 0.25)),
    (3 / 4, (0.10, 0.10, 0.10)),
)


#: The run's length: (rounds, seconds per phase, baseline seconds, settle seconds), in full
#: and for ``--quick`` (a smoke run: every case and strategy once, figures not to quote).
FULL = {"rounds": 3, "phase": 24.0, "baseline": 8.0, "settle": 3.0}
QUICK = {"rounds": 1, "phase": 6.0, "baseline": 3.0, "settle": 0.5}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench colocation", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="a smoke run of a few minutes: 1 round, 6 s phases, 3 s baselines, 0.5 s "
                   "settles (unless given); its figures are noise, not a measurement")
    p.add_argument("--rounds", type=int, default=None, help=f"interleaved rounds (default {FULL['rounds']})")
    p.add_argument("--phase", type=float, default=None, metavar="S",
                   help=f"seconds of the timeline per strategy (default {FULL['phase']:g})")
    p.add_argument("--baseline", type=float, default=None, metavar="S",
                   help=f"seconds of the web pod alone per round and case (default {FULL['baseline']:g})")
    p.add_argument("--settle", type=float, default=None, metavar="S",
                   help=f"pause between phases: caps and marks released, backlog drained (default {FULL['settle']:g})")
    p.add_argument("--rate", type=float, default=300.0,
                   help="requests per second: 300 x 1 ms is about 60%% of web's 0.6 core (default %(default)s)")
    p.add_argument("--work-ms", type=float, default=1.0,
                   help="CPU work per request, ms on an idle CPU (default %(default)s)")
    p.add_argument("--line", type=float, default=0.8,
                   help="node CPU waterline, cores of the one-CPU node (default %(default)s)")
    p.add_argument("--wait-line", type=float, default=20.0,
                   help="lc_cpu_wait_ratio line, %% (default %(default)s)")
    p.add_argument("--cpu", type=int, default=None, help="the CPU the pods run on (default: the last)")
    p.add_argument("--weight", type=int, default=8192,
                   help="cpu.shares of the bench's top cgroup against each process outside it, as "
                   "kubepods outweighs a real node's system daemons (default %(default)s)")
    p.add_argument("--strategies", default=None, metavar="A,B",
                   help="only these strategies (keys: none, waterline-cpu, waterline-lc, "
                   "floor-all, one-per-tick, idle, idle-burst; default all; 'none' is always run)")
    p.add_argument("--cases", default=None, metavar="A,B",
                   help="only these latency-critical pods (keys: guaranteed, burstable, near-limit; "
                   "default all)")
    p.add_argument("--trace", action="store_true", help="also print every tick of every phase")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(list(argv))  # fmt: skip
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    problem = check_args(args)
    if problem:
        p.error(problem)  # one line, exit 2
    return args


#: (flag, the attribute, the test it must pass, what that test says)
LIMITS: tuple[tuple[str, str, Callable[[float], bool], str], ...] = (
    ("--rounds", "rounds", lambda v: v >= 1, "must be >= 1"),
    ("--phase", "phase", lambda v: v > 0, "must be > 0 seconds"),
    ("--baseline", "baseline", lambda v: v > 0, "must be > 0 seconds"),
    ("--settle", "settle", lambda v: v >= 0, "must be >= 0 seconds"),
    ("--rate", "rate", lambda v: v > 0, "must be > 0 requests a second"),
    ("--work-ms", "work_ms", lambda v: v > 0, "must be > 0 ms"),
    ("--line", "line", lambda v: v > 0, "must be > 0 cores"),
    ("--wait-line", "wait_line", lambda v: 0 < v <= 100, "must be in (0, 100] %"),
    ("--weight", "weight", lambda v: 2 <= v <= 262144, "must be a cpu.shares value, 2..262144"),
)


def check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, before any cgroup is made; None when nothing is."""
    for flag, attr, ok, need in LIMITS:
        if not ok(getattr(args, attr)):
            return f"{flag} {need}, got {getattr(args, attr)}"
    from bench.colocation_cases import unknown_cases

    if unknown_cases(args.cases):
        return f"--cases: unknown {', '.join(unknown_cases(args.cases))} (known: guaranteed, burstable, near-limit)"
    cpus = sorted(os.sched_getaffinity(0))
    if args.cpu is not None and args.cpu not in cpus:
        return f"--cpu must be one this process may run on ({cpus}), got {args.cpu}"
    from bench.colocation_strategies import STRATEGIES

    keys = {s.key for s in STRATEGIES}
    unknown = sorted(set((args.strategies or "").split(",")) - keys - {""})
    if unknown:
        return f"--strategies: unknown {', '.join(unknown)} (known: {', '.join(sorted(keys))})"
    return None


# -- the pods ----------------------------------------------------------------------------


BATCH_REQUESTS = {"batch-1": 0.15, "batch-2": 0.15}


def batch_pods() -> list[Any]:
    from devtools.demo.pods import DemoPod

    return [DemoPod("batch-1", "Burstable", None), DemoPod("batch-2", "Burstable", None),
            DemoPod("batch-3", "BestEffort", None)]  # fmt: skip


def web_pod(case: Case) -> Any:
    """The case's web pod; with no limit yet (a case sized from a measure) its quota is
    not written until it is sized (``Bench.prepare``)."""
    from devtools.demo.pods import DemoPod

    return DemoPod("web", case.qos, case.limit or None)


def objects_for(case: Case, web: Any, batch: Sequence[Any]) -> list[dict[str, Any]]:
    """The node, the case's web pod (labelled latency-critical) and the batch pods, as the
    API would show them."""
    manifests = []
    for pod in [web, *batch]:
        manifest = pod.manifest()
        manifest["metadata"]["namespace"] = NAMESPACE
        manifest["spec"]["nodeName"] = NODE
        resources = manifest["spec"]["containers"][0]["resources"]
        if pod.name in BATCH_REQUESTS:
            resources["requests"] = {"cpu": f"{round(BATCH_REQUESTS[pod.name] * 1000)}m"}
        if pod is web:
            manifest["metadata"]["labels"] = {"qos.waterline.io/latency-critical": "true"}
            resources["requests"]["cpu"] = f"{round(case.request * 1000)}m"
        manifests.append(manifest)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
            "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"}}}  # fmt: skip
    return [node, *manifests]


def kubelet_shares(tree: Any, case: Case, web: Any, batch: Sequence[Any], weight: int) -> None:
    """cpu.shares as kubelet writes them for the case's pods: kubepods = the node's cores, a
    pod and its container = its request, burstable = the sum of its pods' requests,
    besteffort = 2. Above kubepods, the bench's own cgroup weighs ``weight`` against every
    process of the machine outside it (on a real node, kubepods against the system
    daemons)."""
    requests = {**BATCH_REQUESTS, "batch-3": 0.0}
    burstable = sum(BATCH_REQUESTS.values()) + (case.request if case.qos == BURSTABLE else 0.0)
    root = tree.kubelet_root
    tree.write(root, "cpu.shares", str(weight))
    tree.write(f"{root}/kubepods", "cpu.shares", "1024")
    tree.write(f"{root}/kubepods/burstable", "cpu.shares", str(round(burstable * 1024)))
    tree.write(f"{root}/kubepods/besteffort", "cpu.shares", "2")
    for pod, cpu in ((web, case.request), *((p, requests[p.name]) for p in batch)):
        for rel in (pod.rel(root), pod.container_rel(root)):
            tree.write(rel, "cpu.shares", str(max(2, round(cpu * 1024))))


def move_into(tree: Any, pid: int, pod: Any) -> None:
    """Move a running process into the pod's container cgroups (every hierarchy)."""
    for root in tree.roots:
        with open(os.path.join(root, pod.container_rel(tree.kubelet_root), "cgroup.procs"), "w",
                  encoding="ascii") as f:  # fmt: skip
            f.write(str(pid))


def start_process(tree: Any, pod: Any, name: str, argv: list[str]) -> Any:
    """A process that joins the pod's container cgroups before it runs (and is killed
    with the tree)."""
    import psutil

    files = [os.path.join(r, pod.container_rel(tree.kubelet_root), "cgroup.procs") for r in tree.roots]

    def join() -> None:
        for path in files:
            with open(path, "w", encoding="ascii") as f:
                f.write(str(os.getpid()))

    proc = psutil.Popen(argv, preexec_fn=join, start_new_session=True, cwd=ROOT)  # noqa: S603
    tree.procs[name] = proc
    return proc




# -- the kernel's figures ----------------------------------------------------------------


@dataclass
class KernelTick:
    at: float
    dt: float  # seconds since the previous read
    cpu: dict[str, float]  # pod name -> cores over the tick (cpuacct.usage)
    periods: dict[str, int]  # container cgroup nr_periods over the tick
    throttled: dict[str, int]
    throttled_s: dict[str, float]
    wait: float | None  # the web server's run-queue wait, % of the tick (schedstat)
    cpu_busy: float  # the bench CPU's busy share over the tick, all processes (/proc/stat)


class Kernel:
    """The kernel's per-tick figures for the bench's pods, read straight from the files."""

    def __init__(self, tree: Any, pods: Sequence[Any], cpu: int) -> None:
        self.tree, self.pods, self.cpu = tree, list(pods), cpu
        self.server_pid: int | None = None
        self.last: dict[str, Any] | None = None

    def _stat(self, pod: Any) -> tuple[int, int, int]:
        text = self.tree.read(self.tree.cpu_root, pod.container_rel(self.tree.kubelet_root), "cpu.stat")
        fields = dict(line.split() for line in text.splitlines())
        return int(fields["nr_periods"]), int(fields["nr_throttled"]), int(fields["throttled_time"])

    def _cpu_line(self) -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith(f"cpu{self.cpu} "):
                    v = [int(x) for x in line.split()[1:9]]
                    busy = v[0] + v[1] + v[2] + v[5] + v[6]
                    return busy, busy + v[3] + v[4] + v[7]
        return 0, 1

    def read(self) -> dict[str, Any]:
        now = time.monotonic()
        usage = {p.name: self.tree.cpu_seconds(p) for p in self.pods}
        stats = {p.name: self._stat(p) for p in self.pods}
        delay = None
        if self.server_pid is not None:
            path = f"/proc/{self.server_pid}/schedstat"
            with contextlib.suppress(OSError), open(path, encoding="ascii") as f:
                delay = int(f.read().split()[1]) / 1e9
        return {"at": now, "usage": usage, "stats": stats, "delay": delay, "cpu": self._cpu_line()}

    def tick(self) -> KernelTick | None:
        now = self.read()
        last, self.last = self.last, now
        if last is None:
            return None
        dt = now["at"] - last["at"]
        wait = None
        if now["delay"] is not None and last["delay"] is not None:
            wait = (now["delay"] - last["delay"]) / dt * 100.0
        (busy1, total1), (busy0, total0) = now["cpu"], last["cpu"]
        return KernelTick(
            at=now["at"],
            dt=dt,
            cpu={k: (v - last["usage"][k]) / dt for k, v in now["usage"].items()},
            periods={k: v[0] - last["stats"][k][0] for k, v in now["stats"].items()},
            throttled={k: v[1] - last["stats"][k][1] for k, v in now["stats"].items()},
            throttled_s={k: (v[2] - last["stats"][k][2]) / 1e9 for k, v in now["stats"].items()},
            wait=wait,
            cpu_busy=(busy1 - busy0) / max(1, total1 - total0),
        )


# -- one phase ---------------------------------------------------------------------------


@dataclass
class Phase:
    strategy: str
    case: str
    round: int
    start: float
    end: float
    kernel: list[KernelTick] = field(default_factory=list)
    agent: list[Any] = field(default_factory=list)  # TickOutcome
    demand: list[dict[str, float]] = field(default_factory=list)  # per tick, pod -> cores


def demand_at(elapsed: float, phase: float) -> tuple[float, float, float]:
    out = TIMELINE[0][1]
    for frac, demands in TIMELINE:
        if elapsed >= frac * phase:
            out = demands
    return out


def steps_for(index: int, phase: float) -> str:
    steps = [f"{frac * phase:.3f}:{d[index]:g}" for frac, d in TIMELINE]
    return ",".join([*steps, f"{phase:.3f}:0"])


@dataclass
class Bench:
    args: argparse.Namespace
    tree: Any
    batch: list[Any]
    #: case key -> its web pod, and the objects the agent reads for it
    webs: dict[str, Any]
    objects: dict[str, list[dict[str, Any]]]
    collector: Any
    throttler: Any
    isolator: Any
    cpu: int
    kernel: Kernel | None = None
    server: Any = None
    #: The cases as run (sized where the case says: ``Bench.prepare``).
    cases: list[Case] = field(default_factory=list)

    def prepare(self, case: Case) -> Case:
        """The case ready to run: sized from the web server's use alone where the case
        asks (measured in the case's own cgroup, unlimited, for ``--baseline`` seconds;
        then its quota written as the kubelet would), and the objects the agent reads."""
        web = self.webs[case.key]
        if case.near_use is not None:
            assert self.server is not None
            move_into(self.tree, self.server.pid, web)
            before, t0 = self.tree.cpu_seconds(web), time.monotonic()
            time.sleep(self.args.baseline)
            case = case.sized((self.tree.cpu_seconds(web) - before) / (time.monotonic() - t0))
            web = replace(web, cpu_limit=case.limit)
            self.webs[case.key] = web
            self.tree.add_pod(web)  # the cgroups are there: this writes the quota
        self.objects[case.key] = objects_for(case, web, self.batch)
        return case

    def use_case(self, case: Case) -> None:
        """The kubelet's shares for the case's pods, the server moved into its web pod,
        and the kernel's reader on them."""
        web = self.webs[case.key]
        kubelet_shares(self.tree, case, web, self.batch, self.args.weight)
        if self.server is not None:
            move_into(self.tree, self.server.pid, web)
        self.kernel = Kernel(self.tree, [web, *self.batch], self.cpu)
        self.kernel.server_pid = None if self.server is None else self.server.pid

    def source(self, case: Case, rules: list[dict[str, Any]]) -> Callable[[], Any]:
        from agent.model.policy import load_policies
        from agent.model.store import ObjectStore
        from agent.node.loop import Objects

        store = ObjectStore.from_dicts(self.objects[case.key])
        policies = load_policies([r for r in rules if r["kind"] == "NodeQOSEnsurancePolicy"],
                                 [r for r in rules if r["kind"] == "AvoidanceAction"])  # fmt: skip
        assert not policies.errors, policies.errors
        objects = Objects(store.nodes[NODE], tuple(store.pods), policies)
        return lambda: objects

    def run_phase(self, strategy: Any, case: Case, round_: int) -> Phase:
        from agent.node.dryrun import ReportingEvictor
        from agent.node.loop import NodeLoop

        args, kernel = self.args, self.kernel
        assert kernel is not None
        start = time.monotonic() + 0.2
        for i, pod in enumerate(self.batch):
            start_process(self.tree, pod, pod.name, load_argv("worker", self.cpu, start, steps_for(i, args.phase)))
        phase = Phase(strategy.key, case.key, round_, start, start + args.phase)
        loop = NodeLoop(
            node_name=NODE, source=self.source(case, strategy.rules(args.line, args.wait_line)),
            collector=self.collector, brain=strategy.brain(), evictor=ReportingEvictor("bench"),
            throttler=self.throttler, interval=1.0, evictions_performed=False,
            isolator=self.isolator,
        )  # fmt: skip

        def record(outcome: Any) -> None:
            tick = kernel.tick()
            if outcome.seq == 1 or tick is None:
                return  # the first tick runs at the phase's start: it only sets the counters
            phase.kernel.append(tick)
            phase.agent.append(outcome)
            demands = demand_at(tick.at - start, args.phase)
            phase.demand.append({p.name: d for p, d in zip(self.batch, demands, strict=True)})

        loop.publishers.append(record)
        time.sleep(max(0.0, start - time.monotonic()))
        loop.run(ticks=round(args.phase) + 1)
        for pod in self.batch:
            self.tree.stop(pod.name)
        self.release()
        time.sleep(args.settle)
        return phase

    def release(self) -> None:
        """Every cap and mark handed back, as the local agent does when it exits."""
        self.throttler.restore_all()
        self.isolator.release_all()


# -- the run -----------------------------------------------------------------------------


def preflight() -> tuple[str, str] | str:
    """The v1 cpu and cpuacct roots, or why the benchmark cannot run here."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    from agent.defaults import CGROUP_ROOT, PROC_ROOT
    from devtools.demo.cgroups import v1_roots

    try:
        cpu, acct, _memory = v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        return str(err)
    return cpu, acct


@contextlib.contextmanager
def bench_setup(args: argparse.Namespace, cpu_root: str, acct_root: str) -> Iterator[Bench]:
    from agent.defaults import CGROUP_ROOT, PROC_ROOT
    from agent.model.settings import AgentSettings
    from agent.node.host import build_host_parts
    from devtools.demo.cgroups import CgroupTree
    from executors.cgroup_isolation import CgroupIsolator
    from executors.cgroup_throttle import CgroupThrottler

    tree = CgroupTree(cpu_root, acct_root, None, f"waterline-bench-{os.getpid()}")
    state = tempfile.mkdtemp(prefix="waterline-bench-")
    bench: Bench | None = None
    try:
        batch = batch_pods()
        webs = {case.key: web_pod(case) for case in chosen_cases(args.cases)}
        for pod in [*webs.values(), *batch]:
            tree.add_pod(pod)
        parts = build_host_parts(
            CGROUP_ROOT, PROC_ROOT, tree.kubelet_root, state, dry_run=False,
            settings=AgentSettings(), node_cpu="pods",
        )  # fmt: skip
        if not isinstance(parts.throttler, CgroupThrottler):
            raise RuntimeError("no CFS quota files to write here: nothing to compare")
        if not isinstance(parts.isolator, CgroupIsolator) or not parts.isolator.support.idle:
            raise RuntimeError("no cpu.idle here (kernel 5.15+): the idle strategies cannot run")
        cpus = sorted(os.sched_getaffinity(0))
        cpu = args.cpu if args.cpu is not None else cpus[-1]
        if len(cpus) > 1:  # the agent and this process keep off the bench CPU
            os.sched_setaffinity(0, set(cpus) - {cpu})
        bench = Bench(args, tree, batch, webs, {}, parts.collector, parts.throttler,
                      parts.isolator, cpu)  # fmt: skip
        yield bench
    finally:
        if bench is not None:
            bench.release()
        left = tree.cleanup()
        if left:
            print(f"cgroups left behind: {left}", file=sys.stderr)
        for name in os.listdir(state):
            os.unlink(os.path.join(state, name))
        os.rmdir(state)


def calibrate(cpu: int, work_ms: float) -> int:
    out = subprocess.run(load_argv("calibrate", cpu, work_ms / 1000.0), cwd=ROOT,  # noqa: S603
                         capture_output=True, text=True, check=True)  # fmt: skip
    return int(out.stdout.strip())


def run(args: argparse.Namespace, bench: Bench) -> tuple[list[Phase], list[Phase], str]:
    """Every case and strategy, interleaved round by round; the baselines, the phases and
    the file of the web server's records."""
    strategies, cases = chosen(args), chosen_cases(args.cases)
    iterations = calibrate(bench.cpu, args.work_ms)
    records = tempfile.NamedTemporaryFile(prefix="waterline-bench-lc-", delete=False)  # noqa: SIM115
    records.close()
    bench.use_case(cases[0])
    first = bench.webs[cases[0].key]
    bench.server = start_process(bench.tree, first, first.name,
                                 load_argv("lc", bench.cpu, args.rate, iterations, args.seed, records.name))  # fmt: skip
    time.sleep(1.0)  # the server's start-up is nobody's latency
    cases = bench.cases = [bench.prepare(case) for case in cases]
    baselines: list[Phase] = []
    phases: list[Phase] = []
    total = args.rounds * len(cases) * len(strategies)
    for round_ in range(args.rounds):
        for case in cases:
            bench.use_case(case)
            assert bench.kernel is not None
            start = time.monotonic()
            base = Phase("baseline", case.key, round_, start, start + args.baseline)
            bench.kernel.tick()
            time.sleep(args.baseline)
            tick = bench.kernel.tick()
            if tick is not None:
                base.kernel.append(tick)
            baselines.append(base)
            for strategy in strategies:
                progress(f"round {round_ + 1}/{args.rounds}, {case.key}: {strategy.label} "
                         f"({len(phases) + 1}/{total})")  # fmt: skip
                phases.append(bench.run_phase(strategy, case, round_))
    bench.tree.stop(first.name)
    return baselines, phases, records.name


def chosen(args: argparse.Namespace) -> list[Any]:
    from bench.colocation_strategies import STRATEGIES

    if not args.strategies:
        return list(STRATEGIES)
    keys = {"none", *args.strategies.split(",")}
    unknown = keys - {s.key for s in STRATEGIES}
    if unknown:
        raise SystemExit(f"unknown strategies: {sorted(unknown)}")
    return [s for s in STRATEGIES if s.key in keys]


def progress(text: str) -> None:
    sys.stderr.write(f"\r{text}\033[K" if sys.stderr.isatty() else f"{text}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv or [])
    found = preflight()
    if isinstance(found, str):
        print(f"skipped: {found}")
        return
    from agent.logs import configure_logging
    from bench.colocation_report import report
    from devtools.demo.load import read_records

    configure_logging("console", "error")  # the agent's per-action lines would drown the table
    started = time.monotonic()
    with bench_setup(args, *found) as bench:
        baselines, phases, path = run(args, bench)
        batch = [p.name for p in bench.batch]
        cpu, cases = bench.cpu, bench.cases
    records = read_records(path)
    os.unlink(path)
    report(args, cpu, cases, baselines, phases, records, batch, time.monotonic() - started)


if __name__ == "__main__":
    main(sys.argv[1:])
