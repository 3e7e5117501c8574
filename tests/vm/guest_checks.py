"""The checks that run inside the guest: a real cgroup v2 host with systemd as PID 1.

tests/vm/test_guest.py boots the guest once and runs this file there (with the guest's
/opt/waterline Python, Waterline installed from the fresh wheel); each check records its
figures and its verdict in ``OUT/results.json`` (written after every check, so a guest
that dies midway still says how far it got), and the host's tests assert on them.

The node is laid out by systemd itself, as the kubelet's systemd cgroup driver and
containerd have it: ``systemd-run --scope`` puts each container's busy processes in a
transient ``cri-containerd-<id>.scope`` inside ``kubepods-<qos>-pod<uid>.slice``, and
systemd makes the slices ``kubepods.slice/kubepods-<qos>.slice/...`` from the names.
Every CPU figure is the kernel's: ``usage_usec`` of the pod slice's ``cpu.stat``.

Standard library and Waterline only: nothing of tests/ exists in the guest.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/mnt/share/out")
CG = "/sys/fs/cgroup"
WORK = Path("/run/waterline-checks")
WATERLINE = "/opt/waterline/bin/waterline"
INTERVAL = 1.0  # the agent's tick, seconds
METRICS = "127.0.0.1:9901"
#: Seconds the agent may take to start and act: its imports take minutes under emulation
#: on a busy machine.
AGENT_START = 600

BATCH_UID = "5b0e7c1a-1111-4a5b-8c9d-00000000000b"
WEB_UID = "5b0e7c1a-2222-4a5b-8c9d-00000000000a"
SCRATCH_UID = "5b0e7c1a-3333-4a5b-8c9d-00000000000c"
BATCH_CID = "b1" * 32
WEB_CID = "a1" * 32
SCRATCH_CID = "c1" * 32
UNLIMITED = "max 100000"
NO_BUS = "unix:path=/run/waterline-checks/no-bus"
#: Seconds one check may run before the guest gives up on it: every thread's stack goes to
#: the serial console (the host's console.log, which does not depend on the 9p share) and
#: the script exits, so the boot ends with the checks that did run instead of at the
#: host's limit. A CI boot once stopped inside ``caps_hold_across_daemon_reloads`` and
#: said nothing for 40 minutes; every wait inside a check has a limit of its own, so a
#: check past this one is stuck in the kernel, systemd or the share. The longest check
#: fits under it: the agent's start (up to AGENT_START) and the storm's 600 s budget.
CHECK_LIMIT = 1500
CONSOLE = "/dev/ttyS0"

Figures = dict[str, Any]
CHECKS: list[tuple[str, Callable[[Figures], None]]] = []


def check(fn: Callable[[Figures], None]) -> Callable[[Figures], None]:
    CHECKS.append((fn.__name__, fn))
    return fn


# -- the node: slices and scopes made by systemd ----------------------------------------


def sh(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


def pod_slice(qos: str, uid: str) -> str:
    return f"kubepods-{qos}-pod{uid.replace('-', '_')}.slice"


def slice_path(qos: str, uid: str) -> str:
    return f"kubepods.slice/kubepods-{qos}.slice/{pod_slice(qos, uid)}"


def scope(cid: str) -> str:
    return f"cri-containerd-{cid}.scope"


class Pod:
    """A pod as the systemd driver lays it out, with ``loops`` busy processes."""

    def __init__(self, name: str, qos: str, uid: str, cid: str, loops: int,
                 props: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.name, self.qos, self.uid, self.cid = name, qos, uid, cid
        self.path = slice_path(qos, uid)
        self.container = f"{self.path}/{scope(cid)}"
        busy = " ".join(["while :; do :; done &"] * loops) + " wait"
        # CPUWeight= and MemoryAccounting= as runc sets them on a container's scope: they
        # make systemd enable the cpu and memory controllers down to it.
        self.proc = subprocess.Popen(
            ["systemd-run", "--quiet", "--scope", f"--unit={scope(cid)}",
             f"--slice={pod_slice(qos, uid)}", "-p", "CPUWeight=100", "-p", "MemoryAccounting=yes",
             *props, "/bin/sh", "-c", busy],
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not read(f"{self.container}/cgroup.procs"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{scope(cid)}: no process in {self.container} after 30 s")
            time.sleep(0.2)

    @property
    def quota_file(self) -> str:
        return f"{CG}/{self.container}/cpu.max"

    def usage_s(self) -> float:
        """The pod's CPU seconds, from the pod slice's cpu.stat (the kernel's count)."""
        for line in read(f"{self.path}/cpu.stat").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise RuntimeError(f"no usage_usec in {self.path}/cpu.stat")

    def cpu_max(self) -> str:
        return read(f"{self.container}/cpu.max")

    def manifest(self, labels: dict[str, str], resources: dict[str, Any], qos_class: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "namespace": "vm", "uid": self.uid, "labels": labels,
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": self.name,
                                              "uid": self.uid[:-1] + "f", "controller": True}]},
            "spec": {"containers": [{"name": "main", "resources": resources}]},
            "status": {"phase": "Running", "qosClass": qos_class, "startTime": "2026-01-01T00:00:00Z",
                       "containerStatuses": [{"name": "main", "containerID": f"containerd://{self.cid}"}]},
        }  # fmt: skip


def read(rel_or_abs: str) -> str:
    path = rel_or_abs if rel_or_abs.startswith("/") else f"{CG}/{rel_or_abs}"
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def cores(pod: Pod, seconds: float) -> float:
    """The pod's CPU in cores over the next ``seconds``, as the kernel counts it."""
    u0, t0 = pod.usage_s(), time.monotonic()
    time.sleep(seconds)
    return (pod.usage_s() - u0) / (time.monotonic() - t0)


def wait_for(what: str, predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> float:
    """Seconds until ``predicate`` holds; raises AssertionError after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(step)
    return time.monotonic() - start


BATCH: Pod
WEB: Pod


def setup() -> None:
    global BATCH, WEB
    WORK.mkdir(parents=True, exist_ok=True)
    # Two busy pods on the two CPUs: batch (BestEffort) and web (Burstable, labelled
    # latency-critical). Same weights: each gets about one CPU, each pod's two processes
    # wait for each other, so web feels CPU pressure (its cpu.pressure) until batch is capped.
    BATCH = Pod("batch", "besteffort", BATCH_UID, BATCH_CID, loops=2)
    WEB = Pod("web", "burstable", WEB_UID, WEB_CID, loops=2)
    objects = WORK / "objects"
    objects.mkdir(exist_ok=True)
    pods = [
        BATCH.manifest({}, {}, "BestEffort"),
        WEB.manifest({"qos.waterline.io/latency-critical": "true"},
                     {"requests": {"cpu": "500m"}}, "Burstable"),
    ]  # fmt: skip
    (objects / "pods.json").write_text(json.dumps(pods))


def policy(metric: str, value: str, min_ratio: int, step_ratio: int) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
         "metadata": {"name": "vm"},
         "spec": {"objectiveEnsurances": [{
             "name": "rule", "metricRule": {"name": metric, "value": value},
             "avoidanceThreshold": 1, "restoreThreshold": 3, "actionName": "throttle-batch"}]}},
        {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
         "metadata": {"name": "throttle-batch"},
         "spec": {"coolDownSeconds": 0,
                  "throttle": {"cpuThrottle": {"minCPURatio": min_ratio, "stepCPURatio": step_ratio}},
                  "scope": {"qosClasses": ["BestEffort"]}}},
    ]  # fmt: skip


class Agent:
    """``waterline agent --local`` on this guest, its JSON log in a file."""

    def __init__(self, name: str, rules: list[dict[str, Any]], ticks: int | None = None,
                 bus: bool = True) -> None:  # fmt: skip
        (WORK / "objects" / "policy.json").write_text(json.dumps(rules))
        self.log_path = WORK / f"agent-{name}.log"
        self.state = WORK / f"state-{name}"
        args = [WATERLINE, "agent", "--local", "--objects", str(WORK / "objects"),
                "--interval", str(INTERVAL), "--state-dir", str(self.state),
                "--metrics-addr", METRICS, "--no-console", "--log-format", "json",
                "--node-cpu", "pods"]  # fmt: skip
        if ticks is not None:
            args += ["--ticks", str(ticks)]
        self.log_file = open(self.log_path, "w")  # noqa: SIM115
        # bus=False: systemd's bus unreachable for the agent, which then writes the files
        # directly (its fallback; what the checks written before issue 30 measure)
        env = None if bus else {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": NO_BUS}
        self.proc = subprocess.Popen(args, stdout=self.log_file, stderr=subprocess.STDOUT, env=env)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def metrics(self) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=10).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def ticks(self) -> int:
        """Ticks the agent ended so far (waterline_ticks_total, every outcome)."""
        return int(sum(v for k, v in self.metrics().items() if k.startswith("waterline_ticks_total")))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=120)
        self.log_file.close()
        (OUT / self.log_path.name).write_text(self.log_path.read_text(errors="replace"))
        return rc


# -- the checks -------------------------------------------------------------------------


@check
def guest(f: Figures) -> None:
    """What this host is: systemd as PID 1, cgroup v2 with its controllers."""
    f["kernel"] = os.uname().release
    f["pid1"] = read("/proc/1/comm")
    f["systemd"] = sh("systemctl", "--version").splitlines()[0]
    f["cgroup_fs"] = sh("stat", "-fc", "%T", CG)
    f["controllers"] = read("cgroup.controllers").split()
    f["cpus"] = os.cpu_count()
    f["waterline"] = sh(WATERLINE, "--version")
    assert f["pid1"] == "systemd" and f["cgroup_fs"] == "cgroup2fs", f


@check
def systemd_layout(f: Figures) -> None:
    """The kubelet's systemd naming, made by systemd; found by the agent's layout code."""
    from agent.model.objects import BEST_EFFORT, BURSTABLE, Container
    from agent.model.objects import Pod as KPod
    from agent.node.discover import discover
    from collectors.cgroups import detect_mounts
    from collectors.layout import PodCgroupLayout

    mounts = detect_mounts(CG, "/proc")
    f["mode"], f["version"] = mounts.mode, mounts.version
    f["cpu_root"] = mounts.controller_root("cpu")
    layout = PodCgroupLayout(f["cpu_root"])
    f["driver"] = layout.detect_driver()
    f["systemd_says"] = {}
    f["found"] = {}
    for pod, qos in ((BATCH, BEST_EFFORT), (WEB, BURSTABLE)):
        f["systemd_says"][pod.name] = sh("systemctl", "show", "-p", "ControlGroup", "--value", scope(pod.cid))
        k = KPod(namespace="vm", name=pod.name, uid=pod.uid, qos_class=qos,
                 containers=(Container("main", container_id=f"containerd://{pod.cid}"),))  # fmt: skip
        found = layout.locate(k)
        f["found"][pod.name] = None if found is None else {"pod": found.path, **found.containers}
        assert found is not None and found.path == pod.path, (pod.name, found)
        assert "/" + found.containers["main"] == f["systemd_says"][pod.name], f
    f["subtree_control"] = {p: read(f"{p}/cgroup.subtree_control") for p in
                            (CG, "kubepods.slice", BATCH.path)}  # fmt: skip
    found_pods = discover(f["cpu_root"], 2, memory_root=mounts.controller_root("memory"))
    f["discovered"] = sorted((p.uid, p.qos_class, [c.container_id for c in p.containers])
                             for p in found_pods.pods)  # fmt: skip
    assert (mounts.mode, mounts.version, f["driver"]) == ("v2", 2, "systemd"), f
    assert {d[0] for d in f["discovered"]} == {BATCH_UID, WEB_UID}, f


@check
def v2_collectors(f: Figures) -> None:
    """Usage, throttling, working set and per-pod PSI from the real v2 files."""
    from agent.model.objects import BEST_EFFORT, BURSTABLE, Container
    from agent.model.objects import Pod as KPod
    from collectors.cgroups import detect_mounts
    from collectors.pod_stats import PodStatsCollector

    pods = [KPod(namespace="vm", name=p.name, uid=p.uid, qos_class=q,
                 containers=(Container("main", container_id=f"containerd://{p.cid}"),))
            for p, q in ((BATCH, BEST_EFFORT), (WEB, BURSTABLE))]  # fmt: skip
    collector = PodStatsCollector(detect_mounts(CG, "/proc"))
    # The kernel's own count over the collector's window: read just before each of its
    # two samples (a sample reads two pods in about a second under emulation).
    kernel0 = {p.name: (p.usage_s(), time.monotonic()) for p in (BATCH, WEB)}
    collector.collect(pods)
    time.sleep(8)
    kernel1 = {p.name: (p.usage_s(), time.monotonic()) for p in (BATCH, WEB)}
    sample = collector.collect(pods)
    f["pods"] = {}
    for p in (BATCH, WEB):
        stats = sample.stats[f"vm/{p.name}"]
        (u0, t0), (u1, t1) = kernel0[p.name], kernel1[p.name]
        kernel = (u1 - u0) / (t1 - t0)
        mem_current = int(read(f"{p.path}/memory.current") or 0)
        f["pods"][p.name] = {
            "cpu_cores": stats.pod.cpu, "kernel_cores": kernel,
            "container_cpu_cores": stats.containers["main"].cpu,
            "working_set_bytes": stats.pod.memory_working_set, "memory_current": mem_current,
            "nr_periods": stats.pod.throttling.nr_periods if stats.pod.throttling else None,
            "cpu_pressure_avg10": stats.pod.cpu_pressure,
            "memory_pressure_avg10": stats.pod.memory_pressure,
        }  # fmt: skip
        figures = f["pods"][p.name]
        assert stats.pod.cpu is not None and abs(stats.pod.cpu - kernel) <= 0.1 * kernel + 0.05, figures
        assert figures["working_set_bytes"] is not None and 0 < figures["working_set_bytes"] <= mem_current, figures
        assert stats.containers["main"].throttling is not None, figures
        assert figures["cpu_pressure_avg10"] is not None, figures
    assert f["pods"]["web"]["cpu_pressure_avg10"] > 5, "web should feel CPU pressure beside batch"


def _applied(events: list[dict[str, Any]], action: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("code") == action and e.get("outcome") == "applied"]


@check
def lc_pressure_throttles_and_restores_exactly(f: Figures) -> None:
    """``lc_cpu_pressure`` (web's cpu.pressure) drives a rule: batch is capped through
    cpu.max step by step to its floor, held there (kernel-measured), and the exact
    original is written back when the local-mode agent exits."""
    f["original"] = BATCH.cpu_max()
    f["web_pressure_before"] = float(read(f"{WEB.path}/cpu.pressure").split()[1].split("=")[1])
    floor = "20000 100000"  # minCPURatio 10% of the node's 2 cores
    agent = Agent("pressure", policy("lc_cpu_pressure", "10", 10, 25))
    try:
        seen: list[str] = []
        def capped() -> bool:
            value = BATCH.cpu_max()
            if not seen or seen[-1] != value:
                seen.append(value)
            return value == floor
        f["seconds_to_floor"] = wait_for("batch capped to its floor", capped, timeout=AGENT_START)
        f["quota_seen"] = seen
        stat0 = read(f"{BATCH.container}/cpu.stat")  # the quota is the container's
        f["batch_cores_at_floor"] = cores(BATCH, 5)
        stat1 = read(f"{BATCH.container}/cpu.stat")
        f["nr_throttled_delta"] = _stat(stat1, "nr_throttled") - _stat(stat0, "nr_throttled")
        f["web_pressure_capped"] = float(read(f"{WEB.path}/cpu.pressure").split()[1].split("=")[1])
    finally:
        f["agent_rc"] = agent.stop()
    f["restored"] = BATCH.cpu_max()
    events = agent.events()
    throttles = _applied(events, "throttle")
    f["throttles"] = [(e["metric"], round(e["value"], 2), round(e["cpu_cap"], 3)) for e in throttles]
    assert throttles and all(e["metric"] == "lc_cpu_pressure" for e in throttles), f["throttles"]
    assert f["batch_cores_at_floor"] <= 0.2 * 1.1 + 0.01, f
    assert f["nr_throttled_delta"] > 0, f
    assert f["agent_rc"] == 0 and f["restored"] == f["original"] == UNLIMITED, f


def _stat(text: str, key: str) -> int:
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            return int(v)
    raise KeyError(key)


@check
def daemon_reload_lifts_a_cap_written_by_hand(f: Figures) -> None:
    """The bug, with no agent: a quota written into the scope's cpu.max is gone after
    ``systemctl daemon-reload``, and the pod runs free."""
    Path(BATCH.quota_file).write_text("50000 100000")
    f["written"] = BATCH.cpu_max()
    f["cores_capped"] = cores(BATCH, 3)
    sh("systemctl", "daemon-reload")
    f["after_reload"] = BATCH.cpu_max()
    f["cores_after_reload"] = cores(BATCH, 3)
    Path(BATCH.quota_file).write_text(UNLIMITED)
    assert f["after_reload"] == UNLIMITED, f


class Watcher(threading.Thread):
    """Reads a quota file every ``step`` seconds and keeps each change with its time."""

    def __init__(self, path: str, step: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.path, self.step = path, step
        self.changes: list[tuple[float, str]] = []
        self.done = threading.Event()
        self.ended = float("inf")  # when the watch stopped

    def run(self) -> None:
        while not self.done.is_set():
            value = read(self.path)
            if not self.changes or self.changes[-1][1] != value:
                self.changes.append((time.monotonic(), value))
            time.sleep(self.step)
        self.ended = time.monotonic()

    def lifts(self, cap: str, grace: float | None = None) -> list[dict[str, Any]]:
        """Each time the file left ``cap``: what it held, and for how long (None: still
        lifted when the watch ended). ``grace``: a lift still open at the end that began
        less than ``grace`` seconds before it is left out: the agent had no tick to see it
        yet (systemd may re-realize a unit once more after the last reload)."""
        out = []
        for (at, value), nxt in zip(self.changes, [*self.changes[1:], None], strict=True):
            if value == cap:
                continue
            if nxt is None and grace is not None and self.ended - at < grace:
                continue
            out.append({"found": value, "for_s": None if nxt is None else round(nxt[0] - at, 3)})
        return out


@check
def caps_hold_across_daemon_reloads(f: Figures) -> None:
    """The agent holds batch at 0.5 cores (its floor: a rule always above its line) while
    systemd lifts the cap: two daemon-reloads, a set-property on the pod slice, a
    set-property on the scope (a new limit: the new original) and a third reload. Each
    lift is written back by the next tick, counted, logged once for the pod; the state
    never claims a cap the kernel does not hold; the kernel-measured CPU stays at the cap."""
    cap = "50000 100000"
    agent = Agent("hold", policy("cpu_total_usage", "0", 25, 10), bus=False)
    watcher = Watcher(BATCH.quota_file)
    steps: list[dict[str, Any]] = []

    def step(what: str, *cmd: str) -> None:
        started = time.monotonic()
        sh(*cmd)
        entry: dict[str, Any] = {"what": what, "command_s": round(time.monotonic() - started, 1),
                                 "found_after": BATCH.cpu_max()}  # fmt: skip
        wait_for(f"{what}: cap written back", lambda: BATCH.cpu_max() == cap, timeout=120)
        time.sleep(2 * INTERVAL)
        entry["state_cap"], entry["kernel"] = _state_cap(agent), BATCH.cpu_max()
        steps.append(entry)

    try:
        f["seconds_to_cap"] = wait_for("batch capped", lambda: BATCH.cpu_max() == cap, timeout=AGENT_START)
        watcher.start()
        f["cores_before"] = cores(BATCH, 5)
        # the clock before the first read and after the last: the window is never shorter
        # than the one the reads spanned, however long the guest waited between them
        t0 = time.monotonic()
        u0 = BATCH.usage_s()
        step("daemon-reload 1", "systemctl", "daemon-reload")
        step("daemon-reload 2", "systemctl", "daemon-reload")
        used = BATCH.usage_s() - u0
        window = time.monotonic() - t0
        f["cores_across_reloads"], f["window_s"] = used / window, round(window, 1)
        reloads_lifted = len(watcher.lifts(cap))
        step("set-property CPUWeight=50 on the pod slice", "systemctl", "set-property",
             "--runtime", pod_slice("besteffort", BATCH_UID), "CPUWeight=50")  # fmt: skip
        step("set-property CPUQuota=150% on the scope", "systemctl", "set-property", "--runtime",
             scope(BATCH_CID), "CPUQuota=150%")  # fmt: skip
        step("daemon-reload 3", "systemctl", "daemon-reload")
        f["cores_after"] = cores(BATCH, 5)
        metrics = agent.metrics()
        f["reverted_total"] = metrics.get('waterline_caps_reverted_total{control="cpu_quota"}')
        f["cap_metric"] = metrics.get('waterline_pod_cpu_cap_cores{namespace="vm",pod="batch"}')
    finally:
        watcher.done.set()
        f["agent_rc"] = agent.stop()
        f["longest_tick_s"] = _longest_tick(agent)
        f["steps"] = steps
    f["lifts"] = lifts = watcher.lifts(cap)
    f["released"] = BATCH.cpu_max()
    logged = [e for e in agent.events() if e.get("code") in ("cap-lifted", "cap-lifted-forgotten")]
    f["lift_log_lines"] = len(logged)
    # A reload's lift can be shorter than the watcher's poll (the agent's tick wrote the cap
    # back first: a suite run saw 1 of 2 reload lifts with 4 reverts counted), so the watcher
    # must see one, and the agent's count must cover every lift the watcher saw.
    assert reloads_lifted >= 1, ("a daemon-reload lifts the cap", lifts)
    assert f["reverted_total"] is not None and f["reverted_total"] >= len(lifts) >= 2, f
    # Written back by the next tick: no lift outlasts an interval plus the longest tick.
    assert all(x["for_s"] is not None and x["for_s"] <= INTERVAL + f["longest_tick_s"] + 0.5
               for x in lifts), f  # fmt: skip
    assert all(x["state_cap"] == 0.5 and x["kernel"] == cap for x in steps), steps
    # cores_across_reloads is bounded by the lifts in tests/vm/test_guest.py (a fixed 1.1x
    # here failed a cold CI run: lifts of 0.91 and 0.93 s in 8 s let batch take 0.59 core)
    assert f["lift_log_lines"] == 1, f
    assert f["released"] == "150000 100000", f  # the new limit, not the first original


def _longest_tick(agent: Agent) -> float:
    """An upper bound of the agent's longest tick, from its log: a tick that overran by
    ``skipped`` intervals took at most ``skipped + 1`` of them."""
    skipped = [int(e.get("skipped", 0)) for e in agent.events()
               if e.get("code") == "tick-overran"]  # fmt: skip
    return (max(skipped, default=0) + 1) * INTERVAL


def _state_cap(agent: Agent) -> float | None:
    try:
        pods = json.loads((agent.state / "cpu-quota.json").read_text())["pods"]
    except (OSError, ValueError, KeyError):
        return None
    record = pods.get(BATCH_UID)
    return None if record is None else record["containers"]["main"]["cap"]


@check
def systemd_property_holds_across_reload(f: Figures) -> None:
    """The other way (not taken, docs/vm.md): a cap held as the unit's own property
    (``set-property --runtime CPUQuota=``) survives daemon-reload."""
    scratch = Pod("scratch", "besteffort", SCRATCH_UID, SCRATCH_CID, loops=1)
    sh("systemctl", "set-property", "--runtime", scope(SCRATCH_CID), "CPUQuota=20%")
    f["set"] = scratch.cpu_max()
    sh("systemctl", "daemon-reload")
    f["after_reload"] = scratch.cpu_max()
    sh("systemctl", "set-property", "--runtime", scope(SCRATCH_CID), "CPUQuota=")
    f["reset"] = scratch.cpu_max()
    sh("systemctl", "stop", scope(SCRATCH_CID))
    assert f["set"] == f["after_reload"] == "20000 100000" and f["reset"] == UNLIMITED, f


def isolation_policy(burst_percent: int) -> list[dict[str, Any]]:
    """A policy with no rule: BestEffort pods idle, the latency-critical pods given burst."""
    return [{"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
             "metadata": {"name": "vm-colocated"},
             "spec": {"cpuIsolation": {"idle": {}, "burst": {"quotaPercent": burst_percent}}}}]  # fmt: skip


@check
def idle_and_burst_held_across_daemon_reload(f: Figures) -> None:
    """Issue 24 on systemd's own units: the agent marks batch's pod slice idle
    (``cpu.idle = 1``) and gives web's scope burst (``cpu.max.burst``, 50% of the
    ``CPUQuota=150%`` set on it); a daemon-reload's effect on each is recorded, and what it
    reverted is written back at the next tick and counted
    (``waterline_caps_reverted_total{control="cpu_idle" | "cpu_burst"}``); on exit the
    release puts back exactly what was there: ``cpu.idle`` 0 and the slice's own weight
    (50, set as a property by the caps check, not the kernel's default 100), burst 0."""
    idle_file, weight_file = f"{BATCH.path}/cpu.idle", f"{BATCH.path}/cpu.weight"
    burst_file = f"{WEB.container}/cpu.max.burst"
    if not os.path.exists(f"{CG}/{idle_file}") or not os.path.exists(f"{CG}/{burst_file}"):
        f["kernel_files"] = False  # an older kernel: the class is not offered, said once
        return
    # web gets a limit of 1.5 cores, in its scope's cpu.max as runc writes it and in its
    # spec (burst is for pods with a quota to borrow from)
    sh("systemctl", "set-property", "--runtime", scope(WEB_CID), "CPUQuota=150%")
    pods_file = WORK / "objects" / "pods.json"
    pods_before = pods_file.read_text()
    limited = WEB.manifest({"qos.waterline.io/latency-critical": "true"},
                           {"requests": {"cpu": "500m"}, "limits": {"cpu": "1500m"}}, "Burstable")
    pods_file.write_text(json.dumps([BATCH.manifest({}, {}, "BestEffort"), limited]))
    f["original"] = {"idle": read(idle_file), "weight": read(weight_file), "burst": read(burst_file),
                     "web_cpu_max": read(f"{WEB.container}/cpu.max")}  # fmt: skip
    want_burst = "75000"
    agent = Agent("isolation", isolation_policy(50), bus=False)
    watcher = Watcher(f"{CG}/{idle_file}")
    try:
        f["seconds_to_idle"] = wait_for("batch idle", lambda: read(idle_file) == "1", timeout=AGENT_START)
        wait_for("web given burst", lambda: read(burst_file) == want_burst, timeout=120)
        f["set"] = {"idle": read(idle_file), "weight_while_idle": read(weight_file),
                    "burst": read(burst_file)}  # fmt: skip
        f["cores_idle"] = {"batch": cores(BATCH, 5)}
        watcher.start()
        reloads = []
        for _ in range(2):
            sh("systemctl", "daemon-reload")
            after = {"idle": read(idle_file), "weight": read(weight_file), "burst": read(burst_file)}
            wait_for("idle written back", lambda: read(idle_file) == "1", timeout=120)
            wait_for("burst written back", lambda: read(burst_file) == want_burst, timeout=120)
            reloads.append(after)
        f["after_reloads"] = reloads
        time.sleep(2 * INTERVAL)
        metrics = agent.metrics()
        f["reverted"] = {c: metrics.get(f'waterline_caps_reverted_total{{control="{c}"}}')
                         for c in ("cpu_idle", "cpu_burst")}  # fmt: skip
        f["isolated_pods"] = {c: metrics.get(f'waterline_isolated_pods{{cpu_class="{c}"}}')
                              for c in ("idle", "burst")}  # fmt: skip
    finally:
        watcher.done.set()
        f["agent_rc"] = agent.stop()
        f["longest_tick_s"] = _longest_tick(agent)
        pods_file.write_text(pods_before)
    watcher.join(5)
    f["idle_lifts"] = watcher.lifts("1", grace=INTERVAL + f["longest_tick_s"] + 0.5)
    f["released"] = {"idle": read(idle_file), "weight": read(weight_file), "burst": read(burst_file)}
    logged = [e for e in agent.events() if e.get("code") == "mark-reverted"]
    f["revert_log_lines"] = len(logged)
    sh("systemctl", "set-property", "--runtime", scope(WEB_CID), "CPUQuota=")
    assert f["set"]["idle"] == "1" and f["set"]["burst"] == want_burst, f
    # systemd 252 writes cpu.idle 0 at each daemon-reload (it knows CPUWeight=idle), and
    # leaves cpu.max.burst alone (it has no property for it)
    # The agent's count is the evidence for each reload (it reads the mark back every
    # tick); the watcher, polling, can miss a lift the agent wrote back between two polls
    # (seen in CI on 2026-11-26: 2 reverts counted, 1 lift seen), so it must see one.
    assert (f["reverted"]["cpu_idle"] or 0) >= max(len(reloads), len(f["idle_lifts"])), (
        "each daemon-reload lifts the idle mark, and the agent writes it back", f)
    assert len(f["idle_lifts"]) >= 1, ("a lift seen from outside the agent", f)
    lifted_burst = sum(1 for r in reloads if r["burst"] != want_burst)
    assert (f["reverted"]["cpu_burst"] or 0) >= lifted_burst, f
    assert f["revert_log_lines"] == 1, f  # once for the pod
    assert all(x["for_s"] is not None and x["for_s"] <= INTERVAL + f["longest_tick_s"] + 0.5
               for x in f["idle_lifts"]), f  # fmt: skip
    assert f["agent_rc"] == 0, f
    assert f["released"] == {"idle": "0", "weight": f["original"]["weight"], "burst": f["original"]["burst"]}, f


def unit_props(unit: str, *names: str) -> dict[str, str]:
    """A unit's own properties, as systemd says them."""
    return dict(zip(names, sh("systemctl", "show", unit, "--value", *(f"-p{n}" for n in names)).splitlines(),
                    strict=True))  # fmt: skip


@check
def systemd_keeps_caps_and_marks_through_a_reload_storm(f: Figures) -> None:
    """Issue 30: with systemd's bus reachable the agent sets batch's cap as its scope's
    runtime property (``CPUQuotaPerSecUSec``) and the idle mark as its pod slice's
    ``CPUWeight=idle``; web's burst stays a direct write (no property). Under load, a storm
    of daemon-reloads and ``set-property`` calls on the slice and the scope lifts none of
    them (a watcher polling every 20 ms), no revert is counted; on exit the release gives
    every file and every unit property back exactly, and a reload after it re-imposes nothing."""
    cap, want_burst, reloads_wanted, budget = "50000 100000", "75000", 20, 600.0
    batch_scope, batch_slice = scope(BATCH_CID), pod_slice("besteffort", BATCH_UID)
    # The units' own values, as the kubelet would have set them: a 1.5-core limit on
    # batch's scope, weight 50 on its slice, 1.5 cores on web's scope (burst borrows from it)
    sh("systemctl", "set-property", "--runtime", batch_scope, "CPUQuota=150%")
    sh("systemctl", "set-property", "--runtime", batch_slice, "CPUWeight=50")
    sh("systemctl", "set-property", "--runtime", scope(WEB_CID), "CPUQuota=150%")
    files = {"cap": BATCH.quota_file, "idle": f"{CG}/{BATCH.path}/cpu.idle",
             "weight": f"{CG}/{BATCH.path}/cpu.weight", "burst": f"{CG}/{WEB.container}/cpu.max.burst"}
    props = {batch_scope: ("CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec"), batch_slice: ("CPUWeight",)}
    f["original"] = {k: read(v) for k, v in files.items()}
    f["original_props"] = {u: unit_props(u, *n) for u, n in props.items()}
    pods_file = WORK / "objects" / "pods.json"
    pods_before = pods_file.read_text()
    limited = WEB.manifest({"qos.waterline.io/latency-critical": "true"},
                           {"requests": {"cpu": "500m"}, "limits": {"cpu": "1500m"}}, "Burstable")
    pods_file.write_text(json.dumps([BATCH.manifest({}, {}, "BestEffort"), limited]))
    rules = policy("cpu_total_usage", "0", 25, 10)
    rules[0]["spec"]["cpuIsolation"] = {"idle": {}, "burst": {"quotaPercent": 50}}
    agent = Agent("systemd", rules)
    held = {"cap": cap, "idle": "1", "burst": want_burst}
    watchers = {k: Watcher(files[k], step=0.02) for k in held}
    steps: list[dict[str, Any]] = []
    try:
        f["seconds_to_hold"] = wait_for("cap, idle and burst in force", lambda: all(
            read(files[k]) == v for k, v in held.items()), timeout=AGENT_START)  # fmt: skip
        time.sleep(2 * INTERVAL)
        f["props_held"] = {u: unit_props(u, *n) for u, n in props.items()}
        for w in watchers.values():
            w.start()
        f["cores_before"] = cores(BATCH, 5)
        u0, t0 = BATCH.usage_s(), time.monotonic()
        commands = [("systemctl", "daemon-reload")] * reloads_wanted
        commands[5:5] = [("systemctl", "set-property", "--runtime", batch_slice, "MemoryAccounting=yes")]
        commands[12:12] = [("systemctl", "set-property", "--runtime", batch_scope, "MemoryAccounting=yes")]
        for cmd in commands:
            if time.monotonic() - t0 > budget:
                break
            started = time.monotonic()
            sh(*cmd)
            steps.append({"what": " ".join(cmd[1:3]), "command_s": round(time.monotonic() - started, 2),
                          **{k: read(files[k]) for k in held}})  # fmt: skip
            time.sleep(max(0.0, 3.0 - (time.monotonic() - started)))  # 20 reloads in 60 s at most
        f["storm_s"] = round(time.monotonic() - t0, 1)
        f["cores_across_storm"] = (BATCH.usage_s() - u0) / (time.monotonic() - t0)
        time.sleep(2 * INTERVAL)
        metrics = agent.metrics()
        f["reverted"] = {c: metrics.get(f'waterline_caps_reverted_total{{control="{c}"}}')
                         for c in ("cpu_quota", "cpu_idle", "cpu_burst")}  # fmt: skip
        f["through_systemd"] = metrics.get("waterline_cgroup_writes_through_systemd")
    finally:
        for w in watchers.values():
            w.done.set()
        f["agent_rc"] = agent.stop()
        f["longest_tick_s"] = _longest_tick(agent)
        f["steps"] = steps
        pods_file.write_text(pods_before)
    for w in watchers.values():
        w.join(5)
    f["reloads"] = sum(1 for s in steps if s["what"].startswith("daemon-reload"))
    f["lifts"] = {k: w.lifts(held[k]) for k, w in watchers.items()}
    f["released"] = {k: read(v) for k, v in files.items()}
    f["released_props"] = {u: unit_props(u, *n) for u, n in props.items()}
    sh("systemctl", "daemon-reload")  # the units' own values only: nothing of the agent's left
    f["after_release_reload"] = {k: read(v) for k, v in files.items()}
    f["events"] = [e.get("code") for e in agent.events() if str(e.get("code", "")).startswith("systemd-")]
    sh("systemctl", "set-property", "--runtime", scope(WEB_CID), "CPUQuota=")
    assert f["through_systemd"] == 1.0 and "systemd-writes-on" in f["events"], f
    assert f["props_held"][batch_scope]["CPUQuotaPerSecUSec"] == "500ms", f
    assert f["props_held"][batch_slice]["CPUWeight"] == "idle", f
    assert f["reloads"] >= 10, f
    assert all(not lifts for lifts in f["lifts"].values()), f  # 0 ms lifted
    assert f["reverted"] == {"cpu_quota": 0.0, "cpu_idle": 0.0, "cpu_burst": 0.0}, f
    assert f["cores_across_storm"] <= 0.5 * 1.1, f
    assert f["agent_rc"] == 0, f
    assert f["released"] == f["original"] == f["after_release_reload"], f
    assert f["released_props"] == f["original_props"], f


# -- running them -----------------------------------------------------------------------


def main() -> int:
    """Every check, or those named after OUT (``guest_checks.py OUT NAME...``: a developer
    running one new check in a boot of its own)."""
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[2:])
    results: dict[str, Any] = {}

    def save() -> None:
        tmp = OUT / "results.json.tmp"
        tmp.write_text(json.dumps(results, indent=1, default=str))
        tmp.replace(OUT / "results.json")

    started = time.monotonic()
    try:
        setup()
    except Exception as err:  # noqa: BLE001 - reported to the host, which fails every check
        results["setup"] = {"ok": False, "error": f"{type(err).__name__}: {err}",
                            "trace": traceback.format_exc()}  # fmt: skip
        save()
        return 1
    results["setup"] = {"ok": True, "seconds": round(time.monotonic() - started, 1)}
    save()
    watchdog = open(CONSOLE, "w") if os.path.exists(CONSOLE) else sys.stderr  # noqa: SIM115
    for name, fn in CHECKS:
        if only and name not in only:
            continue
        figures: Figures = {}
        start = time.monotonic()
        print(f"{name}: started", flush=True)
        print(f"waterline check {name}: started", file=watchdog, flush=True)
        faulthandler.dump_traceback_later(CHECK_LIMIT, exit=True, file=watchdog)
        try:
            fn(figures)
            outcome: dict[str, Any] = {"ok": True}
        except Exception as err:  # noqa: BLE001
            outcome = {"ok": False, "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()}
        faulthandler.cancel_dump_traceback_later()
        outcome.update(figures=figures, seconds=round(time.monotonic() - start, 1))
        results[name] = outcome
        print(f"{name}: {'ok' if outcome['ok'] else 'FAILED ' + outcome['error']} "
              f"({outcome['seconds']} s)", flush=True)  # fmt: skip
        save()
    for pod in (BATCH, WEB):
        subprocess.run(["systemctl", "stop", scope(pod.cid)], capture_output=True)
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
