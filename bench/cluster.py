"""The cluster engines on a 5,000-node, 150,000-pod cluster (issue 5).

Goals: each engine (arbitration, defrag, queues, DaemonSet preemption) runs in at most 0.5x
the time it takes to load the snapshot it decides on (issue 31; issue 5 asked 2x), and the
loaded snapshot holds less than 1 GiB. The scenario comes from `python -m devtools generate` and is cached under /tmp (keyed
by the generator package's source, so a changed generator makes a new one).

Prints the load time split into file parse (JSON) and object parse (records), each
engine's time over a few runs (the median, the range, after its import) and the ratio of
each to the load time, with a verdict: meets when every run is within the goal, fails when
none is, undecided otherwise (the load is timed once: its own spread is not counted), and
the memory the snapshot holds (tracemalloc, in a later load so the timings are not
slowed by tracing). It also times the load with Python's cyclic garbage collector paused:
on this machine that cuts the load about threefold (the collector keeps rescanning the
growing heap of parsed objects), which is the first thing to do about load time. Set WATERLINE_BENCH_PROFILE=1 to also print where object parsing
spends its time (cProfile, top functions by own time).
"""

from __future__ import annotations

import cProfile
import gc
import hashlib
import io
import os
import pstats
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from agent.model.bulk import bulk_load
from agent.scenario import Scenario, load_scenario, parse_scenario, read_document
from agent.simulate.sections import SECTIONS
from devtools import generate as generator

NODES, PODS, JOBS, QUEUES, SEED = 5000, 150_000, 10_000, 100, 1
ENGINES = ("arbitration", "defrag", "queues", "daemonset")
RUNS = 5
LOAD_RATIO_GOAL = 0.5
MEMORY_GOAL = 1 << 30
CACHE = Path(tempfile.gettempdir()) / "waterline-bench"


def _scenario_path() -> tuple[Path, float | None]:
    """The cached scenario (generated now if missing) and the generation time, if any."""
    digest = hashlib.sha256()
    for module in sorted(Path(generator.__file__).parent.glob("*.py")):
        digest.update(module.name.encode() + b"\0" + module.read_bytes())
    key = digest.hexdigest()[:12]
    path = CACHE / f"cluster-{NODES}n-{PODS}p-{JOBS}j-{QUEUES}q-s{SEED}-{key}.json"
    if path.exists():
        return path, None
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob(path.name.rsplit("-", 1)[0] + "-*.json"):
        stale.unlink(missing_ok=True)  # made by an older generator
    args = generator.GenerateArgs(NODES, PODS, JOBS, QUEUES, SEED)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    start = time.perf_counter()
    with tmp.open("w") as out:
        generator.generate(args, out)
    elapsed = time.perf_counter() - start
    tmp.replace(path)
    return path, elapsed


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def _time_load(path: Path) -> tuple[Scenario, float, float, int]:
    """Load once, timed: (scenario, file parse s, object parse s, RSS growth)."""
    gc.collect()
    rss_before = _rss()
    with bulk_load():  # as load_scenario does: the cyclic collector paused, the result frozen
        start = time.perf_counter()
        doc = read_document(path)
        parsed = time.perf_counter()
        scenario = parse_scenario(doc, path.name)
        done = time.perf_counter()
        del doc
    gc.collect()
    return scenario, parsed - start, done - parsed, _rss() - rss_before


def _traced_size(path: Path) -> tuple[int, int]:
    """(bytes the loaded scenario holds, peak bytes while loading), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    scenario = load_scenario(path)
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del scenario
    return held, peak


def _profile_parse(path: Path, top: int = 15) -> str:
    doc = read_document(path)
    profiler = cProfile.Profile()
    profiler.enable()
    parse_scenario(doc, path.name)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def _time_engine(key: str, scenario: Scenario) -> tuple[list[float], str] | None:
    """The times of RUNS calls of the engine's section, and a one-line summary of its
    result; None when the engine is not there (yet)."""
    section = next((s for s in SECTIONS if s.key == key), None)
    if section is None:
        return None
    fn = section.run
    times: list[float] = []
    result = None
    for _ in range(RUNS):
        start = time.perf_counter()
        result = fn(scenario)
        times.append(time.perf_counter() - start)
    return times, _summary(key, result)


def _verdict(ratios: list[float], goal: float) -> str:
    if max(ratios) <= goal:
        return "meets"
    return "FAILS" if min(ratios) > goal else "undecided"


def _summary(key: str, result: object) -> str:
    if not isinstance(result, dict):
        return "no input"
    if key == "arbitration":
        return (
            f"{len(result.get('passed', []))} passed, {len(result.get('waiting', {}))} waiting, "
            f"{len(result.get('failed', {}))} failed"
        )
    if key == "defrag":
        return (
            f"{len(result.get('migrations', []))} migrations from "
            f"{len(result.get('sourceNodes', []))} sources, "
            f"{len(result.get('freedNodes', []))} freed"
        )
    if key == "queues":
        return f"{len(result.get('queues', {}))} queues, {len(result.get('victims', []))} victims"
    if key == "daemonset":
        solved = sum(1 for v in result.values() if isinstance(v, dict) and v.get("victims"))
        return f"{len(result)} pending DaemonSet pods, {solved} with victims"
    return f"{len(result)} keys"


def main() -> None:
    path, generated = _scenario_path()
    size = path.stat().st_size
    print(
        f"cluster: {NODES} nodes, {PODS} pods, {JOBS} PodMigrationJobs, {QUEUES} queues "
        f"(seed {SEED}); {size / 1e6:,.0f} MB of JSON at {path}"
    )
    if generated is not None:
        print(f"  generate      {generated:7.2f} s")
    scenario, file_s, object_s, rss_growth = _time_load(path)
    load = file_s + object_s
    print(
        f"  load          {load:7.2f} s  (file parse {file_s:.2f} s + object parse {object_s:.2f} s;"
        f" {len(scenario.store.pods) / object_s:,.0f} pods/s)"
    )
    for key in ENGINES:
        timed = _time_engine(key, scenario)
        if timed is None:
            print(f"  {key:<13} not available")
            continue
        times, summary = timed
        ratios = [t / load for t in times]
        median = statistics.median(times)
        print(
            f"  {key:<13} {median:7.2f} s  [{min(times):.2f}-{max(times):.2f}, {len(times)} runs]"
            f"  {median / load:5.2f}x load [{min(ratios):.2f}-{max(ratios):.2f}]"
            f" (goal <= {LOAD_RATIO_GOAL:g}x: {_verdict(ratios, LOAD_RATIO_GOAL)})  {summary}"
        )
    del scenario
    gc.collect()
    held, peak = _traced_size(path)
    verdict = "ok" if held < MEMORY_GOAL else "OVER GOAL"
    print(
        f"  snapshot      {_mib(held)} held (goal < 1 GiB, {verdict}); "
        f"peak while loading {_mib(peak)}; RSS grew {_mib(rss_growth)} over the first load"
    )
    if os.environ.get("WATERLINE_BENCH_PROFILE"):
        print("  object parse profile (cProfile, by own time):")
        for line in _profile_parse(path).splitlines():
            print(f"    {line}")


if __name__ == "__main__":
    main()
