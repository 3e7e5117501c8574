"""The batch limiter's memory: what each cgroup file held before the agent wrote a batch
pod's limit into it.

Per batch pod (by uid): for each limit written, keyed ``<resource>:<container>`` (``cpu``
or ``memory``; container ``""``: the pod-level cgroup), the controller's cgroup, the
file, its content before the first write (stripped, exactly as the kernel showed it:
``-1``, ``max 100000``, ``max``, ``9223372036854771712``) and the limit written. A release
writes the original back verbatim and forgets it.

One JSON file (``batch-limits.json``) apart from the quotas' and the marks' files, written
like them (``executors.state_file``): atomically, before the write it protects. A file
that cannot be read is moved aside; the limiter then takes a file found exactly at the
limit it would write, with no record, for its own lost write and records the kubelet's
value for a BestEffort pod (no quota, no memory limit) as the original.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from executors.state_file import JsonStateFile

STATE_FILE = "batch-limits.json"
FORMAT_VERSION = 1
CPU, MEMORY = "cpu", "memory"


def limit_key(resource: str, container: str) -> str:
    """``cpu:main``, ``memory:`` (the pod level)."""
    return f"{resource}:{container}"


@dataclass(frozen=True, slots=True)
class LimitFile:
    """One file a limit was written into."""

    resource: str  # cpu | memory
    cgroup: str  # relative to the resource's controller root
    file: str
    original: str
    limit: str  # the text written


@dataclass(frozen=True, slots=True)
class LimitedPod:
    uid: str
    namespace: str
    name: str
    #: ``limit_key(resource, container)`` -> the file.
    files: Mapping[str, LimitFile] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _to_json(pods: Mapping[str, LimitedPod]) -> dict[str, Any]:
    return {"version": FORMAT_VERSION, "pods": {
        uid: {"namespace": p.namespace, "name": p.name, "files": {
            key: {"resource": f.resource, "cgroup": f.cgroup, "file": f.file,
                  "original": f.original, "limit": f.limit}
            for key, f in p.files.items()}}
        for uid, p in pods.items()}}  # fmt: skip


def _from_json(raw: Any) -> dict[str, LimitedPod]:
    if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
        raise ValueError("not a version 1 batch limits state")
    pods: dict[str, LimitedPod] = {}
    for uid, p in raw["pods"].items():
        files = {}
        for key, f in p["files"].items():
            if f["resource"] not in (CPU, MEMORY) or not isinstance(f["original"], str):
                raise ValueError(f"pod {uid} {key}: bad limit record")
            files[str(key)] = LimitFile(str(f["resource"]), str(f["cgroup"]), str(f["file"]),
                                        f["original"], str(f["limit"]))
        pods[str(uid)] = LimitedPod(str(uid), str(p["namespace"]), str(p["name"]), files)
    return pods


class BatchLimitsState:
    """What the files held before, by pod uid, persisted on every change; every writer
    raises OSError when the file was not written (nothing changed then)."""

    def __init__(self, state_dir: str, filename: str = STATE_FILE) -> None:
        self._file = JsonStateFile(state_dir, filename)
        self.path = self._file.path
        self._pods: dict[str, LimitedPod] = self._file.load(
            _from_json, {}, "a batch pod's cgroup found at its limit with no record is taken "
            "for the agent's: unlimited (the kubelet's value) is given back")  # fmt: skip

    @property
    def unreadable(self) -> bool:
        return self._file.unreadable

    def pods(self) -> Mapping[str, LimitedPod]:
        return dict(self._pods)

    def get(self, uid: str) -> LimitedPod | None:
        return self._pods.get(uid)

    def put(self, pod: LimitedPod) -> None:
        """Record (or replace) a pod; one with no file left is forgotten."""
        pods = {**self._pods, pod.uid: pod}
        if not pod.files:
            del pods[pod.uid]
        if pods != self._pods:
            self._file.save(_to_json(pods))
            self._pods = pods

    def remove(self, uid: str, keys: set[str]) -> None:
        """Forget some files of a pod (given back)."""
        pod = self._pods.get(uid)
        if pod is not None:
            self.put(replace(pod, files={k: f for k, f in pod.files.items() if k not in keys}))
