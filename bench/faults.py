"""API faults never multiply (issue 10): the in-cluster agent against the real
kube-apiserver (a cluster of devtools/harness/cluster.py, started here in a temporary folder), with its
own ServiceAccount token, through a fault proxy (devtools/harness/faultproxy.py) that makes the
Eviction API fail or hang; its pods come from a ReplicaSet on a kwok node, their cgroups
from a fake tree built from the pods' real uids (exact load).

* 500 storm: every eviction answers 500; a policy wants every one of 13 pods gone.
  Prints the eviction requests the agent sent in one minute of 1 s ticks (agent time:
  the loop's clock advances 1 s a tick, so the minute runs in a few seconds).
* hanging endpoint: every eviction hangs for minutes; the action also throttles. The
  live loop runs (1 s interval, real time) with the load hot and cool in turn, so every
  tick has caps to write (down when hot, up when cool). Prints the longest tick, the
  interval slots skipped, when the first cap was written after the loop started, how
  many ticks wrote caps, and the eviction requests sent. A tick waits for an eviction's
  answer at most ``evictionAnswerSeconds`` (1 s) since that setting exists; before, the
  whole API budget (5 s), so the first fault tick throttled 5 s late.

Needs the cluster's programs (hack/cluster/build, which ``make cluster`` runs); without
them it says so and measures nothing.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from agent.node.wiring import build_agent
from bench.outcome import need_built_control_plane
from devtools.harness.agent_env import Load, Pool, agent_args, name_of
from devtools.harness.cluster import RealCluster
from devtools.harness.cluster import start as start_cluster
from devtools.harness.faultproxy import Fault, FaultProxy

PODS = 13
STORM_TICKS = 60
HANG_TICKS = 16


def _setup(kube: RealCluster, replicas: int, action: dict[str, Any], line: str) -> tuple[Pool, str, list[dict[str, Any]]]:
    pool = Pool(kube, "bench")
    node = pool.node()
    pods = pool.running(pool.replicaset("batch", replicas, node=node), replicas)
    pool.policy(pool.action({"coolDownSeconds": 0, **action}), value=line)
    return pool, node, pods


def _agent(kube: RealCluster, proxy: FaultProxy, node: str, tmp: Path) -> Any:
    agent = build_agent(agent_args(kube.agent_kubeconfig(node, proxy.url), tmp, node))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # in sync, and the brake read
        outcome = agent.loop.tick()
        if outcome.ok and outcome.report is not None and outcome.report.limited != "clusterBrake":
            break
        time.sleep(0.1)
    return agent


def _posts(proxy: FaultProxy) -> int:
    return len(proxy.seen("POST", "/eviction"))


def storm(kube: RealCluster, tmp: Path) -> None:
    everything = {"eviction": {}, "scope": {"qosClasses": ["BestEffort", "Burstable", "Guaranteed"],
                                            "maxPriority": 1000000000}}  # fmt: skip
    pool, node, pods = _setup(kube, PODS, everything, "0")
    load = Load(tmp / "cg", pods)
    busy = {name_of(p): 5.0 for p in pods}
    try:
        with kube.proxy() as proxy:
            proxy.inject(Fault("/eviction", method="POST", status=500, times=10**6))
            agent = _agent(kube, proxy, node, tmp)
            clock = [time.time()]
            agent.loop.clock = lambda: clock[0]
            before = _posts(proxy)
            try:
                for _ in range(STORM_TICKS):
                    clock[0] += 1.0
                    load.run(busy)
                    agent.loop.tick()
            finally:
                agent.stop_source()
            sent = _posts(proxy) - before
    finally:
        pool.close()
    print(f"500 storm, {PODS} candidates, {STORM_TICKS} ticks of 1 s: "
          f"{sent} eviction requests in the minute ({sent / STORM_TICKS:.2f} a tick)")


def _throttled(outcome: Any) -> bool:
    """Did the tick write a cap (throttle down or up)?"""
    report = outcome.report
    return report is not None and any(
        a.action in ("throttle", "restore") and a.result is None and not a.preview
        for a in report.actions
    )


def hang(kube: RealCluster, tmp: Path) -> None:
    spec = {"eviction": {}, "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 10}}}
    pool, node, pods = _setup(kube, 3, spec, "0.5")
    load = Load(tmp / "cg", pods)
    try:
        with kube.proxy() as proxy:
            proxy.inject(Fault("/eviction", method="POST", status=0, delay=600.0, times=10**6))
            agent = _agent(kube, proxy, node, tmp)
            hot = [False]

            def alternate() -> None:  # hot, cool, hot...: every tick has caps to write
                hot[0] = not hot[0]
                if hot[0]:
                    load.run({name_of(p): 5.0 for p in pods})

            seen: list[tuple[float, Any]] = []
            agent.loop.before_tick.append(alternate)
            agent.loop.publishers.append(lambda o: seen.append((time.monotonic(), o)))
            started = time.monotonic()
            try:
                agent.loop.run(ticks=HANG_TICKS)
            finally:
                agent.restore_all("bench end")
                agent.stop_source()
            elapsed = time.monotonic() - started
            sent = _posts(proxy)
    finally:
        pool.close()
    durations = [o.duration for _, o in seen]
    wrote = [_throttled(o) for _, o in seen]
    first = next((at - started for at, o in seen if _throttled(o)), None)
    interval = agent.loop.interval
    starts = [at - o.duration for at, o in seen]  # the loop keeps its phase: count the gaps
    skipped = sum(round((b - a) / interval) - 1 for a, b in zip(starts, starts[1:], strict=False))
    print(f"eviction endpoint hanging, {HANG_TICKS} ticks of the live loop every "
          f"{interval:g} s (load hot and cool in turn), {elapsed:.1f} s:")
    print(f"  longest tick {max(durations):.2f} s "
          f"({', '.join(f'{d:.2f}' for d in durations)}); interval slots skipped: {skipped}")
    print(f"  first throttle {first:.2f} s after the loop started; ticks that wrote caps: "
          f"{sum(wrote)}/{len(wrote)}; eviction requests sent: {sent}"
          if first is not None else "  no throttle written")


def main() -> None:
    need_built_control_plane()
    with tempfile.TemporaryDirectory(prefix="waterline-faults-") as tmp_dir:
        tmp = Path(tmp_dir)
        started = time.monotonic()
        kube = start_cluster(tmp / "cluster")
        try:
            kube.install()
            print(f"a real cluster, started and deploy/ installed in {time.monotonic() - started:.0f} s")
            (tmp / "storm").mkdir()
            (tmp / "hang").mkdir()
            storm(kube, tmp / "storm")
            hang(kube, tmp / "hang")
        finally:
            kube.close()


if __name__ == "__main__":
    main()
