"""The pods running on this machine, found in its cgroup tree (for `waterline local-objects`).

Kubelet lays out one cgroup per pod under ``kubepods`` (``collectors.layout`` knows the
spelling for each cgroup driver and QoS class) and the container runtime one per container
inside it. Walking that tree gives, without an API server, what local mode needs to act on
a pod: its uid, its QoS class (the branch it sits in), its containers' ids (the runtime's
naming: ``cri-containerd-<id>.scope``, ``crio-<id>``, a bare ``<id>``...) and the CPU and
memory bounds kubelet wrote from the pod spec (quota, shares or weight, memory limit).

Names come from kubelet's log folders when they are there (``/var/log/pods/<namespace>_
<pod>_<uid>`` and the ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``
links); otherwise a pod is ``discovered/pod-<uid prefix>`` and a container is named after
its process (``/proc/<pid>/comm``). The sandbox (``pause``) container is left out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from agent.model.objects import BEST_EFFORT, BURSTABLE, GUARANTEED
from collectors.cpu_quota import V1_PERIOD, V1_QUOTA, V2_MAX, parse_quota
from collectors.layout import DRIVERS, PodCgroupLayout, container_names, pod_path

RUNTIMES = ("containerd", "cri-o", "docker")
UNKNOWN_NAMESPACE = "discovered"
_PLACEHOLDER = "WATERLINEUID"
_ID = "([0-9a-f]{12,})"
_LOG_POD = re.compile(r"^(?P<ns>[^_]+)_(?P<name>[^_]+)_(?P<uid>[0-9a-f-]{8,})$")
_LOG_CONTAINER = re.compile(r"^[^_]+_[^_]+_(?P<name>.+)-(?P<id>[0-9a-f]{12,})\.log$")
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
#: kubelet: cpu.shares = millicores * 1024 / 1000, at least 2 (BestEffort gets 2)
MIN_SHARES = 2


@dataclass(frozen=True, slots=True)
class FoundContainer:
    name: str
    container_id: str  # runtime://id
    cpu_limit: float | None = None  # cores, from the CFS quota
    cpu_request: float | None = None  # cores, from cpu.shares / cpu.weight
    memory_limit: int | None = None  # bytes


@dataclass(frozen=True, slots=True)
class FoundPod:
    uid: str
    qos_class: str
    namespace: str
    name: str
    path: str  # relative to the controller root
    started: float  # the pod cgroup's change time: about when kubelet made it
    containers: tuple[FoundContainer, ...] = ()


@dataclass(frozen=True, slots=True)
class Discovery:
    version: int
    root: str  # the cpu controller's root
    driver: str | None  # None: no kubepods tree here
    pods: tuple[FoundPod, ...] = ()
    #: whether kubelet's log folders named the pods
    named: bool = False


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# -- the tree ---------------------------------------------------------------------------


def pod_dirs(root: str, driver: str, kubelet_root: str) -> Iterator[tuple[str, str, str]]:
    """(uid, QoS class, relative path) of every pod cgroup, from the layout's own naming."""
    for qos in (GUARANTEED, BURSTABLE, BEST_EFFORT):
        template = pod_path(driver, qos, _PLACEHOLDER, kubelet_root)
        parent, _, leaf = template.rpartition("/")
        prefix, _, suffix = leaf.partition(_PLACEHOLDER)
        try:
            entries = sorted(os.listdir(os.path.join(root, parent)))
        except OSError:
            continue
        for entry in entries:
            if not (entry.startswith(prefix) and entry.endswith(suffix)):
                continue
            uid = entry[len(prefix) : len(entry) - len(suffix)]
            if driver == "systemd":
                uid = uid.replace("_", "-")  # kubelet escaped '-' as '_'
            if uid and os.path.isdir(os.path.join(root, parent, entry)):
                yield uid, qos, f"{parent}/{entry}" if parent else entry


def container_patterns(driver: str) -> list[tuple[re.Pattern[str], str]]:
    """Directory name -> runtime, from the names the layout looks for (most specific first,
    so a bare id is the last resort)."""
    patterns: dict[str, str] = {}
    for runtime in RUNTIMES:
        name = container_names(driver, f"{runtime}://{_PLACEHOLDER}")[0]
        patterns.setdefault(name, runtime)
    ordered = sorted(patterns.items(), key=lambda kv: -len(kv[0]))
    return [(re.compile("^" + re.escape(n).replace(_PLACEHOLDER, _ID) + "$"), r) for n, r in ordered]


def _container_id(name: str, patterns: list[tuple[re.Pattern[str], str]]) -> str | None:
    for pattern, runtime in patterns:
        match = pattern.match(name)
        if match:
            return f"{runtime}://{match.group(1)}"
    return None


# -- bounds kubelet wrote ---------------------------------------------------------------


def cpu_bounds(path: str, version: int) -> tuple[float | None, float | None]:
    """(limit, request) in cores from a container cgroup's quota and shares / weight (v2's
    weight is a coarser scale: the request read back is within a few millicores)."""
    if version == 1:
        quota_text, period_text = _read(f"{path}/{V1_QUOTA}"), _read(f"{path}/{V1_PERIOD}")
        shares = _int(_read(f"{path}/cpu.shares"))
    else:
        quota_text, period_text = _read(f"{path}/{V2_MAX}"), ""
        weight = _int(_read(f"{path}/cpu.weight"))
        # kubelet: weight = 1 + (shares - 2) * 9999 / 262142
        shares = None if weight is None else round(MIN_SHARES + (weight - 1) * 262142 / 9999)
    try:
        quota, period = parse_quota(version, quota_text or "", period_text or "")
    except ValueError:  # no such file, or not a quota
        quota, period = None, 0
    limit = quota / period if quota is not None and quota > 0 and period else None
    request = round(shares * 1000 / 1024) / 1000 if shares is not None and shares > MIN_SHARES else None
    return limit, request


def memory_limit(path: str, version: int) -> int | None:
    value = _int(_read(f"{path}/{'memory.limit_in_bytes' if version == 1 else 'memory.max'}"))
    return value if value is not None and value < 1 << 60 else None  # "max" / 2^63-4096


def _comm(path: str, proc_root: str) -> list[str]:
    """The command names of the processes in a cgroup (empty when it has none)."""
    names = []
    for pid in (_read(f"{path}/cgroup.procs") or "").split()[:16]:
        comm = _read(f"{proc_root}/{pid}/comm")
        if comm:
            names.append(comm)
    return names


def _label(text: str, fallback: str) -> str:
    label = _DNS_LABEL.sub("-", text.lower()).strip("-")[:63].strip("-")
    return label or fallback


# -- kubelet's log folders ----------------------------------------------------------------


def log_names(log_root: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(uid -> (namespace, pod), container id -> container name) from kubelet's log
    folders under ``log_root`` (``pods/`` and ``containers/``); empty where absent."""
    pods: dict[str, tuple[str, str]] = {}
    containers: dict[str, str] = {}
    for entry in _listdir(os.path.join(log_root, "pods")):
        match = _LOG_POD.match(entry)
        if match:
            pods[match["uid"]] = (match["ns"], match["name"])
    for entry in _listdir(os.path.join(log_root, "containers")):
        match = _LOG_CONTAINER.match(entry)
        if match:
            containers[match["id"]] = match["name"]
    return pods, containers


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


# -- the walk ---------------------------------------------------------------------------


def _containers(
    roots: tuple[str, str | None],
    pod_rel: str,
    driver: str,
    version: int,
    proc_root: str,
    names: Mapping[str, str],
) -> tuple[FoundContainer, ...]:
    """The containers in a pod's cgroup: ``roots`` are the cpu and memory controllers'."""
    cpu_root, memory_root = roots
    patterns = container_patterns(driver)
    found: list[FoundContainer] = []
    used: set[str] = set()
    pod_abs = os.path.join(cpu_root, pod_rel)
    for entry in _listdir(pod_abs):
        path = os.path.join(pod_abs, entry)
        container_id = _container_id(entry, patterns) if os.path.isdir(path) else None
        if container_id is None:
            continue
        comms = _comm(path, proc_root)
        if comms and all(c == "pause" for c in comms):
            continue  # the pod sandbox, not a container of the spec
        cid = container_id.partition("://")[2]
        name = names.get(cid) or _label(comms[0] if comms else "", f"c{len(found)}")
        while name in used:
            name = f"{name}-{len(found)}"
        used.add(name)
        limit, request = cpu_bounds(path, version)
        memory = None
        if memory_root is not None:
            memory = memory_limit(os.path.join(memory_root, pod_rel, entry), version)
        found.append(FoundContainer(name, container_id, limit, request, memory))
    return tuple(found)


def discover(
    cpu_root: str,
    version: int,
    kubelet_root: str = "",
    proc_root: str = "/proc",
    log_root: str = "/var/log",
    memory_root: str | None = None,
) -> Discovery:
    """Every pod cgroup under ``cpu_root`` (the cpu controller's v1 root, or the v2 root);
    memory limits from ``memory_root`` (v1's memory hierarchy; v2: the same root)."""
    if version == 2 and memory_root is None:
        memory_root = cpu_root
    driver = PodCgroupLayout(cpu_root, kubelet_root).detect_driver()
    if driver is None or driver not in DRIVERS:
        return Discovery(version, cpu_root, None)
    pod_names, container_names_by_id = log_names(log_root)
    pods = []
    for uid, qos, rel in pod_dirs(cpu_root, driver, kubelet_root):
        pod_abs = os.path.join(cpu_root, rel)
        namespace, name = pod_names.get(uid, (UNKNOWN_NAMESPACE, f"pod-{uid[:8]}"))
        try:
            started = os.stat(pod_abs).st_ctime
        except OSError:
            continue  # gone while we looked
        containers = _containers(
            (cpu_root, memory_root), rel, driver, version, proc_root, container_names_by_id
        )
        pods.append(FoundPod(uid, qos, namespace, name, rel, started, containers))
    return Discovery(version, cpu_root, driver, tuple(pods), bool(pod_names))
