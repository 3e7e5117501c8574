"""The `nodes` section of `waterline simulate`: samples replayed through the node agent.

Samples are *demand*: what would be measured had the agent never acted. Before each tick
the effect of earlier actions is applied to the sample: evicted pods are gone (their CPU
and memory, from this sample or else as last known, leave the node metrics) and a
throttled pod uses ``min(demand, cap)`` (per container where the sample splits it), the
node's CPU dropping by the difference; a pod whose quota is raised above its limit (the
quota burst) uses ``min(demand, raised quota)``, the node's CPU rising by what it gets
above ``min(demand, limit)``. Pressure metrics are taken as given. Samples of all
nodes are replayed in time order against one simulated Eviction API, so budgets spanning
nodes behave as live.

A pod figure marked ``capped`` (a capture of a pod throttled when measured) is a lower
bound of its demand: the replay takes it as the demand, and the tick reports it
(``capped``: pod -> the cap recorded beside it), so a reader knows where the replay's
usage may be below what the pod would have used without that cap. Such a figure already
went through the recorded cap: the replay lowers it only for a cap tighter than that one
(by more than ``SAME_CAP``), so a kernel figure a little above its cap (the measuring
window is not the CFS period) is not read as demand the replay's equal cap takes away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agent.errors import InvalidObject
from agent.model.objects import Node, Pod
from agent.model.policy import PolicySet, load_policies
from agent.model.registry import BY_NAME, CPU, MEMORY
from agent.model.settings import AgentSettings, parse_agent_settings
from agent.model.usage import NodeSample, PodUsage
from agent.node.tick import NodeBrain
from agent.scenario import Scenario
from agent.simulate.actuators import (
    SimulatedBatchLimiter,
    SimulatedEvictionAPI,
    SimulatedIsolator,
    SimulatedNodeStatus,
    SimulatedThrottler,
)
from engine.cpu_classes import classes_in_force

#: Caps within this many cores of each other are the same cap (quotas are whole us).
SAME_CAP = 1e-3


def strict_policies(scenario: Scenario) -> PolicySet:
    """Policies and actions of a scenario; the first invalid one is an error."""
    # Not strict here: the scenario loader (or --policies' reader) has already refused a
    # field the CRDs do not know.
    policies = load_policies(scenario.store.raw.get("NodeQOSEnsurancePolicy", []),
                             scenario.store.raw.get("AvoidanceAction", []))
    if policies.errors:
        raise policies.errors[0]
    return policies


def _validate_samples(scenario: Scenario) -> None:
    store = scenario.store
    on_node: dict[str, set[str]] = {}
    last_at: dict[str, float] = {}
    for i, sample in enumerate(scenario.samples):
        where = f"samples[{i}]"
        if sample.node not in store.nodes:
            raise InvalidObject("Scenario", scenario.name, f"{where}.node", f"unknown node {sample.node!r}")
        if sample.at < last_at.get(sample.node, float("-inf")):
            raise InvalidObject("Scenario", scenario.name, f"{where}.at",
                                f"goes back in time for node {sample.node}")
        last_at[sample.node] = sample.at
        for metric in sample.metrics:
            if metric not in BY_NAME:
                raise InvalidObject("Scenario", scenario.name, f"{where}.metrics.{metric}",
                                    f"unknown metric (known: {', '.join(BY_NAME)})")
        if sample.node not in on_node:
            on_node[sample.node] = {p.key for p in store.pods if p.node_name == sample.node}
        for key in sample.pods:
            if key not in on_node[sample.node]:
                raise InvalidObject("Scenario", scenario.name, f"{where}.pods.{key}",
                                    f"no such pod on node {sample.node}")


def _throttled_usage(demand: PodUsage, caps: Mapping[str, float]) -> PodUsage:
    """What a throttled pod uses: min(demand, cap), per container where known."""
    if demand.cpu is None:
        return demand
    if demand.containers and all(c in caps for c in demand.containers):
        containers = {
            name: replace(u, cpu=None if u.cpu is None else min(u.cpu, caps[name]))
            for name, u in demand.containers.items()
        }
        cpu = sum(u.cpu for u in containers.values() if u.cpu is not None)
        return replace(demand, cpu=cpu, containers=containers)
    cap = sum(caps.values())
    if demand.cpu <= cap:
        return demand
    scale = cap / demand.cpu if demand.cpu else 0.0
    containers = {n: replace(u, cpu=None if u.cpu is None else u.cpu * scale)
                  for n, u in demand.containers.items()}
    return replace(demand, cpu=cap, containers=containers)


class SimulatedNode:
    def __init__(self, node: Node, pods: list[Pod], settings: AgentSettings,
                 api: SimulatedEvictionAPI) -> None:
        self.node = node
        self.pods = pods
        self.by_key = {p.key: p for p in pods}
        self.api = api
        self.brain = NodeBrain(settings)
        self.throttler = SimulatedThrottler()
        self.isolator = SimulatedIsolator()
        self.status = SimulatedNodeStatus()
        self.limiter = SimulatedBatchLimiter()
        #: The CPU isolation classes some policy of the node names (report keys).
        self.classes: set[str] = set()
        self.last_known: dict[str, PodUsage] = {}
        self.evicted: list[str] = []
        self.ticks: list[dict[str, Any]] = []

    def effective(self, sample: NodeSample) -> tuple[dict[str, float], dict[str, PodUsage]]:
        for key, usage in sample.pods.items():
            self.last_known[key] = usage
        gone = set(self.evicted)
        cpu_drop = mem_drop = 0.0
        for key in gone:
            last = sample.pods.get(key) or self.last_known.get(key)
            if last is not None:
                cpu_drop += last.cpu or 0.0
                mem_drop += last.memory or 0.0
        pods: dict[str, PodUsage] = {}
        for key, usage in sample.pods.items():
            if key in gone:
                continue
            # a cap of the throttler is never above the batch limit it sits under
            caps = self.throttler.caps.get(key) or self.limiter.container_caps(key)
            recorded = sample.capped.get(key)
            if caps and recorded is not None and sum(caps.values()) >= recorded - SAME_CAP:
                caps = None  # measured under this cap or a tighter one: the figure stands
            if caps and usage.cpu is not None:
                used = _throttled_usage(usage, caps)
                cpu_drop += usage.cpu - (used.cpu or 0.0)
                usage = used
            cpu_drop -= self._lent(key, usage)
            pods[key] = usage
        metrics = dict(sample.metrics)
        alloc = self.node.allocatable
        for name, drop, resource in (("cpu_total_usage", cpu_drop, CPU), ("memory_total_usage", mem_drop, MEMORY)):
            if name in metrics:
                metrics[name] = max(0.0, metrics[name] - drop)
            util = name.replace("_usage", "_utilization")
            if util in metrics and alloc.get(resource):
                metrics[util] = max(0.0, metrics[util] - drop * 100.0 / alloc[resource])
        return metrics, pods

    def _lent(self, key: str, usage: PodUsage) -> float:
        """The CPU a pod with a raised quota gets above what its limit would give it."""
        percent = self.isolator.quota.get(key)
        pod = self.by_key.get(key)
        limit = pod.limits.get(CPU) if pod is not None else None
        if percent is None or limit is None or usage.cpu is None:
            return 0.0
        return max(0.0, min(usage.cpu, limit * (1.0 + percent / 100.0)) - min(usage.cpu, limit))

    def tick(self, sample: NodeSample, policies: PolicySet, scenario: Scenario) -> None:
        metrics, usage = self.effective(sample)
        gone = set(self.evicted)
        report = self.brain.tick(
            now=sample.at,
            node=self.node,
            pods=[p for p in self.pods if p.key not in gone],
            metrics=metrics,
            usage=usage,
            policies=policies,
            namespace_labels=scenario.store.namespace_labels,
            evictor=self.api,
            throttler=self.throttler,
            isolator=self.isolator,
            actuators=(self.status, self.limiter),
        )
        self.classes.update(classes_in_force(policies.isolation_for_node(self.node.labels)))
        for record in report.actions:
            if record.action == "evict" and record.result == "evicted" and not record.preview:
                self.evicted.append(record.pod)
        tick = report.to_report(origin=scenario.now)
        capped = {k: v for k, v in sorted(sample.capped.items()) if k not in gone}
        if capped:
            tick["capped"] = capped
        self.ticks.append(tick)

    def report(self) -> dict[str, Any]:
        """The node's ticks and outcome; ``idle`` and ``burst`` (the pods in each class
        after the last tick, sorted) only where a policy of the node names the class;
        ``batchCapacity`` only where the node publishes one."""
        out: dict[str, Any] = {
            "ticks": self.ticks,
            "evicted": list(self.evicted),
            "throttled": {k: round(v, 6) for k, v in sorted(self.brain.caps_and_limits().items())},
        }
        for kind, pods in self.brain.isolated().items():
            if kind in self.classes or pods:
                out[kind] = pods
        published = self.brain.batch_capacity()
        if published is not None:
            out["batchCapacity"] = published.to_report()
        return out


def simulate_nodes(scenario: Scenario) -> dict[str, Any] | None:
    settings = parse_agent_settings(scenario.config_section("agent"))
    policies = strict_policies(scenario)
    if not scenario.samples:
        return None
    _validate_samples(scenario)
    store = scenario.store
    api = SimulatedEvictionAPI(store.pods, store.pdbs)
    by_node = store.pods_by_node()
    nodes: dict[str, SimulatedNode] = {}
    order = sorted(range(len(scenario.samples)), key=lambda i: (scenario.samples[i].at, i))
    for i in order:
        sample = scenario.samples[i]
        sim = nodes.get(sample.node)
        if sim is None:
            sim = nodes[sample.node] = SimulatedNode(
                store.nodes[sample.node], by_node.get(sample.node, []), settings, api)
        sim.tick(sample, policies, scenario)
    return {name: nodes[name].report() for name in sorted(nodes)}
