import pytest

from agent.errors import InvalidObject
from agent.model.objects import disruptions_allowed, parse_node, parse_pdb, parse_pod
from agent.model.store import ObjectStore
from tests.builders import node, pod


def test_qos_class_is_derived_when_absent():
    assert parse_pod(pod("be")).qos_class == "BestEffort"
    assert parse_pod(pod("bu", requests={"cpu": "1"})).qos_class == "Burstable"
    assert parse_pod(pod("g", limits={"cpu": "1", "memory": "1Gi"})).qos_class == "Guaranteed"
    assert parse_pod(pod("x", requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"})).qos_class == "Burstable"
    assert parse_pod(pod("given", qos="Guaranteed")).qos_class == "Guaranteed"


def test_pod_request_is_max_of_sum_and_largest_init_plus_overhead():
    raw = pod("p", containers=[
        {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"name": "b", "resources": {"limits": {"cpu": "1"}}},  # only a limit: requests its limit
    ])
    raw["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}]
    raw["spec"]["overhead"] = {"cpu": "100m"}
    parsed = parse_pod(raw)
    assert parsed.requests["cpu"] == pytest.approx(2.1)
    assert parsed.requests["memory"] == pytest.approx(2**30)
    # a pod has a CPU limit only if every container has one
    assert "cpu" not in parsed.limits


def test_pod_limit_sums_when_every_container_has_one():
    parsed = parse_pod(pod("p", containers=[
        {"name": "a", "resources": {"limits": {"cpu": "1"}}},
        {"name": "b", "resources": {"limits": {"cpu": "500m"}}},
    ]))
    assert parsed.limits["cpu"] == pytest.approx(1.5)


def test_container_ids_come_from_status():
    raw = pod("p")
    raw["status"]["containerStatuses"] = [{"name": "main", "containerID": "containerd://abc"}]
    assert parse_pod(raw).containers[0].container_id == "containerd://abc"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r["spec"]["containers"][0]["resources"].update({"requests": {"cpu": "lots"}}),
         "spec.containers[0].resources.requests.cpu"),
        (lambda r: r["spec"].update({"priority": "high"}), "spec.priority"),
        (lambda r: r["status"].update({"qosClass": "Gold"}), "status.qosClass"),
        (lambda r: r["spec"].update({"preemptionPolicy": "Sometimes"}), "spec.preemptionPolicy"),
        (lambda r: r["metadata"].update({"creationTimestamp": "yesterday"}), ""),
    ],
)
def test_bad_pods_name_the_pod_and_field(mutate, field):
    raw = pod("p")
    mutate(raw)
    with pytest.raises(InvalidObject) as err:
        parse_pod(raw)
    assert err.value.name == "default/p"
    assert field in str(err.value)


def test_preemption_policy_defaults_as_the_api_server_does():
    assert parse_pod(pod("p")).preemption_policy == "PreemptLowerPriority"
    raw = pod("p")
    raw["spec"]["preemptionPolicy"] = "Never"
    assert parse_pod(raw).preemption_policy == "Never"


def test_the_schedulers_refusal_is_read_from_pod_scheduled():
    raw = pod("p", node_name="")
    raw["spec"].pop("nodeName", None)
    raw["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 1 Insufficient cpu."}]}  # fmt: skip
    assert parse_pod(raw).unschedulable == "0/3 nodes are available: 1 Insufficient cpu."
    raw["status"]["conditions"][0]["reason"] = "SchedulerError"
    assert parse_pod(raw).unschedulable == ""
    bound = pod("q", node_name="n1")  # bound since: a stale condition does not count
    bound["status"] = dict(raw["status"])
    assert parse_pod(bound).unschedulable == ""


def test_node_allocatable_falls_back_to_capacity():
    raw = node("n1")
    raw["status"] = {"capacity": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "False"}]}
    parsed = parse_node(raw)
    assert parsed.cpu_cores == 4
    assert not parsed.ready


def _pdb(**spec):
    return parse_pdb({"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "default"},
                      "spec": {"selector": {"matchLabels": {"app": "a"}}, **spec}})


def test_disruptions_allowed_like_the_disruption_controller():
    pods = [parse_pod(pod(f"p{i}", labels={"app": "a"})) for i in range(4)]
    assert disruptions_allowed(_pdb(minAvailable=1), pods) == 3
    assert disruptions_allowed(_pdb(minAvailable=4), pods) == 0
    assert disruptions_allowed(_pdb(minAvailable="50%"), pods) == 2
    assert disruptions_allowed(_pdb(maxUnavailable=1), pods) == 1
    assert disruptions_allowed(_pdb(maxUnavailable="25%"), pods) == 1
    unready = parse_pod(pod("sick", labels={"app": "a"}))
    unready = type(unready)(**{**{f: getattr(unready, f) for f in unready.__slots__}, "ready": False})
    assert disruptions_allowed(_pdb(minAvailable=3), [*pods[:3], unready]) == 0


def test_pdb_rejects_both_fields():
    with pytest.raises(InvalidObject, match="mutually exclusive"):
        _pdb(minAvailable=1, maxUnavailable=1)


def test_store_keeps_unknown_kinds_raw_parses_custom_resources_and_rejects_garbage():
    queue = {"kind": "Queue", "metadata": {"name": "q"}}
    store = ObjectStore.from_dicts([node("n1"), pod("p"), queue, {"kind": "ConfigMap"}])
    assert list(store.nodes) == ["n1"]
    assert [p.key for p in store.pods_on("n1")] == ["default/p"]
    assert [q.name for q in store.queues] == ["q"]
    assert store.raw["ConfigMap"] == [{"kind": "ConfigMap"}]
    with pytest.raises(InvalidObject, match=r"objects\[0\]"):
        ObjectStore.from_dicts([{"metadata": {}}])
