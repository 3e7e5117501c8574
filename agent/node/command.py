"""`waterline agent`: the node agent, in a cluster (the DaemonSet) or ``--local``; and
`waterline agent release`, which hands every cap of the state file back by hand.

Both modes run the same loop over the same collectors and the same CPU throttler; they
differ in where the objects come from (the API server's watches, or ``--objects`` files)
and in what an eviction is (the Eviction API, or a log line: there is no API server in
local mode).

Restarts resume, they do not reset (DESIGN.md "Executor" 7): a starting agent adopts the
caps its state file names (``agent.node.resume``): they stay in force and are handed back
through throttle-up when the node is cool, so a rolling update causes no burst of
interference. Caps are released all at once only:

* in a cluster, when the agent stops (SIGTERM, SIGHUP, SIGINT, ``--ticks`` done) and finds
  its own DaemonSet gone or being deleted: the agent is being uninstalled. When the API
  does not answer, the caps are kept (the next agent adopts them; ``release`` by hand);
* in local mode, on every exit;
* by ``waterline agent release`` (stop the agent first: a running one would cap again).
"""

from __future__ import annotations

import argparse
import resource

import structlog

from agent.errors import InvalidObject
from agent.logs import configure_logging
from agent.node.arguments import RELEASE, add_arguments
from agent.node.release import release
from agent.node.wiring import build_agent
from agent.signal_stop import SignalStop

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    by_hand = args.local or args.verb == RELEASE
    configure_logging(args.log_format or ("console" if by_hand else "json"), args.log_level)
    log = structlog.get_logger()
    if args.interval <= 0:
        log.error("--interval must be > 0 seconds", interval=args.interval)
        return 2
    if args.ticks is not None and args.ticks < 1:
        log.error("--ticks must be >= 1", ticks=args.ticks)
        return 2
    if args.verb == RELEASE:
        return release(args)
    if args.local and not args.objects:
        log.error("--local needs --objects PATH (a YAML file or a folder of them)")
        return 2
    try:
        agent = build_agent(args)
    except InvalidObject as err:
        log.error("bad configuration", error=str(err), field=err.field)
        return 2
    except (OSError, ValueError) as err:
        log.error("agent not started", error=str(err))
        return 2
    if agent.server is not None:
        agent.server.start()
        log.info("serving metrics", code="serving-metrics", addr=args.metrics_addr, port=agent.server.port)

    def stop(name: str) -> None:  # on SignalStop's thread: logging here cannot deadlock
        log.info("stopping", code="stopping", signal=name)
        agent.loop.stop()

    SignalStop(stop)
    log.info(
        "agent started",
        node=agent.loop.node_name,
        local=args.local,
        dry_run=args.dry_run,
        interval=args.interval,
        ticks=args.ticks,
    )
    ticks = 0
    try:
        ticks = agent.loop.run(args.ticks)
    finally:
        agent.on_exit()
        if agent.server is not None:
            agent.server.stop()
        if agent.stop_source is not None:
            agent.stop_source()
        log.info(
            "agent stopped",
            ticks=ticks,
            max_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        )
    return 0
