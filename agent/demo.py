"""`waterline demo` (`make demo`): Waterline throttling real processes in real cgroups.

On a host where the cgroup v1 ``cpu`` and ``cpuacct`` hierarchies are writable (root), the
demo builds a small kubelet-shaped tree under its own kubelet cgroup root
(``waterline-demo-<pid>/kubepods/...``, so it never touches a real kubelet's pods):

* ``demo/web``, Guaranteed, limit 500m (its quota is 50 ms per 100 ms), one busy process;
* ``demo/batch-a`` and ``demo/batch-b``, BestEffort (no limit), one busy process each.

It starts the processes, measures for two seconds what they get on this machine, and sets
the waterline at the web pod's usage plus 60% of the batch pods' (1.4 cores on an idle
2-CPU machine; lower on a busy one). It writes the pods, a Node of 2 CPUs and the policy
(``cpu_total_usage`` above the line, 2 samples to trigger, 2 to restore; throttle with
minCPURatio 5 and stepCPURatio 25, BestEffort pods only) to a YAML file and runs the real
local-mode agent loop over it, every second: the node figure is the sum of the pods'
cgroup usage (``--node-cpu pods``), so that whatever else the machine runs does not move
it. The console view shows usage against the waterline,
the throttle actions with their reason, and the kernel-measured CPU of each pod.

Phase 1 (load): usage goes above the waterline; after two samples Waterline caps the
BestEffort pods, the most expensive first, just enough to bring the node to the line, and
the kernel holds them at their caps. Phase 2 (the load goes): the web pod goes idle and the
batch jobs pause; after two samples at or below the line, the caps are raised step by step
and finally the original quota (-1) is written back, exactly. The demo then checks every
quota file, kills every process, removes every cgroup and file it made (also on Ctrl-C or
SIGTERM) and exits 0 when everything behaved.

Where cgroups are not writable (not root, cgroup v2 only, read-only mount), the demo says
why and replays an embedded scenario through ``waterline simulate``'s engine instead.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from agent.logs import configure_logging

BUSY = ["/bin/sh", "-c", "while :; do :; done"]
WATERLINE_CORES = 1.0
NODE_CORES = 2
SCENARIO = "defaults/demo-scenario.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cgroup-root", default=CGROUP_ROOT)
    parser.add_argument("--proc-root", default=PROC_ROOT)
    parser.add_argument(
        "--load-ticks", type=int, default=12, help="ticks of load (default %(default)s)"
    )
    parser.add_argument(
        "--max-restore-ticks", type=int, default=15, help="give up restoring after this many ticks"
    )
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--replay",
        action="store_true",
        help="replay the embedded scenario even where cgroups are writable",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=("debug", "info", "warning", "error")
    )


# -- the cgroup tree -------------------------------------------------------------------


@dataclass(frozen=True)
class DemoPod:
    name: str
    qos: str  # Guaranteed | BestEffort
    cpu_limit: float | None  # cores
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    container_id: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)

    @property
    def key(self) -> str:
        return f"demo/{self.name}"

    def rel(self, kubelet_root: str) -> str:
        qos = "" if self.qos == "Guaranteed" else self.qos.lower()
        return "/".join(p for p in (kubelet_root, "kubepods", qos, f"pod{self.uid}") if p)

    def container_rel(self, kubelet_root: str) -> str:
        return f"{self.rel(kubelet_root)}/{self.container_id}"

    def manifest(self) -> dict[str, Any]:
        resources_: dict[str, Any] = {}
        if self.cpu_limit is not None:
            cpu = f"{int(self.cpu_limit * 1000)}m"
            resources_ = {
                "requests": {"cpu": cpu, "memory": "64Mi"},
                "limits": {"cpu": cpu, "memory": "64Mi"},
            }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": "demo",
                "uid": self.uid,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"{self.name}-rs",
                        "uid": f"rs-{self.name}",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": "demo-node",
                "priority": 0,
                "containers": [{"name": "main", "resources": resources_}],
            },
            "status": {
                "phase": "Running",
                "qosClass": self.qos,
                "startTime": "2026-01-01T00:00:00Z",
                "containerStatuses": [
                    {"name": "main", "containerID": f"containerd://{self.container_id}"}
                ],
            },
        }


def demo_objects(pods: list[DemoPod], waterline: float = WATERLINE_CORES) -> list[dict[str, Any]]:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "demo-node", "labels": {"kubernetes.io/hostname": "demo-node"}},
        "status": {"allocatable": {"cpu": str(NODE_CORES), "memory": "4Gi", "pods": "110"}},
    }
    policy = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "NodeQOSEnsurancePolicy",
        "metadata": {"name": "cpu-guard"},
        "spec": {
            "objectiveEnsurances": [
                {
                    "name": "cpu-high",
                    "metricRule": {"name": "cpu_total_usage", "value": f"{waterline:g}"},
                    "avoidanceThreshold": 2,
                    "restoreThreshold": 2,
                    "actionName": "throttle-batch",
                }
            ]
        },
    }
    action = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "AvoidanceAction",
        "metadata": {"name": "throttle-batch"},
        "spec": {
            "coolDownSeconds": 60,
            "throttle": {"cpuThrottle": {"minCPURatio": 5, "stepCPURatio": 25}},
            "scope": {"qosClasses": ["BestEffort"]},
        },
    }
    return [node, *(p.manifest() for p in pods), policy, action]


def v1_roots(cgroup_root: str, proc_root: str) -> tuple[str, str, str | None]:
    """The cpu, cpuacct and (if any) memory hierarchy roots; ValueError (with the
    reason) when the demo cannot make cgroups here."""
    from collectors.cgroups import detect_mounts

    mounts = detect_mounts(cgroup_root, proc_root)
    if mounts.version != 1:
        raise ValueError(
            f"this host runs cgroup {mounts.mode}; the live demo needs the v1 cpu and cpuacct controllers"
        )
    cpu, acct, memory = mounts.v1.get("cpu"), mounts.v1.get("cpuacct"), mounts.v1.get("memory")
    if cpu is None or acct is None:
        raise ValueError("no v1 cpu or cpuacct hierarchy is mounted")
    if not os.path.exists(os.path.join(cpu, "cpu.cfs_quota_us")):
        raise ValueError("this kernel has no CFS bandwidth control (cpu.cfs_quota_us)")
    for root in {cpu, acct, memory} - {None}:
        assert root is not None
        probe = os.path.join(root, f"waterline-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError as err:
            if root == memory:
                memory = None  # pods just get no memory figure
                continue
            raise ValueError(f"cannot create cgroups under {root}: {err.strerror}") from None
    return cpu, acct, memory


class CgroupTree:
    """The demo's cgroups and processes; :meth:`cleanup` removes everything, idempotently."""

    def __init__(
        self, cpu_root: str, acct_root: str, memory_root: str | None, kubelet_root: str
    ) -> None:
        self.roots = sorted({cpu_root, acct_root, memory_root or cpu_root})
        self.cpu_root = cpu_root
        self.acct_root = acct_root
        self.kubelet_root = kubelet_root
        self.made: list[str] = []  # relative paths, in creation order
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def make(self, rel: str) -> None:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            created = False
            for root in self.roots:
                path = os.path.join(root, sub)
                if not os.path.isdir(path):
                    os.mkdir(path)
                    created = True
            if created and sub not in self.made:
                self.made.append(sub)

    def write(self, rel: str, name: str, value: str) -> None:
        with open(os.path.join(self.cpu_root, rel, name), "w", encoding="ascii") as f:
            f.write(value)

    def read(self, root: str, rel: str, name: str) -> str:
        with open(os.path.join(root, rel, name), encoding="ascii") as f:
            return f.read().strip()

    def add_pod(self, pod: DemoPod) -> None:
        self.make(pod.container_rel(self.kubelet_root))
        if pod.cpu_limit is not None:
            quota = str(int(pod.cpu_limit * 100_000))
            for rel in (pod.rel(self.kubelet_root), pod.container_rel(self.kubelet_root)):
                self.write(rel, "cpu.cfs_period_us", "100000")
                self.write(rel, "cpu.cfs_quota_us", quota)

    def start(self, pod: DemoPod) -> None:
        """A busy process that joins the container's cgroups before it runs."""
        procs_files = [
            os.path.join(root, pod.container_rel(self.kubelet_root), "cgroup.procs")
            for root in self.roots
        ]

        def join() -> None:
            for path in procs_files:
                with open(path, "w", encoding="ascii") as f:
                    f.write(str(os.getpid()))

        self.procs[pod.name] = subprocess.Popen(BUSY, preexec_fn=join, start_new_session=True)  # noqa: S603

    def signal(self, name: str, sig: int) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)

    def cpu_seconds(self, pod: DemoPod) -> float:
        return int(self.read(self.acct_root, pod.rel(self.kubelet_root), "cpuacct.usage")) / 1e9

    def quota(self, pod: DemoPod) -> str:
        return self.read(self.cpu_root, pod.container_rel(self.kubelet_root), "cpu.cfs_quota_us")

    def cleanup(self) -> list[str]:
        """Kill every process, remove every cgroup made; the paths that would not go."""
        for name in list(self.procs):
            self.signal(name, signal.SIGCONT)
            self.stop(name)
        left = []
        for rel in reversed(self.made):
            for root in self.roots:
                path = os.path.join(root, rel)
                for attempt in range(50):
                    try:
                        os.rmdir(path)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        if attempt == 49:
                            left.append(path)
                        time.sleep(0.02)
        self.made = []
        return left


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the demo like Ctrl-C does: through the clean-up."""

    def handler(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# -- the live demo ---------------------------------------------------------------------


def _say(text: str) -> None:
    print(text, flush=True)


def waterline_for(web: float, batch: float) -> float:
    """The demo's waterline from what the pods get on this machine: the web pod's usage
    plus 60% of the batch pods', so the batch pods must give up 40% (a busy machine
    gives them less, and the line follows)."""
    return max(0.3, round((web + 0.6 * batch) * 20) / 20)


def live_demo(
    args: argparse.Namespace, cpu_root: str, acct_root: str, memory_root: str | None
) -> int:
    from agent.model.settings import AgentSettings
    from agent.node.command import build_host_parts
    from agent.node.console import render
    from agent.node.dryrun import ReportingEvictor
    from agent.node.local import FileObjectSource
    from agent.node.loop import NodeLoop, TickOutcome
    from agent.node.tick import NodeBrain

    kubelet_root = f"waterline-demo-{os.getpid()}"
    web = DemoPod("web", "Guaranteed", 0.5)
    batch = [DemoPod("batch-a", "BestEffort", None), DemoPod("batch-b", "BestEffort", None)]
    pods = [web, *batch]
    tree = CgroupTree(cpu_root, acct_root, memory_root, kubelet_root)
    workdir = tempfile.mkdtemp(prefix="waterline-demo-")
    throttler: Any = None
    ok = True
    try:
        with _terminate_as_interrupt():
            for pod in pods:
                tree.add_pod(pod)
            _say(f"cgroups: {kubelet_root}/kubepods/... under {', '.join(tree.roots)}")
            kernel = KernelMeter(tree, pods)
            for pod in pods:
                tree.start(pod)
            kernel.sample()
            time.sleep(2 * args.interval)
            got = kernel.sample()
            busy_web = got.get(web.key, 0.0)
            busy_batch = sum(got.get(p.key, 0.0) for p in batch)
            line = waterline_for(busy_web, busy_batch)
            _say(
                f"here the busy pods get web {busy_web:.2f} + batch {busy_batch:.2f} cores; "
                f"waterline: cpu_total_usage {line:.2f} cores"
            )
            objects = os.path.join(workdir, "objects")
            os.mkdir(objects)
            with open(os.path.join(objects, "demo.yaml"), "w", encoding="utf-8") as f:
                yaml.safe_dump_all(demo_objects(pods, line), f, sort_keys=False)
            _say(
                f"objects: {objects}/demo.yaml (node demo-node, 3 pods, policy cpu-guard, action throttle-batch)"
            )
            settings = AgentSettings()
            collector, throttler = build_host_parts(
                args.cgroup_root,
                args.proc_root,
                kubelet_root,
                os.path.join(workdir, "state"),
                dry_run=False,
                settings=settings,
                node_cpu="pods",
            )
            source = FileObjectSource([objects], "demo-node", args.proc_root)

            def show(outcome: TickOutcome) -> None:
                _say(render(outcome))
                measured = kernel.sample()
                _say(
                    "  kernel (cpuacct)  " + "  ".join(f"{k} {v:.2f}" for k, v in measured.items())
                )

            loop = NodeLoop(
                node_name="demo-node",
                source=source,
                collector=collector,
                brain=NodeBrain(settings),
                evictor=ReportingEvictor("demo"),
                throttler=throttler,
                interval=args.interval,
                publishers=[show],
                evictions_performed=False,
            )
            _say(
                "\n== phase 1: load. web (Guaranteed, limit 0.5) and two BestEffort batch pods are busy =="
            )
            run_ticks(loop, args.load_ticks, args.interval)
            throttled = dict(loop.brain.caps())
            _say("\n== phase 2: the load goes. web goes idle, the batch jobs pause ==")
            tree.stop("web")
            for pod in batch:
                tree.signal(pod.name, signal.SIGSTOP)
            restored_at = run_ticks(
                loop,
                args.max_restore_ticks,
                args.interval,
                until=lambda: not loop.brain.caps() and all(tree.quota(p) == "-1" for p in batch),
            )
            ok = _summary(tree, batch, web, throttled, restored_at)
    except KeyboardInterrupt:
        _say("\ninterrupted: cleaning up")
        ok = False
    except OSError as err:
        _say(f"\nthe demo failed: {err}; cleaning up")
        ok = False
    finally:
        if throttler is not None and hasattr(throttler, "restore_all"):
            throttler.restore_all()
        left = tree.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
        if left:
            _say(f"could not remove: {', '.join(left)}")
            ok = False
        else:
            _say("cleaned up: every process killed, every cgroup and file removed")
    return 0 if ok else 1


class KernelMeter:
    """Each pod's CPU as the kernel counts it (cpuacct.usage), between two calls."""

    def __init__(self, tree: CgroupTree, pods: list[DemoPod]) -> None:
        self.tree = tree
        self.pods = pods
        self.last: dict[str, tuple[float, float]] = {}

    def sample(self) -> dict[str, float]:
        now = time.monotonic()
        out = {}
        for pod in self.pods:
            try:
                used = self.tree.cpu_seconds(pod)
            except OSError:
                continue
            prev = self.last.get(pod.key)
            self.last[pod.key] = (now, used)
            if prev is not None and now > prev[0]:
                out[pod.key] = (used - prev[1]) / (now - prev[0])
        return out


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
    _say("\n== result ==")
    ok = True
    if throttled:
        for key, cap in sorted(throttled.items()):
            _say(f"  {key} was capped at {cap:.2f} cores during the load")
    else:
        _say(
            "  no pod was throttled during the load (the machine may be too busy to reach the line)"
        )
        ok = False
    for pod in batch:
        quota = tree.quota(pod)
        good = quota == "-1"
        ok = ok and good
        _say(
            f"  {pod.key}: cpu.cfs_quota_us is {quota} now ({'the original, restored exactly' if good else 'NOT restored'})"
        )
    web_quota = tree.quota(web)
    _say(f"  {web.key}: cpu.cfs_quota_us is {web_quota} (Guaranteed: never touched)")
    ok = ok and web_quota == "50000"
    if restored_at is not None:
        _say(f"  every cap was lifted {restored_at} ticks after the load went")
    else:
        _say("  the caps were not all lifted in time")
    return ok


# -- the fallback: replay a scenario ---------------------------------------------------


def replay(reason: str) -> int:
    from agent.scenario import parse_scenario
    from agent.simulate.sections import build_report

    _say(f"The live demo needs writable cgroup v1 cpu and cpuacct hierarchies: {reason}.")
    _say(
        "Replaying the embedded scenario through the same decision code instead (waterline simulate).\n"
    )
    text = resources.files("agent").joinpath(SCENARIO).read_text(encoding="utf-8")
    scenario = parse_scenario(yaml.safe_load(text), "demo-scenario")
    report = build_report(scenario)
    for node, result in report.get("nodes", {}).items():
        for tick in result["ticks"]:
            usage = tick["usage"].get("cpu_total_usage")
            line = tick["waterlines"]["throttleDown"].get("cpu_total_usage") or tick["waterlines"][
                "throttleUp"
            ].get("cpu_total_usage")
            rules = ", ".join(f"{k} {v}" for k, v in tick["rules"].items())
            _say(
                f"t={tick['at']:>3}s  node {node}  cpu_total_usage {usage}  waterline {line}  [{rules}]"
            )
            for a in tick["actions"]:
                cap = "original quota" if a.get("cpuCap") is None else f"{a['cpuCap']} cores"
                _say(
                    f"        {a['action']:<8} {a['pod']}  cap {cap}  gap {a['gapBefore']} -> {a['gapAfter']}"
                )
        _say(f"still throttled at the end: {result.get('throttled') or 'none'}")
    return 0


def run(args: argparse.Namespace) -> int:
    configure_logging("console", args.log_level)
    if args.replay:
        return replay("--replay was asked for")
    if os.geteuid() != 0:
        return replay("not running as root")
    try:
        roots = v1_roots(args.cgroup_root, args.proc_root)
    except ValueError as err:
        return replay(str(err))
    return live_demo(args, *roots)
