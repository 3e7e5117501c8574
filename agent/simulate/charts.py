"""The inline SVG pictures of the HTML report (no script, no network).

* :func:`metric_chart`: one metric over several ticks, usage as a line, each waterline as
  dashed steps, each action a mark on its tick (hover: the reason);
* :func:`metric_gauge`: one metric at a single tick, where a line would be one dot: usage
  as a bar from 0, each waterline a labelled dashed rule across it with its gap;
* :func:`before_after`: a node's utilisation before and after a plan, as two bars on 0-100%.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from agent.model.registry import BY_NAME

WIDTH, HEIGHT = 760, 220
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 20, 20, 30
LINE_COLOURS = {"usage": "#1f77b4", "evict": "#d62728", "throttleDown": "#ff7f0e", "throttleUp": "#2ca02c"}
MARK_COLOURS = {"evict": "#d62728", "throttle": "#ff7f0e", "restore": "#2ca02c"}
BEFORE_COLOUR, AFTER_COLOUR = "#b8b8b8", "#1f77b4"


def unit_of(metric: str) -> str:
    return BY_NAME[metric].unit if metric in BY_NAME else ""


def fmt(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 2**30:.2f}Gi"
    if unit == "percent":
        return f"{value:.1f}%"
    return f"{value:.2f}"


def action_title(action: Mapping[str, Any], unit: str) -> str:
    """An action's reason in one line (the hover title of its mark)."""
    parts = [f"{action['action']} {action['pod']}"]
    if action.get("result"):
        parts.append(f"result {action['result']}")
    if action.get("cpuCap", "absent") != "absent" and action["action"] != "evict":
        cap = action.get("cpuCap")
        parts.append("cap restored to original" if cap is None else f"cap {cap:.3g} cores")
    if action.get("rule"):
        parts.append(f"rule {action['rule']}")
    if action.get("waterline") is not None:
        parts.append(f"waterline {fmt(action['waterline'], unit)}")
    if action.get("gapBefore") is not None:
        parts.append(f"gap {fmt(action['gapBefore'], unit)} -> {fmt(action.get('gapAfter') or 0.0, unit)}")
    if action.get("preview"):
        parts.append("preview: nothing done")
    return "; ".join(parts)


def _svg_open(metric: str, height: int, kind: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'class="{kind}" data-metric="{escape(metric)}" role="img">')


# -- several ticks: a line chart ---------------------------------------------------------


class _Scale:
    def __init__(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        self.x0, self.x1 = min(xs), max(xs)
        if self.x1 == self.x0:
            self.x1 = self.x0 + 1
        self.x1 += (self.x1 - self.x0) * 0.04  # room for the last tick's waterline step
        low, high = min(ys), max(ys)
        pad = (high - low) * 0.1 or abs(high) * 0.1 or 1.0
        self.y0, self.y1 = max(0.0, low - pad), high + pad

    def x(self, value: float) -> float:
        span = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
        return MARGIN_LEFT + (value - self.x0) / (self.x1 - self.x0) * span

    def y(self, value: float) -> float:
        span = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
        return HEIGHT - MARGIN_BOTTOM - (value - self.y0) / (self.y1 - self.y0) * span


def _waterline_series(metric: str, ticks: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    lines: dict[str, list[tuple[float, float]]] = {}
    for tick in ticks:
        for kind, table in tick.get("waterlines", {}).items():
            if metric in table:
                lines.setdefault(kind, []).append((tick["at"], table[metric]))
    return lines


def metric_chart(metric: str, ticks: Sequence[Mapping[str, Any]]) -> str | None:
    """An SVG chart of one metric over the ticks, or None if the metric never appears."""
    unit = unit_of(metric)
    points = [(t["at"], t.get("usage", {}).get(metric)) for t in ticks]
    lines = _waterline_series(metric, ticks)
    known = [(x, y) for x, y in points if y is not None]
    if not known and not lines:
        return None
    xs = [t["at"] for t in ticks]
    ys = [y for _, y in known] + [y for series in lines.values() for _, y in series]
    scale = _Scale(xs, ys)
    out = [_svg_open(metric, HEIGHT, "chart"),
           f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{WIDTH - MARGIN_LEFT - MARGIN_RIGHT}" '
           f'height="{HEIGHT - MARGIN_TOP - MARGIN_BOTTOM}" fill="#fafafa" stroke="#ddd"/>']
    for frac in (0.0, 0.5, 1.0):
        value = scale.y0 + frac * (scale.y1 - scale.y0)
        out.append(f'<text x="4" y="{scale.y(value) + 4:.1f}">{escape(fmt(value, unit))}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{scale.x(x) - 6:.1f}" y="{HEIGHT - 10}">{x}s</text>')
    out.extend(_steps(scale, lines, sorted(set(xs))))
    if known:
        coords = " ".join(f"{scale.x(x):.1f},{scale.y(y):.1f}" for x, y in known)
        out.append(f'<polyline class="usage" points="{coords}" fill="none" '
                   f'stroke="{LINE_COLOURS["usage"]}" stroke-width="2"><title>usage</title></polyline>')
        for x, y in known:
            out.append(f'<circle class="sample" cx="{scale.x(x):.1f}" cy="{scale.y(y):.1f}" r="3" '
                       f'fill="{LINE_COLOURS["usage"]}"><title>{x}s: {escape(fmt(y, unit))}</title></circle>')
    out.extend(_marks(scale, metric, ticks, unit))
    out.append("</svg>")
    return "\n".join(out)


def _steps(scale: _Scale, lines: Mapping[str, list[tuple[float, float]]], ordered: list[float]) -> list[str]:
    """A waterline holds from its tick until the next one: drawn as steps."""
    following = {x: (ordered[i + 1] if i + 1 < len(ordered) else None) for i, x in enumerate(ordered)}
    tail = (scale.x1 - scale.x0) * 0.03
    out = []
    for kind, series in lines.items():
        steps = []
        for x, y in series:
            nxt = following[x]
            end: float = nxt if nxt is not None else x + tail
            steps.append(f"M{scale.x(x):.1f},{scale.y(y):.1f} H{scale.x(end):.1f}")
        out.append(f'<path class="waterline {kind}" d="{" ".join(steps)}" fill="none" '
                   f'stroke="{LINE_COLOURS[kind]}" stroke-dasharray="6 4" stroke-width="2">'
                   f"<title>{kind} waterline</title></path>")
    return out


def _marks(scale: _Scale, metric: str, ticks: Sequence[Mapping[str, Any]], unit: str) -> list[str]:
    out = []
    for tick in ticks:
        acted = [a for a in tick.get("actions", []) if a.get("metric") == metric]
        for index, action in enumerate(acted):
            x = scale.x(tick["at"])
            y = MARGIN_TOP + 8 + index * 12
            out.append(_mark(action, x, y, unit))
    return out


def _mark(action: Mapping[str, Any], x: float, y: float, unit: str) -> str:
    colour = MARK_COLOURS.get(action["action"], "#555")
    shape = "rect" if action["action"] == "evict" else "circle"
    attrs = (f'x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10"' if shape == "rect"
             else f'cx="{x:.1f}" cy="{y:.1f}" r="5"')
    return (f'<{shape} class="action {action["action"]}" {attrs} fill="{colour}" '
            f'fill-opacity="{0.4 if action.get("preview") else 1}">'
            f"<title>{escape(action_title(action, unit))}</title></{shape}>")


# -- one tick: a gauge -------------------------------------------------------------------

BAR_HEIGHT, LABEL_ROW = 26, 18


def metric_gauge(metric: str, tick: Mapping[str, Any]) -> str | None:
    """One metric at one tick: usage as a bar from 0, each waterline a labelled dashed
    rule with its gap; None when the tick has neither usage nor a waterline for it."""
    unit = unit_of(metric)
    usage = tick.get("usage", {}).get(metric)
    lines = sorted(
        ((table[metric], kind) for kind, table in tick.get("waterlines", {}).items() if metric in table),
        reverse=True,
    )
    if usage is None and not lines:
        return None
    highest = max([usage or 0.0, *(v for v, _ in lines)])
    top = 100.0 if unit == "percent" and highest <= 100.0 else highest * 1.1 or 1.0
    span = WIDTH - MARGIN_LEFT - MARGIN_RIGHT

    def x(value: float) -> float:
        return MARGIN_LEFT + max(0.0, value) / top * span

    bar_y = MARGIN_TOP + LABEL_ROW * len(lines)
    height = bar_y + BAR_HEIGHT + 34
    out = [_svg_open(metric, height, "gauge"),
           f'<rect x="{MARGIN_LEFT}" y="{bar_y}" width="{span}" height="{BAR_HEIGHT}" fill="#fafafa" stroke="#ddd"/>']
    if usage is not None:
        out.append(f'<rect class="usage" x="{MARGIN_LEFT}" y="{bar_y}" width="{x(usage) - MARGIN_LEFT:.1f}" '
                   f'height="{BAR_HEIGHT}" fill="{LINE_COLOURS["usage"]}" fill-opacity="0.75">'
                   f"<title>usage {escape(fmt(usage, unit))}</title></rect>")
        out.append(f'<text x="4" y="{bar_y + BAR_HEIGHT / 2 + 4:.1f}">usage</text>')
        out.append(f'<text x="{x(usage) + 4:.1f}" y="{bar_y + BAR_HEIGHT + 14}" '
                   f'fill="{LINE_COLOURS["usage"]}">{escape(fmt(usage, unit))}</text>')
    gaps = tick.get("gaps", {})
    for row, (value, kind) in enumerate(lines):
        label_y = MARGIN_TOP + LABEL_ROW * row + 12
        gap = gaps.get(kind, {}).get(metric)
        text = f"{kind} {fmt(value, unit)}" + ("" if gap is None else f" (gap {fmt(gap, unit)})")
        anchor = "end" if x(value) > WIDTH - 220 else "start"
        shift = -4 if anchor == "end" else 4
        out.append(f'<path class="waterline {kind}" d="M{x(value):.1f},{label_y - 10} V{bar_y + BAR_HEIGHT}" '
                   f'stroke="{LINE_COLOURS[kind]}" stroke-dasharray="6 4" stroke-width="2">'
                   f"<title>{escape(text)}</title></path>")
        out.append(f'<text x="{x(value) + shift:.1f}" y="{label_y}" text-anchor="{anchor}" '
                   f'fill="{LINE_COLOURS[kind]}">{escape(text)}</text>')
    axis_y = bar_y + BAR_HEIGHT + 28
    for frac in (0.0, 0.5, 1.0):
        anchor = {0.0: "start", 0.5: "middle", 1.0: "end"}[frac]
        out.append(f'<text x="{MARGIN_LEFT + frac * span:.1f}" y="{axis_y}" text-anchor="{anchor}" '
                   f'fill="#888">{escape(fmt(frac * top, unit))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def action_chips(actions: Sequence[Mapping[str, Any]], unit: str) -> str:
    """A tick's actions on one metric as a wrapped row of labelled marks (hover: reason)."""
    items = []
    for action in actions:
        colour = MARK_COLOURS.get(action["action"], "#555")
        outcome = action.get("result") or (
            "" if action["action"] == "evict"
            else "original quota" if action.get("cpuCap") is None else f"cap {action['cpuCap']:.3g} cores"
        )
        preview = " (preview)" if action.get("preview") else ""
        gap = ""
        if action.get("gapBefore") is not None:
            gap = f" gap {fmt(action['gapBefore'], unit)} &rarr; {fmt(action.get('gapAfter') or 0.0, unit)}"
        items.append(f'<li class="mark {escape(action["action"])}" title="{escape(action_title(action, unit))}">'
                     f'<i style="background:{colour}"></i>{escape(action["action"])} {escape(action["pod"])}'
                     f" <b>{escape(outcome)}</b>{preview}<small>{gap}</small></li>")
    return f'<ol class="marks">{"".join(items)}</ol>' if items else ""


# -- a plan's nodes: before and after ------------------------------------------------------

BARS_WIDTH, BARS_HEIGHT = 260, 30


def before_after(node: str, before: float | None, after: float | None) -> str:
    """Two bars on a 0-100% scale: utilisation before (grey) and after (blue) the plan."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{BARS_WIDTH}" height="{BARS_HEIGHT}" '
           f'class="before-after" data-node="{escape(node)}" role="img">',
           f'<rect x="0" y="0" width="{BARS_WIDTH}" height="{BARS_HEIGHT}" fill="#fafafa" stroke="#ddd"/>',
           f'<path d="M{BARS_WIDTH / 2},0 V{BARS_HEIGHT}" stroke="#ddd"><title>50%</title></path>']
    for row, (name, value, colour) in enumerate((("before", before, BEFORE_COLOUR), ("after", after, AFTER_COLOUR))):
        if value is None:
            continue
        width = max(0.0, min(value, 100.0)) / 100 * BARS_WIDTH
        out.append(f'<rect class="{name}" x="0" y="{2 + row * 14}" width="{width:.1f}" height="12" '
                   f'fill="{colour}"><title>{name} {value:.1f}%</title></rect>')
    out.append("</svg>")
    return "".join(out)
