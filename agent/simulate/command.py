"""`waterline simulate SCENARIO`: print one JSON report; exit 2 on invalid input."""

from __future__ import annotations

import argparse
import json
import sys

from agent.errors import InvalidObject
from agent.scenario import load_scenario
from agent.simulate.sections import build_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario file (YAML, or JSON when it ends in .json)")
    parser.add_argument("--html", metavar="REPORT.html", help="also write a self-contained HTML report")
    parser.add_argument("--indent", type=int, default=None, help="pretty-print the JSON")


def run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
        report = build_report(scenario)
    except InvalidObject as err:
        print(f"invalid scenario: {err}", file=sys.stderr)
        return 2
    json.dump(report, sys.stdout, indent=args.indent, sort_keys=False)
    sys.stdout.write("\n")
    if args.html:
        from agent.simulate.html import write_html

        write_html(report, scenario, args.html)
    return 0
