"""The co-location benchmark keeps the processes outside kubepods off its bench CPU: which
ones move (pure), and real processes' masks narrowed, inherited and given back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from bench.bench_cpu import BenchCpu, Proc, cpu_cgroup, movable, read_proc
from tests.need import need

ALL = frozenset({0, 1})


def test_only_user_processes_outside_kubepods_that_may_run_on_the_cpu_move() -> None:
    procs = [
        Proc(10, "/system.slice/kubelet.service", ALL, False),  # moves
        Proc(11, "/kubepods/burstable/podabc/ctr", ALL, False),  # a pod's: stays
        Proc(12, "/", ALL, True),  # a kernel thread: stays
        Proc(13, "/user.slice", frozenset({0}), False),  # already off it
        Proc(14, "/user.slice", frozenset({1}), False),  # pinned to it alone: nowhere to go
        Proc(15, "/user.slice", ALL, False),  # the bench itself: kept
        Proc(16, "/", ALL, False),  # moves
    ]
    assert movable(procs, 1, keep=[15]) == [10, 16]


def test_the_cpu_controllers_path_is_read_from_v1_or_the_unified_line() -> None:
    v1 = "12:memory:/x\n4:cpu,cpuacct:/kubepods/besteffort/pod1\n0::/unified\n"
    assert cpu_cgroup(v1) == "/kubepods/besteffort/pod1"
    assert cpu_cgroup("0::/kubepods.slice/kubepods-pod1.slice\n") == "/kubepods.slice/kubepods-pod1.slice"
    assert cpu_cgroup("garbage\n") == ""


def test_this_process_reads_as_a_user_process_and_kthreadd_as_a_kernel_thread() -> None:
    me = read_proc(os.getpid())
    assert me is not None and not me.kernel_thread and me.cpus == frozenset(os.sched_getaffinity(0))
    if _comm(2) != "kthreadd":
        need("the kernel's threads in /proc (pid 2, kthreadd): not in a PID namespace")
    kthreadd = read_proc(2)
    assert kthreadd is not None and kthreadd.kernel_thread
    assert read_proc(2**22 + 12345) is None  # beyond pid_max: gone


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    if len(os.sched_getaffinity(0)) < 2:
        need("two CPUs this process may use (a bench CPU and another)")
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _mask(pid: int) -> frozenset[int]:
    return frozenset(os.sched_getaffinity(pid))


def test_real_processes_are_moved_off_and_given_back_their_masks(children: list[subprocess.Popen[bytes]]) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    cpu, every = cpus[-1], frozenset(cpus)
    sleeper = subprocess.Popen(["sleep", "60"])
    # a parent that starts a child once it has been moved (the child inherits its mask)
    parent = subprocess.Popen([sys.executable, "-c",
                               "import os, subprocess, sys, time\n"
                               f"while {cpu} in os.sched_getaffinity(0): time.sleep(0.01)\n"
                               "subprocess.Popen(['sleep', '60']); time.sleep(60)"])  # fmt: skip
    children += [sleeper, parent]
    ours = {sleeper.pid, parent.pid}

    def source() -> list[Proc]:
        found = [read_proc(pid) for pid in _pids(ours)]
        return [p for p in found if p is not None]

    reserved = BenchCpu(cpu, source=source)
    assert reserved.keep_off() == 2
    assert _mask(sleeper.pid) == _mask(parent.pid) == every - {cpu}
    grandchild = _wait_for_child(parent.pid)
    ours.add(grandchild)
    assert _mask(grandchild) == every - {cpu}  # inherited
    assert reserved.keep_off() == 0  # nothing left on it; the grandchild is noted
    assert reserved.give_back() == 3
    assert _mask(sleeper.pid) == _mask(parent.pid) == _mask(grandchild) == every
    os.kill(grandchild, 9)


def _pids(ours: set[int]) -> list[int]:
    return [pid for pid in ours if os.path.exists(f"/proc/{pid}")]


def _wait_for_child(pid: int) -> int:
    for _ in range(500):
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
        if kids:
            return int(kids[0])
        time.sleep(0.01)
    raise AssertionError(f"process {pid} started no child")


def test_a_process_already_off_the_cpu_at_the_first_sweep_is_left_as_it_was(
        children: list[subprocess.Popen[bytes]]) -> None:  # fmt: skip
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1]
    own = subprocess.Popen(["taskset", "-c", ",".join(map(str, cpus[:-1])), "sleep", "60"])
    children.append(own)
    for _ in range(500):  # until taskset has set the mask
        if _mask(own.pid) == frozenset(cpus[:-1]):
            break
        time.sleep(0.01)
    reserved = BenchCpu(cpu, source=lambda: [p for p in [read_proc(own.pid)] if p is not None])
    assert reserved.keep_off() == 0
    assert reserved.give_back() == 0
    assert _mask(own.pid) == frozenset(cpus[:-1])
