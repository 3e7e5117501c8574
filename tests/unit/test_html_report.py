"""The HTML report draws what the JSON report says: one chart per metric with data, the
waterlines, and one mark per action with its reason on hover."""

import xml.etree.ElementTree as ET

import pytest

from agent.scenario import load_scenario
from agent.simulate.html import render_html
from agent.simulate.sections import build_report
from tests.conftest import SCENARIOS

SVG = "{http://www.w3.org/2000/svg}"


def _svgs(html: str) -> dict[str, ET.Element]:
    charts = {}
    start = 0
    while (begin := html.find("<svg", start)) != -1:
        end = html.index("</svg>", begin) + len("</svg>")
        element = ET.fromstring(html[begin:end])
        charts[element.get("data-metric")] = element
        start = end
    return charts


def test_throttle_scenario_is_drawn_with_actions_and_waterlines():
    scenario = load_scenario(SCENARIOS / "node-cpu-throttle.yaml")
    report = build_report(scenario)
    html = render_html(report, "t")
    assert html.startswith("<!DOCTYPE html>") and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    charts = _svgs(html)
    assert set(charts) == {"cpu_total_usage", "cpu_total_utilization"}
    cpu = charts["cpu_total_usage"]
    samples = cpu.findall(f"{SVG}circle[@class='sample']")
    assert len(samples) == len(report["nodes"]["n1"]["ticks"]) == 3
    kinds = {p.get("class") for p in cpu.findall(f"{SVG}path")}
    assert kinds == {"waterline throttleDown", "waterline throttleUp"}
    marks = [m for m in cpu.iter() if (m.get("class") or "").startswith("action")]
    titles = [m.find(f"{SVG}title").text for m in marks]
    assert titles == [
        "throttle default/be-1; cap 1.5 cores; rule cpu-guard/cpu-high; waterline 6.00; gap 1.00 -> 0.00",
        "restore default/be-1; cap 2.3 cores; rule cpu-guard/cpu-high; waterline 6.00; gap 1.00 -> 0.20",
    ]


def test_cluster_engines_get_tables():
    report = build_report(load_scenario(SCENARIOS / "arbitration-basic.yaml"))
    html = render_html(report)
    assert "<h2>Arbitration</h2>" in html
    for job in ("job-t2", "job-w2", "job-w1", "job-a1", "job-gone"):
        assert f"<td>{job}</td>" in html
    assert "MaxMigratingPerNode" in html and "MissingPod" in html


def test_a_one_sample_scenario_gets_bars_and_listed_actions_not_a_dot():
    report = build_report(load_scenario(SCENARIOS / "node-memory-evict.yaml"))
    html = render_html(report, "t")
    pictures = _svgs(html)
    assert all(p.get("class") == "gauge" for p in pictures.values())
    memory = pictures["memory_total_usage"]
    assert not memory.findall(f"{SVG}polyline") and not memory.findall(f"{SVG}circle")
    [bar] = memory.findall(f"{SVG}rect[@class='usage']")
    [line] = memory.findall(f"{SVG}path")
    assert line.get("class") == "waterline evict"
    bar_end = float(bar.get("x")) + float(bar.get("width"))
    line_x = float(line.get("d").split(",")[0][1:])
    assert line_x < bar_end  # 28 GiB waterline inside the 30 GiB usage bar
    assert "evict 28.00Gi (gap 2.00Gi)" in ET.tostring(memory, encoding="unicode")
    # the three evictions: one labelled mark each, side by side, reasons on hover
    marks = html.split('<ol class="marks">')[1].split("</ol>")[0]
    assert marks.count("<li") == 3
    assert "evict default/be-a <b>blocked-by-pdb</b>" in marks
    assert 'title="evict default/be-b; result evicted; rule mem-guard/mem-high' in marks


def test_defrag_shows_sources_freed_nodes_and_bars_before_and_after():
    report = build_report(load_scenario(SCENARIOS / "defrag-sources-targets.yaml"))
    html = render_html(report)
    assert "source nodes: a, b; freed nodes: a;" in html
    assert "<td>source, freed</td>" in html and "<td>source, not freed</td>" in html
    assert "<td>NoTarget default/q</td>" in html and "<td>target</td>" in html
    bars = {}
    start = 0
    while (begin := html.find('<svg xmlns="http://www.w3.org/2000/svg" width="260"', start)) != -1:
        end = html.index("</svg>", begin) + len("</svg>")
        svg = ET.fromstring(html[begin:end])
        bars[svg.get("data-node")] = {r.get("class"): float(r.get("width")) for r in svg.iter(f"{SVG}rect") if r.get("class")}
        start = end
    utilization = report["defrag"]["utilization"]
    assert set(bars) == set(utilization["before"])
    for node, widths in bars.items():
        assert widths["before"] == pytest.approx(utilization["before"][node] / 100 * 260, abs=0.1)
        assert widths["after"] == pytest.approx(utilization["after"][node] / 100 * 260, abs=0.1)


def test_tables_say_original_quota_and_dash_never_none():
    """A restore to the pod's own quota has no cap, a DaemonSet pod with no victims no
    strategy: the tables say so, not "None"."""
    restore = render_html(build_report(load_scenario(SCENARIOS / "node-restore-unlimited.yaml")))
    daemonset = render_html(build_report(load_scenario(SCENARIOS / "daemonset-max-victims.yaml")))
    assert "<td>None</td>" not in restore + daemonset
    assert "<td>cpu_total_usage</td><td>original quota</td>" in restore
    assert "<td>cpu_total_usage</td><td>3.5 cores</td>" in restore
    assert "<td>kube-system/fluentd-n1</td><td>n1</td><td>-</td><td>-</td>" in daemonset


def test_the_cpu_isolation_classes_get_their_own_section():
    """Who is idle and who has burst after the last tick, and every change with its reason;
    a node where no class applies has no such section."""
    html = render_html(build_report(load_scenario(SCENARIOS / "node-burst-released-when-capped.yaml")), "t")
    assert html.count('id="cpu-isolation"') == 1
    section = html[html.index('id="cpu-isolation"'):]
    assert "<td>CPU burst (borrows quota unused in earlier periods)</td><td>none</td>" in section
    assert "idle class" not in section  # no idle class on this node
    assert "<td>released</td><td>default/web</td><td>pool</td><td>capped</td>" in section
    idle = render_html(build_report(load_scenario(SCENARIOS / "node-idle-class.yaml")), "t")
    assert "<td>default/batch-1, default/batch-2</td>" in idle
    plain = render_html(build_report(load_scenario(SCENARIOS / "node-cpu-throttle.yaml")), "t")
    assert 'id="cpu-isolation"' not in plain


def test_queue_victims_name_the_pod_and_node_they_were_chosen_for():
    html = render_html(build_report(load_scenario(SCENARIOS / "queues-fit-two-nodes.yaml")), "t")
    assert "<th>victim</th><th>evicted for</th><th>node</th>" in html
    assert "<td>default/b1</td><td>default/w</td><td>n2</td>" in html
    assert "<td>default/b2</td><td>default/w</td><td>n2</td>" in html
    nowhere = render_html(build_report(load_scenario(SCENARIOS / "queues-fits-nowhere.yaml")), "t")
    assert "<td>default/w</td><td>NoNodeFits: 0/2 nodes (2 Insufficient cpu)</td>" in nowhere


def test_a_deferred_reclaims_victims_are_shown_deferred_not_evicted():
    """Two reclaims on one node: the controller holds one room a node at a time, so the
    second waits (NodeHeld) and nothing is evicted for it; the page must not say it is."""
    html = render_html(build_report(load_scenario(SCENARIOS / "queues-deferred-same-node.yaml")), "t")
    assert "<td>default/a1</td><td>default/w1</td><td>n1</td>" in html  # evicted for w1
    evicted = html[html.index("<th>evicted for</th>"):]
    evicted = evicted[:evicted.index("</table>")]
    assert "default/a2" not in evicted
    deferred = html[html.index("Victims deferred"):]
    assert "<th>victim</th><th>chosen for</th><th>node</th><th>deferred because</th>" in deferred
    assert "<td>default/a2</td><td>default/w2</td><td>n1</td><td>NodeHeld n1</td>" in deferred
    two_nodes = render_html(build_report(load_scenario(SCENARIOS / "queues-fit-two-nodes.yaml")), "t")
    assert "Victims deferred" not in two_nodes


def test_queue_placeholders_name_the_pod_and_node_they_hold_room_for():
    html = render_html(build_report(load_scenario(SCENARIOS / "queues-fit-two-nodes.yaml")), "t")
    assert "<th>placeholder</th><th>holds room for</th><th>node</th>" in html
    assert "</td><td>default/w</td><td>n2</td><td>waterline-reclaim-0</td><td>cpu=2</td>" in html
    assert "<td>waterline-system/reclaim-w-" in html
    nowhere = render_html(build_report(load_scenario(SCENARIOS / "queues-fits-nowhere.yaml")), "t")
    assert "holds room for" not in nowhere


def test_a_pod_in_no_queue_is_listed_with_the_reason():
    html = render_html(build_report(load_scenario(SCENARIOS / "queues-unknown-queue.yaml")), "t")
    assert "<th>pod</th><th>in no queue because</th>" in html
    assert "<td>default/stray-running</td><td>UnknownQueue q9</td>" in html


def test_unreadable_cost_annotations_are_listed():
    html = render_html(build_report(load_scenario(SCENARIOS / "queues-unreadable-cost.yaml")), "t")
    assert "Cost annotations read as 0" in html
    assert "<td>default/a</td><td>controller.kubernetes.io/pod-deletion-cost</td><td>high</td>" in html


def test_memory_reads_in_gi_and_mi_not_bytes():
    """Queue figures and placeholder requests: memory as Kubernetes quantities are read."""
    html = render_html(build_report(load_scenario(SCENARIOS / "queues-deferred-same-node.yaml")), "t")
    assert "<td>q1</td><td>cpu 2.0, memory 4Gi</td><td>cpu 4.0, memory 4Gi</td>" in html
    assert "<td>cpu=1, memory=1Gi</td>" in html  # the placeholder's requests
    assert "4294967296" not in html and "1073741824" not in html
    assert "memory 1.5Gi" in render_html({"queues": {"queues": {"q": {"deserved": {"memory": 1.5 * 2**30}}}}})
    assert "memory 512Mi" in render_html({"queues": {"queues": {"q": {"deserved": {"memory": 512 * 2**20}}}}})
