"""After an API server outage, how long until a node agent's watches are all back.

The node's evictions wait for every watch (``NodeView`` reachable), and its objects are
stale until then. The agent's eight watches (``start_node_view`` with the default
``WatchArgs``: backoff from 1 s doubling to 60 s, jitter 0.5) run against the real
kube-apiserver (a cluster of devtools/harness/cluster.py, started here in a temporary folder) through
a fault proxy (devtools/harness/faultproxy.py) with the agent's own token. An outage: the proxy drops
the open watches and answers 503 to every request for ``--outage`` seconds, then lets
everything through again; measured is the time from then until the cache is reachable
again, and how many requests the watches sent meanwhile.

Two ways, alternating round by round in one run (the machine's noise hits both alike):

* ``siblings``: a reflector backing off retries as soon as another watch of its cache
  gets through (``Reflector._back_off``, main since 2026-11-26);
* ``alone``: each sits out its own delay (before; ``_back_off`` replaced here by a plain
  wait on the stop event, which is what ``run`` used).

Needs the cluster's programs (hack/cluster/build, which ``make cluster`` runs); without
them it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from agent.kube.client import build_api
from agent.kube.nodeview import start_node_view
from agent.kube.watching import Reflector
from bench.outcome import need_built_control_plane
from devtools.harness.agent_env import Pool
from devtools.harness.cluster import RealCluster
from devtools.harness.cluster import start as start_cluster
from devtools.harness.faultproxy import Fault

WAYS = ("siblings", "alone")


@contextlib.contextmanager
def _way(way: str) -> Iterator[None]:
    """``alone``: the reflectors started inside wait out their whole delay."""
    if way == "siblings":
        yield
        return
    kept = Reflector._back_off

    def plain(self: Reflector, stop: threading.Event, delay: float) -> None:
        stop.wait(delay)

    Reflector._back_off = plain  # type: ignore[method-assign]
    try:
        yield
    finally:
        Reflector._back_off = kept  # type: ignore[method-assign]


def _wait(check: object, timeout: float) -> float | None:
    """Seconds until ``check()`` is true, polled every 20 ms; None at the timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def one_round(kube: RealCluster, node: str, way: str, outage: float) -> tuple[float | None, int]:
    """(seconds to reachable after the outage, requests sent meanwhile)."""
    with kube.proxy() as proxy, _way(way):
        api = build_api(str(kube.agent_kubeconfig(node, proxy.url)))
        view, informers = start_node_view(api, node)
        try:
            if _wait(lambda: view.synced and view.cache.api_reachable, 60) is None:
                raise RuntimeError("the watches did not sync in 60 s")
            proxy.inject(Fault(path="/", method="", status=503, times=10**9))
            end = time.monotonic() + outage
            while time.monotonic() < end:  # a watch still opening when the outage began too
                proxy.drop_watches()
                time.sleep(0.2)
            if view.cache.api_reachable:
                raise RuntimeError("the outage did not reach the watches")
            before = len(proxy.requests)
            proxy.clear()
            back = _wait(lambda: view.cache.api_reachable, 180)
            return back, len(proxy.requests) - before
        finally:
            informers.stop()
            api.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench watch-recovery")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="per way (default %(default)s)")
    args = parser.parse_args(argv or [])
    need_built_control_plane()
    with tempfile.TemporaryDirectory(prefix="waterline-watch-") as tmp_dir:
        kube = start_cluster(Path(tmp_dir) / "cluster")
        try:
            kube.install()
            node = Pool(kube, "bench").node()
            seen: dict[str, list[float]] = {w: [] for w in WAYS}
            sent: dict[str, list[int]] = {w: [] for w in WAYS}
            for i in range(args.rounds * len(WAYS)):
                way = WAYS[i % len(WAYS)]
                back, requests = one_round(kube, node, way, args.outage)
                print(f"  round {i + 1}: {way:8} back {'never' if back is None else f'{back:.2f} s'}"
                      f" after the outage, {requests} requests")  # fmt: skip
                if back is not None:
                    seen[way].append(back)
                sent[way].append(requests)
            print(f"8 watches of one node, an outage of {args.outage:.0f} s (every request 503, "
                  f"watches dropped), {args.rounds} rounds a way:")
            for way in WAYS:
                s = sorted(seen[way])
                if s:
                    print(f"  {way:8} all watches back after median {statistics.median(s):.2f} s "
                          f"(min {s[0]:.2f}, max {s[-1]:.2f}); requests from the end of the "
                          f"outage on: median {statistics.median(sent[way]):.0f}")  # fmt: skip
        finally:
            kube.close()


if __name__ == "__main__":
    main()
