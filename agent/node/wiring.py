"""Build the agent from its arguments: where the objects come from (the API server's
watches in a cluster, ``--objects`` files in local mode), what an eviction is, and the
loop with its publishers and after-tick hooks."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.defaults import (
    NODE_NAME_ENV,
)
from agent.metrics import AgentMetrics
from agent.model.settings import AgentSettings
from agent.node.config_file import ConfigFile
from agent.node.console import ConsoleView
from agent.node.dryrun import ReportingEvictor
from agent.node.eviction_memory import EvictionMemory
from agent.node.holding import HeldKeeper, InOrder
from agent.node.host import build_host_parts
from agent.node.lifecycle import Agent
from agent.node.loop import AfterTick, NodeLoop, Objects, Publisher
from agent.node.publish import MetricsPublisher
from agent.node.resume import Resume
from agent.node.tick import NodeBrain
from agent.serving import Health, MetricsServer
from executors.actuators import NODE_STATUS, Actuator, Holder, Reported

if TYPE_CHECKING:
    from agent.kube.watching import WatchArgs


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
    evictor: Actuator
    source_ready: Callable[[], bool] | None = None
    stop_source: Callable[[], None] | None = None
    effects: Publisher | None = None
    before_tick: list[Callable[[], None]] = []
    uninstalled: Callable[[], bool | None] | None = None
    #: The node's batch capacity in its status (none in local mode: no API server).
    status: tuple[Actuator, ...] = ()
    holders: tuple[Holder, ...] = ()
    # Local mode's rules, all here: the objects come from files (no API server); an
    # eviction is reported, never performed (ReportingEvictor), so the pod still runs and
    # the brain keeps nothing of it as released (``evictions_performed`` below ->
    # NodeState.forget_evictions); no eviction memory is kept (nothing was evicted); and
    # every cap is released on exit (Agent.on_exit). --dry-run shares the eviction rules.
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
        if args.dry_run:
            status = (Reported("node-status", NODE_STATUS, "--dry-run"),)
        else:
            status, holders = (parts.status,), (parts.status,)
    host = build_host_parts(
        args.cgroup_root,
        args.proc_root,
        args.kubelet_cgroup_root,
        args.state_dir,
        args.dry_run,
        settings,
        args.node_cpu,
    )
    collector, throttler, isolator = host.collector, host.throttler, host.isolator
    metrics = AgentMetrics()
    metrics.writes_through_systemd.set(1 if host.through_systemd else 0)
    # Caps and marks that survive systemd, one keeper for both (agent.node.holding): the
    # caps read back before each tick, the marks as each tick asks for them.
    held = [h for h in (host.limiter, throttler) if h is not None]  # limits under caps: first
    keeper = HeldKeeper(brain, lambda control, n: metrics.caps_reverted.labels(control).inc(n),
                        caps=InOrder(*held) if held else None)  # fmt: skip
    if held:
        before_tick.append(keeper)
    if isolator is not None:
        isolator.on_reverted = keeper.reverted_mark
    if host.limiter is not None:
        host.limiter.on_reverted = keeper.reverted_mark
    health = Health(stale_after=max(30.0, 10 * args.interval), source_ready=source_ready)
    publishers: list[Publisher] = [MetricsPublisher(metrics, health)]
    if effects is not None:
        publishers.append(effects)
    if args.local and not args.no_console:
        publishers.append(ConsoleView(sys.stdout))
    after_tick: list[AfterTick] = []
    if not (args.local or args.dry_run):  # the only mode that evicts
        memory = EvictionMemory(args.state_dir, brain)
        memory.load(time.time())
        after_tick.append(memory)
    if config is not None:
        after_tick.append(config.reloader(brain, collector))
    loop = NodeLoop(
        node_name=node_name,
        source=source,
        collector=collector,
        brain=brain,
        actuators=(evictor, *status, *host.actuators),
        interval=args.interval,
        publishers=publishers,
        after_tick=after_tick,
        evictions_performed=not (args.local or args.dry_run),
        dry_run=args.dry_run,
        prepare=None if throttler is None and isolator is None
        else Resume(brain, throttler, isolator, host.limiter),
        before_tick=before_tick,
    )
    server = None
    if args.metrics_addr and args.metrics_addr != "off":
        server = MetricsServer(args.metrics_addr, metrics, health)
    return Agent(loop, (*host.holders, *holders), metrics, health, server, stop_source, uninstalled)
