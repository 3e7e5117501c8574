"""Evictions through the policy/v1 Eviction subresource; never a direct delete.

The API server's answers are outcomes, not failures: 201 evicted; 429 with a
DisruptionBudget cause = a budget refused, try the next candidate; 404 = already gone,
counts as released; 409 on our uid precondition = the pod we meant is gone (a new pod took
its name), also released; 500 = the pod has several budgets (the API refuses those), or a
real server error. Those, a throttling 429 and network failures (timeouts included) are
``failed``, with the server's ``Retry-After`` when it gave one: the node agent ends its
eviction round on the first and backs off (``engine.limits``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.kube.client import KubeApi
from agent.kube.errors import KubeConflict, KubeError, KubeNotFound, KubeTooManyRequests
from agent.kube.resources import PODS
from agent.model.eviction import EvictionResult

EVICTED = EvictionResult.EVICTED
BLOCKED = EvictionResult.BLOCKED_BY_PDB
GONE = EvictionResult.GONE
FAILED = EvictionResult.FAILED


@dataclass(frozen=True, slots=True)
class EvictionOutcome:
    result: EvictionResult
    message: str = ""
    status: int = 0
    retry_after: float | None = None


def eviction_body(
    namespace: str, name: str, grace_seconds: int | None, uid: str = ""
) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if grace_seconds is not None:
        options["gracePeriodSeconds"] = int(grace_seconds)
    if uid:
        options["preconditions"] = {"uid": uid}
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": options,
    }


def evict(
    api: KubeApi,
    namespace: str,
    name: str,
    grace_seconds: int | None,
    uid: str = "",
    timeout: tuple[float, float] | None = None,
) -> EvictionOutcome:
    """Ask the API server to evict one pod (``uid`` guards against a same-named successor;
    ``timeout``: the client's (connect, read) seconds, else the API's own)."""
    body = eviction_body(namespace, name, grace_seconds, uid)
    try:
        api.request("POST", PODS.path(namespace, name, "eviction"), body=body, timeout=timeout)
    except KubeTooManyRequests as err:
        # A budget refusal carries a DisruptionBudget cause; a 429 without one is API
        # throttling. Either way this pod is skipped this round.
        if err.has_cause("DisruptionBudget"):
            return EvictionOutcome(BLOCKED, _detail(err), 429)
        return EvictionOutcome(FAILED, _detail(err), 429, err.retry_after)
    except KubeNotFound as err:
        return EvictionOutcome(GONE, err.message, 404)
    except KubeConflict as err:
        return EvictionOutcome(GONE, err.message, 409)
    except KubeError as err:
        return EvictionOutcome(FAILED, err.message, err.status, err.retry_after)
    return EvictionOutcome(EVICTED, "", 201)


def _detail(err: KubeError) -> str:
    causes = "; ".join(str(c.get("message") or "") for c in err.causes if c.get("message"))
    return f"{err.message} ({causes})" if causes else err.message
