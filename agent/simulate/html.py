"""`waterline simulate --html REPORT.html`: a self-contained picture of a simulation.

One page, no network, no script. Per node and metric: over several ticks, an inline SVG
chart of usage against each waterline type with every action marked on its tick; at a
single tick (a one-sample scenario), a bar of usage against labelled waterlines with the
tick's actions listed beside it, where a chart would be one dot. The reason of every action
is in its hover title. Then the cluster engines' decisions: tables, and for defrag the
source and freed nodes with a before/after utilisation bar per node. Built from the JSON
report only, so what the page shows is exactly what `simulate` printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from agent.model.registry import METRICS
from agent.simulate.charts import (
    AFTER_COLOUR,
    BEFORE_COLOUR,
    LINE_COLOURS,
    action_chips,
    before_after,
    metric_chart,
    metric_gauge,
    unit_of,
)

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px}h3{font-size:15px;margin:18px 0 4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}
th{background:#f3f3f3}.legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:4px}
svg text{font-size:11px;fill:#444}p.note{font-size:13px;color:#555}
ol.marks{display:flex;flex-wrap:wrap;gap:6px;list-style:none;padding:0;margin:4px 0 0 70px;max-width:690px}
ol.marks li{border:1px solid #ddd;border-radius:3px;padding:2px 6px;font-size:12px;cursor:help}
ol.marks i{display:inline-block;width:9px;height:9px;margin-right:5px;vertical-align:baseline}
ol.marks small{color:#777;margin-left:4px}
td.bars{padding:2px 6px}td.bars svg{display:block}
"""


#: Resources the report gives in bytes (SIMULATE.md: memory in bytes): shown in Gi/Mi.
_BYTES = ("memory", "ephemeral-storage", "waterline.io/batch-memory")


def _is_bytes(resource: str) -> bool:
    return resource in _BYTES or resource.startswith("hugepages-")


def _bytes(value: float) -> str:
    """Bytes as a reader of Kubernetes quantities reads them: ``1.5Gi``, ``512Mi`` (at most
    two decimals, trailing zeros dropped); under 1Mi in Ki, under 1Ki as bytes."""
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.2f}".rstrip("0").rstrip(".") + unit
    return f"{value:g}"


def _amount(resource: str, value: Any) -> str:
    """One resource's amount: bytes in Gi/Mi, the rest as given."""
    if _is_bytes(resource) and isinstance(value, int | float) and not isinstance(value, bool):
        return _bytes(value)
    return _cell(value)


def _cell(value: Any) -> str:
    """A table cell's text: a value the report leaves out (None) reads "-", not "None";
    a mapping of resources reads ``cpu 2.0, memory 1Gi``, not a Python dict of bytes."""
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_amount(str(k), v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value) or "-"
    return str(value)


def _result_or_cap(action: Mapping[str, Any]) -> str:
    """An eviction's result; a throttle's or restore's cap (a restore to the pod's own
    quota has none: "original quota")."""
    if action.get("result") is not None or action["action"] == "evict":
        return str(action.get("result", "-"))
    cap = action.get("cpuCap")
    return "original quota" if cap is None else f"{cap:.3g} cores"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], raw: Sequence[int] = ()) -> str:
    """An HTML table; cells in the ``raw`` columns are markup (SVG), the rest text."""
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="bars">{c}</td>' if i in raw else f"<td>{escape(_cell(c))}</td>"
            for i, c in enumerate(row)
        ) + "</tr>"
        for row in rows
    )  # fmt: skip
    return f"<table><tr>{head}</tr>{body}</table>"


def _metric_views(ticks: Sequence[Mapping[str, Any]]) -> list[str]:
    """A chart per metric over several ticks; a gauge and the action list at one tick."""
    parts = []
    single = len({t["at"] for t in ticks}) == 1
    for spec in METRICS:
        if single:
            tick = ticks[-1]
            picture = metric_gauge(spec.name, tick)
            if picture:
                acted = [a for t in ticks for a in t.get("actions", []) if a.get("metric") == spec.name]
                picture += action_chips(acted, unit_of(spec.name))
        else:
            picture = metric_chart(spec.name, ticks)
        if picture:
            parts.append(f"<h3>{escape(spec.name)} ({spec.unit})</h3>{picture}")
    return parts


def _node_section(name: str, node: Mapping[str, Any]) -> str:
    ticks = node.get("ticks", [])
    parts = [f"<h2>Node {escape(name)}</h2>"]
    legend = "".join(f'<span><i style="background:{c}"></i>{k}</span>' for k, c in LINE_COLOURS.items())
    if ticks and len({t["at"] for t in ticks}) == 1:
        parts.append(f'<div class="legend">{legend} (one sample, at {ticks[0]["at"]}s: usage as a bar, '
                     "dashed: the waterlines in force; below: the actions, hover for the reason)</div>")
    else:
        parts.append(f'<div class="legend">{legend} (dashed: waterlines; marks: actions, hover for the reason)</div>')
    parts.extend(_metric_views(ticks))
    capped = [(t["at"], pod, "-" if cap is None else cap)
              for t in ticks for pod, cap in t.get("capped", {}).items()]
    if capped:
        parts.append("<h3>Figures measured under a cap</h3><p>Recorded while the pod was "
                     "throttled: lower bounds of its demand, replayed as the demand.</p>"
                     + _table(["at", "pod", "cap when measured (cores)"], capped))
    rows = [(t["at"], a["action"], a["pod"], a.get("rule", ""), a.get("metric", ""),
             _result_or_cap(a), "yes" if a.get("preview") else "")
            for t in ticks for a in t.get("actions", [])]
    parts.append("<h3>Actions</h3>" + _table(["at", "action", "pod", "rule", "metric", "result / cap", "preview"], rows))
    parts.append("<h3>Outcome</h3>" + _table(
        ["evicted", "throttled (cores)"],
        [(", ".join(node.get("evicted", [])) or "-",
          ", ".join(f"{k}={v}" for k, v in node.get("throttled", {}).items()) or "-")]))
    parts.extend(_isolation_section(node))
    parts.extend(_batch_section(node))
    return "\n".join(parts)


def _isolation_section(node: Mapping[str, Any]) -> list[str]:
    """The CPU isolation classes: who is in each after the last tick, and the changes."""
    ticks = node.get("ticks", [])
    changes = [(t["at"], c["class"], c["change"], c["pod"], c["policy"], c["reason"],
                c.get("result", "applied")) for t in ticks for c in t.get("isolation", [])]
    classes = [k for k in ("idle", "burst", "quotaBurst") if k in node]
    if not classes and not changes:
        return []
    what = {"idle": "idle class (cpu.idle: runs only when nobody else wants the CPU)",
            "burst": "CPU burst (borrows quota unused in earlier periods)",
            "quotaBurst": "quota burst (the CFS quota raised above the limit while under the lines)"}
    rows = [(what[k], ", ".join(node[k]) or "none") for k in classes]
    return ['<h3 id="cpu-isolation">CPU isolation</h3><p class="note">Who runs first, not how '
            "much: idle marks and burst change no usage figure of the replay; a quota "
            "burst lends CPU above the limit, which the replay adds to the node's.</p>"
            + _table(["class", "pods after the last tick"], rows),
            _table(["at", "class", "change", "pod", "policy", "reason", "result"], changes)
            if changes else ""]


def _batch_section(node: Mapping[str, Any]) -> list[str]:
    """The batch capacity the node published, tick by tick (where it publishes one)."""
    rows = [(t["at"], f'{t["batchCapacity"]["cpu"]:g}', _bytes(t["batchCapacity"]["memory"]))
            for t in node.get("ticks", []) if "batchCapacity" in t]
    if not rows:
        return []
    return ['<h3 id="batch-capacity">Batch capacity</h3><p class="note">What the node publishes '
            "in its status (waterline.io/batch-cpu, waterline.io/batch-memory) after each tick."
            "</p>" + _table(["at", "cpu (cores)", "memory"], rows)]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _defrag_section(plan: Mapping[str, Any]) -> str:
    """The plan's migrations, its source and freed nodes, and each node's utilisation
    before and after (bars), with why a node was skipped."""
    sources, freed = plan.get("sourceNodes", []), plan.get("freedNodes", [])
    util = plan.get("utilization", {})
    before, after = util.get("before", {}), util.get("after", {})
    targets = {m["target"] for m in plan.get("migrations", [])}
    skipped = plan.get("skipped", {})
    frag = plan.get("fragmentation", {})
    lines = [
        f"acted: {'yes' if plan.get('acted', True) else 'no (numberOfNodes gated the plan)'}",
        f"source nodes: {', '.join(sources) or 'none'}",
        f"freed nodes: {', '.join(freed) or 'none'}",
    ]
    if frag:
        lines.append(f"fragmentation {_percent(100 * frag.get('before', 0.0))} -> "
                     f"{_percent(100 * frag.get('after', 0.0))}")
    parts = ["<h2>Defragmentation</h2>", f'<p class="note">{escape("; ".join(lines))}</p>']
    rows = []
    for node in sorted(set(before) | set(after)):
        role = [r for r, holds in (("source", node in sources), ("freed", node in freed),
                                   ("not freed", node in sources and node not in freed),
                                   ("target", node in targets)) if holds]  # fmt: skip
        rows.append((node, ", ".join(role) or "-", before_after(node, before.get(node), after.get(node)),
                     _percent(before.get(node)), _percent(after.get(node)), skipped.get(node, "-")))
    legend = (f'<span><i style="background:{BEFORE_COLOUR}"></i>before</span>'
              f'<span><i style="background:{AFTER_COLOUR}"></i>after (0-100%)</span>')
    parts.append(f'<div class="legend">{legend}</div>')
    parts.append(_table(["node", "role", "utilisation", "before", "after", "skipped"], rows, raw=(2,)))
    parts.append("<h3>Migrations</h3>" + _table(
        ["pod", "source", "target"], [(m["pod"], m["source"], m["target"]) for m in plan.get("migrations", [])]))
    return "\n".join(parts)


def _cluster_sections(report: Mapping[str, Any]) -> list[str]:
    parts: list[str] = []
    rows: list[tuple[Any, ...]]
    if "arbitration" in report:
        arb = report["arbitration"]
        rows = [(j, "passed", i + 1) for i, j in enumerate(arb.get("passed", []))]
        rows += [(j, "waiting", r) for j, r in arb.get("waiting", {}).items()]
        rows += [(j, "failed", r) for j, r in arb.get("failed", {}).items()]
        parts.append("<h2>Arbitration</h2>" + _table(["job", "outcome", "order / reason"], rows))
    if "defrag" in report:
        parts.append(_defrag_section(report["defrag"]))
    if "queues" in report:
        queues = report["queues"]
        rows = [(q, v.get("deserved"), v.get("allocated"), v.get("request"))
                for q, v in queues.get("queues", {}).items()]
        parts.append("<h2>Queues</h2>" + _table(["queue", "deserved", "allocated", "request"], rows))
        chosen = queues.get("victimsFor", {})
        parts.append(_table(["victim", "evicted for", "node"],
                            [(v, chosen.get(v, {}).get("pod", "-"), chosen.get(v, {}).get("node", "-"))
                             for v in queues.get("victims", [])]))  # fmt: skip
        waiting = [(v, r["pod"], r["node"], r["deferred"])
                   for r in queues.get("reclaims", []) if r.get("deferred") for v in r["victims"]]  # fmt: skip
        if waiting:
            parts.append("<h3>Victims deferred (not evicted this round)</h3><p class=\"note\">"
                         "Chosen by the plan, but the node's room is already held for another "
                         "pod: nothing is evicted for these until that hold is handed over, "
                         "and the next plan chooses again.</p>"
                         + _table(["victim", "chosen for", "node", "deferred because"], waiting))
        if queues.get("unplaced"):
            parts.append(_table(["pending pod", "no victims because"], list(queues["unplaced"].items())))
        if queues.get("placeholders"):
            rows = [(p["name"], p["pod"], p["node"], p.get("priorityClassName", "-"),
                     ", ".join(f"{r}={_bytes(v) if _is_bytes(r) else format(v, 'g')}"
                               for r, v in p.get("requests", {}).items()) or "-")
                    for p in queues["placeholders"]]  # fmt: skip
            rows += [(f"(next round) {why}", pod, "-", "-", "-")
                     for pod, why in queues.get("placeholdersDeferred", {}).items()]  # fmt: skip
            parts.append("<h3>Room held until the pod is bound (placeholders)</h3>"
                         + _table(["placeholder", "holds room for", "node", "priority class",
                                   "requests"], rows))  # fmt: skip
        if queues.get("skipped"):
            parts.append(_table(["pod", "in no queue because"], list(queues["skipped"].items())))
        if queues.get("unreadableCosts"):
            rows = [(pod, annotation, value) for pod, costs in queues["unreadableCosts"].items()
                    for annotation, value in costs.items()]  # fmt: skip
            parts.append("<h3>Cost annotations read as 0 (not an integer)</h3>"
                         + _table(["pod", "annotation", "value"], rows))
    if "daemonset" in report:
        rows = [(p, v.get("node"), v.get("strategy"), ", ".join(v.get("victims", [])) or "-")
                for p, v in report["daemonset"].items()]
        parts.append("<h2>DaemonSet preemption</h2>" + _table(["pod", "node", "strategy", "victims"], rows))
    return parts


def render_html(report: Mapping[str, Any], title: str = "Waterline simulation") -> str:
    body = [f"<h1>{escape(title)}</h1>"]
    for name, node in report.get("nodes", {}).items():
        body.append(_node_section(name, node))
    body.extend(_cluster_sections(report))
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_html(report: Mapping[str, Any], scenario: Any, path: str | Path) -> None:
    name = getattr(scenario, "name", "scenario")
    Path(path).write_text(render_html(report, f"Waterline simulation: {name}"))
