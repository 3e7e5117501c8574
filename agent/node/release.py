"""`waterline agent release`: every cap and CPU isolation mark of the state files handed
back by hand."""

from __future__ import annotations

import argparse
import os

import structlog

from agent.node.host import host_cgroups
from executors.cgroup_isolation import CgroupIsolator
from executors.cgroup_throttle import CgroupThrottler


def release(args: argparse.Namespace) -> int:
    """`waterline agent release`: write back the original quota of every container the
    quota file names, and the original weight and burst of every cgroup the isolation
    file names (``cpu.idle`` back to 0 first), exactly as they were, and forget them.
    Exit 1 when some could not be written (they stay in the files: run it again)."""
    from executors.batch_limits_state import BatchLimitsState
    from executors.cgroup_batch_limits import CgroupBatchLimiter
    from executors.cgroup_writes import choose_writes
    from executors.isolation_state import IsolationState
    from executors.quota_state import QuotaState

    log = structlog.get_logger()
    try:
        mounts, layout = host_cgroups(args.cgroup_root, args.proc_root, args.kubelet_cgroup_root)
        # the units' own properties given back too, where the agent set them through systemd
        writes = choose_writes(mounts.version, layout.detect_driver(), args.state_dir)
        throttler = CgroupThrottler(mounts, QuotaState(args.state_dir), layout, writes=writes)
        isolator = CgroupIsolator(mounts, IsolationState(args.state_dir), layout, writes=writes)
        limiter = CgroupBatchLimiter(mounts, BatchLimitsState(args.state_dir), layout, writes=writes)
    except (OSError, ValueError) as err:
        log.error("cannot release: no cgroup tree to write", error=str(err))
        return 2
    paths = (throttler.state.path, isolator.state.path, limiter.state.path)
    if not any(os.path.exists(p) for p in paths):  # a mistyped --state-dir looked like success
        log.warning("no state file here: nothing to release (is --state-dir the agent's?)",
                    code="no-state-file", state=throttler.state.path)  # fmt: skip
    held = throttler.throttled_pods()
    released = throttler.restore_all()  # first: a batch pod's original quota is its limit
    limited = limiter.held()
    unlimited = limiter.release_all()
    marked = isolator.held()
    unmarked = isolator.release_all()
    left = sorted(p.key for p in throttler.throttled_pods().values())
    left_marks = sorted(p.key for p in isolator.held().values())
    left_limits = sorted(p.key for p in limiter.held().values())
    log.info("caps released by hand", pods=len(released), of=len(held),
             state=throttler.state.path)  # fmt: skip
    if marked:
        log.info("idle and burst marks released by hand", pods=len(unmarked), of=len(marked),
                 state=isolator.state.path)  # fmt: skip
    if limited:
        log.info("batch limits released by hand", pods=len(unlimited), of=len(limited),
                 state=limiter.state.path)  # fmt: skip
    if left or left_marks or left_limits:
        log.error("some caps, marks or batch limits could not be released; run it again",
                  pods=left, marks=left_marks, limits=left_limits)  # fmt: skip
        return 1
    return 0
