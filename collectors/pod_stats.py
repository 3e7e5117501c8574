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

**Held files** (issue 32). Opening a cgroup file walks its path, and open, read and close
were most of a tick (60% of it under cProfile at 250 pods). A cgroup read before is read
again with one ``pread`` per file, at offset 0, on descriptors held open across ticks: the
kernel's cgroup files (seq files) answer a read at offset 0 afresh each time. They are
held only while the cgroup is read: a cgroup not read in a tick (its pod gone, its
container restarted) has its descriptors closed at the end of that tick, so the count is
the files of the cgroups read, within a ``FileBudget`` (``max_open_files``, by default
the agent's ``maxOpenFiles`` within what the process's ``RLIMIT_NOFILE`` leaves, shared
with the ``lc_*`` reader; beyond it a cgroup's files are opened and closed each tick, as
before). A cgroup removed while held answers ``ENODEV`` (kernfs, for every file of it);
on other filesystems (the fake trees of tests and benches) its counter file's link count
falls to 0. Either way the cgroup is opened again by its path: found again (recreated at
the same path) it is the new cgroup's files, not found it is gone, as before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent.model.objects import Pod
from agent.model.settings import DEFAULT_EXT_CPU_RESOURCE
from agent.model.usage import ContainerUsage, PodUsage
from collectors.cgroups import CgroupMounts
from collectors.files import FileBudget, OnceLog, open_files_budget, stat_field
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


#: A cgroup's files, by index: the CPU counter (v1 ``cpuacct.usage``, v2 ``cpu.stat``),
#: v1's throttling counters (``cpu.stat``; v2's are in the counter file), memory usage
#: and ``memory.stat``, the two PSI files. Read in this order.
COUNTER, CPU_STAT, MEM_USAGE, MEM_STAT, CPU_PSI, MEM_PSI = range(6)
_BUF = 65536
_SIZES, _OFFSETS = (_BUF,) * 6, (0,) * 6
_pread, _fstat, _open, _close, O_RDONLY = os.pread, os.fstat, os.open, os.close, os.O_RDONLY


@dataclass(slots=True)
class _Cgroup:
    """A cgroup between ticks: its files, the descriptors held on them, its previous
    sample (updated in place each tick)."""

    paths: tuple[str | None, ...]  # by file index; None: that controller is not mounted
    at: float = float("-inf")  # the previous sample's time; -inf: none yet (no rate)
    cpu_seconds: float | None = None
    nr_periods: int | None = None
    nr_throttled: int | None = None
    #: The files ``fds`` hold, in order (the collector's ``wanted`` they were opened for);
    #: None while nothing is held.
    held: tuple[int, ...] | None = None
    fds: list[int] = field(default_factory=list)


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


def _field(data: bytes, key: bytes) -> int:
    """The value of a ``\\nkey `` line that is not the first: ``stat_field``'s figure for a
    key not on the first line. Raises ValueError where ``stat_field`` might answer
    otherwise (absent, the last line without its newline): the caller asks it then."""
    at = data.index(key) + len(key)
    return int(data[at : data.index(b"\n", at)])


def _stat_line(data: bytes, key: bytes) -> int:
    """``stat_field(data, key)``, by ``_field`` where the kernel's layout allows (the key not
    first), else by ``stat_field``; raises ValueError as ``stat_field`` does."""
    try:
        if data.startswith(key):
            raise ValueError("the key first: left to stat_field")
        return _field(data, b"\n" + key + b" ")
    except ValueError:
        return stat_field(data, key)


def _psi_avg10(data: bytes) -> float:
    """``some_avg10`` of a PSI file whose first line is ``some``, as the kernel writes it,
    by one slice; anything else by ``some_avg10`` (raises ValueError on garbage)."""
    if data.startswith(b"some avg10="):
        try:
            return float(data[11 : data.index(b" ", 11)])
        except ValueError:
            pass
    return some_avg10(data)


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
        max_open_files: int | None = None,
        budget: FileBudget | None = None,
    ) -> None:
        """``budget``: the bound on held descriptors shared with other readers (the
        agent's); else one of its own, of ``max_open_files`` (None: ``open_files_budget()``,
        0: nothing held)."""
        self.version = mounts.version
        self._cpu = mounts.controller_root("cpu")
        self._acct = mounts.controller_root("cpuacct")
        self._mem = mounts.controller_root("memory")
        probe = self._cpu or self._acct or mounts.cgroup_root
        self.layout = layout if layout is not None else PodCgroupLayout(probe, kubelet_root)
        self._clock = clock
        self.ext_cpu_resource = ext_cpu_resource
        self._log = log if log is not None else OnceLog()
        self._cgroups: dict[str, _Cgroup] = {}
        #: Descriptors held now by this collector, and the bound it shares.
        self._held = 0
        if budget is None:
            budget = FileBudget(open_files_budget() if max_open_files is None else max_open_files)
        self.budget = budget
        # None = not known yet; decided by the first read that finds the cgroup.
        self._cpu_psi: bool | None = None
        self._mem_psi: bool | None = None
        self._wanted = self._files_wanted()
        #: A file's read that failed in ``_reopen``, logged where its figure is parsed
        #: (the log keeps the order of a cgroup's files): index -> (level, event, path, fields).
        self._unread: dict[int, tuple[str, str, str, dict[str, Any]]] = {}
        self._figures = self._figures_v1 if self.version == 1 else self._figures_v2

    @property
    def clock(self) -> Callable[[], float]:
        """The clock rates are taken on (readers of the same tick share it)."""
        return self._clock

    @property
    def open_files(self) -> int:
        """Descriptors held on cgroup files now (within ``budget``)."""
        return self._held

    def close(self) -> None:
        """Close every held descriptor (the collector stays usable: it opens them again)."""
        for cgroup in self._cgroups.values():
            self._release(cgroup)

    def __del__(self) -> None:
        """A collector dropped without ``close`` gives its descriptors back (tests, a
        reload that builds another); at interpreter exit the process's end closes them."""
        if getattr(self, "_held", 0):
            with contextlib.suppress(OSError, TypeError):  # TypeError: globals torn down
                self.close()

    # -- one cgroup's files ----------------------------------------------------------

    def _files_wanted(self) -> tuple[int, ...]:
        """The files a cgroup is read from here: those of the mounted controllers, the PSI
        files while not known to be absent."""
        wanted = [COUNTER]
        if self.version == 1 and self._cpu is not None:
            wanted.append(CPU_STAT)
        if self._mem is not None:
            wanted += [MEM_USAGE, MEM_STAT]
        if (self._cpu or self._acct) is not None and self._cpu_psi is not False:
            wanted.append(CPU_PSI)
        if self._mem is not None and self._mem_psi is not False:
            wanted.append(MEM_PSI)
        return tuple(wanted)

    def _paths(self, rel: str) -> tuple[str | None, ...]:
        """The files one cgroup is read from, spelled once for its lifetime."""
        psi = self._cpu or self._acct
        mem = self._mem
        if self.version == 1:
            counter = f"{self._acct}/{rel}/cpuacct.usage"
            cpu_stat = f"{self._cpu}/{rel}/cpu.stat" if self._cpu is not None else None
            usage, stat = "memory.usage_in_bytes", "memory.stat"
        else:
            counter, cpu_stat = f"{self._acct}/{rel}/cpu.stat", None
            usage, stat = "memory.current", "memory.stat"
        return (
            counter,
            cpu_stat,
            f"{mem}/{rel}/{usage}" if mem is not None else None,
            f"{mem}/{rel}/{stat}" if mem is not None else None,
            f"{psi}/{rel}/cpu.pressure" if psi is not None else None,
            f"{mem}/{rel}/memory.pressure" if mem is not None else None,
        )

    def _release(self, cgroup: _Cgroup) -> None:
        for fd in cgroup.fds:
            _close(fd)
        self._held -= len(cgroup.fds)
        self.budget.give(len(cgroup.fds))
        cgroup.fds = []
        cgroup.held = None

    def _reopen(self, cgroup: _Cgroup) -> dict[int, bytes | None] | None:
        """Each wanted file's bytes, opened by its path (a cgroup not read before, one
        whose held descriptors failed or went stale, one beyond the budget); None when
        the cgroup is gone (no CPU counter file). Failed reads are noted in ``_unread``
        for the parse to log. The descriptors are kept when every file opened and read
        and the budget allows."""
        self._release(cgroup)
        self._unread.clear()
        wanted = self._wanted
        got: dict[int, bytes | None] = {}
        fds: list[int] = []
        for i in wanted:
            path = cgroup.paths[i]
            assert path is not None  # wanted: its controller is mounted
            try:
                fd = _open(path, O_RDONLY)
            except OSError as err:
                got[i] = None
                if i == COUNTER and isinstance(err, FileNotFoundError):
                    for fd in fds:
                        _close(fd)
                    return None
                self._failed(i, path, err)
                continue
            fds.append(fd)
            try:
                got[i] = _pread(fd, _BUF, 0)
            except OSError as err:
                got[i] = None
                self._failed(i, path, err)
            else:
                if i >= CPU_PSI:  # read: the host has per-cgroup PSI
                    if i == CPU_PSI:
                        self._cpu_psi = True
                    else:
                        self._mem_psi = True
        if len(fds) == len(wanted) and None not in got.values() and self.budget.take(len(fds)):
            cgroup.held, cgroup.fds = wanted, fds
            self._held += len(fds)
        else:
            for fd in fds:
                _close(fd)
        if wanted != self._files_wanted():  # the PSI files were found absent
            self._wanted = self._files_wanted()
        return got

    def _failed(self, i: int, path: str, err: OSError) -> None:
        """A file that could not be opened or read, noted to be logged in its turn."""
        if i == COUNTER:
            self._unread[i] = ("warn", "garbage in cgroup file", path, {"error": str(err)})
        elif i < CPU_PSI:
            if isinstance(err, FileNotFoundError):
                self._unread[i] = ("warn", "cgroup file missing", path, {})
            else:
                self._unread[i] = ("warn", "cgroup file unreadable", path, {"error": str(err)})
        # PSI: ENOENT in a cgroup that still exists, on the first read, is no per-cgroup
        # PSI here (cgroup v1, or a kernel without it): a fact of the host, said once (of
        # the two files only the CPU one feeds a decision, lc_cpu_pressure). Other
        # failures leave the figure out, quietly.
        elif (
            (self._cpu_psi if i == CPU_PSI else self._mem_psi) is None
            and err.errno == errno.ENOENT
            and os.path.isdir(path.rsplit("/", 1)[0])
        ):
            if i == CPU_PSI:
                self._cpu_psi = False
                self._unread[i] = ("info", NO_POD_PSI, path, {})
            else:
                self._mem_psi = False

    def _said(self, i: int) -> None:
        """Log the failed read of file ``i`` noted by ``_reopen``, if there was one."""
        noted = self._unread.pop(i, None)
        if noted is not None:
            level, event, path, fields = noted
            (self._log.warn if level == "warn" else self._log.info)(event, path, **fields)

    def _garbage(self, path: str | None, err: Exception) -> None:
        self._log.warn("garbage in cgroup file", str(path), error=str(err))

    # -- one cgroup's figures --------------------------------------------------------

    def _figures_v1(
        self, files: dict[int, bytes | None], paths: tuple[str | None, ...]
    ) -> tuple[float | None, int | None, int | None, float | None]:
        """CPU seconds and the throttling counters of a v1 cgroup."""
        cpu_seconds: float | None = None
        periods = throttled = None
        throttled_s: float | None = None
        data = files[COUNTER]
        if data is None:
            self._said(COUNTER)
        else:
            try:
                cpu_seconds = int(data[:128]) / 1e9
            except ValueError as err:
                self._garbage(paths[COUNTER], err)
        if CPU_STAT in files:
            data = files[CPU_STAT]
            if data is None:
                self._said(CPU_STAT)
            else:
                try:
                    periods, throttled, throttled_ns = _v1_cpu_stat(data)
                    throttled_s = throttled_ns / 1e9
                except ValueError as err:
                    self._garbage(paths[CPU_STAT], err)
        return cpu_seconds, periods, throttled, throttled_s

    def _figures_v2(
        self, files: dict[int, bytes | None], paths: tuple[str | None, ...]
    ) -> tuple[float | None, int | None, int | None, float | None]:
        """CPU seconds and the throttling counters of a v2 cgroup, both from ``cpu.stat``:
        the kernel's layout (``usage_usec`` first, the rest below) by slices, any other
        by ``stat_field``; the throttling counters only where the cpu controller is
        enabled for the cgroup (absent: no figure, no complaint)."""
        data = files[COUNTER]
        if data is None:
            self._said(COUNTER)
            return None, None, None, None
        try:
            if not data.startswith(b"usage_usec "):
                raise ValueError("not the kernel's cpu.stat layout")
            cpu_seconds: float | None = int(data[11 : data.index(b"\n")]) / 1e6
            return (cpu_seconds, _field(data, b"\nnr_periods "), _field(data, b"\nnr_throttled "),
                    _field(data, b"\nthrottled_usec ") / 1e6)  # fmt: skip
        except ValueError:
            pass
        cpu_seconds = None
        try:
            cpu_seconds = stat_field(data, b"usage_usec") / 1e6
        except ValueError as err:
            self._garbage(paths[COUNTER], err)
        try:
            return (cpu_seconds, stat_field(data, b"nr_periods"), stat_field(data, b"nr_throttled"),
                    stat_field(data, b"throttled_usec") / 1e6)  # fmt: skip
        except ValueError:
            return cpu_seconds, None, None, None

    def _memory(
        self, files: dict[int, bytes | None], paths: tuple[str | None, ...]
    ) -> tuple[int | None, int | None]:
        """Memory usage and inactive file pages."""
        mem_usage = inactive = None
        if MEM_USAGE not in files:
            return None, None
        data = files[MEM_USAGE]
        if data is None:
            self._said(MEM_USAGE)
        else:
            try:
                mem_usage = int(data)
            except ValueError as err:
                self._garbage(paths[MEM_USAGE], err)
        data = files[MEM_STAT]
        if data is None:
            self._said(MEM_STAT)
        else:
            try:
                inactive = _stat_line(data, b"total_inactive_file" if self.version == 1 else b"inactive_file")
            except ValueError as err:
                self._garbage(paths[MEM_STAT], err)
        return mem_usage, inactive

    def _read(self, rel: str, now: float, cgroup: _Cgroup | None) -> tuple[CgroupStats, _Cgroup] | None:
        """One cgroup's figures and its updated record; None when the cgroup is gone (its
        CPU counter file does not exist).

        Its held descriptors if it has them (``pread`` each, after a look at the counter's
        link count), else ``_reopen``; then the figures of each file, each the kernel's
        layout by the shortest parse and any other by the general one, garbage logged once
        and leaving that figure out."""
        if cgroup is None:
            cgroup = _Cgroup(self._paths(rel))
        files: dict[int, bytes | None] | None = None
        if cgroup.held is self._wanted:
            fds = cgroup.fds
            try:
                if _fstat(fds[0]).st_nlink:  # 0: removed (kernfs answers ENODEV instead)
                    files = dict(zip(cgroup.held, map(_pread, fds, _SIZES, _OFFSETS), strict=True))
            except OSError:
                pass
        if files is None:
            files = self._reopen(cgroup)
            if files is None:
                return None
        paths = cgroup.paths
        cpu_seconds, periods, throttled, throttled_s = self._figures(files, paths)
        mem_usage, inactive = self._memory(files, paths)
        cpu: float | None = None
        ratio: float | None = None
        if now > cgroup.at:
            if cpu_seconds is not None and cgroup.cpu_seconds is not None:
                delta = cpu_seconds - cgroup.cpu_seconds
                cpu = delta / (now - cgroup.at) if delta >= 0 else None
            if periods is not None and throttled is not None and cgroup.nr_periods is not None:
                d_periods = periods - cgroup.nr_periods
                d_throttled = throttled - (cgroup.nr_throttled or 0)
                if d_periods > 0 and d_throttled >= 0:
                    ratio = min(1.0, d_throttled / d_periods)
                elif d_periods == 0:
                    ratio = 0.0
        working_set: float | None = None
        if mem_usage is not None and inactive is not None:
            working_set = float(max(0, mem_usage - inactive))
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
            self._psi(files, paths, CPU_PSI) if CPU_PSI in files else None,
            self._psi(files, paths, MEM_PSI) if MEM_PSI in files else None,
        )
        cgroup.at, cgroup.cpu_seconds, cgroup.nr_periods, cgroup.nr_throttled = (
            now, cpu_seconds, periods, throttled)  # fmt: skip
        return stats, cgroup

    def _psi(self, files: dict[int, bytes | None], paths: tuple[str | None, ...], i: int) -> float | None:
        """PSI ``some avg10`` of file ``i``; None where not read (garbage logged once)."""
        data = files[i]
        if data is None:
            self._said(i)
            return None
        try:
            return _psi_avg10(data)
        except ValueError as err:
            self._log.warn("garbage in PSI file", str(paths[i]), error=str(err))
            return None

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

        The loop runs for every pod every tick, so it is written for that: its lookups
        bound once; a pod whose containers were all read shares its cached container paths
        instead of a copy. The cgroups not read this tick are dropped, their descriptors
        closed."""
        clock, locate, read = self._clock, self.layout.locate, self._read
        at = clock()
        before, self._cgroups = self._cgroups, {}
        was, now_cgroups = before.get, self._cgroups
        usage: dict[str, PodUsage] = {}
        stats: dict[str, PodStats] = {}
        missing: list[str] = []
        uids: set[str] = set()
        try:
            for pod in pods:
                uids.add(pod.uid)
                found: PodCgroup | None = locate(pod)
                now = clock()
                if found is None:
                    missing.append(pod.key)
                    continue
                rel = found.path
                got = read(rel, now, was(rel))
                if got is None:
                    self.layout.forget(pod.uid)
                    missing.append(pod.key)
                    continue
                pod_stats, now_cgroups[rel] = got
                containers: dict[str, CgroupStats] = {}
                copied: dict[str, str] | None = None  # the paths read, once one was not
                for name, rel in found.containers.items():
                    got = read(rel, now, was(rel))
                    if got is None:
                        self.layout.forget(pod.uid)  # restarted or gone: re-probe next tick
                        if copied is None:
                            copied = {n: r for n, r in found.containers.items() if n in containers}
                        continue
                    containers[name], now_cgroups[rel] = got
                    if copied is not None:
                        copied[name] = rel
                one = PodStats(pod.uid, found.path, pod_stats, containers,
                               found.containers if copied is None else copied)  # fmt: skip
                stats[pod.key] = one
                usage[pod.key] = self._pod_usage(pod, one)
            self.layout.retain(uids)
        finally:  # also when a read raised: no descriptor is lost
            gone = before.keys() - now_cgroups.keys()
            for rel in gone:
                self._release(before[rel])
            if gone:  # what was said of their files goes with them
                self._log.forget_naming({f"/{rel}/" for rel in gone})
        return PodStatsSample(at=at, usage=usage, stats=stats, missing=tuple(missing))
