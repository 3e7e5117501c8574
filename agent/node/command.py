"""`waterline agent`: the node agent, in a cluster (the DaemonSet) or ``--local``.

Both modes run the same loop over the same collectors and the same CPU throttler; they
differ in where the objects come from (the API server's watches, or ``--objects`` files)
and in what an eviction is (the Eviction API, or a log line: there is no API server in
local mode).

Start-up and exit restore every pod a previous run left throttled (the quota state file):
the in-memory rule hysteresis and caps died with that run, and a cap nobody remembers
would never be raised again. If a rule still holds, it throttles again after its
``avoidanceThreshold`` samples. Exiting (SIGTERM, Ctrl-C, ``--ticks`` done) restores too,
so an uninstalled or stopped agent never leaves pods capped; only a kill -9 leaves caps
behind, until the next start.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from agent.defaults import CGROUP_ROOT, NODE_NAME_ENV, PROC_ROOT, STATE_DIR
from agent.logs import FORMATS, LEVELS, configure_logging
from agent.metrics import DEFAULT_ADDR, AgentMetrics, Health, MetricsServer
from agent.node.console import ConsoleView
from agent.node.dryrun import DryRunThrottler, ReportingEvictor
from agent.node.loop import NodeLoop, Objects, Publisher
from agent.node.policy import load_policies
from agent.node.publish import MetricsPublisher
from agent.node.sampling import NODE_CPU_SOURCES, CountingLog, HostCollector
from agent.node.tick import NodeBrain
from agent.settings import AgentSettings
from executors.actuators import CpuThrottler, Evictor


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on this machine with no cluster: objects come from --objects files",
    )
    parser.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="PATH",
        help="YAML file or folder of Pods, the Node, policies and actions (repeatable; re-read on change; --local)",
    )
    parser.add_argument(
        "--node-name",
        default=None,
        help=f"the node (default: ${NODE_NAME_ENV}; locally the only Node in the objects, else the host name)",
    )
    parser.add_argument(
        "--cgroup-root",
        default=CGROUP_ROOT,
        help="where the host's cgroup tree is mounted (default %(default)s)",
    )
    parser.add_argument(
        "--kubelet-cgroup-root",
        default="",
        metavar="PATH",
        help="kubelet's --cgroup-root: the cgroup above kubepods (default: none)",
    )
    parser.add_argument(
        "--proc-root", default=PROC_ROOT, help="the host's /proc (default %(default)s)"
    )
    parser.add_argument(
        "--state-dir",
        default=STATE_DIR,
        help="where original CPU quotas are kept (default %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between ticks (default %(default)s)",
    )
    parser.add_argument(
        "--ticks", type=int, default=None, metavar="N", help="run N ticks, then exit (for scripts)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and report, write nothing (no quota, no eviction)",
    )
    parser.add_argument(
        "--metrics-addr",
        default=DEFAULT_ADDR,
        help="serve /metrics, /healthz, /readyz here (default %(default)s; 'off' disables)",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=None,
        help="default: console with --local, json in a cluster",
    )
    parser.add_argument("--log-level", choices=LEVELS, default="info")
    parser.add_argument(
        "--node-cpu",
        choices=NODE_CPU_SOURCES,
        default="proc",
        help="cpu_total_usage from the host's /proc (default) or the sum of the pods' cgroups",
    )
    parser.add_argument(
        "--no-console",
        action="store_true",
        help="--local: do not print the per-tick view on stdout",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="in a cluster: kubeconfig (default: the service account, else $KUBECONFIG)",
    )


@dataclass
class Agent:
    """A built agent: the loop and what must be started and stopped around it."""

    loop: NodeLoop
    throttler: CpuThrottler
    metrics: AgentMetrics
    health: Health
    server: MetricsServer | None = None
    stop_source: Callable[[], None] | None = None

    def restore_all(self, why: str) -> None:
        restore_all = getattr(self.throttler, "restore_all", None)
        if restore_all is None:
            return
        restored = restore_all()
        if restored:
            structlog.get_logger().info(
                "restored pods throttled earlier", why=why, pods=len(restored)
            )


def build_host_parts(
    cgroup_root: str,
    proc_root: str,
    kubelet_root: str,
    state_dir: str,
    dry_run: bool,
    settings: AgentSettings,
    node_cpu: str = "proc",
    clock: Callable[[], float] | None = None,
) -> tuple[HostCollector, CpuThrottler]:
    """The collector and the throttler over the host's cgroup tree and /proc."""
    from collectors.cgroups import detect_mounts
    from collectors.layout import PodCgroupLayout
    from collectors.node_stats import NodeStatsCollector
    from collectors.pod_stats import PodStatsCollector
    from executors.cgroup_throttle import CgroupThrottler
    from executors.quota_state import QuotaState

    log = structlog.get_logger()
    mounts = detect_mounts(cgroup_root, proc_root)
    probe = mounts.controller_root("cpu") or mounts.controller_root("cpuacct") or cgroup_root
    layout = PodCgroupLayout(probe, kubelet_root)
    pod_log, node_log = CountingLog(), CountingLog()
    clocks: dict[str, Any] = {"clock": clock} if clock is not None else {}
    pod_stats = PodStatsCollector(
        mounts,
        layout,
        ext_cpu_resource=settings.ext_cpu_resource,
        kubelet_root=kubelet_root,
        log=pod_log,
        **clocks,
    )
    node_stats = NodeStatsCollector(proc_root, log=node_log, **clocks)
    collector = HostCollector(pod_stats, node_stats, pod_log, node_log, node_cpu)
    throttler: CpuThrottler
    if dry_run:
        throttler = DryRunThrottler()
    else:
        try:
            throttler = CgroupThrottler(mounts, QuotaState(state_dir), layout)
        except ValueError as err:
            log.error("cannot throttle on this host: quotas will not be written", error=str(err))
            throttler = DryRunThrottler()
    return collector, throttler


def _local_source(args: argparse.Namespace) -> tuple[Callable[[], Objects], str]:
    from agent.node.local import FileObjectSource

    source = FileObjectSource(args.objects, args.node_name, args.proc_root)
    return source, source.node_name


def _cluster_source(
    args: argparse.Namespace, node_name: str
) -> tuple[Callable[[], Objects], Any, Callable[[], bool], Callable[[], None]]:
    from agent.kube.client import build_api
    from agent.kube.nodeview import start_node_view
    from executors.eviction import ApiEvictor

    api = build_api(args.kubeconfig)
    view, informers = start_node_view(api, node_name)

    cached: list[tuple[int, Objects]] = []

    def source() -> Objects:
        """The cache's snapshot, rebuilt (and policies re-parsed) only when it changed."""
        if not view.synced:
            raise RuntimeError("watches not in sync yet")
        version = view.version
        if cached and cached[0][0] == version:
            return cached[0][1]
        namespaces = view.namespaces()

        def namespace_labels(namespace: str) -> Mapping[str, str]:
            ns = namespaces.get(namespace)
            return ns.labels if ns else {"kubernetes.io/metadata.name": namespace}

        objects = Objects(
            node=view.node(),
            pods=view.pods(),
            policies=load_policies(view.policies(), view.actions()),
            namespace_labels=namespace_labels,
            invalid={kind: len(bad) for kind, bad in view.invalid().items()},
        )
        cached[:] = [(version, objects)]
        return objects

    def ready() -> bool:
        return bool(view.synced)

    return source, ApiEvictor(api), ready, informers.stop


def build_agent(args: argparse.Namespace) -> Agent:
    settings = AgentSettings()
    evictor: Evictor
    source_ready: Callable[[], bool] | None = None
    stop_source: Callable[[], None] | None = None
    if args.local:
        source, node_name = _local_source(args)
        evictor = ReportingEvictor("local mode: there is no API server")
    else:
        node_name = args.node_name or os.environ.get(NODE_NAME_ENV) or socket.gethostname()
        source, api_evictor, source_ready, stop_source = _cluster_source(args, node_name)
        evictor = ReportingEvictor("--dry-run") if args.dry_run else api_evictor
    collector, throttler = build_host_parts(
        args.cgroup_root,
        args.proc_root,
        args.kubelet_cgroup_root,
        args.state_dir,
        args.dry_run,
        settings,
        args.node_cpu,
    )
    metrics = AgentMetrics()
    health = Health(stale_after=max(30.0, 10 * args.interval), source_ready=source_ready)
    publishers: list[Publisher] = [MetricsPublisher(metrics, health)]
    if args.local and not args.no_console:
        publishers.append(ConsoleView(sys.stdout))
    loop = NodeLoop(
        node_name=node_name,
        source=source,
        collector=collector,
        brain=NodeBrain(settings),
        evictor=evictor,
        throttler=throttler,
        interval=args.interval,
        publishers=publishers,
        evictions_performed=not (args.local or args.dry_run),
        dry_run=args.dry_run,
    )
    server = None
    if args.metrics_addr and args.metrics_addr != "off":
        server = MetricsServer(args.metrics_addr, metrics, health)
    return Agent(loop, throttler, metrics, health, server, stop_source)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_format or ("console" if args.local else "json"), args.log_level)
    log = structlog.get_logger()
    if args.interval <= 0:
        log.error("--interval must be > 0 seconds", interval=args.interval)
        return 2
    if args.ticks is not None and args.ticks < 1:
        log.error("--ticks must be >= 1", ticks=args.ticks)
        return 2
    if args.local and not args.objects:
        log.error("--local needs --objects PATH (a YAML file or a folder of them)")
        return 2
    try:
        agent = build_agent(args)
    except (OSError, ValueError) as err:
        log.error("agent not started", error=str(err))
        return 2
    agent.restore_all("start-up: a previous run left pods throttled")
    if agent.server is not None:
        agent.server.start()
        log.info("serving metrics", addr=args.metrics_addr, port=agent.server.port)

    def stop(signum: int, _frame: Any) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        agent.loop.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
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
        agent.restore_all("exit")
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
