"""The dashboard and the alerts against a real Prometheus scraping a real agent.

A fake node is built in a temporary directory: a /proc (stat, meminfo, PSI, a mountinfo
that mounts cgroup v2 at /sys/fs/cgroup) and a kubelet-shaped cgroup v2 tree (systemd
driver, containerd) with four pods. A feeder thread advances the CPU counters every half
second, atomically, so the node runs at 3 of its 4 cores and the pods at steady rates; one
pod's memory.stat is garbage, so the agent counts collector errors. Policies put every
waterline below that usage, so rules trigger, pods are throttled and evicted (dry run:
nothing is written anywhere) and every family has series; config/policies/ is loaded too
(its rules stay normal on this node), and one invalid policy is counted as such.

``waterline agent --local --dry-run --interval 1`` runs on the fake node, and Debian's
``prometheus`` scrapes it every second on 127.0.0.1 with the alert rules loaded. Then every
dashboard query (variables substituted) must return series — the log lists each with its
count — the variable queries must list the node and its namespaces, every alert expression
must be valid PromQL and every rule healthy, the alerts that this node should raise must
be pending, and promtool must accept the rules and the agent's /metrics. promtool's rule
unit tests then check, on synthetic series, that each alert fires when it should and not
before.

The test skips, saying why, only where Prometheus is not installed (.ci/run installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors.layout import SYSTEMD, pod_path
from tests.need import need

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "dashboards" / "waterline.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
NODE = "fake-node"
#: What Grafana would put in the queries with every node and namespace chosen.
VARIABLES = {
    "$__rate_interval": "30s",
    "$__interval": "5s",
    "$__range": "1m",
    "$node": ".*",
    "$namespace": ".*",
}
#: Alerts the fake node must raise (pending: their `for` is minutes long).
EXPECTED_PENDING = {
    "WaterlineRuleTriggeredTooLong",
    "WaterlineCollectorErrors",
    "WaterlineThrottleHeldLong",
    "WaterlineInvalidObjects",
}
#: Alerts a healthy, scraped agent must not raise.
EXPECTED_QUIET = {"WaterlineAgentDown", "WaterlineAgentsAbsent", "WaterlineAgentNotTicking"}
DEADLINE = 45.0  # seconds for every query to return series


# -- the fake node ---------------------------------------------------------------------


@dataclass(frozen=True)
class FakePod:
    namespace: str
    name: str
    uid: str
    qos: str  # Guaranteed | Burstable | BestEffort
    cores: float  # steady CPU use
    memory: int  # working set, bytes
    broken: bool = False  # garbage memory.stat: counted as a collector error

    @property
    def container_id(self) -> str:
        return f"c0ffee{self.uid.replace('-', '')}"

    @property
    def rel(self) -> str:
        return pod_path(SYSTEMD, self.qos, self.uid)

    @property
    def container_rel(self) -> str:
        return f"{self.rel}/cri-containerd-{self.container_id}.scope"

    def manifest(self) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        if self.qos == "Guaranteed":
            resources = {"requests": {"cpu": "1", "memory": "1Gi"},
                         "limits": {"cpu": "1", "memory": "1Gi"}}  # fmt: skip
        elif self.qos == "Burstable":
            resources = {"requests": {"cpu": "100m"}, "limits": {"cpu": "2"}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": f"{self.name}-rs",
                                              "uid": f"rs-{self.uid}", "controller": True}]},
            "spec": {
                "nodeName": NODE,
                "priority": 0,
                "containers": [{"name": "main", "image": "busybox", "resources": resources}],
            },
            "status": {
                "phase": "Running",
                "qosClass": self.qos,
                "startTime": "2026-01-01T00:00:00Z",
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "containerID": f"containerd://{self.container_id}",
                    }  # fmt: skip
                ],
            },
        }


PODS = (
    FakePod("batch", "batch-besteffort", "0b0e0000-0000-4000-8000-000000000001", "BestEffort", 1.2, 512 << 20),
    FakePod("batch", "batch-burstable", "0b0e0000-0000-4000-8000-000000000002", "Burstable", 0.8, 768 << 20),
    FakePod("batch", "batch-broken", "0b0e0000-0000-4000-8000-000000000003", "Burstable", 0.1, 64 << 20, broken=True),
    FakePod("web", "web-guaranteed", "0b0e0000-0000-4000-8000-000000000004", "Guaranteed", 0.5, 900 << 20),
)  # fmt: skip

NODE_OBJECT = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "pool": "batch"}},
    "status": {
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
    },
}


def _rule(name: str, metric: str, value: str, action: str) -> dict[str, Any]:
    return {
        "name": name,
        "metricRule": {"name": metric, "value": value},
        "avoidanceThreshold": 1,
        "restoreThreshold": 1,
        "actionName": action,
    }


#: Every waterline below the fake node's usage (3 cores = 75%, 5 GiB = 62.5%, PSI 25/3).
POLICIES = [
    {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "NodeQOSEnsurancePolicy",
        "metadata": {"name": "fake-guard"},
        "spec": {
            "objectiveEnsurances": [
                _rule("cpu-usage", "cpu_total_usage", "1", "throttle-batch"),
                _rule("cpu-utilization", "cpu_total_utilization", "20", "throttle-batch"),
                _rule("cpu-pressure", "cpu_pressure", "5", "throttle-batch"),
                _rule("memory-usage", "memory_total_usage", "1Gi", "evict-batch"),
                _rule("memory-utilization", "memory_total_utilization", "20", "evict-batch"),
                _rule("memory-pressure", "memory_pressure", "1", "evict-batch"),
                # the Guaranteed web pod is latency-critical; its cgroup's CPU PSI is 12
                _rule("web-pressure", "lc_cpu_pressure", "5", "throttle-batch"),
            ]
        },
    },
    {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "AvoidanceAction",
        "metadata": {"name": "throttle-batch"},
        "spec": {
            "coolDownSeconds": 0,
            "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 10}},
            "scope": {"qosClasses": ["Burstable"]},
        },
    },
    {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "AvoidanceAction",
        "metadata": {"name": "evict-batch"},
        "spec": {
            "coolDownSeconds": 0,
            "eviction": {"terminationGracePeriodSeconds": 1},
            # BestEffort only: what an eviction releases counts against the CPU gaps too,
            # and a pod left to throttle is needed for the cap series.
            "scope": {"qosClasses": ["BestEffort"]},
        },
    },
    {  # invalid: counted in waterline_invalid_objects, ignored otherwise
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "NodeQOSEnsurancePolicy",
        "metadata": {"name": "typo-guard"},
        "spec": {"objectiveEnsurances": [_rule("typo", "cpu_totl_usage", "1", "throttle-batch")]},
    },
]

MOUNTINFO = (
    "25 1 0:22 / / rw,relatime shared:1 - overlay overlay rw\n"
    "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
)
CPUS = 4
HZ_PER_STEP = 200  # jiffies per feeder step across all CPUs (busy 150 = 3 of 4 cores)


def _write(path: Path, text: str) -> None:
    """Atomically: the agent must never read a half-written counter."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FakeNode:
    """A /proc and a cgroup v2 tree whose counters a thread advances every half second."""

    STEP = 0.5

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.cgroup = root / "cgroup"
        self.busy = 0
        self.idle = 0
        self.cpu_seconds = {pod.uid: 0.0 for pod in PODS}
        self._stop = threading.Event()
        (self.proc / "pressure").mkdir(parents=True)
        (self.proc / "self").mkdir()
        (self.proc / "self" / "mountinfo").write_text(MOUNTINFO)
        (self.proc / "loadavg").write_text("3.00 2.50 2.00 4/300 4242\n")
        _write(
            self.proc / "meminfo",
            "MemTotal:        8388608 kB\nMemFree:         2097152 kB\n"
            "MemAvailable:    3145728 kB\nInactive(file):  1048576 kB\n",
        )
        _write(self.proc / "pressure" / "cpu",
               "some avg10=25.00 avg60=20.00 avg300=10.00 total=123456\n"
               "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")  # fmt: skip
        _write(self.proc / "pressure" / "memory",
               "some avg10=3.00 avg60=1.00 avg300=0.50 total=4242\n"
               "full avg10=1.00 avg60=0.50 avg300=0.20 total=2121\n")  # fmt: skip
        self.cgroup.mkdir()
        (self.cgroup / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        for pod in PODS:
            for rel in (pod.rel, pod.container_rel):
                d = self.cgroup / rel
                d.mkdir(parents=True, exist_ok=True)
                (d / "cpu.max").write_text("max 100000\n")
                (d / "cpu.pressure").write_text("some avg10=12.00 avg60=8.00 avg300=4.00 total=4242\n"
                                                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")  # fmt: skip
        self.step()
        self._thread = threading.Thread(target=self._run, name="fake-node", daemon=True)

    def step(self) -> None:
        self.busy += HZ_PER_STEP * 3 // 4
        self.idle += HZ_PER_STEP // 4
        per_cpu_busy, per_cpu_idle = self.busy // CPUS, self.idle // CPUS
        lines = [f"cpu  {self.busy} 0 0 {self.idle} 0 0 0 0 0 0"]
        lines += [f"cpu{i} {per_cpu_busy} 0 0 {per_cpu_idle} 0 0 0 0 0 0" for i in range(CPUS)]
        _write(self.proc / "stat", "\n".join([*lines, "intr 0", "ctxt 0", "btime 0"]) + "\n")
        for pod in PODS:
            self.cpu_seconds[pod.uid] += pod.cores * self.STEP
            usec = round(self.cpu_seconds[pod.uid] * 1e6)
            for rel, share in ((pod.rel, 1.0), (pod.container_rel, 1.0)):
                d = self.cgroup / rel
                _write(d / "cpu.stat", f"usage_usec {round(usec * share)}\nuser_usec 0\n"
                       "system_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")  # fmt: skip
                _write(d / "memory.current", f"{pod.memory + (16 << 20)}\n")
                stat = (
                    "garbage\n" if pod.broken else f"anon {pod.memory}\ninactive_file {16 << 20}\n"
                )
                _write(d / "memory.stat", stat)

    def _run(self) -> None:
        while not self._stop.wait(self.STEP):
            self.step()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# -- processes -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback)
        data: bytes = response.read()
        return data


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            _get(url, timeout=1)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    pytest.fail(f"{what} did not answer {url} within 20 s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@dataclass(frozen=True)
class Stack:
    prometheus: str  # base URL
    metrics_url: str
    rules_file: Path
    agent_log: Path
    prometheus_log: Path

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.prometheus}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            body = json.loads(_get(url))
        except urllib.error.HTTPError as err:  # 400 carries the PromQL error
            body = json.loads(err.read() or b"{}")
        return body

    def query(self, expr: str) -> Any:
        return self.api("query", query=expr)


def _rules_file(tmp: Path) -> Path:
    """The PrometheusRule's groups as a plain rule file (what the operator mounts)."""
    rule = yaml.safe_load(RULES.read_text())
    path = tmp / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not os.access(PROMETHEUS, os.X_OK) or not os.access(PROMTOOL, os.X_OK):
        need(
            "Prometheus is not installed (no prometheus/promtool on PATH or in /usr/bin): "
            "apt-get install prometheus (.ci/run does this)"
        )
    tmp = tmp_path_factory.mktemp("prometheus-check")
    node = FakeNode(tmp / "host")
    objects = tmp / "objects"
    objects.mkdir()
    (objects / "node.yaml").write_text(yaml.safe_dump(NODE_OBJECT))
    (objects / "pods.yaml").write_text(yaml.safe_dump_all(p.manifest() for p in PODS))
    (objects / "policies.yaml").write_text(yaml.safe_dump_all(POLICIES))
    agent_port, prom_port = _free_port(), _free_port()
    rules = _rules_file(tmp)
    config = tmp / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {
                    "scrape_interval": "1s",
                    "scrape_timeout": "1s",
                    "evaluation_interval": "1s",
                },  # fmt: skip
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {  # what the PodMonitor sets up: job, honor_labels, node label
                        "job_name": "waterline-agent",
                        "honor_labels": True,
                        "static_configs": [
                            {"targets": [f"127.0.0.1:{agent_port}"], "labels": {"node": NODE}}
                        ],
                    }
                ],
            }
        )
    )
    agent_log, prom_log = tmp / "agent.log", tmp / "prometheus.log"
    procs: list[subprocess.Popen[bytes]] = []
    node.start()
    try:
        with agent_log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "agent",
                        "agent",
                        "--local",
                        "--objects",
                        str(objects),
                        "--objects",
                        str(ROOT / "config" / "policies"),
                        "--node-name",
                        NODE,
                        "--dry-run",
                        "--interval",
                        "1",
                        "--no-console",
                        "--cgroup-root",
                        str(node.cgroup),
                        "--proc-root",
                        str(node.proc),
                        "--state-dir",
                        str(tmp / "state"),
                        "--log-format",
                        "json",
                        "--metrics-addr",
                        f"127.0.0.1:{agent_port}",
                    ],  # fmt: skip
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                )
            )
        metrics_url = f"http://127.0.0.1:{agent_port}/metrics"
        _wait_http(metrics_url, procs[0], agent_log, "the agent")
        with prom_log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        PROMETHEUS,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={tmp / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{prom_port}",
                        "--storage.tsdb.retention.time=1h",
                        "--log.level=warn",
                    ],  # fmt: skip
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=tmp,
                )
            )
        base = f"http://127.0.0.1:{prom_port}"
        _wait_http(f"{base}/-/ready", procs[1], prom_log, "prometheus")
        yield Stack(base, metrics_url, rules, agent_log, prom_log)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        node.stop()


# -- the checks ------------------------------------------------------------------------


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title / refId, query with the variables substituted), in dashboard order."""
    out = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
                expr = expr.replace(name, value)
            assert "$" not in expr, f"unsubstituted variable in {expr}"
            out.append((f"{panel['title']} / {target['refId']}", expr))
    return out


def _series(stack: Stack, expr: str) -> tuple[str, int, str]:
    body = stack.query(expr)
    if body.get("status") != "success":
        return "error", 0, str(body.get("error"))
    return "success", len(body["data"]["result"]), ""


def test_every_dashboard_query_returns_series(stack: Stack) -> None:
    queries = dashboard_queries()
    deadline = time.monotonic() + DEADLINE
    while True:
        results = [(title, expr, *_series(stack, expr)) for title, expr in queries]
        waiting = [r for r in results if r[3] == 0]
        invalid = any(r[2] != "success" for r in results)  # no use waiting for these
        if invalid or not waiting or time.monotonic() > deadline:
            break
        time.sleep(1)
    # The table is for `make prometheus-check` (pytest -s); `make test` keeps it captured
    # (shown only if the test fails).
    print(f"\nPrometheus check: {len(results)} dashboard queries")
    for title, expr, status, count, error in results:
        print(f"  {count:3d} series  {title}: {expr}" if status == "success"
              else f"  ERROR       {title}: {expr}: {error}")  # fmt: skip
    errors = [f"{r[0]}: {r[4]}" for r in results if r[2] != "success"]
    assert not errors, "invalid dashboard queries:\n" + "\n".join(errors)
    missing = "\n".join(f"{r[0]}: {r[1]}" for r in waiting)
    assert not waiting, (
        f"dashboard queries without series after {DEADLINE:.0f} s:\n{missing}\n"
        f"agent log tail:\n{stack.agent_log.read_text()[-3000:]}"
    )


def test_variable_queries_list_the_node_and_its_namespaces(stack: Stack) -> None:
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    found: dict[str, set[str]] = {}
    for name in ("node", "namespace"):
        definition = variables[name]["definition"]
        inner = definition.removeprefix("label_values(").removesuffix(")")
        selector, _, label = inner.rpartition(",")
        for key, value in VARIABLES.items():
            selector = selector.replace(key, value)
        body = stack.api(f"label/{label.strip()}/values", **{"match[]": selector.strip()})
        assert body["status"] == "success", body
        found[name] = set(body["data"])
    assert found["node"] == {NODE}
    assert found["namespace"] == {p.namespace for p in PODS}


def test_every_alert_expression_is_valid_and_every_rule_healthy(stack: Stack) -> None:
    rule = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    for name, expr in alerts.items():
        body = stack.query(expr)
        assert body["status"] == "success", f"{name}: {body.get('error')}"
    deadline = time.monotonic() + 10
    while True:  # loaded and evaluated at least once
        groups = stack.api("rules")["data"]["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        if set(loaded) == set(alerts) and all(r.get("lastEvaluation", "0001").startswith("20")
                                              for r in loaded.values()):  # fmt: skip
            break
        assert time.monotonic() < deadline, f"rules not loaded and evaluated: {sorted(loaded)}"
        time.sleep(0.5)
    unhealthy = {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"}
    assert not unhealthy


def test_alerts_raised_by_what_the_fake_node_shows(stack: Stack) -> None:
    """The rules see real data: a triggered rule, collector errors, caps, an invalid
    policy make their alerts pending; a healthy scraped agent raises no health alert."""
    deadline = time.monotonic() + DEADLINE
    while True:
        alerts = stack.api("alerts")["data"]["alerts"]
        active = {a["labels"]["alertname"] for a in alerts}
        if active >= EXPECTED_PENDING or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert active >= EXPECTED_PENDING, f"pending: {sorted(active)}"
    assert not active & EXPECTED_QUIET
    by_name = {a["labels"]["alertname"]: a for a in alerts}
    assert by_name["WaterlineRuleTriggeredTooLong"]["labels"]["node"] == NODE
    assert by_name["WaterlineInvalidObjects"]["labels"]["kind"]
    assert by_name["WaterlineCollectorErrors"]["labels"]["source"] == "cgroup"
    summary = by_name["WaterlineThrottleHeldLong"]["annotations"]["summary"]
    assert "batch/" in summary and NODE in summary  # the template renders real labels


def test_promtool_accepts_the_rules(stack: Stack) -> None:
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(stack.rules_file)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_accepts_the_agents_metrics(stack: Stack) -> None:
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=_get(stack.metrics_url), capture_output=True
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


# -- each alert fires when it should (promtool's rule unit tests) ---------------------

N1 = 'node="n1", job="waterline-agent"'
#: alert -> (input series, minutes at which it must be silent, at which it must fire, labels)
ALERT_CASES: dict[str, tuple[dict[str, str], int, int, dict[str, str]]] = {
    "WaterlineAgentDown": (
        {f'up{{{N1}, pod="agent-1"}}': "0x20", 'up{node="n2", job="waterline-agent"}': "1x20"},
        4, 6, {"node": "n1", "job": "waterline-agent", "pod": "agent-1"},
    ),
    "WaterlineAgentsAbsent": (
        {'up{job="other"}': "1x30"}, 14, 16, {"job": "waterline-agent"},
    ),
    "WaterlineAgentNotTicking": (  # n1 stopped at t=60 s; n2 keeps up with time()
        {f"waterline_last_successful_tick_timestamp_seconds{{{N1}}}": "60x20",
         'waterline_last_successful_tick_timestamp_seconds{node="n2", job="waterline-agent"}':
             "0+60x20"},
        4, 7, {"node": "n1", "job": "waterline-agent"},
    ),
    "WaterlineAgentSlowTicks": (  # every tick between 0.5 s and 1 s
        {f'waterline_tick_duration_seconds_bucket{{{N1}, le="0.5"}}': "0x40",
         f'waterline_tick_duration_seconds_bucket{{{N1}, le="1.0"}}': "0+60x40",
         f'waterline_tick_duration_seconds_bucket{{{N1}, le="+Inf"}}': "0+60x40"},
        10, 30, {"node": "n1"},
    ),
    "WaterlineCollectorErrors": (
        {f'waterline_collector_errors_total{{{N1}, source="cgroup"}}': "0+10x30",
         'waterline_collector_errors_total{node="n2", job="waterline-agent", source="proc"}':
             "5x30"},
        10, 25, {"node": "n1", "source": "cgroup"},
    ),
    "WaterlineInvalidObjects": (
        {f'waterline_invalid_objects{{{N1}, kind="Pod"}}': "1x20"},
        5, 15, {"kind": "Pod"},
    ),
    "WaterlineRuleTriggeredTooLong": (
        {f'waterline_rule_state{{{N1}, policy="p", rule="r", state="triggered"}}': "1x40",
         f'waterline_rule_state{{{N1}, policy="p", rule="r", state="normal"}}': "0x40",
         f'waterline_rule_state{{{N1}, policy="p", rule="q", state="triggered"}}': "0x40"},
        25, 35, {"node": "n1", "policy": "p", "rule": "r"},
    ),
    "WaterlineEvictionRateHigh": (  # one eviction a minute; dry runs do not count
        {f'waterline_actions_total{{{N1}, action="evict", result="evicted"}}': "0+1x30",
         f'waterline_actions_total{{{N1}, action="evict", result="dry-run"}}': "0+100x30"},
        3, 25, {"node": "n1"},
    ),
    "WaterlineClusterEvictionRateHigh": (
        {f'waterline_actions_total{{{N1}, action="evict", result="evicted"}}': "0+2x30",
         'waterline_actions_total{node="n2", job="waterline-agent", action="evict", '
         'result="evicted"}': "0+2x30"},
        5, 25, {},
    ),
    "WaterlineEvictionsLimited": (  # the brake is the controller's alert, not this one
        {f'waterline_eviction_rounds_limited_total{{{N1}, limit="evictionRateLimit"}}': "0+1x40",
         'waterline_eviction_rounds_limited_total{node="n2", job="waterline-agent", '
         'limit="clusterBrake"}': "0+5x40"},
        10, 25, {"node": "n1", "limit": "evictionRateLimit"},
    ),
    "WaterlineThrottleHeldLong": (
        {f'waterline_pod_cpu_cap_cores{{{N1}, namespace="batch", pod="b-1"}}': "0.5x70"},
        50, 65, {"node": "n1", "namespace": "batch", "pod": "b-1"},
    ),
}  # fmt: skip


def test_each_alert_fires_when_it_should_and_not_before(tmp_path: Path) -> None:
    """promtool's rule unit tests: for each alert, series that must raise it, silent
    before its `for` has passed and firing after, with the labels an on-call routes on.
    Annotations are left out here (promtool compares them verbatim); the live test above
    checks that they render."""
    if not os.access(PROMTOOL, os.X_OK):
        need("promtool is not installed: apt-get install prometheus")
    rule = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(ALERT_CASES) == set(alerts), "every alert needs a case"
    groups = [{"name": g["name"], "rules": [{k: v for k, v in r.items() if k != "annotations"}
                                            for r in g["rules"]]}
              for g in rule["spec"]["groups"]]  # fmt: skip
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    tests = []
    for name, (series, silent, firing, labels) in ALERT_CASES.items():
        expected = {**labels, "severity": alerts[name]["labels"]["severity"]}
        tests.append(
            {
                "name": name,
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": [
                    {"eval_time": f"{silent}m", "alertname": name, "exp_alerts": []},
                    {
                        "eval_time": f"{firing}m",
                        "alertname": name,
                        "exp_alerts": [{"exp_labels": expected}],
                    },  # fmt: skip
                ],
            }
        )
    spec = tmp_path / "alerts-test.yml"
    spec.write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
        )
    )
    done = subprocess.run(
        [PROMTOOL, "test", "rules", spec.name], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
