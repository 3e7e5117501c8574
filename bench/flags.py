"""Flags refused before a benchmark starts anything: one line naming the flag, exit 2.

``python -m bench`` refuses an unknown benchmark that way; a benchmark's own flags out of
range must be refused the same way before it starts a cluster, makes a tree or ticks for
minutes (a soak given ``--churn -1`` once would have started a cluster and then deleted all
but one of its churning pods a minute: ``pods[:-1]``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

#: (flag, the test its value must pass, what that test says)
Limit = tuple[str, Callable[[float], bool], str]


class OneLine(argparse.ArgumentParser):
    """An argument parser whose refusals are one line on stderr and exit 2 (not argparse's
    usage block), as ``python -m bench`` refuses what it cannot run."""

    def __init__(self, name: str, **kwargs: object) -> None:
        super().__init__(prog=f"python -m bench {name}", **kwargs)  # type: ignore[arg-type]
        self.name = name

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):  # where a user finds the right ones
            message += f" ({self.prog} --help lists the flags)"
        print(f"{self.name}: {message}", file=sys.stderr)
        raise SystemExit(2)


def check(parser: OneLine, args: argparse.Namespace, limits: Sequence[Limit]) -> None:
    """Refuses (one line, exit 2) the first flag whose value fails its limit."""
    for flag, ok, need in limits:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None and not ok(value):
            parser.error(f"{flag} {need}, got {value:g}")


def pod_counts(text: str) -> list[int]:
    """``--pods 50,250``: comma-separated counts, each at least 1 (an argparse type)."""
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated pod counts, got {text!r}"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"every pod count must be >= 1, got {text!r}")
    return counts
