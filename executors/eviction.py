"""The Evictor on the real API: policy/v1 Eviction, never a direct delete.

Maps the adapter's outcomes onto ``EvictionResult`` and logs the ones an operator must see:
a 500 (the pod has several disruption budgets, which the API refuses to choose between)
is reported and the pod skipped, as is any network failure.
"""

from __future__ import annotations

from typing import Any

import structlog

from agent.kube import evicting
from agent.kube.client import KubeApi
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod


class ApiEvictor:
    def __init__(self, api: KubeApi, logger: Any = None) -> None:
        self.api = api
        self.log = logger or structlog.get_logger("waterline.executors.eviction")

    def evict(self, pod: Pod, grace_seconds: int) -> EvictionResult:
        uid = pod.uid if pod.uid != pod.key else ""  # records built without a uid use the key
        outcome = evicting.evict(self.api, pod.namespace, pod.name, grace_seconds, uid)
        result = outcome.result
        if result is EvictionResult.FAILED:
            self.log.warning(
                "eviction failed; skipping the pod",
                pod=pod.key,
                status=outcome.status,
                error=outcome.message,
            )
        elif result is EvictionResult.BLOCKED_BY_PDB:
            self.log.info(
                "eviction refused by a disruption budget; trying the next pod",
                pod=pod.key,
                detail=outcome.message,
            )
        return result
