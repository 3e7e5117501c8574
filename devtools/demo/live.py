"""The live demo, narrated: remove what an earlier, killed demo left, measure what the
busy pods get here, set the waterline from it, run the real local-mode loop through a load
phase and an idle phase, check every quota file, then show a latency-critical pod's
response times with and without the idle class (``devtools.demo.idle``), and clean up
whatever happens (Ctrl-C, SIGTERM and SIGHUP included)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from agent.logs import configure_logging
from agent.model.settings import AgentSettings
from agent.node.console import render
from agent.node.dryrun import ReportingEvictor
from agent.node.host import build_host_parts
from agent.node.local import FileObjectSource
from agent.node.loop import NodeLoop, TickOutcome
from agent.node.tick import NodeBrain
from devtools.demo.cgroups import CgroupTree, KernelMeter
from devtools.demo.idle import run_idle_phase
from devtools.demo.leftovers import remove_leftovers
from devtools.demo.pods import DemoPod, demo_objects


def say(text: str) -> None:
    print(text, flush=True)


class HeldLog(io.StringIO):
    """The agent's log lines, held while a tick runs and shown under its view (``  log
    ...``), so a warning (a stopped pod with no task, a cgroup file missing) never lands
    in the middle of the view. The tick line carries the time: the timestamp goes."""

    _STAMP = re.compile(r"^\S+Z \[")

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._part = ""

    def write(self, s: str) -> int:
        *done, self._part = (self._part + s).split("\n")
        self.lines.extend(line for line in done if line.strip())
        return len(s)

    def drain(self) -> list[str]:
        """The lines held so far, each as it is shown, and forget them."""
        lines, self.lines = self.lines, []
        return [f"  log  {self._STAMP.sub('[', line)}" for line in lines]


def waterline_for(web: float, batch: float) -> float:
    """The demo's waterline from what the pods get on this machine: the web pod's usage
    plus 60% of the batch pods', so the batch pods must give up 40% (a busy machine
    gives them less, and the line follows)."""
    return max(0.3, round((web + 0.6 * batch) * 20) / 20)


@dataclass
class Session:
    """One live run: its arguments, cgroup tree, pods, scratch directory and host parts
    (whose caps and marks the clean-up must hand back, however far the run got)."""

    args: argparse.Namespace
    tree: CgroupTree
    workdir: str
    held: HeldLog = field(default_factory=HeldLog)
    web: DemoPod = field(default_factory=lambda: DemoPod("web", "Guaranteed", 0.5))
    batch: list[DemoPod] = field(
        default_factory=lambda: [
            DemoPod("batch-a", "BestEffort", None),
            DemoPod("batch-b", "BestEffort", None),
        ]
    )
    #: The host parts the loops act with (``agent.node.host.HostParts``).
    parts: Any = None

    @property
    def pods(self) -> list[DemoPod]:
        return [self.web, *self.batch]


def live_demo(
    args: argparse.Namespace, cpu_root: str, acct_root: str, memory_root: str | None
) -> int:
    held = HeldLog()
    configure_logging("console", args.log_level, stream=held)
    kubelet_root = f"waterline-demo-{os.getpid()}"
    tree = CgroupTree(cpu_root, acct_root, memory_root, kubelet_root)
    _remove_leftovers(tree.roots)
    session = Session(args, tree, tempfile.mkdtemp(prefix=f"{kubelet_root}-"), held)
    ok = False
    try:
        with terminate_as_interrupt():
            ok = _run(session)
    except KeyboardInterrupt:
        say("\ninterrupted: cleaning up")
    except OSError as err:
        say(f"\nthe demo failed: {err}; cleaning up")
    finally:
        for line in held.drain():  # what was logged after the last tick (the clean-up)
            say(line)
        clean = _clean_up(session)
    return 0 if ok and clean else 1


def _remove_leftovers(roots: list[str]) -> None:
    """An earlier demo that was killed before it could clean up: its cgroups, processes
    and scratch folder go first."""
    removed = remove_leftovers(roots)
    if removed:
        say(
            f"removed what an earlier demo left: {', '.join(removed.cgroups + removed.workdirs)} "
            f"({removed.processes} processes killed)"
        )
    if removed.left:
        say(f"could not remove: {', '.join(removed.left)}")


def _run(s: Session) -> bool:
    kernel, line = _start_pods(s)
    objects = os.path.join(s.workdir, "objects")
    os.mkdir(objects)
    with open(os.path.join(objects, "demo.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump_all(demo_objects(s.pods, line), f, sort_keys=False)
    say(
        f"objects: {objects}/demo.yaml (node demo-node, 3 pods, policy cpu-guard, action throttle-batch)"
    )
    loop = _node_loop(s, objects, kernel)
    say("\n== phase 1: load. web (Guaranteed, limit 0.5) and two BestEffort batch pods are busy ==")
    run_ticks(loop, s.args.load_ticks, s.args.interval)
    throttled = dict(loop.brain.caps())
    say("\n== phase 2: the load goes. web goes idle, the batch jobs pause ==")
    s.tree.stop("web")
    for pod in s.batch:
        s.tree.signal(pod.name, signal.SIGSTOP)
    restored_at = run_ticks(
        loop,
        s.args.max_restore_ticks,
        s.args.interval,
        until=lambda: not loop.brain.caps() and all(s.tree.quota(p) == "-1" for p in s.batch),
    )
    ok = _summary(s.tree, s.batch, s.web, throttled, restored_at)
    for pod in s.batch:
        s.tree.stop(pod.name)
    if s.args.latency_ticks > 0:
        ok = run_idle_phase(s.tree, s.workdir, s.parts, s.args, say, s.held.drain) and ok
    return ok


def _start_pods(s: Session) -> tuple[KernelMeter, float]:
    """Make the pods' cgroups, start their busy processes, measure them for two
    intervals; the meter and the waterline that measure gives."""
    for pod in s.pods:
        s.tree.add_pod(pod)
    say(f"cgroups: {s.tree.kubelet_root}/kubepods/... under {', '.join(s.tree.roots)}")
    kernel = KernelMeter(s.tree, s.pods)
    for pod in s.pods:
        s.tree.start(pod)
    kernel.sample()
    time.sleep(2 * s.args.interval)
    got = kernel.sample()
    busy_web = got.get(s.web.key, 0.0)
    busy_batch = sum(got.get(p.key, 0.0) for p in s.batch)
    line = waterline_for(busy_web, busy_batch)
    say(
        f"here the busy pods get web {busy_web:.2f} + batch {busy_batch:.2f} cores; "
        f"waterline: cpu_total_usage {line:.2f} cores"
    )
    return kernel, line


def _node_loop(s: Session, objects: str, kernel: KernelMeter) -> NodeLoop:
    """The real local-mode loop over the objects file, acting on the demo's cgroups and
    printing the console view and the kernel's figures each tick."""
    settings = AgentSettings()
    parts = build_host_parts(
        s.args.cgroup_root,
        s.args.proc_root,
        s.tree.kubelet_root,
        os.path.join(s.workdir, "state"),
        dry_run=False,
        settings=settings,
        node_cpu="pods",
    )
    collector, s.parts = parts.collector, parts

    def show(outcome: TickOutcome) -> None:
        say(render(outcome))
        measured = kernel.sample()
        say("  kernel (cpuacct)  " + "  ".join(f"{k} {v:.2f}" for k, v in measured.items()))
        for line in s.held.drain():
            say(line)

    return NodeLoop(
        node_name="demo-node",
        source=FileObjectSource([objects], "demo-node", s.args.proc_root),
        collector=collector,
        brain=NodeBrain(settings),
        actuators=(ReportingEvictor("demo"), *parts.actuators),
        interval=s.args.interval,
        publishers=[show],
        evictions_performed=False,
    )


def _clean_up(s: Session) -> bool:
    """Restore every quota and CPU class, kill every process, remove every cgroup and file;
    whether everything went."""
    for holder in (s.parts.throttler, s.parts.isolator) if s.parts is not None else ():
        if holder is not None:
            holder.release_all()
    left = s.tree.cleanup()
    shutil.rmtree(s.workdir, ignore_errors=True)
    if left:
        say(f"could not remove: {', '.join(left)}")
        return False
    say("cleaned up: every process killed, every cgroup and file removed")
    return True


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (the terminal closed) end the demo like Ctrl-C does: through
    the clean-up. (SIGKILL cannot be caught: the busy processes die with the demo by
    themselves, and the next demo removes the cgroups.)"""

    def handler(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def run_ticks(
    loop: Any, ticks: int, interval: float, until: Callable[[], bool] | None = None
) -> int | None:
    """Tick ``ticks`` times (or until ``until()``) on a fixed schedule; the tick it held at."""
    next_at = time.monotonic()
    for i in range(ticks):
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
        loop.tick()
        if until is not None and until():
            return i + 1
    return None


def _summary(
    tree: CgroupTree,
    batch: list[DemoPod],
    web: DemoPod,
    throttled: dict[str, float],
    restored_at: int | None,
) -> bool:
    say("\n== result ==")
    ok = True
    if throttled:
        for key, cap in sorted(throttled.items()):
            say(f"  {key} was capped at {cap:.2f} cores during the load")
    else:
        say(
            "  no pod was throttled during the load (the machine may be too busy to reach the line)"
        )
        ok = False
    for pod in batch:
        quota = tree.quota(pod)
        good = quota == "-1"
        ok = ok and good
        say(
            f"  {pod.key}: cpu.cfs_quota_us is {quota} now ({'the original, restored exactly' if good else 'NOT restored'})"
        )
    web_quota = tree.quota(web)
    say(f"  {web.key}: cpu.cfs_quota_us is {web_quota} (Guaranteed: never touched)")
    ok = ok and web_quota == "50000"
    if restored_at is not None:
        say(f"  every cap was lifted {restored_at} ticks after the load went")
    else:
        say("  the caps were not all lifted in time")
    return ok
