"""``python -m devtools.cluster up|down|status|node|node-down`` (``make cluster``,
``make cluster-down``, ``make node``, ``make node-down``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from devtools.cluster.images import default_images, save_images
from devtools.cluster.launcher import Cluster, ClusterError
from devtools.cluster.node import RealNode, down_all

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.cluster", description=__doc__)
    parser.add_argument("verb", choices=["up", "down", "status", "node", "node-down"])
    parser.add_argument("--dir", type=Path, default=ROOT / ".cluster",
                        help="the cluster's folder (default %(default)s)")  # fmt: skip
    parser.add_argument("--bin", type=Path, default=None,
                        help="where the programs are (default DIR/bin, hack/cluster/build links them)")  # fmt: skip
    parser.add_argument("--nodes", type=int, default=3, help="kwok nodes to add (default %(default)s)")
    parser.add_argument("--image", action="append", default=[],
                        help="node: a local image to load into the node's containerd (repeat; "
                             "default: the project's image and its base)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.nodes < 0:
        parser.error(f"--nodes must be >= 0, got {args.nodes}")
    cluster = Cluster(args.dir.resolve(), (args.bin or args.dir / "bin").resolve())
    try:
        if args.verb == "up":
            start = time.monotonic()
            cluster.up(nodes=args.nodes)
            took = time.monotonic() - start
            print(f"cluster: up in {took:.0f} s, {args.nodes} kwok node(s); logs in {cluster.root / 'run/logs'}")
            print(f"  export KUBECONFIG={cluster.kubeconfig}")
            print(f"  {cluster.bin_dir / 'kubectl'} get nodes")
            print("  make cluster-down   # stops it and removes its state")
        elif args.verb == "down":
            stopped = down_all(cluster)
            print(f"cluster: stopped {', '.join(stopped) or 'nothing (none was running)'}; state removed")
        elif args.verb == "node":
            start = time.monotonic()
            node = RealNode(cluster, images=save_images(args.image or default_images(), cluster))
            node.up()
            print(f"node: {node.name} ({node.ip}) Ready in {time.monotonic() - start:.0f} s: "
                  f"containerd, kubelet and kube-proxy; logs in {cluster.root / 'run/logs'}")
            print(f"  {cluster.bin_dir / 'kubectl'} --kubeconfig {cluster.kubeconfig} get nodes -o wide")
            print("  make node-down   # stops it and removes what it made on this host")
        elif args.verb == "node-down":
            stopped = RealNode(cluster).down()
            print(f"node: stopped {', '.join(stopped) or 'nothing (none was running)'}; host cleaned")
        else:
            status = cluster.status()
            for name, alive in status.items():
                print(f"{name:24} {'running' if alive else 'stopped'}")
            return 0 if all(status.values()) else 1
    except ClusterError as err:
        print(f"cluster: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
