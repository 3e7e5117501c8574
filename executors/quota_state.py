"""The throttler's memory: the original CPU quota of every container it has capped.

Kept as one small JSON file in the agent's state directory, rewritten atomically on every
change (``executors.state_file``). The original is stored exactly as the kernel showed it
(``-1``, ``50000``, ``max 100000``) so that restoring writes back exactly that,
"unlimited" included.

A file that cannot be parsed is moved aside and flagged (``unreadable``): the agent then
rebuilds the originals from the pod specs (``CgroupThrottler.rebuild_originals``), so no
pod stays capped for ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from executors.state_file import JsonStateFile

STATE_FILE = "cpu-quota.json"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class ContainerQuota:
    #: The container cgroup, relative to the cpu controller root.
    cgroup: str
    #: 1: ``cpu.cfs_quota_us`` holds the quota; 2: ``cpu.max`` holds ``quota period``.
    version: int
    #: The quota file's content before our first write, stripped.
    original: str
    #: The cap last written, in cores (None before the first write). Recorded *before*
    #: the write (``CgroupThrottler.apply``), so a cap in the kernel is always one the
    #: file names.
    cap: float | None = None
    #: The cap before ``cap``: what the kernel still holds when the agent stopped between
    #: recording ``cap`` and writing it. A value found equal to it is the agent's own, not
    #: a limit someone else set (which would become the original a release gives back).
    previous: float | None = None


@dataclass(frozen=True, slots=True)
class ThrottledPod:
    uid: str
    namespace: str
    name: str
    containers: Mapping[str, ContainerQuota] = field(default_factory=dict)
    #: Free text the caller attaches (e.g. the action that throttled), kept across restarts.
    tag: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _to_json(pods: Mapping[str, ThrottledPod]) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "pods": {
            uid: {
                "namespace": p.namespace,
                "name": p.name,
                "tag": p.tag,
                "containers": {
                    name: {
                        "cgroup": c.cgroup,
                        "version": c.version,
                        "original": c.original,
                        "cap": c.cap,
                        "previous": c.previous,
                    }
                    for name, c in p.containers.items()
                },
            }
            for uid, p in pods.items()
        },
    }


def _from_json(raw: Any) -> dict[str, ThrottledPod]:
    if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
        raise ValueError("not a version 1 quota state")
    pods: dict[str, ThrottledPod] = {}
    for uid, p in raw["pods"].items():
        containers = {}
        for name, c in p["containers"].items():
            version = int(c["version"])
            if version not in (1, 2) or not isinstance(c["original"], str):
                raise ValueError(f"pod {uid} container {name}: bad quota record")
            cap, previous = c.get("cap"), c.get("previous")  # "previous": absent before it was kept
            containers[str(name)] = ContainerQuota(
                cgroup=str(c["cgroup"]),
                version=version,
                original=c["original"],
                cap=None if cap is None else float(cap),
                previous=None if previous is None else float(previous),
            )
        pods[str(uid)] = ThrottledPod(
            uid=str(uid),
            namespace=str(p["namespace"]),
            name=str(p["name"]),
            containers=containers,
            tag=str(p.get("tag", "")),
        )
    return pods


class QuotaState:
    """Original quotas by pod uid, persisted on every change."""

    def __init__(self, state_dir: str, filename: str = STATE_FILE) -> None:
        self._file = JsonStateFile(state_dir, filename)
        self.dir = self._file.dir
        self.path = self._file.path
        self._pods: dict[str, ThrottledPod] = self._file.load(
            _from_json, {}, "original quotas will be rebuilt from the pod specs")

    @property
    def unreadable(self) -> bool:
        """The file existed but could not be read (it was moved aside)."""
        return self._file.unreadable

    def _save(self, pods: dict[str, ThrottledPod]) -> None:
        """Atomically replace the state file; raises OSError (nothing changed then)."""
        self._file.save(_to_json(pods))
        self._pods = pods

    def pods(self) -> Mapping[str, ThrottledPod]:
        return dict(self._pods)

    def get(self, uid: str) -> ThrottledPod | None:
        return self._pods.get(uid)

    def put(self, pod: ThrottledPod) -> None:
        """Record (or replace) a pod and persist; raises OSError when not persisted."""
        self._save({**self._pods, pod.uid: pod})

    def set_caps(self, uid: str, caps: Mapping[str, float | None]) -> None:
        """Record the caps last written (None: the kernel no longer holds one); what
        ``CgroupThrottler.hold`` checks each tick and a restarted agent adopts."""
        pod = self._pods.get(uid)
        if pod is None:
            return
        containers = {
            name: replace(c, cap=caps[name]) if name in caps else c
            for name, c in pod.containers.items()
        }
        self._save({**self._pods, uid: replace(pod, containers=containers)})

    def put_container(self, uid: str, name: str, quota: ContainerQuota) -> None:
        """Replace one container's record of a pod already recorded; raises OSError."""
        pod = self._pods.get(uid)
        if pod is None:
            return
        self._save({**self._pods, uid: replace(pod, containers={**pod.containers, name: quota})})

    def remove(self, uid: str, containers: set[str] | None = None) -> None:
        """Forget a pod (or some of its containers) and persist; raises OSError."""
        pod = self._pods.get(uid)
        if pod is None:
            return
        pods = dict(self._pods)
        left = {
            n: c
            for n, c in pod.containers.items()
            if containers is not None and n not in containers
        }
        if left:
            pods[uid] = replace(pod, containers=left)
        else:
            del pods[uid]
        self._save(pods)
