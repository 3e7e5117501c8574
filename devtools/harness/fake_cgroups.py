"""Fake cgroup trees in tmp directories, shaped like the kernel's, for collector tests."""

from __future__ import annotations

from pathlib import Path

from agent.model.objects import BURSTABLE, Container, Pod
from collectors.cgroups import CgroupMounts


def make_pod(
    name: str,
    uid: str,
    qos: str = BURSTABLE,
    containers: dict[str, str] | None = None,
    namespace: str = "default",
    requests: dict[str, float] | None = None,
) -> Pod:
    """A pod whose containers map name -> containerID (``containerd://<id>``)."""
    return Pod(
        namespace=namespace,
        name=name,
        uid=uid,
        qos_class=qos,
        containers=tuple(Container(n, container_id=cid) for n, cid in (containers or {}).items()),
        requests=requests or {},
    )


class FakeTree:
    """A v1 tree (cpu, cpuacct, memory hierarchies) or a v2 unified tree under ``root``."""

    def __init__(self, root: Path, version: int) -> None:
        self.root = root
        self.version = version
        if version == 1:
            for c in ("cpu", "cpuacct", "memory"):
                (root / c).mkdir(parents=True)
                (root / c / "cgroup.procs").write_text("")
            self.mounts = CgroupMounts(
                str(root), {c: str(root / c) for c in ("cpu", "cpuacct", "memory")}
            )
        else:
            root.mkdir(parents=True, exist_ok=True)
            (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
            self.mounts = CgroupMounts(
                str(root), {}, str(root), frozenset({"cpuset", "cpu", "io", "memory", "pids"})
            )

    def dirs(self, rel: str) -> list[Path]:
        if self.version == 1:
            return [self.root / c / rel for c in ("cpu", "cpuacct", "memory")]
        return [self.root / rel]

    def add(self, rel: str, quota: str | None = None, period: int = 100000) -> None:
        """Create a cgroup with zero counters and an unlimited (or given) quota."""
        for d in self.dirs(rel):
            d.mkdir(parents=True, exist_ok=True)
        self.set(rel, cpu_seconds=0.0, periods=0, throttled=0, usage=0, inactive=0)
        if self.version == 1:
            (self.root / "cpu" / rel / "cpu.cfs_quota_us").write_text(f"{quota or '-1'}\n")
            (self.root / "cpu" / rel / "cpu.cfs_period_us").write_text(f"{period}\n")
        else:
            (self.root / rel / "cpu.max").write_text(f"{quota or 'max'} {period}\n")

    def set(
        self,
        rel: str,
        cpu_seconds: float,
        periods: int = 0,
        throttled: int = 0,
        usage: int = 0,
        inactive: int = 0,
        psi: tuple[float, float] | None = None,
    ) -> None:
        if self.version == 1:
            cpu, acct, mem = (self.root / c / rel for c in ("cpu", "cpuacct", "memory"))
            (acct / "cpuacct.usage").write_text(f"{round(cpu_seconds * 1e9)}\n")
            (cpu / "cpu.stat").write_text(
                f"nr_periods {periods}\nnr_throttled {throttled}\n"
                f"throttled_time {throttled * 1000}\nnr_bursts 0\nburst_time 0\n"
            )
            (mem / "memory.usage_in_bytes").write_text(f"{usage}\n")
            (mem / "memory.stat").write_text(
                f"cache 0\nrss {usage}\ninactive_file 1\ntotal_cache 0\n"
                f"total_inactive_anon 0\ntotal_inactive_file {inactive}\ntotal_active_file 0\n"
            )
        else:
            d = self.root / rel
            (d / "cpu.stat").write_text(
                f"usage_usec {round(cpu_seconds * 1e6)}\nuser_usec 0\nsystem_usec 0\n"
                f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {throttled}\n"
            )
            (d / "memory.current").write_text(f"{usage}\n")
            (d / "memory.stat").write_text(
                f"anon {usage}\nfile 0\nactive_file 0\ninactive_file {inactive}\nslab 0\n"
            )
            if psi is not None:
                for name, avg in (("cpu.pressure", psi[0]), ("memory.pressure", psi[1])):
                    (d / name).write_text(
                        f"some avg10={avg:.2f} avg60=0.00 avg300=0.00 total=5\n"
                        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                    )

    def quota(self, rel: str) -> str:
        if self.version == 1:
            return (self.root / "cpu" / rel / "cpu.cfs_quota_us").read_text().strip()
        return (self.root / rel / "cpu.max").read_text().strip()


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class ListLogger:
    """A structlog-shaped logger that keeps what it was asked to log."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def warning(self, event: str, **fields: object) -> None:
        self.events.append((event, fields))

    def info(self, event: str, **fields: object) -> None:
        self.events.append((event, fields))
