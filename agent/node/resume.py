"""What a starting agent does with what an earlier run left, once it first sees its node.

* A state file that could not be read was moved aside: every container of the node's
  pods gets its quota back from the pod spec, every idle pod-level cgroup its weight
  from the pod spec (and every burst goes back to 0), so no pod stays changed for ever.
* Otherwise the caps the quota file names are adopted (``executors.adoption``): they
  stay in force and throttle-up hands them back when the node is cool; those of pods no
  longer on the node are forgotten, those that cannot be adopted are handed back now.
  The idle and burst marks the isolation file names are adopted too: they stay, and the
  first tick releases those whose pod left its class meanwhile. Never reset, never
  re-read: a weight read while ``cpu.idle`` is 1 is the idle weight, not the pod's.

Runs once, before the first decision, from the loop (``NodeLoop(prepare=...)``).
"""

from __future__ import annotations

from typing import Any

import structlog

from agent.node.loop import Objects
from agent.node.tick import NodeBrain
from executors.adoption import adopt, adopt_marks, held_caps
from executors.cgroup_isolation import CgroupIsolator
from executors.cgroup_throttle import CgroupThrottler


class Resume:
    def __init__(self, brain: NodeBrain, throttler: CgroupThrottler | None,
                 isolator: CgroupIsolator | None = None, logger: Any = None) -> None:
        self.brain = brain
        self.throttler = throttler
        self.isolator = isolator
        self.log = logger or structlog.get_logger()

    def __call__(self, objects: Objects) -> None:
        if objects.node is None:
            return
        if self.throttler is not None:
            self._caps(objects)
        if self.isolator is not None:
            self._marks(objects, self.isolator)

    def _caps(self, objects: Objects) -> None:
        assert self.throttler is not None and objects.node is not None
        if self.throttler.state_unreadable:
            rebuilt = self.throttler.rebuild_originals(objects.pods)
            self.log.warning(
                "state file was unreadable: quotas rebuilt from the pod specs",
                pods=len(rebuilt),
                examples=rebuilt[:10],
            )
            return
        held = held_caps(self.throttler.throttled_pods())
        if not held:
            return
        result = adopt(self.brain.state, held, objects.pods, objects.node)
        handed_back = [cap.key for cap in result.released if self.throttler.restore_uid(cap.uid)]
        self.log.info(
            "caps adopted from the state file: they stay in force until the node is cool",
            adopted=len(result.adopted),
            pods=result.adopted[:10],
            handed_back=handed_back[:10],
            rules_triggered=sorted({c.rule for c in held if c.key in result.adopted}),
        )

    def _marks(self, objects: Objects, isolator: CgroupIsolator) -> None:
        if isolator.state_unreadable:
            rebuilt = isolator.rebuild_from_specs(objects.pods)
            self.log.warning("isolation state was unreadable: idle weights rebuilt from the "
                             "pod specs, bursts set back to 0", pods=len(rebuilt),
                             examples=rebuilt[:10])  # fmt: skip
            return
        held = isolator.held()
        if not held:
            return
        result = adopt_marks(self.brain.state, held, objects.pods)
        for uid in result.gone:
            isolator.release_uid(uid)  # the cgroup went with the pod: the record goes
        self.log.info("idle and burst marks adopted from the state file",
                      adopted=len(result.adopted), pods=result.adopted[:10],
                      gone=len(result.gone))  # fmt: skip
