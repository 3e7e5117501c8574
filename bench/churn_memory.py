"""Does the node agent keep anything of the pods that went? (issue 32) In-process, with
tracemalloc, the real node code over thousands of ticks of pod churn.

    python -m bench churn-memory                      # cluster-mode source, cgroup v1
    python -m bench churn-memory --source files --cgroup 2
    python -m bench churn-memory --segments 8 --segment-pods 500

What runs is the agent's own node code, built as ``agent.node.wiring`` builds it: the
collectors and the cgroup writers of ``agent.node.host.build_host_parts`` (the pod and
node collectors, the ``lc_*`` reader with its held descriptors, the throttler, the CPU
isolator and the batch limiter with their state files), ``NodeLoop`` with ``NodeBrain``,
the before-tick keeper of the caps (``agent.node.holding``), the metrics publisher (the
exposition rendered every 10 ticks) and, with ``--source cache`` (the default), the
cluster mode's source: the watch cache (``agent.kube.cache.Cache``) fed watch events and a
relist every ``--relist`` ticks, the node view, ``view_source`` with the saved copy of the
objects, and the Events and taint publisher (``ClusterEffects`` with the real
``EventRecorder`` over a sink that answers every write). ``--source files`` is local
mode: ``FileObjectSource`` over an objects file rewritten at each change.

The host is a fake cgroup tree shaped like the kubelet's (cgroupfs driver; v1 or v2,
``devtools.harness.fake_cgroups``) with the isolation files (``cpu.idle``, the burst file,
the weights), and a fake ``/proc`` with the tasks' ``schedstat``; one tick is one second of
a fake clock. On the node: Guaranteed pods labelled latency-critical (their tasks'
run-queue wait read each tick, CPU burst given to them), Burstable pods, and BestEffort
pods of which one is replaced every ``--churn-every`` ticks as the kubelet and the API
server do it: the old pod marked terminating, then its cgroups and tasks gone and the pod
deleted while its successor is added Pending with its pod cgroup, then the successor's
container cgroup made and the pod Running. The BestEffort pods' load swings over and under
a ``cpu_total_usage`` rule every 25 ticks, so they are capped and handed back, put in
the idle class, and deleted while capped.

Measured: tracemalloc's traced bytes (after ``gc.collect()``; traced from the start) at the end of
each segment of ``--segment-pods`` churned pods after ``--warmup`` ticks (by default past
the longest time the agent keeps anything of a gone pod by design: an Events token bucket
drained to 0 refills in 25 x 300 s; until then the caches fill, which is not a leak), and
as many segments of
the same ticks with no churn (the control: what a tick alone leaves); the growth per
segment, scaled to 1,000 churned pods (and to 1,000 ticks for the control), with its 95%
interval over the segments; the allocation sites that grew the most between the end of
warm-up and the end; and the count of live entries in each structure the agent keys by
pod, container, cgroup, task, object or rule, at the end of warm-up and at the end (a
structure that follows the pods has the same count at both).

Verdict against "no growth": **meets** when the interval holds 0 (or lies below it) and
its upper end is under ``--resolution`` bytes per 1,000 pods (default 4 KiB: what this
measures to); **fails** when the interval lies above 0 beyond that; **undecided**
otherwise (an interval too wide to tell).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.flags import Limit, OneLine, check

NODE = "churn-node"
NAMESPACE = "churn"
QOS = "qos.waterline.io/v1alpha1"
LC_LABEL = "qos.waterline.io/latency-critical"
#: t (95%, two-sided) for small degrees of freedom; the normal figure beyond.
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00}  # fmt: skip
SWING = 25  # ticks of high load, then as many of low (a segment is whole swings)


def t95(dof: int) -> float:
    known = [d for d in _T95 if d <= dof]
    return _T95[max(known)] if known else float("inf")


@dataclass
class SimPod:
    """One pod of the simulated node, through its life: pending -> running -> terminating."""

    name: str
    uid: str
    qos: str
    serial: int
    stage: str = "pending"
    since: int = 0
    cid: str = ""
    tids: tuple[int, ...] = ()
    cpu: float = 0.0  # cumulative seconds of its container
    delay: int = 0  # cumulative run delay of its tasks, ns

    @property
    def pod_rel(self) -> str:
        qos = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[self.qos]
        return f"kubepods/{qos}pod{self.uid}"

    @property
    def container_rel(self) -> str:
        return f"{self.pod_rel}/{self.cid}"

    @property
    def lc(self) -> bool:
        return self.qos == "Guaranteed"

    def manifest(self) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        if self.qos == "Guaranteed":
            resources = {"requests": {"cpu": "200m", "memory": "64Mi"},
                         "limits": {"cpu": "200m", "memory": "64Mi"}}
        elif self.qos == "Burstable":
            resources = {"requests": {"cpu": "100m"}}
        meta: dict[str, Any] = {
            "name": self.name, "namespace": NAMESPACE, "uid": self.uid,
            "labels": {"app": self.qos.lower(), **({LC_LABEL: "true"} if self.lc else {})},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"rs-{self.qos.lower()}",
                                 "uid": f"rs-{self.qos.lower()}", "controller": True}],
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "resourceVersion": str(self.serial * 10 + len(self.stage)),
        }  # fmt: skip
        status: dict[str, Any] = {"phase": "Pending" if self.stage == "pending" else "Running",
                                  "qosClass": self.qos, "startTime": "2026-01-01T00:00:00Z"}
        if self.stage != "pending":
            status["containerStatuses"] = [{"name": "main", "containerID": f"containerd://{self.cid}"}]
            status["conditions"] = [{"type": "Ready", "status": "True"}]
        if self.stage == "terminating":
            meta["deletionTimestamp"] = "2026-01-01T01:00:00Z"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"nodeName": NODE, "containers": [{"name": "main", "resources": resources}]},
                "status": status}


def policy_manifests(quiet: bool = False) -> list[dict[str, Any]]:
    """The node's policy: a ``cpu_total_usage`` line the BestEffort pods' swing crosses,
    a wait line, the idle class and burst; ``quiet``: the real-node soak's shape (a line
    never reached, no isolation section: the pods are read, nothing is acted on)."""
    policy, action = _acting_policy()
    if quiet:
        spec = policy["spec"]
        spec.pop("cpuIsolation")
        spec["objectiveEnsurances"][0]["metricRule"]["value"] = "100"
    return [policy, action]


def _acting_policy() -> list[dict[str, Any]]:
    action = {"apiVersion": QOS, "kind": "AvoidanceAction", "metadata": {"name": "churn-throttle"},
              "spec": {"coolDownSeconds": 0, "scope": {"qosClasses": ["BestEffort"]},
                       "throttle": {"cpuThrottle": {"minCPURatio": 5, "stepCPURatio": 10}}}}
    policy = {"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "churn"},
              "spec": {"objectiveEnsurances": [
                  {"name": "cpu", "actionName": "churn-throttle", "avoidanceThreshold": 2,
                   "restoreThreshold": 2, "metricRule": {"name": "cpu_total_usage", "value": "2"}},
                  {"name": "wait", "actionName": "churn-throttle",
                   "metricRule": {"name": "lc_cpu_wait_ratio", "value": "90"}}],
                  "cpuIsolation": {"idle": {}, "burst": {"quotaPercent": 50}}}}  # fmt: skip
    return [policy, action]


def node_manifest() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}, "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}  # fmt: skip


def namespace_manifest() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}}}


class Host:
    """The fake cgroup tree and /proc under ``base``, kept as the kubelet would keep them."""

    def __init__(self, base: Path, version: int) -> None:
        from devtools.harness.fake_cgroups import FakeTree

        self.tree = FakeTree(base / "cg", version)
        self.version = version
        self.cpu_dir = self.tree.root / "cpu" if version == 1 else self.tree.root
        self.proc = base / "proc"
        self.proc.mkdir()
        (self.proc / "stat").write_text("cpu  10 0 10 100 0 0 0 0\n"
                                        + "".join(f"cpu{i} 2 0 2 25 0 0 0 0\n" for i in range(4)))
        (self.proc / "meminfo").write_text("MemTotal: 8000000 kB\nMemFree: 4000000 kB\nInactive(file): 0 kB\n")
        (self.proc / "loadavg").write_text("0.50 0.40 0.30 1/100 1000\n")
        (self.proc / "pressure").mkdir()
        for name in ("cpu", "memory"):
            (self.proc / "pressure" / name).write_text(
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        for rel in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            self.add_cgroup(rel, None)

    def add_cgroup(self, rel: str, quota: str | None) -> None:
        """A cgroup as ``FakeTree.add`` makes one, with the isolation files and an empty
        task list; by string paths (``pathlib`` interns every path component it parses:
        one new interned string a pod, and the interpreter's table of them resizing, is
        the harness's own growth, not the agent's)."""
        root, v1 = str(self.tree.root), self.version == 1
        cpu = f"{root}/cpu/{rel}" if v1 else f"{root}/{rel}"
        acct, mem = (f"{root}/cpuacct/{rel}", f"{root}/memory/{rel}") if v1 else (cpu, cpu)
        for d in {cpu, acct, mem}:
            os.makedirs(d, exist_ok=True)
        files = {f"{cpu}/cpu.idle": "0\n", f"{cpu}/tasks" if v1 else f"{cpu}/cgroup.threads": ""}
        if v1:
            files |= {f"{acct}/cpuacct.usage": "0\n", f"{cpu}/cpu.cfs_quota_us": f"{quota or '-1'}\n",
                      f"{cpu}/cpu.cfs_period_us": "100000\n", f"{cpu}/cpu.shares": "1024\n",
                      f"{cpu}/cpu.cfs_burst_us": "0\n",
                      f"{cpu}/cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\nnr_bursts 0\nburst_time 0\n",
                      f"{mem}/memory.usage_in_bytes": "50000000\n",
                      f"{mem}/memory.stat": "cache 0\nrss 0\ninactive_file 1\ntotal_cache 0\n"
                                            "total_inactive_anon 0\ntotal_inactive_file 1000000\ntotal_active_file 0\n"}
        else:
            files |= {f"{cpu}/cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\nnr_periods 0\n"
                                         "nr_throttled 0\nthrottled_usec 0\n",
                      f"{cpu}/cpu.max": f"{quota or 'max'} 100000\n", f"{cpu}/cpu.weight": "100\n",
                      f"{cpu}/cpu.max.burst": "0\n", f"{cpu}/memory.current": "50000000\n",
                      f"{cpu}/memory.stat": "anon 0\nfile 0\nactive_file 0\ninactive_file 1000000\nslab 0\n"}
        for path, text in files.items():
            _write(path, text)

    def counter(self, rel: str, cpu_seconds: float) -> None:
        """The CPU counter moved (the one file a tick's figures change in; the others as
        ``FakeTree.add`` wrote them)."""
        if self.version == 1:
            path, text = f"{self.tree.root}/cpuacct/{rel}/cpuacct.usage", f"{round(cpu_seconds * 1e9)}\n"
        else:
            path = f"{self.tree.root}/{rel}/cpu.stat"
            text = (f"usage_usec {round(cpu_seconds * 1e6)}\nuser_usec 0\nsystem_usec 0\n"
                    "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
        _write(path, text)

    def remove_cgroup(self, rel: str) -> None:
        root = str(self.tree.root)
        for d in ([f"{root}/{c}/{rel}" for c in ("cpu", "cpuacct", "memory")] if self.version == 1
                  else [f"{root}/{rel}"]):  # fmt: skip
            shutil.rmtree(d, ignore_errors=True)

    def tasks(self, rel: str, tids: tuple[int, ...]) -> None:
        root = str(self.tree.root)
        where = f"{root}/cpu/{rel}/tasks" if self.version == 1 else f"{root}/{rel}/cgroup.threads"
        _write(where, "".join(f"{t}\n" for t in tids))
        for tid in tids:
            os.makedirs(f"{self.proc}/{tid}", exist_ok=True)

    def schedstat(self, tid: int, delay: int) -> None:
        _write(f"{self.proc}/{tid}/schedstat", f"1000 {delay} 10\n")

    def drop_tasks(self, tids: tuple[int, ...]) -> None:
        for tid in tids:
            shutil.rmtree(f"{self.proc}/{tid}", ignore_errors=True)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class NullSink:
    """The Events API, answering every write (``agent.kube.events.EventSink``)."""

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return patch


@dataclass
class Rig:
    """The agent's parts over the fake host, and the simulated node they watch."""

    host: Host
    loop: Any
    parts: Any
    keeper: Any
    metrics: Any
    clock: Any
    source_kind: str
    objects_path: Path
    cache: Any = None
    effects: Any = None
    pods: dict[str, SimPod] = field(default_factory=dict)
    serial: int = 0
    next_tid: int = 1000
    churned: int = 0
    tick_no: int = 0
    relist: int = 600
    quiet: bool = False
    changed: bool = False

    # -- the simulated node ------------------------------------------------------------
    def add_pod(self, qos: str, running: bool) -> SimPod:
        self.serial += 1
        uid = f"{self.serial:08x}-0000-4000-8000-{self.serial:012x}"
        pod = SimPod(f"{qos.lower()}-{self.serial}", uid, qos, self.serial, since=self.tick_no)
        pod.cid = f"{self.serial:064x}"
        if pod.lc:
            pod.tids = (self.next_tid, self.next_tid + 1)
            self.next_tid += 2
        self.pods[pod.name] = pod
        quota = "20000" if qos == "Guaranteed" else None
        self.host.add_cgroup(pod.pod_rel, quota)  # the kubelet makes the pod cgroup first
        self._event("ADDED", pod)
        if running:
            self._run(pod)
        return pod

    def _run(self, pod: SimPod) -> None:
        quota = "20000" if pod.qos == "Guaranteed" else None
        self.host.add_cgroup(pod.container_rel, quota)
        self.host.tasks(pod.container_rel, pod.tids)
        pod.stage, pod.since = "running", self.tick_no
        self._event("MODIFIED", pod)

    def _terminate(self, pod: SimPod) -> None:
        pod.stage, pod.since = "terminating", self.tick_no
        self._event("MODIFIED", pod)

    def _delete(self, pod: SimPod) -> None:
        self.host.remove_cgroup(pod.container_rel)
        self.host.remove_cgroup(pod.pod_rel)
        self.host.drop_tasks(pod.tids)
        del self.pods[pod.name]
        self._event("DELETED", pod)
        self.churned += 1

    def _event(self, kind: str, pod: SimPod) -> None:
        self.changed = True
        if self.cache is not None:
            self.cache.apply("Pod", kind, pod.manifest())

    def advance(self, churn_every: int) -> None:
        """The kubelet's and the API server's part of one second."""
        for pod in list(self.pods.values()):
            if pod.stage == "terminating" and self.tick_no > pod.since:
                self._delete(pod)
            elif pod.stage == "pending" and self.tick_no > pod.since:
                self._run(pod)
        if churn_every and self.tick_no % churn_every == 0:
            running = [p for p in self.pods.values() if p.qos == "BestEffort" and p.stage == "running"]
            if running:
                self._terminate(min(running, key=lambda p: p.serial))
                self.add_pod("BestEffort", running=False)
        high = (self.tick_no // SWING) % 2 == 0
        for pod in self.pods.values():
            if pod.stage == "pending":
                continue
            use = {"Guaranteed": 0.15, "Burstable": 0.05, "BestEffort": 0.4 if high else 0.01}[pod.qos]
            pod.cpu += use
            pod.delay += 50_000_000 if high else 1_000_000
            for rel in (pod.pod_rel, pod.container_rel):
                self.host.counter(rel, pod.cpu)
            for tid in pod.tids:
                self.host.schedstat(tid, pod.delay)
        if self.cache is not None and self.relist and self.tick_no % self.relist == 0:
            self.cache.replace("Pod", [p.manifest() for p in self.pods.values()])
        if self.source_kind == "files" and self.changed:
            self.write_objects()
        self.changed = False

    def write_objects(self) -> None:
        doc = {"objects": [node_manifest(), namespace_manifest(), *policy_manifests(self.quiet),
                           *(p.manifest() for p in self.pods.values())]}  # fmt: skip
        tmp = self.objects_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.objects_path)

    def tick(self, churn_every: int) -> None:
        self.tick_no += 1
        self.clock.t += 1.0
        self.advance(churn_every)
        outcome = self.loop.tick()
        if outcome.error is not None:
            raise RuntimeError(f"tick {self.tick_no} failed: {outcome.error}")
        if self.tick_no % 10 == 0:
            self.metrics.render()


def build(base: Path, version: int, source_kind: str, pods: Mapping[str, int], relist: int,
          quiet: bool = False) -> Rig:
    from agent.kube.cache import Cache
    from agent.kube.events import EventRecorder
    from agent.kube.nodeview import SAVED_KINDS, NodeView
    from agent.metrics import AgentMetrics
    from agent.model.settings import AgentSettings
    from agent.node.dryrun import ReportingEvictor
    from agent.node.holding import HeldKeeper, InOrder
    from agent.node.host import build_host_parts
    from agent.node.incluster import ClusterEffects, view_source
    from agent.node.local import FileObjectSource
    from agent.node.loop import NodeLoop
    from agent.node.publish import MetricsPublisher
    from agent.node.saved import SavedObjects
    from agent.node.tick import NodeBrain
    from agent.serving import Health
    from devtools.harness.fake_cgroups import Clock

    host = Host(base, version)
    clock = Clock(1000.0)
    state = base / "state"
    objects_path = base / "objects.json"
    parts = build_host_parts(str(host.tree.root), str(host.proc), "", str(state), dry_run=False,
                             settings=AgentSettings(), node_cpu="pods", clock=clock)  # fmt: skip
    brain = NodeBrain()
    metrics = AgentMetrics()
    held = [h for h in (parts.limiter, parts.throttler) if h is not None]
    keeper = HeldKeeper(brain, lambda control, n: metrics.caps_reverted.labels(control).inc(n),
                        caps=InOrder(*held))  # fmt: skip
    if parts.isolator is not None:
        parts.isolator.on_reverted = keeper.reverted_mark
    rig = Rig(host, None, parts, keeper, metrics, clock, source_kind, objects_path, relist=relist, quiet=quiet)
    publishers: list[Callable[[Any], None]] = [MetricsPublisher(metrics, Health(stale_after=30.0))]
    if source_kind == "cache":
        cache = Cache(keep_raw=(*SAVED_KINDS, "DaemonSet"))
        rig.cache = cache
        for kind in ("Pod", "Node", "Namespace", "PodDisruptionBudget", "NodeQOSEnsurancePolicy",
                     "AvoidanceAction", "ConfigMap", "DaemonSet"):  # fmt: skip
            cache.set_reachable(kind, True)
        cache.replace("Node", [node_manifest()])
        cache.replace("Namespace", [namespace_manifest()])
        cache.replace("NodeQOSEnsurancePolicy", policy_manifests(quiet)[:1])
        cache.replace("AvoidanceAction", policy_manifests(quiet)[1:])
        for kind in ("Pod", "PodDisruptionBudget", "ConfigMap", "DaemonSet"):
            cache.replace(kind, [])
        view = NodeView(cache, NODE)
        source = view_source(view, SavedObjects(str(state), NODE, clock=clock))
        recorder = EventRecorder(NullSink(), "waterline-agent", host=NODE, clock=clock)
        rig.effects = ClusterEffects(NODE, recorder, lambda wanted: False, lambda: True)
        publishers.append(rig.effects)
    for qos, n in pods.items():
        for _ in range(n):
            rig.add_pod(qos, running=True)
    if source_kind == "files":
        rig.write_objects()
        source = FileObjectSource([str(objects_path)], NODE, str(host.proc))
    rig.loop = NodeLoop(
        node_name=NODE, source=source, collector=parts.collector, brain=brain,
        actuators=(ReportingEvictor("churn-memory: evictions are not performed"), *parts.actuators),
        publishers=publishers, evictions_performed=False, clock=clock, monotonic=clock,
        before_tick=[keeper],
    )  # fmt: skip
    return rig


def live_entries(rig: Rig) -> dict[str, int]:
    """The entries of every structure the agent keys by pod, container, cgroup, task,
    object or rule (what a leak would be in), read where they live."""
    from agent.model import quantity

    p = rig.parts
    pod_stats, waits = p.collector.pod_stats, p.collector.interference.waits
    state = rig.loop.brain.state
    out = {
        "layout pods": len(pod_stats.layout._pods),
        "layout whole": len(pod_stats.layout._whole),
        "pod collector cgroups": len(pod_stats._cgroups),
        "pod collector fds": pod_stats.open_files,
        "lc reader pods": len(waits._seen),
        "lc reader tasks": sum(len(s.delays) for s in waits._seen.values()),
        "lc reader fds": waits.open_files,
        "fd budget held": pod_stats.budget.held,
        "once-log (pods)": p.collector.pod_log.remembered,
        "once-log (node)": p.collector.node_log.remembered,
        "caps keeper said": len(rig.keeper._said),
        "state trackers": len(state.trackers),
        "state caps": len(state.throttled),
        "state evicting": len(state.evicting),
        "state unanswered": len(state.unanswered),
        "state idle/burst/quota": len(state.idle) + len(state.burst) + len(state.quota),
        "state batch limits": len(state.limited),
        "quota file pods": len(p.throttler.state.pods()) if p.throttler else 0,
        "isolation file pods": len(p.isolator.state.pods()) if p.isolator else 0,
        "batch limits file pods": len(p.limiter.state.pods()) if p.limiter else 0,
        "quantity cache": len(quantity._cache),
        "process fds": len(os.listdir("/proc/self/fd")),
        "metrics lines": rig.metrics.render().count(b"\n"),
    }
    if rig.cache is not None:
        out["cache pods"] = len(rig.cache.records("Pod"))
        out["cache raw pods"] = len(rig.cache.raws("Pod"))
        out["events remembered"] = rig.effects.recorder.remembered
        out["effects rules"] = len(rig.effects.seen) + len(rig.effects.reported) + len(rig.effects.restored_at)
    return out


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@dataclass(frozen=True)
class Growth:
    per_segment: list[float]
    scale: float  # segment -> the unit reported

    @property
    def interval(self) -> tuple[float, float, float]:
        values = [v * self.scale for v in self.per_segment]
        mean = statistics.fmean(values)
        if len(values) < 2:
            return mean, -math.inf, math.inf
        half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
        return mean, mean - half, mean + half


def verdict(growth: Growth, resolution: float) -> str:
    _, low, high = growth.interval
    if low > 0 and high > resolution:
        return "fails"
    if high < resolution and low <= 0 or high <= 0:
        return "meets"
    return "undecided"


def _run_segments(rig: Rig, segments: int, ticks: int, churn_every: int) -> list[float]:
    sizes = [traced()]
    for _ in range(segments):
        for _ in range(ticks):
            rig.tick(churn_every)
        sizes.append(traced())
    return [b - a for a, b in zip(sizes, sizes[1:], strict=False)]


def _top(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int) -> list[str]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    filters = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
    stats = after.filter_traces(filters).compare_to(before.filter_traces(filters), "traceback")
    out = []
    for stat in sorted(stats, key=lambda s: s.size_diff, reverse=True)[:n]:
        if stat.size_diff <= 0:
            break
        newest_first = list(reversed(stat.traceback))
        frames = [f for f in newest_first if f.filename.startswith(here)] or newest_first
        where = " <- ".join(f"{os.path.relpath(f.filename, here)}:{f.lineno}" for f in frames[:3])
        out.append(f"  {stat.size_diff:+8,d} B  {stat.count_diff:+5d} blocks  {where}")
    return out


def _quiet_logging() -> None:
    """The agent's own log configuration, writing to /dev/null (the processors still run)."""
    from agent.logs import configure_logging

    configure_logging("json", "info", open(os.devnull, "w"))  # noqa: SIM115 - for the process


def run(args: argparse.Namespace) -> int:
    _quiet_logging()
    pods = {"Guaranteed": args.lc_pods, "Burstable": args.burstable_pods, "BestEffort": args.churning_pods}
    ticks = math.ceil(args.segment_pods * args.churn_every / (2 * SWING)) * 2 * SWING
    segment_pods = ticks // args.churn_every
    warmup = math.ceil(args.warmup / (2 * SWING)) * 2 * SWING
    base = Path(tempfile.mkdtemp(prefix="churn-memory-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    # Traced from the start: a container made before tracing and resized after would
    # count its whole new table as growth, its old one never as freed.
    tracemalloc.start(args.frames)
    try:
        rig = build(base, args.cgroup, args.source, pods, args.relist, args.quiet)
        started = time.monotonic()
        for _ in range(warmup):
            rig.tick(args.churn_every)
        before_counts, before_snap = live_entries(rig), tracemalloc.take_snapshot()
        churned0 = rig.churned
        churn = Growth(_run_segments(rig, args.segments, ticks, args.churn_every), 1000 / segment_pods)
        churned = rig.churned - churned0
        mid_snap = tracemalloc.take_snapshot()
        after_counts = live_entries(rig)
        control = Growth(_run_segments(rig, args.segments, ticks, 0), 1000 / ticks)
        elapsed = time.monotonic() - started
    finally:
        tracemalloc.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(f"churn-memory: source {args.source}, cgroup v{args.cgroup}{', quiet' if args.quiet else ''}, "
          f"{sum(pods.values())} pods "
          f"({args.lc_pods} Guaranteed latency-critical, {args.burstable_pods} Burstable, "
          f"{args.churning_pods} BestEffort churning), one replaced every {args.churn_every} ticks; "
          f"warm-up {warmup} ticks, then {args.segments} segments of {ticks} ticks "
          f"({churned} pods churned) and {args.segments} of {ticks} ticks without churn; "
          f"{rig.tick_no} ticks in {elapsed:.0f} s")  # fmt: skip
    for name, growth, unit in (("churn", churn, "1,000 churned pods"), ("no churn", control, "1,000 ticks")):
        mean, low, high = growth.interval
        raw = ", ".join(f"{v:+,.0f}" for v in growth.per_segment)
        print(f"  {name}: {mean:+,.0f} B per {unit} (95% {low:+,.0f} .. {high:+,.0f}; segments: {raw} B) "
              f"-> {verdict(growth, args.resolution)} (no growth, resolution {args.resolution:,.0f} B)")
    print("  live entries, end of warm-up -> end of the churn segments:")
    for key, value in before_counts.items():
        mark = "" if after_counts[key] == value else "   <- changed"
        print(f"    {key:<28} {value:>6} -> {after_counts[key]:>6}{mark}")
    print(f"  top growing allocation sites over the churn segments ({churned} pods):")
    for line in _top(before_snap, mid_snap, args.top) or ["    none"]:
        print(line)
    return 0 if verdict(churn, args.resolution) != "fails" else 1


#: The flags and what each must be (fewer than 2 segments give no interval; no churning
#: pod, nothing to measure; tracemalloc keeps 1 to 65,535 frames).
LIMITS: tuple[Limit, ...] = (
    ("--lc-pods", lambda v: v >= 0, "must be >= 0"),
    ("--burstable-pods", lambda v: v >= 0, "must be >= 0"),
    ("--churning-pods", lambda v: v >= 1, "must be >= 1"),
    ("--churn-every", lambda v: v >= 1, "must be >= 1 tick"),
    ("--segment-pods", lambda v: v >= 1, "must be >= 1"),
    ("--segments", lambda v: v >= 2, "must be >= 2 (an interval needs two)"),
    ("--warmup", lambda v: v >= 0, "must be >= 0 ticks"),
    ("--relist", lambda v: v >= 1, "must be >= 1 tick"),
    ("--frames", lambda v: 1 <= v <= 65535, "must be 1..65535"),
    ("--top", lambda v: v >= 0, "must be >= 0"),
    ("--resolution", lambda v: v >= 0, "must be >= 0 bytes"),
)


def main(argv: list[str] | None = None) -> None:
    parser = OneLine("churn-memory", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--source", choices=("cache", "files"), default="cache",
                        help="cluster mode's watch cache (default) or local mode's objects file")
    parser.add_argument("--cgroup", type=int, choices=(1, 2), default=1, help="the fake tree's cgroup version")
    parser.add_argument("--lc-pods", type=int, default=6)
    parser.add_argument("--burstable-pods", type=int, default=6)
    parser.add_argument("--churning-pods", type=int, default=12)
    parser.add_argument("--churn-every", type=int, default=2, help="ticks between two pods replaced")
    parser.add_argument("--segment-pods", type=int, default=250, help="pods churned a segment")
    parser.add_argument("--segments", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=7600,
                        help="ticks before the first measure (past 7,500 s: the longest an "
                             "Events bucket of a gone pod is kept, burst 25 x 300 s to refill)")
    parser.add_argument("--quiet", action="store_true",
                        help="the real-node soak's shape: no line reached, no isolation (nothing acted on)")
    parser.add_argument("--relist", type=int, default=600, help="ticks between two relists of the pods (cache)")
    parser.add_argument("--frames", type=int, default=4, help="tracemalloc frames kept a trace")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--resolution", type=float, default=4096.0,
                        help="bytes per 1,000 pods (or ticks) below which growth counts as none")
    args = parser.parse_args(argv or [])
    check(parser, args, LIMITS)  # before a tree is made or a tick run
    raise SystemExit(run(args))


if __name__ == "__main__":
    main()
