"""Interference seen by the victims: the ``lc_*`` node metrics, from the latency-critical
pods (DESIGN.md "Interference seen by the victims"; which pods: ``agent.model.latency``).

* ``lc_cpu_wait_ratio`` (%): the time the pod's tasks spent runnable but waiting for a CPU
  (``run_delay``, the second field of ``<proc>/<tid>/schedstat``, kept by the kernel per
  task on cgroup v1 and v2 alike) over the interval, per second of wall time, the worst
  pod. It sums over the pod's tasks: 100 means one task of the pod waiting all the time on
  average (a pod of several busy threads can go past 100, as a load average does).
* ``lc_cpu_throttled_ratio`` (%): the share of the pod's CFS periods throttled since the
  previous sample (``cpu.stat``, already read by ``collectors.pod_stats``), the worst pod.
* ``lc_cpu_pressure`` (%): the pod's PSI ``some avg10`` (per-cgroup PSI: cgroup v2, already
  read by ``collectors.pod_stats``), the worst pod; absent on v1.

A metric none of whose pods has a figure is absent (the analyzer reports it as missing).

Cost: the task lists come from the container cgroups the pod collector already found (no
search; kubelet puts no task in the pod cgroup itself), ``tasks`` on v1 and
``cgroup.threads`` on v2, and only for the latency-critical pods; then one small read per
task. Per task, the run delay of the
previous sample is kept; a task seen for the first time counts its whole run delay (it
started during the interval; one that moved in from another cgroup is counted once too
much), a task that went away counts nothing. The first sample of a pod gives no figure.

**Held files** (issue 32), as the pod collector's: a file read in a tick is read the
next with one ``pread`` at offset 0 on a descriptor held open (the kernel answers it
afresh: ``schedstat`` is a single-record proc file, ``cgroup.threads`` restarts its walk
of the cgroup's tasks), within the ``FileBudget`` shared with the pod collector, and
closed at the end of a tick that did not read it. A held ``schedstat`` of a task that
exited answers ``ESRCH`` (a task that came with the same id later is another task, which
only its path opens); a file removed from a tree that is not the kernel's (tests,
benches) has a link count of 0: either way the file is opened again by its path, which
gives what a fresh open always gave (the new file, or not found). v1's ``tasks`` is
opened each tick: the kernel keeps the list it built for a descriptor for a second after
a read and answers the next read at offset 0 from it if it is still there, so a held
``tasks`` could miss a task that came within the last second.

The kernel lists in ``tasks`` only the tasks visible in the reader's pid namespace (v2
lists the others as 0). An agent outside the host's pid namespace therefore sees no task
in a pod's cgroups: the pod gets no figure, and that is logged once with the reason.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

from agent.model.objects import Pod
from collectors.files import FileBudget, OnceLog, open_files_budget
from collectors.pod_stats import PodStats

LC_CPU_WAIT_RATIO = "lc_cpu_wait_ratio"
LC_CPU_THROTTLED_RATIO = "lc_cpu_throttled_ratio"
LC_CPU_PRESSURE = "lc_cpu_pressure"
#: Logged once, and not counted as a collector error: a deployment choice, not a bad file.
NO_TASKS_VISIBLE = (
    "no task visible in the pod's cgroups (none started, or the agent is outside the host's"
    " pid namespace): no lc_cpu_wait_ratio figure for it"
)


@dataclass(frozen=True, slots=True)
class _Seen:
    at: float
    delays: Mapping[int, int]  # tid -> run_delay, ns


def parse_tids(data: bytes) -> list[int]:
    """The task ids of a ``tasks`` / ``cgroup.threads`` file; 0 (not visible here) skipped."""
    out = []
    for word in data.split():
        try:
            tid = int(word)
        except ValueError:
            continue
        if tid > 0:
            out.append(tid)
    return out


def parse_run_delay(data: bytes) -> int:
    """``run_delay`` (ns) of a ``schedstat`` line ``<on-cpu ns> <run_delay ns> <slices>``;
    raises ValueError on anything else."""
    fields = data.split()
    if len(fields) < 2:
        raise ValueError(f"not a schedstat line: {data[:40]!r}")
    return int(fields[1])


#: The first read of a file asks for this much: a task list is a few hundred bytes, and
#: asking for its whole bound (1 MiB) at once cost an allocation of that size a read, more
#: than the read itself (52 us against 25 for the open, 250 pods on tmpfs).
_FIRST_READ = 4096


def read_whole(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of a file from offset 0, what one ``read(fd, limit)`` gives:
    a first ``pread`` of ``_FIRST_READ`` bytes, and only if it came back full the rest, on
    from there to its end (a short read is the end: seq files and proc files fill what is
    asked up to it)."""
    first = min(limit, _FIRST_READ)
    data = os.pread(fd, first, 0)
    if len(data) < first:
        return data
    parts, got = [data], len(data)
    while got < limit:
        more = os.pread(fd, min(limit - got, 16 * _FIRST_READ), got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class HeldFiles:
    """Descriptors held open on files read each tick, by key, within a ``FileBudget``:
    ``read`` gives what ``read_bytes`` would (the same bytes, the same OSError), ``sweep``
    closes the ones not read since the last sweep."""

    def __init__(self, budget: FileBudget) -> None:
        self.budget = budget
        self._fds: dict[Hashable, int] = {}
        self._read: set[Hashable] = set()

    def __len__(self) -> int:
        return len(self._fds)

    def read(self, key: Hashable, path: str, limit: int) -> bytes:
        fd = self._fds.get(key)
        if fd is not None:
            try:
                if os.fstat(fd).st_nlink:  # 0: removed (the kernel's files answer an error)
                    data = read_whole(fd, limit)
                    self._read.add(key)
                    return data
            except OSError:
                pass
            self._drop(key)  # stale: opened again by its path, as a fresh read would
        fd = os.open(path, os.O_RDONLY)
        try:
            data = read_whole(fd, limit)
        except BaseException:
            os.close(fd)
            raise
        if self.budget.take(1):
            self._fds[key] = fd
            self._read.add(key)
        else:
            os.close(fd)
        return data

    def _drop(self, key: Hashable) -> None:
        os.close(self._fds.pop(key))
        self.budget.give(1)

    def sweep(self) -> None:
        """Close what was not read since the last sweep (a tick's end)."""
        for key in [k for k in self._fds if k not in self._read]:
            self._drop(key)
        self._read = set()

    def close(self) -> None:
        for key in list(self._fds):
            self._drop(key)
        self._read = set()


class TaskWaitReader:
    """Run-queue wait per pod, from its tasks' schedstat, between two calls."""

    def __init__(
        self,
        cgroup_root: str,
        version: int,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
        log: OnceLog | None = None,
        budget: FileBudget | None = None,
    ) -> None:
        """``budget``: the bound on held descriptors shared with the pod collector (the
        agent's); else one of its own (``open_files_budget()``)."""
        self.cgroup_root = cgroup_root
        self.task_file = "tasks" if version == 1 else "cgroup.threads"
        self.proc_root = proc_root
        self._clock = clock
        self._log = log if log is not None else OnceLog()
        self._seen: dict[str, _Seen] = {}
        #: The pods something was said of (forgotten with them: ``retain``).
        self._said: set[str] = set()
        self.files = HeldFiles(budget if budget is not None else FileBudget(open_files_budget()))
        #: v1's ``tasks`` is opened each tick (the module's docstring says why).
        self._hold_lists = version != 1

    @property
    def open_files(self) -> int:
        """Descriptors held now."""
        return len(self.files)

    def close(self) -> None:
        """Close every held descriptor (the reader stays usable: it opens them again)."""
        self.files.close()

    def __del__(self) -> None:
        """A reader dropped without ``close`` gives its descriptors back."""
        with contextlib.suppress(AttributeError, OSError, TypeError):  # TypeError: torn down
            self.files.close()

    def end_tick(self) -> None:
        """Close the descriptors of the files this tick did not read (tasks gone, pods no
        longer latency-critical or gone)."""
        self.files.sweep()

    def _list(self, path: str) -> bytes:
        if self._hold_lists:
            return self.files.read(path, path, 1 << 20)
        fd = os.open(path, os.O_RDONLY)
        try:
            return read_whole(fd, 1 << 20)
        finally:
            os.close(fd)

    def _tids(self, rels: Iterable[str]) -> list[int] | None:
        """Every task of the cgroups; None when one of them is gone."""
        tids: list[int] = []
        for rel in rels:
            try:
                data = self._list(f"{self.cgroup_root}/{rel}/{self.task_file}")
            except OSError:
                return None  # the cgroup went away: the pod collector re-probes next tick
            tids.extend(parse_tids(data))
        return tids

    def _delays(self, tids: list[int]) -> dict[int, int]:
        delays: dict[int, int] = {}
        read = self.files.read
        for tid in tids:
            path = f"{self.proc_root}/{tid}/schedstat"
            try:
                delays[tid] = parse_run_delay(read(tid, path, 256))
            except FileNotFoundError:
                continue  # the task exited since the list was read
            except (OSError, ValueError) as err:
                self._log.warn("schedstat unreadable", path, error=str(err))
        return delays

    def wait_ratio(self, key: str, rels: Iterable[str], shown: str = "") -> float | None:
        """Percent of wall time the pod's tasks waited on a run queue since the last call
        for ``key``; None on the first call, and when no task is visible. ``shown`` is how
        a warning names the pod (``namespace/name (uid)``: a uid alone tells an operator
        nothing); ``key`` when not given."""
        tids = self._tids(rels)
        now = self._clock()
        if tids is None:
            self._seen.pop(key, None)
            return None
        if not tids:
            self._log.warn(NO_TASKS_VISIBLE, shown or key, named="pod")
            self._said.add(key)
            self._seen.pop(key, None)
            return None
        delays = self._delays(tids)
        prev, self._seen[key] = self._seen.get(key), _Seen(now, delays)
        if prev is None or now <= prev.at:
            return None
        waited = 0
        for tid, delay in delays.items():
            before = prev.delays.get(tid, 0)
            waited += delay - before if delay >= before else delay  # a reused tid: new task
        return waited / 1e9 / (now - prev.at) * 100.0

    def retain(self, keys: set[str]) -> None:
        """Keep what is kept of these pods only: their last sample, and what was said of
        them (``shown`` names a pod ``... (<key>)``: said again if it comes back)."""
        for key in [k for k in self._seen if k not in keys]:
            del self._seen[key]
        gone = self._said - keys
        if gone:
            self._said -= gone
            self._log.forget_naming({f"({key})" for key in gone})


def worst(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _throttled_percent(stats: PodStats) -> float | None:
    throttling = stats.pod.throttling
    if throttling is None or throttling.throttled_ratio is None:
        return None
    return throttling.throttled_ratio * 100.0


class InterferenceCollector:
    """The three ``lc_*`` metrics of a tick, from the pod collector's figures of the
    latency-critical pods and their tasks' run delay."""

    def __init__(self, waits: TaskWaitReader) -> None:
        self.waits = waits

    def collect(self, lc_pods: Iterable[Pod], stats: Mapping[str, PodStats]) -> dict[str, float]:
        named = [(p.key, stats[p.key]) for p in lc_pods if p.key in stats]
        read = [s for _, s in named]
        self.waits.retain({s.uid for s in read})
        values = {
            LC_CPU_WAIT_RATIO: worst(
                self.waits.wait_ratio(s.uid, s.container_paths.values(), f"{key} ({s.uid})")
                for key, s in named
            ),
            LC_CPU_THROTTLED_RATIO: worst(_throttled_percent(s) for s in read),
            LC_CPU_PRESSURE: worst(s.pod.cpu_pressure for s in read),
        }
        self.waits.end_tick()
        return {name: value for name, value in values.items() if value is not None}
