"""Capture and replay without a host: ticks -> samples, the objects a capture keeps, the
caps read from a cgroup tree, and `simulate --policies`."""

from __future__ import annotations

import io
import json
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from agent.capture.caps import OwnCaps, QuotaCaps
from agent.capture.command import tick_budget
from agent.capture.manifests import LocalManifests, scenario_objects
from agent.capture.recorder import Progress, Recorder, scenario_document
from agent.cli import main
from agent.model.objects import BEST_EFFORT, BURSTABLE, Node, Pod
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from agent.node.local import FileObjectSource
from agent.node.loop import TickOutcome
from agent.node.tick import TickReport
from agent.scenario import parse_scenario
from agent.simulate.html import render_html
from agent.simulate.sections import build_report
from collectors.layout import PodCgroupLayout
from devtools.harness.fake_cgroups import FakeTree, make_pod
from tests import builders as b
from tests.conftest import SCENARIOS

NODE = Node(name="n1", allocatable={"cpu": 2.0, "memory": 8e9, "pods": 110.0})


def outcome(seq: int, at: float | None, usage: dict[str, float | None],
            caps: dict[str, float] | None = None) -> TickOutcome:  # fmt: skip
    report = None
    if at is not None:
        report = TickReport(at=at, rules={}, waterlines={}, gaps={}, actions=[],
                            usage={"cpu_total_usage": sum(v or 0 for v in usage.values())})  # fmt: skip
    return TickOutcome(
        seq=seq, at=at or 0.0, duration=0.0, node="n1", report=report,
        usage={k: PodUsage(cpu=v, memory=1e6) for k, v in usage.items()},
        caps=caps or {}, node_record=NODE,
    )  # fmt: skip


def test_samples_mark_pods_capped_by_the_caps_of_the_previous_tick() -> None:
    recorder = Recorder(OwnCaps())
    recorder(outcome(1, 1000.4, {"d/a": None, "d/b": None}))
    recorder(outcome(2, 1001.4, {"d/a": 1.5, "d/b": 0.5}, caps={"d/a": 1.0}))
    recorder(outcome(3, None, {}, caps={"d/a": 0.8}))  # no decision: no sample
    recorder(outcome(4, 1003.4, {"d/a": 0.81, "d/b": 0.5}, caps={"d/a": 0.8}))
    assert [s["at"] for s in recorder.samples] == [0.4, 1.4, 3.4]
    assert recorder.samples[0]["pods"] == {"d/a": {"memory": 1000000}, "d/b": {"memory": 1000000}}
    assert "capped" not in recorder.samples[1]["pods"]["d/a"]  # measured before the cap
    assert recorder.samples[2]["pods"]["d/a"] == {
        "cpu": 0.81, "memory": 1000000, "capped": True, "cpuCap": 0.8}  # fmt: skip
    doc = scenario_document(recorder, [], AgentSettings(execute_excess_percent=5))
    assert doc["now"] == "1970-01-01T00:16:40Z" and doc["config"] == {"agent": {"executeExcessPercent": 5}}
    parsed = parse_scenario({**doc, "objects": [b.node("n1"), b.pod("a", namespace="d"),
                                                b.pod("b", namespace="d")]})  # fmt: skip
    assert parsed.samples[2].capped == {"d/a": 0.8}
    assert parsed.samples[2].at == pytest.approx(1003.4)


def test_progress_is_a_line_now_and_then_off_a_terminal() -> None:
    stream = io.StringIO()
    recorder = Recorder(OwnCaps())
    progress = Progress(stream, recorder, total=3, every=2)
    for seq in range(1, 4):
        recorder(outcome(seq, 1000.0 + seq, {"d/a": 1.0}))
        progress(outcome(seq, 1000.0 + seq, {"d/a": 1.0}))
    assert stream.getvalue().splitlines() == [
        "capture: tick 2/3, 2 samples, 0 pods capped, 0 actions",
        "capture: tick 3/3, 3 samples, 0 pods capped, 0 actions",
    ]


def test_tick_budget() -> None:
    def args(**kw: Any) -> Namespace:
        return Namespace(**{"ticks": None, "duration": None, "interval": 0.5, **kw})

    assert tick_budget(args()) is None
    assert tick_budget(args(duration=3.0)) == 6
    assert tick_budget(args(duration=3.2)) == 7
    assert tick_budget(args(duration=3.0, ticks=4)) == 4


def test_objects_keep_this_node_and_what_the_simulator_reads(tmp_path: Path) -> None:
    files = tmp_path / "objects"
    files.mkdir()
    bad_policy = {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
                  "metadata": {"name": "broken"}, "spec": {"objectiveEnsurances": [
                      {"name": "r", "metricRule": {"name": "nope", "value": "1"}, "actionName": "x"}]}}  # fmt: skip
    local = b.pod("local", node_name="")
    (files / "a.yaml").write_text(yaml.safe_dump_all([
        b.node("n2"), local, b.pod("elsewhere", node_name="n2"), bad_policy,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}]))  # fmt: skip
    manifests = LocalManifests(FileObjectSource([str(files)], "n1"))
    (files / "b.yaml").write_text(yaml.safe_dump(b.pod("later")))  # appears mid-capture
    manifests.finish()
    objects, dropped = scenario_objects(manifests.objects, NODE, "n1")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [("Node", "n1"), ("Pod", "local"), ("Namespace", "default"), ("Pod", "later")]
    assert objects[1]["spec"]["nodeName"] == "n1" and local["spec"]["nodeName"] == ""
    assert objects[0]["status"]["allocatable"] == {"cpu": "2", "memory": "8000000000", "pods": "110"}
    assert len(dropped) == 1 and "broken" in dropped[0] and "nope" in dropped[0]


def _quota(tree: FakeTree, rel: str, quota: int | None) -> None:
    (tree.root / "cpu" / rel / "cpu.cfs_quota_us").write_text(f"{quota if quota else -1}\n")


def test_caps_from_the_cgroup_tree_are_quotas_below_the_pods_limit(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 1)
    pods = {
        "be": make_pod("be", "u-be", BEST_EFFORT, {"main": "containerd://c1"}),
        "free": make_pod("free", "u-free", BEST_EFFORT, {"main": "containerd://c2"}),
        "limited": Pod("default", "limited", "u-lim", qos_class=BURSTABLE, limits={"cpu": 1.0},
                       containers=make_pod("x", "u", BURSTABLE, {"main": "containerd://c3",
                                                                 "side": "containerd://c4"}).containers),
    }  # fmt: skip
    rels = {"be": "kubepods/besteffort/podu-be", "free": "kubepods/besteffort/podu-free",
            "limited": "kubepods/burstable/podu-lim"}  # fmt: skip
    for rel in rels.values():
        tree.add(rel)
    for rel, cid in ((rels["be"], "c1"), (rels["free"], "c2"), (rels["limited"], "c3"),
                     (rels["limited"], "c4")):  # fmt: skip
        tree.add(f"{rel}/{cid}")
    _quota(tree, f"{rels['be']}/c1", 30000)
    _quota(tree, f"{rels['free']}/c2", None)
    _quota(tree, f"{rels['limited']}/c3", 50000)  # the limits kubelet wrote: 0.5 + 0.5
    _quota(tree, f"{rels['limited']}/c4", 50000)
    root = str(tree.root / "cpu")
    caps = QuotaCaps(root, 1, PodCgroupLayout(root))
    seen = TickOutcome(seq=1, at=0.0, duration=0.0, node="n1", pods=tuple(pods.values()))
    assert caps(seen) == {"default/be": pytest.approx(0.3)}
    _quota(tree, f"{rels['limited']}/c4", 20000)  # someone capped it: 0.7 < 1.0
    assert caps(seen) == {"default/be": pytest.approx(0.3), "default/limited": pytest.approx(0.7)}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _write(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _rules(scenario: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(scenario.read_text())
    return [o for o in doc["objects"] if o["kind"] in ("NodeQOSEnsurancePolicy", "AvoidanceAction")]


def test_policies_dir_replaces_the_scenarios_rules(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    scenario = SCENARIOS / "node-cpu-throttle.yaml"
    code, out, _ = _run(capsys, "simulate", str(scenario))
    before = json.loads(out)["nodes"]["n1"]["throttled"]
    rules = _rules(scenario)
    policy = next(r for r in rules if r["kind"] == "NodeQOSEnsurancePolicy")
    policy["spec"]["objectiveEnsurances"][0]["metricRule"]["value"] = "4"
    (tmp_path / "dir" / "deep").mkdir(parents=True)
    _write(tmp_path / "dir" / "deep" / "rules.yaml", [*rules, b.node("other")])
    code, out, err = _run(capsys, "simulate", str(scenario), "--policies", str(tmp_path / "dir"))
    assert code == 0
    after = json.loads(out)["nodes"]["n1"]["throttled"]
    assert set(before) < set(after)  # a lower line: more pods capped, none less
    assert all(after[k] <= cap for k, cap in before.items())
    assert "ignored 1 Node" in err


@pytest.mark.parametrize("docs, words", [
    ([], ["holds no NodeQOSEnsurancePolicy"]),
    ([{"kind": "NodeQOSEnsurancePolicy", "apiVersion": "qos.waterline.io/v1alpha1",
       "metadata": {"name": "p"}, "spec": {"objectiveEnsurances": [
           {"name": "r", "metricRule": {"name": "cpu_total_usage", "value": "1"},
            "avoidanceThreshold": 0, "actionName": "a"}]}}],
     ["NodeQOSEnsurancePolicy p", "actionName", "'a'"]),
    (None, ["no such file or folder"]),
])  # fmt: skip
def test_bad_policies_dir_exits_2_naming_the_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: Any, words: list[str]
) -> None:
    target = tmp_path / "missing" if docs is None else _write(tmp_path / "p.yaml", docs)
    code, out, err = _run(capsys, "simulate", str(SCENARIOS / "node-cpu-throttle.yaml"),
                          "--policies", str(target))  # fmt: skip
    assert code == 2 and out == ""
    assert err.startswith("invalid policies:") and all(w in err for w in words), err


def test_html_lists_the_capped_figures() -> None:
    from agent.scenario import load_scenario

    report = build_report(load_scenario(SCENARIOS / "node-capped-sample.yaml"))
    html = render_html(report)
    assert "Figures measured under a cap" in html
    assert "<td>default/be-1</td><td>1.0</td>" in html and "<td>1.5</td>" in html


@pytest.mark.parametrize("argv, words", [
    (["release"], ["'release' is a command of `waterline agent`, not of capture"]),
    (["--kubeconfig", "{tmp}/none.kubeconfig", "--node-name", "n1"],
     ["not started:", "kube-config"]),
    (["--local"], ["--local needs --objects PATH"]),
    (["--local", "--objects", "{tmp}", "--ticks", "0"], ["--ticks must be >= 1, got 0"]),
    (["--local", "--objects", "{tmp}/missing"], ["not started:", "missing"]),
])  # fmt: skip
def test_a_capture_that_cannot_start_says_why_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], words: list[str]
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code, out, err = _run(capsys, "capture", *argv, "--state-dir", str(tmp_path / "state"),
                              "-o", str(tmp_path / "day.json"))  # fmt: skip
    finally:
        structlog.reset_defaults()  # run() configured logging into capsys's stream
    assert code == 2 and not (tmp_path / "day.json").exists()
    lines = [line for line in err.splitlines() if line.startswith("waterline capture:")]
    assert len(lines) == 1 and all(w in lines[0] for w in words), err
    assert "Traceback" not in err
