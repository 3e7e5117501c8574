"""Node-level metrics from the host's /proc, under the registry's metric names.

* ``cpu_total_usage`` (cores): busy share of the aggregate CPU times between two samples
  (``user+nice+system+irq+softirq``; idle, iowait and steal are not busy; guest time is
  already inside user) times the online CPUs. A ratio of times needs no wall clock. The
  first sample gives no figure.
* ``cpu_total_utilization`` (%): that over the allocatable cores (the node's, passed in;
  the CPU count when not known).
* ``memory_total_usage`` (bytes): the working set as kubelet sees it, from
  ``<proc>/meminfo``: ``MemTotal - MemFree - Inactive(file)`` (the root cgroup's usage
  minus inactive file pages).
* ``memory_total_utilization`` (%): that over allocatable memory (``MemTotal`` if unknown).
* ``cpu_pressure`` / ``memory_pressure`` (%): PSI ``some avg10`` from ``<proc>/pressure``.

A metric without a figure is absent from ``metrics`` (the analyzer reports it and neither
triggers nor restores on it).

Which reads go through psutil, and why (``python -m bench collectors``, "node stats"):

* CPU times: ``psutil.cpu_times()`` (it reads only the aggregate line of ``<proc>/stat``)
  and ``psutil.cpu_count()`` (online CPUs, from sysfs; not namespaced, so the host's
  count inside the DaemonSet too). psutil's /proc is process-global: the collector points
  ``psutil.PROCFS_PATH`` at its ``proc_root`` (the agent's ``--proc-root``) once, when it
  is built; one agent process reads one host. Counting the CPUs through psutil's
  per-CPU times instead would parse every ``cpuN`` line into floats, 4x the cost of our
  whole-file parse on a 64-CPU host.
* Memory stays a hand read: ``psutil.virtual_memory()`` has no ``Inactive(file)`` (its
  ``inactive`` is anon plus file), which the working set subtracts; three ``find``s in
  the bytes of meminfo cost about what psutil's full parse does (28 vs 32 us).
* PSI and the load stay hand reads: psutil has no PSI, and ``psutil.getloadavg()`` reads
  the process's own /proc, not ``PROCFS_PATH``.

Measured (CPU time per tick, the 2-CPU dev machine's /proc / a fake 64-CPU /proc, medians
of interleaved runs): every file by hand 167 / 166 us; now 118 / 99 us. Of that, the CPU
read went from 30 to 16 us and meminfo from 60 to 28 us on the dev machine's /proc.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psutil

from collectors.files import OnceLog, read_bytes
from collectors.psi import parse_psi

CPU_TOTAL_USAGE = "cpu_total_usage"
CPU_TOTAL_UTILIZATION = "cpu_total_utilization"
MEMORY_TOTAL_USAGE = "memory_total_usage"
MEMORY_TOTAL_UTILIZATION = "memory_total_utilization"
CPU_PRESSURE = "cpu_pressure"
MEMORY_PRESSURE = "memory_pressure"


@dataclass(frozen=True, slots=True)
class CpuTimes:
    busy: float  # jiffies from parse_proc_stat, seconds from psutil: only ratios are used
    total: float
    cpus: int


@dataclass(frozen=True, slots=True)
class NodeStats:
    at: float
    #: Registry metric name -> value; a metric without a figure is absent.
    metrics: Mapping[str, float] = field(default_factory=dict)
    cpus: int | None = None
    memory_total: float | None = None
    load: tuple[float, float, float] | None = None  # 1, 5, 15 minutes


def parse_proc_stat(text: str) -> CpuTimes:
    busy = total = -1
    cpus = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            v += [0] * (8 - len(v))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            busy = user + nice + system + irq + softirq
            total = busy + idle + iowait + steal
        elif line.startswith("cpu"):
            cpus += 1
    if total < 0 or cpus == 0:
        raise ValueError("no cpu lines")
    return CpuTimes(busy, total, cpus)


def parse_meminfo(text: str) -> dict[str, int]:
    """``Key: value kB`` lines -> bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and parts:
            try:
                out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
            except ValueError:
                continue
    return out


def meminfo_field(data: bytes, key: bytes) -> int | None:
    """One ``Key: value [kB]`` line of meminfo, in bytes (None when absent or garbled).

    Three of these cost less than splitting the ~55 lines into a dict each tick."""
    at = data.find(b"\n" + key + b":")
    if at < 0:
        if not data.startswith(key + b":"):
            return None
        at = -1
    end = data.find(b"\n", at + 1)
    parts = data[at + len(key) + 2 : end if end >= 0 else len(data)].split()
    try:
        value = int(parts[0])
    except (IndexError, ValueError):
        return None
    return value * 1024 if parts[1:] == [b"kB"] else value


def parse_loadavg(text: str) -> tuple[float, float, float]:
    parts = text.split()
    return float(parts[0]), float(parts[1]), float(parts[2])


def psutil_cpu_times(cpu_count: Callable[[], int | None] = psutil.cpu_count) -> CpuTimes:
    """The aggregate CPU times under ``psutil.PROCFS_PATH``; raises OSError when the file
    is unreadable, ValueError when it holds no CPU times."""
    try:
        t = psutil.cpu_times()
    except (TypeError, IndexError) as err:  # a line too short for psutil's field tuple
        raise ValueError(f"no cpu times: {err}") from None
    cpus = cpu_count()
    if not cpus:
        raise ValueError("no online CPU count")
    busy = t.user + t.nice + t.system + t.irq + t.softirq
    return CpuTimes(busy, busy + t.idle + t.iowait + t.steal, cpus)


class NodeStatsCollector:
    def __init__(
        self,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
        log: OnceLog | None = None,
        cpu_count: Callable[[], int | None] = psutil.cpu_count,
    ) -> None:
        self.proc_root = proc_root
        psutil.PROCFS_PATH = proc_root  # once, at start: psutil's /proc is process-global
        self._clock = clock
        self._log = log if log is not None else OnceLog()
        #: Online CPUs (psutil: sysfs, the host's in the DaemonSet too); tests on a fake
        #: /proc pass their own.
        self._cpu_count = cpu_count
        self._prev_cpu: CpuTimes | None = None

    def _text(self, name: str) -> str | None:
        path = os.path.join(self.proc_root, name)
        try:
            return read_bytes(path, 1 << 20).decode("ascii", "replace")
        except OSError as err:
            self._log.warn("proc file unreadable", path, error=str(err))
            return None

    def _parsed(self, name: str, parse: Callable[[str], object]) -> object | None:
        text = self._text(name)
        if text is None:
            return None
        try:
            return parse(text)
        except (ValueError, IndexError) as err:
            self._log.warn(
                "garbage in proc file", os.path.join(self.proc_root, name), error=str(err)
            )
            return None

    def _read_cpu(self) -> CpuTimes | None:
        path = os.path.join(self.proc_root, "stat")
        try:
            return psutil_cpu_times(self._cpu_count)
        except OSError as err:
            self._log.warn("proc file unreadable", path, error=str(err))
        except ValueError as err:
            self._log.warn("garbage in proc file", path, error=str(err))
        return None

    def _cpu(self, metrics: dict[str, float], allocatable_cpu: float | None) -> int | None:
        """Adds the CPU metrics (from the second sample on); returns the CPU count."""
        cpu = self._read_cpu()
        if cpu is None:
            return None
        prev, self._prev_cpu = self._prev_cpu, cpu
        if prev is not None and cpu.total > prev.total and cpu.busy >= prev.busy:
            cores = (cpu.busy - prev.busy) / (cpu.total - prev.total) * cpu.cpus
            metrics[CPU_TOTAL_USAGE] = cores
            alloc = allocatable_cpu if allocatable_cpu else float(cpu.cpus)
            metrics[CPU_TOTAL_UTILIZATION] = cores / alloc * 100.0
        return cpu.cpus

    def _memory(self, metrics: dict[str, float], allocatable_memory: float | None) -> float | None:
        """Adds the memory metrics; returns MemTotal."""
        path = os.path.join(self.proc_root, "meminfo")
        try:
            data = read_bytes(path, 1 << 20)
        except OSError as err:
            self._log.warn("proc file unreadable", path, error=str(err))
            return None
        total, free = meminfo_field(data, b"MemTotal"), meminfo_field(data, b"MemFree")
        if total is None or free is None:
            missing = "MemTotal" if total is None else "MemFree"
            self._log.warn("meminfo without a field", path, field=repr(missing))
            return None
        ws = max(0, total - free - (meminfo_field(data, b"Inactive(file)") or 0))
        metrics[MEMORY_TOTAL_USAGE] = float(ws)
        alloc_mem = allocatable_memory if allocatable_memory else float(total)
        if alloc_mem > 0:
            metrics[MEMORY_TOTAL_UTILIZATION] = ws / alloc_mem * 100.0
        return float(total)

    def _pressure(self, metrics: dict[str, float]) -> None:
        for name, metric in (("cpu", CPU_PRESSURE), ("memory", MEMORY_PRESSURE)):
            path = os.path.join(self.proc_root, "pressure", name)
            try:
                metrics[metric] = parse_psi(read_bytes(path).decode("ascii", "replace")).some.avg10
            except OSError as err:
                self._log.warn("no PSI file", path, error=str(err))
            except ValueError as err:
                self._log.warn("garbage in PSI file", path, error=str(err))

    def collect(
        self, allocatable_cpu: float | None = None, allocatable_memory: float | None = None
    ) -> NodeStats:
        at = self._clock()
        metrics: dict[str, float] = {}
        cpus = self._cpu(metrics, allocatable_cpu)
        memory_total = self._memory(metrics, allocatable_memory)
        self._pressure(metrics)
        load = self._parsed("loadavg", parse_loadavg)
        return NodeStats(
            at=at,
            metrics=metrics,
            cpus=cpus,
            memory_total=memory_total,
            load=load if isinstance(load, tuple) else None,
        )
