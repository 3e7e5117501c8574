"""The metrics endpoint, scraped over HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import AgentMetrics
from agent.model.usage import PodUsage
from agent.node.loop import Collection, NodeLoop
from agent.node.publish import MetricsPublisher
from agent.node.tick import NodeBrain
from agent.serving import Health, MetricsServer, parse_addr
from tests.unit.test_loop import (
    RecordingThrottler,
    Scripted,
    cpu,
    node_manifest,
    objects_of,
    pod_manifest,
    policy_manifests,
)


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, FakeMonotonic]]:
    mono = FakeMonotonic()
    metrics = AgentMetrics()
    server = MetricsServer("127.0.0.1:0", metrics, Health(stale_after=30, clock=mono)).start()
    try:
        yield server, mono
    finally:
        server.stop()


def get(server: MetricsServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(server: MetricsServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = get(server, "/metrics")
    assert status == 200
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


#: Throttled pods keep at least 25% of the node's 4 cores.
FLOOR = {"minCPURatio": 25, "stepCPURatio": 10}


def two_pods_loop(server: MetricsServer, mono: FakeMonotonic, script: list[Any]) -> NodeLoop:
    objs = objects_of([
        node_manifest(), pod_manifest("be-1", "u1", cid="c1"), pod_manifest("be-2", "u2", cid="c2"),
        *policy_manifests(avoid=1, throttle=FLOOR),
    ])  # fmt: skip
    gone = objects_of(
        [
            node_manifest(),
            pod_manifest("be-2", "u2", cid="c2"),
            *policy_manifests(avoid=1, throttle=FLOOR),
        ]
    )
    calls = {"n": 0}

    def source() -> Any:
        calls["n"] += 1
        return objs if calls["n"] < 3 else gone

    return NodeLoop(
        node_name="n1", source=source, collector=Scripted(script), brain=NodeBrain(),
        throttler=RecordingThrottler(), clock=lambda: 1_700_000_000.0, monotonic=mono,
        publishers=[MetricsPublisher(server.metrics, server.health)],
    )  # fmt: skip


def test_scrape_shows_the_node_the_rules_the_actions_and_the_pods(served: Any) -> None:
    server, mono = served
    loop = two_pods_loop(server, mono, [cpu(3.5, be_1=2.0, be_2=1.5)])
    loop.tick()
    m = scrape(server)
    assert value(m, "waterline_node_usage", metric="cpu_total_usage") == 3.5
    assert value(m, "waterline_node_usage", metric="cpu_total_utilization") == 87.5
    assert (
        value(m, "waterline_node_waterline", action_type="throttleDown", metric="cpu_total_usage")
        == 1.0
    )
    assert (
        value(m, "waterline_node_gap", action_type="throttleDown", metric="cpu_total_usage") == 2.5
    )
    assert value(m, "waterline_rule_state", policy="guard", rule="high", state="triggered") == 1.0
    assert value(m, "waterline_rule_state", policy="guard", rule="high", state="normal") == 0.0
    assert value(m, "waterline_actions_total", action="throttle", result="applied") == 2.0
    assert value(m, "waterline_throttled_pods") == 2.0
    assert value(m, "waterline_pod_cpu_usage_cores", namespace="default", pod="be-1") == 2.0
    assert value(
        m, "waterline_pod_cpu_cap_cores", namespace="default", pod="be-1"
    ) == pytest.approx(1.0)
    assert value(
        m, "waterline_pod_cpu_cap_cores", namespace="default", pod="be-2"
    ) == pytest.approx(1.0)
    assert value(m, "waterline_tick_duration_seconds_count") == 1.0
    assert value(m, "waterline_ticks_total", outcome="ok") == 1.0
    assert value(m, "waterline_last_successful_tick_timestamp_seconds") == 1_700_000_000.0


def test_series_of_a_pod_that_left_vanish_and_errors_are_counted(served: Any) -> None:
    server, mono = served
    quiet = Collection(
        {"cpu_total_usage": 0.5},
        {"default/be-1": PodUsage(cpu=0.3, memory=2e8), "default/be-2": PodUsage(cpu=0.2)},
        errors={"cgroup": 2},
    )
    loop = two_pods_loop(server, mono, [quiet, OSError("unreadable"), cpu(0.2, be_2=0.2)])
    loop.tick()
    assert (
        value(scrape(server), "waterline_pod_cpu_usage_cores", namespace="default", pod="be-1")
        == 0.3
    )
    loop.tick()  # the collector failed: the last good snapshot stays, the failure is counted
    m = scrape(server)
    assert value(m, "waterline_pod_cpu_usage_cores", namespace="default", pod="be-1") == 0.3
    assert value(m, "waterline_ticks_total", outcome="failed") == 1.0
    assert value(m, "waterline_collector_errors_total", source="cgroup") == 2.0
    assert value(m, "waterline_collector_errors_total", source="collector") == 1.0
    loop.tick()  # be-1 left the node
    m = scrape(server)
    assert value(m, "waterline_pod_cpu_usage_cores", namespace="default", pod="be-1") is None
    assert value(m, "waterline_pod_cpu_usage_cores", namespace="default", pod="be-2") == 0.2


def test_health_and_readiness(served: Any) -> None:
    server, mono = served
    assert get(server, "/healthz") == (200, "ok\n")
    status, why = get(server, "/readyz")
    assert status == 503 and "no successful tick" in why
    loop = two_pods_loop(server, mono, [cpu(0.5, be_1=0.3)])
    loop.tick()
    assert get(server, "/readyz") == (200, "ok\n")
    mono.t += 31  # the loop is stuck
    assert get(server, "/healthz")[0] == 503
    assert get(server, "/readyz")[0] == 503
    assert get(server, "/nothing")[0] == 404


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        (":9108", ("", 9108)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::]:9108", ("::", 9108)),
        ("9108", ("", 9108)),
    ],
)
def test_parse_addr(addr: str, expected: tuple[str, int]) -> None:
    assert parse_addr(addr) == expected


@pytest.mark.parametrize("addr", ["", "host:", "host:99999", ":http"])
def test_parse_addr_refuses(addr: str) -> None:
    with pytest.raises(ValueError):
        parse_addr(addr)


def test_a_taken_port_is_named_with_the_way_out(served: Any) -> None:
    server, _ = served
    addr = f"127.0.0.1:{server.port}"
    with pytest.raises(OSError) as err:
        MetricsServer(addr, AgentMetrics(), Health())
    assert f"cannot serve metrics on {addr!r}" in str(err.value)
    assert "--metrics-addr" in str(err.value)
