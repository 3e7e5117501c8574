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
  The batch pods' limits the limits file names are adopted likewise (those of pods gone
  are forgotten: their cgroups went with them); each tick asks for them again, checked
  against the kernel.

Runs before the first decision, from the loop (``NodeLoop(prepare=...)``). On the objects
saved by the earlier run (an agent that starts before the API server answers) it adopts
the caps of the pods they show and leaves the others in force, untouched: that copy may be
older than those pods (seen on a real node: an agent restarted a minute after its pods
were made handed both caps back at once). It runs again on the API server's objects, which
say for certain which pods are gone. Marks wait for them the same way: a record whose pod
the saved objects do not show is neither adopted nor forgotten until then. Each part (caps,
marks) is done once: a rebuild from the specs run again would undo what the ticks in
between did.
"""

from __future__ import annotations

from typing import Any

import structlog

from agent.node.loop import Objects
from agent.node.tick import NodeBrain
from executors.adoption import adopt, adopt_limits, adopt_marks, held_caps
from executors.cgroup_batch_limits import CgroupBatchLimiter
from executors.cgroup_isolation import CgroupIsolator
from executors.cgroup_throttle import CgroupThrottler


class Resume:
    def __init__(self, brain: NodeBrain, throttler: CgroupThrottler | None,
                 isolator: CgroupIsolator | None = None, limiter: CgroupBatchLimiter | None = None,
                 logger: Any = None) -> None:  # fmt: skip
        self.brain = brain
        self.throttler = throttler
        self.isolator = isolator
        self.limiter = limiter
        self.log = logger or structlog.get_logger()
        self._caps_done = throttler is None
        self._marks_done = isolator is None
        self._limits_done = limiter is None

    def __call__(self, objects: Objects) -> bool:
        """Adopt (or rebuild); False when some caps or marks wait for the API server's objects."""
        if objects.node is None:
            return False
        if not self._caps_done:
            self._caps_done = self._caps(objects)
        if not self._marks_done:
            assert self.isolator is not None
            self._marks_done = self._marks(objects, self.isolator)
        if not self._limits_done:
            assert self.limiter is not None
            self._limits_done = self._limits(objects, self.limiter)
        return self._caps_done and self._marks_done and self._limits_done

    def _limits(self, objects: Objects, limiter: CgroupBatchLimiter) -> bool:
        state = self.brain.state
        adopted = {h.uid for h in state.limited.values()}
        held = {uid: r for uid, r in limiter.held().items() if uid not in adopted}
        if not held:
            return True
        held, waiting = _ready_to_adopt(held, objects)
        result = adopt_limits(state, held, objects.pods)
        for uid in result.gone:
            limiter.release_uid(uid)  # the cgroups went with the pod: the record goes
        self.log.info("batch limits adopted from the state file", code="batch-limits-adopted",
                      adopted=len(result.adopted), pods=result.adopted[:10], gone=len(result.gone),
                      **({"waiting_for_the_api": waiting[:10]} if waiting else {}))  # fmt: skip
        return not waiting

    def _caps(self, objects: Objects) -> bool:
        assert self.throttler is not None and objects.node is not None
        if self.throttler.state_unreadable:
            rebuilt = self.throttler.rebuild_originals(objects.pods)
            self.log.warning(
                "state file was unreadable: quotas rebuilt from the pod specs",
                code="caps-rebuilt",
                pods=len(rebuilt),
                examples=rebuilt[:10],
            )
            return True
        adopted = self.brain.state.throttled
        held = [c for c in held_caps(self.throttler.throttled_pods()) if c.key not in adopted]
        if not held:
            return True
        live = objects.origin == "live"
        shown = {p.uid for p in objects.pods}
        waiting = [] if live else [c for c in held if c.uid not in shown]
        held = [c for c in held if c not in waiting]
        result = adopt(self.brain.state, held, objects.pods, objects.node)
        handed_back = [cap.key for cap in result.released if self.throttler.restore_uid(cap.uid)]
        self.log.info(
            "caps adopted from the state file: they stay in force until the node is cool",
            code="caps-adopted",
            adopted=len(result.adopted),
            pods=result.adopted[:10],
            handed_back=handed_back[:10],
            rules_triggered=sorted({c.rule for c in held if c.key in result.adopted}),
            **({"waiting_for_the_api": [c.key for c in waiting][:10]} if waiting else {}),
        )
        return not waiting

    def _marks(self, objects: Objects, isolator: CgroupIsolator) -> bool:
        if isolator.state_unreadable:
            rebuilt = isolator.rebuild_from_specs(objects.pods)
            self.log.warning("isolation state was unreadable: idle weights rebuilt from the "
                             "pod specs, bursts set back to 0", code="marks-rebuilt", pods=len(rebuilt),
                             examples=rebuilt[:10])  # fmt: skip
            return True
        state = self.brain.state
        adopted = {m.uid for m in (*state.idle.values(), *state.burst.values(), *state.quota.values())}
        held = {uid: r for uid, r in isolator.held().items() if uid not in adopted}
        if not held:
            return True
        held, waiting = _ready_to_adopt(held, objects)
        result = adopt_marks(state, held, objects.pods)
        for uid in result.gone:
            isolator.release_uid(uid)  # the cgroup went with the pod: the record goes
        self.log.info("idle and burst marks adopted from the state file", code="marks-adopted",
                      adopted=len(result.adopted), pods=result.adopted[:10],
                      gone=len(result.gone),
                      **({"waiting_for_the_api": waiting[:10]} if waiting else {}))  # fmt: skip
        return not waiting


def _ready_to_adopt(held: dict[str, Any], objects: Objects) -> tuple[dict[str, Any], list[str]]:
    """The held records (by pod uid) that can be adopted now, and the uids still waiting:
    from a live API every pod is known (one not shown is gone); from a local or replayed
    list, a pod not shown yet may still come, so its record waits rather than going."""
    if objects.origin == "live":
        return held, []
    shown = {p.uid for p in objects.pods}
    waiting = sorted(uid for uid in held if uid not in shown)
    return {uid: r for uid, r in held.items() if uid not in waiting}, waiting
