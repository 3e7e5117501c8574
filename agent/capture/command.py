"""`waterline capture -o SCENARIO`: run the node agent and record what it decided on.

It takes `waterline agent`'s options, and:

* ``--local --objects PATH``: the agent runs here as `waterline agent --local` does, and
  acts (unless ``--dry-run``): its throttling shows in the samples as capped figures.
  Throttled pods are restored at start and on exit, as the local agent does.
* ``--kubeconfig`` / in a pod, with ``--node-name``: the capture watches a cluster node
  and acts on nothing (``--dry-run`` is implied): the node's own agent, the DaemonSet, is
  the one acting, and the caps it wrote are read from the cgroup tree.

``--duration SECONDS`` or ``--ticks N`` bound the recording (the earlier wins; neither:
until Ctrl-C or SIGTERM). The scenario is written when the recording ends, however it
ends (``.json``: JSON, which loads fast for long captures; else YAML). A progress line
goes to stderr; the agent's own log is at ``warning`` unless ``--log-level`` says else.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import structlog
import yaml

from agent.capture.caps import OwnCaps, QuotaCaps
from agent.capture.manifests import ClusterManifests, LocalManifests, scenario_objects
from agent.capture.recorder import Progress, Recorder, scenario_document
from agent.errors import InvalidObject
from agent.logs import configure_logging
from agent.node import arguments as agent_arguments
from agent.node import wiring as agent_wiring
from agent.node.local import FileObjectSource
from agent.node.loop import NodeLoop
from agent.signal_stop import SignalStop


def add_arguments(parser: argparse.ArgumentParser) -> None:
    agent_arguments.add_arguments(parser)
    for action in parser._actions:  # the agent's `release` verb means nothing to a capture
        if action.dest == "verb":
            action.help = argparse.SUPPRESS
    parser.add_argument(
        "-o", "--output", required=True, metavar="SCENARIO",
        help="the scenario to write (.json: JSON; else YAML)",
    )  # fmt: skip
    parser.add_argument(
        "--duration", type=float, default=None, metavar="SECONDS",
        help="record this long (with --ticks: whichever ends first)",
    )  # fmt: skip
    parser.set_defaults(metrics_addr="off", no_console=True, log_level="warning")


def tick_budget(args: argparse.Namespace) -> int | None:
    """How many ticks to record; None = until stopped."""
    budgets = [args.ticks] if args.ticks is not None else []
    if args.duration is not None:
        budgets.append(max(1, math.ceil(args.duration / args.interval - 1e-9)))
    return min(budgets) if budgets else None


def _caps_source(args: argparse.Namespace) -> Any:
    if args.local and not args.dry_run:
        return OwnCaps()
    from collectors.cgroups import detect_mounts
    from collectors.layout import PodCgroupLayout

    mounts = detect_mounts(args.cgroup_root, args.proc_root)
    root = mounts.controller_root("cpu") or args.cgroup_root
    return QuotaCaps(root, mounts.version, PodCgroupLayout(root, args.kubelet_cgroup_root))


def _manifests(args: argparse.Namespace, loop: NodeLoop) -> LocalManifests | ClusterManifests:
    if args.local:
        assert isinstance(loop.source, FileObjectSource)  # local mode's source
        return LocalManifests(loop.source)
    from agent.kube.client import build_api

    return ClusterManifests(build_api(args.kubeconfig), loop.node_name)


def write_document(path: str, doc: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a scenario."""
    target = Path(path)
    text = (
        json.dumps(doc, indent=1)
        if target.suffix == ".json"
        else yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)
    )
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check(args: argparse.Namespace) -> str | None:
    if getattr(args, "verb", None):
        return f"{args.verb!r} is a command of `waterline agent`, not of capture"
    if args.interval <= 0:
        return f"--interval must be > 0 seconds, got {args.interval}"
    if args.ticks is not None and args.ticks < 1:
        return f"--ticks must be >= 1, got {args.ticks}"
    if args.duration is not None and args.duration <= 0:
        return f"--duration must be > 0 seconds, got {args.duration}"
    if args.local and not args.objects:
        return "--local needs --objects PATH (a YAML file or a folder of them)"
    if not Path(args.output).resolve().parent.is_dir():
        return f"--output {args.output}: no such folder"
    return None


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_format or "console", args.log_level)
    log = structlog.get_logger()
    problem = _check(args)
    if problem:
        print(f"waterline capture: {problem}", file=sys.stderr)
        return 2
    if not args.local:
        args.dry_run = True  # the node's own agent acts; a capture only watches
    try:
        agent = agent_wiring.build_agent(args)
        manifests = _manifests(args, agent.loop)
    except InvalidObject as err:
        print(f"waterline capture: bad configuration: {err}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as err:  # a bad kubeconfig too (agent.kube.client)
        print(f"waterline capture: not started: {err}", file=sys.stderr)
        return 2
    total = tick_budget(args)
    recorder = Recorder(_caps_source(args))
    progress = Progress(sys.stderr, recorder, total)
    agent.loop.publishers.extend([recorder, manifests.refresh, progress])
    acting = args.local and not args.dry_run
    if acting:
        agent.restore_all("start-up: a previous run left pods throttled")

    SignalStop(lambda _name: agent.loop.stop(), (signal.SIGTERM, signal.SIGINT))
    try:
        agent.loop.run(total)
    finally:
        progress.done()
        if acting:
            agent.restore_all("exit")
        if agent.stop_source is not None:
            agent.stop_source()
    return _write(args, agent.loop.brain.settings, recorder, manifests, log)


def _write(
    args: argparse.Namespace, settings: Any, recorder: Recorder,
    manifests: LocalManifests | ClusterManifests, log: Any,
) -> int:  # fmt: skip
    if not recorder.samples or recorder.last is None:
        print("waterline capture: no tick made a decision: nothing written", file=sys.stderr)
        return 1
    try:
        manifests.finish()
    except Exception as err:  # noqa: BLE001 - write what was seen
        log.warning("the final listing of the objects failed", error=str(err))
    objects, dropped = scenario_objects(
        manifests.objects, recorder.last.node_record, recorder.last.node
    )
    for why in dropped:
        print(f"waterline capture: left out: {why}", file=sys.stderr)
    write_document(args.output, scenario_document(recorder, objects, settings))
    print(
        f"waterline capture: wrote {args.output}: {len(recorder.samples)} samples, "
        f"{len(objects)} objects",
        file=sys.stderr,
    )
    return 0
