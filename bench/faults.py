"""API faults never multiply (issue 10): the in-cluster agent against `waterline
dev-apiserver` with a faulty Eviction API, on a fake cgroup tree (exact load).

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

Only the agent's public pieces are used (``build_agent``, ``NodeLoop.tick``), so the same
file measures an older tree: ``PYTHONPATH=<tree> python bench/faults.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.node.arguments import add_arguments
from agent.node.wiring import build_agent
from devtools.apiserver.server import Fault
from devtools.apiserver.testing import serve
from tests.unit.fake_cgroups import FakeTree

PODS = [f"batch-{i:02d}" for i in range(13)]
QOS = "qos.waterline.io/v1alpha1"
STORM_TICKS = 60
HANG_TICKS = 16


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "demo", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": "rs", "uid": "rs", "controller": True}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
        "status": {"phase": "Running", "qosClass": "BestEffort",
                   "startTime": "2026-01-01T00:00:00Z",
                   "containerStatuses": [{"name": "main", "containerID": f"containerd://c-{name}"}]},
    }  # fmt: skip


def _objects(action_spec: dict[str, Any], pods: list[str], line: str = "0") -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
         "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}},
        *(_pod(n) for n in pods),
        {"apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "everything"},
         "spec": {"objectiveEnsurances": [{"name": "cpu", "actionName": "act",
                                           "metricRule": {"name": "cpu_total_usage", "value": line}}]}},
        {"apiVersion": QOS, "kind": "AvoidanceAction", "metadata": {"name": "act"},
         "spec": {"coolDownSeconds": 0, **action_spec}},
    ]  # fmt: skip


class _Load:
    def __init__(self, root: Path, pods: list[str]) -> None:
        self.tree = FakeTree(root, 1)
        self.pods = pods
        self.seconds = 0.0
        for name in pods:
            self.tree.add(f"kubepods/besteffort/poduid-{name}")
            self.tree.add(f"kubepods/besteffort/poduid-{name}/c-{name}")

    def run(self) -> None:
        self.seconds += 5.0
        for name in self.pods:
            for rel in (f"kubepods/besteffort/poduid-{name}",
                        f"kubepods/besteffort/poduid-{name}/c-{name}"):  # fmt: skip
                self.tree.set(rel, cpu_seconds=self.seconds)


def _agent(kubeconfig: Path, tmp: Path) -> Any:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([
        "--kubeconfig", str(kubeconfig), "--node-name", "node-1", "--node-cpu", "pods",
        "--cgroup-root", str(tmp / "cg"), "--state-dir", str(tmp / "state"),
        "--metrics-addr", "off",
    ])  # fmt: skip
    agent = build_agent(args)
    deadline = time.monotonic() + 10
    while not agent.loop.tick().ok and time.monotonic() < deadline:
        time.sleep(0.1)
    return agent


def _posts(running: Any) -> int:
    return sum(1 for m, p in running.server.requests if m == "POST" and p.endswith("/eviction"))


def storm() -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        load = _Load(tmp / "cg", PODS)
        with serve(_objects({"eviction": {}}, PODS)) as running:
            running.server.inject(Fault("/eviction", method="POST", status=500, times=10**6))
            agent = _agent(running.kubeconfig, tmp)
            clock = [time.time()]
            agent.loop.clock = lambda: clock[0]
            before = _posts(running)
            try:
                for _ in range(STORM_TICKS):
                    clock[0] += 1.0
                    load.run()
                    agent.loop.tick()
            finally:
                agent.stop_source()
            sent = _posts(running) - before
    print(f"500 storm, {len(PODS)} candidates, {STORM_TICKS} ticks of 1 s: "
          f"{sent} eviction requests in the minute ({sent / STORM_TICKS:.2f} a tick)")


def _throttled(outcome: Any) -> bool:
    """Did the tick write a cap (throttle down or up)?"""
    report = outcome.report
    return report is not None and any(
        a.action in ("throttle", "restore") and a.result is None and not a.preview
        for a in report.actions
    )


def hang() -> None:
    spec = {"eviction": {}, "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 10}}}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        load = _Load(tmp / "cg", PODS[:3])
        with serve(_objects(spec, PODS[:3], line="0.5")) as running:
            running.server.inject(Fault("/eviction", method="POST", status=0, delay=600.0,
                                        times=10**6))  # fmt: skip
            agent = _agent(running.kubeconfig, tmp)
            hot = [False]

            def alternate() -> None:  # hot, cool, hot...: every tick has caps to write
                hot[0] = not hot[0]
                if hot[0]:
                    load.run()

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
            sent = _posts(running)
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
    storm()
    hang()


if __name__ == "__main__":
    main()
