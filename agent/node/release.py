"""`waterline agent release`: every cap, batch limit and CPU isolation mark of the state
files handed back by hand, and the batch capacity taken out of the node's status."""

from __future__ import annotations

import argparse
import os
import socket

import structlog

from agent.defaults import NODE_NAME_ENV
from agent.node.host import host_cgroups
from executors.cgroup_isolation import CgroupIsolator
from executors.cgroup_throttle import CgroupThrottler


def release(args: argparse.Namespace) -> int:
    """`waterline agent release`: write back the original quota of every container the
    quota file names, then what every batch pod's cgroups held before its limits (the
    caps first: a batch pod's original quota is its limit), and the original weight and
    burst of every cgroup the isolation file names (``cpu.idle`` back to 0 first) and the
    quota a quota burst raised, exactly as they were, and forget them; then take the batch
    resources out of the node's status (``remove_published``). Exit 1 when some could not
    be written (they stay in the files, the resources in the status: run it again)."""
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
        log.info("idle, burst and quota burst marks released by hand", pods=len(unmarked), of=len(marked),
                 state=isolator.state.path)  # fmt: skip
    if limited:
        log.info("batch limits released by hand", pods=len(unlimited), of=len(limited),
                 state=limiter.state.path)  # fmt: skip
    removed = remove_published(args)
    if left or left_marks or left_limits:
        log.error("some caps, marks or batch limits could not be released; run it again",
                  pods=left, marks=left_marks, limits=left_limits)  # fmt: skip
        return 1
    return 0 if removed is not False else 1


def remove_published(args: argparse.Namespace) -> bool | None:
    """The batch resources out of the node's status (``agent.node.batch_status``), through
    the API server ``--kubeconfig`` names (else the service account, else ``$KUBECONFIG``),
    for ``--node-name`` (else ``$NODE_NAME``, else the host name). True when removed (or
    the Node is gone), False when the API server refused or did not answer, None when
    there is no API server to ask: ``--local``, or no configuration at all (said: the
    scheduler goes on placing batch pods by the figures left there)."""
    from agent.kube.client import build_api
    from agent.kube.errors import KubeError, KubeNotFound
    from agent.node.batch_status import remove_batch_capacity

    log = structlog.get_logger()
    if args.local:
        return None
    node = args.node_name or os.environ.get(NODE_NAME_ENV) or socket.gethostname()
    try:
        api = build_api(args.kubeconfig)
    except (OSError, ValueError, KubeError) as err:
        log.warning("no API server to ask: the node's batch capacity is left in its status "
                    "(run it again with --kubeconfig)", code="batch-capacity-left", node=node,
                    error=str(err))  # fmt: skip
        return None
    try:
        remove_batch_capacity(api, node)
    except KubeNotFound:
        return True  # no Node: nothing published
    except (OSError, KubeError) as err:
        log.error("the node's batch capacity could not be removed from its status; run it "
                  "again", code="batch-capacity-not-removed", node=node, error=str(err))  # fmt: skip
        return False
    finally:
        api.close()
    log.info("batch capacity removed from the node's status", code="batch-capacity-removed",
             node=node)  # fmt: skip
    return True
