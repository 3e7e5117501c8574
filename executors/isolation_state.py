"""The isolator's memory: what each cgroup held before the agent's first write to it.

For a pod in the idle class: its pod-level cgroup and the weight it had (``cpu.shares``
on v1, ``cpu.weight`` on v2) before ``cpu.idle`` went to 1. The kernel leaves the default
weight (1024 / 100) when ``cpu.idle`` goes back to 0, not the old one, so the weight is
what a release writes back; and while the mark is in force the file reads the idle
weight (3 / 1), which is why a restarted agent must take the recorded value, never
re-read it. For a pod given burst: each cgroup written (the pod's, key ``""``, and its
containers') with the burst it had. For a pod whose quota is raised above its limit: each
cgroup raised (the pod's first) with the quota file's text before (``-1``-free: only a
cgroup with a quota is raised), and the percent. The policy that holds the mark is kept beside it,
so a restarted agent adopts the marks (``agent.node.resume``).

One JSON file (``cpu-isolation.json``), apart from the quotas' file so that neither's
format changes with the other; written like it (``executors.state_file``): atomically,
before the write it protects, and moved aside when unreadable (the weights are then
rebuilt from the pod specs: ``CgroupIsolator.rebuild_from_specs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from executors.state_file import JsonStateFile

STATE_FILE = "cpu-isolation.json"
FORMAT_VERSION = 1
#: The key of the pod-level cgroup among a burst record's cgroups.
POD_LEVEL = ""


@dataclass(frozen=True, slots=True)
class Saved:
    """One cgroup file's content before the first write, stripped."""

    #: The cgroup, relative to the cpu controller root.
    cgroup: str
    original: str


@dataclass(frozen=True, slots=True)
class IsolatedPod:
    uid: str
    namespace: str
    name: str
    #: cgroup version the records were read on (1: cpu.shares, 2: cpu.weight).
    version: int = 1
    #: The pod-level cgroup and its weight, while the pod is idle.
    idle: Saved | None = None
    idle_owner: str = ""
    #: Container name (``""``: the pod level) -> the cgroup and its burst before.
    burst: Mapping[str, Saved] = field(default_factory=dict)
    burst_owner: str = ""
    #: Container name (``""``: the pod level) -> the cgroup and its quota file's text
    #: before the raise; the percent above it and the policy.
    quota: Mapping[str, Saved] = field(default_factory=dict)
    quota_owner: str = ""
    quota_percent: float = 0.0
    #: The percent before ``quota_percent`` (a policy edit): what the quotas still hold if
    #: the agent stopped between recording the new percent and writing it. A quota found
    #: raised by either is the agent's own, not a limit someone else set.
    quota_percent_before: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def empty(self) -> bool:
        return self.idle is None and not self.burst and not self.quota


def _saved(raw: Any) -> Saved:
    if not isinstance(raw["original"], str):
        raise ValueError("an original must be the file's text")
    return Saved(str(raw["cgroup"]), raw["original"])


def _to_json(pods: Mapping[str, IsolatedPod]) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "pods": {
            uid: {
                "namespace": p.namespace, "name": p.name, "cgroupVersion": p.version,
                "idle": None if p.idle is None else {"cgroup": p.idle.cgroup, "original": p.idle.original},
                "idleOwner": p.idle_owner,
                "burst": {n: {"cgroup": s.cgroup, "original": s.original} for n, s in p.burst.items()},
                "burstOwner": p.burst_owner,
                "quota": {n: {"cgroup": s.cgroup, "original": s.original} for n, s in p.quota.items()},
                "quotaOwner": p.quota_owner, "quotaPercent": p.quota_percent,
                "quotaPercentBefore": p.quota_percent_before,
            }
            for uid, p in pods.items()
        },
    }  # fmt: skip


def _from_json(raw: Any) -> dict[str, IsolatedPod]:
    if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
        raise ValueError("not a version 1 isolation state")
    pods: dict[str, IsolatedPod] = {}
    for uid, p in raw["pods"].items():
        version = int(p["cgroupVersion"])
        if version not in (1, 2):
            raise ValueError(f"pod {uid}: bad cgroup version {version}")
        pods[str(uid)] = IsolatedPod(
            uid=str(uid), namespace=str(p["namespace"]), name=str(p["name"]), version=version,
            idle=None if p.get("idle") is None else _saved(p["idle"]),
            idle_owner=str(p.get("idleOwner", "")),
            burst={str(n): _saved(s) for n, s in (p.get("burst") or {}).items()},
            burst_owner=str(p.get("burstOwner", "")),
            quota={str(n): _saved(s) for n, s in (p.get("quota") or {}).items()},
            quota_owner=str(p.get("quotaOwner", "")),
            quota_percent=float(p.get("quotaPercent", 0.0)),
            quota_percent_before=float(p.get("quotaPercentBefore", 0.0)),  # absent before it was kept
        )  # fmt: skip
    return pods


class IsolationState:
    """Original weights and bursts by pod uid, persisted on every change; every writer
    raises OSError when the file was not written (nothing changed then)."""

    def __init__(self, state_dir: str, filename: str = STATE_FILE) -> None:
        self._file = JsonStateFile(state_dir, filename)
        self.path = self._file.path
        self._pods: dict[str, IsolatedPod] = self._file.load(
            _from_json, {}, "the weights of idle pods will be rebuilt from the pod specs")

    @property
    def unreadable(self) -> bool:
        return self._file.unreadable

    def pods(self) -> Mapping[str, IsolatedPod]:
        return dict(self._pods)

    def get(self, uid: str) -> IsolatedPod | None:
        return self._pods.get(uid)

    def put(self, pod: IsolatedPod) -> None:
        """Record (or replace) a pod; one with nothing left is forgotten."""
        pods = {**self._pods, pod.uid: pod}
        if pod.empty:
            del pods[pod.uid]
        if pods != self._pods:
            self._file.save(_to_json(pods))
            self._pods = pods

    def forget_idle(self, uid: str) -> None:
        pod = self._pods.get(uid)
        if pod is not None:
            self.put(replace(pod, idle=None, idle_owner=""))

    def forget_burst(self, uid: str, cgroups: set[str] | None = None) -> None:
        """Forget the burst of some cgroups of a pod (None: all of them)."""
        pod = self._pods.get(uid)
        if pod is not None:
            left = {n: s for n, s in pod.burst.items() if cgroups is not None and n not in cgroups}
            self.put(replace(pod, burst=left, burst_owner=pod.burst_owner if left else ""))

    def forget_quota(self, uid: str, cgroups: set[str] | None = None) -> None:
        """Forget the raised quota of some cgroups of a pod (None: all of them)."""
        pod = self._pods.get(uid)
        if pod is not None:
            left = {n: s for n, s in pod.quota.items() if cgroups is not None and n not in cgroups}
            self.put(replace(pod, quota=left, quota_owner=pod.quota_owner if left else "",
                             quota_percent=pod.quota_percent if left else 0.0,
                             quota_percent_before=pod.quota_percent_before if left else 0.0))
