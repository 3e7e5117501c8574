"""The HTML report draws what the JSON report says: one chart per metric with data, the
waterlines, and one mark per action with its reason on hover."""

import xml.etree.ElementTree as ET

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
