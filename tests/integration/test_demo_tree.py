"""The demo leaves nothing behind: every process in its cgroups is killed, whoever
started it, and every cgroup is removed (real cgroup v1, real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from devtools.demo.cgroups import BUSY, CgroupTree
from devtools.demo.pods import DemoPod

pytestmark = pytest.mark.integration


def _join(tree: CgroupTree, pod: DemoPod) -> subprocess.Popen[bytes]:
    """A busy process the tree did not start, in the pod's container cgroups."""
    files = [
        os.path.join(root, pod.container_rel(tree.kubelet_root), "cgroup.procs")
        for root in tree.roots
    ]

    def join() -> None:
        for path in files:
            with open(path, "w", encoding="ascii") as f:
                f.write(str(os.getpid()))

    return subprocess.Popen(BUSY, preexec_fn=join, start_new_session=True)  # noqa: S603


def test_cleanup_kills_stopped_and_foreign_processes_and_removes_the_tree(
    tree: CgroupTree,
) -> None:
    pod = DemoPod("batch", "BestEffort", None)
    tree.add_pod(pod)
    tree.start(pod)
    started = tree.procs["batch"].pid
    tree.signal("batch", signal.SIGSTOP)
    foreign = _join(tree, pod)
    assert {p.pid for p in tree.stragglers()} == {started, foreign.pid}
    made = [os.path.join(root, rel) for rel in tree.made for root in tree.roots]

    assert tree.cleanup() == []
    assert not psutil.pid_exists(started)
    assert not psutil.pid_exists(foreign.pid)  # killed and reaped by the clean-up
    foreign.wait(timeout=10)
    assert not any(os.path.exists(path) for path in made)


def test_stop_kills_a_process_with_everything_it_started(tree: CgroupTree) -> None:
    """A pod's process that forked (here: a shell with two sleeps) goes with its children."""
    shell = psutil.Popen(["/bin/sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    tree.procs["forking"] = shell
    deadline = time.monotonic() + 10
    while len(shell.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    children = shell.children()
    assert len(children) == 2

    tree.stop("forking")
    assert "forking" not in tree.procs
    assert not shell.is_running()
    assert not any(c.is_running() for c in children)
