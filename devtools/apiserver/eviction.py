"""pods/eviction as the API server answers it (pkg/registry/core/pod/storage/eviction.go).

* pod missing: 404; uid precondition mismatch: 409.
* a pod that is Succeeded, Failed, Pending or already terminating is deleted without
  looking at budgets.
* more than one PodDisruptionBudget selects the pod: 500 (the API refuses to choose).
* one budget: if it allows a disruption the pod is deleted (gracefully), else 429
  TooManyRequests with a ``DisruptionBudget`` cause naming the budget, the healthy pods it
  needs and has. A not-ready pod may go when the budget is otherwise satisfied
  (unhealthyPodEvictionPolicy IfHealthyBudget, the default) or always (AlwaysAllow).

Deviation, said plainly: the real server reads ``status.disruptionsAllowed`` that the
disruption controller maintains; this server has no controller and computes it at the
moment of the eviction with ``agent.model.objects.disruptions_allowed`` over the pods the
budget selects (which is what a settled controller would have written). A budget with no
selector (null) selects nothing, as in policy/v1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model.objects import budget_status, parse_pdb, parse_pod
from devtools.apiserver.errors import ApiStatus
from devtools.apiserver.selectors import field_value
from devtools.apiserver.store import Store

TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


def _healthy_and_desired(pdb_raw: Mapping[str, Any], pods: list[Any]) -> tuple[int, int, int]:
    """(healthy, desired, allowed) for the message and the unhealthy-pod rule."""
    status = budget_status(parse_pdb(pdb_raw), pods)
    return status.healthy, status.desired, status.allowed


def evict(store: Store, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = body.get("deleteOptions") or {}
    grace = options.get("gracePeriodSeconds")
    uid = str((options.get("preconditions") or {}).get("uid") or "")
    pods_res = store.resource("", "v1", "pods")
    pdbs_res = store.resource("policy", "v1", "poddisruptionbudgets")
    with store.cond:  # one eviction at a time, as budget updates are serialised upstream
        raw = store.get(pods_res, namespace, name)
        if uid and raw["metadata"].get("uid") != uid:
            store.delete(pods_res, namespace, name, uid)  # raises the 409
        phase = field_value(raw, "status.phase") or "Pending"
        if phase in ("Succeeded", "Failed", "Pending") or raw["metadata"].get("deletionTimestamp"):
            store.delete_pod(namespace, name, grace, uid)
            return _success()
        pod = parse_pod(raw)
        all_pods, _, _ = store.list(pods_res, namespace, lambda _o: True)
        budgets = []
        for pdb_raw in store.list(pdbs_res, namespace, lambda _o: True)[0]:
            if (pdb_raw.get("spec") or {}).get("selector") is not None and parse_pdb(
                pdb_raw
            ).selects(pod):
                budgets.append(pdb_raw)
        if len(budgets) > 1:
            raise ApiStatus(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
        if budgets:
            pdb_raw = budgets[0]
            pdb = parse_pdb(pdb_raw)
            selected = [p for p in _parsed(all_pods) if pdb.selects(p)]
            healthy, desired, allowed = _healthy_and_desired(pdb_raw, selected)
            policy = (pdb_raw.get("spec") or {}).get(
                "unhealthyPodEvictionPolicy"
            ) or "IfHealthyBudget"
            unhealthy_ok = not pod.ready and (
                policy == "AlwaysAllow" or (healthy >= desired and desired > 0)
            )
            if allowed <= 0 and not unhealthy_ok:
                raise ApiStatus(
                    429,
                    "TooManyRequests",
                    TOO_MANY,
                    [
                        {
                            "type": "DisruptionBudget",
                            "message": f"The disruption budget {pdb.name} needs {desired} healthy pods and has {healthy} currently",
                        }
                    ],
                )
        store.delete_pod(namespace, name, grace, uid)
        return _success()


def _parsed(raws: list[dict[str, Any]]) -> list[Any]:
    out = []
    for raw in raws:
        try:
            out.append(parse_pod(raw))
        except ValueError:  # a malformed pod counts as no pod, as it cannot be healthy
            continue
    return out


def _success() -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
