"""The node loop: state across ticks, fail-safe stages, local mode's files, the console
view, and the whole local agent over a fake cgroup tree (quota files written, restored
exactly, restored again after a restart from the state file)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from agent.model.eviction import EvictionResult
from agent.model.objects import Node, Pod
from agent.model.policy import load_policies
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from agent.node.arguments import add_arguments
from agent.node.command import run as run_agent
from agent.node.console import render
from agent.node.dryrun import ReportingEvictor
from agent.node.host import build_host_parts
from agent.node.local import FileObjectSource
from agent.node.loop import Collection, NodeLoop, Objects, TickOutcome, action_result
from agent.node.tick import NodeBrain
from devtools.harness.fake_cgroups import Clock, FakeTree
from executors.actuators import CpuThrottler
from tests import builders

# -- builders --------------------------------------------------------------------------


def node_manifest(name: str = "n1", cpu: str = "4") -> dict[str, Any]:
    return builders.node(name, cpu, "8Gi")


def pod_manifest(name: str, uid: str, qos: str = "BestEffort", cid: str = "c1") -> dict[str, Any]:
    guaranteed = {"cpu": "1", "memory": "1Gi"} if qos == "Guaranteed" else None
    return builders.pod(name, uid=uid, qos=qos, requests=guaranteed, limits=guaranteed, owner_name="rs",
                        owner_uid="rs", started=None, ready=None, container_ids={"main": f"containerd://{cid}"})


def policy_manifests(
    value: str = "1",
    metric: str = "cpu_total_usage",
    avoid: int = 2,
    restore: int = 1,
    throttle: dict[str, Any] | None = None,
    eviction: bool = False,
) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"coolDownSeconds": 0}
    if throttle is not None or not eviction:
        spec["throttle"] = {"cpuThrottle": throttle or {"minCPURatio": 0, "stepCPURatio": 100}}
    if eviction:
        spec["eviction"] = {"terminationGracePeriodSeconds": 5}
    high = builders.rule("high", metric, value, "act", avoidanceThreshold=avoid, restoreThreshold=restore)
    return [builders.policy("guard", [high]), builders.action("act", spec=spec)]


def objects_of(manifests: list[dict[str, Any]]) -> Objects:
    from agent.model.store import ObjectStore

    store = ObjectStore.from_dicts(manifests)
    policies = load_policies(store.raw["NodeQOSEnsurancePolicy"], store.raw["AvoidanceAction"])
    return Objects(store.nodes.get("n1"), tuple(store.pods), policies)


class Scripted:
    """A collector that returns one scripted Collection per tick (or raises it)."""

    def __init__(self, script: list[Collection | Exception]) -> None:
        self.script = list(script)

    def collect(self, node: Node, pods: Sequence[Pod]) -> Collection:
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


class RecordingThrottler(CpuThrottler):
    def __init__(self, fail_for: set[str] | None = None) -> None:
        self.applied: dict[str, dict[str, float]] = {}
        self.restored: list[str] = []
        self.fail_for = fail_for or set()

    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        if pod.key in self.fail_for:
            raise PermissionError("read-only cgroup")
        self.applied[pod.key] = dict(container_caps)
        return True

    def restore(self, pod: Pod) -> bool:
        self.restored.append(pod.key)
        return True


def cpu(metrics: float, **pods: float) -> Collection:
    return Collection(
        {"cpu_total_usage": metrics},
        {f"default/{k.replace('_', '-')}": PodUsage(cpu=v) for k, v in pods.items()},
    )


def make_loop(source: Any, collector: Any, throttler: Any = None, **kw: Any) -> NodeLoop:
    return NodeLoop(
        node_name="n1",
        source=source if callable(source) else (lambda: source),
        collector=collector,
        brain=NodeBrain(AgentSettings()),
        evictor=kw.pop("evictor", ReportingEvictor("test")),
        throttler=throttler or RecordingThrottler(),
        clock=lambda: 1000.0,
        **kw,
    )


# -- the loop --------------------------------------------------------------------------


def test_hysteresis_is_kept_across_ticks() -> None:
    objs = objects_of([node_manifest(), pod_manifest("be-1", "u1"), *policy_manifests(avoid=2)])
    throttler = RecordingThrottler()
    loop = make_loop(objs, Scripted([cpu(3.0, be_1=3.0), cpu(3.0, be_1=3.0)]), throttler)
    first = loop.tick()
    assert first.ok and first.report is not None
    assert first.report.rules == {"guard/high": "normal"} and not first.report.actions
    second = loop.tick()
    assert second.report is not None and second.report.rules == {"guard/high": "triggered"}
    assert [a.action for a in second.report.actions] == ["throttle"]
    assert throttler.applied["default/be-1"] == {"main": pytest.approx(1.0)}
    assert second.caps == {"default/be-1": pytest.approx(1.0)}


def test_a_failing_stage_fails_only_its_tick() -> None:
    objs = objects_of([node_manifest(), pod_manifest("be-1", "u1"), *policy_manifests(avoid=1)])
    calls = {"n": 0}

    def source() -> Objects:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("API server away")
        return objs

    published: list[TickOutcome] = []
    loop = make_loop(
        source, Scripted([OSError("disk"), cpu(3.0, be_1=3.0)]), publishers=[published.append]
    )
    outcomes = [loop.tick() for _ in range(3)]
    assert not outcomes[0].ok and "API server away" in (outcomes[0].error or "")
    assert outcomes[0].errors == {"objects": 1}
    assert not outcomes[1].ok and outcomes[1].errors == {"collector": 1}
    assert outcomes[2].ok and outcomes[2].report is not None and outcomes[2].report.actions
    assert [o.seq for o in published] == [1, 2, 3]


def test_one_pod_failing_to_throttle_does_not_stop_the_others() -> None:
    objs = objects_of([
        node_manifest(), pod_manifest("be-1", "u1", cid="c1"), pod_manifest("be-2", "u2", cid="c2"),
        *policy_manifests(avoid=1),
    ])  # fmt: skip
    throttler = RecordingThrottler(fail_for={"default/be-1"})
    loop = make_loop(objs, Scripted([cpu(3.0, be_1=1.5, be_2=1.5)]), throttler)
    outcome = loop.tick()
    assert outcome.ok
    assert outcome.errors == {"throttler": 1}
    assert "default/be-2" in throttler.applied


def test_no_node_means_no_decision() -> None:
    objs = objects_of([pod_manifest("be-1", "u1"), *policy_manifests(avoid=1)])
    throttler = RecordingThrottler()
    outcome = make_loop(objs, Scripted([]), throttler).tick()
    assert not outcome.ok and "not found" in (outcome.error or "")
    assert outcome.report is None and not throttler.applied


def test_local_evictions_are_reported_not_kept_as_terminating() -> None:
    manifests = [
        node_manifest(), pod_manifest("be-1", "u1"),
        *policy_manifests(value="1Gi", metric="memory_total_usage", avoid=1, eviction=True),
    ]  # fmt: skip
    objs = objects_of(manifests)
    usage = Collection(
        {"memory_total_usage": 3.0 * 2**30}, {"default/be-1": PodUsage(cpu=0.1, memory=3.0 * 2**30)}
    )
    loop = make_loop(objs, Scripted([usage, usage]), evictions_performed=False)
    outcome = loop.tick()
    assert outcome.report is not None
    [record] = outcome.report.actions
    assert record.action == "evict" and record.result == EvictionResult.EVICTED.value
    assert action_result(record, outcome) == "not-performed"
    assert not loop.brain.state.terminating()  # nothing terminates: the pod is still measured


def test_run_keeps_a_fixed_rate_and_skips_missed_slots() -> None:
    objs = objects_of([node_manifest(), *policy_manifests()])
    now = {"t": 0.0}
    slept: list[float] = []

    class Slow:
        durations = [0.1, 2.5, 0.1, 0.1]

        def collect(self, node: Node, pods: Sequence[Pod]) -> Collection:
            now["t"] += self.durations.pop(0)
            return Collection({}, {})

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now["t"] += seconds

    loop = make_loop(objs, Slow(), monotonic=lambda: now["t"], sleep=sleep, interval=1.0)
    assert loop.run(ticks=4) == 4
    # tick 2 (t=1) ran until t=3.5, past the slots at t=2 and t=3: the loop waits for the
    # slot at t=4 instead of running the missed ticks back to back
    assert slept == [0.9, 0.5, 0.9]


def test_stop_ends_run_after_the_current_tick() -> None:
    objs = objects_of([node_manifest(), *policy_manifests()])
    loop = make_loop(objs, Scripted([Collection({}, {})] * 5), sleep=lambda s: None)
    loop.publishers.append(lambda outcome: loop.stop() if outcome.seq == 2 else None)
    assert loop.run() == 2


# -- local mode's files ----------------------------------------------------------------


def write_yaml(path: Path, docs: list[Any]) -> None:
    path.write_text(yaml.safe_dump_all(docs))


def test_files_are_reread_when_they_change(tmp_path: Path) -> None:
    write_yaml(tmp_path / "node.yaml", [node_manifest(), pod_manifest("be-1", "u1")])
    source = FileObjectSource([str(tmp_path)])
    assert source.node_name == "n1"
    first = source()
    assert first.node is not None and first.node.cpu_cores == 4.0
    assert not first.policies.policies
    assert source() is first  # nothing changed: no re-read
    write_yaml(tmp_path / "policy.yaml", policy_manifests())
    second = source()
    assert [p.name for p in second.policies.policies] == ["guard"]
    (tmp_path / "policy.yaml").unlink()
    assert not source().policies.policies


def test_a_broken_file_keeps_its_last_good_content(tmp_path: Path) -> None:
    write_yaml(tmp_path / "all.yaml", [node_manifest(), *policy_manifests()])
    source = FileObjectSource([str(tmp_path / "all.yaml")])
    assert source().policies.policies
    (tmp_path / "all.yaml").write_text("kind: [unclosed\n")
    os.utime(tmp_path / "all.yaml", ns=(1, 1))
    assert [p.name for p in source().policies.policies] == ["guard"]


def test_invalid_objects_are_skipped_and_counted(tmp_path: Path) -> None:
    bad_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "x"}}
    bad_action = {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
                  "metadata": {"name": "act"}, "spec": {"throttle": {"cpuThrottle": {"minCPURatio": 500}}}}  # fmt: skip
    scenario = {"now": "2026-01-01T00:00:00Z",
                "objects": [node_manifest(), pod_manifest("be-1", "u1"), bad_pod, policy_manifests()[0], bad_action]}  # fmt: skip
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    objs = FileObjectSource([str(tmp_path / "s.yaml")])()
    assert [p.name for p in objs.pods] == ["be-1"]
    assert objs.invalid == {"Pod": 1}
    assert objs.policies.errors and not objs.policies.policies  # its action is invalid
    assert "minCPURatio" in str(objs.policies.errors[0])


def test_without_a_node_object_the_host_stands_in(tmp_path: Path) -> None:
    write_yaml(tmp_path / "p.yaml", [pod_manifest("be-1", "u1")])
    source = FileObjectSource([str(tmp_path)], node_name="here")
    objs = source()
    assert objs.node is not None and objs.node.name == "here" and objs.node.cpu_cores >= 1
    assert objs.node.labels == {"kubernetes.io/hostname": "here"}


# -- the console view ------------------------------------------------------------------


def test_console_shows_usage_against_waterlines_and_actions_with_reasons() -> None:
    objs = objects_of([node_manifest(), pod_manifest("be-1", "u1"), *policy_manifests(avoid=1)])
    outcome = make_loop(objs, Scripted([cpu(3.0, be_1=3.0)])).tick()
    text = render(outcome)
    assert "cpu_total_usage" in text and "3.00 cores" in text
    assert "throttleDown 1.00 cores (gap +2.00)" in text
    assert "throttle default/be-1  cap 1.00 cores  by guard/high on cpu_total_usage" in text
    assert "gap 2.00 -> 0.00  [applied]" in text
    assert "default/be-1 3.00/1.00" in text


# -- the whole local agent over a fake cgroup tree -------------------------------------

BE_REL = "kubepods/besteffort/podu-be"
BE_CONTAINER = f"{BE_REL}/c1"


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Any]:
    """A fake v1 cgroup tree with one BestEffort pod, a fake /proc, objects, a state dir."""
    tree = FakeTree(tmp_path / "cg", 1)
    tree.add(BE_REL)
    tree.add(BE_CONTAINER)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text(
        "cpu  10 0 10 100 0 0 0 0\ncpu0 5 0 5 50 0 0 0 0\ncpu1 5 0 5 50 0 0 0 0\n"
    )
    (proc / "meminfo").write_text(
        "MemTotal: 8000000 kB\nMemFree: 4000000 kB\nInactive(file): 0 kB\n"
    )
    objects = tmp_path / "objects"
    objects.mkdir()
    write_yaml(
        objects / "o.yaml",
        [node_manifest(), pod_manifest("be", "u-be"), *policy_manifests(avoid=2)],
    )
    return {"tree": tree, "cg": str(tmp_path / "cg"), "proc": str(proc), "objects": str(objects),
            "state": str(tmp_path / "state")}  # fmt: skip


def local_loop(host: dict[str, Any], clock: Clock) -> NodeLoop:
    parts = build_host_parts(
        host["cg"], host["proc"], "", host["state"], dry_run=False, settings=AgentSettings(),
        node_cpu="pods", clock=clock,
    )  # fmt: skip
    collector, throttler = parts.collector, parts.throttler
    return NodeLoop(
        node_name="n1", source=FileObjectSource([host["objects"]], "n1", host["proc"]),
        collector=collector, brain=NodeBrain(), evictor=ReportingEvictor("test"),
        throttler=throttler, clock=clock, evictions_performed=False,
    )  # fmt: skip


def burn(tree: FakeTree, clock: Clock, used: float, cores: float) -> float:
    """One second passes in which the pod uses ``cores``."""
    clock.t += 1.0
    used += cores
    for rel in (BE_REL, BE_CONTAINER):
        tree.set(rel, cpu_seconds=used)
    return used


def state_pods(host: dict[str, Any]) -> dict[str, Any]:
    path = Path(host["state"]) / "cpu-quota.json"
    return json.loads(path.read_text())["pods"] if path.exists() else {}


def test_local_agent_throttles_through_quota_files_and_restores_exactly(
    host: dict[str, Any],
) -> None:
    tree, clock = host["tree"], Clock()
    loop = local_loop(host, clock)
    used = 0.0
    loop.tick()  # first sample: no rate yet
    used = burn(tree, clock, used, 3.0)
    assert loop.tick().report.rules == {"guard/high": "normal"}  # type: ignore[union-attr]
    assert tree.quota(BE_CONTAINER) == "-1"  # one sample above is not enough
    used = burn(tree, clock, used, 3.0)
    outcome = loop.tick()
    assert [a.action for a in outcome.report.actions] == ["throttle"]  # type: ignore[union-attr]
    assert tree.quota(BE_CONTAINER) == "100000"  # 3 cores - gap 2 = 1 core of a 100 ms period
    assert "u-be" in state_pods(host)
    for _ in range(8):  # the load goes: raised step by step, then the original back
        used = burn(tree, clock, used, 0.2)
        loop.tick()
        if tree.quota(BE_CONTAINER) == "-1":
            break
    assert tree.quota(BE_CONTAINER) == "-1"
    assert not loop.brain.caps() and state_pods(host) == {}


def test_a_restarted_agent_restores_from_the_state_file(host: dict[str, Any]) -> None:
    tree, clock = host["tree"], Clock()
    loop = local_loop(host, clock)
    used = 0.0
    loop.tick()
    for _ in range(2):
        used = burn(tree, clock, used, 3.0)
        loop.tick()
    assert tree.quota(BE_CONTAINER) == "100000"
    del loop  # "killed": nothing restored on the way out
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([
        "--local", "--objects", host["objects"], "--cgroup-root", host["cg"],
        "--proc-root", host["proc"], "--state-dir", host["state"], "--ticks", "1",
        "--metrics-addr", "off", "--no-console", "--log-level", "error", "--interval", "0.01",
    ])  # fmt: skip
    try:
        assert run_agent(args) == 0
    finally:
        structlog.reset_defaults()  # run() configured logging for the whole process
    assert tree.quota(BE_CONTAINER) == "-1"
    assert state_pods(host) == {}


def test_dry_run_writes_nothing(host: dict[str, Any]) -> None:
    tree, clock = host["tree"], Clock()
    parts = build_host_parts(
        host["cg"], host["proc"], "", host["state"], dry_run=True, settings=AgentSettings(),
        node_cpu="pods", clock=clock,
    )  # fmt: skip
    collector, throttler = parts.collector, parts.throttler
    loop = NodeLoop(
        node_name="n1", source=FileObjectSource([host["objects"]], "n1"), collector=collector,
        brain=NodeBrain(), evictor=ReportingEvictor("dry run"), throttler=throttler, clock=clock,
        dry_run=True,
    )  # fmt: skip
    used = 0.0
    loop.tick()
    for _ in range(2):
        used = burn(tree, clock, used, 3.0)
        outcome = loop.tick()
    assert outcome.report is not None and [a.action for a in outcome.report.actions] == ["throttle"]
    assert action_result(outcome.report.actions[0], outcome) == "dry-run"
    assert tree.quota(BE_CONTAINER) == "-1"
    assert not Path(host["state"], "cpu-quota.json").exists()


def test_a_failure_streak_is_logged_when_it_starts_and_ends_not_every_tick() -> None:
    from structlog.testing import capture_logs

    structlog.reset_defaults()
    objs = objects_of([node_manifest(), *policy_manifests()])
    script: list[Collection | Exception] = [OSError("gone")] * 61 + [Collection({}, {})]
    with capture_logs() as logs:
        loop = make_loop(objs, Scripted(script))
        for _ in range(62):
            loop.tick()
    failed = [e for e in logs if e.get("code") == "tick-failed"]
    assert [e["streak"] for e in failed] == [1, 60]
    assert [e["failed_ticks"] for e in logs if e.get("code") == "ticks-succeed-again"] == [61]


def test_a_throttle_whose_write_failed_is_logged_and_counted_as_failed() -> None:
    """The log line and ``waterline_actions_total{result}`` say what happened: a cap that
    could not be written is ``failed``, never ``applied``."""
    from agent.node.loop import TickOutcome, action_result
    from engine.records import FAILED, ActionRecord

    outcome = TickOutcome(seq=1, at=0.0, duration=0.0, node="n1")
    failed = ActionRecord(action="throttle", pod="default/be", rule="p/r", action_name="a",
                          metric="cpu_total_usage", waterline=1.0, gap_before=1.0,
                          gap_after=1.0, cpu_cap=0.5, result=FAILED)
    written = ActionRecord(action="throttle", pod="default/be", rule="p/r", action_name="a",
                           metric="cpu_total_usage", waterline=1.0, gap_before=1.0,
                           gap_after=0.0, cpu_cap=0.5)
    assert action_result(failed, outcome) == "failed"
    assert action_result(written, outcome) == "applied"
