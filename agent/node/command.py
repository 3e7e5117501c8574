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
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
import yaml

from agent.defaults import (
    AGENT_DAEMONSET,
    CGROUP_ROOT,
    NAMESPACE,
    NODE_NAME_ENV,
    POD_NAMESPACE_ENV,
    PROC_ROOT,
    STATE_DIR,
)
from agent.errors import InvalidObject
from agent.logs import FORMATS, LEVELS, configure_logging
from agent.metrics import DEFAULT_ADDR, AgentMetrics, Health, MetricsServer
from agent.model.fields import Fields, bad
from agent.model.settings import CONFIG_SECTIONS, AgentSettings, parse_agent_settings
from agent.node.console import ConsoleView
from agent.node.dryrun import DryRunThrottler, ReportingEvictor
from agent.node.eviction_memory import EvictionMemory
from agent.node.holding import CapKeeper
from agent.node.loop import NodeLoop, Objects, Publisher, TickOutcome
from agent.node.publish import MetricsPublisher
from agent.node.resume import Resume
from agent.node.sampling import NODE_CPU_SOURCES, CountingLog, HostCollector
from agent.node.tick import NodeBrain
from executors.actuators import CpuThrottler, Evictor
from executors.cgroup_throttle import CgroupThrottler

if TYPE_CHECKING:
    from agent.kube.watching import WatchArgs


RELEASE = "release"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "verb",
        nargs="?",
        choices=[RELEASE],
        help="release: write back the original CPU quota of every container the state "
        "file names, and forget them (stop the agent first); none: run the agent",
    )
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
        "--config",
        default=None,
        metavar="PATH",
        help="YAML file whose 'agent:' section sets executeExcessPercent and extCpuResource "
        "(re-read on change; a bad edit keeps the last good settings)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="in a cluster: kubeconfig (default: the service account, else $KUBECONFIG)",
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get(POD_NAMESPACE_ENV) or NAMESPACE,
        help=f"Waterline's namespace: the cluster brake ConfigMap and the agent's DaemonSet "
        f"live there (default: ${POD_NAMESPACE_ENV}, else %(default)s)",
    )
    parser.add_argument(
        "--daemonset",
        default=AGENT_DAEMONSET,
        help="the agent's own DaemonSet: when it is gone or being deleted as the agent stops, "
        "the agent is being uninstalled and releases every cap (default %(default)s)",
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
    #: In a cluster: is the agent's own DaemonSet gone or being deleted? (None: unknown)
    uninstalled: Callable[[], bool | None] | None = None

    def restore_all(self, why: str) -> None:
        """Hand every cap of the state file back (the originals, exactly)."""
        restore_all = getattr(self.throttler, "restore_all", None)
        if restore_all is None:
            return
        restored = restore_all()
        self.loop.brain.state.throttled.clear()
        if restored:
            structlog.get_logger().info("caps released", why=why, pods=len(restored))

    def on_exit(self) -> None:
        """Local mode releases every cap; in a cluster only an uninstall does, and a
        restart leaves them for the next agent to adopt."""
        log = structlog.get_logger()
        if self.uninstalled is None:
            self.restore_all("local mode: the agent exits")
            return
        held = len(self.loop.brain.caps())
        uninstalled = self.uninstalled()
        if uninstalled:
            self.restore_all("the agent's DaemonSet is gone or being deleted: uninstall")
        elif uninstalled is None:
            log.warning("could not tell a restart from an uninstall (API unreachable): caps "
                        "kept for the next agent; `waterline agent release` hands them back",
                        pods=held)
        elif held:
            log.info("caps kept for the next agent to adopt (a restart, not an uninstall)",
                     pods=held)


def read_config(path: str) -> AgentSettings:
    """The ``agent:`` section of a YAML config file; InvalidObject names the bad field."""
    with open(path, encoding="utf-8") as f:
        try:
            doc = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise InvalidObject("config", path, "", f"not valid YAML: {err}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise bad("config", path, "", "must be a mapping with an 'agent' section", doc)
    Fields("config", path).only(doc, CONFIG_SECTIONS)
    return parse_agent_settings(doc.get("agent"), "config", path, prefix="agent.")


class ConfigFile:
    """``--config``: read at start (a bad file stops the start), re-read when its mtime or
    size changes; a bad edit is logged and the last good settings stay in force."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._signature = self._stat()
        self.settings = read_config(path)

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def changed(self) -> AgentSettings | None:
        """New settings if the file changed and parses, else None."""
        signature = self._stat()
        if signature == self._signature:
            return None
        self._signature = signature
        try:
            settings = read_config(self.path)
        except (OSError, InvalidObject) as err:
            structlog.get_logger().error(
                "config file unreadable or invalid: keeping the last good settings",
                path=self.path,
                error=str(err),
            )
            return None
        if settings == self.settings:
            return None
        self.settings = settings
        structlog.get_logger().info(
            "config reloaded",
            path=self.path,
            execute_excess_percent=settings.execute_excess_percent,
            ext_cpu_resource=settings.ext_cpu_resource,
        )
        return settings

    def reloader(self, brain: NodeBrain, collector: HostCollector) -> Publisher:
        """A publisher that applies a changed file from the next tick on."""

        def reload(_outcome: TickOutcome) -> None:
            settings = self.changed()
            if settings is not None:
                brain.settings = settings
                # The pod collector reports extended-CPU usage by this resource name.
                collector.pod_stats.ext_cpu_resource = settings.ext_cpu_resource

        return reload


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


def build_agent(args: argparse.Namespace, watch_args: WatchArgs | None = None) -> Agent:
    """Build the agent from its arguments (``watch_args``: the watches' timeouts and
    backoff, for tests). Raises InvalidObject for a bad --config, OSError/ValueError for
    anything else that prevents a start."""
    config = ConfigFile(args.config) if args.config else None
    settings = config.settings if config is not None else AgentSettings()
    brain = NodeBrain(settings)
    evictor: Evictor
    source_ready: Callable[[], bool] | None = None
    stop_source: Callable[[], None] | None = None
    effects: Publisher | None = None
    before_tick: list[Callable[[], None]] = []
    uninstalled: Callable[[], bool | None] | None = None
    if args.local:
        source, node_name = _local_source(args)
        evictor = ReportingEvictor("local mode: there is no API server")
    else:
        from agent.kube.client import build_api
        from agent.node.incluster import start_cluster

        node_name = args.node_name or os.environ.get(NODE_NAME_ENV) or socket.gethostname()
        parts = start_cluster(
            build_api(args.kubeconfig), node_name, args.dry_run, watch_args,
            namespace=args.namespace, daemonset=args.daemonset, state_dir=args.state_dir,
            budget_seconds=lambda: brain.settings.api_time_budget_seconds,
            answer_seconds=lambda: brain.settings.eviction_answer_seconds,
        )  # fmt: skip
        source, source_ready, stop_source, effects = (
            parts.source,
            parts.ready,
            parts.stop,
            parts.effects,
        )
        before_tick.append(parts.budget.start)
        uninstalled = parts.uninstalled
        evictor = ReportingEvictor("--dry-run") if args.dry_run else parts.evictor
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
    if isinstance(throttler, CgroupThrottler):  # caps that survive systemd: agent.node.holding
        before_tick.append(CapKeeper(
            throttler, brain, lambda control, n: metrics.caps_reverted.labels(control).inc(n)))  # fmt: skip
    health = Health(stale_after=max(30.0, 10 * args.interval), source_ready=source_ready)
    publishers: list[Publisher] = [MetricsPublisher(metrics, health)]
    if effects is not None:
        publishers.append(effects)
    if not (args.local or args.dry_run):  # the only mode that evicts
        memory = EvictionMemory(args.state_dir, brain)
        memory.load(time.time())
        publishers.append(memory)
    if config is not None:
        publishers.append(config.reloader(brain, collector))
    if args.local and not args.no_console:
        publishers.append(ConsoleView(sys.stdout))
    loop = NodeLoop(
        node_name=node_name,
        source=source,
        collector=collector,
        brain=brain,
        evictor=evictor,
        throttler=throttler,
        interval=args.interval,
        publishers=publishers,
        evictions_performed=not (args.local or args.dry_run),
        dry_run=args.dry_run,
        prepare=Resume(brain, throttler) if isinstance(throttler, CgroupThrottler) else None,
        before_tick=before_tick,
    )
    server = None
    if args.metrics_addr and args.metrics_addr != "off":
        server = MetricsServer(args.metrics_addr, metrics, health)
    return Agent(loop, throttler, metrics, health, server, stop_source, uninstalled)


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
        log.info("serving metrics", addr=args.metrics_addr, port=agent.server.port)

    def stop(signum: int, _frame: Any) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        agent.loop.stop()

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
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


def release(args: argparse.Namespace) -> int:
    """`waterline agent release`: write back the original quota of every container the
    state file names, exactly as it was, and forget them. Exit 1 when some could not be
    written (they stay in the file: run it again)."""
    from collectors.cgroups import detect_mounts
    from collectors.layout import PodCgroupLayout
    from executors.cgroup_throttle import CgroupThrottler
    from executors.quota_state import QuotaState

    log = structlog.get_logger()
    try:
        mounts = detect_mounts(args.cgroup_root, args.proc_root)
        probe = mounts.controller_root("cpu") or mounts.controller_root("cpuacct") or args.cgroup_root
        throttler = CgroupThrottler(
            mounts, QuotaState(args.state_dir), PodCgroupLayout(probe, args.kubelet_cgroup_root)
        )
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
