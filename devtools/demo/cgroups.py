"""The demo's cgroup tree, its busy processes, and the kernel's CPU figure for each pod.

The tree is plain directory and file work in the cgroup v1 hierarchies (mkdir, one value
a file): no library would make it shorter. The processes are psutil's: it starts them
(``psutil.Popen``), signals a process only while it is still the one we started (no PID
reuse), finds what each has started (``children(recursive=True)``) and anything left in
the demo's cgroups, and waits for all of it to go. The per-pod CPU figure stays a cgroup
read (``cpuacct.usage``): it counts every task of the pod, which is what a CFS quota
limits, in one file read, where a process's own CPU times would miss what it started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psutil

from devtools.demo.pods import DemoPod

BUSY = ["/bin/sh", "-c", "while :; do :; done"]
#: The checkout the dev tools run from (``python -m devtools ...``).
CHECKOUT = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: a forked child only calls into it


#: What ends a demo or a benchmark through its clean-up: Ctrl-C, and SIGTERM and SIGHUP
#: (``devtools.demo.live.terminate_as_interrupt``).
INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@contextlib.contextmanager
def interrupts_held() -> Iterator[Callable[[], None]]:
    """``INTERRUPTS`` held (blocked, kept pending) while a child is started and recorded,
    and taken when the block ends. One landing inside ``fork`` runs Python's handler in an
    at-fork hook, where its KeyboardInterrupt is printed as "ignored" and the run goes on
    (a user's Ctrl-C lost), or lands between the fork and the caller's record of the
    child, which the clean-up then does not know. Yields what the child calls first
    (``preexec_fn``): the caller's mask back, so that the child can be stopped."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)

    def restore() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)

    try:
        yield restore
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` making the child die with its parent, however the parent ends
    (SIGKILL included): the kernel sends it SIGKILL then (``PR_SET_PDEATHSIG``, kept across
    exec). If the parent is already gone when it is set, the child exits at once."""

    def arm() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def v1_roots(cgroup_root: str, proc_root: str) -> tuple[str, str, str | None]:
    """The cpu, cpuacct and (if any) memory hierarchy roots; ValueError (with the
    reason) when the demo cannot make cgroups here."""
    from collectors.cgroups import detect_mounts

    mounts = detect_mounts(cgroup_root, proc_root)
    if mounts.version != 1:
        raise ValueError(
            f"this host runs cgroup {mounts.mode}; the live demo needs the v1 cpu and cpuacct controllers"
        )
    cpu, acct, memory = mounts.v1.get("cpu"), mounts.v1.get("cpuacct"), mounts.v1.get("memory")
    if cpu is None or acct is None:
        raise ValueError("no v1 cpu or cpuacct hierarchy is mounted")
    if not os.path.exists(os.path.join(cpu, "cpu.cfs_quota_us")):
        raise ValueError("this kernel has no CFS bandwidth control (cpu.cfs_quota_us)")
    for root in {cpu, acct, memory} - {None}:
        assert root is not None
        probe = os.path.join(root, f"waterline-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError as err:
            if root == memory:
                memory = None  # pods just get no memory figure
                continue
            raise ValueError(f"cannot create cgroups under {root}: {err.strerror}") from None
    return cpu, acct, memory


class CgroupTree:
    """The demo's cgroups and processes; :meth:`cleanup` removes everything, idempotently."""

    def __init__(
        self, cpu_root: str, acct_root: str, memory_root: str | None, kubelet_root: str
    ) -> None:
        self.roots = sorted({cpu_root, acct_root, memory_root or cpu_root})
        self.cpu_root = cpu_root
        self.acct_root = acct_root
        self.kubelet_root = kubelet_root
        self.made: list[str] = []  # relative paths, in creation order
        self.procs: dict[str, psutil.Popen] = {}

    def make(self, rel: str) -> None:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            created = False
            for root in self.roots:
                path = os.path.join(root, sub)
                if not os.path.isdir(path):
                    os.mkdir(path)
                    created = True
            if created and sub not in self.made:
                self.made.append(sub)

    def write(self, rel: str, name: str, value: str) -> None:
        with open(os.path.join(self.cpu_root, rel, name), "w", encoding="ascii") as f:
            f.write(value)

    def read(self, root: str, rel: str, name: str) -> str:
        with open(os.path.join(root, rel, name), encoding="ascii") as f:
            return f.read().strip()

    def add_pod(self, pod: DemoPod) -> None:
        self.make(pod.container_rel(self.kubelet_root))
        if pod.cpu_limit is not None:
            quota = str(int(pod.cpu_limit * 100_000))
            for rel in (pod.rel(self.kubelet_root), pod.container_rel(self.kubelet_root)):
                self.write(rel, "cpu.cfs_period_us", "100000")
                self.write(rel, "cpu.cfs_quota_us", quota)

    def start(self, pod: DemoPod, argv: list[str] | None = None, name: str | None = None) -> psutil.Popen:
        """A process (a busy loop unless ``argv``) that joins the container's cgroups
        before it runs, and dies with this process (kill -9 of the demo included); it runs
        from the checkout's root, so that ``python -m devtools...`` finds the dev tools.
        Known by ``name`` (default: the pod's) to ``stop`` and ``cleanup``; an interrupt
        while it starts is taken once it is known (``interrupts_held``)."""
        procs_files = [
            os.path.join(root, pod.container_rel(self.kubelet_root), "cgroup.procs")
            for root in self.roots
        ]
        arm = die_with_parent(os.getpid())
        with interrupts_held() as restore:

            def join() -> None:
                restore()
                arm()
                for path in procs_files:
                    with open(path, "w", encoding="ascii") as f:
                        f.write(str(os.getpid()))

            proc = psutil.Popen(argv or BUSY, preexec_fn=join, start_new_session=True, cwd=CHECKOUT)  # noqa: S603
            self.procs[name or pod.name] = proc
        return proc

    def signal(self, name: str, sig: int) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(sig)

    def stop(self, name: str) -> None:
        """Kill the pod's process and everything it started; wait until they are gone."""
        proc = self.procs.pop(name, None)
        if proc is not None:
            kill_and_wait(_with_descendants(proc))

    def cpu_seconds(self, pod: DemoPod) -> float:
        return int(self.read(self.acct_root, pod.rel(self.kubelet_root), "cpuacct.usage")) / 1e9

    def quota(self, pod: DemoPod) -> str:
        return self.read(self.cpu_root, pod.container_rel(self.kubelet_root), "cpu.cfs_quota_us")

    def stragglers(self) -> list[psutil.Process]:
        """Processes still in a cgroup the demo made (never this process): a cgroup with a
        task in it cannot be removed."""
        found: dict[int, psutil.Process] = {}
        for rel in self.made:
            for root in self.roots:
                try:
                    pids = self.read(root, rel, "cgroup.procs").split()
                except OSError:
                    continue
                for pid in map(int, pids):
                    if pid != os.getpid() and pid not in found:
                        with contextlib.suppress(psutil.NoSuchProcess):
                            found[pid] = psutil.Process(pid)
        return list(found.values())

    def cleanup(self) -> list[str]:
        """Kill every process, remove every cgroup made; the paths that would not go."""
        for name in list(self.procs):
            self.signal(name, signal.SIGCONT)
            self.stop(name)
        kill_and_wait(self.stragglers())
        left = []
        for rel in reversed(self.made):
            for root in self.roots:
                path = os.path.join(root, rel)
                for attempt in range(50):
                    try:
                        os.rmdir(path)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        if attempt == 49:
                            left.append(path)
                        time.sleep(0.02)
        self.made = []
        return left


def _with_descendants(proc: psutil.Process) -> list[psutil.Process]:
    """The process and everything it started, children first."""
    try:
        return [*proc.children(recursive=True), proc]
    except psutil.NoSuchProcess:
        return [proc]


def kill_and_wait(procs: Iterable[psutil.Process], timeout: float = 10.0) -> None:
    """SIGKILL (which also ends a stopped process) and wait; our children are reaped."""
    procs = list(procs)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=timeout)


class KernelMeter:
    """Each pod's CPU as the kernel counts it (cpuacct.usage), between two calls."""

    def __init__(self, tree: CgroupTree, pods: list[DemoPod]) -> None:
        self.tree = tree
        self.pods = pods
        self.last: dict[str, tuple[float, float]] = {}

    def sample(self) -> dict[str, float]:
        now = time.monotonic()
        out = {}
        for pod in self.pods:
            try:
                used = self.tree.cpu_seconds(pod)
            except OSError:
                continue
            prev = self.last.get(pod.key)
            self.last[pod.key] = (now, used)
            if prev is not None and now > prev[0]:
                out[pod.key] = (used - prev[1]) / (now - prev[0])
        return out
