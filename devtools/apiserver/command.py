"""`waterline dev-apiserver`: run the local Kubernetes-shaped API server (for tests and
demos, never production), loaded with manifests, and write a kubeconfig for it."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from devtools.apiserver.server import DevServer, read_manifests
from devtools.apiserver.store import Store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: pick a free one)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default loopback only)"
    )
    parser.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="PATH",
        help="YAML/JSON manifests to load (repeatable)",
    )
    parser.add_argument(
        "--kubeconfig-out",
        required=True,
        metavar="PATH",
        help="write a kubeconfig for this server here",
    )
    parser.add_argument(
        "--pod-grace-cap",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="longest time a deleted pod stays terminating (there is no kubelet)",
    )
    parser.add_argument("--bookmark-interval", type=float, default=5.0, metavar="SECONDS")


def run(args: argparse.Namespace) -> int:
    store = Store(grace_cap=args.pod_grace_cap)
    server = DevServer(store, args.host, args.port, args.bookmark_interval)
    count = 0
    for path in args.objects:
        count += server.load(read_manifests(path))
    server.start()
    server.write_kubeconfig(args.kubeconfig_out)
    print(
        f"dev-apiserver (NOT for production) serving {server.url} with {count} objects; kubeconfig: {args.kubeconfig_out}",
        flush=True,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop()
    print("dev-apiserver stopped", file=sys.stderr)
    return 0
