"""The `waterline` command: a table of sub-commands, each in its own module.

A sub-command module provides ``add_arguments(parser)`` and ``run(args) -> int``. Modules
are imported only when their command runs, so `waterline simulate` never pays for the
Kubernetes client and a broken optional module cannot break the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    module: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("simulate", "agent.simulate.command", "replay a scenario through the real decision code"),
    Command("agent", "agent.node.command", "run the node agent (in a cluster, or --local)"),
    Command("capture", "agent.capture.command", "record a live node into a scenario for simulate"),
    Command("controller", "agent.cluster.command", "run the leader-elected cluster controller"),
    Command("dev-apiserver", "devtools.apiserver.command", "a local Kubernetes-shaped API server for tests and demos"),
    Command("generate", "devtools.generate.command", "write a synthetic cluster scenario (for benchmarks)"),
    Command("demo", "devtools.demo.command", "throttle real busy processes in real cgroups, then restore them"),
)


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {c.name:<14} {c.help}" for c in COMMANDS)
    parser = argparse.ArgumentParser(
        prog="waterline",
        description="Waterline: node-level QoS for Kubernetes.",
        epilog=f"commands:\n{lines}\n\nRun `waterline COMMAND --help` for its options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=[c.name for c in COMMANDS], metavar="COMMAND")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    top = _top_parser().parse_args(argv[:1] if argv else argv)
    command = next(c for c in COMMANDS if c.name == top.command)
    module = importlib.import_module(command.module)
    parser = argparse.ArgumentParser(prog=f"waterline {command.name}", description=command.help)
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
