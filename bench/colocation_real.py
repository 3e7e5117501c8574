"""``python -m bench colocation --real``: the co-location benchmark on the real node.

The same protocol, statistics and records as the hand-made tree (``bench.colocation``
drives both through its ``Backend``); here the pods are pods:

* **The node.** This host's real node (``make cluster`` + ``make node``, or the one the
  e2e tests run) when one runs: its cluster is used as it is. Otherwise the run starts
  both (a control plane in a temporary folder, this host joined as its node with the
  project's image and its base loaded from archives, ``devtools.cluster``) and stops them
  at its end. Waterline is what a user of this host installs (``kubectl apply -k
  hack/node/overlay``: deploy/ with the cgroup v1 + cgroupfs component, the project's
  image); installed by the run where it is not, and removed again after.
* **The pods** are pods the kubelet starts, on the project's image (its Python; nothing
  pulled: the node reaches no registry), running ``bench.colocation_pod`` from a
  ConfigMap: the case's web pod (Guaranteed 0.6 core; Burstable 0.2 requested, 0.6
  limit; near-limit, sized), the batch pods ``batch-1``, ``batch-2`` (Burstable, 0.15 core
  requested) and ``batch-3`` (BestEffort), whose demand the run steps up for a window and
  down after it, over a control connection. A run with the ``batch-capacity`` window also
  has the batch-capacity pods ``cap-1..3`` (``cap_manifests``), which carry the batch
  demand in that window only (see "Batch capacity" below). Every pod's process pins itself to the bench
  CPU: the node's pods contend on one CPU as in the hand-made tree, with the kubelet's own
  ``cpu.shares`` and quotas. The node's processes outside kubepods (kubelet, containerd,
  the control plane) are moved off the bench CPU for the run, as reserved system CPUs
  keep them (``bench.bench_cpu``; ``--share-cpu``: left where the kernel puts them, as
  the runs before it); the agent, a pod, runs where the kernel puts it. What others
  still take of the bench CPU is recorded in every window ("others %").
* **The load** comes from the host, outside kubepods and off the bench CPU: an open-loop
  Poisson generator (``colocation_pod client``) pinned to the other CPUs, reaching the web
  pod over its pod IP; a response time is its answer's arrival minus its scheduled
  arrival.
* **The strategies** are policies applied through the API (``kubectl apply``: a
  ``NodeQOSEnsurancePolicy`` and its ``AvoidanceAction``, their scopes narrowed to the
  run's namespace so the agent's own pods are never a batch pod) at the start of a
  window's warm-up, deleted at its end; the next window waits until the agent has given
  every mark and cap back (the kubelet's files as they were) before its pause. The
  reference strategies that reshape the engine's decision in process (``floor-all``,
  ``one-per-tick``) cannot go through the API and are refused here.
* **The figures**: the kernel's, read on the host from the pods' cgroups as in the tree
  (``bench.colocation.Kernel``; a cap pod's in ``kubepods/besteffort/pod<uid>``), and the
  agent's, from its ``/metrics`` at its pod IP each tick (with the batch CPU the node
  publishes, and any cap).
* **No pod lost silently**: after every window the run's pods must be the ones it made
  (same uid), Running, not being deleted; a pod evicted or ended (by the agent, the
  kubelet or the kernel's OOM killer) ends the run with an error naming it.

Batch capacity (docs/batch-capacity.md). A cap pod requests and limits
``waterline.io/batch-cpu`` (its contended demand, in millicores) and
``waterline.io/batch-memory`` and no cpu or memory: BestEffort to Kubernetes, its CFS
quota and memory limit written by the agent from those limits whatever the policies say
(``engine/phases/batch_limits.py``: handed back only by an uninstall or ``waterline
agent release``). The life cycle, as the agent's code has it:

* at setup, the capacity policy (``bench.colocation_strategies.capacity_policy``) is
  applied; once the node's allocatable shows ``batch-cpu`` and ``batch-memory`` for all
  three (the kubelet admits a pod's extended resources against it, even with
  ``nodeName`` set), the cap pods are made and run; once the agent has written their
  quota from their limits, the policy is deleted (the node withdraws its figures, the
  idle marks and any squeeze cap are handed back: ``batch_squeeze`` hands its caps back
  when nothing is published) and what their files hold then, their batch quota in
  force, is their *baseline*: theirs, as a ``cpu`` limit is a Burstable pod's;
* a ``batch-capacity`` window applies the policy at the start of its warm-up (the cap
  pods in the idle class, the capacity published), steps the cap pods up to their
  demand (the other batch pods stay at 0), and after it deletes the policy and waits,
  as every window does, until every file is back at its baseline;
* every other window's scopes leave the cap pods out (``CAP_LABEL``); they sit at 0
  demand, under their own quota.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.model.batch import BATCH_CPU, BATCH_MEMORY
from bench.bench_cpu import BenchCpu
from bench.colocation import (
    SIZING,
    SIZING_CASE,
    AgentTick,
    Kernel,
    Window,
    progress,
)
from bench.colocation_cases import Case
from bench.colocation_protocol import Sizing
from bench.colocation_strategies import CAP_LABEL, CAP_MEMORY_BYTES, CONTENDED

ROOT = Path(__file__).resolve().parent.parent
OVERLAY = ROOT / "hack" / "node" / "overlay"
WEB_PORT, BATCH_PORT, AGENT_PORT = 8080, 8081, 9108
CODE = "colocation-code"
AGENT = "app.kubernetes.io/name=waterline-agent"
SYSTEM = "waterline-system"
LC_LABEL = "qos.waterline.io/latency-critical"
#: What a pod's requests and limits are, by its role (cpu in cores; memory for the kubelet).
BATCH_REQUEST = 0.15
MEMORY = "64Mi"
#: The cpu controller's files the agent may change in a pod's cgroups; a window starts
#: only once they are as the kubelet wrote them.
CPU_FILES = ("cpu.cfs_quota_us", "cpu.shares", "cpu.idle", "cpu.cfs_burst_us")
#: Strategies the deployed agent cannot run (their hook changes the engine's decision).
IN_PROCESS_ONLY = ("floor-all", "one-per-tick")
RELEASE_TIMEOUT = 90.0


def unsupported(strategies: str | None) -> list[str]:
    return sorted(set((strategies or "").split(",")) & set(IN_PROCESS_ONLY))


def preflight() -> tuple[str, str] | str:
    """The v1 cpu and cpuacct roots (the pods' cgroups are read there), or why no real
    node can run here."""
    if os.geteuid() != 0:
        return "needs root: the real node and the pods' cgroups"
    from agent.defaults import CGROUP_ROOT, PROC_ROOT
    from devtools.demo.cgroups import v1_roots

    try:
        cpu, acct, _memory = v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        return str(err)
    if running_node() is None:
        from devtools.cluster.node import missing_prerequisites
        from devtools.harness.cluster import BIN

        problems = missing_prerequisites(BIN)
        if problems:
            return "no real node runs here and none can start: " + "; ".join(problems)
    return cpu, acct


# -- the pods' cgroups -------------------------------------------------------------------


@dataclass(frozen=True)
class RealPod:
    """One pod on the real node, as the API server shows it, and its cgroups (cgroupfs
    driver, cgroup v1: ``kubepods[/burstable|/besteffort]/pod<uid>/<container id>``)."""

    name: str
    uid: str
    qos: str
    container: str
    ip: str
    cpu_root: str
    acct_root: str

    @property
    def rel(self) -> str:
        qos = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}[self.qos]
        return "/".join(p for p in ("kubepods", qos, f"pod{self.uid}") if p)

    def cpu_seconds(self) -> float:
        with open(os.path.join(self.acct_root, self.rel, "cpuacct.usage"), encoding="ascii") as f:
            return int(f.read()) / 1e9

    def cpu_stat(self) -> str:
        with open(os.path.join(self.cpu_root, self.rel, self.container, "cpu.stat"), encoding="ascii") as f:
            return f.read()

    def server_pid(self) -> int | None:
        with open(os.path.join(self.cpu_root, self.rel, self.container, "cgroup.procs"), encoding="ascii") as f:
            pids = [int(p) for p in f.read().split()]
        return pids[0] if pids else None

    def cpu_files(self) -> dict[str, str]:
        """The cpu controller's files the agent may change, of the pod's cgroup and its
        container's."""
        out = {}
        for rel in (self.rel, f"{self.rel}/{self.container}"):
            for name in CPU_FILES:
                path = os.path.join(self.cpu_root, rel, name)
                with contextlib.suppress(OSError), open(path, encoding="ascii") as f:
                    out[f"{rel}/{name}"] = f.read().strip()
        return out


def real_pod(manifest: Mapping[str, Any], cpu_root: str, acct_root: str) -> RealPod:
    (status,) = manifest["status"]["containerStatuses"]
    return RealPod(manifest["metadata"]["name"], manifest["metadata"]["uid"], manifest["status"]["qosClass"],
                   status["containerID"].split("://", 1)[1], manifest["status"]["podIP"], cpu_root,
                   acct_root)  # fmt: skip


# -- the manifests -----------------------------------------------------------------------


def code_map(namespace: str) -> dict[str, Any]:
    """The ConfigMap the pods run their processes from (this checkout's files)."""
    files = {"colocation_pod.py": ROOT / "bench" / "colocation_pod.py", "load.py": ROOT / "devtools" / "demo" / "load.py"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CODE, "namespace": namespace},
            "data": {k: v.read_text(encoding="utf-8") for k, v in files.items()}}  # fmt: skip


def resources(request: float, limit: float | None) -> dict[str, Any]:
    """A pod's resources: ``request`` cores (0: none, BestEffort), ``limit`` (None: none).
    A Guaranteed pod (request = limit) gets a memory limit equal to its request."""
    if request <= 0 and limit is None:
        return {}
    out: dict[str, Any] = {"requests": {"cpu": f"{round(request * 1000)}m", "memory": MEMORY}}
    if limit is not None:
        out["limits"] = {"cpu": f"{round(limit * 1000)}m", "memory": MEMORY}
    return out


def pod_manifest(name: str, namespace: str, node: str, image: str, argv: Sequence[object],
                 res: Mapping[str, Any], lc: bool = False,
                 labels: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app": name, **({LC_LABEL: "true"} if lc else {}), **(labels or {})}},
        "spec": {
            "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "enableServiceLinks": False, "automountServiceAccountToken": False,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Never",
                "command": ["python3", "/bench/colocation_pod.py", *map(str, argv)],
                "resources": dict(res), "volumeMounts": [{"name": "code", "mountPath": "/bench"}],
            }],
            "volumes": [{"name": "code", "configMap": {"name": CODE}}],
        },
    }  # fmt: skip


def web_manifest(case: Case, name: str, namespace: str, node: str, image: str, cpu: int, work_ms: float,
                 iterations: int) -> dict[str, Any]:  # fmt: skip
    return pod_manifest(name, namespace, node, image, ["web", cpu, WEB_PORT, work_ms, iterations],
                        resources(case.request, case.limit or None), lc=True)  # fmt: skip


BATCH = (("batch-1", BATCH_REQUEST), ("batch-2", BATCH_REQUEST), ("batch-3", 0.0))


def batch_manifests(namespace: str, node: str, image: str, cpu: int) -> list[dict[str, Any]]:
    return [pod_manifest(name, namespace, node, image, ["batch", cpu, BATCH_PORT], resources(request, None))
            for name, request in BATCH]  # fmt: skip


#: The batch-capacity pods, each at its share of the contended demand (cores).
CAPS = tuple(f"cap-{i + 1}" for i in range(len(CONTENDED)))


def cap_resources(cores: float, memory: int = CAP_MEMORY_BYTES) -> dict[str, Any]:
    """A batch-capacity pod's resources: ``batch-cpu`` (millicores) and ``batch-memory``
    (bytes), requests equal to limits (Kubernetes wants that of an extended resource), and
    no cpu or memory: BestEffort."""
    amounts = {BATCH_CPU: str(round(cores * 1000)), BATCH_MEMORY: str(memory)}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def cap_manifests(namespace: str, node: str, image: str, cpu: int,
                  demand: Sequence[float] = CONTENDED) -> list[dict[str, Any]]:  # fmt: skip
    """The batch-capacity pods: the batch pods' program, image and pinning, limited by
    their batch resources at their contended demand."""
    return [pod_manifest(name, namespace, node, image, ["batch", cpu, BATCH_PORT], cap_resources(cores),
                         labels={CAP_LABEL: "true"}) for name, cores in zip(CAPS, demand, strict=True)]  # fmt: skip


def cap_quota_us(cores: float, period_us: int) -> int:
    """The CFS quota the agent writes for a batch-cpu limit of ``cores``."""
    return round(cores * 1000) * period_us // 1000


def cap_settled(files: Mapping[str, str], rel: str, container: str, quota_us: int) -> bool:
    """Whether a cap pod's cpu files are its baseline: the agent's quota from its
    ``batch-cpu`` limit on the pod and its container, no idle mark, no burst."""
    for at in (rel, f"{rel}/{container}"):
        if files.get(f"{at}/cpu.cfs_quota_us") != str(quota_us):
            return False
        if files.get(f"{at}/cpu.idle", "0") != "0" or files.get(f"{at}/cpu.cfs_burst_us", "0") != "0":
            return False
    return True


def lost_pods(expected: Mapping[str, str], items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The run's pods (name -> uid) that are gone, replaced, not Running or being deleted,
    each with what the API server says of it: a pod the agent (or the kubelet, or the OOM
    killer) took must end the run, not vanish from its figures."""
    by = {p["metadata"]["name"]: p for p in items}
    out = []
    for name, uid in sorted(expected.items()):
        pod = by.get(name)
        if pod is None:
            out.append(f"{name}: gone")
            continue
        status = pod.get("status", {})
        if pod["metadata"].get("uid") != uid:
            out.append(f"{name}: replaced (uid {pod['metadata'].get('uid')}, was {uid})")
        elif pod["metadata"].get("deletionTimestamp"):
            out.append(f"{name}: being deleted")
        elif status.get("phase") != "Running":
            out.append(f"{name}: {status.get('phase')} ({status.get('reason', '')}: {status.get('message', '')})")
    return out


def scoped(manifests: Sequence[Mapping[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The strategy's policies with every scope narrowed to the run's namespace: the node's
    other pods (the agent, the controller) are never batch pods of the benchmark."""

    def narrow(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: narrow(v) for k, v in value.items()}
            if "scope" in out and isinstance(out["scope"], dict):
                out["scope"] = {**out["scope"], "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace}}}  # fmt: skip
            return out
        if isinstance(value, list):
            return [narrow(v) for v in value]
        return value

    return [narrow(dict(m)) for m in manifests]


# -- the agent's figures -----------------------------------------------------------------


def parse_metrics(text: str, namespace: str, batch: Sequence[str]) -> dict[str, Any]:
    """The agent's figures the report puts beside the kernel's, from its /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {"batch": 0.0, "wait": None, "node": None, "actions": 0.0, "caps": {}, "isolated": {},
                           "published": None}  # fmt: skip
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            mine = s.labels.get("namespace") == namespace and s.labels.get("pod") in batch
            if s.name == "waterline_pod_cpu_usage_cores" and mine:
                out["batch"] += s.value
            elif s.name == "waterline_pod_cpu_cap_cores" and mine:
                out["caps"][s.labels["pod"]] = s.value
            elif s.name == "waterline_node_usage" and s.labels.get("metric") == "lc_cpu_wait_ratio":
                out["wait"] = s.value
            elif s.name == "waterline_node_usage" and s.labels.get("metric") == "cpu_total_usage":
                out["node"] = s.value
            elif s.name == "waterline_actions_total":
                out["actions"] += s.value
            elif s.name == "waterline_isolated_pods":
                out["isolated"][s.labels["cpu_class"]] = round(s.value)
            elif s.name == "waterline_batch_capacity" and s.labels.get("resource") == "cpu":
                out["published"] = s.value
    return out


@dataclass
class AgentScraper:
    """The agent's /metrics at its pod IP, read once a tick; an unreadable scrape gives
    NaN for the batch CPU (shown as such, never as zero)."""

    url: str
    namespace: str
    batch: list[str]
    last_actions: float | None = None

    def tick(self) -> AgentTick:
        try:
            with urllib.request.urlopen(self.url, timeout=0.8) as resp:  # noqa: S310
                m = parse_metrics(resp.read().decode("utf-8"), self.namespace, self.batch)
        except (OSError, ValueError):
            return AgentTick(math.nan, None, None, 0, {})
        actions = 0 if self.last_actions is None else round(m["actions"] - self.last_actions)
        self.last_actions = m["actions"]
        return AgentTick(m["batch"], m["wait"], m["node"], max(0, actions), m["caps"], m["isolated"], m["published"])


# -- the node ----------------------------------------------------------------------------


def running_node() -> tuple[Path, str] | None:
    """The cluster folder and node name of the real node running on this host, if one runs
    (its kubelet alive)."""
    from devtools.cluster.launcher import alive
    from devtools.cluster.node import OWNER

    try:
        owner = json.loads(OWNER.read_text())
        state = json.loads((Path(owner["cluster"]) / "run" / "node" / "node.json").read_text())
    except (OSError, ValueError, KeyError):
        return None
    return (Path(owner["cluster"]), str(owner["node"])) if alive(int(state.get("kubelet", 0)) or -1) else None


def _stale_state() -> None:
    """The agent's state files on this host, of a node that is gone: a new node starts
    clean (they would name pods, caps and objects of another cluster)."""
    for name in ("cpu-quota.json", "cpu-isolation.json", "objects.json", "evictions.json"):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join("/var/lib/waterline", name))


@dataclass
class Place:
    """The cluster and the node the run uses, and what it made itself (to undo)."""

    kube: Any  # devtools.harness.cluster.RealCluster
    node: str
    started: bool
    installed: bool = False
    image: str = ""


@contextlib.contextmanager
def node_place(folder: Path) -> Iterator[Place]:
    """The running real node and its cluster, or a cluster and a node started for the run
    (stopped after); Waterline installed from hack/node/overlay where it is not."""
    from devtools.cluster.images import default_images, save_images
    from devtools.cluster.launcher import Cluster
    from devtools.cluster.node import RealNode
    from devtools.harness.cluster import BIN, RealCluster, launch

    found = running_node()
    node: RealNode | None = None
    if found is not None:
        root, name = found
        cluster = Cluster(root, BIN)
        cluster.load()
        place = Place(RealCluster(cluster, folder, borrowed=True), name, started=False)
    else:
        progress("no real node runs here: starting a cluster and this host as its node")
        kube = launch(folder / "cluster")
        try:
            node = RealNode(kube.cluster, images=save_images(default_images(), kube.cluster))
            node.up(timeout=600)
        except BaseException:
            kube.close()
            raise
        _stale_state()
        place = Place(kube, node.name, started=True)
    try:
        if place.kube.kubectl("-n", SYSTEM, "get", "daemonset/waterline-agent", check=False).returncode != 0:
            progress("installing Waterline: kubectl apply -k hack/node/overlay")
            place.kube.kubectl("apply", "-k", str(OVERLAY))
            place.installed = True
        place.kube.kubectl("-n", SYSTEM, "rollout", "status", "daemonset/waterline-agent", "--timeout", "300s",
                           timeout=320)  # fmt: skip
        yield place
    finally:
        if place.installed:
            place.kube.kubectl("delete", "-k", str(OVERLAY), "--ignore-not-found", "--wait", "--timeout", "300s",
                               check=False, timeout=330)  # fmt: skip
        if place.started:
            place.kube.close()  # the node first, then the cluster
            _stale_state()


# -- the backend -------------------------------------------------------------------------


@dataclass
class RealBench:
    """``bench.colocation.Backend`` on the real node."""

    args: argparse.Namespace
    place: Place
    cpu: int
    cpu_root: str
    acct_root: str
    state: str
    namespace: str = ""
    image: str = ""
    cases: list[Case] = field(default_factory=list)
    pods: dict[str, RealPod] = field(default_factory=dict)  # by pod name
    originals: dict[str, dict[str, str]] = field(default_factory=dict)
    webs: dict[str, str] = field(default_factory=dict)  # case key -> its web pod's name
    kernel: Kernel | None = None
    scraper: AgentScraper | None = None
    client: subprocess.Popen[bytes] | None = None
    blocks: list[str] = field(default_factory=list)  # the generators' record files, in order
    applied: list[dict[str, Any]] = field(default_factory=list)
    iterations: int = 0
    #: The run has the batch-capacity pods (a ``batch-capacity`` window was chosen).
    with_caps: bool = False
    #: name -> the quota the agent writes from its batch-cpu limit, and the CFS period
    caps: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: The processes outside kubepods kept off the bench CPU (None: ``--share-cpu``).
    reserved: BenchCpu | None = None
    #: How many were moved off it: at the start, and in all.
    moved_at_start: int = 0
    moved: int = 0

    @property
    def batch_names(self) -> list[str]:
        return [name for name, _ in BATCH] + (list(CAPS) if self.with_caps else [])

    def demands(self, window: Any) -> dict[str, float]:
        """Each batch pod's demand in ``window``: the batch pods', then the cap pods'."""
        out = dict(zip([name for name, _ in BATCH], window.demand, strict=True))
        if self.with_caps:
            out.update(zip(CAPS, window.cap_demand, strict=True))
        return out

    @property
    def kube(self) -> Any:
        return self.place.kube

    def other_cpus(self) -> list[int]:
        return sorted(set(os.sched_getaffinity(0)) - {self.cpu}) or [self.cpu]

    # -- pods -----------------------------------------------------------------------------

    def setup(self) -> None:
        from devtools.cluster.images import default_images

        self.image = default_images()[0]
        if not getattr(self.args, "share_cpu", False):
            self.reserved = BenchCpu(self.cpu)
            self.moved_at_start = self.moved = self.reserved.keep_off()
        self.namespace = self.kube.namespace("colocation")
        self.kube.apply([code_map(self.namespace), *batch_manifests(self.namespace, self.place.node, self.image, self.cpu)])
        agent = self._agent_ip()
        self.scraper = AgentScraper(f"http://{agent}:{AGENT_PORT}/metrics", self.namespace, self.batch_names)
        for name in self.batch_names:
            if name not in CAPS:
                self._ready(name)
        if self.with_caps:
            self._setup_caps()

    def _setup_caps(self) -> None:
        """The cap pods admitted against the capacity the node publishes, their quota
        written by the agent, then the policy deleted and their baseline noted."""
        from agent.model.quantity import parse_quantity
        from bench.colocation_strategies import capacity_policy
        from devtools.harness.waiting import wait_until

        policy = scoped(capacity_policy(), self.namespace)
        self.kube.apply(policy)
        self.applied = policy
        need = {BATCH_CPU: round(sum(CONTENDED) * 1000), BATCH_MEMORY: CAP_MEMORY_BYTES * len(CAPS)}

        def published() -> bool:
            node = json.loads(self.kube.kubectl("get", "node", self.place.node, "-o", "json").stdout)
            allocatable = node["status"].get("allocatable", {})
            return all(parse_quantity(allocatable.get(k, "0")) >= v for k, v in need.items())  # "2k": 2000

        wait_until(published, 120, f"the node's allocatable showing {need}", interval=1)
        self.kube.apply(cap_manifests(self.namespace, self.place.node, self.image, self.cpu))
        for name, cores in zip(CAPS, CONTENDED, strict=True):
            pod = self._ready(name)
            with open(os.path.join(self.cpu_root, pod.rel, "cpu.cfs_period_us"), encoding="ascii") as f:
                period = int(f.read())
            self.caps[name] = (cap_quota_us(cores, period), period)
        self.release(wait=False)

        def settled() -> bool:
            return all(cap_settled(self.pods[n].cpu_files(), self.pods[n].rel, self.pods[n].container, q)
                       for n, (q, _) in self.caps.items())  # fmt: skip

        wait_until(settled, RELEASE_TIMEOUT, "the cap pods' quota from their batch-cpu limits, no mark left",
                   interval=0.5)  # fmt: skip
        for name in CAPS:
            self.originals[name] = self.pods[name].cpu_files()

    def _agent_ip(self) -> str:
        from devtools.harness.waiting import wait_until

        found: list[str] = []

        def ready() -> bool:
            pods = json.loads(self.kube.kubectl("-n", SYSTEM, "get", "pods", "-l", AGENT, "-o", "json",
                                                f"--field-selector=spec.nodeName={self.place.node}").stdout)["items"]  # fmt: skip
            found[:] = [p["status"]["podIP"] for p in pods if p["status"].get("podIP")
                        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]  # fmt: skip
            return bool(found)

        wait_until(ready, 300, "the agent's pod Ready on the real node", interval=1)
        return found[0]

    def _ready(self, name: str, timeout: float = 180) -> RealPod:
        """The pod running, its process answering on its port; its cgroups' files noted."""
        deadline = time.monotonic() + timeout
        while True:
            pod = json.loads(self.kube.kubectl("-n", self.namespace, "get", "pod", name, "-o", "json").stdout)
            status = pod.get("status", {})
            if status.get("phase") in ("Failed", "Succeeded"):
                raise RuntimeError(f"pod {self.namespace}/{name} ended: {json.dumps(status)[-800:]}")
            running = [s for s in status.get("containerStatuses", []) if "running" in s.get("state", {})]
            if running and status.get("podIP"):
                try:
                    with socket.create_connection((status["podIP"], WEB_PORT if name not in self.batch_names
                                                   else BATCH_PORT), timeout=2):  # fmt: skip
                        break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"pod {self.namespace}/{name} not answering in {timeout:.0f} s: "
                                   f"{json.dumps(status)[-800:]}")  # fmt: skip
            time.sleep(0.5)
        made = self.pods[name] = real_pod(pod, self.cpu_root, self.acct_root)
        self.originals[name] = made.cpu_files()
        return made

    def _delete(self, name: str) -> None:
        self.kube.kubectl("-n", self.namespace, "delete", "pod", name, "--wait", "--timeout", "60s", timeout=90)
        self.pods.pop(name, None)
        self.originals.pop(name, None)

    # -- the backend ----------------------------------------------------------------------

    def calibrate(self) -> int:
        """Web's iterations a request, calibrated in the sizing pod (the pods' Python, on
        the bench CPU with nothing else on it), as the hand-made mode does on the host."""
        from bench.colocation_pod import hello

        self.kube.apply([web_manifest(SIZING_CASE, SIZING, self.namespace, self.place.node, self.image, self.cpu,
                                      self.args.work_ms, 0)])  # fmt: skip
        pod = self._ready(SIZING)
        self.iterations = hello(pod.ip, WEB_PORT)
        return self.iterations

    def measure(self, rate: float, iterations: int, seconds: float) -> Sizing:
        """Web's CPU per request, alone in its unlimited pod, over ``seconds``: the pod's
        cpuacct over the requests that arrived meanwhile. The pod goes after (its request
        would crowd the node's allocatable)."""
        from devtools.demo.load import read_records

        pod = self.pods[SIZING]
        path = os.path.join(self.state, "sizing.records")
        client = self._start_client(pod, rate, self.args.seed, path)
        time.sleep(1.0)
        before, t0 = pod.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        used, t1 = pod.cpu_seconds() - before, time.monotonic()
        self._stop(client)
        self.client = None
        requests = sum(1 for a, _ in read_records(path) if t0 <= a < t1)
        os.unlink(path)
        self._delete(SIZING)
        return Sizing(seconds=t1 - t0, requests=requests, cpu_s=used)

    def prepare(self, case: Case, cpu_per_request: float, rate: float) -> Case:
        if case.near_use is not None:
            case = case.sized(cpu_per_request, rate)
        name = self.webs[case.key] = f"web-{case.key}"
        self.kube.apply([web_manifest(case, name, self.namespace, self.place.node, self.image, self.cpu,
                                      self.args.work_ms, self.iterations)])  # fmt: skip
        return case

    def serve(self, case: Case, rate: float, iterations: int) -> None:
        """The generator moved to the case's web pod (a new one, seeded by its block)."""
        if self.client is not None:
            self._stop(self.client)
        name = self.webs[case.key]
        web = self.pods.get(name) or self._ready(name)
        self.kernel = Kernel({"web": web, **{b: self.pods[b] for b in self.batch_names}}, self.cpu)
        self.kernel.server_pid = web.server_pid()
        path = os.path.join(self.state, f"web-{len(self.blocks)}.records")
        self.blocks.append(path)
        self._start_client(web, rate, self.args.seed * 1000 + len(self.blocks), path)
        time.sleep(1.0)  # the connection's start is nobody's latency

    def _start_client(self, web: RealPod, rate: float, seed: int, path: str) -> subprocess.Popen[bytes]:
        """The load generator (``self.client``), in a session of its own: a terminal's
        Ctrl-C reaches the run only, which stops the generator itself with SIGTERM (its
        records flushed), so a stopped run keeps them (``bench.colocation.RunStopped``).
        It is recorded before an interrupt is taken (``interrupts_held``): close() stops it."""
        from devtools.demo.cgroups import interrupts_held

        cpus = ",".join(map(str, self.other_cpus()))
        with interrupts_held() as restore:
            self.client = subprocess.Popen([sys.executable, "-m", "bench.colocation_pod", "client", web.ip,  # noqa: S603
                                            str(WEB_PORT), f"{rate:.6f}", str(seed), path, cpus], cwd=ROOT,
                                           start_new_session=True, preexec_fn=restore)  # fmt: skip
        return self.client

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        if code not in (0, -signal.SIGTERM):
            raise RuntimeError(f"the load generator exited with {code}")

    def run_window(self, window: Any, case: Case, round_: int, slot: int) -> Window:
        """The window's policy through the API, the same warm-up, then the measured window
        at its steady batch demand; then the policy deleted, every mark and cap back as
        the kubelet wrote it, and the pause."""
        args, kernel, scraper = self.args, self.kernel, self.scraper
        assert kernel is not None and scraper is not None
        if self.reserved is not None:  # what started since (kubectl, a restarted daemon) off it too
            self.moved += self.reserved.keep_off()
        policy = scoped(window.rules(args.line, args.wait_line), self.namespace)
        if policy:
            self.kube.apply(policy)
            self.applied = policy
        seconds = args.warmup + args.window
        warm_start = time.monotonic() + 0.2
        controls = []
        for name, demand in self.demands(window).items():
            if demand > 0:
                conn = socket.create_connection((self.pods[name].ip, BATCH_PORT), timeout=seconds + 30)
                conn.sendall(f"{warm_start:.6f} 0:{demand:g},{seconds + 0.3:.3f}:0\n".encode("ascii"))
                controls.append((name, conn))
        out = Window(window.key, case.key, round_, slot, warm_start)
        time.sleep(max(0.0, warm_start - time.monotonic()))
        kernel.tick()  # the counters at the warm-up's start
        scraper.tick()
        for i in range(seconds):
            time.sleep(max(0.0, warm_start + i + 1 - time.monotonic()))
            tick = kernel.tick()
            assert tick is not None
            out.kernel.append(tick)
            out.agent.append(scraper.tick())
        for name, conn in controls:
            with conn, conn.makefile("rb") as f:
                out.iterations[name] = int(f.readline().decode("ascii").strip() or 0)
        begun = time.monotonic()
        out.released = self.release()
        out.released_s = time.monotonic() - begun
        self.check_pods()
        time.sleep(args.settle)
        return out

    def check_pods(self) -> None:
        """The run's pods as it made them, Running: else the run ends here, naming them."""
        items = json.loads(self.kube.kubectl("-n", self.namespace, "get", "pods", "-o", "json").stdout)["items"]
        lost = lost_pods({n: p.uid for n, p in self.pods.items()}, items)
        if lost:
            raise RuntimeError(f"pods of the run lost (evicted or ended): {'; '.join(lost)}: no figure of "
                               "theirs can be trusted, the run stops")  # fmt: skip

    def release(self, wait: bool = True) -> bool | None:
        """The window's policy deleted; back once the agent has handed every mark and cap
        back (the pods' cpu files as the kubelet wrote them; a cap pod's quota from its
        batch-cpu limit is its own and stays), or after RELEASE_TIMEOUT with a warning.
        Whether everything came back (None: not waited for)."""
        if self.applied:
            for m in self.applied:
                self.kube.kubectl("delete", m["kind"].lower(), m["metadata"]["name"], "--ignore-not-found",
                                  check=False)  # fmt: skip
            self.applied = []
        deadline = time.monotonic() + RELEASE_TIMEOUT
        if not wait:
            return None
        while True:
            left = {n: p.cpu_files() for n, p in self.pods.items() if p.cpu_files() != self.originals[n]}
            if not left:
                return True
            if time.monotonic() > deadline:
                progress(f"warning: not given back in {RELEASE_TIMEOUT:.0f} s: {sorted(left)}")
                return False
            time.sleep(0.2)

    def finish(self) -> list[tuple[float, float]]:
        from devtools.demo.load import read_records

        if self.client is not None:
            self._stop(self.client)
            self.client = None
        records: list[tuple[float, float]] = []
        for path in self.blocks:
            if os.path.exists(path):
                records += read_records(path)
                os.unlink(path)
        return records

    def describe(self) -> dict[str, Any]:
        ds = json.loads(self.kube.kubectl("-n", SYSTEM, "get", "daemonset/waterline-agent", "-o", "json").stdout)
        node = json.loads(self.kube.kubectl("get", "node", self.place.node, "-o", "json").stdout)
        container = ds["spec"]["template"]["spec"]["containers"][0]
        info = node["status"].get("nodeInfo", {})
        return {"real": {
            "node": self.place.node, "kubelet": info.get("kubeletVersion"),
            "runtime": info.get("containerRuntimeVersion"),
            "allocatable": node["status"].get("allocatable", {}),
            "agent_image": container["image"], "agent_args": container.get("args", []),
            "pod_image": self.image, "iterations": self.iterations,
            "cap_pods": {name: {"qos": self.pods[name].qos, "quota_us": quota, "period_us": period,
                                "baseline": self.originals.get(name, {})}
                         for name, (quota, period) in self.caps.items() if name in self.pods},
            "bench_cpu": ({"shared": True} if self.reserved is None else
                          {"shared": False, "moved_at_start": self.moved_at_start, "moved": self.moved}),
            "cluster": "started for the run" if self.place.started else "running already",
            "installed": "by the run (hack/node/overlay)" if self.place.installed else "already",
        }}  # fmt: skip

    def close(self) -> None:
        if self.reserved is not None:
            self.reserved.give_back()
        if self.client is not None:
            with contextlib.suppress(Exception):
                self._stop(self.client)
        with contextlib.suppress(Exception):
            self.release(wait=False)
        if self.namespace:
            self.kube.kubectl("delete", "namespace", self.namespace, "--wait", "--timeout", "120s", check=False,
                              timeout=150)  # fmt: skip
        for path in self.blocks:
            with contextlib.suppress(OSError):
                os.unlink(path)


@contextlib.contextmanager
def real_setup(args: argparse.Namespace, cpu_root: str, acct_root: str) -> Iterator[RealBench]:
    """The node (running, or started for the run), Waterline on it, the run's namespace
    with its batch pods; everything the run made is removed after, whatever happens."""
    folder = Path(tempfile.mkdtemp(prefix="waterline-colocation-"))
    state = tempfile.mkdtemp(prefix="waterline-bench-")
    try:
        cpus = sorted(os.sched_getaffinity(0))
        cpu = args.cpu if args.cpu is not None else cpus[-1]
        with node_place(folder) as place:
            from bench.colocation import chosen

            bench = RealBench(args, place, cpu, cpu_root, acct_root, state,
                              with_caps=any(sum(s.cap_demand) > 0 for s in chosen(args)))  # fmt: skip
            try:
                if len(cpus) > 1:  # this process and the generator keep off the bench CPU
                    os.sched_setaffinity(0, set(cpus) - {cpu})
                bench.setup()
                yield bench
            finally:
                os.sched_setaffinity(0, set(cpus))
                bench.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
