"""Node-level metrics from the host's /proc, under the registry's metric names.

* ``cpu_total_usage`` (cores): busy share of the ``cpu`` line of ``<proc>/stat`` between
  two samples (``user+nice+system+irq+softirq``; idle, iowait and steal are not busy; guest
  time is already inside user) times the online CPUs (the ``cpuN`` lines). A ratio of
  jiffies needs no wall clock and no CLK_TCK. The first sample gives no figure.
* ``cpu_total_utilization`` (%): that over the allocatable cores (the node's, passed in;
  the CPU count when not known).
* ``memory_total_usage`` (bytes): the working set as kubelet sees it, from
  ``<proc>/meminfo``: ``MemTotal - MemFree - Inactive(file)`` (the root cgroup's usage
  minus inactive file pages).
* ``memory_total_utilization`` (%): that over allocatable memory (``MemTotal`` if unknown).
* ``cpu_pressure`` / ``memory_pressure`` (%): PSI ``some avg10`` from ``<proc>/pressure``.

A metric without a figure is absent from ``metrics`` (the analyzer reports it and neither
triggers nor restores on it). psutil is not used: its /proc location is process-global
(``psutil.PROCFS_PATH``) and these few files are simpler read directly under a
configurable root, the DaemonSet's host mount.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

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
    busy: int  # jiffies
    total: int
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


def parse_loadavg(text: str) -> tuple[float, float, float]:
    parts = text.split()
    return float(parts[0]), float(parts[1]), float(parts[2])


class NodeStatsCollector:
    def __init__(
        self,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
        log: OnceLog | None = None,
    ) -> None:
        self.proc_root = proc_root
        self._clock = clock
        self._log = log if log is not None else OnceLog()
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

    def collect(
        self, allocatable_cpu: float | None = None, allocatable_memory: float | None = None
    ) -> NodeStats:
        at = self._clock()
        metrics: dict[str, float] = {}
        cpu = self._parsed("stat", parse_proc_stat)
        cpus: int | None = None
        if isinstance(cpu, CpuTimes):
            cpus = cpu.cpus
            prev, self._prev_cpu = self._prev_cpu, cpu
            if prev is not None and cpu.total > prev.total and cpu.busy >= prev.busy:
                cores = (cpu.busy - prev.busy) / (cpu.total - prev.total) * cpu.cpus
                metrics[CPU_TOTAL_USAGE] = cores
                alloc = allocatable_cpu if allocatable_cpu else float(cpu.cpus)
                metrics[CPU_TOTAL_UTILIZATION] = cores / alloc * 100.0
        mem = self._parsed("meminfo", parse_meminfo)
        memory_total: float | None = None
        if isinstance(mem, dict):
            try:
                memory_total = float(mem["MemTotal"])
                ws = max(0, mem["MemTotal"] - mem["MemFree"] - mem.get("Inactive(file)", 0))
                metrics[MEMORY_TOTAL_USAGE] = float(ws)
                alloc_mem = allocatable_memory if allocatable_memory else memory_total
                if alloc_mem > 0:
                    metrics[MEMORY_TOTAL_UTILIZATION] = ws / alloc_mem * 100.0
            except KeyError as err:
                self._log.warn(
                    "meminfo without a field",
                    os.path.join(self.proc_root, "meminfo"),
                    field=str(err),
                )
        for name, metric in (("cpu", CPU_PRESSURE), ("memory", MEMORY_PRESSURE)):
            path = os.path.join(self.proc_root, "pressure", name)
            try:
                metrics[metric] = parse_psi(read_bytes(path).decode("ascii", "replace")).some.avg10
            except OSError as err:
                self._log.warn("no PSI file", path, error=str(err))
            except ValueError as err:
                self._log.warn("garbage in PSI file", path, error=str(err))
        load = self._parsed("loadavg", parse_loadavg)
        return NodeStats(
            at=at,
            metrics=metrics,
            cpus=cpus,
            memory_total=memory_total,
            load=load if isinstance(load, tuple) else None,
        )
