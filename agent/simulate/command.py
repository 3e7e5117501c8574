"""`waterline simulate SCENARIO`: print one JSON report; exit 2 on invalid input.

Exit 2, with one line on stderr, for a scenario that cannot be read or is invalid and for
an ``--html`` path that cannot be written: the path is tried before the simulation runs,
so a long run is not wasted on a typo in the report's folder.

``--policies DIR`` replays the scenario with the policies and actions of DIR in place of
its own (``agent.simulate.policies``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from agent.errors import InvalidObject
from agent.scenario import load_scenario
from agent.simulate.sections import build_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario file (YAML, or JSON when it ends in .json)")
    parser.add_argument("--html", metavar="REPORT.html", help="also write a self-contained HTML report")
    parser.add_argument("--indent", type=int, default=None, help="pretty-print the JSON")
    parser.add_argument(
        "--policies",
        metavar="DIR",
        help="replay with the NodeQOSEnsurancePolicies and AvoidanceActions of DIR (a folder "
        "or a file) in place of the scenario's",
    )


def writable(path: str) -> str | None:
    """Why ``path`` cannot be written, or None. Opening it is the only exact test (root
    passes every permission check, yet not a read-only mount or a folder); a file made
    only for the test is removed again."""
    if os.path.isdir(path):
        return "it is a directory"
    existed = os.path.lexists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as err:
        return err.strerror or str(err)
    if not existed:
        os.unlink(path)
    return None


def run(args: argparse.Namespace) -> int:
    if args.html:
        why = writable(args.html)
        if why is not None:
            print(f"cannot write the HTML report to {args.html}: {why}", file=sys.stderr)
            return 2
    try:
        scenario = load_scenario(args.scenario)
    except InvalidObject as err:
        print(f"invalid scenario: {err}", file=sys.stderr)
        return 2
    if args.policies:
        from agent.simulate.policies import read_policies, replace_policies

        try:
            found, ignored = read_policies(args.policies)
        except InvalidObject as err:
            print(f"invalid policies: {err}", file=sys.stderr)
            return 2
        if ignored:
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(ignored.items()))
            print(f"--policies {args.policies}: ignored {kinds}", file=sys.stderr)
        replace_policies(scenario, found)
    try:
        report = build_report(scenario)
    except InvalidObject as err:
        print(f"invalid scenario: {err}", file=sys.stderr)
        return 2
    if args.html:  # first: a reader that stops reading stdout early must not cost the page
        from agent.simulate.html import write_html

        try:
            write_html(report, scenario, args.html)
        except OSError as err:
            print(f"cannot write the HTML report to {args.html}: {err.strerror or err}", file=sys.stderr)
            return 2
    json.dump(report, sys.stdout, indent=args.indent, sort_keys=False)
    sys.stdout.write("\n")
    return 0
