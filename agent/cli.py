"""The `waterline` command: a table of sub-commands, each in its own module.

A sub-command module provides ``add_arguments(parser)`` and ``run(args) -> int``. Modules
are imported only when their command runs, so `waterline simulate` never pays for the
Kubernetes client and a broken optional module cannot break the others.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class Command:
    name: str
    module: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("simulate", "agent.simulate.command", "replay a scenario through the real decision code"),
    Command("agent", "agent.node.command", "run the node agent (in a cluster, or --local)"),
    Command("capture", "agent.capture.command", "record a live node into a scenario for simulate"),
    Command("local-objects", "agent.node.local_objects", "write --local objects for the pods running on this machine"),
    Command("controller", "agent.cluster.command", "run the leader-elected cluster controller"),
)


DESCRIPTION = "Waterline: node-level QoS for Kubernetes."


def version() -> str:
    """The installed distribution's version (the image, a wheel or an editable install)."""
    try:
        return metadata.version("waterline")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _commands(commands: Sequence[Command]) -> str:
    return "\n".join(f"  {c.name:<14} {c.help}" for c in commands)


def _top_parser(commands: Sequence[Command], prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [-h] [--version] COMMAND [ARGS...]",
        description=description,
        epilog=f"commands:\n{_commands(commands)}\n\nRun `{prog} COMMAND --help` for its options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"waterline {version()}")
    parser.add_argument(
        "command",
        choices=[c.name for c in commands],
        metavar="COMMAND",
        help="one of the commands below",
    )
    return parser


def main(argv: list[str] | None = None, commands: Sequence[Command] = COMMANDS,
         prog: str = "waterline", description: str = DESCRIPTION) -> int:
    """Run one command of the table ``commands`` (the dev tools have a table of their
    own, ``python -m devtools``, run from a checkout)."""
    argv = sys.argv[1:] if argv is None else argv
    top = _top_parser(commands, prog, description)
    if not argv:
        # argparse would say "the following arguments are required: COMMAND": list them.
        print(f"usage: {top.usage}\n\ncommands:\n{_commands(commands)}", file=sys.stderr)
        return 2
    command = next(c for c in commands if c.name == top.parse_args(argv[:1]).command)
    try:
        module = importlib.import_module(command.module)
        parser = argparse.ArgumentParser(prog=f"{prog} {command.name}", description=command.help)
        module.add_arguments(parser)
        args = parser.parse_args(argv[1:])
        return int(module.run(args) or 0)
    except BrokenPipeError:
        # stdout's reader went away (`waterline simulate ... | head`): not an error of
        # ours; stdout is pointed at /dev/null so the interpreter's final flush is quiet.
        with contextlib.suppress(OSError, ValueError):  # no file descriptor (tests)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as the shell's own tools end
    except KeyboardInterrupt:
        # Ctrl-C before a command set its own handlers (imports take a moment): the
        # `finally` blocks on the way have run; one line, the shell's code for SIGINT.
        print(f"{prog} {command.name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
