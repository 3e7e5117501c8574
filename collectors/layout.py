"""Where kubelet puts a pod's cgroup and its containers' cgroups.

Kubelet names the pod cgroup from the QoS class and the pod uid; its cgroup driver decides
the spelling (paths relative to any controller root, default kubelet ``--cgroup-root``):

==========  ====================================================================
cgroupfs    ``kubepods/pod<uid>``, ``kubepods/burstable/pod<uid>``,
            ``kubepods/besteffort/pod<uid>``
systemd     ``kubepods.slice/kubepods-pod<uid_>.slice``,
            ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice``
            (``-`` in the uid becomes ``_``; a slice ``a-b-c.slice`` nests in
            ``a.slice/a-b.slice``)
==========  ====================================================================

The container runtime names the container cgroup inside the pod's: containerd
``cri-containerd-<id>.scope`` (systemd) or ``<id>`` (cgroupfs); CRI-O ``crio-<id>.scope``
or ``crio-<id>``; docker ``docker-<id>.scope`` or ``<id>``. The id comes from
``status.containerStatuses[].containerID`` (``containerd://<id>``).

The driver is never configured: it is detected by probing which ``kubepods`` tree exists
(re-probed until one does, since a fresh node may have no pods yet). The pod's declared QoS
class is tried first, then the other two (a class that changed under us, a resize). Found
paths are cached; the caller calls :meth:`PodCgroupLayout.forget` when a read fails.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.model.objects import BEST_EFFORT, BURSTABLE, GUARANTEED, Container, Pod

CGROUPFS = "cgroupfs"
SYSTEMD = "systemd"
DRIVERS = (CGROUPFS, SYSTEMD)

_QOS_COMPONENT = {GUARANTEED: "", BURSTABLE: "burstable", BEST_EFFORT: "besteffort"}
_RUNTIMES = ("containerd", "cri-o", "docker")


@dataclass(frozen=True, slots=True)
class PodCgroup:
    """A pod's cgroup paths, relative to a controller root (no leading slash)."""

    uid: str
    driver: str
    path: str
    #: container name -> path; containers without a cgroup (not started) are absent.
    containers: Mapping[str, str] = field(default_factory=dict)
    #: container name -> container id, to notice a restarted container.
    container_ids: Mapping[str, str] = field(default_factory=dict)


def _systemd_path(components: list[str]) -> str:
    """Kubelet's systemd naming: join with '-', one nested slice per prefix."""
    escaped = [c.replace("-", "_") for c in components if c]
    return "/".join("-".join(escaped[: i + 1]) + ".slice" for i in range(len(escaped)))


def kubepods_path(driver: str, kubelet_root: str = "") -> str:
    """The path of the kubepods cgroup for a driver and a kubelet ``--cgroup-root``."""
    components = [c for c in kubelet_root.strip("/").split("/") if c]
    if driver == SYSTEMD:
        components = [c.removesuffix(".slice") for c in components]
        return _systemd_path([*components, "kubepods"])
    return "/".join([*components, "kubepods"])


def pod_path(driver: str, qos_class: str, uid: str, kubelet_root: str = "") -> str:
    components = [c for c in kubelet_root.strip("/").split("/") if c]
    qos = _QOS_COMPONENT.get(qos_class, "besteffort")
    if driver == SYSTEMD:
        components = [c.removesuffix(".slice") for c in components]
        return _systemd_path([*components, "kubepods", qos, f"pod{uid}"])
    return "/".join([*components, "kubepods", *([qos] if qos else []), f"pod{uid}"])


def split_container_id(container_id: str) -> tuple[str, str]:
    """``containerd://abc`` -> (``containerd``, ``abc``); a bare id has runtime ``""``."""
    runtime, sep, cid = container_id.partition("://")
    return (runtime, cid) if sep else ("", container_id)


def container_names(driver: str, container_id: str) -> tuple[str, ...]:
    """Candidate directory names of a container's cgroup, most likely first."""
    runtime, cid = split_container_id(container_id)
    if not cid:
        return ()
    if driver == SYSTEMD:
        by_runtime = {
            "containerd": f"cri-containerd-{cid}.scope",
            "cri-o": f"crio-{cid}.scope",
            "docker": f"docker-{cid}.scope",
        }
    else:
        by_runtime = {"containerd": cid, "cri-o": f"crio-{cid}", "docker": cid}
    first = by_runtime.get(runtime)
    rest = [by_runtime[r] for r in _RUNTIMES if by_runtime[r] != first]
    names = [first] if first else []
    for name in [*rest, cid, f"crio-{cid}.scope", f"cri-containerd-{cid}.scope"]:
        if name not in names:
            names.append(name)
    return tuple(names)


class PodCgroupLayout:
    """Finds pod and container cgroups under ``probe_root`` (the cpu controller's root).

    In cgroup v1 kubelet creates the same relative path in every controller hierarchy,
    so one probe serves cpu, cpuacct and memory.
    """

    def __init__(self, probe_root: str, kubelet_root: str = "", driver: str | None = None):
        if driver is not None and driver not in DRIVERS:
            raise ValueError(f"cgroup driver must be one of {DRIVERS}, got {driver!r}")
        self.probe_root = probe_root
        self.kubelet_root = kubelet_root
        self._driver = driver
        self._pods: dict[str, PodCgroup] = {}
        #: uid -> the containers tuple of the Pod its cached entry was made whole from: the
        #: same (immutable) tuple again is the same answer, without the comparison of ids
        #: below (a tick asks for every pod; the pods' objects live across ticks).
        self._whole: dict[str, tuple[Container, ...]] = {}

    def detect_driver(self) -> str | None:
        """The driver whose kubepods tree exists; None while neither does."""
        if self._driver is None:
            for driver in (SYSTEMD, CGROUPFS):
                path = os.path.join(self.probe_root, kubepods_path(driver, self.kubelet_root))
                if os.path.isdir(path):
                    self._driver = driver
                    break
        return self._driver

    def _find_pod(self, driver: str, pod: Pod) -> str | None:
        classes = [pod.qos_class, *(c for c in _QOS_COMPONENT if c != pod.qos_class)]
        for qos in classes:
            rel = pod_path(driver, qos, pod.uid, self.kubelet_root)
            if os.path.isdir(os.path.join(self.probe_root, rel)):
                return rel
        return None

    def _find_container(self, driver: str, pod_rel: str, container: Container) -> str | None:
        for name in container_names(driver, container.container_id):
            rel = f"{pod_rel}/{name}"
            if os.path.isdir(os.path.join(self.probe_root, rel)):
                return rel
        return None

    def locate(self, pod: Pod) -> PodCgroup | None:
        """The pod's cgroup and its started containers' cgroups; None when not found."""
        if not pod.uid:
            return None
        cached = self._pods.get(pod.uid)
        if cached is not None and self._whole.get(pod.uid) is pod.containers:
            return cached
        ids = {c.name: c.container_id for c in pod.containers if c.container_id}
        if (
            cached is not None
            and dict(cached.container_ids) == ids
            and len(cached.containers) == len(ids)
        ):
            self._whole[pod.uid] = pod.containers
            return cached  # re-probed while a started container's cgroup is missing
        driver = self.detect_driver()
        if driver is None:
            return None
        pod_rel = cached.path if cached is not None else self._find_pod(driver, pod)
        if pod_rel is None:
            return None
        containers: dict[str, str] = {}
        for container in pod.containers:
            if not container.container_id:
                continue
            old = cached.containers.get(container.name) if cached is not None else None
            if (
                old is not None
                and cached is not None
                and (cached.container_ids.get(container.name) == container.container_id)
            ):
                containers[container.name] = old
                continue
            rel = self._find_container(driver, pod_rel, container)
            if rel is not None:
                containers[container.name] = rel
        found = PodCgroup(pod.uid, driver, pod_rel, containers, ids)
        self._pods[pod.uid] = found
        if len(containers) == len(ids):
            self._whole[pod.uid] = pod.containers
        else:
            self._whole.pop(pod.uid, None)
        return found

    def forget(self, uid: str) -> None:
        """Drop a cached pod (its cgroup vanished or a read failed): re-probe next time."""
        self._pods.pop(uid, None)
        self._whole.pop(uid, None)

    def retain(self, uids: set[str]) -> None:
        """Drop cached pods that are no longer on the node."""
        for uid in [u for u in self._pods if u not in uids]:
            del self._pods[uid]
            self._whole.pop(uid, None)
