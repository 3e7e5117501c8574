"""The placement checks: what the scheduler would refuse, the planners refuse too."""

from __future__ import annotations

from typing import Any

from agent.cluster.placement import Snapshot, fits, holds_by_node, why_not
from agent.model.objects import Node, Pod, parse_node, parse_pod
from agent.model.reservation import parse_reservation
from tests import builders


def node(
    name: str = "t", cpu: str = "10", memory: str = "64Gi", pods: str = "110", **extra: Any
) -> Node:
    return parse_node(builders.node(name, cpu, memory, extra.pop("labels", None), pods=pods,
                                    alloc=extra.pop("alloc", None), spec=extra.pop("spec", None),
                                    hostname=True))


def pod(name: str, cpu: str = "1", node_name: str = "t", ns: str = "default", **spec: Any) -> Pod:
    return parse_pod(builders.pod(
        name, namespace=ns, node_name=node_name, uid=f"uid-{ns}-{name}", started=None, ready=None,
        labels=spec.pop("labels", None), requests={"cpu": cpu, **spec.pop("requests", {})},
        owner_name=f"{name}-rs", owner_uid=f"rs-{name}", container_name="m", spec=spec))


def state_of(n: Node, *pods: Pod, reservations: tuple[dict[str, Any], ...] = ()):  # type: ignore[no-untyped-def]
    holds = holds_by_node([parse_reservation(r) for r in reservations], now=0.0)
    return Snapshot.build([n], pods, holds)[n.name]


def anti(selector: dict[str, str], topology: str = "kubernetes.io/hostname") -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": selector}, "topologyKey": topology}
            ]
        }
    }


# -- resources and thresholds -------------------------------------------------------------


def test_pod_fits_up_to_exactly_allocatable() -> None:
    s = state_of(node(), pod("a", "7500m"))
    assert fits(pod("x", "2500m", "src"), s)
    assert why_not(pod("x", "2600m", "src"), s) == "Insufficient cpu"


def test_every_requested_resource_must_fit_not_only_cpu() -> None:
    s = state_of(node(memory="4Gi"), pod("a", "1", requests={"memory": "3Gi"}))
    assert why_not(pod("x", "1", "src", requests={"memory": "2Gi"}), s) == "Insufficient memory"


def test_extended_resource_absent_on_node_blocks_a_pod_that_requests_it() -> None:
    s = state_of(node())
    assert (
        why_not(pod("x", "1", "src", requests={"nvidia.com/gpu": "1"}), s)
        == "Insufficient nvidia.com/gpu"
    )
    gpu = state_of(node(alloc={"nvidia.com/gpu": "4"}))
    assert fits(pod("x", "1", "src", requests={"nvidia.com/gpu": "1"}), gpu)


def test_protection_threshold_is_inclusive() -> None:
    s = state_of(node(), pod("a", "7500m"))
    assert fits(pod("x", "1500m", "src"), s, threshold=("cpu", 90.0))  # 75% -> 90%
    s2 = state_of(node(), pod("b", "8"))
    assert (
        why_not(pod("x", "1500m", "src"), s2, threshold=("cpu", 90.0)) == "ProtectionThreshold cpu"
    )


def test_pod_count_limit() -> None:
    s = state_of(node(pods="2"), pod("a", "1"), pod("b", "1"))
    assert why_not(pod("x", "1", "src"), s) == "TooManyPods"


# -- node selection -------------------------------------------------------------------------


def test_node_selector_must_match_every_label() -> None:
    s = state_of(node(labels={"pool": "batch", "disk": "ssd"}))
    assert fits(pod("x", nodeSelector={"pool": "batch", "disk": "ssd"}), s)
    assert why_not(pod("x", nodeSelector={"pool": "web"}), s) == "NodeSelector"


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def test_required_node_affinity_match_expressions() -> None:
    s = state_of(node(labels={"zone": "a"}))
    ok = _required({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]})
    no = _required({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})
    assert fits(pod("x", affinity=ok), s)
    assert why_not(pod("x", affinity=no), s) == "NodeAffinity"


def test_required_node_affinity_match_fields_on_node_name() -> None:
    s = state_of(node("t"))
    ok = _required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["t"]}]})
    no = _required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["u"]}]})
    assert fits(pod("x", affinity=ok), s)
    assert why_not(pod("x", affinity=no), s) == "NodeAffinity"


def test_node_affinity_terms_are_ored() -> None:
    s = state_of(node(labels={"zone": "b"}))
    aff = _required(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
    )
    assert fits(pod("x", affinity=aff), s)


# -- taints -----------------------------------------------------------------------------------


def _tainted(effect: str) -> Node:
    return node(spec={"taints": [{"key": "gpu", "value": "yes", "effect": effect}]})


def test_no_schedule_and_no_execute_taints_block_untolerating_pods() -> None:
    for effect in ("NoSchedule", "NoExecute"):
        assert why_not(pod("x"), state_of(_tainted(effect))) == "Taint gpu"


def test_prefer_no_schedule_taint_does_not_block() -> None:
    assert fits(pod("x"), state_of(_tainted("PreferNoSchedule")))


def test_tolerations_equal_and_exists() -> None:
    s = state_of(_tainted("NoSchedule"))
    equal = [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
    wrong = [{"key": "gpu", "operator": "Equal", "value": "no", "effect": "NoSchedule"}]
    exists = [{"operator": "Exists"}]
    assert fits(pod("x", tolerations=equal), s)
    assert fits(pod("x", tolerations=exists), s)
    assert why_not(pod("x", tolerations=wrong), s) == "Taint gpu"


# -- pod anti-affinity on the hostname ---------------------------------------------------------


def test_incoming_pod_anti_affinity_against_pods_on_the_node() -> None:
    s = state_of(node(), pod("web-1", labels={"app": "web"}))
    assert (
        why_not(pod("web-2", "1", "src", labels={"app": "web"}, affinity=anti({"app": "web"})), s)
        == "PodAntiAffinity"
    )
    assert fits(pod("db", "1", "src", labels={"app": "db"}, affinity=anti({"app": "db"})), s)


def test_existing_pod_anti_affinity_against_the_incoming_pod() -> None:
    s = state_of(node(), pod("web-1", labels={"app": "web"}, affinity=anti({"role": "noisy"})))
    assert why_not(pod("batch", "1", "src", labels={"role": "noisy"}), s) == "PodAntiAffinity"
    assert fits(pod("quiet", "1", "src", labels={"role": "quiet"}), s)


def test_anti_affinity_terms_only_see_their_own_namespace_by_default() -> None:
    s = state_of(node(), pod("web-1", ns="other", labels={"app": "web"}))
    assert fits(pod("web-2", "1", "src", labels={"app": "web"}, affinity=anti({"app": "web"})), s)


def test_anti_affinity_on_other_topology_keys_is_not_a_node_check() -> None:
    s = state_of(node(), pod("web-1", labels={"app": "web"}))
    zone = anti({"app": "web"}, topology="topology.kubernetes.io/zone")
    assert fits(pod("web-2", "1", "src", labels={"app": "web"}, affinity=zone), s)


def test_snapshot_sees_pods_placed_earlier_in_the_plan() -> None:
    n = node()
    snap = Snapshot.build([n], [])
    first = pod("web-1", "1", "src", labels={"app": "web"}, affinity=anti({"app": "web"}))
    second = pod("web-2", "1", "src", labels={"app": "web"}, affinity=anti({"app": "web"}))
    assert fits(first, snap["t"])
    snap.place(first, "t")
    assert snap["t"].used["cpu"] == 1.0
    assert why_not(second, snap["t"]) == "PodAntiAffinity"
    snap.remove(first, "t")
    assert snap["t"].used["cpu"] == 0.0 and not snap["t"].pods
    assert fits(second, snap["t"])


def test_finished_pods_hold_nothing() -> None:
    done = parse_pod(
        {
            "metadata": {"name": "done", "namespace": "default"},
            "spec": {
                "nodeName": "t",
                "containers": [{"name": "m", "resources": {"requests": {"cpu": "9"}}}],
            },
            "status": {"phase": "Succeeded"},
        }
    )
    assert fits(pod("x", "5", "src"), state_of(node(), done))


# -- reservations ---------------------------------------------------------------------------------


def reservation(
    name: str = "r1", cpu: str = "4", node_name: str = "t", **spec: Any
) -> dict[str, Any]:
    owners = spec.pop("owners", [{"labelSelector": {"matchLabels": {"app": "web"}}}])
    return {
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": cpu}}}]}
            },
            "owners": owners,
            "ttl": "0",
            **spec,
        },
        "status": {"phase": "Available", "nodeName": node_name},
    }


def test_reserved_capacity_is_not_free_for_other_pods() -> None:
    s = state_of(node(), pod("a", "5"), reservations=(reservation(cpu="4"),))
    assert why_not(pod("x", "2", "src", labels={"app": "db"}), s) == "Insufficient cpu"
    assert fits(pod("x", "1", "src", labels={"app": "db"}), s)


def test_reserved_capacity_counts_against_the_protection_threshold() -> None:
    s = state_of(node(), pod("a", "5"), reservations=(reservation(cpu="3"),))
    assert (
        why_not(pod("x", "1500m", "src"), s, threshold=("cpu", 90.0)) == "ProtectionThreshold cpu"
    )


def test_owner_may_use_the_reserved_capacity_and_consumes_it() -> None:
    n = node()
    holds = holds_by_node([parse_reservation(reservation(cpu="4", allocateOnce=False))], now=0.0)
    snap = Snapshot.build([n], [pod("a", "5")], holds)
    owner = pod("web-1", "3", "src", labels={"app": "web"})
    assert fits(owner, snap["t"])
    taken = snap.place(owner, "t")
    assert snap["t"].holds[0].remaining["cpu"] == 1.0  # 4 held, 3 used by the owner
    assert why_not(pod("x", "2", "src"), snap["t"]) == "Insufficient cpu"  # 5+3 used, 1 held
    snap.remove(owner, "t", taken)
    assert snap["t"].holds[0].remaining["cpu"] == 4.0


def test_allocate_once_reservation_releases_its_leftover_on_first_use() -> None:
    n = node()
    holds = holds_by_node([parse_reservation(reservation(cpu="4"))], now=0.0)
    snap = Snapshot.build([n], [pod("a", "5")], holds)
    snap.place(pod("web-1", "1", "src", labels={"app": "web"}), "t")
    assert snap["t"].holds[0].remaining == {}
    assert fits(pod("x", "4", "src"), snap["t"])  # 5 + 1 + 4 = 10
