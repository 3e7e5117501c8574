"""What the kernel says about the real node's pods, read on the host (the tests run as
root on the machine that is the node): the cgroups the kubelet made for a pod with the
cgroupfs driver on cgroup v1, and the files Waterline may change in them.

A pod's cgroup is ``kubepods[/burstable|/besteffort]/pod<uid>`` in every hierarchy, its
containers' ``.../pod<uid>/<container id>`` (containerd's name with cgroupfs); here the
hierarchies are mounted one by one (cpu and cpuacct apart). CPU use is ``cpuacct.usage``
(nanoseconds, cumulative): a rate is the delta over a window, never a figure the agent
reported. The whole node's pods are ``kubepods/cpuacct.usage``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CPU = Path("/sys/fs/cgroup/cpu")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
KUBEPODS = "kubepods"
QOS_DIR = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}
#: The cpu controller's files Waterline may write (quota, idle class, burst) and the
#: ones beside them the kubelet sets; uninstall must leave each as the kubelet wrote it.
CPU_FILES = ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares", "cpu.idle", "cpu.cfs_burst_us")


def read(path: Path) -> str:
    return path.read_text().strip()


def cores_of(quota: str, period: str) -> float | None:
    """A cfs quota in cores (None: unlimited)."""
    q = int(quota)
    return None if q < 0 else q / int(period)


@dataclass(frozen=True)
class PodCgroups:
    """One pod's cgroups, from its manifest as the API server has it."""

    name: str
    uid: str
    qos: str
    #: container name -> container id (containerd's)
    containers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodCgroups:
        ids = {s["name"]: s["containerID"].split("://", 1)[1]
               for s in pod["status"].get("containerStatuses", []) if s.get("containerID")}  # fmt: skip
        return cls(pod["metadata"]["name"], pod["metadata"]["uid"], pod["status"]["qosClass"], ids)

    @property
    def rel(self) -> str:
        return "/".join(p for p in (KUBEPODS, QOS_DIR[self.qos], f"pod{self.uid}") if p)

    def container(self, name: str) -> str:
        return f"{self.rel}/{self.containers[name]}"

    def usage_ns(self) -> int:
        return int(read(CPUACCT / self.rel / "cpuacct.usage"))

    def quota(self, container: str) -> str:
        return read(CPU / self.container(container) / "cpu.cfs_quota_us")

    def cap(self, container: str) -> float | None:
        """The container's CFS quota in cores, None when unlimited."""
        d = CPU / self.container(container)
        return cores_of(read(d / "cpu.cfs_quota_us"), read(d / "cpu.cfs_period_us"))

    def files(self) -> dict[str, str]:
        """Every cpu controller file of the pod's cgroup and its containers' (the sandbox's
        too), by path relative to the hierarchy."""
        out = {}
        for d in [CPU / self.rel, *sorted(p for p in (CPU / self.rel).iterdir() if p.is_dir())]:
            for name in CPU_FILES:
                if (d / name).exists():
                    out[str((d / name).relative_to(CPU))] = read(d / name)
        return out


def kubepods_usage_ns() -> int:
    return int(read(CPUACCT / KUBEPODS / "cpuacct.usage"))


def host_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole host from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(fields)
    return total - fields[3] - fields[4], total


@dataclass
class Window:
    """CPU in cores over one window, kernel-measured, and the caps at its end."""

    t: float
    seconds: float
    pods: dict[str, float]
    node_pods: float
    host: float
    caps: dict[str, float | None]
    #: The caps at the window's start (the agent may change them within it).
    caps0: dict[str, float | None] = field(default_factory=dict)


class Sampler:
    """Windows of CPU use (cores) of some pods, of every pod on the node (kubepods) and of
    the whole host, with the CFS caps of the pods' given container at each window's end."""

    def __init__(self, pods: Mapping[str, PodCgroups], container: str) -> None:
        self.pods = dict(pods)  # by the name the figures give them
        self.container = container
        self.start = time.monotonic()
        self._last = self._read()
        self._caps = self._caps_now()

    def _caps_now(self) -> dict[str, float | None]:
        return {n: p.cap(self.container) for n, p in self.pods.items()}

    def _read(self) -> tuple[float, dict[str, int], int, tuple[int, int]]:
        return (time.monotonic(), {n: p.usage_ns() for n, p in self.pods.items()},
                kubepods_usage_ns(), host_busy())  # fmt: skip

    def window(self, seconds: float) -> Window:
        time.sleep(seconds)
        now, caps0 = self._read(), self._caps
        self._caps = self._caps_now()
        (t0, pods0, node0, host0), (t1, pods1, node1, host1) = self._last, now
        self._last = now
        dt = t1 - t0
        ncpu = os.cpu_count() or 1
        return Window(
            t=t1 - self.start, seconds=dt,
            pods={n: (pods1[n] - pods0[n]) / 1e9 / dt for n in pods1},
            node_pods=(node1 - node0) / 1e9 / dt,
            host=(host1[0] - host0[0]) / max(1, host1[1] - host0[1]) * ncpu,
            caps=self._caps, caps0=caps0,
        )  # fmt: skip


def cap_text(cap: float | None) -> str:
    return "unlimited" if cap is None else f"{cap:.2f}"


def table(windows: Sequence[Window], line: float | None = None) -> list[str]:
    """One line per window: node pods' CPU (and the line), the host's, each pod's CPU/cap."""
    rows = []
    for w in windows:
        pods = "  ".join(f"{n} {w.pods[n]:.2f}/{cap_text(w.caps[n])}" for n in sorted(w.pods))
        against = f" (line {line:.2f})" if line is not None else ""
        rows.append(f"t={w.t:6.1f}s  node pods {w.node_pods:.2f}{against}  host {w.host:.2f}  {pods}")
    return rows
