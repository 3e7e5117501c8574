"""`waterline agent release`: every cap of the state file handed back by hand."""

from __future__ import annotations

import argparse
import os

import structlog

from agent.node.host import host_cgroups
from executors.cgroup_throttle import CgroupThrottler


def release(args: argparse.Namespace) -> int:
    """`waterline agent release`: write back the original quota of every container the
    state file names, exactly as it was, and forget them. Exit 1 when some could not be
    written (they stay in the file: run it again)."""
    from executors.quota_state import QuotaState

    log = structlog.get_logger()
    try:
        mounts, layout = host_cgroups(args.cgroup_root, args.proc_root, args.kubelet_cgroup_root)
        throttler = CgroupThrottler(mounts, QuotaState(args.state_dir), layout)
    except (OSError, ValueError) as err:
        log.error("cannot release: no cgroup tree to write", error=str(err))
        return 2
    if not os.path.exists(throttler.state.path):  # a mistyped --state-dir looked like success
        log.warning("no state file here: nothing to release (is --state-dir the agent's?)",
                    state=throttler.state.path)  # fmt: skip
    held = throttler.throttled_pods()
    released = throttler.restore_all()
    left = sorted(p.key for uid, p in throttler.throttled_pods().items())
    log.info("caps released by hand", pods=len(released), of=len(held),
             state=throttler.state.path)  # fmt: skip
    if left:
        log.error("some caps could not be released; run it again", pods=left)
        return 1
    return 0
