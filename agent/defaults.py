"""Deployment defaults shared by the programs and the manifests in deploy/.

The agent's flags default to these values and deploy/daemonset.yaml mounts, exposes and
probes exactly these paths and ports; tests/unit/test_deploy.py checks the two agree, so a
change here that the manifests do not follow fails a test instead of a rollout.

Where the agent's container sees the host: the cgroup tree at its own path (CGROUP_ROOT),
so `waterline agent --local` on a workstation and the DaemonSet share that default; the
host's /proc at /host/proc, given with --proc-root (PROC_ROOT, /proc, is the right default
on a workstation), never over the container's /proc, which stays the container's. From
there the agent reads node CPU and memory, PSI, its own mountinfo and the pods' tasks'
schedstat; the DaemonSet shares the host's pid namespace (hostPID) because cgroup.procs
lists only the tasks of the reader's pid namespace.
"""

from __future__ import annotations

from agent.model.group import GROUP, VERSION

#: Prometheus metrics, /healthz and /readyz are served on this port (all interfaces).
METRICS_PORT = 9108
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"

#: Original CPU quotas of throttled containers are persisted here (a hostPath in the
#: DaemonSet, so a restarted or upgraded agent can still restore every pod it throttled).
STATE_DIR = "/var/lib/waterline"
PROC_ROOT = "/proc"
CGROUP_ROOT = "/sys/fs/cgroup"

#: The agent learns its node from this environment variable (downward API spec.nodeName)
#: and runs `waterline agent --node-name=$(NODE_NAME)`.
NODE_NAME_ENV = "NODE_NAME"
#: ... and its namespace from this one (downward API metadata.namespace): the cluster
#: brake ConfigMap and the agent's DaemonSet live there.
POD_NAMESPACE_ENV = "POD_NAMESPACE"
AGENT_DAEMONSET = "waterline-agent"

IMAGE = "ghcr.io/waterline/waterline:0.1.0"

#: Where deploy/ installs everything, and the controller's leader-election Lease.
NAMESPACE = "waterline-system"
CONTROLLER_LEASE_NAME = "waterline-controller"
CONTROLLER_LEASE_NAMESPACE = NAMESPACE

#: The cluster brake (DESIGN "Safety limits"): the controller sets this ConfigMap in
#: NAMESPACE when the agents together evict too much; every agent watches it.
BRAKE_CONFIGMAP = "waterline-brake"

#: The CRD group and version of every Waterline custom resource.
API_GROUP = GROUP
API_VERSION = VERSION
