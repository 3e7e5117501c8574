"""Restart or uninstall? What the stopping agent concludes from the answer about its own
DaemonSet (agent.node.incluster.agent_uninstalled). On a real cluster ``kubectl delete -k``
removes the namespace, the ServiceAccount and the RBAC before the DaemonSet, so the agent
that the uninstall stops is answered 401 (its token's ServiceAccount is gone), not 404
(seen on the real node of tests/e2e)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.kube.errors import (
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeServerError,
    KubeUnauthorized,
    KubeUnreachable,
)
from agent.node.incluster import agent_uninstalled


class Answer:
    """A KubeApi whose every request gets one answer (a manifest, or an error raised)."""

    def __init__(self, answer: dict[str, Any] | KubeError) -> None:
        self.answer = answer
        self.paths: list[str] = []

    def request(self, method: str, path: str, **_kw: Any) -> dict[str, Any]:
        self.paths.append(f"{method} {path}")
        if isinstance(self.answer, KubeError):
            raise self.answer
        return self.answer


LIVE = {"metadata": {"name": "waterline-agent"}}
DELETING = {"metadata": {"name": "waterline-agent", "deletionTimestamp": "2026-01-01T00:00:00Z"}}


@pytest.mark.parametrize(
    ("answer", "uninstalled"),
    [
        (LIVE, False),  # a rollout, a drain, a deleted pod: the caps stay for the next agent
        (DELETING, True),
        (KubeNotFound("gone"), True),
        (KubeUnauthorized("Unauthorized"), True),  # the ServiceAccount was deleted
        (KubeForbidden("forbidden"), True),  # the binding that let it read its DaemonSet
        (KubeServerError("boom"), None),  # the API did not say: caps kept
        (KubeUnreachable("no route"), None),
    ],
    ids=["live", "deleting", "404", "401", "403", "500", "unreachable"],
)
def test_what_the_answer_about_its_own_daemonset_means(answer: Any, uninstalled: bool | None) -> None:
    api = Answer(answer)
    assert agent_uninstalled(api, "waterline-system", "waterline-agent") is uninstalled  # type: ignore[arg-type]
    assert api.paths == ["GET /apis/apps/v1/namespaces/waterline-system/daemonsets/waterline-agent"]
