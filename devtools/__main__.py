"""`python -m devtools COMMAND`: the development tools, run from a checkout.

They are not part of the installed distribution nor of the image (pyproject.toml packages
only agent, collectors and executors): a demo that builds cgroup trees and a generator of
synthetic clusters are for the people who work on Waterline, not for the nodes it runs
on. ``make demo`` runs the demo this way; ``python -m devtools`` with no command lists
them. The real Kubernetes control plane the tests use is ``python -m devtools.cluster``
(``make cluster``), and the harness the tests and benchmarks share is devtools.harness.
"""

from __future__ import annotations

import sys

from agent.cli import Command, main

COMMANDS: tuple[Command, ...] = (
    Command("demo", "devtools.demo.command", "throttle real busy processes in real cgroups, then restore them"),
    Command("generate", "devtools.generate.command", "write a synthetic cluster scenario (for benchmarks)"),
)


def run(argv: list[str] | None = None) -> int:
    return main(argv, COMMANDS, prog="python -m devtools",
                description="Waterline's development tools (from a checkout).")


if __name__ == "__main__":
    sys.exit(run())
