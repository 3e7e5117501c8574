"""The cluster brake (DESIGN "Safety limits"): when the node agents together evict too much,
the controller sets the ConfigMap ``waterline-brake`` and every agent stops evicting.

Pure: ``decide`` reads the agents' eviction Events, the Ready node count and the brake as
the ConfigMap shows it, and says what to do; the writer (``agent/cluster/writes.py``)
does it. The agents report each eviction as an Event (reason ``Evicted``, reporting
component ``waterline-agent``, ``source.host`` = the node); the controller watches only
those (a field selector).

Decisions where DESIGN is silent:

* An Event counts its ``count`` when it was first seen inside the window, else 1 when it
  was repeated inside it (``lastTimestamp``): the agents' recorder folds repeats of one
  message into one Event, and this never counts an eviction from before the window.
* "Above nodesPercent of Ready nodes" is ``evicting nodes > max(1, floor(ready x
  percent / 100))``: on a 5-node cluster one node evicting is 20% but is not a storm;
  on 1,000 nodes 101 evicting nodes set it, as the plain percentage says.
* Lifted after ``quiet_seconds`` (5 min) during which the counts stayed within budget,
  counted from the later of the set time and the last round over budget (both kept in
  the ConfigMap, so a fail-over resumes the count).
* A brake the controller did not set (no ``app.kubernetes.io/managed-by`` label of ours:
  a person made it) is never lifted by the controller. A person who deletes the
  controller's brake is obeyed: evictions seen before the deletion no longer count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.defaults import BRAKE_CONFIGMAP
from agent.model.fields import Fields, config_values
from agent.model.numbers import EPSILON
from agent.model.timeutil import parse_time_or_none

CONFIGMAP = BRAKE_CONFIGMAP
PAUSED_KEY = "evictionsPaused"
REASON_KEY = "reason"
SINCE_KEY = "since"
LAST_EXCEEDED_KEY = "lastExceeded"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "waterline-controller"
#: The agents' eviction Events: reason, reporting component (``agent.node.incluster``).
EVICTED_REASON = "Evicted"
AGENT_COMPONENT = "waterline-agent"
EVENT_SELECTOR = f"reason={EVICTED_REASON},reportingComponent={AGENT_COMPONENT}"

SECTION = "clusterEvictionBudget"
CONFIG_KEYS = {"perMinute": "per_minute", "nodesPercent": "nodes_percent"}


@dataclass(frozen=True, slots=True)
class BrakeBudget:
    """The ``clusterEvictionBudget`` config section; durations in seconds."""

    per_minute: int = 100
    nodes_percent: float = 10.0
    window_seconds: float = 60.0
    quiet_seconds: float = 300.0

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> BrakeBudget:
        values = config_values(SECTION, raw, CONFIG_KEYS)
        fields = Fields("config", SECTION)
        if "per_minute" in values:
            fields.integer(values["per_minute"], "perMinute", minimum=1)
        if "nodes_percent" in values:
            fields.number(values["nodes_percent"], "nodesPercent", above=0, maximum=100)
            values["nodes_percent"] = float(values["nodes_percent"])
        return cls(**values)

    def node_limit(self, ready_nodes: int) -> int:
        return max(1, math.floor(ready_nodes * self.nodes_percent / 100 + EPSILON))


@dataclass(frozen=True, slots=True)
class BrakeState:
    """The brake as the ConfigMap shows it (absent: not set)."""

    present: bool = False
    paused: bool = False
    ours: bool = False
    reason: str = ""
    since: float | None = None
    last_exceeded: float | None = None
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class Window:
    evictions: int
    nodes: frozenset[str]


SET, REFRESH, LIFT, KEEP = "set", "refresh", "lift", "keep"


@dataclass(frozen=True, slots=True)
class BrakeDecision:
    action: str  # set | refresh | lift | keep
    reason: str
    window: Window
    over: bool


def brake_state(configmap: Mapping[str, Any] | None) -> BrakeState:
    if configmap is None:
        return BrakeState()
    meta = configmap.get("metadata") or {}
    data = configmap.get("data") or {}
    labels = meta.get("labels") or {}
    return BrakeState(
        present=True,
        paused=str(data.get(PAUSED_KEY, "")).lower() == "true",
        ours=labels.get(MANAGED_BY_LABEL) == MANAGER,
        reason=str(data.get(REASON_KEY) or ""),
        since=parse_time_or_none(data.get(SINCE_KEY)),
        last_exceeded=parse_time_or_none(data.get(LAST_EXCEEDED_KEY)),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def window(events: Iterable[Mapping[str, Any]], start: float, now: float) -> Window:
    """The agents' evictions in [start, now] and the nodes they happened on."""
    total, nodes = 0, set()
    for event in events:
        first = parse_time_or_none(event.get("firstTimestamp") or event.get("eventTime"))
        last = parse_time_or_none(event.get("lastTimestamp")) or first
        if last is None or not start <= last <= now + 1:
            continue
        count = event.get("count")
        count = count if isinstance(count, int) and count > 0 else 1
        total += count if first is not None and first >= start else 1
        source = event.get("source") or {}
        node = source.get("host") or event.get("reportingInstance") or ""
        if node:
            nodes.add(str(node))
    return Window(total, frozenset(nodes))


def decide(
    budget: BrakeBudget,
    seen: Window,
    ready_nodes: int,
    state: BrakeState,
    now: float,
) -> BrakeDecision:
    """What to do with the brake this round."""
    node_limit = budget.node_limit(ready_nodes)
    reasons = []
    if seen.evictions > budget.per_minute:
        reasons.append(
            f"{seen.evictions} evictions by the node agents in {budget.window_seconds:g}s "
            f"(budget {budget.per_minute})"
        )
    if len(seen.nodes) > node_limit:
        reasons.append(
            f"{len(seen.nodes)} of {ready_nodes} Ready nodes evicting "
            f"(budget {budget.nodes_percent:g}% = {node_limit})"
        )
    over = bool(reasons)
    reason = "; ".join(reasons)
    if not (state.present and state.paused):
        return BrakeDecision(SET if over else KEEP, reason, seen, over)
    if over:
        return BrakeDecision(REFRESH if state.ours else KEEP, reason, seen, over)
    calm_since = max(t for t in (state.since, state.last_exceeded, -math.inf) if t is not None)
    if state.ours and now - calm_since >= budget.quiet_seconds:
        quiet = f"no eviction storm for {now - calm_since:.0f}s"
        return BrakeDecision(LIFT, quiet, seen, over)
    return BrakeDecision(KEEP, state.reason, seen, over)


__all__ = [
    "CONFIGMAP",
    "EVENT_SELECTOR",
    "BrakeBudget",
    "BrakeDecision",
    "BrakeState",
    "Window",
    "brake_state",
    "decide",
    "window",
]
