"""The demo's third phase: who runs first. A latency-critical web pod answers requests
beside busy batch pods on one CPU, first with no CPU class, then with the batch pods in
the idle class (``cpu.idle`` on their pod cgroups), and the console shows the web pod's
response times tick by tick.

The pods are Burstable, as the kubelet would write them: web asks 0.2 core and uses about
0.3 (300 requests a second of 1 ms each, an open-loop Poisson generator:
``devtools.demo.load``), the two batch pods ask 0.15 core each and use all they get. All
three are children of the ``burstable`` QoS cgroup, so the kernel shares the CPU between
them by their requests: web, asking less than it uses, gets 40% of a CPU it has to share,
and its requests queue behind the batch pods' time slices. Marked idle, the batch pods run
only when web does not want the CPU. At the end the class is released (the policy goes)
and each batch pod's ``cpu.shares`` must read the kubelet's value again, exactly.
"""

from __future__ import annotations

import bisect
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil
import yaml

from agent.model.settings import AgentSettings
from agent.node.console import render
from agent.node.dryrun import ReportingEvictor
from agent.node.local import FileObjectSource
from agent.node.loop import NodeLoop, TickOutcome
from agent.node.tick import NodeBrain
from devtools.demo.cgroups import CgroupTree, KernelMeter
from devtools.demo.load import calibrate, load_argv, read_records
from devtools.demo.pods import DemoPod, demo_node

RATE, WORK_S = 300.0, 0.001
WEB_REQUEST, BATCH_REQUEST = 0.2, 0.15
LC_LABEL = "qos.waterline.io/latency-critical"
#: Cores used outside the demo's pods above which the summary says the figures are not
#: the class alone (a shared machine's other work competes with the web pod too).
BUSY_MACHINE_CORES = 0.3


@dataclass
class Part:
    """One part of the phase: the requests that arrived from the first moment after its
    first tick (the change under way: the mark being written) that web's queue was empty
    (``drained_at``: the backlog the part before left is not this part's) to its end, and
    the batch pods' CPU each tick."""

    label: str
    start: float = 0.0
    end: float = 0.0
    batch: list[float] = field(default_factory=list)
    #: Cores the rest of the machine (every process outside the demo's pods) used, each tick.
    others: list[float] = field(default_factory=list)


@dataclass
class IdlePhase:
    """The third phase's pods, server records and per-tick figures."""

    tree: CgroupTree
    workdir: str
    say: Callable[[str], None]
    web: DemoPod = field(default_factory=lambda: DemoPod("web-lc", "Burstable", 0.6))
    batch: list[DemoPod] = field(default_factory=lambda: [
        DemoPod("batch-c", "Burstable", None), DemoPod("batch-d", "Burstable", None)])  # fmt: skip
    records: str = ""
    #: Records of the server read so far (each tick shows the requests answered since).
    seen: int = 0
    #: The parts of the phase, in order.
    parts: list[Part] = field(default_factory=list)

    @property
    def pods(self) -> list[DemoPod]:
        return [self.web, *self.batch]

    def objects(self, idle: bool) -> list[dict[str, Any]]:
        web = self.web.manifest()
        web["metadata"]["labels"] = {LC_LABEL: "true"}
        web["spec"]["containers"][0]["resources"]["requests"]["cpu"] = f"{round(WEB_REQUEST * 1000)}m"
        batch = []
        for pod in self.batch:
            manifest = pod.manifest()
            manifest["spec"]["containers"][0]["resources"] = {"requests": {"cpu": f"{round(BATCH_REQUEST * 1000)}m"}}
            batch.append(manifest)
        out = [demo_node(), web, *batch]
        if idle:
            out.append({
                "apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
                "metadata": {"name": "colocated"},
                "spec": {"cpuIsolation": {"idle": {"scope": {
                    "qosClasses": ["BestEffort", "Burstable"],
                    "podSelector": {"matchExpressions": [
                        {"key": LC_LABEL, "operator": "NotIn", "values": ["true"]}]}}}}},
            })  # fmt: skip
        return out

    def kubelet_shares(self) -> None:
        """What the kubelet writes for these pods: their requests, and the QoS cgroup's."""
        root = self.tree.kubelet_root
        total = WEB_REQUEST + BATCH_REQUEST * len(self.batch)
        self.tree.write(f"{root}/kubepods/burstable", "cpu.shares", str(round(total * 1024)))
        for pod, request in ((self.web, WEB_REQUEST), *((p, BATCH_REQUEST) for p in self.batch)):
            for rel in (pod.rel(root), pod.container_rel(root)):
                self.tree.write(rel, "cpu.shares", str(round(request * 1024)))

    def shares(self, pod: DemoPod) -> str:
        return self.tree.read(self.tree.cpu_root, pod.rel(self.tree.kubelet_root), "cpu.shares")

    def idle_mark(self, pod: DemoPod) -> str:
        return self.tree.read(self.tree.cpu_root, pod.rel(self.tree.kubelet_root), "cpu.idle")


def run_idle_phase(tree: CgroupTree, workdir: str, parts: Any, args: Any, say: Callable[[str], None],
                   drain: Callable[[], list[str]]) -> bool:  # fmt: skip
    """The phase, narrated; whether the class was released exactly."""
    if not parts.isolator.support.idle:
        say("\n== phase 3 skipped: this kernel has no cpu.idle (5.15+ is needed) ==")
        return True
    phase = IdlePhase(tree, workdir, say)
    cpu = max(os.sched_getaffinity(0))
    for pod in phase.pods:
        tree.add_pod(pod)
    phase.kubelet_shares()
    objects = os.path.join(workdir, "colocated")
    os.mkdir(objects)
    path = os.path.join(objects, "demo.yaml")
    write(path, phase.objects(idle=False))
    fd, phase.records = tempfile.mkstemp(prefix="web-lc-", dir=workdir)
    os.close(fd)
    say(f"\n== phase 3: who runs first. web-lc (Burstable, latency-critical, {WEB_REQUEST:g} core "
        f"requested) answers {RATE:g} requests/s of {WORK_S * 1000:g} ms on CPU {cpu} ==")  # fmt: skip
    tree.start(phase.web, load_argv("lc", cpu, RATE, calibrate(WORK_S), 7, phase.records))
    kernel = KernelMeter(tree, phase.pods)
    loop = _loop(phase, parts, path, kernel, args, say, drain)
    _ticks(loop, phase, "alone", 3, args.interval)
    say(f"\nthe batch pods start: two busy Burstable pods ({BATCH_REQUEST:g} core requested each) "
        f"on CPU {cpu}, no CPU class")  # fmt: skip
    for pod in phase.batch:
        tree.start(pod)
        os.sched_setaffinity(tree.procs[pod.name].pid, {cpu})
    _ticks(loop, phase, "batch, no class", args.latency_ticks, args.interval)
    say("\nthe batch pods join the idle class (policy colocated: spec.cpuIsolation.idle)")
    write(path, phase.objects(idle=True))
    _ticks(loop, phase, "batch idle", args.latency_ticks, args.interval)
    say("\nthe policy goes: the class is released")
    write(path, phase.objects(idle=False))
    _ticks(loop, phase, "released", 1, args.interval)
    for pod in phase.pods:
        tree.stop(pod.name)
    return _summary(phase)


def write(path: str, docs: list[dict[str, Any]]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)
    os.replace(tmp, path)


def _loop(phase: IdlePhase, parts: Any, path: str, kernel: KernelMeter, args: Any,
          say: Callable[[str], None], drain: Callable[[], list[str]]) -> NodeLoop:  # fmt: skip
    """The real local-mode loop over the phase's objects; each tick shows the console
    view, the web pod's response times over the tick and the kernel's CPU figures."""

    def show(outcome: TickOutcome) -> None:
        say(render(outcome))
        records = read_records(phase.records)
        lat = [r for _a, r in records[phase.seen:]]  # answered since the last tick
        phase.seen = len(records)
        measured = kernel.sample()
        batch = sum(measured.get(p.key, 0.0) for p in phase.batch)
        host = psutil.cpu_percent(interval=None) / 100 * (psutil.cpu_count() or 1)
        if phase.parts:
            phase.parts[-1].batch.append(batch)
            phase.parts[-1].others.append(max(0.0, host - sum(measured.values())))
        say(f"  web-lc  {len(lat)} requests  p50 {ms(quantile(lat, 0.5))} ms  "
            f"p99 {ms(quantile(lat, 0.99))} ms    batch pods got {batch:.2f} cores (cpuacct)")  # fmt: skip
        for line in drain():
            say(line)

    settings = AgentSettings()
    return NodeLoop(
        node_name="demo-node", source=FileObjectSource([path], "demo-node", args.proc_root),
        collector=parts.collector, brain=NodeBrain(settings),
        actuators=(ReportingEvictor("demo"), *parts.actuators), interval=args.interval,
        publishers=[show], evictions_performed=False,
    )  # fmt: skip


def _ticks(loop: NodeLoop, phase: IdlePhase, label: str, ticks: int, interval: float) -> None:
    part = Part(label)
    phase.parts.append(part)
    next_at = time.monotonic()
    for i in range(ticks):
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
        loop.tick()
        if i == 0:
            part.start = time.monotonic()
    part.end = time.monotonic()


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:.1f}"


def drained_at(records: Sequence[tuple[float, float]], since: float, until: float) -> float | None:
    """The arrival of the first request in [since, until) that found web's queue empty (the
    request before it answered by then), or None: from there on, every request is the
    part's own, none waits behind the backlog the part before left (the rule of
    ``bench.colocation_protocol.drained``). ``records`` are (arrival, response) pairs
    sorted by arrival, served in arrival order."""
    lo = bisect.bisect_left(records, since, key=lambda r: r[0])
    hi = bisect.bisect_left(records, until, key=lambda r: r[0])
    for i in range(lo, hi):
        if i == 0 or sum(records[i - 1]) <= records[i][0]:
            return records[i][0]
    return None


def part_lines(parts: Sequence[Part], records: Sequence[tuple[float, float]]) -> list[str]:
    """Per part (the last, the release, aside): web's p50 and p99 over the requests that
    arrived from the first moment after its first tick that web's queue was empty, so the
    backlog of the part before (its requests answered late) is not counted in this one."""
    lines = []
    for part in parts[:-1]:
        start = drained_at(records, part.start, part.end)
        lat = [] if start is None else [r for a, r in records if start <= a < part.end]
        cores = statistics.fmean(part.batch[1:]) if len(part.batch) > 1 else 0.0
        rest = statistics.fmean(part.others[1:]) if len(part.others) > 1 else 0.0
        lines.append(
            f"  {part.label:<16} web p50 {ms(quantile(lat, 0.5)):>6} ms  p99 {ms(quantile(lat, 0.99)):>7} ms"
            f"  ({len(lat)} requests)   batch pods {cores:.2f} cores   rest of the machine {rest:.2f}"
            + ("   (web's queue never drained: no figure of its own)" if start is None else ""))  # fmt: skip
    return lines


def _summary(phase: IdlePhase) -> bool:
    say = phase.say
    say("\n== result of phase 3 (the requests of each part once web's queue drained after its "
        "first tick; the batch pods' mean) ==")
    for line in part_lines(phase.parts, read_records(phase.records)):
        say(line)
    others = max((max(p.others[1:]) for p in phase.parts if len(p.others) > 1), default=0.0)
    if others > BUSY_MACHINE_CORES:
        say(f"  note: other processes of this machine used up to {others:.2f} cores beside the demo's "
            "pods; the web pod competed with them too, and no class of ours reaches them: "
            "on a quiet machine the figures show the class alone")  # fmt: skip
    ok = True
    for pod in phase.batch:
        shares, idle = phase.shares(pod), phase.idle_mark(pod)
        good = idle == "0" and shares == str(round(BATCH_REQUEST * 1024))
        ok = ok and good
        say(f"  {pod.key}: cpu.idle {idle}, cpu.shares {shares} "
            f"({'the kubelet value, restored exactly' if good else 'NOT restored'})")  # fmt: skip
    return ok
