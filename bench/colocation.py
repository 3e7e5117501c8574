"""Co-location: does Waterline keep a latency-critical pod healthy beside batch work, and
how much batch work does it take away to do so? (``python -m bench colocation``)

On this host's real cgroup v1 hierarchies (root only; skipped with the reason elsewhere),
a kubelet-shaped tree (cgroupfs driver, kubelet's ``cpu.shares`` and quotas) stands for a
node of one CPU: every pod's processes are pinned to that CPU, so the contention is real
and the rest of the machine is left to the agent and to whoever else shares it.

* ``web``: a latency-critical Guaranteed pod (0.6 core), an open-loop Poisson request
  generator (``bench.colocation_load``): fixed CPU work per request, every response time
  recorded, queueing included. Measured alone first in every round (the baseline).
* ``batch-1``, ``batch-2`` (Burstable, 0.15 core requested each) and ``batch-3``
  (BestEffort): one busy worker each, whose demand steps up and down along a timeline.

The same timeline runs under each strategy (``bench.colocation_strategies``), interleaved
(A B C D E, A B C D E, ...), each with the product's own loop, collectors, engine and quota
writes, one tick a second. The agent's node CPU is the sum of the bench pods
(``--node-cpu pods``): the benchmark is confined to the cgroups it makes.

Reported per strategy, medians over the rounds [min-max]: the web pod's p50 / p99 / p99.9
response time as a ratio to the baseline (the median of the rounds' baselines: a noise
burst in one baseline must not turn every ratio of its round); seconds above the node CPU line and
above the wait line (the kernel's per-tick figures); best-effort CPU kept (cpuacct.usage,
core-seconds, and as a share of the no-agent run of the round); CPU taken beyond what was
needed to close the gap (the room left under the CPU line, while a cap was in force, that
the capped pods wanted: core-seconds); the node's average utilization. Then the kernel's
figures beside the agent's. The noise of the machine is printed first: the baseline's own
spread, and how much of the bench CPU other processes took.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench colocation", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default %(default)s)")
    p.add_argument("--phase", type=float, default=24.0, metavar="S",
                   help="seconds of the timeline per strategy (default %(default)s)")
    p.add_argument("--baseline", type=float, default=8.0, metavar="S",
                   help="seconds of the web pod alone per round (default %(default)s)")
    p.add_argument("--settle", type=float, default=3.0, metavar="S",
                   help="pause between phases: caps restored, backlog drained (default %(default)s)")
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
                   "floor-all, one-per-tick; default all; 'none' is always run)")
    p.add_argument("--web-request", type=float, default=None, metavar="CORES",
                   help="make web Burstable with this CPU request below its 0.6 core limit (a "
                   "latency-critical pod that asks for less than it uses; default: Guaranteed)")
    p.add_argument("--trace", action="store_true", help="also print every tick of every phase")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(list(argv))  # fmt: skip
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
    if args.web_request is not None and not 0 < args.web_request <= WEB_LIMIT:
        return f"--web-request must be in (0, {WEB_LIMIT}] cores (web's limit), got {args.web_request}"
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


WEB_LIMIT = 0.6
BATCH_REQUESTS = {"batch-1": 0.15, "batch-2": 0.15}


def web_request(args: argparse.Namespace) -> float:
    """The web pod's CPU request: its limit (Guaranteed) unless ``--web-request``."""
    return WEB_LIMIT if args.web_request is None else args.web_request


def pods_and_objects(args: argparse.Namespace) -> tuple[list[Any], list[dict[str, Any]]]:
    from devtools.demo.pods import DemoPod

    request = web_request(args)
    web = DemoPod("web", "Guaranteed" if request >= WEB_LIMIT else "Burstable", WEB_LIMIT)
    batch = [DemoPod("batch-1", "Burstable", None), DemoPod("batch-2", "Burstable", None),
             DemoPod("batch-3", "BestEffort", None)]  # fmt: skip
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
            resources["requests"]["cpu"] = f"{round(request * 1000)}m"
        manifests.append(manifest)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
            "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"}}}  # fmt: skip
    return [web, *batch], [node, *manifests]


def kubelet_shares(tree: Any, pods: Sequence[Any], weight: int, web: float) -> None:
    """cpu.shares as kubelet writes them: kubepods = the node's cores, a pod and its
    container = its request, burstable = the sum of its pods' requests, besteffort = 2.
    Above kubepods, the bench's own cgroup weighs ``weight`` against every process of the
    machine outside it (on a real node, kubepods against the system daemons)."""
    requests = {"web": web, **BATCH_REQUESTS, "batch-3": 0.0}
    shares = {name: max(2, round(cpu * 1024)) for name, cpu in requests.items()}
    burstable = sum(BATCH_REQUESTS.values()) + (web if web < WEB_LIMIT else 0.0)
    root = tree.kubelet_root
    tree.write(root, "cpu.shares", str(weight))
    tree.write(f"{root}/kubepods", "cpu.shares", "1024")
    tree.write(f"{root}/kubepods/burstable", "cpu.shares", str(round(burstable * 1024)))
    tree.write(f"{root}/kubepods/besteffort", "cpu.shares", "2")
    for pod in pods:
        for rel in (pod.rel(root), pod.container_rel(root)):
            tree.write(rel, "cpu.shares", str(shares[pod.name]))


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


def load_argv(*args: object) -> list[str]:
    return [sys.executable, "-m", "bench.colocation_load", *map(str, args)]


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
    pods: list[Any]
    objects: list[dict[str, Any]]
    collector: Any
    throttler: Any
    kernel: Kernel
    cpu: int

    @property
    def batch(self) -> list[Any]:
        return self.pods[1:]

    def source(self, rules: list[dict[str, Any]]) -> Callable[[], Any]:
        from agent.model.policy import load_policies
        from agent.model.store import ObjectStore
        from agent.node.loop import Objects

        store = ObjectStore.from_dicts(self.objects)
        policies = load_policies([r for r in rules if r["kind"] == "NodeQOSEnsurancePolicy"],
                                 [r for r in rules if r["kind"] == "AvoidanceAction"])  # fmt: skip
        assert not policies.errors, policies.errors
        objects = Objects(store.nodes[NODE], tuple(store.pods), policies)
        return lambda: objects

    def run_phase(self, strategy: Any, round_: int) -> Phase:
        from agent.node.dryrun import ReportingEvictor
        from agent.node.loop import NodeLoop

        args = self.args
        start = time.monotonic() + 0.2
        for i, pod in enumerate(self.batch):
            start_process(self.tree, pod, pod.name, load_argv("worker", self.cpu, start, steps_for(i, args.phase)))
        phase = Phase(strategy.key, round_, start, start + args.phase)
        loop = NodeLoop(
            node_name=NODE, source=self.source(strategy.rules(args.line, args.wait_line)),
            collector=self.collector, brain=strategy.brain(), evictor=ReportingEvictor("bench"),
            throttler=self.throttler, interval=1.0, evictions_performed=False,
        )  # fmt: skip

        def record(outcome: Any) -> None:
            tick = self.kernel.tick()
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
        self.throttler.restore_all()
        time.sleep(args.settle)
        return phase


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
    from executors.cgroup_throttle import CgroupThrottler

    tree = CgroupTree(cpu_root, acct_root, None, f"waterline-bench-{os.getpid()}")
    state = tempfile.mkdtemp(prefix="waterline-bench-")
    throttler: CgroupThrottler | None = None
    try:
        pods, objects = pods_and_objects(args)
        for pod in pods:
            tree.add_pod(pod)
        kubelet_shares(tree, pods, args.weight, web_request(args))
        parts = build_host_parts(
            CGROUP_ROOT, PROC_ROOT, tree.kubelet_root, state, dry_run=False,
            settings=AgentSettings(), node_cpu="pods",
        )  # fmt: skip
        collector, written = parts.collector, parts.throttler
        if not isinstance(written, CgroupThrottler):
            raise RuntimeError("no CFS quota files to write here: nothing to compare")
        throttler = written
        cpus = sorted(os.sched_getaffinity(0))
        cpu = args.cpu if args.cpu is not None else cpus[-1]
        if len(cpus) > 1:  # the agent and this process keep off the bench CPU
            os.sched_setaffinity(0, set(cpus) - {cpu})
        yield Bench(args, tree, pods, objects, collector, throttler, Kernel(tree, pods, cpu), cpu)
    finally:
        if throttler is not None:
            throttler.restore_all()
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
    strategies = chosen(args)
    iterations = calibrate(bench.cpu, args.work_ms)
    records = tempfile.NamedTemporaryFile(prefix="waterline-bench-lc-", delete=False)  # noqa: SIM115
    records.close()
    web = bench.pods[0]
    server = start_process(bench.tree, web, web.name,
                           load_argv("lc", bench.cpu, args.rate, iterations, args.seed, records.name))  # fmt: skip
    bench.kernel.server_pid = server.pid
    time.sleep(1.0)  # the server's start-up is nobody's latency
    baselines: list[Phase] = []
    phases: list[Phase] = []
    total = args.rounds * len(strategies)
    for round_ in range(args.rounds):
        start = time.monotonic()
        base = Phase("baseline", round_, start, start + args.baseline)
        bench.kernel.tick()
        time.sleep(args.baseline)
        tick = bench.kernel.tick()
        if tick is not None:
            base.kernel.append(tick)
        baselines.append(base)
        for strategy in strategies:
            progress(f"round {round_ + 1}/{args.rounds}: {strategy.label} "
                     f"({len(phases) + 1}/{total})")  # fmt: skip
            phases.append(bench.run_phase(strategy, round_))
    bench.tree.stop(web.name)
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
    from bench.colocation_load import read_records
    from bench.colocation_report import report

    configure_logging("console", "error")  # the agent's per-action lines would drown the table
    started = time.monotonic()
    with bench_setup(args, *found) as bench:
        baselines, phases, path = run(args, bench)
        batch = [p.name for p in bench.batch]
        cpu = bench.cpu
    records = read_records(path)
    os.unlink(path)
    report(args, cpu, baselines, phases, records, batch, time.monotonic() - started)


if __name__ == "__main__":
    main(sys.argv[1:])
