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
from typing import NamedTuple

from agent.model.objects import Pod
from agent.model.settings import DEFAULT_EXT_CPU_RESOURCE
from agent.model.usage import ContainerUsage, PodUsage
from collectors.cgroups import CgroupMounts
from collectors.files import OnceLog, read_bytes, stat_field
from collectors.layout import PodCgroup, PodCgroupLayout
from collectors.psi import some_avg10

#: Said once, at info: a fact of the host, not a failed read.
NO_POD_PSI = ("no per-cgroup PSI here (cgroup v1, or a kernel without it): lc_cpu_pressure "
              "has no figure, and rules on it do not act")  # fmt: skip


class Throttling(NamedTuple):
    nr_periods: int
    nr_throttled: int
    throttled_seconds: float
    #: Share of CFS periods throttled since the previous sample; None on the first.
    throttled_ratio: float | None = None


class CgroupStats(NamedTuple):
    """One cgroup's figures; ``None`` is "no figure", never zero.

    This and ``Throttling`` are typed named tuples, not frozen dataclasses: a tick makes
    one per cgroup (1,000 at 250 pods), and a frozen dataclass's ``__init__`` (a
    ``object.__setattr__`` per field) cost twice as much, a tenth of the collector's
    own (non-I/O) time."""

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


@dataclass(frozen=True, slots=True)
class _Paths:
    """One cgroup's files (None: that controller is not mounted here)."""

    counter: str  # the CPU counter: v1 cpuacct.usage, v2 cpu.stat
    cpu_stat: str | None  # v1's throttling counters (v2's are in the counter file)
    mem_usage: str | None
    mem_stat: str | None
    cpu_psi: str | None
    mem_psi: str | None


@dataclass(slots=True)
class _Prev:
    """A cgroup's previous sample, updated in place each tick."""

    at: float
    cpu_seconds: float | None
    nr_periods: int | None
    nr_throttled: int | None
    paths: _Paths


def _v1_cpu_stat(data: bytes) -> tuple[int, int, int]:
    """nr_periods, nr_throttled and throttled_time of a v1 cpu.stat. The kernel writes
    them as its first three lines, so one split reads them (three ``stat_field`` searches
    cost three times as much); the same figures and errors as ``stat_field``, which reads
    any other shape."""
    lines = data.split(b"\n", 3)
    if (len(lines) >= 3 and lines[0].startswith(b"nr_periods ")
            and lines[1].startswith(b"nr_throttled ") and lines[2].startswith(b"throttled_time ")):
        return int(lines[0][11:]), int(lines[1][13:]), int(lines[2][15:])
    return (stat_field(data, b"nr_periods"), stat_field(data, b"nr_throttled"),
            stat_field(data, b"throttled_time"))


_open, _read, _close, O_RDONLY = os.open, os.read, os.close, os.O_RDONLY


def _field(data: bytes, key: bytes) -> int:
    """The value of a ``\\nkey `` line that is not the first: ``stat_field``'s figure for a
    key not on the first line. Raises ValueError where ``stat_field`` might answer
    otherwise (absent, the last line without its newline), for the careful path."""
    at = data.index(key) + len(key)
    return int(data[at : data.index(b"\n", at)])


def _psi_avg10(path: str) -> float:
    """``some_avg10`` of a PSI file whose first line is ``some``, as the kernel writes it;
    raises OSError or ValueError on anything else (for the careful path)."""
    fd = _open(path, O_RDONLY)
    try:
        data = _read(fd, 65536)
    finally:
        _close(fd)
    if not data.startswith(b"some avg10="):
        raise ValueError("not the kernel's PSI layout")
    return float(data[11 : data.index(b" ", 11)])


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
        #: The fast path of a cgroup read before, where every controller it reads is mounted.
        self._fast: Callable[[_Prev, float], tuple[CgroupStats, _Prev]] | None = None
        if self.version == 1 and None not in (self._cpu, self._acct, self._mem):
            self._fast = self._fast_v1
        elif self.version == 2 and None not in (self._acct, self._mem):
            self._fast = self._fast_v2

    @property
    def clock(self) -> Callable[[], float]:
        """The clock rates are taken on (readers of the same tick share it)."""
        return self._clock

    # -- one cgroup ----------------------------------------------------------------

    def _psi(
        self, path: str | None, rel: str, enabled: bool | None
    ) -> tuple[float | None, bool | None]:
        if path is None or enabled is False:
            return None, enabled
        try:
            data = read_bytes(path)
        except OSError as err:
            # ENOENT in a cgroup that still exists: no per-cgroup PSI here (cgroup v1, or
            # a kernel without it). A fact of the host, said once: of the two files only
            # the CPU one feeds a decision (lc_cpu_pressure).
            if err.errno == errno.ENOENT and enabled is None and os.path.isdir(path.rsplit("/", 1)[0]):
                if path.endswith("/cpu.pressure"):
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

    def _paths(self, rel: str) -> _Paths:
        """The files one cgroup is read from, spelled once for its lifetime."""
        psi = self._cpu or self._acct
        if self.version == 1:
            return _Paths(
                counter=f"{self._acct}/{rel}/cpuacct.usage",
                cpu_stat=f"{self._cpu}/{rel}/cpu.stat" if self._cpu is not None else None,
                mem_usage=f"{self._mem}/{rel}/memory.usage_in_bytes" if self._mem is not None else None,
                mem_stat=f"{self._mem}/{rel}/memory.stat" if self._mem is not None else None,
                cpu_psi=f"{psi}/{rel}/cpu.pressure" if psi is not None else None,
                mem_psi=f"{self._mem}/{rel}/memory.pressure" if self._mem is not None else None,
            )
        return _Paths(
            counter=f"{self._acct}/{rel}/cpu.stat",
            cpu_stat=None,
            mem_usage=f"{self._mem}/{rel}/memory.current" if self._mem is not None else None,
            mem_stat=f"{self._mem}/{rel}/memory.stat" if self._mem is not None else None,
            cpu_psi=f"{psi}/{rel}/cpu.pressure" if psi is not None else None,
            mem_psi=f"{self._mem}/{rel}/memory.pressure" if self._mem is not None else None,
        )

    def _file(self, path: str) -> bytes | None:
        """A file's bytes, or None (logged once) when it cannot be read: ``_read`` with
        the read inlined (this runs for every file of every cgroup, every tick)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._log.warn("cgroup file missing", path)
            return None
        except OSError as err:
            self._log.warn("cgroup file unreadable", path, error=str(err))
            return None
        try:
            return os.read(fd, 65536)
        except OSError as err:
            self._log.warn("cgroup file unreadable", path, error=str(err))
            return None
        finally:
            os.close(fd)

    def _read_cgroup(
        self, rel: str, now: float, prev: _Prev | None
    ) -> tuple[CgroupStats, _Prev] | None:
        """None when the cgroup is gone (its CPU counter file does not exist).

        The careful path: every case handled and logged. ``collect`` reads a cgroup read
        before, on a host whose controllers and PSI are known, by the version's fast path
        (``_fast_v1``/``_fast_v2``) first; anything that path does not expect (a missing
        or unreadable file, garbage, another layout) raises there, with nothing changed,
        and the cgroup is read again here."""
        paths = prev.paths if prev is not None else self._paths(rel)
        cpu_seconds: float | None = None
        periods: int | None = None
        throttled: int | None = None
        throttled_s: float | None = None
        mem_usage: float | None = None
        inactive: int | None = None
        path = paths.counter
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as err:
            self._garbage(path, err)
            fd = -1
        data: bytes | None = None
        if fd >= 0:
            try:
                data = os.read(fd, 65536)
            except OSError as err:
                self._garbage(path, err)
            finally:
                os.close(fd)
        if self.version == 1:
            if data is not None:
                try:
                    cpu_seconds = int(data[:128]) / 1e9
                except ValueError as err:
                    self._garbage(path, err)
            if paths.cpu_stat is not None:
                data = self._file(paths.cpu_stat)
                if data is not None:
                    try:
                        periods, throttled, throttled_ns = _v1_cpu_stat(data)
                        throttled_s = throttled_ns / 1e9
                    except ValueError as err:
                        self._garbage(paths.cpu_stat, err)
            inactive_key = b"total_inactive_file"
        else:
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
            inactive_key = b"inactive_file"
        if paths.mem_usage is not None and paths.mem_stat is not None:
            data = self._file(paths.mem_usage)
            if data is not None:
                try:
                    mem_usage = int(data)
                except ValueError as err:
                    self._garbage(paths.mem_usage, err)
            data = self._file(paths.mem_stat)
            if data is not None:
                try:
                    inactive = stat_field(data, inactive_key)
                except ValueError as err:
                    self._garbage(paths.mem_stat, err)

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
        cpu_psi = mem_psi = None
        if self._cpu_psi is not False:  # known absent: not asked again
            cpu_psi, self._cpu_psi = self._psi(paths.cpu_psi, rel, self._cpu_psi)
        if self._mem_psi is not False:
            mem_psi, self._mem_psi = self._psi(paths.mem_psi, rel, self._mem_psi)
        stats = CgroupStats(
            cpu,
            cpu_seconds,
            working_set,
            None if mem_usage is None else float(mem_usage),
            (
                Throttling(periods, throttled, throttled_s or 0.0, ratio)
                if periods is not None and throttled is not None
                else None
            ),
            cpu_psi,
            mem_psi,
        )
        if prev is None:
            return stats, _Prev(now, cpu_seconds, periods, throttled, paths)
        prev.at, prev.cpu_seconds, prev.nr_periods, prev.nr_throttled = (
            now, cpu_seconds, periods, throttled)  # fmt: skip
        return stats, prev


    def _fast_v1(self, prev: _Prev, now: float) -> tuple[CgroupStats, _Prev]:
        """A known v1 cgroup's four files, read and parsed straight through: the figures
        of ``_read_cgroup`` (same expressions) at a third of its Python work, which is
        the collector's cost over a bare read of the same files. Raises OSError or
        ValueError on anything unexpected, before ``prev`` is touched."""
        paths = prev.paths
        fd = _open(paths.counter, O_RDONLY)
        try:
            data = _read(fd, 65536)
        finally:
            _close(fd)
        cpu_seconds = int(data[:128]) / 1e9
        fd = _open(paths.cpu_stat, O_RDONLY)  # type: ignore[arg-type]  # _fast: all mounted
        try:
            data = _read(fd, 65536)
        finally:
            _close(fd)
        lines = data.split(b"\n", 3)
        if not (len(lines) >= 3 and lines[0].startswith(b"nr_periods ")
                and lines[1].startswith(b"nr_throttled ") and lines[2].startswith(b"throttled_time ")):  # fmt: skip
            raise ValueError("not the kernel's cpu.stat layout")
        periods, throttled = int(lines[0][11:]), int(lines[1][13:])
        throttled_s = int(lines[2][15:]) / 1e9
        fd = _open(paths.mem_usage, O_RDONLY)  # type: ignore[arg-type]
        try:
            data = _read(fd, 65536)
        finally:
            _close(fd)
        mem_usage = int(data)
        fd = _open(paths.mem_stat, O_RDONLY)  # type: ignore[arg-type]
        try:
            data = _read(fd, 65536)
        finally:
            _close(fd)
        if data.startswith(b"total_inactive_file "):
            raise ValueError("total_inactive_file first: left to stat_field")
        inactive = _field(data, b"\ntotal_inactive_file ")
        return self._fast_stats(prev, now, cpu_seconds, periods, throttled, throttled_s,
                                mem_usage, inactive)  # fmt: skip

    def _fast_v2(self, prev: _Prev, now: float) -> tuple[CgroupStats, _Prev]:
        """``_fast_v1`` for v2: cpu.stat (the counter and the throttling), memory.current,
        memory.stat."""
        paths = prev.paths
        fd = _open(paths.counter, O_RDONLY)
        try:
            data = _read(fd, 65536)
        finally:
            _close(fd)
        if not data.startswith(b"usage_usec "):
            raise ValueError("not the kernel's cpu.stat layout")
        end = data.index(b"\n")
        cpu_seconds = int(data[11:end]) / 1e6
        periods = _field(data, b"\nnr_periods ")
        throttled = _field(data, b"\nnr_throttled ")
        throttled_s = _field(data, b"\nthrottled_usec ") / 1e6
        fd = _open(paths.mem_usage, O_RDONLY)  # type: ignore[arg-type]  # _fast: all mounted
        try:
            data = _read(fd, 65536)
        finally:
            _close(fd)
        mem_usage = int(data)
        fd = _open(paths.mem_stat, O_RDONLY)  # type: ignore[arg-type]
        try:
            data = _read(fd, 65536)
        finally:
            _close(fd)
        if data.startswith(b"inactive_file "):
            raise ValueError("inactive_file first: left to stat_field")
        inactive = _field(data, b"\ninactive_file ")
        return self._fast_stats(prev, now, cpu_seconds, periods, throttled, throttled_s,
                                mem_usage, inactive)  # fmt: skip

    def _fast_stats(self, prev: _Prev, now: float, cpu_seconds: float, periods: int,
                    throttled: int, throttled_s: float, mem_usage: int,
                    inactive: int) -> tuple[CgroupStats, _Prev]:  # fmt: skip
        """The rates and the record of ``_read_cgroup`` from a fast path's figures, with the
        PSI files where the host has them."""
        cpu_psi = mem_psi = None
        if self._cpu_psi:
            cpu_psi = _psi_avg10(prev.paths.cpu_psi)  # type: ignore[arg-type]
        if self._mem_psi:
            mem_psi = _psi_avg10(prev.paths.mem_psi)  # type: ignore[arg-type]
        cpu: float | None = None
        ratio: float | None = None
        if now > prev.at:
            if prev.cpu_seconds is not None:
                delta = cpu_seconds - prev.cpu_seconds
                cpu = delta / (now - prev.at) if delta >= 0 else None
            if prev.nr_periods is not None:
                d_periods = periods - prev.nr_periods
                d_throttled = throttled - (prev.nr_throttled or 0)
                if d_periods > 0 and d_throttled >= 0:
                    ratio = min(1.0, d_throttled / d_periods)
                elif d_periods == 0:
                    ratio = 0.0
        stats = CgroupStats(cpu, cpu_seconds, float(max(0, mem_usage - inactive)), float(mem_usage),
                            Throttling(periods, throttled, throttled_s or 0.0, ratio), cpu_psi,
                            mem_psi)  # fmt: skip
        prev.at, prev.cpu_seconds, prev.nr_periods, prev.nr_throttled = (
            now, cpu_seconds, periods, throttled)  # fmt: skip
        return stats, prev

    # -- one tick ------------------------------------------------------------------

    def _pod_usage(self, pod: Pod, stats: PodStats) -> PodUsage:
        cpu = stats.pod.cpu
        uses_ext = self.ext_cpu_resource in pod.requests or self.ext_cpu_resource in pod.limits
        containers: dict[str, ContainerUsage] = {}
        for name, c in stats.containers.items():
            containers[name] = ContainerUsage(c.cpu, c.memory_working_set)
        return PodUsage(cpu, stats.pod.memory_working_set, cpu if uses_ext or cpu is None else 0.0,
                        containers)  # fmt: skip

    def collect(self, pods: Iterable[Pod]) -> PodStatsSample:
        """Read every pod's cgroups once; pods not found get no figure.

        The loop runs for every pod every tick, so it is written for that: the fast path
        called here, not through ``_read_cgroup``; a pod whose containers were all read
        shares its cached container paths instead of a copy."""
        clock, locate, careful = self._clock, self.layout.locate, self._read_cgroup
        fast = self._fast if self._cpu_psi is not None and self._mem_psi is not None else None
        at = clock()
        prev, self._prev = self._prev, {}
        was, now_prev = prev.get, self._prev
        usage: dict[str, PodUsage] = {}
        stats: dict[str, PodStats] = {}
        missing: list[str] = []
        uids: set[str] = set()
        for pod in pods:
            uids.add(pod.uid)
            found: PodCgroup | None = locate(pod)
            now = clock()
            if found is None:
                missing.append(pod.key)
                continue
            rel = found.path
            last = was(rel)
            read = None
            if fast is not None and last is not None:
                try:
                    read = fast(last, now)
                except (OSError, ValueError):
                    read = None
            if read is None:
                read = careful(rel, now, last)
                if read is None:
                    self.layout.forget(pod.uid)
                    missing.append(pod.key)
                    continue
            pod_stats, now_prev[rel] = read
            containers: dict[str, CgroupStats] = {}
            copied: dict[str, str] | None = None  # the paths read, once one was not
            for name, rel in found.containers.items():
                last = was(rel)
                read = None
                if fast is not None and last is not None:
                    try:
                        read = fast(last, now)
                    except (OSError, ValueError):
                        read = None
                if read is None:
                    read = careful(rel, now, last)
                    if read is None:
                        self.layout.forget(pod.uid)  # restarted or gone: re-probe next tick
                        if copied is None:
                            copied = {n: r for n, r in found.containers.items() if n in containers}
                        continue
                containers[name], now_prev[rel] = read
                if copied is not None:
                    copied[name] = rel
            one = PodStats(pod.uid, found.path, pod_stats, containers,
                           found.containers if copied is None else copied)  # fmt: skip
            stats[pod.key] = one
            usage[pod.key] = self._pod_usage(pod, one)
        self.layout.retain(uids)
        return PodStatsSample(at=at, usage=usage, stats=stats, missing=tuple(missing))
