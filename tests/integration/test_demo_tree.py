"""The demo leaves nothing behind: every process in its cgroups is killed, whoever
started it, and every cgroup is removed (real cgroup v1, real processes); a demo killed
outright (SIGKILL) takes its busy processes with it, and the next demo removes its
cgroups; a hung-up one (SIGHUP) cleans up as on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from devtools.demo.cgroups import BUSY, CgroupTree
from devtools.demo.pods import DemoPod
from devtools.harness.waiting import wait_until
from tests.need import need

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
    wait_until(lambda: len(shell.children()) >= 2, 10, "the shell's two sleeps", interval=0.01)
    children = shell.children()
    assert len(children) == 2

    tree.stop("forking")
    assert "forking" not in tree.procs
    assert not shell.is_running()
    assert not any(c.is_running() for c in children)


# -- a demo that dies --------------------------------------------------------------------


def _demo_roots() -> list[str]:
    from agent.defaults import CGROUP_ROOT, PROC_ROOT
    from devtools.demo.cgroups import v1_roots

    if os.geteuid() != 0:
        need("root, to create cgroups")
    try:
        cpu, acct, memory = v1_roots(CGROUP_ROOT, PROC_ROOT)
    except ValueError as err:
        need(f"cgroup v1 cpu and cpuacct hierarchies: {err}")
    return sorted({cpu, acct, memory or cpu})


def _start_demo(*argv: str) -> subprocess.Popen[str]:
    """A live demo in the background, returned once its pods are busy (phase 1)."""
    demo = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "devtools", "demo", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert demo.stdout is not None
    seen = []
    deadline = time.monotonic() + 30
    for line in demo.stdout:
        seen.append(line)
        if "== phase 1" in line or time.monotonic() > deadline:
            break
    assert any("== phase 1" in line for line in seen), "".join(seen)
    return demo


def _tasks(roots: list[str], name: str) -> set[int]:
    pids: set[int] = set()
    for root in roots:
        for path, _dirs, _files in os.walk(os.path.join(root, name)):
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as f:
                pids.update(int(p) for p in f.read().split())
    return pids


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_demo_leaves_no_process_and_the_next_demo_removes_its_cgroups() -> None:
    roots = _demo_roots()
    demo = _start_demo("--load-ticks", "120", "--interval", "0.5")
    name = f"waterline-demo-{demo.pid}"
    busy = _tasks(roots, name)
    assert len(busy) == 3, busy  # web, batch-a, batch-b

    demo.kill()  # SIGKILL: no clean-up code runs
    demo.wait(timeout=10)
    wait_until(lambda: not any(_running(p) for p in busy), 10, "busy processes outlived the demo")
    assert _tasks(roots, name) == set()
    assert all(os.path.isdir(os.path.join(root, name)) for root in roots)  # only the cgroups stay

    after = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "devtools", "demo", "--load-ticks", "1", "--max-restore-ticks", "1",
         "--interval", "0.2"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert f"removed what an earlier demo left: {name}" in after.stdout, after.stdout
    assert "cleaned up: every process killed, every cgroup and file removed" in after.stdout
    assert not any(n.startswith("waterline-demo-") for root in roots for n in os.listdir(root))


def test_a_hung_up_demo_cleans_up_like_ctrl_c() -> None:
    roots = _demo_roots()
    demo = _start_demo("--load-ticks", "120", "--interval", "0.5")
    name = f"waterline-demo-{demo.pid}"
    busy = _tasks(roots, name)
    demo.send_signal(signal.SIGHUP)
    out, _ = demo.communicate(timeout=30)
    assert "interrupted: cleaning up" in out
    assert "cleaned up: every process killed, every cgroup and file removed" in out
    assert not [p for p in busy if _running(p)]
    assert not any(os.path.exists(os.path.join(root, name)) for root in roots)


def test_the_demos_third_phase_shows_the_idle_class_and_releases_it_exactly() -> None:
    """Who runs first: the web pod's response times each tick, the batch pods marked idle
    by the policy and released when it goes, each batch pod's cpu.shares back at the
    kubelet's value (the latency figures are shown, not judged: the machine is shared)."""
    _demo_roots()
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "devtools", "demo", "--load-ticks", "2", "--max-restore-ticks", "2",
         "--latency-ticks", "3", "--interval", "0.5"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout
    assert "== phase 3: who runs first" in out, out[-3000:]
    assert out.count("marked by colocated (scope)") == 2 and out.count("released by colocated") == 2, out[-3000:]
    assert "web-lc " in out and " p99 " in out
    for part in ("alone", "batch, no class", "batch idle"):
        assert f"  {part} " in out.split("== result of phase 3")[1], out[-2000:]
    assert out.count("(the kubelet value, restored exactly)") == 2, out[-2000:]
    assert "cleaned up: every process killed, every cgroup and file removed" in out
