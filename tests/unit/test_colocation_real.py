"""``python -m bench colocation --real``: what it applies and reads, without a node.

The manifests are the pods and policies the kubelet and the agent get (their QoS classes,
the scopes narrowed to the run's namespace), and the agent's figures come from its
/metrics text. (The pods' processes: tests/integration/test_colocation_pod.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.colocation import parse_args
from bench.colocation_cases import CASES
from bench.colocation_real import (
    IN_PROCESS_ONLY,
    batch_manifests,
    code_map,
    parse_metrics,
    resources,
    scoped,
    web_manifest,
)
from bench.colocation_strategies import WINDOWS

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
                   "isolated": {"idle": 3, "burst": 0}}


def test_real_refuses_the_strategies_only_the_in_process_loop_can_run() -> None:
    assert set(IN_PROCESS_ONLY) == {"floor-all", "one-per-tick"}
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--real", "--strategies", "idle,floor-all"])
    assert exit_.value.code == 2
    quick = parse_args(["--real", "--quick"])
    assert not set(quick.strategies.split(",")) & set(IN_PROCESS_ONLY)
