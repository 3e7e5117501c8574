"""``python -m bench colocation --real``: what it applies and reads, without a node.

The manifests are the pods and policies the kubelet and the agent get (their QoS classes,
the scopes narrowed to the run's namespace), and the agent's figures come from its
/metrics text. (The pods' processes: tests/integration/test_colocation_pod.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.colocation import chosen, parse_args
from bench.colocation_cases import CASES
from bench.colocation_real import (
    IN_PROCESS_ONLY,
    LC_LABEL,
    batch_manifests,
    cap_manifests,
    cap_quota_us,
    cap_settled,
    code_map,
    lost_pods,
    parse_metrics,
    resources,
    scoped,
    web_manifest,
)
from bench.colocation_strategies import CAP_LABEL, CAP_MEMORY_BYTES, CONTENDED, WINDOWS, baselines

ROOT = Path(__file__).resolve().parents[2]
CASE = {c.key: c for c in CASES}


def qos(res: dict[str, object]) -> str:
    """The QoS class the API server gives a one-container pod of these resources."""
    if not res:
        return "BestEffort"
    requests, limits = res.get("requests", {}), res.get("limits", {})
    return "Guaranteed" if limits and requests == limits else "Burstable"


def test_the_pods_have_the_cases_qos_classes_and_run_from_the_configmap() -> None:
    g = web_manifest(CASE["guaranteed"], "web-g", "ns", "node-a", "img", 1, 1.0, 900)
    b = web_manifest(CASE["burstable"], "web-b", "ns", "node-a", "img", 1, 1.0, 900)
    for pod, cls in ((g, "Guaranteed"), (b, "Burstable")):
        (c,) = pod["spec"]["containers"]
        assert qos(c["resources"]) == cls
        assert c["imagePullPolicy"] == "Never" and pod["spec"]["nodeName"] == "node-a"
        assert c["command"][:3] == ["python3", "/bench/colocation_pod.py", "web"]
        assert pod["metadata"]["labels"]["qos.waterline.io/latency-critical"] == "true"
    assert b["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"
    assert b["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "600m"
    batch = {p["metadata"]["name"]: p for p in batch_manifests("ns", "node-a", "img", 1)}
    assert {n: qos(p["spec"]["containers"][0]["resources"]) for n, p in batch.items()} == {
        "batch-1": "Burstable", "batch-2": "Burstable", "batch-3": "BestEffort"}  # fmt: skip
    assert all("qos.waterline.io/latency-critical" not in p["metadata"]["labels"] for p in batch.values())
    assert resources(0.6, None) == {"requests": {"cpu": "600m", "memory": "64Mi"}}  # the sizing pod: no limit
    data = code_map("ns")["data"]
    assert data["colocation_pod.py"] == (ROOT / "bench/colocation_pod.py").read_text()
    assert data["load.py"] == (ROOT / "devtools/demo/load.py").read_text()


def test_every_scope_of_a_strategy_is_narrowed_to_the_runs_namespace() -> None:
    for key in ("waterline-cpu", "idle", "idle-burst"):
        manifests = scoped(WINDOWS[key].rules(0.8, 20.0), "colocation-1")
        text = repr(manifests)
        scopes = text.count("'scope'")
        assert scopes and text.count("'kubernetes.io/metadata.name': 'colocation-1'") == scopes, key
    assert scoped(WINDOWS["none"].rules(0.8, 20.0), "x") == []
    burst = scoped(WINDOWS["alone-burst"].rules(0.8, 20.0), "x")
    assert burst[0]["spec"]["cpuIsolation"] == {"burst": {"quotaPercent": 100}}  # the LC pods: default scope


METRICS = """\
# TYPE waterline_pod_cpu_usage_cores gauge
waterline_pod_cpu_usage_cores{namespace="bench",pod="batch-1"} 0.25
waterline_pod_cpu_usage_cores{namespace="bench",pod="batch-3"} 0.5
waterline_pod_cpu_usage_cores{namespace="bench",pod="web-burstable"} 0.3
waterline_pod_cpu_usage_cores{namespace="waterline-system",pod="batch-1"} 0.9
# TYPE waterline_pod_cpu_cap_cores gauge
waterline_pod_cpu_cap_cores{namespace="bench",pod="batch-3"} 0.05
# TYPE waterline_node_usage gauge
waterline_node_usage{metric="lc_cpu_wait_ratio"} 12.5
waterline_node_usage{metric="cpu_total_usage"} 1.25
# TYPE waterline_actions_total counter
waterline_actions_total{action="throttle",result="ok"} 3.0
waterline_actions_total{action="restore",result="ok"} 1.0
# TYPE waterline_isolated_pods gauge
waterline_isolated_pods{cpu_class="idle"} 3.0
waterline_isolated_pods{cpu_class="burst"} 0.0
"""


def test_the_agents_figures_are_read_from_its_metrics() -> None:
    got = parse_metrics(METRICS, "bench", ["batch-1", "batch-2", "batch-3"])
    assert got == {"batch": 0.75, "wait": 12.5, "node": 1.25, "actions": 4.0, "caps": {"batch-3": 0.05},
                   "isolated": {"idle": 3, "burst": 0}, "published": None}


def test_real_refuses_the_strategies_only_the_in_process_loop_can_run() -> None:
    assert set(IN_PROCESS_ONLY) == {"floor-all", "one-per-tick"}
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--real", "--strategies", "idle,floor-all"])
    assert exit_.value.code == 2
    quick = parse_args(["--real", "--quick"])
    assert not set(quick.strategies.split(",")) & set(IN_PROCESS_ONLY)


# -- the batch-capacity window -------------------------------------------------------------


def test_the_cap_pods_are_besteffort_batch_pods_limited_at_their_contended_demand() -> None:
    from agent.model.batch import batch_limits, is_batch_pod
    from agent.model.objects.pods import parse_pod

    caps = cap_manifests("ns", "node-a", "img", 1)
    assert [p["metadata"]["name"] for p in caps] == ["cap-1", "cap-2", "cap-3"]
    limits = []
    for manifest in caps:
        pod = parse_pod(manifest)
        (c,) = manifest["spec"]["containers"]
        assert pod.qos_class == "BestEffort" and is_batch_pod(pod)
        assert c["resources"]["requests"] == c["resources"]["limits"]
        assert not {"cpu", "memory"} & {*c["resources"]["requests"], *c["resources"]["limits"]}
        assert c["command"][:3] == ["python3", "/bench/colocation_pod.py", "batch"]
        assert c["command"][3] == "1" and manifest["spec"]["nodeName"] == "node-a"
        assert manifest["metadata"]["labels"][CAP_LABEL] == "true"
        assert LC_LABEL not in manifest["metadata"]["labels"]
        got = batch_limits(pod)
        assert got is not None and got.memory == CAP_MEMORY_BYTES
        limits.append(got.cpu)
    assert limits == list(CONTENDED)
    assert [cap_quota_us(c, 100_000) for c in CONTENDED] == [60_000, 50_000, 40_000]


def test_a_cap_pods_baseline_is_its_batch_quota_with_no_mark() -> None:
    rel, ctr = "kubepods/besteffort/podu1", "abc"
    kubelet = {f"{rel}/cpu.cfs_quota_us": "-1", f"{rel}/cpu.shares": "2", f"{rel}/cpu.idle": "0",
               f"{rel}/{ctr}/cpu.cfs_quota_us": "-1", f"{rel}/{ctr}/cpu.shares": "2", f"{rel}/{ctr}/cpu.idle": "0"}
    agent = {**kubelet, f"{rel}/cpu.cfs_quota_us": "60000", f"{rel}/{ctr}/cpu.cfs_quota_us": "60000"}
    assert not cap_settled(kubelet, rel, ctr, 60_000)  # as the kubelet wrote it: the agent has not yet
    assert cap_settled(agent, rel, ctr, 60_000)
    assert not cap_settled({**agent, f"{rel}/cpu.idle": "1"}, rel, ctr, 60_000)  # still held idle
    assert not cap_settled({**agent, f"{rel}/{ctr}/cpu.cfs_quota_us": "20000"}, rel, ctr, 60_000)  # a squeeze cap
    assert not cap_settled({**agent, f"{rel}/{ctr}/cpu.cfs_burst_us": "5000"}, rel, ctr, 60_000)


def test_a_pod_evicted_replaced_or_ended_is_named_and_a_running_one_is_not() -> None:
    def pod(name: str, uid: str, phase: str = "Running", **meta: str) -> dict[str, object]:
        return {"metadata": {"name": name, "uid": uid, **meta},
                "status": {"phase": phase, "reason": "Evicted" if phase == "Failed" else "", "message": "m"}}

    expected = {"web": "u0", "cap-1": "u1", "cap-2": "u2", "cap-3": "u3", "batch-1": "u4"}
    items = [pod("web", "u0"), pod("cap-1", "u1", "Failed"), pod("cap-2", "x2"),
             pod("batch-1", "u4", deletionTimestamp="2026-01-01T00:00:00Z")]
    lost = lost_pods(expected, items)
    assert [line.split(":")[0] for line in lost] == ["batch-1", "cap-1", "cap-2", "cap-3"]
    assert "Evicted" in lost[1] and "gone" in lost[3]
    assert lost_pods({"web": "u0"}, items) == []


def test_the_capacity_policy_is_valid_publishes_a_floor_for_the_cap_pods_and_holds_them_idle() -> None:
    from agent.model.policy import load_policies
    from bench.colocation_strategies import capacity_policy

    policies = load_policies(capacity_policy(), [], strict=True)
    assert not policies.errors
    name, section = policies.batch_capacity_for_node({})  # type: ignore[misc]
    assert name == "bench" and section.idle and section.min_interval_seconds == 0
    assert section.minimum.cpu == sum(CONTENDED) and section.minimum.memory == 3 * CAP_MEMORY_BYTES
    assert scoped(WINDOWS["batch-capacity"].rules(0.8, 20.0), "x") == capacity_policy()  # no scope to narrow
    assert WINDOWS["batch-capacity"].demand == (0, 0, 0) and WINDOWS["batch-capacity"].cap_demand == CONTENDED


def test_no_other_window_touches_the_cap_pods_and_they_still_see_the_batch_pods() -> None:
    from agent.model.objects.pods import parse_pod
    from agent.model.policy import load_policies

    cap = parse_pod({**cap_manifests("x", "n", "img", 1)[0], "status": {"qosClass": "BestEffort"}})
    batch = [parse_pod({**p, "status": {"qosClass": q}})
             for p, q in zip(batch_manifests("x", "n", "img", 1), ("Burstable", "Burstable", "BestEffort"), strict=True)]
    labels = {"kubernetes.io/metadata.name": "x"}
    for key in ("idle", "idle-burst", "busy-alone"):
        manifests = scoped(WINDOWS[key].rules(0.8, 20.0), "x")
        policies = load_policies(manifests, [], strict=True)
        assert not policies.errors, policies.errors
        ((_, section),) = policies.isolation_for_node({})
        assert section.idle is not None
        assert not section.idle.scope.admits(cap, labels), key
        assert all(section.idle.scope.admits(p, labels) for p in batch), key
    rules = scoped(WINDOWS["waterline-cpu"].rules(0.8, 20.0), "x")
    policies = load_policies([r for r in rules if r["kind"] == "NodeQOSEnsurancePolicy"],
                             [r for r in rules if r["kind"] == "AvoidanceAction"], strict=True)
    (action,) = policies.actions.values()
    assert not action.scope.admits(cap, labels) and action.scope.admits(batch[2], labels)


def test_the_agents_published_batch_cpu_is_read_from_its_metrics() -> None:
    text = METRICS + ('# TYPE waterline_batch_capacity gauge\nwaterline_batch_capacity{resource="cpu"} 1.5\n'
                      'waterline_batch_capacity{resource="memory"} 2e8\n')  # fmt: skip
    assert parse_metrics(text, "bench", ["batch-1"])["published"] == 1.5
    assert parse_metrics(METRICS, "bench", ["batch-1"])["published"] is None


def test_the_tree_refuses_batch_capacity_in_one_line_and_its_defaults_leave_it_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--strategies", "none,batch-capacity"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "batch-capacity" in err and "--real" in err
    assert "batch-capacity" not in parse_args(["--quick"]).strategies.split(",")
    assert "batch-capacity" not in [s.key for s in chosen(parse_args(["--quick"]))]
    real = parse_args(["--real", "--quick"])
    assert "batch-capacity" in real.strategies.split(",")
    assert [s.key for s in chosen(parse_args(["--real", "--strategies", "batch-capacity"]))] == [
        "none", "batch-capacity"]  # fmt: skip


def test_only_the_baselines_a_run_judges_against_run() -> None:
    def keys(strategies: str, *flags: str) -> list[str]:
        args = parse_args(["--real", "--strategies", strategies, *flags])
        return [b.key for b in baselines(chosen(args), args.control)]

    assert keys("idle") == ["alone", "busy-alone"]
    assert keys("batch-capacity") == ["alone", "busy-alone"]
    assert keys("idle,idle-burst") == ["alone", "alone-burst", "busy-alone"]
    assert keys("idle-burst", "--no-control") == ["alone", "alone-burst"]
    assert keys("none", "--no-control") == ["alone"]
    assert parse_args([]).control
