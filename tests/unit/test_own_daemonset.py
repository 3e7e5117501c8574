"""An uninstall takes the agent's RBAC in the same pass as its DaemonSet: the stopping
agent's own question is refused then, and what its watch saw answers instead."""

from __future__ import annotations

from typing import Any

import pytest

from agent.kube.cache import Cache
from agent.kube.errors import KubeError, KubeForbidden, KubeNotFound, KubeUnauthorized
from agent.kube.nodeview import SAVED_KINDS, OwnDaemonSet
from agent.kube.resources import DAEMONSETS
from agent.node.incluster import agent_uninstalled

KIND = DAEMONSETS.kind


def daemonset(deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "waterline-agent", "namespace": "waterline-system", "uid": "u1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta}


class Answers:
    """The API's answer to the stopping agent's get: an object, or an error to raise."""

    def __init__(self, answer: dict[str, Any] | KubeError) -> None:
        self.answer = answer

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", DAEMONSETS.path("waterline-system", "waterline-agent"))
        if isinstance(self.answer, KubeError):
            raise self.answer
        return self.answer


def watched(*events: tuple[str, dict[str, Any]]) -> OwnDaemonSet:
    cache = Cache(keep_raw=(*SAVED_KINDS, KIND))
    seen = OwnDaemonSet(cache)
    cache.replace(KIND, [daemonset()])
    for event_type, obj in events:
        cache.apply(KIND, event_type, obj)
    return seen


def ask(answer: dict[str, Any] | KubeError, seen: OwnDaemonSet | None) -> bool | None:
    return agent_uninstalled(Answers(answer), "waterline-system", "waterline-agent", seen)  # type: ignore[arg-type]


@pytest.mark.parametrize("refusal", [KubeUnauthorized("gone token"), KubeForbidden("no role")])
def test_a_refused_question_after_a_watched_deletion_is_an_uninstall(refusal: KubeError) -> None:
    assert ask(refusal, watched(("DELETED", daemonset()))) is True
    assert ask(refusal, watched(("MODIFIED", daemonset(deleting=True)))) is True


def test_a_refused_question_with_nothing_seen_is_unknown_and_keeps_the_caps() -> None:
    assert ask(KubeForbidden("no role"), watched()) is None
    assert ask(KubeForbidden("no role"), None) is None


def test_a_daemonset_made_again_clears_the_memory() -> None:
    reinstalled = watched(("DELETED", daemonset()), ("ADDED", daemonset()))
    assert not reinstalled.deleted
    assert ask(KubeForbidden("no role"), reinstalled) is None


def test_the_apis_answer_is_the_present_and_wins_over_the_memory() -> None:
    assert ask(daemonset(), watched(("DELETED", daemonset()))) is False
    assert ask(daemonset(deleting=True), watched()) is True
    assert ask(KubeNotFound("gone"), watched()) is True


def test_a_relist_without_it_counts_as_gone_only_once_it_was_seen() -> None:
    cache = Cache(keep_raw=(*SAVED_KINDS, KIND))
    seen = OwnDaemonSet(cache)
    cache.replace(KIND, [])
    assert not seen.deleted  # never there (an agent run outside its DaemonSet)
    cache.replace(KIND, [daemonset()])
    cache.replace(KIND, [])
    assert seen.deleted
