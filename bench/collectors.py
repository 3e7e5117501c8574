"""Collector cost per tick on a node of N pods x 3 containers (50, 250, 500, 1000).

Builds fake cgroup trees on tmpfs (``/dev/shm``): a v1 host shaped like ours (separate
``cpu``, ``cpuacct`` and ``memory`` hierarchies, cgroupfs driver, containerd) and a v2
host (systemd driver, CRI-O), with the kernel's file formats. For each it prints the
collector's CPU time per tick beside a bare loop that only opens and reads the same files
(``os.open``/``os.read``/``os.close``, the cheapest Python can do), and the peak RSS of a
fresh process that ran the collector. Each measurement runs in its own interpreter so that
peak RSS is the collector's, not the other benchmarks'.

It also prints the node collector's CPU time per tick (``collectors.node_stats``: host CPU
times, memory, PSI, load) over the machine's own /proc and over a fake /proc shaped like a
64-CPU host, where /proc/stat carries 64 per-CPU lines and a long ``intr`` line.

With ``lc``, the same collector plus the interference metrics (``lc_*``,
``collectors.interference``): the Guaranteed third of the pods are the latency-critical
ones (no pod is labelled), each container holds ``LC_TASKS`` tasks whose schedstat lives
in a fake /proc, so a tick also reads 84 x 3 task lists and 84 x 3 x 2 schedstat files;
its ratio is to a bare loop over the same files plus those.

The bare loop is also timed over descriptors opened once and held (one ``pread`` a file,
how the collector reads a cgroup it read before since issue 32's third pass): the
collector's ratio to that is its Python work alone, printed beside the goal's ratio.

Each pod count of the sweep (50, 250, 500, 1000: the cost should grow linearly) runs
``ROUNDS`` rounds of bare loop, collector, collector + lc in turn, each in a fresh
interpreter; the ratio is taken round by round (so a machine that slows down part way
slows both sides of it) and printed as the median with its range over the rounds.
``--pods 250`` runs one size. ``--tree PATH`` (repeatable) measures the collector of
each tree given (the trees' ``agent`` and ``collectors`` on the same fake trees, the same
bare loop), the trees in turn within each round and their order rotated from round to
round, so a before/after comparison is side by side in one run.

At the goal size the verdict on the ratio: meets when every round is at most 1.3x,
fails when every round is above it, undecided otherwise.

Goals (issues 3 and 32): at most 1.3x the bare read loop at 250 pods; peak RSS under 80 MiB.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.flags import Limit, OneLine, check, pod_counts
from bench.outcome import NothingMeasured
from bench.verdicts import every_run

PODS = (50, 250, 500, 1000)
GOAL_PODS = 250
GOAL_RATIO = 1.3
TREE_ENV = "WATERLINE_BENCH_TREE"
#: ``--max-open-files``: the bound on held descriptors (the agent's ``maxOpenFiles``) for
#: the collectors and the held bare loop; unset, each tree's default.
MAX_OPEN_ENV = "WATERLINE_BENCH_MAX_OPEN_FILES"
ROUNDS = 3
CONTAINERS = 3
LC_TASKS = 2  # tasks per container of a latency-critical pod
TICKS = 40
QOS = ("Guaranteed", "Burstable", "BestEffort")

V1_MEMORY_STAT = "".join(
    f"{k} {v}\n"
    for k, v in [
        ("cache", 1), ("rss", 2), ("rss_huge", 0), ("shmem", 0), ("mapped_file", 0),
        ("dirty", 0), ("writeback", 0), ("pgpgin", 9), ("pgpgout", 9), ("pgfault", 9),
        ("pgmajfault", 0), ("inactive_anon", 0), ("active_anon", 2), ("inactive_file", 1),
        ("active_file", 0), ("unevictable", 0), ("hierarchical_memory_limit", 9 << 40),
        ("hierarchical_memsw_limit", 9 << 40), ("total_cache", 4096), ("total_rss", 81920),
        ("total_rss_huge", 0), ("total_shmem", 0), ("total_mapped_file", 0),
        ("total_dirty", 0), ("total_writeback", 0), ("total_pgpgin", 99),
        ("total_pgpgout", 99), ("total_pgfault", 999), ("total_pgmajfault", 0),
        ("total_inactive_anon", 0), ("total_active_anon", 81920),
        ("total_inactive_file", 4096), ("total_active_file", 0), ("total_unevictable", 0),
    ]
)  # fmt: skip
_V2_MEMORY_KEYS = (
    "anon file kernel kernel_stack pagetables sec_pagetables percpu sock vmalloc shmem "
    "zswap zswapped file_mapped file_dirty file_writeback swapcached anon_thp file_thp "
    "shmem_thp inactive_anon active_anon inactive_file active_file unevictable "
    "slab_reclaimable slab_unreclaimable slab workingset_refault_anon "
    "workingset_refault_file workingset_activate_anon workingset_activate_file "
    "workingset_restore_anon workingset_restore_file workingset_nodereclaim pgscan "
    "pgsteal pgscan_kswapd pgscan_direct pgsteal_kswapd pgsteal_direct pgfault "
    "pgmajfault pgrefill pgactivate pgdeactivate pglazyfree pglazyfreed thp_fault_alloc "
    "thp_collapse_alloc"
)
V2_MEMORY_STAT = "".join(f"{k} 12345\n" for k in _V2_MEMORY_KEYS.split())
PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _build(
    base: Path, version: int, pods_n: int
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Make the tree; returns raw pod specs, the files the collector reads each tick and
    the ones the lc_* metrics add (task lists and their schedstat)."""
    roots = [base / c for c in ("cpu", "cpuacct", "memory")] if version == 1 else [base]
    for r in roots:
        r.mkdir(parents=True, exist_ok=True)
    if version == 2:
        _write(base / "cgroup.controllers", "cpuset cpu io memory pids\n")
    pods: list[dict[str, object]] = []
    files: list[str] = []
    lc_files: list[str] = []
    for i in range(pods_n):
        qos = QOS[i % 3]
        uid = f"0000{i:04d}-aaaa-bbbb-cccc-{i:012d}"
        if version == 1:
            q = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[qos]
            pod_rel = f"kubepods/{q}pod{uid}"
            names = [f"{i:04d}{c:060d}" for c in range(CONTAINERS)]
            ids = [f"containerd://{n}" for n in names]
        else:
            u = uid.replace("-", "_")
            q = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}[qos]
            pod_rel = (
                f"kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{u}.slice"
                if q
                else f"kubepods.slice/kubepods-pod{u}.slice"
            )
            cids = [f"{i:04d}{c:060d}" for c in range(CONTAINERS)]
            names = [f"crio-{c}.scope" for c in cids]
            ids = [f"cri-o://{c}" for c in cids]
        for rel in [pod_rel, *(f"{pod_rel}/{n}" for n in names)]:
            if version == 1:
                cpu, acct, mem = (base / c / rel for c in ("cpu", "cpuacct", "memory"))
                for d in (cpu, acct, mem):
                    d.mkdir(parents=True, exist_ok=True)
                _write(acct / "cpuacct.usage", "123456789012\n")
                _write(cpu / "cpu.stat", "nr_periods 100\nnr_throttled 3\nthrottled_time 999\n"
                       "nr_bursts 0\nburst_time 0\n")  # fmt: skip
                _write(mem / "memory.usage_in_bytes", "86016\n")
                _write(mem / "memory.stat", V1_MEMORY_STAT)
                files += [str(acct / "cpuacct.usage"), str(cpu / "cpu.stat"),
                          str(mem / "memory.usage_in_bytes"), str(mem / "memory.stat")]  # fmt: skip
            else:
                d = base / rel
                d.mkdir(parents=True, exist_ok=True)
                _write(d / "cpu.stat", "usage_usec 123456789\nuser_usec 1\nsystem_usec 1\n"
                       "nr_periods 100\nnr_throttled 3\nthrottled_usec 999\n"
                       "nr_bursts 0\nburst_usec 0\n")  # fmt: skip
                _write(d / "memory.current", "86016\n")
                _write(d / "memory.stat", V2_MEMORY_STAT)
                _write(d / "cpu.pressure", PSI)
                _write(d / "memory.pressure", PSI)
                files += [str(d / f) for f in ("cpu.stat", "memory.current", "memory.stat",
                                               "cpu.pressure", "memory.pressure")]  # fmt: skip
        if qos == "Guaranteed":
            lc_files += _add_tasks(base, version, [f"{pod_rel}/{n}" for n in names], i)
        pods.append({"name": f"p{i:03d}", "uid": uid, "qos": qos, "ids": ids})
    return pods, files, lc_files


def _add_tasks(base: Path, version: int, rels: list[str], pod: int) -> list[str]:
    """Task lists in the container cgroups, and their schedstat in ``base/proc``; returns
    the files written."""
    files = []
    for c, rel in enumerate(rels):
        tids = [100_000 + pod * 100 + c * 10 + t for t in range(LC_TASKS)]
        cgroup = base / "cpu" / rel if version == 1 else base / rel
        tasks = cgroup / ("tasks" if version == 1 else "cgroup.threads")
        _write(tasks, "".join(f"{t}\n" for t in tids))
        files.append(str(tasks))
        for tid in tids:
            (base / "proc" / str(tid)).mkdir(parents=True)
            _write(base / "proc" / str(tid) / "schedstat", "12345678901 2345678901 4242\n")
            files.append(str(base / "proc" / str(tid) / "schedstat"))
    return files


HOST_CPUS = 64
_MEMINFO_KEYS = ("MemTotal MemFree MemAvailable Buffers Cached SwapCached Active Inactive "
    "Active(anon) Inactive(anon) Active(file) Inactive(file) Unevictable Mlocked "
    "SwapTotal SwapFree Zswap Zswapped Dirty Writeback AnonPages Mapped Shmem "
    "KReclaimable Slab SReclaimable SUnreclaim KernelStack PageTables SecPageTables "
    "NFS_Unstable Bounce WritebackTmp CommitLimit Committed_AS VmallocTotal "
    "VmallocUsed VmallocChunk Percpu HardwareCorrupted AnonHugePages ShmemHugePages "
    "ShmemPmdMapped FileHugePages FilePmdMapped Unaccepted HugePages_Total "
    "HugePages_Free HugePages_Rsvd HugePages_Surp Hugepagesize Hugetlb "
    "DirectMap4k DirectMap2M DirectMap1G")


def _build_proc(base: Path) -> Path:
    """A /proc with the node collector's files, shaped like a 64-CPU host."""
    proc = base / "proc"
    (proc / "pressure").mkdir(parents=True)
    cpu_line = "{} 1234567 5678 345678 98765432 12345 0 23456 789 0 0\n"
    _write(proc / "stat", "".join(
        [cpu_line.format("cpu ")] + [cpu_line.format(f"cpu{i}") for i in range(HOST_CPUS)]
        + ["intr 123456789 " + " ".join(str(i % 97) for i in range(1200)) + "\n",
           "ctxt 987654321\nbtime 1700000000\nprocesses 4242424\nprocs_running 9\n",
           "procs_blocked 0\nsoftirq 1 2 3 4 5 6 7 8 9 10 11\n"]))  # fmt: skip
    keys = _MEMINFO_KEYS.split()
    _write(proc / "meminfo", "".join(f"{k + ':':<16}{402653184 - i * 4096:>10} kB\n"
                                     for i, k in enumerate(keys)))  # fmt: skip
    _write(proc / "pressure" / "cpu", PSI)
    _write(proc / "pressure" / "memory", PSI)
    _write(proc / "loadavg", "12.50 10.25 9.75 13/4242 424242\n")
    return proc


def child_node(where: str) -> None:
    """The node collector's CPU time per tick, over the host's /proc or a fake one."""
    import structlog

    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())
    from collectors.node_stats import NodeStatsCollector

    base = Path(tempfile.mkdtemp(prefix=f"waterline-bench-{os.getpid()}-", dir="/dev/shm"))
    try:
        proc = "/proc" if where == "host" else str(_build_proc(base))
        collector = NodeStatsCollector(proc)
        first = collector.collect()  # the fake /proc/stat does not move: no CPU figure
        assert "memory_total_usage" in first.metrics, first
        assert first.cpus, first

        def ticks() -> None:
            for _ in range(10):
                collector.collect()

        seconds = _per_tick(ticks, 200) / 10
        print(json.dumps({"seconds": seconds}))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _bare(files: list[str]) -> None:
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 65536)
        finally:
            os.close(fd)


def _bare_held(fds: list[int], rest: list[str]) -> None:
    """The bare loop over descriptors held open: one ``pread`` a file, as the collector
    reads a cgroup it holds (issue 32); the files beyond the budget of open files (as the
    collector's, ``open_files_budget``) opened and read as by ``_bare``."""
    for fd in fds:
        os.pread(fd, 65536, 0)
    _bare(rest)


def _per_tick(fn: object, ticks: int) -> float:
    samples = []
    for _ in range(ticks):
        t0 = time.process_time()
        fn()  # type: ignore[operator]
        samples.append(time.process_time() - t0)
    return statistics.median(samples)


def child(version: int, what: str, pods_n: int) -> None:
    """Runs in a fresh interpreter; prints one JSON line."""
    tree = os.environ.get(TREE_ENV)
    if tree and what not in ("bare", "bare-lc"):
        # the collector of another tree (``--tree``); the fake trees and the bare loops
        # are this one's
        sys.path.insert(0, tree)
    import structlog

    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())  # no log I/O
    from agent.model.objects import Container, Pod
    from collectors.cgroups import CgroupMounts
    from collectors.pod_stats import PodStatsCollector

    base = Path(tempfile.mkdtemp(prefix=f"waterline-bench-{os.getpid()}-", dir="/dev/shm"))
    try:
        raw, files, lc_files = _build(base, version, pods_n)
        if what in ("bare", "bare-lc"):
            read = files + lc_files if what == "bare-lc" else files
            seconds = _per_tick(lambda: _bare(read), TICKS)
            from collectors.files import open_files_budget

            limit = os.environ.get(MAX_OPEN_ENV)
            budget = open_files_budget() if limit is None else open_files_budget(int(limit))
            fds = [os.open(path, os.O_RDONLY) for path in read[:budget]]
            try:
                held = _per_tick(lambda: _bare_held(fds, read[budget:]), TICKS)
            finally:
                for fd in fds:
                    os.close(fd)
            out: dict[str, Any] = {"seconds": seconds, "held_seconds": held, "files": len(read)}
        else:
            pods = [
                Pod(
                    namespace="bench",
                    name=str(p["name"]),
                    uid=str(p["uid"]),
                    qos_class=str(p["qos"]),
                    containers=tuple(
                        Container(f"c{j}", container_id=str(cid))
                        for j, cid in enumerate(p["ids"])
                    ),
                )
                for p in raw
            ]
            if version == 1:
                mounts = CgroupMounts(
                    str(base), {c: str(base / c) for c in ("cpu", "cpuacct", "memory")}
                )
            else:
                mounts = CgroupMounts(str(base), {}, str(base), frozenset({"cpu", "memory"}))
            limit = os.environ.get(MAX_OPEN_ENV)
            collector = PodStatsCollector(mounts) if limit is None else PodStatsCollector(
                mounts, max_open_files=min(int(limit), _budget_of_this_tree(int(limit))))
            first = collector.collect(pods)  # locates every cgroup (cached afterwards)
            assert len(first.usage) == pods_n, (len(first.usage), first.missing[:3])
            tick = (lambda: collector.collect(pods)) if what == "collector" else _with_lc(
                collector, pods, base, version
            )
            seconds = _per_tick(tick, TICKS)
            peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out = {"seconds": seconds, "rss_mib": peak_kib / 1024, "module": sys.modules["collectors.pod_stats"].__file__,
                   "open_files": getattr(collector, "open_files", 0)}  # fmt: skip
        print(json.dumps(out))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _budget_of_this_tree(limit: int) -> int:
    """``limit`` within what the process's RLIMIT_NOFILE leaves, as the agent takes its
    ``maxOpenFiles`` (a tree whose ``open_files_budget`` takes no bound: its constant)."""
    from collectors.files import open_files_budget

    try:
        return open_files_budget(limit)  # type: ignore[call-arg,unused-ignore]
    except TypeError:
        return open_files_budget()


def _with_lc(collector: Any, pods: list[Any], base: Path, version: int) -> Callable[[], None]:
    """One tick of the pod collector and the interference metrics over its figures."""
    from agent.model.latency import latency_critical
    from collectors.interference import InterferenceCollector, TaskWaitReader

    root = str(base / "cpu") if version == 1 else str(base)
    # The agent's lc_* reader shares the pod collector's bound on held descriptors
    # (HostCollector); a tree from before it had none has no ``budget``.
    budget = getattr(collector, "budget", None)
    shared: dict[str, Any] = {"budget": budget} if budget is not None else {}
    interference = InterferenceCollector(TaskWaitReader(root, version, str(base / "proc"), **shared))
    lc = latency_critical(pods)
    interference.collect(lc, collector.collect(pods).stats)
    second = interference.collect(lc, collector.collect(pods).stats)
    assert "lc_cpu_wait_ratio" in second, "no latency-critical task was read"

    def tick() -> None:
        interference.collect(lc, collector.collect(pods).stats)

    return tick


def _run(version: int | str, what: str, pods_n: int = GOAL_PODS, tree: Path | None = None,
         max_open_files: int | None = None) -> dict[str, float]:  # fmt: skip
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, TREE_ENV: str(tree)} if tree is not None else None
    if max_open_files is not None:
        env = {**(env or os.environ), MAX_OPEN_ENV: str(max_open_files)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.collectors", str(version), what, str(pods_n)],
        cwd=root, capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _line(version: int, n: int, run: dict[str, list[dict[str, float]]], label: str) -> str:
    """One size of one tree: the figures of its rounds, the ratios taken round by round."""
    bare, coll, bare_lc, lc = run["bare"], run["collector"], run["bare-lc"], run["lc"]
    ratio = [c["seconds"] / b["seconds"] for c, b in zip(coll, bare, strict=True)]
    goal = f" (goal <= {GOAL_RATIO}x: {verdict(ratio)})" if n == GOAL_PODS else ""
    text = (f"cgroup v{version} pods={n:>4}{label}: collector "
            f"{_spread([c['seconds'] * 1e3 for c in coll], '.1f')} ms/tick, bare read loop "
            f"{_spread([b['seconds'] * 1e3 for b in bare], '.1f')} ms/tick "
            f"({bare[0]['files']:.0f} files), ratio {_spread(ratio, '.2f')}x{goal}; ")  # fmt: skip
    if "held_seconds" in bare[0]:  # what is left once the files are held: the Python work
        held = [c["seconds"] / b["held_seconds"] for c, b in zip(coll, bare, strict=True)]
        text += (f"bare pread loop on held descriptors {_spread([b['held_seconds'] * 1e3 for b in bare], '.1f')} "
                 f"ms/tick (the collector {_spread(held, '.2f')}x it, holding "
                 f"{max(c.get('open_files', 0) for c in coll):.0f}); ")  # fmt: skip
    if lc:
        lc_ratio = [x["seconds"] / b["seconds"] for x, b in zip(lc, bare_lc, strict=True)]
        extra = [(x["seconds"] / c["seconds"] - 1) * 100 for x, c in zip(lc, coll, strict=True)]
        text += (f"with lc_* {_spread(lc_ratio, '.2f')}x its bare loop "
                 f"({bare_lc[0]['files']:.0f} files) "
                 f"(+{_spread(extra, '.0f')}% over the collector: {n // 3 + (n % 3 > 0)} "
                 f"latency-critical pods); ")  # fmt: skip
    text += f"peak RSS {max(c['rss_mib'] for c in coll):.1f} MiB"
    if lc:
        text += f", with lc_* {max(x['rss_mib'] for x in lc):.1f} MiB"
    return text + " (goal < 80 MiB)"


def _spread(values: list[float], fmt: str) -> str:
    """The median of the rounds and their range."""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def verdict(ratios: list[float], goal: float = GOAL_RATIO) -> str:
    """meets: every round at most the goal; fails: every round above it; else undecided."""
    return every_run(ratios, goal)


LIMITS: tuple[Limit, ...] = (
    ("--rounds", lambda v: v >= 1, "must be >= 1"),
    ("--max-open-files", lambda v: v >= 0, "must be >= 0 (0: none held)"),
)


def main(argv: list[str] | None = None) -> None:
    parser = OneLine("collectors")
    parser.add_argument("--pods", type=pod_counts, default=list(PODS),
                        help=f"comma-separated pod counts (default: {','.join(map(str, PODS))})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"(default {ROUNDS})")
    parser.add_argument("--tree", type=Path, action="append",
                        help="the collector of this tree (repeatable: the trees in turn, side by side)")
    parser.add_argument("--no-lc", action="store_true", help="leave out the lc_* runs (half the time)")
    parser.add_argument("--max-open-files", type=int, default=None,
                        help="the bound on held descriptors (the agent's maxOpenFiles; default: each tree's)")
    args = parser.parse_args(argv or [])
    check(parser, args, LIMITS)
    for tree in args.tree or []:  # else the child imports this tree's collector under its name
        if not (tree / "collectors" / "pod_stats.py").is_file():
            parser.error(f"--tree {tree}: no collectors/pod_stats.py there")
    trees: list[Path | None] = [t.resolve() for t in args.tree] if args.tree else [None]
    if not os.path.isdir("/dev/shm"):
        raise NothingMeasured("no /dev/shm to build the cgroup tree in")
    sizes: list[int] = args.pods
    print(f"pods x {CONTAINERS} containers, CPU time per tick (median of {TICKS} ticks), "
          f"{args.rounds} rounds of bare / collector / bare with the lc files / collector + lc; "
          "median [range] of the rounds")
    for version in (1, 2):
        for n in sizes:
            runs: dict[Path | None, dict[str, list[dict[str, float]]]] = {
                t: {"bare": [], "collector": [], "bare-lc": [], "lc": []} for t in trees}  # fmt: skip
            for r in range(args.rounds):
                for tree in trees[r % len(trees):] + trees[: r % len(trees)]:
                    for what in ("bare", "collector") if args.no_lc else ("bare", "collector", "bare-lc", "lc"):
                        runs[tree][what].append(_run(version, what, n, tree, args.max_open_files))
            for tree in trees:
                print(_line(version, n, runs[tree], "" if tree is None else f" [{tree}]"))
    host = _run("node", "host")["seconds"]
    fake = _run("node", "fake")["seconds"]
    print(
        f"node stats: {host * 1e6:.0f} us/tick on this host's /proc ({os.cpu_count()} CPUs), "
        f"{fake * 1e6:.0f} us/tick on a fake {HOST_CPUS}-CPU /proc"
    )


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "node":
        child_node(sys.argv[2])
    elif len(sys.argv) == 4:
        child(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
    else:
        main()
