"""The demo where cgroups cannot be written: the same story as an embedded scenario
(``scenario.yaml`` beside this module), replayed through ``waterline simulate``'s
decision code: the same throttle and restore steps, computed instead of enforced."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from agent.scenario import parse_scenario
from agent.simulate.sections import build_report
from devtools.demo.live import say

SCENARIO = "scenario.yaml"


def replay(reason: str) -> int:
    say(f"The live demo needs writable cgroup v1 cpu and cpuacct hierarchies: {reason}.")
    say(
        "Replaying the embedded scenario through the same decision code instead (waterline simulate).\n"
    )
    text = resources.files("devtools.demo").joinpath(SCENARIO).read_text(encoding="utf-8")
    scenario = parse_scenario(yaml.safe_load(text), "demo-scenario")
    report = build_report(scenario)
    for node, result in report.get("nodes", {}).items():
        for tick in result["ticks"]:
            _show_tick(node, tick)
        say(f"still throttled at the end: {result.get('throttled') or 'none'}")
    return 0


def _show_tick(node: str, tick: dict[str, Any]) -> None:
    usage = tick["usage"].get("cpu_total_usage")
    line = tick["waterlines"]["throttleDown"].get("cpu_total_usage") or tick["waterlines"][
        "throttleUp"
    ].get("cpu_total_usage")
    rules = ", ".join(f"{k} {v}" for k, v in tick["rules"].items())
    say(f"t={tick['at']:>3}s  node {node}  cpu_total_usage {usage}  waterline {line}  [{rules}]")
    for a in tick["actions"]:
        cap = "original quota" if a.get("cpuCap") is None else f"{a['cpuCap']} cores"
        say(
            f"        {a['action']:<8} {a['pod']}  cap {cap}  gap {a['gapBefore']} -> {a['gapAfter']}"
        )
