"""What the controller's integration tests share, on the real cluster (devtools/harness/cluster.py).

* ``Replica``: one controller replica running in a thread, as ``waterline controller``
  runs it, with the controller's own ServiceAccount token (deploy/rbac.yaml is what lets
  it work) and its access table enforced, behind its own fault proxy: the proxy's log is
  every request that replica sent, and what the server answered.
* A test's pool: its kwok nodes, labelled and tainted for the test alone (the taint keeps
  everything else off them: deploy/'s controller pods, other tests' pods), and workloads
  that tolerate it, created by a ReplicaSet and scheduled by the real scheduler.
* ``Made``: the cluster-scoped objects a test created (jobs, PriorityClasses, queues,
  policies), deleted at its end, with the cluster brake the controller may have set.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from agent import defaults
from agent.cluster.access import controller_access
from agent.cluster.config import parse_config
from agent.cluster.controller import Controller, ControllerDeps
from agent.cluster.resources import MIGRATION_JOBS
from agent.kube.client import ClientArgs, build_api
from agent.kube.errors import KubeNotFound
from agent.kube.fetching import Selectors, get_object, list_objects
from agent.kube.leases import ElectionArgs
from agent.kube.patching import merge_patch
from agent.kube.resources import CONFIGMAPS, LEASES, PODS, Resource
from agent.kube.watching import WatchArgs
from devtools.harness.cluster import RealCluster, unique
from devtools.harness.faultproxy import FaultProxy, Seen
from devtools.harness.waiting import wait_until

#: Short enough for tests, with the production ratios (renew deadline and retry inside
#: the lease duration).
ELECTION = ElectionArgs(lease_duration=5, renew_deadline=4, retry_period=0.2, jitter=0.2)
INTERVAL = 0.3
LEASE_NS, LEASE_NAME = defaults.CONTROLLER_LEASE_NAMESPACE, defaults.CONTROLLER_LEASE_NAME
#: The taint of a test's own nodes (value: the pool), tolerated by its own pods only.
POOL_TAINT = "waterline.test/pool"
QOS = "/apis/qos.waterline.io/v1alpha1"


# -- the controller ------------------------------------------------------------------------


class Replica:
    """A controller replica in a thread, with the controller's token, behind its proxy."""

    def __init__(
        self,
        kube: RealCluster,
        identity: str | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
        election: ElectionArgs = ELECTION,
        interval: float = INTERVAL,
    ) -> None:
        self.proxy = FaultProxy(kube.server, kube.ca).start()
        self.kubeconfig = kube.controller_kubeconfig(server=self.proxy.url)
        # The controller's access table enforced: an undeclared call fails the test.
        self.access = controller_access(LEASE_NS, LEASE_NAME)
        self.api = build_api(str(self.kubeconfig), args=ClientArgs(pool_size=32), access=self.access)
        deps = ControllerDeps(
            self.api,
            identity or unique("replica"),
            lease_namespace=LEASE_NS,
            lease_name=LEASE_NAME,
            election=election,
            watch_args=WatchArgs(watch_timeout_seconds=30),
        )
        self.controller = Controller(
            deps, parse_config(dict(config or {})), interval=interval, dry_run=dry_run
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop,), daemon=True)
        self.thread.start()
        self._halted = False
        #: Refusals answered before this time are not the token's fault (a restarting
        #: kube-apiserver answers 403 until its authorizer has loaded RBAC).
        self.forgive_denied_before = 0.0

    @property
    def identity(self) -> str:
        return self.controller.identity

    def evictions(self, source: str = "migration") -> float:
        value = self.controller.metrics.registry.get_sample_value(
            "waterline_controller_evictions_total", {"source": source, "result": "evicted"}
        )
        return value or 0.0

    def sent(self, method: str, path_part: str) -> list[Seen]:
        """The requests this replica sent of ``method`` whose path contains ``path_part``."""
        return [s for s in self.proxy.requests if s.method == method and path_part in s.path]

    def denied(self) -> list[Seen]:
        """Requests the real server refused for the token (401/403): RBAC or admission."""
        return [s for s in self.proxy.requests
                if s.status in (401, 403) and s.at >= self.forgive_denied_before]  # fmt: skip

    def halt(self) -> None:
        """Stop cleanly (the lease is released); every call made was declared and allowed."""
        if self._halted:
            return
        self._halted = True
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the controller did not stop"
        self.api.close()
        self.proxy.stop()
        assert self.access.refused == [], "calls outside agent/cluster/access.py"
        assert self.denied() == [], [(s.method, s.path, s.status, s.at) for s in self.denied()]


@contextmanager
def replicas(kube: RealCluster, count: int = 1, **kwargs: Any) -> Iterator[list[Replica]]:
    """``count`` replicas, halted at the end (also on failure)."""
    running: list[Replica] = []
    try:
        for _ in range(count):
            running.append(Replica(kube, **kwargs))
        yield running
    finally:
        for r in running:
            r.stop.set()
        for r in running:
            r.halt()


def leader_of(running: Iterable[Replica]) -> Replica:
    (leader,) = [r for r in running if r.controller.is_leader()]
    return leader


def lease(kube: RealCluster) -> dict[str, Any]:
    return get_object(kube.api, LEASES, LEASE_NAME, LEASE_NS)


# -- a test's pool: nodes, workloads, jobs --------------------------------------------------


def pool_taint(pool: str) -> dict[str, str]:
    return {"key": POOL_TAINT, "value": pool, "effect": "NoSchedule"}


def pool_tolerations(pool: str) -> list[dict[str, str]]:
    return [{"key": POOL_TAINT, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]


def pool_node(
    kube: RealCluster, pool: str, allocatable: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> str:  # fmt: skip
    """A kwok node of the test's pool: labelled ``pool``, tainted for it alone."""
    return kube.node(
        labels={"pool": pool, **(labels or {})},
        allocatable=allocatable,
        taints=[pool_taint(pool)],
    )


def pod_spec(
    pool: str,
    requests: Mapping[str, str] | None = None,
    *,
    priority_class: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pause container on the pool's nodes (kwok runs it), requesting ``requests``."""
    resources = dict(requests or {"cpu": "100m", "memory": "64Mi"})
    limits = {k: v for k, v in resources.items() if "/" in k}  # extended: limit = request
    spec: dict[str, Any] = {
        "nodeSelector": dict(node_selector or {"pool": pool}),
        "tolerations": pool_tolerations(pool),
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": resources, **({"limits": limits} if limits else {})},
        }],
    }  # fmt: skip
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def replicaset(
    ns: str,
    name: str,
    pool: str,
    replicas: int = 1,
    requests: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    finalizers: Iterable[str] = (),
    priority_class: str | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ReplicaSet whose pods the real scheduler places on the pool (kwok runs them).
    ``finalizers`` on its pods keep an evicted one Terminating until the test lets go."""
    pod_labels = {"app": name, **(labels or {})}
    meta: dict[str, Any] = {"labels": pod_labels}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": meta, "spec": pod_spec(
                pool, requests, priority_class=priority_class, node_selector=node_selector)},
        },
    }  # fmt: skip


def bare_pod(
    ns: str, name: str, pool: str, requests: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A pod no controller owns (nothing would recreate it), labelled app=<name>."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
            "spec": pod_spec(pool, requests, node_selector=node_selector)}  # fmt: skip


def priority_class(name: str, value: int, preemption_policy: str | None = None) -> dict[str, Any]:
    pc: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                          "metadata": {"name": name}, "value": value}  # fmt: skip
    if preemption_policy:
        pc["preemptionPolicy"] = preemption_policy
    return pc


def migration_job(
    name: str,
    ns: str,
    pod: str,
    mode: str = "EvictDirectly",
    *,
    priority: int | None = None,
    ttl: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"podRef": {"namespace": ns, "name": pod}, "mode": mode}
    if priority is not None:
        spec["priority"] = priority
    if ttl is not None:
        spec["ttl"] = ttl
    return {
        "apiVersion": "qos.waterline.io/v1alpha1", "kind": "PodMigrationJob",
        "metadata": {"name": name, "labels": dict(labels or {}),
                     "annotations": dict(annotations or {})},
        "spec": spec,
    }  # fmt: skip


def release(kube: RealCluster, ns: str, pod: str) -> None:
    """Let a pod held by a finalizer go: being deleted, it is gone at once."""
    with suppress(KubeNotFound):
        merge_patch(kube.api, PODS, pod, {"metadata": {"finalizers": None}}, namespace=ns)


# -- reading the cluster as a user would -----------------------------------------------------


def pods(kube: RealCluster, ns: str, selector: str = "") -> list[dict[str, Any]]:
    return list_objects(kube.api, PODS, Selectors(ns, label_selector=selector)).items


def live_pods(kube: RealCluster, ns: str, selector: str = "") -> list[dict[str, Any]]:
    """Pods not being deleted."""
    return [p for p in pods(kube, ns, selector) if not p["metadata"].get("deletionTimestamp")]


def running_pods(kube: RealCluster, ns: str, selector: str = "") -> list[dict[str, Any]]:
    return [p for p in live_pods(kube, ns, selector) if p.get("status", {}).get("phase") == "Running"]


def pod_or_none(kube: RealCluster, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return get_object(kube.api, PODS, name, ns)
    except KubeNotFound:
        return None


def job_status(kube: RealCluster, name: str) -> dict[str, Any]:
    try:
        return get_object(kube.api, MIGRATION_JOBS, name).get("status") or {}
    except KubeNotFound:
        return {}


def wait_running(kube: RealCluster, ns: str, selector: str, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    """``count`` Running pods matching ``selector`` (scheduled by the scheduler, run by kwok)."""
    found: list[list[dict[str, Any]]] = [[]]

    def enough() -> bool:
        found[0] = running_pods(kube, ns, selector)
        return len(found[0]) >= count

    wait_until(enough, timeout, f"{count} Running pods {selector} in {ns}")
    return found[0]


# -- what a test made, removed at its end -------------------------------------------------


@dataclass
class Made:
    """Cluster-scoped objects a test created: deleted at its end (``clean``), so the next
    test's controller never sees them; and the brake, which the controller may have set
    from other tests' agent Events, lifted so no agent stays stopped by it."""

    kube: RealCluster
    objects: list[tuple[Resource, str]] = field(default_factory=list)

    def add(self, resource: Resource, manifest: Mapping[str, Any]) -> dict[str, Any]:
        from agent.kube.creating import create

        made = create(self.kube.api, resource, manifest)
        self.objects.append((resource, made["metadata"]["name"]))
        return made

    def clean(self) -> None:
        for resource, name in reversed(self.objects):
            with suppress(KubeNotFound):
                self.kube.api.request("DELETE", resource.path(None, name))
        self.objects.clear()
        clear_brake(self.kube)


def clear_brake(kube: RealCluster) -> None:
    with suppress(KubeNotFound):
        kube.api.request("DELETE", CONFIGMAPS.path(defaults.NAMESPACE, defaults.BRAKE_CONFIGMAP))
