"""The leader's writes that follow the cache rather than the engines' plans: the status of
NodeQOSEnsurancePolicies and AvoidanceActions (``policystatus``) and the cluster brake
(``brake``). Both decisions are pure; this applies them through the leader's writer, with
one Event per change of validity and per brake set or lifted."""

from __future__ import annotations

from typing import Any, cast

import structlog

from agent.cluster import brake, policystatus
from agent.cluster.metrics import ControllerMetrics
from agent.cluster.resources import BRAKE_KINDS, POLICY_KINDS
from agent.cluster.writes import GuardedWriter
from agent.defaults import NAMESPACE
from agent.kube.cache import Cache
from agent.kube.events import (
    INVALID_ACTION,
    INVALID_POLICY,
    NORMAL,
    WARNING,
    ObjectRef,
    action_ref,
    policy_ref,
)
from agent.kube.resources import ACTIONS, CONFIGMAPS, EVENTS, NODES, POLICIES
from agent.model.objects import Node
from agent.model.policy import POLICY_KIND
from agent.model.timeutil import format_time

BRAKE_REF = ObjectRef("ConfigMap", brake.CONFIGMAP, NAMESPACE)

Raw = dict[str, Any]


class CacheWork:
    """Applies the policies' status and the brake decision each leader round."""

    def __init__(
        self,
        cache: Cache,
        writer: GuardedWriter,
        metrics: ControllerMetrics,
        budget: brake.BrakeBudget,
        logger: Any = None,
    ) -> None:
        self.cache, self.writer, self.metrics, self.budget = cache, writer, metrics, budget
        self.log = logger or structlog.get_logger("waterline.cluster.cachework")
        #: Evictions before this wall time no longer count for the brake: a person deleted
        #: it (or the controller lifted it) then.
        self._brake_cleared = 0.0
        self._brake_seen = brake.BrakeState()

    def run(self, now: float) -> None:
        """Statuses once policies, actions and nodes have listed; the brake once Events,
        the ConfigMap and nodes have."""
        nodes = cast(list[Node], self.cache.records(NODES.kind))
        if self.cache.synced(POLICY_KINDS):
            self.write_policy_statuses(nodes, now)
        if self.cache.synced(BRAKE_KINDS):
            self.steer_brake(nodes, now)

    def write_policy_statuses(self, nodes: list[Node], now: float) -> None:
        """Each policy's and action's status where it changed; an Event when its validity
        did (``InvalidPolicy`` / ``InvalidAction``, or ``Valid`` again)."""
        updates = policystatus.statuses(
            cast(list[Raw], self.cache.records(POLICIES.kind)),
            cast(list[Raw], self.cache.records(ACTIONS.kind)),
            nodes,
            now,
        )
        for u in updates:
            if not self.writer.policy_status(u.kind, u.name, u.status, u.resource_version):
                continue
            self.metrics.policy_status_writes.labels(u.kind, str(u.valid).lower()).inc()
            if not u.validity_changed:
                continue
            self.log.info("validity changed", kind=u.kind, name=u.name, error=u.message)
            ref = policy_ref(u.name) if u.kind == POLICY_KIND else action_ref(u.name)
            if u.valid:
                self.writer.event(ref, NORMAL, "Valid", f"{u.kind} {u.name} is valid again")
            else:
                reason = INVALID_POLICY if u.kind == POLICY_KIND else INVALID_ACTION
                self.writer.event(ref, WARNING, reason, u.message)

    def brake_state(self) -> brake.BrakeState:
        raw = self.cache.get(CONFIGMAPS.kind, f"{NAMESPACE}/{brake.CONFIGMAP}")
        return brake.brake_state(cast("Raw | None", raw))

    def steer_brake(self, nodes: list[Node], now: float) -> None:
        state = self.brake_state()
        if self._brake_seen.present and self._brake_seen.ours and not state.present:
            self._brake_cleared = max(self._brake_cleared, now)  # deleted: start afresh
        self._brake_seen = state
        budget = self.budget
        start = max(now - budget.window_seconds, self._brake_cleared)
        seen = brake.window(cast(list[Raw], self.cache.records(EVENTS.kind)), start, now)
        ready = sum(1 for n in nodes if n.ready)
        decision = brake.decide(budget, seen, ready, state, now)
        self.metrics.brake_window.labels("evictions").set(seen.evictions)
        self.metrics.brake_window.labels("nodes").set(len(seen.nodes))
        self._act_on_brake(decision, state, now)

    def _act_on_brake(
        self, decision: brake.BrakeDecision, state: brake.BrakeState, now: float
    ) -> None:
        stamp = format_time(now)
        refreshed = {brake.REASON_KEY: decision.reason, brake.LAST_EXCEEDED_KEY: stamp}
        if decision.action == brake.SET:
            data = {brake.PAUSED_KEY: "true", brake.SINCE_KEY: stamp, **refreshed}
            if self.writer.set_brake(data, exists=state.present):
                # Ours now, even before the watch shows it: its absence later is a deletion.
                self._brake_seen = brake.BrakeState(present=True, paused=True, ours=True)
                self.log.warning("cluster brake set: agents stop evicting", reason=decision.reason)
                self.writer.event(BRAKE_REF, WARNING, "BrakeSet", decision.reason)
        elif decision.action == brake.REFRESH:
            self.writer.set_brake(refreshed, exists=True)
        elif decision.action == brake.LIFT and self.writer.lift_brake():
            self._brake_cleared = now
            self._brake_seen = brake.BrakeState()  # gone by our hand, not a person's
            self.log.info("cluster brake lifted", reason=decision.reason)
            self.writer.event(BRAKE_REF, NORMAL, "BrakeLifted", decision.reason)


__all__ = ["BRAKE_REF", "CacheWork"]
