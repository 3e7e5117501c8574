"""Decision time per tick for a node of 250 pods x 3 containers and 10 rules.

Goal (issue 2): under 5 ms per tick on the 2-core development machine. Prints the median
and 95th percentile over several hundred ticks of a hot node (every rule triggered, so
the executor sorts and acts on every tick).
"""

from __future__ import annotations

import random
import statistics
import time

from agent.model.objects import parse_node, parse_pod
from agent.model.policy import load_policies
from agent.model.usage import ContainerUsage, PodUsage
from agent.node.tick import NodeBrain
from agent.simulate.actuators import SimulatedEvictionAPI, SimulatedThrottler

PODS = 250
CONTAINERS = 3
TICKS = 400


def _world(seed: int = 7):
    rng = random.Random(seed)
    node = parse_node({"kind": "Node", "metadata": {"name": "n1", "labels": {"pool": "batch"}},
                       "status": {"allocatable": {"cpu": "96", "memory": "384Gi", "pods": "300"}}})
    pods, usage = [], {}
    qos_requests = [{}, {"cpu": "100m"}, {"cpu": "1", "memory": "1Gi"}]
    for i in range(PODS):
        kind = i % 3
        resources = {"requests": qos_requests[kind]} if qos_requests[kind] else {}
        if kind == 2:
            resources["limits"] = dict(qos_requests[kind])
        raw = {
            "kind": "Pod",
            "metadata": {"name": f"p{i:03d}", "namespace": f"ns{i % 7}", "uid": f"u{i}",
                         "creationTimestamp": "2025-12-31T00:00:00Z",
                         "ownerReferences": [{"kind": "ReplicaSet", "name": f"rs{i % 20}", "uid": f"rs{i % 20}",
                                              "controller": True}]},
            "spec": {"nodeName": "n1", "priority": rng.randint(0, 1000),
                     "containers": [{"name": f"c{c}", "resources": resources} for c in range(CONTAINERS)]},
            "status": {"phase": "Running", "startTime": f"2025-12-31T{rng.randint(0, 23):02d}:00:00Z"},
        }
        pod = parse_pod(raw)
        pods.append(pod)
        containers = {f"c{c}": ContainerUsage(cpu=rng.uniform(0.0, 0.2), memory=rng.uniform(1e7, 5e8))
                      for c in range(CONTAINERS)}
        usage[pod.key] = PodUsage(cpu=sum(c.cpu or 0 for c in containers.values()),
                                  memory=sum(c.memory or 0 for c in containers.values()),
                                  containers=containers)
    actions = [
        {"kind": "AvoidanceAction", "metadata": {"name": "throttle"},
         "spec": {"throttle": {"cpuThrottle": {"minCPURatio": 5, "stepCPURatio": 10}}}},
        {"kind": "AvoidanceAction", "metadata": {"name": "evict"},
         "spec": {"coolDownSeconds": 0, "eviction": {}}},
    ]
    rules = []
    for r in range(10):
        metric, value, act = [
            ("cpu_total_usage", f"{60 + r}", "throttle"),
            ("cpu_total_utilization", f"{70 + r}", "throttle"),
            ("memory_total_usage", f"{300 + r}Gi", "evict"),
            ("cpu_pressure", f"{40 + r}", "throttle"),
            ("memory_total_utilization", f"{90 + r}", "evict"),
        ][r % 5]
        rules.append({"name": f"r{r}", "metricRule": {"name": metric, "value": value}, "actionName": act})
    policies = load_policies(
        [{"kind": "NodeQOSEnsurancePolicy", "metadata": {"name": "bench"}, "spec": {"objectiveEnsurances": rules}}],
        actions)
    return node, pods, usage, policies


def main() -> None:
    node, pods, usage, policies = _world()
    cpu = sum(u.cpu or 0 for u in usage.values())
    metrics = {"cpu_total_usage": 80.0, "memory_total_usage": 350 * 2**30, "cpu_pressure": 60.0}
    durations = []
    for tick in range(TICKS):
        brain = NodeBrain()  # fresh state: every tick finds the node hot and acts
        api = SimulatedEvictionAPI(pods, [])
        throttler = SimulatedThrottler()
        start = time.perf_counter()
        report = brain.tick(now=1e9 + tick, node=node, pods=pods, metrics=metrics, usage=usage,
                            policies=policies, namespace_labels=lambda ns: {}, evictor=api,
                            throttler=throttler)
        durations.append(time.perf_counter() - start)
    durations.sort()
    print(f"pods={len(pods)} containers/pod={CONTAINERS} rules=10 pod-cpu-sum={cpu:.1f} "
          f"actions/tick={len(report.actions)}")
    print(f"decision time per tick: median {statistics.median(durations) * 1e3:.2f} ms, "
          f"p95 {durations[int(0.95 * len(durations))] * 1e3:.2f} ms (goal < 5 ms)")


if __name__ == "__main__":
    main()
