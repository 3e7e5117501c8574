"""`python -m devtools demo`: the live demo where cgroup v1 is writable (root), else the replay."""

from __future__ import annotations

import argparse
import os

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from agent.logs import configure_logging
from devtools.demo.cgroups import v1_roots
from devtools.demo.live import live_demo
from devtools.demo.replay import replay


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cgroup-root",
        default=CGROUP_ROOT,
        metavar="PATH",
        help="where the cgroup hierarchies are mounted (default %(default)s)",
    )
    parser.add_argument(
        "--proc-root",
        default=PROC_ROOT,
        metavar="PATH",
        help="the /proc to read mounts and CPU figures from (default %(default)s)",
    )
    parser.add_argument(
        "--load-ticks",
        type=int,
        default=12,
        metavar="N",
        help="ticks of load (default %(default)s)",
    )
    parser.add_argument(
        "--max-restore-ticks",
        type=int,
        default=15,
        metavar="N",
        help="give up restoring after this many ticks (default %(default)s)",
    )
    parser.add_argument(
        "--latency-ticks",
        type=int,
        default=8,
        metavar="N",
        help="ticks of the third phase with and without the idle class, each (0: no third "
        "phase; default %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between the agent's ticks (default %(default)s)",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="replay the embedded scenario even where cgroups are writable",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="the agent's log lines shown beside the console view (default %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    configure_logging("console", args.log_level)
    if args.replay:
        return replay("--replay was asked for")
    if os.geteuid() != 0:
        return replay("not running as root")
    try:
        roots = v1_roots(args.cgroup_root, args.proc_root)
    except ValueError as err:
        return replay(str(err))
    return live_demo(args, *roots)
