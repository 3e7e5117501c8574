"""The batch limits phase: every batch pod on the node has the limits of its batch
resources enforced (DESIGN.md "Batch capacity": "the agent writes its limits from its
``batch-cpu`` / ``batch-memory`` limits ... recorded, adopted and released like caps").

To Kubernetes a batch pod is BestEffort: the kubelet gives its cgroups no quota and no
memory limit. The agent writes them (``SetBatchLimits``, the actuator records what each
file held first), asked every tick for every batch pod, so a limit something lifted (a
``systemctl daemon-reload``) is written again; a pod gone has its record forgotten
(``ReleaseBatchLimits``: its cgroups went with it), a pod of the same name with a new uid
has the old one's record released first.

Decisions where DESIGN.md is silent:

* The limits are the pod's own (its spec, which cannot change them): they are enforced
  whatever the policies say, like the kubelet enforces a ``cpu`` limit, also on a node
  no policy gives a ``batchCapacity`` section any more; only an uninstall or
  `waterline agent release` hands them back.
* This phase comes first in a tick, so a batch pod has its limit before any cap: the
  throttler records the limit as the original it returns to (``engine.caps.ceiling`` is
  the ``batch-cpu`` limit), and a cap is never above it.
* Only Running pods are asked for: a Pending pod's cgroups are being made, a finished
  pod's are gone (a batch Job's pods stay on the node, Succeeded, until deleted).
* On the saved copy of the objects (``TickContext.provisional``) limits are set and
  checked (the pod spec says them, whatever its age) but no record is released: the copy
  can be older than a pod it does not show.
"""

from __future__ import annotations

from agent.model.batch import batch_limits
from agent.model.objects import Pod
from engine.intents import ReleaseBatchLimits, SetBatchLimits
from engine.records import HeldLimits
from engine.work import Steps, TickWork


def batch_limits_phase(tick: TickWork) -> Steps:
    ctx, state = tick.ctx, tick.state
    for key, held in sorted(state.limited.items()):
        pod = ctx.pods.get(key)
        if pod is not None and pod.uid == held.uid:
            continue
        if ctx.provisional:
            continue
        namespace, _, name = key.partition("/")
        if (yield ReleaseBatchLimits(Pod(namespace, name, held.uid))):
            state.drop_limits(key)
    for key, pod in sorted(ctx.pods.items()):
        if pod.phase != "Running":
            continue  # no cgroup yet (Pending), or none any more (a Job's pod Succeeded)
        limits = batch_limits(pod)
        if limits is None:
            continue
        old = state.limited.get(key)
        if old is not None and old.uid != pod.uid:
            continue  # the old pod's record is not released yet (provisional): next tick
        if (yield SetBatchLimits(pod, limits)):
            state.hold_limits(key, HeldLimits(pod.uid, limits.cpu, limits.memory))
