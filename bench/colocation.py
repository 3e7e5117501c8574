"""Co-location: does Waterline keep a latency-critical pod healthy beside batch work, and
how much batch work does it take away to do so? (``python -m bench colocation``)

On this host's real cgroup v1 hierarchies (root only; skipped with the reason elsewhere),
a kubelet-shaped tree (cgroupfs driver, kubelet's ``cpu.shares`` and quotas) stands for a
node of one CPU: every pod's processes are pinned to that CPU, so the contention is real
and the rest of the machine is left to the agent, the load's bookkeeping and whoever else
shares it.

* ``web``: a latency-critical pod, an open-loop Poisson request generator
  (``devtools.demo.load``): fixed CPU work per request, every response time recorded,
  queueing included. Three cases of it (``bench.colocation_cases``). Its rate is sized from
  a measure: web's CPU per request alone with no limit (``--sizing`` seconds, 30 in a full
  run), the rate then set so that it uses 45% of its 0.6 core limit.
* ``batch-1``, ``batch-2`` (Burstable, 0.15 core requested each) and ``batch-3``
  (BestEffort): one busy worker each, at a steady demand (1.5 cores together) in the
  contended windows.

The protocol (``bench.colocation_protocol``): every round runs, per case, every window
(``bench.colocation_strategies``: the baselines, the busy-alone control and the
strategies) in an order rotated each round; each window is the same warm-up, then a
measured window at steady demand, then the caps and marks released and a pause for web's
queue to drain (checked afterwards on the records). Each runs the product's own loop,
collectors, decision (``engine.decide``), quota writes and CPU isolator, one tick a
second. The agent's node CPU is the sum of the bench pods (``--node-cpu pods``).

The records are kept (``--out DIR``: ``run.json``, ``windows.jsonl`` with every response
time and every tick) and the report, its verdicts and its pictures are made from them
only (``bench.colocation_report``, ``bench.colocation_plot``): ``--replot DIR`` makes them
again. A run stopped after its first round (Ctrl-C, SIGTERM, a failure) keeps its whole
rounds' records and their report (``RunStopped``). ``--quick`` is a smoke run of a few
minutes: its verdicts are undecided, by design.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from bench.colocation_cases import BURSTABLE, FULL_CASES, Case, chosen_cases
from bench.outcome import NothingMeasured
from devtools.demo.load import load_argv

ROOT = Path(__file__).resolve().parent.parent
NODE = "bench-node"
NAMESPACE = "bench"
#: The bench node's CPUs: every pod is pinned to one CPU, so the node is one core.
NODE_CORES = 1
#: The limit of the cases the rate is sized for (guaranteed, burstable).
WEB_LIMIT = 0.6
#: The rate web's CPU per request is measured at (requests a second), before sizing.
SIZING_RATE = 100.0

#: The run's length, in full and for ``--quick`` (a smoke run: figures not to quote).
FULL = {"rounds": 10, "window": 60, "warmup": 5, "settle": 2.0, "sizing": 30.0}
QUICK = {"rounds": 2, "window": 5, "warmup": 2, "settle": 0.5, "sizing": 5.0}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench colocation", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="a smoke run of a few minutes: 2 rounds of 5 s windows after 2 s warm-ups, "
                   "sized over 5 s (unless given); its verdicts are undecided")
    p.add_argument("--real", action="store_true",
                   help="on the real node: this host's kubelet (a running `make node`, or one started for "
                   "the run), Waterline installed from deploy/, the workloads as pods, the policies "
                   "through the API (bench.colocation_real); with --quick, a short one")
    p.add_argument("--rounds", type=int, default=None, help=f"rounds (default {FULL['rounds']})")
    p.add_argument("--window", type=int, default=None, metavar="S",
                   help=f"seconds of a measured window (default {FULL['window']})")
    p.add_argument("--warmup", type=int, default=None, metavar="S",
                   help=f"seconds of warm-up before every window, at the window's demand (default {FULL['warmup']})")
    p.add_argument("--settle", type=float, default=None, metavar="S",
                   help=f"pause after a window: caps and marks released, web's queue drained (default {FULL['settle']:g})")
    p.add_argument("--sizing", type=float, default=None, metavar="S",
                   help=f"seconds web's CPU per request is measured alone, unlimited (default {FULL['sizing']:g})")
    p.add_argument("--rate", type=float, default=None,
                   help="requests per second (default: sized so web uses 45%% of its 0.6 core limit)")
    p.add_argument("--work-ms", type=float, default=1.0,
                   help="CPU work per request, ms on an idle CPU (default %(default)s; the cost is measured)")
    p.add_argument("--line", type=float, default=0.8,
                   help="node CPU waterline, cores of the one-CPU node (default %(default)s)")
    p.add_argument("--wait-line", type=float, default=20.0,
                   help="lc_cpu_wait_ratio line, %% (default %(default)s)")
    p.add_argument("--cpu", type=int, default=None, help="the CPU the pods run on (default: the last)")
    p.add_argument("--weight", type=int, default=8192,
                   help="cpu.shares of the bench's top cgroup against each process outside it, as "
                   "kubepods outweighs a real node's system daemons (default %(default)s)")
    p.add_argument("--share-cpu", action="store_true",
                   help="--real: leave the node's processes outside kubepods (the kubelet, containerd, the "
                   "control plane) free to run on the bench CPU, as the runs before this flag did; default: "
                   "moved off it for the run, as reserved system CPUs keep them (bench.bench_cpu)")
    p.add_argument("--strategies", default=None, metavar="A,B",
                   help="only these strategies (keys: none, waterline-cpu, waterline-lc, floor-all, "
                   "one-per-tick, idle, idle-burst, batch-capacity and batch-capacity-breathe (--real only); default: "
                   "none,idle,idle-burst, all the mode can run with --quick; 'none', web alone and the "
                   "baselines the strategies are judged against always run)")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="leave out the busy-alone control (web beside an idle spinner); default: run it")
    p.add_argument("--cases", default=None, metavar="A,B",
                   help="only these latency-critical pods (keys: guaranteed, burstable, near-limit; "
                   f"default {FULL_CASES}, all with --quick)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where the records, the report and the pictures go (default: a new "
                   "directory under bench-out/)")
    p.add_argument("--replot", default=None, metavar="DIR",
                   help="no run: the report and the pictures made again from DIR's records")
    p.add_argument("--seed", type=int, default=7,
                   help="the seed of the load generator's request arrivals (default %(default)s)")
    args = p.parse_args(list(argv))  # fmt: skip
    for flag in ("strategies", "cases"):  # '' is not "the default": a full run of hours
        given = getattr(args, flag)
        if given is not None and not [k for k in given.split(",") if k.strip()]:
            p.error(f"--{flag}: empty; name at least one, or leave the flag out for the default")
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.strategies is None and not args.quick:
        from bench.colocation_strategies import FULL_STRATEGIES

        args.strategies = ",".join(FULL_STRATEGIES)
    elif args.strategies is None and args.real:  # every strategy the deployed agent can run
        from bench.colocation_real import IN_PROCESS_ONLY
        from bench.colocation_strategies import STRATEGIES

        args.strategies = ",".join(s.key for s in STRATEGIES if s.key not in IN_PROCESS_ONLY)
    elif args.strategies is None:  # every strategy the in-process tree can run
        from bench.colocation_strategies import STRATEGIES

        args.strategies = ",".join(s.key for s in STRATEGIES if not s.real_only)
    if args.cases is None and not args.quick:
        args.cases = FULL_CASES
    problem = check_args(args)
    if problem:
        p.error(problem)  # one line, exit 2
    return args


#: (flag, the attribute, the test it must pass, what that test says)
LIMITS: tuple[tuple[str, str, Callable[[float], bool], str], ...] = (
    ("--rounds", "rounds", lambda v: v >= 1, "must be >= 1"),
    ("--window", "window", lambda v: v >= 1, "must be >= 1 second"),
    ("--warmup", "warmup", lambda v: v >= 1, "must be >= 1 second"),
    ("--settle", "settle", lambda v: v >= 0, "must be >= 0 seconds"),
    ("--sizing", "sizing", lambda v: v >= 1, "must be >= 1 second"),
    ("--rate", "rate", lambda v: v is None or v > 0, "must be > 0 requests a second"),
    ("--work-ms", "work_ms", lambda v: v > 0, "must be > 0 ms"),
    ("--line", "line", lambda v: v > 0, "must be > 0 cores"),
    ("--wait-line", "wait_line", lambda v: 0 < v <= 100, "must be in (0, 100] %"),
    ("--weight", "weight", lambda v: 2 <= v <= 262144, "must be a cpu.shares value, 2..262144"),
)


def check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, before any cgroup is made; None when nothing is."""
    if args.replot is not None:
        return None if os.path.isfile(os.path.join(args.replot, "run.json")) else (
            f"--replot: no run.json in {args.replot}")  # fmt: skip
    for flag, attr, ok, need in LIMITS:
        if not ok(getattr(args, attr)):
            return f"{flag} {need}, got {getattr(args, attr)}"
    if args.line > NODE_CORES:  # the node's usage never reaches it: no rule could trigger
        return (f"--line {args.line:g} is more than the bench node's {NODE_CORES} core "
                "(its pods share one CPU): the waterline could never be reached")
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
    real_only = sorted(s.key for s in STRATEGIES if s.real_only and s.key in (args.strategies or "").split(","))
    if real_only and not args.real:
        return (f"--strategies: {', '.join(real_only)} runs on the real node only (--real): "
                "the kubelet must admit its pods against the batch capacity the node publishes")  # fmt: skip
    if args.real:
        from bench.colocation_real import unsupported

        if unsupported(args.strategies):
            names = unsupported(args.strategies)
            return (f"--strategies: {', '.join(names)} {'reshapes' if len(names) == 1 else 'reshape'} the engine's decision "
                    "in process; the deployed agent of --real runs the product's decision only")  # fmt: skip
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
            "status": {"allocatable": {"cpu": str(NODE_CORES), "memory": "4Gi", "pods": "110"}}}  # fmt: skip
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
    steal: float = 0.0  # the bench CPU's share stolen by the hypervisor over the tick
    other_busy: float = 0.0  # the other CPUs' mean busy share over the tick


class PodFiles(Protocol):
    """Where the kernel keeps one pod's figures: its cgroup's CPU time (``cpuacct.usage``)
    and its container's ``cpu.stat`` (the quota's periods and throttling)."""

    def cpu_seconds(self) -> float: ...

    def cpu_stat(self) -> str: ...


@dataclass(frozen=True)
class TreePod:
    """A pod of the hand-made tree, as ``PodFiles``."""

    tree: Any
    pod: Any

    def cpu_seconds(self) -> float:
        return float(self.tree.cpu_seconds(self.pod))

    def cpu_stat(self) -> str:
        return str(self.tree.read(self.tree.cpu_root, self.pod.container_rel(self.tree.kubelet_root), "cpu.stat"))


class Kernel:
    """The kernel's per-tick figures for the bench's pods (by name: ``web`` and the batch
    pods), read straight from the files; the same for the hand-made tree and the real
    node's pods."""

    def __init__(self, pods: Mapping[str, PodFiles], cpu: int) -> None:
        self.pods, self.cpu = dict(pods), cpu
        self.server_pid: int | None = None
        self.last: dict[str, Any] | None = None

    def _stat(self, name: str) -> tuple[int, int, int]:
        fields = dict(line.split() for line in self.pods[name].cpu_stat().splitlines())
        return int(fields["nr_periods"]), int(fields["nr_throttled"]), int(fields["throttled_time"])

    def _cpu_lines(self) -> dict[int, tuple[int, int, int]]:
        """Per CPU: (busy, total, steal) jiffies from /proc/stat."""
        out = {}
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, *rest = line.split()
                if not name.startswith("cpu") or name == "cpu":
                    continue
                v = [int(x) for x in rest[:8]]
                busy = v[0] + v[1] + v[2] + v[5] + v[6]
                out[int(name[3:])] = (busy, busy + v[3] + v[4] + v[7], v[7])
        return out

    def read(self) -> dict[str, Any]:
        now = time.monotonic()
        usage = {name: files.cpu_seconds() for name, files in self.pods.items()}
        stats = {name: self._stat(name) for name in self.pods}
        delay = None
        if self.server_pid is not None:
            path = f"/proc/{self.server_pid}/schedstat"
            with contextlib.suppress(OSError), open(path, encoding="ascii") as f:
                delay = int(f.read().split()[1]) / 1e9
        return {"at": now, "usage": usage, "stats": stats, "delay": delay, "cpu": self._cpu_lines()}

    def tick(self) -> KernelTick | None:
        now = self.read()
        last, self.last = self.last, now
        if last is None:
            return None
        dt = now["at"] - last["at"]
        wait = None
        if now["delay"] is not None and last["delay"] is not None:
            wait = (now["delay"] - last["delay"]) / dt * 100.0
        cpus1, cpus0 = now["cpu"], last["cpu"]

        def shares(cpu: int) -> tuple[float, float]:
            (b1, t1, s1), (b0, t0, s0) = cpus1[cpu], cpus0[cpu]
            total = max(1, t1 - t0)
            return (b1 - b0) / total, (s1 - s0) / total

        others = [shares(c)[0] for c in cpus1 if c != self.cpu and c in cpus0]
        return KernelTick(
            at=now["at"],
            dt=dt,
            cpu={k: (v - last["usage"][k]) / dt for k, v in now["usage"].items()},
            periods={k: v[0] - last["stats"][k][0] for k, v in now["stats"].items()},
            throttled={k: v[1] - last["stats"][k][1] for k, v in now["stats"].items()},
            throttled_s={k: (v[2] - last["stats"][k][2]) / 1e9 for k, v in now["stats"].items()},
            wait=wait,
            cpu_busy=shares(self.cpu)[0],
            steal=shares(self.cpu)[1],
            other_busy=sum(others) / len(others) if others else 0.0,
        )


# -- one window --------------------------------------------------------------------------


@dataclass
class Window:
    """One measured window as it ran: the kernel's and the agent's ticks from the start of
    its warm-up (the first ``warmup`` ticks are the warm-up)."""

    key: str
    case: str
    round: int
    slot: int
    warm_start: float
    kernel: list[KernelTick] = field(default_factory=list)
    agent: list[AgentTick] = field(default_factory=list)
    iterations: dict[str, int] = field(default_factory=dict)
    #: Seconds the window took end to end (policy applied, warm-up, window, release
    #: wait, settle): what a full run's length is sized from.
    took: float = 0.0
    #: Seconds the agent took to hand every mark and cap back after the window, and
    #: whether it did within the bound (real node; None: not waited for, the tree's
    #: release is in process).
    released_s: float | None = None
    released: bool | None = None


@dataclass(frozen=True)
class AgentTick:
    """What the agent said at a tick, beside the kernel's figures: from its tick's outcome
    (hand-made tree: the loop runs here) or from its /metrics (real node: its pod)."""

    batch: float  # the batch pods' CPU, cores, as the agent measured it
    wait: float | None  # lc_cpu_wait_ratio, %
    node: float | None  # cpu_total_usage
    actions: int  # actions decided since the previous tick
    caps: dict[str, float]  # batch pod name -> the cap the agent holds, cores
    isolated: dict[str, int] = field(default_factory=dict)  # CPU class -> pods the agent holds in it
    published: float | None = None  # the batch CPU the node publishes (waterline.io/batch-cpu), cores


def agent_tick(outcome: Any, batch: Sequence[str]) -> AgentTick:
    """An ``AgentTick`` from the loop's ``TickOutcome``."""
    report = outcome.report
    return AgentTick(
        batch=sum((u.cpu or 0.0) for key, u in outcome.usage.items() if key.split("/", 1)[1] in batch),
        wait=None if report is None else report.usage.get("lc_cpu_wait_ratio"),
        node=None if report is None else report.usage.get("cpu_total_usage"),
        actions=0 if report is None else len(report.actions),
        caps={key.split("/", 1)[1]: v for key, v in outcome.caps.items()},
        isolated={cls: len(pods) for cls, pods in outcome.isolated.items()},
    )


def window_record(w: Window, warmup: int, records: Sequence[tuple[float, float]], batch: Sequence[str],
                  drained: bool) -> dict[str, Any]:  # fmt: skip
    """The JSON record of a window: every response time of a request that arrived in the
    measured window (microseconds), and every tick, warm-up included (``in_window``)."""
    import bisect

    start = w.kernel[warmup - 1].at if warmup <= len(w.kernel) else w.warm_start
    end = w.kernel[-1].at if w.kernel else start
    lo = bisect.bisect_left(records, start, key=lambda r: r[0])
    hi = bisect.bisect_left(records, end, key=lambda r: r[0])
    ticks = []
    for i, (k, a) in enumerate(zip(w.kernel, w.agent, strict=True)):
        ticks.append({
            "t": round(k.at - w.warm_start, 3), "dt": round(k.dt, 4), "in_window": i >= warmup,
            "web": round(k.cpu["web"], 5), "batch": {b: round(k.cpu[b], 5) for b in batch},
            "busy": round(k.cpu_busy, 5), "steal": round(k.steal, 5), "other_busy": round(k.other_busy, 5),
            "wait": None if k.wait is None else round(k.wait, 3),
            "web_periods": k.periods["web"], "web_throttled": k.throttled["web"],
            "batch_periods": sum(k.periods[b] for b in batch),
            "batch_throttled": sum(k.throttled[b] for b in batch),
            "batch_throttled_s": round(sum(k.throttled_s[b] for b in batch), 5),
            "agent_batch": round(a.batch, 5), "agent_wait": a.wait, "agent_node": a.node,
            "actions": a.actions, "caps": {name: round(v, 4) for name, v in a.caps.items()},
            "isolated": a.isolated, "published": a.published,
        })  # fmt: skip
    return {
        "case": w.case, "window": w.key, "round": w.round, "slot": w.slot,
        "start": round(start - w.warm_start, 4), "seconds": round(end - start, 4),
        "drained": drained, "iterations": w.iterations, "took_s": round(w.took, 2),
        "released_s": None if w.released_s is None else round(w.released_s, 2), "released": w.released,
        "latency_us": [round(r * 1e6) for _, r in records[lo:hi]], "ticks": ticks,
    }  # fmt: skip


# -- the bench ---------------------------------------------------------------------------


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
    state: str
    kernel: Kernel | None = None
    server: Any = None
    #: The cases as run (sized where the case says).
    cases: list[Case] = field(default_factory=list)

    def prepare(self, case: Case, cpu_per_request: float, rate: float) -> Case:
        """The case sized where it asks (its quota written as the kubelet would), and the
        objects the agent reads for it."""
        web = self.webs[case.key]
        if case.near_use is not None:
            case = case.sized(cpu_per_request, rate)
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
        pods = {"web": TreePod(self.tree, web), **{p.name: TreePod(self.tree, p) for p in self.batch}}
        self.kernel = Kernel(pods, self.cpu)
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

    def run_window(self, window: Any, case: Case, round_: int, slot: int) -> Window:
        """The same warm-up, then the measured window, at the window's steady batch demand,
        under its policy; then every cap and mark released and a pause."""
        from agent.node.dryrun import ReportingEvictor
        from agent.node.loop import NodeLoop

        args, kernel = self.args, self.kernel
        assert kernel is not None
        seconds = args.warmup + args.window
        warm_start = time.monotonic() + 0.2
        counts = {}
        for pod, demand in zip(self.batch, window.demand, strict=True):
            if demand > 0:
                counts[pod.name] = os.path.join(self.state, f"{pod.name}.count")
                steps = f"0:{demand:g},{seconds + 0.3:.3f}:0"
                self.tree.start(pod, load_argv("worker", self.cpu, warm_start, steps, counts[pod.name]))
        out = Window(window.key, case.key, round_, slot, warm_start)
        loop = NodeLoop(
            node_name=NODE, source=self.source(case, window.rules(args.line, args.wait_line)),
            collector=self.collector, brain=window.brain(), evictor=ReportingEvictor("bench"),
            throttler=self.throttler, interval=1.0, evictions_performed=False,
            isolator=self.isolator,
        )  # fmt: skip

        def record(outcome: Any) -> None:
            tick = kernel.tick()
            if outcome.seq == 1 or tick is None:
                return  # the first tick runs at the warm-up's start: it only sets the counters
            out.kernel.append(tick)
            out.agent.append(agent_tick(outcome, [p.name for p in self.batch]))

        loop.publishers.append(record)
        time.sleep(max(0.0, warm_start - time.monotonic()))
        loop.run(ticks=seconds + 1)
        for pod in self.batch:
            proc = self.tree.procs.get(pod.name)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5)
            self.tree.stop(pod.name)
        for name, path in counts.items():
            with contextlib.suppress(OSError, ValueError), open(path, encoding="ascii") as f:
                out.iterations[name] = int(f.read().strip())
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.release()
        time.sleep(args.settle)
        return out

    @property
    def batch_names(self) -> list[str]:
        return [p.name for p in self.batch]

    def calibrate(self) -> int:
        return calibrate(self.cpu, self.args.work_ms)

    def measure(self, rate: float, iterations: int, seconds: float) -> Any:
        return measure(self, rate, iterations, seconds)

    def serve(self, case: Case, rate: float, iterations: int) -> None:
        """The case's pods in place and the one server in its web pod (started the first
        time: its arrivals run on from window to window, case to case)."""
        self.use_case(case)
        if self.server is not None:
            return
        path = os.path.join(self.state, "web.records")
        self.server = self.tree.start(self.webs[case.key],
                                      load_argv("lc", self.cpu, rate, iterations, self.args.seed, path), "web")  # fmt: skip
        assert self.kernel is not None
        self.kernel.server_pid = self.server.pid
        time.sleep(1.0)  # the server's start-up is nobody's latency

    def finish(self) -> list[tuple[float, float]]:
        """The server stopped; every request it served, (arrival, response)."""
        from devtools.demo.load import read_records

        self.tree.stop("web")
        path = os.path.join(self.state, "web.records")
        records = read_records(path)
        os.unlink(path)
        return records

    def describe(self) -> dict[str, Any]:
        return {}

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
        webs[SIZING] = web_pod(SIZING_CASE)
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
                      parts.isolator, cpu, state)  # fmt: skip
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


#: The unlimited pod web's CPU per request is measured in, alone.
SIZING = "sizing"
SIZING_CASE = Case(SIZING, "web alone, no limit", WEB_LIMIT, 0.0)


def measure(bench: Bench, rate: float, iterations: int, seconds: float) -> Any:
    """Web's CPU per request, alone and unlimited, over ``seconds``: its pod's cpuacct
    over the requests that arrived meanwhile (a server of its own, stopped after)."""
    from bench.colocation_protocol import Sizing
    from devtools.demo.load import read_records

    web = bench.webs[SIZING]
    path = os.path.join(bench.state, "sizing.records")
    kubelet_shares(bench.tree, SIZING_CASE, web, bench.batch, bench.args.weight)
    bench.tree.start(web, load_argv("lc", bench.cpu, rate, iterations, bench.args.seed, path), SIZING)
    time.sleep(1.0)  # the server's start-up is nobody's work per request
    before, t0 = bench.tree.cpu_seconds(web), time.monotonic()
    time.sleep(seconds)
    used, t1 = bench.tree.cpu_seconds(web) - before, time.monotonic()
    bench.tree.stop(SIZING)
    requests = sum(1 for a, _ in read_records(path) if t0 <= a < t1)
    os.unlink(path)
    return Sizing(seconds=t1 - t0, requests=requests, cpu_s=used)


class Backend(Protocol):
    """Where the pods are: the hand-made tree (``Bench``) or the real node
    (``bench.colocation_real.RealBench``). The run, the protocol and the records are the
    same for both."""

    cpu: int
    cases: list[Case]

    def calibrate(self) -> int: ...

    def measure(self, rate: float, iterations: int, seconds: float) -> Any: ...

    def prepare(self, case: Case, cpu_per_request: float, rate: float) -> Case: ...

    def serve(self, case: Case, rate: float, iterations: int) -> None: ...

    def run_window(self, window: Any, case: Case, round_: int, slot: int) -> Window: ...

    def finish(self) -> list[tuple[float, float]]: ...

    def describe(self) -> dict[str, Any]: ...

    @property
    def batch_names(self) -> list[str]: ...


class RunStopped(Exception):
    """The run stopped before its last round (Ctrl-C, SIGTERM, or a failure such as the
    agent's pod gone) after at least one whole round: those rounds' records are written
    and ``described`` says how far it got, so two hours of windows are not lost to the
    last minutes. ``cause`` is what stopped it; the run still ends with it."""

    def __init__(self, described: dict[str, Any], cause: BaseException) -> None:
        super().__init__(described["stopped"]["why"])
        self.described = described
        self.cause = cause


def run(args: argparse.Namespace, bench: Backend, out: str) -> dict[str, Any]:
    """Sizing, then every round: per case, every window in the round's rotated order.
    Writes ``windows.jsonl`` once the rounds ran (the response times and the ticks are
    read from the pods and the agent by ``finish``) and returns the run's description.

    Stopped in round k > 1 (an interrupt or a failure), it keeps the k - 1 whole rounds
    (a partial round would weigh its windows' slots unevenly) and raises ``RunStopped``;
    stopped in the first round it keeps nothing and the cause goes on as it came."""
    from bench.colocation_protocol import rate_for
    from bench.colocation_strategies import baselines

    started = time.monotonic()
    strategies = chosen(args)
    windows = [*baselines(strategies, args.control), *strategies]
    iterations = bench.calibrate()
    progress(f"sizing: web alone, no limit, {args.sizing:g} s")
    sizing = bench.measure(SIZING_RATE, iterations, args.sizing)
    rate = args.rate or rate_for(sizing.cpu_per_request, WEB_LIMIT)
    cases = bench.cases = [bench.prepare(c, sizing.cpu_per_request, rate) for c in chosen_cases(args.cases)]
    ran: list[Window] = []
    try:
        run_rounds(args, bench, cases, windows, rate, iterations, ran)
    except (KeyboardInterrupt, Exception) as cause:
        per_round = len(cases) * len(windows)
        whole = len(ran) // per_round
        if whole == 0:
            raise
        write_windows(out, args, ran[: whole * per_round], bench.finish(), bench.batch_names)
        how = "interrupted" if isinstance(cause, KeyboardInterrupt) else f"failed: {type(cause).__name__}: {cause}"
        stopped = {"why": f"{how} in round {whole + 1} of {args.rounds}", "rounds": whole}
        raise RunStopped(describe_run(args, bench, sizing, rate, cases, windows, started, stopped), cause) from cause
    write_windows(out, args, ran, bench.finish(), bench.batch_names)
    return describe_run(args, bench, sizing, rate, cases, windows, started, None)


def run_rounds(args: argparse.Namespace, bench: Backend, cases: Sequence[Case], windows: Sequence[Any],
               rate: float, iterations: int, ran: list[Window]) -> None:
    """Every round, per case, every window in the round's rotated order; each window
    appended to ``ran`` as it ends (what a stopped run keeps)."""
    from bench.colocation_protocol import rotated

    total = args.rounds * len(cases) * len(windows)
    for round_ in range(args.rounds):
        for case in cases:
            bench.serve(case, rate, iterations)
            for slot, key in enumerate(rotated([w.key for w in windows], round_)):
                window = next(w for w in windows if w.key == key)
                progress(f"round {round_ + 1}/{args.rounds}, {case.key}: {window.label} ({len(ran) + 1}/{total})")
                begun = time.monotonic()
                done = bench.run_window(window, case, round_, slot)
                done.took = time.monotonic() - begun
                progress(f"  {done.took:.1f} s end to end")
                ran.append(done)


def write_windows(out: str, args: argparse.Namespace, ran: Sequence[Window], records: list[tuple[float, float]],
                  batch: list[str]) -> None:
    """``windows.jsonl``: a line per window, its responses and its ticks."""
    from bench.colocation_protocol import drained

    with open(os.path.join(out, "windows.jsonl"), "w", encoding="utf-8") as f:
        for w in ran:
            rec = window_record(w, args.warmup, records, batch,
                                drained(records, w.warm_start - args.settle - 0.2, w.warm_start))  # fmt: skip
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")


def describe_run(args: argparse.Namespace, bench: Backend, sizing: Any, rate: float, cases: Sequence[Case],
                 windows: Sequence[Any], started: float, stopped: dict[str, Any] | None) -> dict[str, Any]:
    """``run.json``: what was run, on what, and (``stopped``) how far a cut run got."""
    return {
        "mode": "real" if args.real else "quick" if args.quick else "tree",
        "args": {k: v for k, v in vars(args).items()},
        "cpu": bench.cpu, "rate": rate, "rate_sized": args.rate is None, "web_limit": WEB_LIMIT,
        "sizing": {"seconds": sizing.seconds, "requests": sizing.requests, "cpu_s": sizing.cpu_s},
        "cases": [{"key": c.key, "label": c.label, "request": c.request, "limit": c.limit,
                   "qos": c.qos, "near_limit": c.near_use is not None} for c in cases],
        "windows": [{"key": w.key, "label": w.label, "baseline": w.baseline,
                     "batch_cores": w.batch_cores} for w in windows],
        "batch": bench.batch_names,
        "minutes": (time.monotonic() - started) / 60,
        "machine": machine(),
        **({"stopped": stopped} if stopped else {}),
        **backend_description(bench, stopped is not None),
    }  # fmt: skip


def backend_description(bench: Backend, stopped: bool) -> dict[str, Any]:
    """The backend's own description; a stopped run (its cluster may be what failed)
    keeps its records without it, saying why."""
    try:
        return bench.describe()
    except Exception as err:
        if not stopped:
            raise
        return {"undescribed": f"{type(err).__name__}: {err}"}


def machine() -> dict[str, Any]:
    """What the figures ran on: the kernel, the CPUs and the load when the run ended."""
    return {"kernel": os.uname().release, "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip


def chosen(args: argparse.Namespace) -> list[Any]:
    """The strategies to run, in the registry's order ('none' always: the batch figures are
    measured against it)."""
    from bench.colocation_strategies import STRATEGIES

    mode = [s for s in STRATEGIES if args.real or not s.real_only]
    if not args.strategies:
        return mode
    keys = {"none", *args.strategies.split(",")}
    return [s for s in mode if s.key in keys]


def progress(text: str) -> None:
    sys.stderr.write(f"\r{text}\033[K" if sys.stderr.isatty() else f"{text}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv or [])
    from bench.colocation_report import render

    if args.replot is not None:
        from bench.colocation_report import RecordsError

        try:
            render(args.replot)
        except RecordsError as err:
            print(f"error: --replot: {err}", file=sys.stderr)
            raise SystemExit(2) from err
        return
    setup: Callable[..., contextlib.AbstractContextManager[Backend]] = bench_setup
    found = preflight()
    if args.real:
        from bench.colocation_real import preflight as real_preflight
        from bench.colocation_real import real_setup

        found, setup = real_preflight(), real_setup
    if isinstance(found, str):
        raise NothingMeasured(found)
    from agent.logs import configure_logging

    configure_logging("console", "error")  # the agent's per-action lines would drown the table
    out = args.out or os.path.join(ROOT, "bench-out", time.strftime("colocation-%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    from devtools.demo.live import terminate_as_interrupt

    try:  # Ctrl-C, SIGTERM and SIGHUP end the run through the clean-up (processes, cgroups)
        with terminate_as_interrupt(), setup(args, *found) as bench:
            described = run(args, bench, out)
    except KeyboardInterrupt:
        print(f"interrupted before a round was whole: every process and cgroup of the run removed; "
              f"nothing written to {out}", file=sys.stderr)  # fmt: skip
        raise SystemExit(130) from None
    except RunStopped as stop:
        write_run(out, stop.described)
        render(out)
        from bench.colocation_report import whole_rounds

        print(f"{stop}: the records of {whole_rounds(stop.described['stopped']['rounds'])} and their report "
              f"are kept in {out}", file=sys.stderr)  # fmt: skip
        if isinstance(stop.cause, KeyboardInterrupt):
            raise SystemExit(130) from None
        raise stop.cause from None
    write_run(out, described)
    render(out)


def write_run(out: str, described: Mapping[str, Any]) -> None:
    with open(os.path.join(out, "run.json"), "w", encoding="utf-8") as f:
        json.dump(described, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
