"""Per pod and per container usage read from the cgroup tree.

Per cgroup and per tick:

* CPU: a rate in cores from the cumulative counter (v1 ``cpuacct.usage`` ns, v2
  ``cpu.stat usage_usec``) over the time between two samples of the *same* cgroup. The
  first sample of a cgroup gives no rate (``None``, not zero); a container restart is a
  new cgroup (its id is in the path), so it starts over; a counter that went backwards
  gives no rate and a new baseline.
* Memory working set: usage minus inactive file pages (v1 ``memory.usage_in_bytes`` -
  ``total_inactive_file``; v2 ``memory.current`` - ``inactive_file``), floored at 0, the
  figure kubelet evicts on.
* Throttling: CFS ``nr_periods``, ``nr_throttled``, throttled time, and the share of
  periods throttled since the previous sample.
* PSI ``some avg10`` of cpu and memory where the kernel has per-cgroup PSI (v2; v1 only
  with ``psi_v1``). Detected on the first read: a kernel without it is logged once and
  not asked again.

The pod figure is the pod cgroup's (it includes the sandbox and every container); the
container split comes from the container cgroups. Pods whose cgroup is not found (not
started yet, already gone) get no figure. Unreadable or garbage files are logged once per
path and leave that field ``None``; nothing here raises on a bad file.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from agent.model.objects import Pod
from agent.model.settings import DEFAULT_EXT_CPU_RESOURCE
from agent.model.usage import ContainerUsage, PodUsage
from collectors.cgroups import CgroupMounts
from collectors.files import OnceLog, read_bytes, read_int, stat_field
from collectors.layout import PodCgroup, PodCgroupLayout
from collectors.psi import some_avg10

#: Said once, at info: a fact of the host, not a failed read.
NO_POD_PSI = ("no per-cgroup PSI here (cgroup v1, or a kernel without it): lc_cpu_pressure "
              "has no figure, and rules on it do not act")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Throttling:
    nr_periods: int
    nr_throttled: int
    throttled_seconds: float
    #: Share of CFS periods throttled since the previous sample; None on the first.
    throttled_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class CgroupStats:
    """One cgroup's figures; ``None`` is "no figure", never zero."""

    cpu: float | None = None  # cores, since the previous sample
    cpu_seconds: float | None = None  # the cumulative counter
    memory_working_set: float | None = None  # bytes
    memory_usage: float | None = None  # bytes, page cache included
    throttling: Throttling | None = None
    cpu_pressure: float | None = None  # PSI some avg10, %
    memory_pressure: float | None = None


@dataclass(frozen=True, slots=True)
class PodStats:
    uid: str
    path: str  # the pod cgroup, relative to a controller root
    pod: CgroupStats
    containers: Mapping[str, CgroupStats] = field(default_factory=dict)
    #: container name -> its cgroup, relative to a controller root (the ones read).
    container_paths: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodStatsSample:
    at: float
    #: What the decision core uses (``NodeSample.pods``), keyed ``namespace/name``.
    usage: Mapping[str, PodUsage]
    #: Everything read, for the exporter and for logs, keyed ``namespace/name``.
    stats: Mapping[str, PodStats]
    #: Pods asked for whose cgroup was not found this tick.
    missing: tuple[str, ...] = ()


@dataclass(slots=True)
class _Prev:
    at: float
    cpu_seconds: float | None
    nr_periods: int | None
    nr_throttled: int | None


class PodStatsCollector:
    """Reads pods' cgroups each tick and turns cumulative counters into rates."""

    def __init__(
        self,
        mounts: CgroupMounts,
        layout: PodCgroupLayout | None = None,
        clock: Callable[[], float] = time.monotonic,
        ext_cpu_resource: str = DEFAULT_EXT_CPU_RESOURCE,
        kubelet_root: str = "",
        log: OnceLog | None = None,
    ) -> None:
        self.version = mounts.version
        self._cpu = mounts.controller_root("cpu")
        self._acct = mounts.controller_root("cpuacct")
        self._mem = mounts.controller_root("memory")
        probe = self._cpu or self._acct or mounts.cgroup_root
        self.layout = layout if layout is not None else PodCgroupLayout(probe, kubelet_root)
        self._clock = clock
        self.ext_cpu_resource = ext_cpu_resource
        self._log = log if log is not None else OnceLog()
        self._prev: dict[str, _Prev] = {}
        # None = not known yet; decided by the first read that finds the cgroup.
        self._cpu_psi: bool | None = None
        self._mem_psi: bool | None = None

    @property
    def clock(self) -> Callable[[], float]:
        """The clock rates are taken on (readers of the same tick share it)."""
        return self._clock

    # -- one cgroup ----------------------------------------------------------------

    def _read(self, path: str) -> bytes | None:
        try:
            return read_bytes(path)
        except FileNotFoundError:
            self._log.warn("cgroup file missing", path)
        except OSError as err:
            self._log.warn("cgroup file unreadable", path, error=str(err))
        return None

    def _int(self, path: str) -> int | None:
        data = self._read(path)
        if data is None:
            return None
        try:
            return int(data)
        except ValueError as err:
            self._garbage(path, err)
            return None

    def _psi(
        self, base: str | None, rel: str, name: str, enabled: bool | None
    ) -> tuple[float | None, bool | None]:
        if base is None or enabled is False:
            return None, enabled
        path = f"{base}/{rel}/{name}"
        try:
            data = read_bytes(path)
        except OSError as err:
            # ENOENT in a cgroup that still exists: no per-cgroup PSI here (cgroup v1, or
            # a kernel without it). A fact of the host, said once: of the two files only
            # the CPU one feeds a decision (lc_cpu_pressure).
            if err.errno == errno.ENOENT and enabled is None and os.path.isdir(f"{base}/{rel}"):
                if name == "cpu.pressure":
                    self._log.info(NO_POD_PSI, path)
                return None, False
            return None, enabled
        try:
            return some_avg10(data), True
        except ValueError as err:
            self._log.warn("garbage in PSI file", path, error=str(err))
            return None, True

    def _garbage(self, path: str, err: Exception) -> None:
        self._log.warn("garbage in cgroup file", path, error=str(err))

    def _memory(
        self, rel: str, usage_file: str, inactive_key: bytes
    ) -> tuple[float | None, int | None]:
        """(usage, inactive file) of a cgroup; the file names are v1's or v2's."""
        if self._mem is None:
            return None, None
        usage = self._int(f"{self._mem}/{rel}/{usage_file}")
        path = f"{self._mem}/{rel}/memory.stat"
        data = self._read(path)
        inactive: int | None = None
        if data is not None:
            try:
                inactive = stat_field(data, inactive_key)
            except ValueError as err:
                self._garbage(path, err)
        return usage, inactive

    def _read_cgroup(
        self, rel: str, now: float, prev: _Prev | None
    ) -> tuple[CgroupStats, _Prev] | None:
        """None when the cgroup is gone (its CPU counter file does not exist)."""
        cpu_seconds: float | None = None
        periods: int | None = None
        throttled: int | None = None
        throttled_s: float | None = None
        mem_usage: float | None = None
        inactive: int | None = None
        if self.version == 1:
            path = f"{self._acct}/{rel}/cpuacct.usage"
            try:
                cpu_seconds = read_int(path) / 1e9
            except FileNotFoundError:
                return None
            except (OSError, ValueError) as err:
                self._garbage(path, err)
            if self._cpu is not None:
                path = f"{self._cpu}/{rel}/cpu.stat"
                data = self._read(path)
                if data is not None:
                    try:
                        periods = stat_field(data, b"nr_periods")
                        throttled = stat_field(data, b"nr_throttled")
                        throttled_s = stat_field(data, b"throttled_time") / 1e9
                    except ValueError as err:
                        self._garbage(path, err)
            mem_usage, inactive = self._memory(rel, "memory.usage_in_bytes", b"total_inactive_file")
        else:
            path = f"{self._acct}/{rel}/cpu.stat"
            try:
                data = read_bytes(path)
            except FileNotFoundError:
                return None
            except OSError as err:
                self._garbage(path, err)
                data = None
            if data is not None:
                try:
                    cpu_seconds = stat_field(data, b"usage_usec") / 1e6
                except ValueError as err:
                    self._garbage(path, err)
                try:  # only where the cpu controller is enabled for the cgroup
                    periods = stat_field(data, b"nr_periods")
                    throttled = stat_field(data, b"nr_throttled")
                    throttled_s = stat_field(data, b"throttled_usec") / 1e6
                except ValueError:
                    periods = throttled = None
                    throttled_s = None
            mem_usage, inactive = self._memory(rel, "memory.current", b"inactive_file")

        cpu: float | None = None
        ratio: float | None = None
        if prev is not None and now > prev.at:
            if cpu_seconds is not None and prev.cpu_seconds is not None:
                delta = cpu_seconds - prev.cpu_seconds
                cpu = delta / (now - prev.at) if delta >= 0 else None
            if periods is not None and throttled is not None and prev.nr_periods is not None:
                d_periods = periods - prev.nr_periods
                d_throttled = throttled - (prev.nr_throttled or 0)
                if d_periods > 0 and d_throttled >= 0:
                    ratio = min(1.0, d_throttled / d_periods)
                elif d_periods == 0:
                    ratio = 0.0
        working_set: float | None = None
        if mem_usage is not None:
            working_set = float(max(0, mem_usage - inactive)) if inactive is not None else None
        cpu_psi, self._cpu_psi = self._psi(
            self._cpu or self._acct, rel, "cpu.pressure", self._cpu_psi
        )
        mem_psi, self._mem_psi = self._psi(self._mem, rel, "memory.pressure", self._mem_psi)
        stats = CgroupStats(
            cpu=cpu,
            cpu_seconds=cpu_seconds,
            memory_working_set=working_set,
            memory_usage=None if mem_usage is None else float(mem_usage),
            throttling=(
                Throttling(periods, throttled, throttled_s or 0.0, ratio)
                if periods is not None and throttled is not None
                else None
            ),
            cpu_pressure=cpu_psi,
            memory_pressure=mem_psi,
        )
        return stats, _Prev(now, cpu_seconds, periods, throttled)

    # -- one tick ------------------------------------------------------------------

    def _pod_usage(self, pod: Pod, stats: PodStats) -> PodUsage:
        cpu = stats.pod.cpu
        uses_ext = self.ext_cpu_resource in pod.requests or self.ext_cpu_resource in pod.limits
        return PodUsage(
            cpu=cpu,
            memory=stats.pod.memory_working_set,
            ext_cpu=cpu if uses_ext or cpu is None else 0.0,
            containers={
                name: ContainerUsage(cpu=c.cpu, memory=c.memory_working_set)
                for name, c in stats.containers.items()
            },
        )

    def collect(self, pods: Iterable[Pod]) -> PodStatsSample:
        """Read every pod's cgroups once; pods not found get no figure."""
        at = self._clock()
        prev, self._prev = self._prev, {}
        usage: dict[str, PodUsage] = {}
        stats: dict[str, PodStats] = {}
        missing: list[str] = []
        uids: set[str] = set()
        for pod in pods:
            uids.add(pod.uid)
            found: PodCgroup | None = self.layout.locate(pod)
            now = self._clock()
            read = (
                None if found is None else self._read_cgroup(found.path, now, prev.get(found.path))
            )
            if found is None or read is None:
                if found is not None:
                    self.layout.forget(pod.uid)
                missing.append(pod.key)
                continue
            pod_stats, self._prev[found.path] = read
            containers: dict[str, CgroupStats] = {}
            paths: dict[str, str] = {}
            for name, rel in found.containers.items():
                c_read = self._read_cgroup(rel, now, prev.get(rel))
                if c_read is None:
                    self.layout.forget(pod.uid)  # restarted or gone: re-probe next tick
                    continue
                containers[name], self._prev[rel] = c_read
                paths[name] = rel
            one = PodStats(pod.uid, found.path, pod_stats, containers, paths)
            stats[pod.key] = one
            usage[pod.key] = self._pod_usage(pod, one)
        self.layout.retain(uids)
        return PodStatsSample(at=at, usage=usage, stats=stats, missing=tuple(missing))
