"""The evictor filters beyond the scenarios: how pods' volumes and PersistentVolumes are
read, and the reason reaching a job's status before anything is evicted."""

from __future__ import annotations

from typing import Any

from agent.cluster import migrator as mg
from agent.cluster.defrag import DefragArgs, Storage, why_not_migratable
from agent.model import migration as m
from agent.model.objects import parse_persistent_volume, parse_pod
from agent.model.store import ObjectStore
from tests.builders import NOW, node, pod
from tests.unit.migration_fakes import Recorder, job


def with_volumes(*volumes: Any, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    raw = pod("web-1", requests={"cpu": "1"}, annotations=annotations)
    raw["spec"]["volumes"] = list(volumes)
    return raw


def test_pod_volumes_are_read_leniently() -> None:
    parsed = parse_pod(
        with_volumes(
            {"name": "a", "emptyDir": {}},
            {"name": "b", "emptyDir": {"medium": "Memory"}},
            {"name": "c", "hostPath": {"path": "/x"}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}},
            "not a volume",  # skipped: the pod and its capacity are never dropped for it
            {"name": "f", "projected": {"sources": []}},
        )
    )
    assert parsed.local_volumes == ('emptyDir "a"', 'hostPath "c"')
    assert parsed.claims == ("data", "web-1-e")
    assert parse_pod(pod("plain")).local_volumes == () and parse_pod(pod("plain")).claims == ()


def pv(terms: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "kind": "PersistentVolume",
        "metadata": {"name": "pv"},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": terms}}, **spec},
    }


def host(*values: str, key: str = "kubernetes.io/hostname") -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


def test_a_volume_is_pinned_when_its_affinity_admits_one_node() -> None:
    assert parse_persistent_volume(pv([host("n1")])).pinned == "volume bound to node n1"
    by_field = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    assert parse_persistent_volume(pv([by_field])).pinned == "volume bound to node n2"
    assert parse_persistent_volume(pv([host("n1"), host("n1")])).pinned  # same node twice
    assert not parse_persistent_volume(pv([host("n1"), host("n2")])).pinned  # either of two
    assert not parse_persistent_volume(pv([host("n1", "n2")])).pinned
    assert not parse_persistent_volume(pv([host("a", key="topology.kubernetes.io/zone")])).pinned
    local = pv([host("n3")], local={"path": "/mnt"})
    assert parse_persistent_volume(local).pinned == "local volume on n3"


def test_filters_in_order_and_the_annotation_lifts_only_the_storage_ones() -> None:
    args = DefragArgs()
    disk = parse_pod(with_volumes({"name": "tmp", "emptyDir": {}}))
    assert why_not_migratable(disk, args, Storage()) == 'LocalStorage emptyDir "tmp"'
    allowed = parse_pod(
        with_volumes(
            {"name": "tmp", "emptyDir": {}}, annotations={"qos.waterline.io/evictable": "true"}
        )
    )
    assert why_not_migratable(allowed, args, Storage()) is None
    protected = parse_pod(
        with_volumes(
            {"name": "tmp", "emptyDir": {}},
            annotations={
                "qos.waterline.io/evictable": "true",
                "qos.waterline.io/protected": "true",
            },
        )
    )
    assert why_not_migratable(protected, args, Storage()) == "Protected"
    daemon = parse_pod(pod("agent", owner_kind="DaemonSet"))
    assert why_not_migratable(daemon, args, Storage()) == "DaemonSet"
    system = parse_pod(pod("dns", namespace="kube-system"))
    assert why_not_migratable(system, args, Storage()) == "NamespaceExcluded kube-system"


def test_a_job_whose_pod_keeps_data_on_its_node_fails_with_the_reason() -> None:
    store = ObjectStore.from_dicts(
        [node("n1"), node("n2"), with_volumes({"name": "tmp", "emptyDir": {}})]
    )
    view = mg.ClusterView.build(store)
    rec = Recorder()
    step = mg.MigrationExecutor(rec).start(
        job(mode=m.RESERVATION_FIRST, phase="Pending"), view.pods["default/web-1"], view, NOW + 5
    )
    assert rec.kinds() == ["job_annotations", "job_status", "job_status"]  # nothing created
    assert step is not None and (step.phase, step.reason) == (
        m.FAILED,
        m.REASON_FORBIDDEN_MIGRATE_POD,
    )
    assert 'LocalStorage emptyDir "tmp"' in rec.calls[-1][2]["message"]
