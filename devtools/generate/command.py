"""`python -m devtools generate`: write the scenario to a file (atomically) or stdout, and its
summary as one JSON line on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agent.errors import InvalidObject
from devtools.generate.args import GenerateArgs
from devtools.generate.cluster import generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = GenerateArgs()
    parser.add_argument("--nodes", type=int, default=d.nodes, help="nodes (default %(default)s)")
    parser.add_argument(
        "--pods", type=int, default=d.pods, help="pods, all kinds and phases (default %(default)s)"
    )
    parser.add_argument(
        "--jobs", type=int, default=d.jobs, help="PodMigrationJobs (default %(default)s)"
    )
    parser.add_argument("--queues", type=int, default=d.queues, help="Queues (default %(default)s)")
    parser.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="random seed; same seed, same file (default %(default)s)",
    )
    parser.add_argument("--now", default=d.now, help="the scenario's clock (default %(default)s)")
    parser.add_argument(
        "--out", required=True, help="where to write the JSON scenario ('-' for stdout)"
    )


def run(args: argparse.Namespace) -> int:
    gen_args = GenerateArgs(args.nodes, args.pods, args.jobs, args.queues, args.seed, args.now)
    try:
        gen_args.validate()
    except InvalidObject as err:
        print(f"python -m devtools generate: {err}", file=sys.stderr)
        return 2
    if args.out == "-":
        summary = generate(gen_args, sys.stdout)
    else:
        path = Path(args.out)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w") as out:
            summary = generate(gen_args, out)
        tmp.replace(path)
    print(json.dumps(summary), file=sys.stderr)
    return 0
