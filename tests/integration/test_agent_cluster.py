"""The agent's in-cluster path end to end, on the real cluster (devtools/harness/cluster.py) with the
agent's own ServiceAccount token: watches of the real kube-apiserver, evictions through
its Eviction API with budgets computed by the real disruption controller, replacements
made by the real ReplicaSet controller, Events, and the node's interference taint written
through the agent's token past the admission policy of deploy/admission.yaml.

The first test runs a real busy process in real cgroups v1; the others a fake cgroup tree
(devtools/harness/agent_env.Load) whose CPU counters the test advances, so the load is
exact. Pods are made by ReplicaSets, scheduled by the scheduler and run by kwok; their
cgroups are built from their real uids once they exist.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.defaults import CGROUP_ROOT
from agent.kube.errors import KubeNotFound
from agent.kube.resources import PDBS, PODS
from agent.node.incluster import ClusterEffects
from agent.node.lifecycle import Agent
from devtools.demo.cgroups import CgroupTree
from devtools.harness.agent_env import (
    OTHER,
    OURS,
    TOLERATE_OTHER,
    Load,
    Pool,
    actions,
    demo_pod,
    key_of,
    name_of,
    running_agent,
    tick_until,
)
from devtools.harness.cluster import RealCluster
from devtools.harness.faultproxy import Fault
from devtools.harness.waiting import wait_until

pytestmark = pytest.mark.integration


def test_in_cluster_agent_evicts_through_the_api(
    kube: RealCluster, pool: Pool, tree: CgroupTree, tmp_path: Path
) -> None:
    node = pool.node()
    (pod,) = pool.running(pool.replicaset("batch", node=node), 1)
    batch = demo_pod(pod)
    tree.add_pod(batch)
    tree.start(batch)
    pool.policy(pool.action({"coolDownSeconds": 0,
                             "eviction": {"terminationGracePeriodSeconds": 1}}), value="0.02")  # fmt: skip
    kubeconfig = kube.agent_kubeconfig(node)
    extra = ("--cgroup-root", CGROUP_ROOT, "--kubelet-cgroup-root", tree.kubelet_root,
             "--metrics-addr", "127.0.0.1:0")  # fmt: skip
    with running_agent(kubeconfig, tmp_path, node, *extra) as agent:
        assert agent.server is not None
        agent.server.start()
        try:
            seen = tick_until(agent, None, {}, lambda s: bool(actions(s)))
            url = f"http://127.0.0.1:{agent.server.port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        finally:
            agent.server.stop()
    assert actions(seen) == [("evict", key_of(pod), "evicted")]
    wait_until(lambda: _gone(pool, name_of(pod)), 30)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("waterline_actions_total", (("action", "evict"), ("result", "evicted")))] == 1.0


def _gone(pool: Pool, name: str) -> bool:
    try:
        pool.api.request("GET", PODS.path(pool.namespace, name))
    except KubeNotFound:
        return True
    return False


def _pdb_settled(pool: Pool, name: str) -> dict:
    """The budget once the disruption controller has computed its status."""
    seen: list[dict] = []

    def settled() -> bool:
        pdb = pool.api.request("GET", PDBS.path(pool.namespace, name))
        status = pdb.get("status") or {}
        seen[:] = [status]
        return status.get("observedGeneration") == pdb["metadata"]["generation"] and "currentHealthy" in status

    wait_until(settled, 60)
    return seen[0]


def test_a_budget_blocks_one_pod_the_next_is_evicted_and_replaced_with_events(
    kube: RealCluster, pool: Pool, tmp_path: Path
) -> None:
    """The PDB's 429 from the real Eviction API (its status computed by the disruption
    controller) skips that pod; the next candidate is evicted through the subresource,
    never deleted; the ReplicaSet controller replaces it; the agent's Events are on the
    pods and its node; the taint a previous agent left is lifted, somebody else's stays."""
    node = pool.node(taints=[OTHER, OURS])  # OURS left behind by an earlier run
    elsewhere = pool.node()
    hog_rs = pool.replicaset("hog", node=node, tolerations=[TOLERATE_OTHER])
    guarded_rs = pool.replicaset("guarded", node=node, tolerations=[TOLERATE_OTHER])
    pool.replicaset("elsewhere", node=elsewhere)
    (hog,), (guarded,) = pool.running(hog_rs, 1), pool.running(guarded_rs, 1)
    pool.running("elsewhere", 1)
    pool.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                       "metadata": {"name": "guarded", "namespace": pool.namespace},
                       "spec": {"selector": {"matchLabels": {"app": "guarded"}},
                                "maxUnavailable": 0}})  # fmt: skip
    budget = _pdb_settled(pool, "guarded")
    assert budget["disruptionsAllowed"] == 0 and budget["currentHealthy"] == 1, budget
    load = Load(tmp_path / "cg", [hog, guarded])
    busy = {name_of(hog): 5, name_of(guarded): 10}  # guarded is the first candidate
    with kube.proxy() as proxy, running_agent(kube.agent_kubeconfig(node, proxy.url), tmp_path, node) as agent:
        # Its node's pods only; no policy yet, so nothing happens; the leftover taint
        # goes (a fresh agent has no triggered rule), the other taint stays.
        first = tick_until(agent, load, busy, lambda s: len(s) >= 3 and s[-1].ok)
        mine = sorted(p.key for p in first[-1].pods if p.namespace == pool.namespace)
        assert mine == sorted([key_of(hog), key_of(guarded)])
        assert actions(first) == []
        tick_until(agent, load, {}, lambda s: OURS not in pool.taints(node), timeout=30)
        assert OTHER in pool.taints(node)

        # A policy created after the start is picked up; the budget blocks one pod,
        # the other is evicted through the subresource.
        evict = pool.action({"coolDownSeconds": 0, "eviction": {"terminationGracePeriodSeconds": 1},
                             "scope": {"qosClasses": ["BestEffort"]}})  # fmt: skip
        guard = pool.policy(evict)
        broken = pool.policy("no-such-action")
        done = tick_until(agent, load, busy,
                          lambda s: ("evict", key_of(hog), "evicted") in actions(s))  # fmt: skip
    got = actions(done)
    assert got.index(("evict", key_of(guarded), "blocked-by-pdb")) < got.index(
        ("evict", key_of(hog), "evicted")
    )
    answers = {(s.path.split("/")[-2], s.status) for s in proxy.seen("POST", "/eviction")}
    assert (name_of(guarded), 429) in answers and (name_of(hog), 201) in answers, answers
    assert not [s for s in proxy.requests if s.method == "DELETE"]  # evicted, never deleted
    wait_until(lambda: _gone(pool, name_of(hog)), 30)
    assert pool.api.request("GET", PODS.path(pool.namespace, name_of(guarded)))
    # The ReplicaSet controller makes the replacement; the scheduler puts it on the node.
    (replacement,) = pool.running(hog_rs, 1)
    assert replacement["metadata"]["uid"] != hog["metadata"]["uid"]
    assert replacement["spec"]["nodeName"] == node

    pod_events = pool.events([name_of(hog), name_of(guarded)])
    assert {(n, r) for n, r, _ in pod_events} == {
        (name_of(hog), "Evicted"),
        (name_of(guarded), "EvictionBlocked"),
    }
    evicted = next(m for n, r, m in pod_events if r == "Evicted")
    assert f"rule {guard}/cpu (action {evict}): cpu_total_usage" in evicted
    blocked = next(m for n, r, m in pod_events if r == "EvictionBlocked")
    print(f"\nthe real server's refusal, as the agent recorded it: {blocked}")
    node_events = pool.events([node, guard, broken], namespace="default")
    assert (node, "RuleTriggered") in {(n, r) for n, r, _ in node_events}
    # Invalid policies are only logged by agents (their Events are the controller's).
    assert not any(r == "InvalidPolicy" for _, r, _ in node_events)


def test_agent_taints_keeps_throttling_while_the_server_is_unreachable_and_catches_up(
    kube: RealCluster, pool: Pool, tmp_path: Path
) -> None:
    """The taint goes on and off through the agent's own token, past the admission
    policy; while every request fails at the proxy (hung up on), the agent throttles and
    restores on the last known policies; back in reach, it catches up by itself."""
    node = pool.node()
    batch_rs = pool.replicaset("batch", replicas=2, node=node)
    a, b = pool.running(batch_rs, 2)
    load = Load(tmp_path / "cg", [a, b])
    throttle = pool.action({
        "coolDownSeconds": 1, "disableScheduling": True,
        "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 100}},
        "scope": {"qosClasses": ["BestEffort"]},
    })  # fmt: skip
    pool.policy(throttle)
    config = tmp_path / "waterline.yaml"
    config.write_text("agent:\n  executeExcessPercent: 10\n")
    with kube.proxy() as proxy:
        kubeconfig = kube.agent_kubeconfig(node, proxy.url)
        with running_agent(kubeconfig, tmp_path, node, "--config", str(config)) as agent:
            try:
                assert agent.loop.brain.settings.execute_excess_percent == 10
                # Up: a busy -> throttled to 10% of the node's 2 cores, node tainted.
                tick_until(agent, load, {name_of(a): 5},
                           lambda s: ("throttle", key_of(a), None) in actions(s))  # fmt: skip
                assert load.quota(name_of(a)) == 20000  # 0.2 cores of a 100 ms period
                tick_until(agent, load, {name_of(a): 5}, lambda s: OURS in pool.taints(node))
                patches = proxy.seen("PATCH", f"/api/v1/nodes/{node}")
                assert patches and all(p.status == 200 for p in patches), patches
                assert (name_of(a), "Throttled") in {(n, r) for n, r, _ in pool.events([name_of(a)])}

                # Unreachable: every request is hung up on; the agent keeps ticking on the
                # last known policies.
                proxy.inject(Fault("", method="", hangup=True, times=10**9))
                proxy.drop_watches()
                view_down = tick_until(agent, load, {name_of(a): 5},
                                       lambda s: not _reachable(agent))  # fmt: skip
                assert view_down[-1].ok
                down = tick_until(agent, load, {name_of(a): 5, name_of(b): 5},
                                  lambda s: ("throttle", key_of(b), None) in actions(s))  # fmt: skip
                assert all(o.ok for o in down)
                assert load.quota(name_of(b)) == 20000
                # Idle: the rule restores and the caps are lifted, all while out of reach.
                idle = tick_until(agent, load, {name_of(a): 0, name_of(b): 0},
                                  lambda s: not agent.loop.brain.caps())  # fmt: skip
                assert {p for act, p, _ in actions(idle) if act == "restore"} == {key_of(a), key_of(b)}
                assert load.quota(name_of(a)) == -1 and load.quota(name_of(b)) == -1
                # Meanwhile a third pod lands on the node (the ReplicaSet grows).
                kube.kubectl("-n", pool.namespace, "scale", "rs", batch_rs, "--replicas=3")
                late = next(p for p in pool.running(batch_rs, 3) if name_of(p) not in (name_of(a), name_of(b)))
                load.add(late)

                # Back in reach: the agent catches up by itself.
                proxy.clear()
                back = tick_until(agent, load, {},
                                  lambda s: key_of(late) in {p.key for p in s[-1].pods}
                                  and OURS not in pool.taints(node))  # fmt: skip
                assert back[-1].ok
                rules = {(n, r) for n, r, _ in pool.events([node], namespace="default")}
                assert (node, "RuleRestored") in rules
                # Events for what happened during the outage were dropped, not replayed.
                assert (name_of(b), "Throttled") not in {(n, r) for n, r, _ in pool.events([name_of(b)])}
            finally:
                agent.restore_all("test end")


def _reachable(agent: Agent) -> bool:
    effects = next(p for p in agent.loop.publishers if isinstance(p, ClusterEffects))
    return bool(effects.reachable())

