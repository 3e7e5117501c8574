"""A reservation made real on a stock scheduler: its placeholder pod and PriorityClass.

The placeholder is a pause container with the reserved requests that only the target node
may take (a required node affinity on ``metadata.name``, as the DaemonSet controller pins
its pods): the stock scheduler binds it there when it fits, and from then on the
scheduler and the kubelet count the capacity as taken. Its priority is just below
the migrating pod's, from a PriorityClass ``waterline-reservation-<value>`` with
``preemptionPolicy: Never`` that the controller creates and reuses: a pod that matters as
much as the one being moved may preempt the placeholder, and the placeholder never
preempts anything. It is owned by its Reservation (deleted with it by the garbage
collector) and labelled ``qos.waterline.io/reservation: <reservation>``, which is how the
controller finds orphans after a restart.

Decisions where DESIGN.md is silent:

* Placeholders live in the controller's own namespace (its lease namespace,
  ``waterline-system``): the users' quotas and LimitRanges are not charged for them and
  the controller needs pod create/delete there only (a Role, not a ClusterRole).
* The scheduler binds it, not the controller (``spec.nodeName`` would skip the scheduler):
  a real cluster taught us that a pod bound by name is checked by nobody but the kubelet,
  so a placeholder racing a pod the scheduler just placed there overcommits the node and
  the kubelet fails whichever comes second, which may be a user's pod (a fake node runs
  both); NoSchedule taints and the pod count are skipped too. Bound by the scheduler, it
  takes room only where the scheduler's own accounting says there is room; where there is
  none it stays Pending, Unschedulable, and the migrator places it again
  (``steps.placeholder_state``).
* The placeholder copies the pod's tolerations: the scheduler must let it onto the target
  as it would let the replacement (and the kubelet refuses a pod that does not tolerate a
  NoExecute taint of its node).
* The pod spec passes the ``restricted`` Pod Security profile and mounts no token.
* Values are clamped to what a user PriorityClass may hold (-2^31 .. 10^9).
* ``terminationGracePeriodSeconds: 1``: a deleted placeholder is gone within a second, so
  the kubelet admits the replacement at once.

Pure: bodies and names only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from agent.cluster.defrag.migratable import PLACEHOLDER_LABEL
from agent.cluster.engine import EPSILON
from agent.model import migration as m
from agent.model import reservation as r
from agent.model.objects import Pod, Toleration

PRIORITY_CLASS_PREFIX = "waterline-reservation-"
#: The highest value a PriorityClass not named system-* may have, and int32's floor.
MAX_PRIORITY = 1_000_000_000
MIN_PRIORITY = -(2**31)
CREATED_BY = "migration"
#: Requests the kubelet checks for every container (others must set limit = request).
_OVERCOMMITTABLE = frozenset({"cpu", "memory", "ephemeral-storage"})
#: Pod-level amounts that are not container resources.
_NOT_CONTAINER = frozenset({"pods"})


def bounded(name: str, limit: int) -> str:
    """``name``, shortened with a hash when it is longer than ``limit``."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: limit - 11]}-{digest}"


def label_value(reservation_name: str) -> str:
    """The label value naming a reservation (at most 63 characters)."""
    return bounded(reservation_name, 63)


def placeholder_name(reservation_name: str) -> str:
    return bounded(f"placeholder-{reservation_name}", 253)


def placeholder_priority(pod_priority: int) -> int:
    """Just below the pod's priority, within what a user PriorityClass may hold."""
    return max(MIN_PRIORITY, min(MAX_PRIORITY, pod_priority - 1))


def priority_class_name(value: int) -> str:
    return f"{PRIORITY_CLASS_PREFIX}{value}"


def is_ours(priority_class: str) -> bool:
    return priority_class.startswith(PRIORITY_CLASS_PREFIX)


def never_preempting_class(
    name: str, value: int, created_by: str, description: str
) -> dict[str, Any]:
    """A PriorityClass for placeholder pods (a reservation's here, a queue hold's in
    agent/cluster/queues/holding.py): ``preemptionPolicy: Never``, never the default,
    labelled with who made it so the controller can delete it when unused."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": {m.CREATED_BY_LABEL: created_by}},
        "value": value,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": description,
    }


def priority_class_body(value: int) -> dict[str, Any]:
    return never_preempting_class(
        priority_class_name(value),
        value,
        CREATED_BY,
        "Waterline reservation placeholders: just below the pods they hold "
        "room for; never preempt. Deleted by the controller when no placeholder uses it.",
    )


def quantity(resource: str, amount: float) -> str:
    """A resource amount as a Kubernetes quantity string (CPU in millicores)."""
    if resource == "cpu":
        return f"{round(amount * 1000)}m"
    return str(round(amount)) if abs(amount - round(amount)) < EPSILON else repr(amount)


def resources(requests: Mapping[str, float]) -> dict[str, dict[str, str]]:
    """Requests; limits equal to them where Kubernetes forbids overcommitment (extended
    resources, hugepages)."""
    wanted = {
        k: quantity(k, v) for k, v in sorted(requests.items()) if v > 0 and k not in _NOT_CONTAINER
    }
    out: dict[str, dict[str, str]] = {"requests": wanted}
    limits = {k: v for k, v in wanted.items() if k not in _OVERCOMMITTABLE}
    if limits:
        out["limits"] = limits
    return out


def toleration(t: Toleration) -> dict[str, str]:
    fields = (("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect))
    return {k: v for k, v in fields if v}


def pinned_pause_spec(
    node: str,
    *,
    priority_class: str,
    priority: int,
    tolerations: Sequence[Toleration],
    requests: Mapping[str, float],
    image: str,
) -> dict[str, Any]:
    """The spec every placeholder pod has (a reservation's here, a queue reclaim's hold in
    agent/cluster/queues/holding.py): a pause container with ``requests`` that only
    ``node`` may take (required node affinity on ``metadata.name``, bound by the scheduler
    so that its accounting decides), a priority that never preempts, the pod's
    tolerations, the ``restricted`` Pod Security profile, no token, gone within a second
    of its deletion."""
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        },  # fmt: skip
        "priorityClassName": priority_class,
        "priority": priority,
        "preemptionPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "tolerations": [toleration(t) for t in tolerations],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65535,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "pause",
                "image": image,
                "resources": resources(requests),
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }


def placeholder_body(
    reservation: r.Reservation,
    pod: Pod,
    node: str,
    *,
    namespace: str,
    image: str,
) -> dict[str, Any]:
    """The placeholder of ``reservation`` for ``pod``'s replacement, for the scheduler to
    bind to ``node`` (and no other)."""
    value = placeholder_priority(pod.priority)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": placeholder_name(reservation.name),
            "namespace": namespace,
            "labels": {
                PLACEHOLDER_LABEL: label_value(reservation.name),
                m.CREATED_BY_LABEL: CREATED_BY,
            },
            "ownerReferences": [
                {
                    "apiVersion": m.API_VERSION,
                    "kind": r.KIND,
                    "name": reservation.name,
                    "uid": reservation.uid,
                    "controller": True,
                }
            ],
        },
        "spec": pinned_pause_spec(
            node,
            priority_class=priority_class_name(value),
            priority=value,
            tolerations=pod.tolerations,
            requests=pod.requests,
            image=image,
        ),
    }


def target_of(body: Mapping[str, Any]) -> str:
    """The node a placeholder body (``placeholder_body``) is for."""
    terms = body["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return str(terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0])


def is_placeholder_pod(pod: Pod) -> bool:
    """One of our placeholders: the reservation label *and* ``created-by: migration``. A
    user's pod that merely carries the reservation label is never taken for an orphan
    (the controller would delete it, or fail every round trying outside its namespace)."""
    return PLACEHOLDER_LABEL in pod.labels and pod.labels.get(m.CREATED_BY_LABEL) == CREATED_BY


def reservation_of(placeholder: Pod) -> str:
    """The name of the Reservation a placeholder belongs to (its owner, else its label)."""
    for owner in placeholder.owners:
        if owner.kind == r.KIND:
            return owner.name
    return placeholder.labels.get(PLACEHOLDER_LABEL, "")
