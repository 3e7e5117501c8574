"""What an earlier demo left behind when it could not clean up (kill -9, a power cut),
found by the demo's naming and removed before a new demo starts.

A demo names everything after its own pid: its kubelet cgroup root
``waterline-demo-<pid>`` (in each v1 hierarchy it uses), its probe ``waterline-probe-<pid>``
and its scratch folder ``$TMPDIR/waterline-demo-<pid>-*``. Whatever carries the pid of a
process that is no longer a running demo is a leftover: the processes still in its cgroups
are killed (its busy loops die with their demo, see ``cgroups.die_with_parent``, but a
process that someone else put there would not), then the cgroups are removed, deepest
first, and the folder deleted. A demo that is still running (another terminal) is left
alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from devtools.demo.cgroups import kill_and_wait

_CGROUP = re.compile(r"^waterline-(?:demo|probe)-(\d+)$")
_WORKDIR = re.compile(r"^waterline-demo-(\d+)-")


@dataclass
class Removed:
    processes: int = 0
    cgroups: list[str] = field(default_factory=list)  # top-level names, e.g. waterline-demo-42
    workdirs: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # paths that would not go

    def __bool__(self) -> bool:
        return bool(self.processes or self.cgroups or self.workdirs or self.left)


def demo_running(pid: int) -> bool:
    """Whether ``pid`` is a live demo (a reused pid running something else is not)."""
    if pid == os.getpid():
        return True
    try:
        command = " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # cannot tell: leave it
    return "demo" in command


def _stale(pattern: re.Pattern[str], names: Iterable[str]) -> list[str]:
    return [n for n in names if (m := pattern.match(n)) and not demo_running(int(m.group(1)))]


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _subtree(top: str) -> list[str]:
    """Every cgroup under ``top``, deepest first, ``top`` last."""
    return [root for root, _dirs, _files in os.walk(top, topdown=False)]


def _tasks(cgroups: Iterable[str]) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for path in cgroups:
        try:
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            if pid != os.getpid() and pid not in found:
                with contextlib.suppress(psutil.NoSuchProcess):
                    found[pid] = psutil.Process(pid)
    return list(found.values())


def _rmdir(path: str) -> bool:
    for _ in range(50):  # a killed task leaves its cgroup a moment later
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.02)
    return False


def remove_leftovers(roots: Iterable[str], tmpdir: str | None = None) -> Removed:
    """Kill the processes in, and remove, the cgroups of demos that are gone, in every
    hierarchy root given; delete their scratch folders."""
    roots = sorted(set(roots))
    removed = Removed()
    names = sorted({n for root in roots for n in _stale(_CGROUP, _listdir(root))})
    for name in names:
        trees = [_subtree(os.path.join(root, name)) for root in roots if os.path.isdir(os.path.join(root, name))]
        tasks = _tasks(path for tree in trees for path in tree)
        kill_and_wait(tasks)
        removed.processes += len(tasks)
        for tree in trees:
            removed.left.extend(path for path in tree if not _rmdir(path))
        removed.cgroups.append(name)
    tmp = tmpdir or tempfile.gettempdir()
    for name in _stale(_WORKDIR, _listdir(tmp)):
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        removed.workdirs.append(name)
    return removed
