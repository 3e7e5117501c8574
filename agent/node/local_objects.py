"""`waterline local-objects DIR`: local mode's objects for the pods running on this machine.

One step from a workstation with pods (k3s, a kubelet, anything that lays out ``kubepods``)
to ``waterline agent --local``: the pods are found in the cgroup tree
(``agent.node.discover``), and three files are written into DIR:

* ``node.yaml``: a Node named after this host (``--node-name``) with its CPUs and memory;
* ``pods.yaml``: one Pod per pod cgroup, with its uid, QoS class, containers (ids and the
  CPU and memory bounds kubelet wrote) so the agent finds and measures the same cgroups;
* ``policy.yaml``: a policy to start from (CPU above 80% for two samples: throttle the
  BestEffort and Burstable pods) and its action. Edit it: the agent re-reads the files.

Existing files are kept unless ``--force``. Exit 0 when written, 1 when there is no pod
tree here (nothing to describe), 2 for a bad argument or a file that cannot be written.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from agent.defaults import CGROUP_ROOT, PROC_ROOT
from agent.logs import configure_logging
from agent.model.group import API_VERSION
from agent.model.timeutil import format_time
from agent.node.discover import Discovery, FoundContainer, FoundPod, discover
from agent.node.local import host_resources

FILES = ("node.yaml", "pods.yaml", "policy.yaml")
POLICY_HEADER = """\
# A policy to start from. When this machine's CPU is above 80% for two samples in a row,
# throttle its BestEffort and Burstable pods (never below 10% of their limit, 20% of it
# less per step); after three samples back under the line, raise them again step by step.
# Try it with --dry-run first; the agent re-reads this file when it changes.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", help="the folder to write node.yaml, pods.yaml and policy.yaml into")
    parser.add_argument("--node-name", default=None, help="the Node's name (default: this host's name)")
    parser.add_argument("--cgroup-root", default=CGROUP_ROOT, metavar="PATH",
                        help="where the cgroup tree is mounted (default %(default)s)")
    parser.add_argument("--kubelet-cgroup-root", default="", metavar="PATH",
                        help="kubelet's --cgroup-root: the cgroup above kubepods (default: none)")
    parser.add_argument("--proc-root", default=PROC_ROOT, metavar="PATH",
                        help="the host's /proc (default %(default)s)")
    parser.add_argument("--log-root", default="/var/log", metavar="PATH",
                        help="where kubelet keeps pods/ and containers/ logs, for the pods' names "
                             "(default %(default)s)")
    parser.add_argument("--force", action="store_true", help="overwrite the files if DIR has them")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from collectors.cgroups import detect_mounts

    configure_logging("console", "warning")
    try:
        mounts = detect_mounts(args.cgroup_root, args.proc_root)
    except (OSError, ValueError) as err:
        return _fail(2, f"cannot read the cgroup mounts under {args.cgroup_root}: {err}")
    root = mounts.controller_root("cpu")
    if root is None:
        return _fail(1, f"no cpu controller under {args.cgroup_root}: no pods to describe")
    found = discover(
        root,
        mounts.version,
        args.kubelet_cgroup_root,
        args.proc_root,
        args.log_root,
        mounts.controller_root("memory"),
    )
    if found.driver is None:
        return _fail(
            1,
            f"no kubepods cgroup under {root} (kubelet root {args.kubelet_cgroup_root or '/'}): "
            "no pods run on this machine. For objects that run anywhere: "
            "waterline agent --local --objects config/local-example --ticks 3 --dry-run",
        )
    existing = [f for f in FILES if os.path.exists(os.path.join(args.dir, f))]
    if existing and not args.force:
        return _fail(2, f"{args.dir} already has {', '.join(existing)} (--force overwrites)")
    node_name = args.node_name or socket.gethostname()
    cpus, memory = host_resources(args.proc_root)
    try:
        os.makedirs(args.dir, exist_ok=True)
        _write(args.dir, "node.yaml", [node_manifest(node_name, cpus, memory)])
        _write(args.dir, "pods.yaml", [pod_manifest(p, node_name) for p in found.pods])
        _write(args.dir, "policy.yaml", policy_manifests(), POLICY_HEADER)
    except OSError as err:
        return _fail(2, f"cannot write into {args.dir}: {err.strerror or err}")
    print(summary(found, node_name, cpus, args.dir, _same_roots(args)))
    return 0


def _same_roots(args: argparse.Namespace) -> str:
    """The agent's flags that find the pods where they were found (non-default roots)."""
    flags = [
        ("--cgroup-root", args.cgroup_root, CGROUP_ROOT),
        ("--kubelet-cgroup-root", args.kubelet_cgroup_root, ""),
        ("--proc-root", args.proc_root, PROC_ROOT),
    ]
    return "".join(f" {flag} {shlex.quote(value)}" for flag, value, default in flags if value != default)


def _fail(code: int, message: str) -> int:
    print(f"waterline local-objects: {message}", file=sys.stderr)
    return code


def _write(folder: str, name: str, docs: Sequence[Any], header: str = "") -> None:
    path = os.path.join(folder, name)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(header)
        yaml.safe_dump_all(docs, f, sort_keys=False)
    os.replace(tmp, path)  # the agent may be reading the folder: never a half file


def summary(found: Discovery, node_name: str, cpus: float, folder: str, roots: str = "") -> str:
    by_qos: dict[str, int] = {}
    for pod in found.pods:
        by_qos[pod.qos_class] = by_qos.get(pod.qos_class, 0) + 1
    counts = ", ".join(f"{n} {q}" for q, n in sorted(by_qos.items())) or "none"
    lines = [
        f"found {len(found.pods)} pods under {found.root} (cgroup v{found.version}, {found.driver} driver): {counts}",
        *(f"  {p.namespace}/{p.name}  {p.qos_class}  {len(p.containers)} containers  uid {p.uid}"
          for p in found.pods),
        f"wrote {', '.join(os.path.join(folder, f) for f in FILES)} (node {node_name}, {cpus:g} CPUs)",
        f"next: sudo waterline agent --local --objects {shlex.quote(folder)}{roots} --dry-run",
    ]  # fmt: skip
    if found.pods and not found.named:
        lines.insert(-2, "  (no kubelet logs under --log-root: pods are named after their uid)")
    return "\n".join(lines)


# -- manifests --------------------------------------------------------------------------


def _memory(value: float) -> str:
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return str(int(value))


def _cores(value: float) -> str:
    return f"{round(value * 1000)}m"


def node_manifest(name: str, cpus: float, memory: float) -> dict[str, Any]:
    resources = {"cpu": f"{cpus:g}", "memory": _memory(memory), "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def container_resources(container: FoundContainer, qos_class: str) -> dict[str, Any]:
    """What kubelet's bounds say of the spec: a Guaranteed pod requests its limits, a
    BestEffort pod has neither (whatever shares its cgroup has)."""
    if qos_class == "BestEffort":
        return {}
    limits: dict[str, str] = {}
    if container.cpu_limit is not None:
        limits["cpu"] = _cores(container.cpu_limit)
    if container.memory_limit is not None:
        limits["memory"] = _memory(container.memory_limit)
    requests = dict(limits) if qos_class == "Guaranteed" else {}
    if container.cpu_request is not None and qos_class != "Guaranteed":
        requests["cpu"] = _cores(container.cpu_request)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def pod_manifest(pod: FoundPod, node_name: str) -> dict[str, Any]:
    started = format_time(pod.started)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "creationTimestamp": started,
            "annotations": {"waterline.io/discovered-from": pod.path},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": c.name, "resources": container_resources(c, pod.qos_class)}
                for c in pod.containers
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": pod.qos_class,
            "startTime": started,
            "containerStatuses": [
                {"name": c.name, "containerID": c.container_id} for c in pod.containers
            ],
        },
    }


def policy_manifests() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "NodeQOSEnsurancePolicy",
            "metadata": {"name": "local-cpu-guard"},
            "spec": {
                "objectiveEnsurances": [
                    {
                        "name": "cpu-high",
                        "metricRule": {"name": "cpu_total_utilization", "value": "80"},
                        "avoidanceThreshold": 2,
                        "restoreThreshold": 3,
                        "actionName": "throttle-low-priority",
                        "strategy": "None",
                    }
                ]
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "AvoidanceAction",
            "metadata": {"name": "throttle-low-priority"},
            "spec": {
                "coolDownSeconds": 60,
                "throttle": {"cpuThrottle": {"minCPURatio": 10, "stepCPURatio": 20}},
                "scope": {"qosClasses": ["BestEffort", "Burstable"]},
            },
        },
    ]
