"""Restarts resume (executors.adoption, agent.node.resume), the objects saved for a start
without the API (agent.node.saved), the tick's API budget (agent.kube.budget) and the
brake ConfigMap's reading (agent.kube.nodeview)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.kube.budget import BudgetedApi, TickBudget
from agent.kube.client import KubeApi
from agent.kube.errors import KubeTooManyRequests, KubeUnreachable, from_status, retry_after_header
from agent.kube.nodeview import brake_reason
from agent.model.analysis import RESTORED, TRIGGERED, RuleTracker
from agent.model.objects import BURSTABLE, Container, Pod, parse_node, parse_pod
from agent.model.policy import load_policies
from agent.model.usage import PodUsage
from agent.node.loop import Objects
from agent.node.resume import Resume
from agent.node.saved import SavedObjects, build_objects
from agent.node.tick import NodeBrain
from agent.simulate.actuators import SimulatedEvictionAPI, SimulatedThrottler
from devtools.harness.fake_cgroups import FakeTree
from engine.state import NodeState
from executors.adoption import HeldCap, adopt, held_caps
from executors.cgroup_throttle import CgroupThrottler, spec_quota
from executors.quota_state import ContainerQuota, QuotaState, ThrottledPod
from tests.builders import NOW, action, node, pod, policy, rule

NODE = parse_node(node("n1", cpu="8"))
LIMITED = parse_pod(pod("lim", limits={"cpu": "2"}, requests={"cpu": "100m"}))
FREE = parse_pod(pod("free"))


def cap(p: Pod, cores: float | None, action_name: str = "t", rule_key: str = "p/r") -> HeldCap:
    return HeldCap(p.uid, p.namespace, p.name, cores, action_name, rule_key)


def test_adopted_caps_stay_and_their_rules_start_triggered() -> None:
    state = NodeState(trackers={"p/other": RuleTracker(RESTORED)})
    gone = HeldCap("uid-gone", "default", "gone", 0.5, "t", "p/r")
    result = adopt(state, [cap(LIMITED, 0.5), cap(FREE, 1.0, rule_key="p/other"), gone,
                           cap(FREE, None), cap(LIMITED, 2.0)], [LIMITED, FREE], NODE)  # fmt: skip
    assert result.adopted == ["default/lim", "default/free"]
    # gone, no cap recorded, a cap at its ceiling: handed back at once
    assert [c.name for c in result.released] == ["gone", "free", "lim"]
    assert state.throttled["default/lim"].cap == 0.5
    assert state.throttled["default/lim"].ceiling == 2.0  # its limit
    assert state.throttled["default/free"].ceiling == 8.0  # the node's cores
    assert state.trackers["p/r"].status == TRIGGERED
    assert state.trackers["p/other"].status == RESTORED  # a known state is kept


def test_a_resumed_node_hands_adopted_caps_back_when_cool_and_keeps_them_when_hot() -> None:
    pols = load_policies([policy("p", [rule("r", "cpu_total_usage", "6", "t", restoreThreshold=2)])],
                         [action("t", throttle={"stepCPURatio": 25})])  # fmt: skip

    def tick(brain: NodeBrain, cpu: float, throttler: SimulatedThrottler) -> list[Any]:
        report = brain.tick(now=NOW, node=NODE, pods=[LIMITED], metrics={"cpu_total_usage": cpu},
                            usage={LIMITED.key: PodUsage(cpu=0.5)}, policies=pols,
                            namespace_labels=lambda ns: {}, evictor=SimulatedEvictionAPI([], []),
                            throttler=throttler)  # fmt: skip
        return [(a.action, a.cpu_cap) for a in report.actions]

    hot, cool = NodeBrain(), NodeBrain()
    for brain in (hot, cool):
        adopt(brain.state, [cap(LIMITED, 0.5)], [LIMITED], NODE)
    throttler = SimulatedThrottler()
    hot_steps = [tick(hot, 7.0, throttler) for _ in range(3)]
    assert not [a for step in hot_steps for a in step if a[0] == "restore"], hot_steps
    assert hot.caps()[LIMITED.key] <= 0.5  # kept (or lowered further: the gap is open)
    steps = [tick(cool, 1.0, throttler) for _ in range(6)]
    # restoreThreshold 2 cool samples, then +25% of the 2-core limit a tick, then the original
    assert steps == [[], [("restore", 1.0)], [("restore", 1.5)], [("restore", None)], [], []]
    assert cool.caps() == {}


def test_held_caps_read_the_owner_tag() -> None:
    pods = {"u": ThrottledPod("u", "ns", "a", {"c1": ContainerQuota("x", 1, "-1", 0.2),
                                                "c2": ContainerQuota("y", 1, "-1", 0.3)},
                              "throttle guard/cpu-high")}  # fmt: skip
    [held] = held_caps(pods)
    assert (held.cap, held.action, held.rule, held.key) == (pytest.approx(0.5), "throttle", "guard/cpu-high", "ns/a")


def test_an_unreadable_state_file_rebuilds_quotas_from_the_specs(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 1)
    rel = "kubepods/burstable/podu-1"
    tree.add(rel)
    tree.add(f"{rel}/c1", quota="20000")  # capped by a run whose state was lost
    tree.add(f"{rel}/c2", quota="5000")
    state = tmp_path / "state"
    state.mkdir()
    (state / "cpu-quota.json").write_text("{not json")
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(state)))
    assert throttler.state_unreadable
    assert [p.name for p in state.iterdir() if ".corrupt-" in p.name]
    pod_ = Pod("default", "web", "u-1", qos_class=BURSTABLE, containers=(
        Container("a", container_id="containerd://c1"),
        Container("b", limits={"cpu": 0.5}, container_id="containerd://c2")))  # fmt: skip
    objects = Objects(NODE, (pod_,), load_policies([], []))
    Resume(NodeBrain(), throttler)(objects)
    assert tree.quota(f"{rel}/c1") == "-1"  # no limit: unlimited
    assert tree.quota(f"{rel}/c2") == "50000"  # its 500m limit
    assert spec_quota(2, None, 100000) == "max 100000" and spec_quota(2, 0.25, 50000) == "12500 50000"


def test_saved_objects_round_trip(tmp_path: Path) -> None:
    manifests = [node("n1"), pod("a"), pod("elsewhere", node_name="n2"),
                 policy("p", [rule("r", "cpu_total_usage", "6", "t")]), action("t", throttle={}),
                 {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "default", "labels": {"x": "y"}}}]  # fmt: skip
    saved = SavedObjects(str(tmp_path), "n1", min_interval=60, clock=lambda: 0.0)
    assert saved.save_if_due(lambda: manifests)
    assert not saved.save_if_due(lambda: [])  # not due yet: the file keeps the first
    doc = json.loads((tmp_path / "objects.json").read_text())
    assert doc["node"] == "n1" and len(doc["objects"]) == len(manifests)
    objects = SavedObjects(str(tmp_path), "n1").objects()
    assert objects is not None and objects.origin == "saved"
    assert [p.key for p in objects.pods] == ["default/a"]
    assert [p.name for p in objects.policies.policies] == ["p"]
    assert objects.namespace_labels("default")["x"] == "y"
    assert SavedObjects(str(tmp_path), "another-node").objects() is None
    assert build_objects([pod("a")], "n1") is None  # no node, nothing to act on


@pytest.mark.parametrize(("change", "said"), [
    ({"savedAt": "yesterday"}, "saved at an unknown time"),
    ({"savedAt": None}, "saved at an unknown time"),
    ({"node": "n2"}, "saved on node 'n2', this is 'n1'"),
    ({"version": 99}, "format version 99, this agent reads 1"),
])
def test_a_saved_file_that_is_not_quite_right_is_said_so_and_never_crashes(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    SavedObjects(str(tmp_path), "n1").save(lambda: [node("n1"), pod("a")])
    path = tmp_path / "objects.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    logged: list[str] = []

    class Log:
        def warning(self, event: str, **fields: Any) -> None:
            logged.append(" ".join([event, *map(str, fields.values())]))

    objects = SavedObjects(str(tmp_path), "n1", logger=Log()).objects()
    assert (objects is not None) == ("savedAt" in change)  # an unknown age is still usable
    assert any(said in line for line in logged), logged


class _NoCalls(KubeApi):
    def __init__(self) -> None:
        self.api_client = None  # never used: the budget refuses first
        from agent.kube.client import ClientArgs

        self.args = ClientArgs()
        self.timeouts: list[Any] = []

    def _call(self, method: str, path: str, query: Any, body: Any, content_type: str, timeout: Any) -> Any:
        self.timeouts.append(timeout)
        raise KubeUnreachable("test: no server")


def test_the_tick_budget_bounds_every_request_and_refuses_once_spent() -> None:
    now = [100.0]
    budget = TickBudget(lambda: 5.0, clock=lambda: now[0])
    raw = _NoCalls()
    api = BudgetedApi(raw, budget)
    api._call = raw._call  # type: ignore[method-assign]
    budget.start()
    now[0] += 3.0
    with pytest.raises(KubeUnreachable):
        api.request("POST", "/x")
    assert raw.timeouts == [(2.0, 2.0)]  # what is left of the 5 s, not 30 s
    now[0] += 2.0
    with pytest.raises(KubeUnreachable, match="budget is spent"):
        api.request("POST", "/x")
    assert len(raw.timeouts) == 1  # not sent


def test_retry_after_from_the_header_or_the_status_details() -> None:
    assert retry_after_header({"Content-Type": "x", "Retry-After": "7"}) == 7.0
    assert retry_after_header({"retry-after": "soon"}) is None
    body = json.dumps({"kind": "Status", "code": 429, "message": "slow down",
                       "details": {"retryAfterSeconds": 3}})  # fmt: skip
    err = from_status(429, body)
    assert isinstance(err, KubeTooManyRequests) and err.transient and err.retry_after == 3.0
    assert from_status(500, body, retry_after=9.0).retry_after == 9.0  # the header wins


def test_brake_reason() -> None:
    assert brake_reason(None) is None
    assert brake_reason({"data": {"evictionsPaused": "false"}}) is None
    assert brake_reason({"data": {"evictionsPaused": "true", "reason": "120 evictions in 60 s"}}) == (
        "120 evictions in 60 s"
    )
    assert brake_reason({"data": {"evictionsPaused": "true"}}) == "the cluster brake is set"


def test_release_with_no_state_file_says_so(tmp_path) -> None:
    """`waterline agent release` with a --state-dir that holds no state file (a typo, or
    an agent that never throttled) releases nothing and says where it looked."""
    import argparse

    from structlog.testing import capture_logs

    from agent.node.arguments import add_arguments
    from agent.node.release import release
    from devtools.harness.fake_cgroups import FakeTree

    FakeTree(tmp_path / "cg", 1)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["release", "--cgroup-root", str(tmp_path / "cg"),
                              "--state-dir", str(tmp_path / "no-such-dir")])  # fmt: skip
    with capture_logs() as logs:
        assert release(args) == 0
    assert [e for e in logs if e.get("code") == "no-state-file"], logs
    assert not (tmp_path / "no-such-dir").exists()  # nothing made by a release


def _capped(tmp_path: Path) -> tuple[FakeTree, CgroupThrottler, Pod]:
    """A pod capped by an earlier run: quota 20000 (0.2 cores), original unlimited."""
    tree = FakeTree(tmp_path / "cg", 1)
    rel = "kubepods/besteffort/podu-1"
    tree.add(rel)
    tree.add(f"{rel}/c1", quota="20000")
    state = QuotaState(str(tmp_path / "state"))
    state.put(ThrottledPod("u-1", "default", "batch", {"a": ContainerQuota(f"{rel}/c1", 1, "-1", 0.2)},
                           "t p/r"))  # fmt: skip
    pod_ = Pod("default", "batch", "u-1", containers=(Container("a", container_id="containerd://c1"),))
    return tree, CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state"))), pod_


def test_a_start_on_saved_objects_leaves_the_caps_of_pods_they_do_not_show(tmp_path: Path) -> None:
    """The saved copy may be older than the pod (a restart on a real node handed both caps
    of tests/e2e back at once): its cap stays until the API server's objects say."""
    tree, throttler, pod_ = _capped(tmp_path)
    brain = NodeBrain()
    resume = Resume(brain, throttler)
    assert resume(Objects(NODE, (), load_policies([], []), origin="saved")) is False  # call again
    assert tree.quota("kubepods/besteffort/podu-1/c1") == "20000"
    assert brain.state.throttled == {}
    assert resume(Objects(NODE, (pod_,), load_policies([], []))) is True  # live: there, adopted
    assert brain.caps() == {"default/batch": pytest.approx(0.2)}
    assert tree.quota("kubepods/besteffort/podu-1/c1") == "20000"


def test_a_start_on_saved_objects_adopts_what_they_show(tmp_path: Path) -> None:
    tree, throttler, pod_ = _capped(tmp_path)
    brain = NodeBrain()
    assert Resume(brain, throttler)(Objects(NODE, (pod_,), load_policies([], []), origin="saved")) is True
    assert brain.caps() == {"default/batch": pytest.approx(0.2)}


def test_the_api_servers_objects_hand_back_the_caps_of_pods_gone(tmp_path: Path) -> None:
    tree, throttler, _pod = _capped(tmp_path)
    assert Resume(NodeBrain(), throttler)(Objects(NODE, (), load_policies([], []))) is True
    assert tree.quota("kubepods/besteffort/podu-1/c1") == "-1"
    assert throttler.throttled_pods() == {}


class _View:
    """What view_source reads of a NodeView: one node, its version bumped by changes."""

    def __init__(self) -> None:
        self.synced, self.version, self.pod_names = True, 1, ["a"]

    def node(self) -> Any:
        return NODE

    def pods(self) -> list[Pod]:
        return [parse_pod(pod(n)) for n in self.pod_names]

    def policies(self) -> list[Any]:
        return []

    actions = policies

    def namespaces(self) -> dict[str, Any]:
        return {}

    def invalid(self) -> dict[str, Any]:
        return {}

    def brake(self) -> None:
        return None

    def manifests(self) -> list[Any]:
        return [node("n1"), *(pod(n) for n in self.pod_names)]


def test_a_change_within_the_save_interval_is_saved_when_it_is_over(tmp_path: Path) -> None:
    from agent.node.incluster import view_source

    now = [0.0]
    view = _View()
    saved = SavedObjects(str(tmp_path), "n1", min_interval=60, clock=lambda: now[0])
    source = view_source(view, saved)  # type: ignore[arg-type]

    def pods_in_file() -> list[str]:
        doc = json.loads((tmp_path / "objects.json").read_text())
        return [o["metadata"]["name"] for o in doc["objects"] if o["kind"] == "Pod"]

    source()
    assert pods_in_file() == ["a"]
    now[0], view.version, view.pod_names = 10.0, 2, ["a", "b"]  # a pod made 10 s later
    source()
    assert pods_in_file() == ["a"]  # not due yet
    now[0] = 61.0
    source()  # nothing changed since, but the change was never saved
    assert pods_in_file() == ["a", "b"]
