"""Where a cluster-mode agent's memory goes at import (issue 32): resident memory
(VmRSS) added by each group of modules the agent imports, in a fresh interpreter, with
the official client imported whole (``from kubernetes import client, config``, as the
agent did before) and as ``agent.kube.lean`` imports it.

    python -m bench agent-memory

Method (import-time sampling): a first interpreter imports what ``waterline agent``
imports in cluster mode and lists the top-level packages that came in; a fresh one per
variant imports them again group by group (the standard library, each third-party
package, Waterline's own, then the client) and reads VmRSS after each. A package a group
pulls in is counted in that group (psutil's own imports in psutil), so the order is
written out with the figures. What the running agent adds to this (its caches of the
node's pods, the watch buffers, the allocator's slack) is ``python -m bench soak --rss``
minus the total here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig

#: What cluster mode imports beyond ``agent.node.command`` (the CLI's command table
#: names the rest as strings).
AGENT_MODULES = ("agent.node.command", "agent.node.incluster", "agent.node.wiring")

_LIST = f"""
import sys, json
before = set(sys.modules)
for m in {AGENT_MODULES!r}:
    __import__(m)
from agent.kube import lean
lean.load()
tops = []
for m in list(sys.modules):
    if m in before:
        continue
    t = m.split(".")[0]
    if t not in tops:
        tops.append(t)
print(json.dumps(tops))
"""

_MEASURE = """
import sys, json, importlib
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
groups, variant = json.loads(sys.argv[1]), sys.argv[2]
out = [("interpreter", rss())]
for name, modules in groups:
    for m in modules:
        try:
            importlib.import_module(m)
        except Exception:
            pass
    out.append((name, rss()))
if variant == "whole":
    from kubernetes import client, config
else:
    from agent.kube import lean
    lean.load()
out.append(("kubernetes client (" + variant + ")", rss()))
print(json.dumps(out))
"""


def _groups(tops: list[str]) -> list[tuple[str, list[str]]]:
    stdlib_dir = sysconfig.get_paths()["stdlib"]
    std, third, ours = [], [], []
    for top in tops:
        if top in ("kubernetes", "__mp_main__"):
            continue
        if top in ("agent", "collectors", "executors"):
            ours.append(top)
            continue
        spec_file = _origin(top)
        if spec_file is None or spec_file.startswith(stdlib_dir) and "site-packages" not in spec_file:
            std.append(top)
        else:
            third.append(top)
    groups: list[tuple[str, list[str]]] = [("standard library", std)]
    groups += [(t, [t]) for t in third]
    groups.append(("waterline (agent, collectors, executors)", [*AGENT_MODULES]))
    return groups


def _origin(top: str) -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin not in (None, "built-in", "frozen") else None


def main() -> None:
    tops = json.loads(subprocess.run([sys.executable, "-c", _LIST], capture_output=True, text=True,
                                     check=True).stdout)  # fmt: skip
    groups = _groups(tops)
    rows = {}
    for variant in ("whole", "lean"):
        done = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(groups), variant],
                              capture_output=True, text=True, check=True)  # fmt: skip
        rows[variant] = json.loads(done.stdout)
    print(f"VmRSS added at import, MiB, in import order ({sys.executable}):")
    whole, lean = rows["whole"], rows["lean"]
    prev = 0.0
    for name, mib in whole[:-1]:  # the same groups in both, bar the client
        print(f"  {mib - prev:6.1f}  {name}")
        prev = mib
    print(f"  {whole[-1][1] - whole[-2][1]:6.1f}  {whole[-1][0]}")
    print(f"  {lean[-1][1] - lean[-2][1]:6.1f}  {lean[-1][0]}")
    print(f"  total after import: whole client {whole[-1][1]:.1f} MiB, lean {lean[-1][1]:.1f} MiB")


if __name__ == "__main__":
    main()
