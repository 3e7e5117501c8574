"""Caps that survive systemd: each tick, before the decision, the throttler reads back
the caps it holds and writes again those someone lifted (``CgroupThrottler.hold``; on a
systemd-driver node that is ``systemctl daemon-reload``, which every package install runs).

Here the findings are made visible and the engine's memory kept honest:

* every lifted cap is counted (``waterline_caps_reverted_total{control="cpu_quota"}``);
* it is logged once per pod (the first time; a pod whose caps are lifted at every reload
  would otherwise log at every package install), with what was found and written;
* a cap that could not be written back is forgotten by the engine too (the pod is then an
  ordinary candidate again): the agent's state never claims a cap the kernel does not hold.

This sits at the actuator's edge on purpose: the decision code does not know about it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import structlog

from agent.metrics import CPU_QUOTA_CONTROL as CPU_QUOTA
from agent.node.tick import NodeBrain
from executors.cgroup_throttle import Reverted


class Holder(Protocol):
    def hold(self) -> list[Reverted]: ...


class CapKeeper:
    """A ``NodeLoop`` before-tick hook: hold the caps, count and log what was lifted."""

    def __init__(self, holder: Holder, brain: NodeBrain,
                 count: Callable[[str, int], None] | None = None,
                 log: Any | None = None) -> None:  # fmt: skip
        self.holder = holder
        self.brain = brain
        self.count = count
        self.log = log if log is not None else structlog.get_logger()
        self._logged: set[str] = set()  # pod uids whose lifted cap was logged
        #: Lifted caps found since the start (all containers), for tests and the console.
        self.reverted = 0

    def __call__(self) -> None:
        try:
            found = self.holder.hold()
        except Exception as err:  # noqa: BLE001 - the loop never dies
            self.log.error("holding the caps failed", error=repr(err))
            return
        if found and self.count is not None:
            self.count(CPU_QUOTA, len(found))
        self.reverted += len(found)
        for item in found:
            if not item.rewritten:
                self.brain.state.drop_cap(item.pod)
                self.log.error("cap lifted by someone else and not written back: forgotten",
                               code="cap-lifted-forgotten", pod=item.pod, container=item.container, found=item.found,
                               error=item.error)  # fmt: skip
                continue
            if item.uid in self._logged:
                continue
            self._logged.add(item.uid)
            self.log.warning(
                "cap lifted by someone else (systemd daemon-reload?): written back; "
                "logged once per pod, counted in waterline_caps_reverted_total",
                code="cap-lifted", pod=item.pod, container=item.container, cgroup=item.cgroup, found=item.found,
                written=item.wanted, new_original=item.new_original,
            )  # fmt: skip
        held = {r.uid for r in self.brain.state.throttled.values()}
        self._logged &= held | {item.uid for item in found}
