"""What the agent holds and someone else undid: one keeper for the caps and the marks.

Caps and CPU isolation marks are written straight into cgroup files, and on a
systemd-driver node ``systemctl daemon-reload`` (which every package install runs) puts a
unit's own properties back. The actuators find it: the throttler reads every cap back
before each tick (``CgroupThrottler.hold``, this keeper's before-tick call), the isolator
checks each mark whenever the tick asks for it (``MarkIdle`` and ``SetBurst`` are asked
every tick); both write it again and report what they found (``engine.records.
Reverted``) here, where it is

* counted (``waterline_caps_reverted_total{control="cpu_quota" | "cpu_idle" | "cpu_burst" | "cpu_quota_burst"}``);
* applied to the node's memory (``NodeState.found_reverted``: a cap not written back is
  forgotten, so the pod is an ordinary candidate again and the agent's state never claims
  a cap the kernel does not hold; a cap the kernel holds tighter is the cap);
* said once per pod and control (a pod whose caps are lifted at every reload would
  otherwise log at every package install), with what was found and written; a cap that
  could not be written back is said every time. What was said is forgotten once the node
  no longer holds that cap or mark (handed back, or the pod gone: issue 32, a node's
  pods come and go for months), before each tick; held again and lifted again, it is
  said again.

This sits at the actuators' edge on purpose: the decision code does not know about it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import structlog

from agent.node.tick import NodeBrain
from engine.records import (
    BATCH_CPU_LIMIT,
    BATCH_MEMORY_LIMIT,
    CPU_BURST,
    CPU_IDLE,
    CPU_QUOTA,
    CPU_QUOTA_BURST,
    Reverted,
)
from engine.state import NodeState


def held_by_control(state: NodeState) -> dict[str, set[str]]:
    """The uids of the pods whose cap, mark or limits of each control the node holds."""
    limited = {h.uid for h in state.limited.values()}
    return {
        CPU_QUOTA: {r.uid for r in state.throttled.values()},
        CPU_IDLE: {m.uid for m in state.idle.values()},
        CPU_BURST: {m.uid for m in state.burst.values()},
        CPU_QUOTA_BURST: {m.uid for m in state.quota.values()},
        BATCH_CPU_LIMIT: limited,
        BATCH_MEMORY_LIMIT: limited,
    }


class Holder(Protocol):
    def hold(self) -> list[Reverted]: ...


class InOrder:
    """Several holders read back one after the other, in the order given: the batch
    limits before the caps that sit under them (``CgroupBatchLimiter.hold``)."""

    def __init__(self, *holders: Holder) -> None:
        self.holders = holders

    def hold(self) -> list[Reverted]:
        return [item for holder in self.holders for item in holder.hold()]


class HeldKeeper:
    """A ``NodeLoop`` before-tick hook (the caps read back) and the isolator's
    ``on_reverted`` (the marks): count, apply to the node's memory, say once."""

    def __init__(self, brain: NodeBrain, count: Callable[[str, int], None] | None = None,
                 log: Any | None = None, caps: Holder | None = None) -> None:  # fmt: skip
        self.brain = brain
        self.count = count
        self.caps = caps
        self.log = log if log is not None else structlog.get_logger()
        self._said: set[tuple[str, str]] = set()  # (control, pod uid) said
        #: Reverts found since the start (all containers and cgroups), for tests.
        self.reverted = 0

    @property
    def said(self) -> frozenset[tuple[str, str]]:
        """(control, pod uid) of the reverts said and not to be said again."""
        return frozenset(self._said)

    def __call__(self) -> None:
        self._forget_released()
        if self.caps is None:
            return
        try:
            found = self.caps.hold()
        except Exception as err:  # noqa: BLE001 - the loop never dies
            self.log.error("holding the caps failed", error=repr(err))
            return
        self.found(found)

    def reverted_mark(self, item: Reverted) -> None:
        """The isolator's ``on_reverted``."""
        self.found([item])

    def found(self, found: Sequence[Reverted]) -> None:
        if not found:
            return
        if self.count is not None:
            by_control: dict[str, int] = {}
            for item in found:
                by_control[item.control] = by_control.get(item.control, 0) + 1
            for control, n in by_control.items():
                self.count(control, n)
        self.reverted += len(found)
        self.brain.state.found_reverted(found)
        for item in found:
            self._say(item)
        state = self.brain.state
        held = {(CPU_QUOTA, r.uid) for r in state.throttled.values()}
        held |= {(item.control, item.uid) for item in found}
        self._said = {said for said in self._said if said[0] != CPU_QUOTA or said in held}

    def _forget_released(self) -> None:
        """Before a tick: keep what was said only of the caps, marks and limits the node
        still holds (the last tick's memory, which has every mark a tick found reverted)."""
        if not self._said:
            return
        held = held_by_control(self.brain.state)
        self._said = {s for s in self._said if s[1] in held.get(s[0], (s[1],))}

    def _say(self, item: Reverted) -> None:
        if item.control == CPU_QUOTA and not item.rewritten:
            self.log.error("cap lifted by someone else and not written back: forgotten",
                           code="cap-lifted-forgotten", pod=item.pod, container=item.container, found=item.found,
                           error=item.error)  # fmt: skip
            return
        if (item.control, item.uid) in self._said:
            return
        self._said.add((item.control, item.uid))
        if item.control == CPU_QUOTA:
            self.log.warning(
                "cap lifted by someone else (systemd daemon-reload?): written back; "
                "logged once per pod, counted in waterline_caps_reverted_total",
                code="cap-lifted", pod=item.pod, container=item.container, cgroup=item.cgroup, found=item.found,
                written=item.wanted, new_original=item.new_original,
            )  # fmt: skip
        else:
            self.log.warning(f"{item.control} mark found reverted (a systemd daemon-reload?): "
                             "written again; logged once per pod, counted in "
                             "waterline_caps_reverted_total", code="mark-reverted", control=item.control,
                             pod=item.pod, cgroup=item.cgroup)  # fmt: skip
