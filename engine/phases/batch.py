"""The batch capacity phase: the figures the node publishes follow its non-batch use
(DESIGN.md "Batch capacity"; the computation is ``engine.batch_capacity``).

The figures are written only when they change (``PublishBatchCapacity``); a write not
done leaves the node's memory at the figures last written, so the next tick asks again.
A node no policy gives a ``batchCapacity`` section any more has its figures removed
(``RemoveBatchCapacity``) and forgets its window. The phase changes nobody's usage, so
it comes after every decision about how much.

While the objects are the saved copy of an earlier run (``TickContext.provisional``: a
start before the API server answered) nothing is written or removed: the copy can be
older than the policies, and the API server that would take the write is not answering.
"""

from __future__ import annotations

from engine.batch_capacity import BatchMemory, step
from engine.intents import PublishBatchCapacity, RemoveBatchCapacity
from engine.work import Steps, TickWork


def batch_capacity(tick: TickWork) -> Steps:
    ctx = tick.ctx
    chosen = ctx.tick.policies.batch_capacity_for_node(ctx.node.labels)
    held = tick.state.batch
    if ctx.provisional:
        return
    if chosen is None:
        if held.published is None or (yield RemoveBatchCapacity()):
            tick.state.keep_batch(BatchMemory())
        return
    _, section = chosen
    after = step(section, held, ctx.now, ctx.node.allocatable, ctx.analysis.usage,
                 ctx.pods.values(), ctx.usage)
    wanted = after.published
    if wanted is not None and wanted is not held.published:
        written = yield PublishBatchCapacity(round(wanted.cpu * 1000), int(wanted.memory))
        if not written:
            after = BatchMemory(after.window, held.published)
    tick.state.keep_batch(after)
