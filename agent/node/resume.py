"""What a starting agent does with what an earlier run left, once it first sees its node.

* A state file that could not be read was moved aside: every container of the node's
  pods gets its quota back from the pod spec, so no pod stays capped for ever.
* Otherwise the caps the state file names are adopted (``executors.adoption``): they
  stay in force and throttle-up hands them back when the node is cool; those of pods no
  longer on the node are forgotten, those that cannot be adopted are handed back now.

Runs before the first decision, from the loop (``NodeLoop(prepare=...)``). On the objects
saved by the earlier run (an agent that starts before the API server answers) it adopts
the caps of the pods they show and leaves the others in force, untouched: that copy may be
older than those pods (seen on a real node: an agent restarted a minute after its pods
were made handed both caps back at once). It runs again on the API server's objects, which
say for certain which pods are gone.
"""

from __future__ import annotations

from typing import Any

import structlog

from agent.node.loop import Objects
from agent.node.tick import NodeBrain
from executors.adoption import adopt, held_caps
from executors.cgroup_throttle import CgroupThrottler


class Resume:
    def __init__(self, brain: NodeBrain, throttler: CgroupThrottler, logger: Any = None) -> None:
        self.brain = brain
        self.throttler = throttler
        self.log = logger or structlog.get_logger()

    def __call__(self, objects: Objects) -> bool:
        """Adopt (or rebuild); False when some caps wait for the API server's objects."""
        node = objects.node
        if node is None:
            return False
        if self.throttler.state_unreadable:
            rebuilt = self.throttler.rebuild_originals(objects.pods)
            self.log.warning(
                "state file was unreadable: quotas rebuilt from the pod specs",
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
        result = adopt(self.brain.state, held, objects.pods, node)
        handed_back = [cap.key for cap in result.released if self.throttler.restore_uid(cap.uid)]
        self.log.info(
            "caps adopted from the state file: they stay in force until the node is cool",
            adopted=len(result.adopted),
            pods=result.adopted[:10],
            handed_back=handed_back[:10],
            rules_triggered=sorted({c.rule for c in held if c.key in result.adopted}),
            **({"waiting_for_the_api": [c.key for c in waiting][:10]} if waiting else {}),
        )
        return not waiting
