"""`waterline agent`'s command line: every flag, its default and what it is for."""

from __future__ import annotations

import argparse
import os

from agent.defaults import (
    AGENT_DAEMONSET,
    CGROUP_ROOT,
    NAMESPACE,
    NODE_NAME_ENV,
    POD_NAMESPACE_ENV,
    PROC_ROOT,
    STATE_DIR,
)
from agent.logs import FORMATS, LEVELS
from agent.node.sampling import NODE_CPU_SOURCES
from agent.serving import DEFAULT_ADDR

RELEASE = "release"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "verb",
        nargs="?",
        choices=[RELEASE],
        help="release: write back the original CPU quota of every container the state "
        "file names, what batch pods' cgroups held before their limits, and the original CPU "
        "marks (cpu.idle, burst, shares) of the isolation file, and forget them; then take "
        "the batch resources out of the node's status (stop the agent first; it reads "
        "--state-dir, --cgroup-root, --kubelet-cgroup-root, --proc-root, and for the status "
        "--kubeconfig and --node-name); none: run the agent",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on this machine with no cluster: objects come from --objects files",
    )
    parser.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="PATH",
        help="YAML file or folder of Pods, the Node, policies and actions (repeatable; re-read on change; --local)",
    )
    parser.add_argument(
        "--node-name",
        default=None,
        help=f"the node (default: ${NODE_NAME_ENV}; locally the only Node in the objects, else the host name)",
    )
    parser.add_argument(
        "--cgroup-root",
        default=CGROUP_ROOT,
        help="where the host's cgroup tree is mounted (default %(default)s)",
    )
    parser.add_argument(
        "--kubelet-cgroup-root",
        default="",
        metavar="PATH",
        help="kubelet's --cgroup-root: the cgroup above kubepods (default: none)",
    )
    parser.add_argument(
        "--proc-root", default=PROC_ROOT, help="the host's /proc (default %(default)s)"
    )
    parser.add_argument(
        "--state-dir",
        default=STATE_DIR,
        help="where original CPU quotas are kept (default %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between ticks (default %(default)s)",
    )
    parser.add_argument(
        "--ticks", type=int, default=None, metavar="N", help="run N ticks, then exit (for scripts)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and report, write nothing (no quota, no eviction)",
    )
    parser.add_argument(
        "--metrics-addr",
        default=DEFAULT_ADDR,
        help="serve /metrics, /healthz, /readyz here (default %(default)s; 'off' disables)",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=None,
        help="default: console with --local, json in a cluster",
    )
    parser.add_argument("--log-level", choices=LEVELS, default="info")
    parser.add_argument(
        "--node-cpu",
        choices=NODE_CPU_SOURCES,
        default="proc",
        help="cpu_total_usage from the host's /proc (default) or the sum of the pods' cgroups",
    )
    parser.add_argument(
        "--no-console",
        action="store_true",
        help="--local: do not print the per-tick view on stdout",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="PATH",
        help="YAML file whose 'agent:' section sets executeExcessPercent, extCpuResource, "
        "evictionRateLimit, clusterBrake, apiTimeBudgetSeconds, evictionAnswerSeconds and "
        "maxOpenFiles (docs/install.md; re-read on change; a bad edit keeps the last good settings)",
    )
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="in a cluster: kubeconfig (default: the service account, else $KUBECONFIG)",
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get(POD_NAMESPACE_ENV) or NAMESPACE,
        help=f"Waterline's namespace: the cluster brake ConfigMap and the agent's DaemonSet "
        f"live there (default: ${POD_NAMESPACE_ENV}, else %(default)s)",
    )
    parser.add_argument(
        "--daemonset",
        default=AGENT_DAEMONSET,
        help="the agent's own DaemonSet: when it is gone or being deleted as the agent stops, "
        "the agent is being uninstalled and releases every cap (default %(default)s)",
    )
