"""The real cluster the tests talk to: kube-apiserver, etcd, kube-controller-manager,
kube-scheduler and kwok, built from their Go modules (hack/cluster/build) and started once
per test run (the ``kube`` fixture of tests/conftest.py) in a temporary folder.

Every test that talks to Kubernetes talks to it. Tests keep out of each other's way by
names: each takes its own namespace(s) and its own kwok nodes (``node()``, labelled with
the test's ``pool``), and removes the cluster-scoped objects it made. deploy/ is installed
once (``kubectl apply -k deploy/``: CRDs, RBAC, the admission policy, the agent DaemonSet
and the controller Deployment, whose pods kwok "runs" on its nodes and which do nothing);
the agent and the controller under test run here, as processes or threads, with their
own ServiceAccounts' tokens (``token()``), so deploy/'s RBAC is what lets them work.

``WATERLINE_TEST_CLUSTER=DIR`` (a developer's shortcut, never CI): use the cluster already
running under DIR (``make cluster``: ``.cluster``) instead of starting one, and leave it
running; tests add their nodes and objects to it as usual.

Where the cluster cannot be had (no Go, a failed build), ``start`` raises ClusterError with
the reason: the tests' ``kube`` fixture then skips on a workstation and fails in CI
(tests/need.py); a benchmark says so and measures nothing. This is the shared harness of
the tests and the benchmarks (devtools/harness/): it imports neither, and no pytest.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.kube.access import AccessTable
from agent.kube.client import ClientArgs, KubeApi, build_api
from devtools.cluster.api import write_kubeconfig
from devtools.cluster.launcher import Cluster, ClusterError, kwok_node
from devtools.cluster.node import down_all
from devtools.harness.faultproxy import FaultProxy
from devtools.harness.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cluster" / "bin"
NAMESPACE = "waterline-system"
AGENT_SA = "waterline-agent"
CONTROLLER_SA = "waterline-controller"
_NAMES = itertools.count()


def unique(prefix: str) -> str:
    """A DNS-1123 name no other test of this run uses."""
    return f"{prefix}-{os.getpid() % 10000}-{next(_NAMES)}"


@dataclass
class RealCluster:
    cluster: Cluster
    folder: Path
    _admin_api: KubeApi | None = None
    _installed: bool = False
    #: A cluster this run did not start (``WATERLINE_TEST_CLUSTER``): left running.
    borrowed: bool = False
    _tokens: dict[tuple[str, str, str], str] = field(default_factory=dict)

    # -- access -------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin's (system:masters): for setting up and looking, never for the code
        under test."""
        return self.cluster.kubeconfig

    @property
    def server(self) -> str:
        return self.cluster._layout().server

    @property
    def ca(self) -> Path:
        return self.cluster._layout().pki / "ca.crt"

    @property
    def api(self) -> KubeApi:
        if self._admin_api is None:
            self._admin_api = build_api(str(self.kubeconfig))
        return self._admin_api

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, input: str | None = None,  # noqa: A002
        check: bool = True, timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(  # noqa: S603
            [str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done

    def apply(self, manifests: Iterable[Mapping[str, Any]], kubeconfig: Path | None = None) -> None:
        docs = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
        self.kubectl("apply", "-f", "-", input=json.dumps(docs), kubeconfig=kubeconfig)

    def token(self, account: str, namespace: str = NAMESPACE, *, pod: str | None = None,
              node: str | None = None, duration: str = "2h") -> str:  # fmt: skip
        """A ServiceAccount token from the TokenRequest API (``kubectl create token``),
        bound to a pod (which gives it the pod's node name, as the agent's projected token
        has) or to a node when asked."""
        args = ["-n", namespace, "create", "token", account, "--duration", duration]
        if pod is not None:
            args += ["--bound-object-kind", "Pod", "--bound-object-name", pod]
        elif node is not None:
            args += ["--bound-object-kind", "Node", "--bound-object-name", node]
        return self.kubectl(*args).stdout.strip()

    def token_kubeconfig(self, token: str, server: str | None = None, name: str | None = None) -> Path:
        """A kubeconfig for ``token`` against the server (or a fault proxy's URL)."""
        path = self.folder / f"{name or unique('kubeconfig')}.kubeconfig"
        write_kubeconfig(path, server or self.server, self.ca, token=token)
        return path

    def agent_kubeconfig(self, node: str, server: str | None = None) -> Path:
        """The agent's identity on ``node``: a waterline-agent token bound to the agent
        DaemonSet's pod there, so it carries the node name the admission policy checks."""
        pod = self.wait_for_pod(NAMESPACE, f"spec.nodeName={node}", "app.kubernetes.io/name=waterline-agent")
        return self.token_kubeconfig(self.token(AGENT_SA, pod=pod), server, f"agent-{node}-{unique('t')}")

    def controller_kubeconfig(self, server: str | None = None) -> Path:
        return self.token_kubeconfig(self.token(CONTROLLER_SA), server, unique("controller"))

    def client(
        self, kubeconfig: Path, args: ClientArgs | None = None, access: AccessTable | None = None
    ) -> KubeApi:
        """An API for ``kubeconfig``, checking ``access`` (a program's table) when given."""
        return build_api(str(kubeconfig), args=args, access=access)

    # -- objects ------------------------------------------------------------------------

    def install(self, again: bool = False) -> None:
        """deploy/ as a user installs it, once per run (``again``: after a test removed or
        replaced it, as tests/e2e does)."""
        if self._installed and not again:
            return
        self.kubectl("apply", "-k", str(ROOT / "deploy"))
        self.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                     "crd", "-l", "app.kubernetes.io/part-of=waterline")  # fmt: skip
        self._installed = True

    def namespace(self, prefix: str = "t", labels: Mapping[str, str] | None = None) -> str:
        name = unique(prefix)
        self.apply([{"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": name, "labels": dict(labels or {})}}])  # fmt: skip
        # Pods need the namespace's default ServiceAccount (the controller-manager makes it).
        wait_until(lambda: self.kubectl("-n", name, "get", "sa", "default", check=False).returncode == 0)
        return name

    def node(
        self, name: str | None = None, labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None, taints: Iterable[Mapping[str, str]] = (),
        ready: bool = True,
    ) -> str:
        """A kwok node (Ready, its Lease renewed, its pods run by kwok); with deploy/
        installed, the agent DaemonSet's pod lands on it."""
        name = name or unique("node")
        self.cluster.add_node(kwok_node(name, labels, allocatable, taints))
        if ready:
            self.cluster.wait_nodes_ready([name], time.monotonic() + 60)
        return name

    def wait_for_pod(self, namespace: str, field_selector: str = "", label_selector: str = "",
                     timeout: float = 60) -> str:  # fmt: skip
        """The name of a Running pod matching the selectors, once there is one."""
        found: list[str] = []

        def running() -> bool:
            out = self.kubectl("-n", namespace, "get", "pods", "-o", "json",
                               f"--field-selector={field_selector}",
                               f"--selector={label_selector}").stdout  # fmt: skip
            pods = [p for p in json.loads(out)["items"]
                    if p.get("status", {}).get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
            found[:] = [p["metadata"]["name"] for p in pods]
            return bool(found)

        wait_until(running, timeout)
        return found[0]

    @contextmanager
    def proxy(self) -> Iterator[FaultProxy]:
        """A fault-injecting proxy in front of the server (its URL for a token kubeconfig)."""
        with FaultProxy(self.server, self.ca) as proxy:
            yield proxy

    def restart_apiserver(self) -> None:
        """kill -9 the kube-apiserver and start it again, same flags and port."""
        self.cluster.restart("kube-apiserver")

    def close(self) -> None:
        if self._admin_api is not None:
            self._admin_api.close()
        if not self.borrowed:
            down_all(self.cluster)


def launch(folder: Path) -> RealCluster:
    """Build what is missing (hack/cluster/build) and start a cluster under ``folder``;
    ClusterError says why it could not (for a caller outside pytest: the benchmarks)."""
    if not (BIN / "kube-apiserver").exists() or os.environ.get("CI") == "true":
        built = subprocess.run([str(ROOT / "hack/cluster/build")], capture_output=True, text=True)  # noqa: S603
        if built.returncode != 0:
            raise ClusterError(f"hack/cluster/build failed: {built.stderr.strip()[-2000:]}")
    cluster = Cluster(folder, BIN)
    try:
        cluster.up(nodes=0)
    except ClusterError as err:
        raise ClusterError(f"the cluster did not start: {err}") from None
    return RealCluster(cluster, folder)


def start(folder: Path) -> RealCluster:
    """``launch``, or borrow the cluster running under $WATERLINE_TEST_CLUSTER (never in
    CI); ClusterError says why neither could be had."""
    borrowed = os.environ.get("WATERLINE_TEST_CLUSTER")
    if borrowed and os.environ.get("CI") != "true":
        running = Cluster(Path(borrowed).resolve(), BIN)
        if running.load() is None or not all(running.status().values()):
            raise ClusterError(f"WATERLINE_TEST_CLUSTER={borrowed}: no cluster running there (make cluster)")
        return RealCluster(running, folder, borrowed=True)
    return launch(folder)
