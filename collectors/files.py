"""Small, fast file reads for the collectors, and a "log once" guard for bad files.

A tick reads about a thousand small pseudo-files; ``os.open``/``os.read`` on bytes avoids
the text-IO layers of ``open()`` (a measurable share of the tick on 250 pods). A file that
is missing or holds garbage is logged once per path and problem, then skipped quietly on
later ticks: a single bad pod must never crash the agent nor flood its log.
"""

from __future__ import annotations

import os
import resource
from typing import Any

import structlog

#: Forget what was logged beyond this many distinct problems (pod churn over months).
_MAX_REMEMBERED = 10_000
#: Descriptors a collector leaves to the rest of the process (sockets, watches, logs,
#: the other readers): a quarter of the limit, at least this many.
_SPARE_FILES = 256
#: The most descriptors held across ticks by default, whatever the limit allows (the
#: agent's ``maxOpenFiles`` setting, ``agent.model.settings``): each costs about 4.4 KiB
#: of kernel memory once read (its seq-file page), charged to the agent's memory cgroup
#: but not shown in its RSS. 4,096 is 17 MiB: 250 pods of 3 containers on v1 (1,000
#: cgroups, 4 files each) all held, and past it the files are opened each tick as before
#: (CPU, not memory, pays for the node's size).
_MAX_HELD_FILES = 4096


def read_bytes(path: str, limit: int = 65536) -> bytes:
    """The content of a small file; raises OSError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def open_files_budget(max_open_files: int = _MAX_HELD_FILES) -> int:
    """How many descriptors the collectors may hold open across ticks: the process's soft
    ``RLIMIT_NOFILE`` less a quarter of it (at least ``_SPARE_FILES``) for everything
    else, and never more than ``max_open_files`` (kernel memory; the agent's
    ``maxOpenFiles``, default 4,096). 1,024 (a shell's usual limit) leaves 768; the
    DaemonSet's 20,000, 4,096 (the pod collector holds 4 a cgroup on v1, 5 on v2; the
    cgroups beyond the budget are opened and closed each tick)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, min(max_open_files, soft - max(_SPARE_FILES, soft // 4)))


class FileBudget:
    """The descriptors the collectors of one agent hold across ticks, counted against one
    bound: the pod collector's cgroup files and the ``lc_*`` reader's schedstat files
    share it, first come, first served (a file held stays held while it is read each
    tick). A reader that gets no room opens and closes its file each tick, as without
    held files: only the CPU differs, never a figure."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, n: int) -> bool:
        """Room for ``n`` more descriptors, counted as held if there is."""
        if self.held + n > self.limit:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        """``n`` descriptors closed."""
        self.held -= n


def read_int(path: str) -> int:
    """A file holding one integer; raises OSError or ValueError."""
    return int(read_bytes(path, 128))


def stat_field(data: bytes, key: bytes) -> int:
    """The value of ``key`` in a ``key value`` per line file (cpu.stat, memory.stat).

    A plain ``find`` beats splitting the ~40 lines of memory.stat into a dict each tick.
    Raises ValueError when the key is absent or its value is not an integer.
    """
    start = 0
    while True:
        at = data.find(key, start)
        if at < 0:
            raise ValueError(f"no {key.decode()} field")
        end_key = at + len(key)
        if (at == 0 or data[at - 1] == 0x0A) and data[end_key : end_key + 1] == b" ":
            end = data.find(b"\n", end_key)
            return int(data[end_key + 1 : end if end >= 0 else len(data)])
        start = end_key


class OnceLog:
    """Log each (problem, path) once; later occurrences are counted, not logged."""

    def __init__(self, logger: Any | None = None) -> None:
        self._log = logger if logger is not None else structlog.get_logger()
        self._seen: set[tuple[str, str]] = set()
        self.suppressed = 0

    def warn(self, event: str, path: str, *, named: str = "path", **fields: Any) -> None:
        """``path`` is what the problem is about, logged as ``named`` (a pod's key is not a
        path: ``named="pod"``)."""
        if self._first(event, path):
            self._log.warning(event, **{named: path}, **fields)

    def info(self, event: str, path: str, *, named: str = "path", **fields: Any) -> None:
        """As ``warn``, for what is a fact of the host rather than a problem."""
        if self._first(event, path):
            self._log.info(event, **{named: path}, **fields)

    def _first(self, event: str, path: str) -> bool:
        key = (event, path)
        if key in self._seen:
            self.suppressed += 1
            return False
        if len(self._seen) >= _MAX_REMEMBERED:
            self._seen.clear()
        self._seen.add(key)
        return True

    def forget(self, path_prefix: str) -> None:
        """Allow a path to be logged again (e.g. a pod that came back)."""
        self._seen = {k for k in self._seen if not k[1].startswith(path_prefix)}

    def forget_naming(self, parts: set[str]) -> None:
        """Forget every problem whose path holds one of ``parts`` (a cgroup that went,
        ``/<rel>/``; a pod that went, ``(<uid>)``): what was said of a pod gone is not
        kept for the life of the agent (issue 32), and it is said again if it comes back."""
        if self._seen and parts:
            self._seen = {k for k in self._seen if not any(part in k[1] for part in parts)}

    @property
    def remembered(self) -> int:
        """Problems said and remembered (said again only once forgotten)."""
        return len(self._seen)
