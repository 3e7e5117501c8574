"""The batch capacity phase: the figures the node publishes follow its non-batch use
(DESIGN.md "Batch capacity"; the computation is ``engine.batch_capacity``).

A node no policy gives a ``batchCapacity`` section forgets its window and its figures
(nothing is published). The phase changes nobody's usage, so it comes after every
decision about how much.
"""

from __future__ import annotations

from engine.batch_capacity import BatchMemory, step
from engine.work import Steps, TickWork


def batch_capacity(tick: TickWork) -> Steps:
    ctx = tick.ctx
    chosen = ctx.tick.policies.batch_capacity_for_node(ctx.node.labels)
    if chosen is None:
        tick.state.keep_batch(BatchMemory())
        return
    _, section = chosen
    tick.state.keep_batch(step(section, tick.state.batch, ctx.now, ctx.node.allocatable,
                               ctx.analysis.usage, ctx.pods.values(), ctx.usage))
    yield from ()
