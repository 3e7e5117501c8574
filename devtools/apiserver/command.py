"""`waterline dev-apiserver`: a workstation's Kubernetes API server for trying policies
with kubectl, the agent and the controller (never production: no auth, no persistence, one
process). Loaded with manifests (files or directories), it writes a kubeconfig for itself.

Exit codes: 0 after SIGINT/SIGTERM, 2 when a manifest cannot be read or is refused (the
message names the file or the object) or the port cannot be bound.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from devtools.apiserver.catalog import BUILTINS
from devtools.apiserver.manifests import files
from devtools.apiserver.server import DevServer, ManifestError, read_manifests
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
        help="a YAML/JSON manifest file, or a directory of them, to load at start "
        "(repeatable; CustomResourceDefinitions are created first)",
    )
    parser.add_argument(
        "--kubeconfig-out",
        default=None,
        metavar="PATH",
        help="write a kubeconfig for this server here (default: waterline-dev-<port>.kubeconfig "
        "in the temporary directory; the path is printed)",
    )
    parser.add_argument(
        "--pod-grace-cap",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="longest time a deleted pod stays terminating (there is no kubelet)",
    )
    parser.add_argument("--bookmark-interval", type=float, default=5.0, metavar="SECONDS")


def _load(server: DevServer, objects: list[tuple[str, dict[str, Any]]]) -> int:
    """Create the objects, CRDs first; ManifestError naming the file of a refused one."""
    objects = sorted(objects, key=lambda o: o[1].get("kind") != "CustomResourceDefinition")
    for source, obj in objects:
        try:
            server.load([obj])
        except ManifestError as err:
            raise ManifestError(f"{source}: {err}") from None
    return len(objects)


def run(args: argparse.Namespace) -> int:
    try:
        objects = [
            (str(file), obj)
            for path in args.objects
            for file in files(path)
            for obj in read_manifests(file)
        ]
        server = DevServer(
            Store(BUILTINS, grace_cap=args.pod_grace_cap),
            args.host,
            args.port,
            args.bookmark_interval,
        )
    except ManifestError as err:
        print(f"dev-apiserver: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(
            f"dev-apiserver: cannot listen on {args.host}:{args.port}: {err.strerror or err}",
            file=sys.stderr,
        )
        return 2
    server.seed_namespaces()
    try:
        count = _load(server, objects)
    except ManifestError as err:
        print(f"dev-apiserver: {err}", file=sys.stderr)
        server.httpd.server_close()
        return 2
    server.start()
    kubeconfig = Path(
        args.kubeconfig_out
        or Path(tempfile.gettempdir()) / f"waterline-dev-{server.port}.kubeconfig"
    ).absolute()  # the printed `export KUBECONFIG=` works from any directory
    server.write_kubeconfig(kubeconfig)
    print(
        f"dev-apiserver (NOT for production) serving {server.url} with {count} objects; "
        f"kubeconfig: {kubeconfig}\n"
        f"  export KUBECONFIG={kubeconfig}",
        flush=True,
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop()
    if not args.kubeconfig_out:
        kubeconfig.unlink(missing_ok=True)
    print("dev-apiserver stopped", file=sys.stderr)
    return 0
