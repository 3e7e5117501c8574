"""`waterline controller`: the leader-elected cluster controller (see controller.py).

Exit codes: 0 after a clean stop (SIGTERM/SIGINT: the work stops, the lease is released,
the watches end), 2 for bad flags or a bad ``--config`` (the message names the field).
The lease name and namespace default to $LEASE_NAME / $LEASE_NAMESPACE (set by
deploy/controller.yaml), else the project defaults; the identity to $POD_NAME (the
downward API, as deploy/controller.yaml sets it: the Lease then names the pod that holds
it), else ``<hostname>_<pid>``, unique even for two replicas on one host.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any, cast

import structlog
import yaml

from agent.defaults import CONTROLLER_LEASE_NAME, CONTROLLER_LEASE_NAMESPACE
from agent.errors import InvalidObject
from agent.logs import FORMATS, LEVELS, configure_logging
from agent.serving import DEFAULT_ADDR, Health, MetricsServer
from agent.signal_stop import SignalStop

DEFAULT_INTERVAL = 60.0


def default_identity() -> str:
    """$POD_NAME, else ``<hostname>_<pid>``."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig (default: the service account in a cluster, else $KUBECONFIG)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between rounds (default: arbitration.interval of --config, else 60)",
    )
    parser.add_argument(
        "--lease-name",
        default=os.environ.get("LEASE_NAME") or CONTROLLER_LEASE_NAME,
        help="the leader-election Lease (default %(default)s)",
    )
    parser.add_argument(
        "--lease-namespace",
        default=os.environ.get("LEASE_NAMESPACE") or CONTROLLER_LEASE_NAMESPACE,
        help="its namespace (default %(default)s)",
    )
    parser.add_argument(
        "--identity",
        default=default_identity(),
        help="holder identity written into the Lease (default: $POD_NAME, else "
        "<hostname>_<pid>; here %(default)s)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="PATH",
        help="YAML with sections arbitration, defrag, queues, daemonset (SIMULATE.md config), "
        "clusterEvictionBudget and migration (docs/controller.md); `enabled: true` in "
        "defrag/queues/daemonset lets the controller act on their plans",
    )
    parser.add_argument(
        "--metrics-addr",
        default=DEFAULT_ADDR,
        help="serve /metrics, /healthz, /readyz here (default %(default)s; 'off' disables)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="plan and log every decision, write nothing"
    )
    parser.add_argument("--log-format", choices=FORMATS, default="json")
    parser.add_argument("--log-level", choices=LEVELS, default="info")


def load_config(path: str | None) -> tuple[Any, float | None]:
    """The parsed config and the arbitration interval it sets (None when unset).
    Raises InvalidObject naming the field, or OSError / yaml.YAMLError."""
    from agent.cluster import arbitration
    from agent.cluster.config import parse_config

    if path is None:
        return parse_config(None), None
    raw = yaml.safe_load(Path(path).read_text())
    config = parse_config(raw)
    interval = None
    if isinstance(raw, dict) and isinstance(raw.get("arbitration"), dict):
        value = raw["arbitration"].get("interval")
        interval = config.args(arbitration.ENGINE).interval if value is not None else None
    return config, interval


class _Refused(Exception):
    """A flag, the config or the environment is unusable: logged already, exit 2."""


def _settings(args: argparse.Namespace, log: Any) -> tuple[Any, float]:
    """The parsed config and the round interval (flag, else config, else the default)."""
    try:
        config, config_interval = load_config(args.config)
    except InvalidObject as err:
        log.error("invalid config", path=args.config, error=str(err), field=err.field)
        raise _Refused from None
    except (OSError, yaml.YAMLError) as err:
        log.error("cannot read config", path=args.config, error=str(err))
        raise _Refused from None
    interval = args.interval if args.interval is not None else config_interval or DEFAULT_INTERVAL
    if interval <= 0:
        log.error("--interval must be > 0 seconds", interval=interval)
        raise _Refused
    if not args.identity:
        log.error("--identity must not be empty")
        raise _Refused
    return config, interval


def _metrics_server(addr: str, metrics: Any, health: Health, log: Any) -> MetricsServer | None:
    if not addr or addr == "off":
        return None
    try:
        server = MetricsServer(addr, metrics, health)
    except (OSError, ValueError) as err:
        log.error("cannot serve metrics", addr=addr, error=str(err))
        raise _Refused from None
    server.start()
    log.info("serving metrics", addr=addr, port=server.port)
    return server


def _stop_on_signals(log: Any) -> threading.Event:
    stop = threading.Event()

    def on_signal(name: str) -> None:  # on SignalStop's thread: logging here cannot deadlock
        log.info("stopping", signal=name)
        stop.set()

    SignalStop(on_signal, (signal.SIGTERM, signal.SIGINT))
    return stop


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_format, args.log_level)
    log = structlog.get_logger("waterline.cluster")
    from agent.cluster.access import controller_access
    from agent.cluster.controller import Controller, ControllerDeps
    from agent.cluster.health import ControllerHealth
    from agent.cluster.resources import WATCHES
    from agent.kube.client import ClientArgs, build_api

    try:
        config, interval = _settings(args, log)
        try:
            # One connection per watch, plus room for the lease and the writes.
            api = build_api(
                args.kubeconfig,
                args=ClientArgs(pool_size=len(WATCHES) + 8),
                access=controller_access(args.lease_namespace, args.lease_name),
            )
        except Exception as err:  # kubeconfig errors come in many types
            log.error("cannot build the API client", error=str(err))
            return 2
        deps = ControllerDeps(
            api, args.identity, lease_namespace=args.lease_namespace, lease_name=args.lease_name
        )
        controller = Controller(deps, config, interval=interval, dry_run=args.dry_run)
        health = ControllerHealth(
            controller.board,
            stale_after=max(30.0, 3 * interval),
            source_ready=lambda: bool(controller.synced),
            leading=controller.is_leader,
        )
        server = _metrics_server(args.metrics_addr, cast(Any, controller.metrics), health, log)
    except _Refused:
        return 2
    stop = _stop_on_signals(log)
    log.info(
        "controller config",
        identity=args.identity,
        lease=f"{args.lease_namespace}/{args.lease_name}",
        interval=interval,
        dry_run=args.dry_run,
        enabled=sorted(config.enabled),
    )
    try:
        controller.run(stop, on_beat=health.beat)
    finally:
        if server is not None:
            server.stop()
        api.close()
    return 0
