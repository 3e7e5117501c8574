"""Arbitration of PodMigrationJobs: job parsing, ordering, filters, select limit, report
section (its arguments: test_args_arbitration.py)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cluster.arbitration import ArbitrationArgs, ArbitrationPlan, ClusterIndex, plan
from agent.errors import InvalidObject
from agent.model import migration as m
from agent.model.store import ObjectStore
from agent.scenario import parse_scenario
from agent.simulate.sections import run_section
from tests import builders

NOW = "2026-01-01T00:00:00Z"


def pod(
    name: str,
    node: str = "n1",
    *,
    ns: str = "default",
    owner: tuple[str, str] | None = ("ReplicaSet", "web"),
    controller: bool = True,
    priority: int = 0,
    qos: str = "BestEffort",
    ready: bool = True,
    annotations: dict[str, str] | None = None,
    extra_owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    kind, owner_name = owner or ("", "")
    return builders.pod(
        name, namespace=ns, node_name=node, uid=f"uid-{ns}-{name}", started=None, qos=qos,
        priority=priority, ready=ready, annotations=annotations, owner_kind=owner and kind,
        owner_name=owner_name, owner_uid=f"uid-{kind}-{owner_name}", controller=controller,
        extra_owners=extra_owners, containers=[{"name": "main"}])


def job(
    name: str,
    pod_name: str,
    *,
    ns: str = "default",
    phase: str = "Pending",
    created: str = "2025-12-31T23:00:00Z",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"podRef": {"namespace": ns, "name": pod_name}, **spec},
        "status": {"phase": phase},
    }


def workload(
    kind: str,
    name: str,
    replicas: int | None,
    *,
    ns: str = "default",
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{kind}-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "kind": owner[0],
                "name": owner[1],
                "uid": f"uid-{owner[0]}-{owner[1]}",
                "controller": True,
            }
        ]
    spec = (
        {}
        if replicas is None
        else ({"parallelism": replicas} if kind == "Job" else {"replicas": replicas})
    )
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def run(
    objects: list[dict[str, Any]],
    args: ArbitrationArgs | None = None,
    classes: dict[str, int] | None = None,
) -> ArbitrationPlan:
    store = ObjectStore.from_dicts(objects)
    store.priority_classes = classes or {}
    return plan(store, args or ArbitrationArgs(), 0.0)


def simulate_section(scenario: Any) -> dict[str, Any] | None:
    return run_section("arbitration", scenario)


def reasons(result: Any) -> tuple[list[str], dict[str, str], dict[str, str]]:
    return (
        list(result.passed),
        {k: v.reason for k, v in result.waiting.items()},
        {k: v.reason for k, v in result.failed.items()},
    )


# -- PodMigrationJob parsing ---------------------------------------------------------------


def test_parse_job_fields() -> None:
    raw = job(
        "j", "p", ttl="1h30m", priority=5, priorityClassName="pc", paused=True, mode="EvictDirectly"
    )
    raw["status"] = {
        "phase": "Running",
        "reason": "Evicting",
        "nodeName": "n1",
        "conditions": [{"type": "Ready"}],
    }
    parsed = m.parse_pod_migration_job(raw)
    assert parsed.ttl_seconds == 5400
    assert (parsed.priority, parsed.priority_class_name, parsed.paused, parsed.mode) == (
        5,
        "pc",
        True,
        "EvictDirectly",
    )
    assert parsed.is_running and not parsed.is_pending
    assert parsed.node_name == "n1" and parsed.conditions[0].type == "Ready"
    assert m.parse_pod_migration_job(job("k", "p", phase="")).mode == m.RESERVATION_FIRST
    assert m.parse_pod_migration_job(job("k", "p", phase="")).is_pending


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r["metadata"].pop("name"), "metadata.name"),
        (lambda r: r["spec"].pop("podRef"), "spec.podRef"),
        (lambda r: r["spec"]["podRef"].pop("name"), "spec.podRef.name"),
        (lambda r: r["spec"]["podRef"].pop("namespace"), "spec.podRef.namespace"),
        (lambda r: r["spec"].update(mode="Teleport"), "spec.mode"),
        (lambda r: r["spec"].update(ttl="soon"), "spec.ttl"),
        (lambda r: r["spec"].update(ttl=-5), "spec.ttl"),
        (lambda r: r["spec"].update(priority="high"), "spec.priority"),
        (lambda r: r["spec"].update(paused="yes"), "spec.paused"),
        (lambda r: r["status"].update(phase="Done"), "status.phase"),
        (
            lambda r: r["metadata"].update(creationTimestamp="yesterday"),
            "metadata.creationTimestamp",
        ),
        (lambda r: r["status"].update(conditions="Ready"), "status.conditions"),
    ],
)
def test_bad_job_names_the_field(mutate: Any, field: str) -> None:
    raw = job("bad-job", "p")
    mutate(raw)
    with pytest.raises(InvalidObject) as err:
        m.parse_pod_migration_job(raw)
    assert err.value.field == field
    assert err.value.kind == "PodMigrationJob"


def test_duplicate_job_names_and_bad_priority_class_are_rejected() -> None:
    with pytest.raises(InvalidObject, match="PodMigrationJob a: metadata.name must be unique"):
        ObjectStore.from_dicts([job("a", "p"), job("a", "q")])
    with pytest.raises(InvalidObject, match="PriorityClass high: value"):
        ObjectStore.from_dicts(
            [{"kind": "PriorityClass", "metadata": {"name": "high"}, "value": "1000"}]
        )


# -- ordering --------------------------------------------------------------------------------

BIG = ArbitrationArgs(
    max_migrating_per_node=None, max_migrating_per_workload=100, max_unavailable_per_workload=99
)


def test_order_lower_pod_priority_first() -> None:
    objs = [pod("hi", priority=10), pod("lo", priority=1), job("j-hi", "hi"), job("j-lo", "lo")]
    assert run(objs, BIG).passed == ("j-lo", "j-hi")


def test_order_qos_besteffort_then_burstable_then_guaranteed() -> None:
    objs = [
        pod("g", qos="Guaranteed"),
        pod("bu", qos="Burstable"),
        pod("be", qos="BestEffort"),
        job("j-g", "g"),
        job("j-bu", "bu"),
        job("j-be", "be"),
    ]
    assert run(objs, BIG).passed == ("j-be", "j-bu", "j-g")


def test_order_pod_priority_outranks_qos() -> None:
    objs = [
        pod("be", priority=5),
        pod("g", qos="Guaranteed", priority=1),
        job("j-be", "be"),
        job("j-g", "g"),
    ]
    assert run(objs, BIG).passed == ("j-g", "j-be")


def test_order_newer_job_first_then_name() -> None:
    objs = [
        pod("a"),
        pod("b"),
        pod("c"),
        job("j-old", "a", created="2025-12-31T20:00:00Z"),
        job("j-new-b", "b", created="2025-12-31T22:00:00Z"),
        job("j-new-a", "c", created="2025-12-31T22:00:00Z"),
    ]
    assert run(objs, BIG).passed == ("j-new-a", "j-new-b", "j-old")


def test_order_migration_priority_spec_then_class_then_zero() -> None:
    objs = [
        pod("a", priority=0),
        pod("b", priority=100),
        pod("c", priority=100),
        pod("d", priority=100),
        job("j-none", "a"),
        job("j-class", "b", priorityClassName="urgent"),
        job("j-spec", "c", priority=50, priorityClassName="urgent"),
        job("j-unknown-class", "d", priorityClassName="nope"),
    ]
    result = run(objs, BIG, {"urgent": 10})
    # spec.priority 50 > class value 10 > 0 (unknown class and none); then pod priority.
    assert result.passed == ("j-spec", "j-class", "j-none", "j-unknown-class")


def test_order_migration_priority_outranks_pod_priority() -> None:
    objs = [
        pod("lo", priority=0),
        pod("hi", priority=1000),
        job("j-lo", "lo"),
        job("j-hi", "hi", priority=1),
    ]
    assert run(objs, BIG).passed == ("j-hi", "j-lo")


def test_order_batch_job_with_migrating_pods_first() -> None:
    train = ("Job", "train")
    objs = [
        workload("Job", "train", 3),
        workload("ReplicaSet", "web", 5),
        pod("t1", owner=train, priority=1000, qos="Guaranteed"),
        pod("t2", owner=train, priority=1000, qos="Guaranteed"),
        pod("w", priority=0),
        job("j-t1", "t1", phase="Running"),
        job("j-t2", "t2", created="2025-12-31T20:00:00Z"),
        job("j-w", "w", priority=99),
    ]
    assert run(objs, BIG).passed == ("j-t2", "j-w")


def test_batch_job_members_take_the_best_rank_and_stay_together() -> None:
    train = ("Job", "train")
    objs = [
        workload("Job", "train", 3),
        pod("t1", owner=train, priority=0),
        pod("t2", owner=train, priority=500),
        pod("t3", owner=train, priority=900),
        pod("x", priority=100),
        pod("y", priority=700),
        job("j-t1", "t1"),
        job("j-t2", "t2"),
        job("j-t3", "t3"),
        job("j-x", "x"),
        job("j-y", "y"),
    ]
    # Alone t2 and t3 would sort after x (and t3 after y); the group follows t1's rank.
    assert run(objs, BIG).passed == ("j-t1", "j-t2", "j-t3", "j-x", "j-y")


def test_batch_job_from_a_non_controller_owner_reference() -> None:
    job_owner = {"kind": "Job", "name": "etl", "uid": "uid-Job-etl", "controller": False}
    objs = [
        pod("e1", priority=0, extra_owners=[job_owner]),
        pod("e2", priority=900, extra_owners=[job_owner]),
        pod("z", priority=100),
        job("j-e1", "e1"),
        job("j-e2", "e2"),
        job("j-z", "z"),
    ]
    assert run(objs, BIG).passed == ("j-e1", "j-e2", "j-z")


# -- non-retryable ---------------------------------------------------------------------------


def test_non_retryable_failures() -> None:
    objs = [
        pod("ds", owner=("DaemonSet", "fluentd")),
        pod("mirror", annotations={"kubernetes.io/config.mirror": "abc"}),
        pod("static", owner=None, annotations={"kubernetes.io/config.source": "file"}),
        pod("bare", owner=None),
        pod("ok"),
        job("j-missing", "nope"),
        job("j-ds", "ds"),
        job("j-mirror", "mirror"),
        job("j-static", "static"),
        job("j-bare", "bare"),
        job("j-ok", "ok"),
        job("j-other-ns", "ok", ns="prod"),
    ]
    passed, waiting, failed = reasons(run(objs))
    assert passed == ["j-ok"]
    assert waiting == {}
    assert failed == {
        "j-missing": "MissingPod",
        "j-other-ns": "MissingPod",
        "j-ds": "ForbiddenMigratePod",
        "j-mirror": "ForbiddenMigratePod",
        "j-static": "ForbiddenMigratePod",
        "j-bare": "ForbiddenMigratePod",
    }


def test_pod_uid_mismatch_is_a_missing_pod() -> None:
    raw = job("j", "p")
    raw["spec"]["podRef"]["uid"] = "uid-of-the-old-pod"
    assert reasons(run([pod("p"), raw]))[2] == {"j": "MissingPod"}


def test_terminal_jobs_are_ignored_and_paused_jobs_wait() -> None:
    objs = [
        pod("a"),
        pod("b"),
        job("j-done", "a", phase="Succeeded"),
        job("j-failed", "a", phase="Failed"),
        job("j-paused", "b", paused=True),
    ]
    assert reasons(run(objs)) == ([], {"j-paused": "Paused"}, {})


# -- retryable -------------------------------------------------------------------------------


def test_max_migrating_per_node_counts_running_and_passed_jobs() -> None:
    objs = [
        workload("Deployment", "web", 100),
        pod("r", "n1"),
        pod("a", "n1"),
        pod("b", "n1"),
        pod("c", "n2"),
        job("j-r", "r", phase="Running"),
        job("j-a", "a", created="2025-12-31T23:03:00Z"),
        job("j-b", "b", created="2025-12-31T23:02:00Z"),
        job("j-c", "c", created="2025-12-31T23:01:00Z"),
    ]
    args = ArbitrationArgs(max_migrating_per_workload=100, max_unavailable_per_workload=99)
    assert reasons(run(objs, args)) == (["j-a", "j-c"], {"j-b": "MaxMigratingPerNode"}, {})


def test_running_job_of_a_gone_pod_counts_in_its_namespace_not_on_a_node() -> None:
    gone = job("j-gone", "evicted", phase="Running")
    gone["status"]["nodeName"] = "n1"  # where the pod goes, not where it was
    objs = [workload("Deployment", "web", 100), pod("a", "n1"), gone, job("j-a", "a")]
    limits = {"max_migrating_per_workload": 100, "max_unavailable_per_workload": 99}
    assert run(objs, ArbitrationArgs(max_migrating_per_node=1, **limits)).passed == ("j-a",)
    blocked = ArbitrationArgs(max_migrating_per_namespace=1, **limits)
    assert reasons(run(objs, blocked))[1] == {"j-a": "MaxMigratingPerNamespace"}


def test_max_migrating_per_namespace() -> None:
    objs = [
        workload("Deployment", "web", 100, ns="prod"),
        workload("Deployment", "web", 100, ns="dev"),
        pod("a", "n1", ns="prod"),
        pod("b", "n2", ns="prod"),
        pod("c", "n3", ns="dev"),
        job("j-a", "a", ns="prod", created="2025-12-31T23:03:00Z"),
        job("j-b", "b", ns="prod", created="2025-12-31T23:02:00Z"),
        job("j-c", "c", ns="dev", created="2025-12-31T23:01:00Z"),
    ]
    # Both Deployments are named web but live in different namespaces: separate workloads.
    args = ArbitrationArgs(
        max_migrating_per_namespace=1,
        max_migrating_per_workload=100,
        max_unavailable_per_workload=99,
    )
    assert reasons(run(objs, args)) == (["j-a", "j-c"], {"j-b": "MaxMigratingPerNamespace"}, {})


def _web_pods(count: int, ready: int | None = None) -> list[dict[str, Any]]:
    ready = count if ready is None else ready
    return [pod(f"w{i}", f"n{i}", ready=i < ready) for i in range(count)]


def test_unset_workload_limit_defaults_from_deployment_replicas() -> None:
    # The pods' ReplicaSet object names its Deployment (12 replicas): 10% -> 1 at a time.
    objs = [
        workload("Deployment", "web-deploy", 12),
        workload("ReplicaSet", "web", 12, owner=("Deployment", "web-deploy")),
        *_web_pods(12),
        *[job(f"j{i}", f"w{i}", created=f"2025-12-31T23:0{i}:00Z") for i in range(3)],
    ]
    passed, waiting, _ = reasons(run(objs))
    assert passed == ["j2"]
    assert waiting == {"j1": "MaxMigratingPerWorkload", "j0": "MaxMigratingPerWorkload"}


def test_unset_workload_limit_two_for_four_to_ten_replicas() -> None:
    objs = [
        workload("Deployment", "web", 6),
        *_web_pods(6),
        *[job(f"j{i}", f"w{i}", created=f"2025-12-31T23:0{i}:00Z") for i in range(3)],
    ]
    # No ReplicaSet object: the Deployment named like the ReplicaSet gives 6 replicas -> 2.
    assert reasons(run(objs))[:2] == (["j2", "j1"], {"j0": "MaxMigratingPerWorkload"})


def test_replicaset_hash_suffix_resolves_to_its_deployment() -> None:
    objs = [workload("Deployment", "web", 20)]
    objs += [pod(f"w{i}", f"n{i}", owner=("ReplicaSet", "web-5d8f7c9b4")) for i in range(3)]
    objs += [job(f"j{i}", f"w{i}", created=f"2025-12-31T23:0{i}:00Z") for i in range(3)]
    # 20 replicas -> 2 at a time (with only 3 pods, a pod count would have given 1).
    assert reasons(run(objs))[:2] == (["j2", "j1"], {"j0": "MaxMigratingPerWorkload"})


def test_unknown_workload_uses_its_pod_count() -> None:
    objs = [*_web_pods(3), job("j0", "w0"), job("j1", "w1")]
    index = ClusterIndex(ObjectStore.from_dicts(objs))
    assert index.workloads["ReplicaSet/default/web"].replicas == 3
    assert reasons(run(objs))[1] == {"j1": "MaxMigratingPerWorkload"}


def test_rollout_replicasets_share_their_deployment_budget() -> None:
    objs = [
        workload("Deployment", "web", 3),
        workload("ReplicaSet", "web-old", 0, owner=("Deployment", "web")),
        workload("ReplicaSet", "web-new", 3, owner=("Deployment", "web")),
        pod("old", "n1", owner=("ReplicaSet", "web-old")),
        pod("new", "n2", owner=("ReplicaSet", "web-new")),
        job("j-old", "old", created="2025-12-31T23:01:00Z"),
        job("j-new", "new", created="2025-12-31T23:02:00Z"),
    ]
    assert reasons(run(objs))[:2] == (["j-new"], {"j-old": "MaxMigratingPerWorkload"})


def test_max_unavailable_counts_not_ready_pods() -> None:
    objs = [workload("Deployment", "web", 10), *_web_pods(10, ready=8), job("j0", "w0")]
    args = ArbitrationArgs(max_migrating_per_workload=5)
    # Two pods not ready, default unavailable limit for 10 replicas is 2.
    assert reasons(run(objs, args))[1] == {"j0": "MaxUnavailablePerWorkload"}
    assert run(
        objs, ArbitrationArgs(max_migrating_per_workload=5, max_unavailable_per_workload=3)
    ).passed == ("j0",)


def test_max_unavailable_does_not_count_the_candidate_itself() -> None:
    # w1, w2, w3 are not ready; the candidate w1 is not counted: 2 down < 3.
    objs = [workload("Deployment", "web", 4), *_web_pods(4, ready=1), job("j1", "w1")]
    args = ArbitrationArgs(max_unavailable_per_workload=3)
    assert run(objs, args).passed == ("j1",)
    # Counting w1 itself would make 3 unavailable, at the limit.
    objs.append(job("j2", "w2"))
    # j1 passes (w2, w3 down: 2 < 3); w1 was already down, so passing it adds nothing and
    # j2 sees w1, w3 down (2 < 3) and passes too.
    assert run(objs, args).passed == ("j1", "j2")


def test_unavailable_or_migrating_is_a_union() -> None:
    # w0 is both not ready and migrating: it counts once.
    objs = [
        workload("Deployment", "web", 10),
        *_web_pods(10, ready=0),
        job("j-run", "w0", phase="Running"),
    ]
    for i in range(1, 10):
        objs[i + 1]["status"]["conditions"][0]["status"] = "True"
    objs.append(job("j5", "w5"))
    args = ArbitrationArgs(max_migrating_per_workload=5, max_unavailable_per_workload=2)
    assert run(objs, args).passed == ("j5",)


def test_passed_jobs_count_against_the_unavailable_limit() -> None:
    objs = [workload("Deployment", "web", 10), *_web_pods(10)]
    objs += [job(f"j{i}", f"w{i}", created=f"2025-12-31T23:0{i}:00Z") for i in range(4)]
    args = ArbitrationArgs(max_migrating_per_workload=10, max_unavailable_per_workload=3)
    passed, waiting, _ = reasons(run(objs, args))
    assert passed == ["j3", "j2", "j1"]
    assert waiting == {"j0": "MaxUnavailablePerWorkload"}


def test_second_job_for_a_migrating_pod_waits() -> None:
    objs = [
        workload("Deployment", "web", 100),
        pod("a"),
        pod("b"),
        job("j-run", "a", phase="Running"),
        job("j-dup", "a"),
        job("j-b1", "b", created="2025-12-31T23:02:00Z"),
        job("j-b2", "b", created="2025-12-31T23:01:00Z"),
    ]
    args = ArbitrationArgs(
        max_migrating_per_node=None,
        max_migrating_per_workload=100,
        max_unavailable_per_workload=99,
    )
    assert reasons(run(objs, args)) == (
        ["j-b1"],
        {"j-dup": "PodAlreadyMigrating", "j-b2": "PodAlreadyMigrating"},
        {},
    )


def test_select_limit_after_n_passed() -> None:
    objs = [workload("Deployment", "web", 100), *_web_pods(5)]
    objs += [job(f"j{i}", f"w{i}", created=f"2025-12-31T23:0{i}:00Z") for i in range(5)]
    args = ArbitrationArgs(
        interval=1,
        process_queue_qps=1,
        job_select_ratio=2,
        max_migrating_per_workload=100,
        max_unavailable_per_workload=99,
    )
    passed, waiting, _ = reasons(run(objs, args))
    assert passed == ["j4", "j3"]
    assert waiting == {"j2": "SelectLimit", "j1": "SelectLimit", "j0": "SelectLimit"}


def test_select_limit_only_for_jobs_that_pass_the_filters() -> None:
    objs = [
        workload("Deployment", "web", 100),
        pod("a", "n1"),
        pod("b", "n1"),
        pod("c", "n2"),
        job("j-a", "a", created="2025-12-31T23:03:00Z"),
        job("j-b", "b", created="2025-12-31T23:02:00Z"),
        job("j-c", "c", created="2025-12-31T23:01:00Z"),
    ]
    args = ArbitrationArgs(
        interval=1,
        process_queue_qps=1,
        job_select_ratio=1,
        max_migrating_per_node=1,
        max_migrating_per_workload=100,
        max_unavailable_per_workload=99,
    )
    assert reasons(run(objs, args))[1] == {"j-b": "MaxMigratingPerNode", "j-c": "SelectLimit"}


# -- report section --------------------------------------------------------------------------


def _scenario(objects: list[dict[str, Any]], config: dict[str, Any] | None = None):
    return parse_scenario({"now": NOW, "config": {"arbitration": config or {}}, "objects": objects})


def test_simulate_section_absent_without_jobs() -> None:
    assert simulate_section(_scenario([pod("a")])) is None


def test_simulate_section_report_and_queue_schedule() -> None:
    objs = [workload("Deployment", "web", 100), *_web_pods(3)]
    objs += [job(f"j{i}", f"w{i}", created=f"2025-12-31T23:0{i}:00Z") for i in range(3)]
    objs.append(job("j-x", "nope"))
    section = simulate_section(
        _scenario(
            objs,
            {"processQueueQPS": 2, "maxMigratingPerWorkload": 10, "maxUnavailablePerWorkload": 10},
        )
    )
    assert section == {
        "passed": ["j2", "j1", "j0"],
        "waiting": {},
        "failed": {"j-x": "MissingPod"},
        "dequeueAt": {"j2": 0.0, "j1": 0.5, "j0": 1.0},
    }


def test_simulate_section_rejects_bad_args_and_jobs() -> None:
    with pytest.raises(InvalidObject, match="config arbitration: jobSelectRatio"):
        simulate_section(_scenario([job("j", "p")], {"jobSelectRatio": 0}))
    with pytest.raises(InvalidObject, match="config arbitration: jobSelectRatio"):
        simulate_section(_scenario([], {"jobSelectRatio": 0}))  # refused even without jobs
    bad = job("j", "p", mode="Fly")
    with pytest.raises(InvalidObject, match="PodMigrationJob j: spec.mode"):
        simulate_section(_scenario([bad]))


def test_a_running_job_whose_pod_is_gone_counts_on_the_node_it_left():
    from agent.model.migration import parse_pod_migration_job

    def job(name, pod, phase, source=""):
        meta = {"name": name, "creationTimestamp": "2025-12-31T23:50:00Z"}
        if source:
            meta["annotations"] = {"migration.qos.waterline.io/source-node": source}
        return {"kind": "PodMigrationJob", "metadata": meta,
                "spec": {"podRef": {"namespace": "default", "name": pod}, "mode": "EvictDirectly"},
                "status": {"phase": phase}}

    def pod(name):
        # One replica: it may be migrated only because its owner accepted that.
        return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name,
                                           "annotations": {"qos.waterline.io/evictable": "true"},
                                           "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-rs",
                                                                "uid": f"{name}-rs", "controller": True}]},
                "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}

    store = ObjectStore.from_dicts([
        {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8"}}}, pod("b")])
    args = ArbitrationArgs(max_migrating_per_node=1)
    evicted_on_n1 = parse_pod_migration_job(job("gone", "a", "Running", source="n1"))
    pending = parse_pod_migration_job(job("next", "b", "Pending"))
    store.migration_jobs = [evicted_on_n1, pending]
    result = plan(store, args, 0.0)
    assert {name: v.reason for name, v in result.waiting.items()} == {"next": "MaxMigratingPerNode"}
    unknown_source = parse_pod_migration_job(job("gone", "a", "Running"))
    store.migration_jobs = [unknown_source, pending]
    result = plan(store, args, 0.0)
    assert result.passed == ("next",)
