"""The Evictor on the real API: policy/v1 Eviction, never a direct delete.

Maps the adapter's outcomes onto ``EvictionAnswer`` (the result, and the server's
Retry-After when it refused for its own sake) and logs the ones an operator must see: an
API failure (a 5xx, among them a pod with several disruption budgets, which the API
refuses to choose between; a throttling 429; a timeout) ends the node's eviction round,
which then backs off (``executors.limits``).
"""

from __future__ import annotations

from typing import Any

import structlog

from agent.kube import evicting
from agent.kube.client import KubeApi
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod
from executors.actuators import EvictionAnswer


class ApiEvictor:
    def __init__(self, api: KubeApi, logger: Any = None) -> None:
        self.api = api
        self.log = logger or structlog.get_logger("waterline.executors.eviction")

    def evict(self, pod: Pod, grace_seconds: int | None) -> EvictionAnswer:
        uid = pod.uid if pod.uid != pod.key else ""  # records built without a uid use the key
        outcome = evicting.evict(self.api, pod.namespace, pod.name, grace_seconds, uid)
        result = outcome.result
        if result is EvictionResult.FAILED:
            self.log.warning(
                "eviction failed: the API answered with an error or not at all; "
                "this node's eviction round ends here",
                pod=pod.key,
                status=outcome.status,
                error=outcome.message,
                retry_after=outcome.retry_after,
            )
        elif result is EvictionResult.BLOCKED_BY_PDB:
            self.log.info(
                "eviction refused by a disruption budget; trying the next pod",
                pod=pod.key,
                detail=outcome.message,
            )
        return EvictionAnswer(result, outcome.retry_after)
