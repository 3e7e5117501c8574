"""The bench CPU kept for the pods: every process outside ``kubepods`` moved off it.

On this machine the real node is also the control plane: the API server, etcd, the
kubelet, containerd and the run's own tools share the two CPUs with the pods. In the
first real-node run they took 8.7-11.1% of the bench CPU in the windows where web was
alone and 0.4-3.7% in the contended ones (with the bench CPU busy the kernel puts them
elsewhere), so the *baseline* carried work the contended windows did not: its tail was
theirs as much as web's. A node with reserved system CPUs (the kubelet's
``reservedSystemCPUs``) keeps its daemons off the pods' CPUs; the benchmark does the same
for the CPU it measures on, by affinity:

* ``movable`` (pure) picks, from what ``/proc`` says, the processes to move: user
  processes outside ``kubepods`` still allowed on the bench CPU. Kernel threads stay
  (many are per-CPU), and so do the pods' processes (the agent's among them: its cost on
  that CPU is Waterline's, and the web and batch pods pin themselves there anyway).
* ``BenchCpu`` moves them at the run's start and again before every window (children
  inherit the narrowed mask, but a process started from elsewhere would not), keeps
  each one's mask as it found it, and gives it back at the end; a process first seen
  narrowed by inheritance gets every CPU back, which is what it had from a parent we
  narrowed.

The share of the bench CPU the remaining processes take is still measured in every
window ("others %").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

#: ``PF_KTHREAD`` in the flags of ``/proc/<pid>/stat``: a kernel thread.
PF_KTHREAD = 0x00200000
KUBEPODS = "/kubepods"


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    cgroup: str  # the cpu controller's path (v1) or the unified path (v2)
    cpus: frozenset[int]
    kernel_thread: bool

    @property
    def outside_pods(self) -> bool:
        """A user process outside kubepods: what the bench CPU is kept free of."""
        return not self.kernel_thread and KUBEPODS not in self.cgroup


def movable(procs: Iterable[Proc], cpu: int, keep: Iterable[int] = ()) -> list[int]:
    """The pids to move off ``cpu``: user processes outside kubepods allowed on it,
    except ``keep``."""
    kept = set(keep)
    return sorted(p.pid for p in procs
                  if cpu in p.cpus and p.outside_pods and p.pid not in kept and len(p.cpus) > 1)  # fmt: skip


def cpu_cgroup(text: str) -> str:
    """The cpu controller's path in a ``/proc/<pid>/cgroup`` text (the unified one where
    no v1 line names ``cpu``)."""
    unified = ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "cpu" in controllers.split(","):
            return path
        if controllers == "":
            unified = path
    return unified


def read_proc(pid: int, proc: str = "/proc") -> Proc | None:
    """What ``movable`` needs of one process; None when it is gone or unreadable."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            stat = f.read()
        with open(f"{proc}/{pid}/cgroup") as f:
            cgroup = cpu_cgroup(f.read())
        cpus = frozenset(os.sched_getaffinity(pid))
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    flags = int(fields[6]) if len(fields) > 6 else 0  # field 9 of stat, after the comm
    return Proc(pid, cgroup, cpus, bool(flags & PF_KTHREAD))


def all_procs(proc: str = "/proc") -> Iterator[Proc]:
    for name in os.listdir(proc):
        if name.isdigit():
            found = read_proc(int(name), proc)
            if found is not None:
                yield found


@dataclass
class BenchCpu:
    """Keeps the processes outside kubepods off ``cpu`` while the run lasts. ``source``
    lists the processes (every one of this machine's by default; a test gives its own)."""

    cpu: int
    source: Callable[[], Iterable[Proc]] = all_procs
    #: Every CPU this machine lets the bench use: what a narrowed child gets back.
    every: frozenset[int] = field(default_factory=lambda: frozenset(os.sched_getaffinity(0)))
    #: pid -> the mask to give back: as first found, or ``every`` for a child narrowed by
    #: a parent this moved.
    moved: dict[int, frozenset[int]] = field(default_factory=dict)
    #: Processes already off ``cpu`` at the first sweep: their own choice, left alone.
    theirs: set[int] | None = None

    def __post_init__(self) -> None:
        self.every = self.every | {self.cpu}

    def keep_off(self) -> int:
        """Move what is movable now; how many were moved."""
        procs = list(self.source())
        narrowed = self.every - {self.cpu}
        if self.theirs is None:
            self.theirs = {p.pid for p in procs if self.cpu not in p.cpus}
        by_pid: Mapping[int, Proc] = {p.pid: p for p in procs}
        done = 0
        for pid in movable(procs, self.cpu, keep=[os.getpid()]):
            before = by_pid[pid].cpus
            with contextlib.suppress(OSError):  # gone, or a mask it may not change
                os.sched_setaffinity(pid, before - {self.cpu})
                self.moved.setdefault(pid, before)
                done += 1
        for p in procs:  # a child of one moved: inherited the narrowed mask
            if p.pid not in self.moved and p.pid not in self.theirs and p.cpus == narrowed and p.outside_pods:
                self.moved[p.pid] = self.every
        return done

    def give_back(self) -> int:
        """Every moved process that is still there gets its mask back; how many."""
        back = 0
        for pid, cpus in self.moved.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, cpus)
                back += 1
        self.moved.clear()
        return back
