"""The control plane's programs and how each is run: a registry, in start order.

Each component is one process with its command line, the port it serves and how to tell it
is ready. The flags are the ones a real cluster runs with (kubeadm's, give or take):
TLS everywhere from the cluster's CA, Node and RBAC authorization, the default admission
plugins plus NodeRestriction (ValidatingAdmissionPolicy and PodSecurity are on by default),
every default controller, the scheduler's default profile. What differs from a production
control plane, and why:

* one etcd member with ``--unsafe-no-fsync``: a test cluster is thrown away, and fsync on a
  shared disk makes every write wait;
* everything on loopback, so ``--endpoint-reconciler-type=none``: the ``kubernetes``
  Service's endpoints may not be a loopback address (a node joining with pods that need the
  Service gets a routable address instead: ``Layout.advertise``);
* no leader election for the controller-manager and the scheduler (one of each).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a cluster keeps its files and which ports it serves."""

    root: Path
    bin: Path
    ports: dict[str, int]
    advertise: str = "127.0.0.1"
    service_cidr: str = "10.96.0.0/16"
    verbosity: int = 1

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def pki(self) -> Path:
        return self.run / "pki"

    @property
    def logs(self) -> Path:
        return self.run / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def kubeconfig_for(self, who: str) -> Path:
        return self.run / f"{who}.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    def tool(self, name: str) -> str:
        return str(self.bin / name)


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    argv: Callable[[Layout], list[str]]
    #: the URL path whose 200 says it is ready (on its own port, https), or None
    ready_path: str | None = "/healthz"
    #: client certificate stem for its readiness check (None: anonymous)
    ready_cert: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def _etcd(lay: Layout) -> list[str]:
    p, peer = lay.ports["etcd"], lay.ports["etcd-peer"]
    pki = lay.pki
    return [
        lay.tool("etcd"), "--name", "waterline", "--data-dir", str(lay.run / "etcd"),
        "--listen-client-urls", f"https://127.0.0.1:{p}",
        "--advertise-client-urls", f"https://127.0.0.1:{p}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"waterline=http://127.0.0.1:{peer}",
        "--cert-file", str(pki / "etcd-server.crt"), "--key-file", str(pki / "etcd-server.key"),
        "--client-cert-auth", "--trusted-ca-file", str(pki / "ca.crt"),
        "--unsafe-no-fsync", "--log-level", "warn",
        "--listen-metrics-urls", f"http://127.0.0.1:{lay.ports['etcd-metrics']}",
    ]  # fmt: skip


def _apiserver(lay: Layout) -> list[str]:
    pki = lay.pki
    return [
        lay.tool("kube-apiserver"),
        # Exposed (a real node joined): every address, so pods reach it through the
        # kubernetes Service; else loopback only.
        "--bind-address", "127.0.0.1" if lay.advertise == "127.0.0.1" else "0.0.0.0",
        "--secure-port", str(lay.ports["kube-apiserver"]),
        "--advertise-address", lay.advertise,
        "--endpoint-reconciler-type", "lease" if lay.advertise != "127.0.0.1" else "none",
        "--etcd-servers", f"https://127.0.0.1:{lay.ports['etcd']}",
        "--etcd-cafile", str(pki / "ca.crt"),
        "--etcd-certfile", str(pki / "apiserver-etcd-client.crt"),
        "--etcd-keyfile", str(pki / "apiserver-etcd-client.key"),
        "--tls-cert-file", str(pki / "apiserver.crt"),
        "--tls-private-key-file", str(pki / "apiserver.key"),
        "--client-ca-file", str(pki / "ca.crt"),
        "--kubelet-client-certificate", str(pki / "apiserver-kubelet-client.crt"),
        "--kubelet-client-key", str(pki / "apiserver-kubelet-client.key"),
        "--kubelet-certificate-authority", str(pki / "ca.crt"),
        "--kubelet-preferred-address-types", "InternalIP,Hostname",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file", str(pki / "sa.pub"),
        "--service-account-signing-key-file", str(pki / "sa.key"),
        "--service-cluster-ip-range", lay.service_cidr,
        "--authorization-mode", "Node,RBAC",
        "--enable-admission-plugins", "NodeRestriction",
        "--allow-privileged=true",
        "--enable-bootstrap-token-auth=true",
        "--profiling=false",
        "--v", str(lay.verbosity),
    ]  # fmt: skip


def _controller_manager(lay: Layout) -> list[str]:
    pki, cfg = lay.pki, str(lay.kubeconfig_for("controller-manager"))
    return [
        lay.tool("kube-controller-manager"),
        "--kubeconfig", cfg, "--authentication-kubeconfig", cfg, "--authorization-kubeconfig", cfg,
        "--bind-address", "127.0.0.1", "--secure-port", str(lay.ports["kube-controller-manager"]),
        "--cert-dir", str(lay.run / "controller-manager"),
        "--client-ca-file", str(pki / "ca.crt"),
        "--root-ca-file", str(pki / "ca.crt"),
        "--service-account-private-key-file", str(pki / "sa.key"),
        "--cluster-signing-cert-file", str(pki / "ca.crt"),
        "--cluster-signing-key-file", str(pki / "ca.key"),
        "--use-service-account-credentials=true",
        "--controllers", "*,bootstrapsigner,tokencleaner",
        "--leader-elect=false",
        "--profiling=false",
        "--v", str(lay.verbosity),
    ]  # fmt: skip


def _scheduler(lay: Layout) -> list[str]:
    cfg = str(lay.kubeconfig_for("scheduler"))
    return [
        lay.tool("kube-scheduler"),
        "--kubeconfig", cfg, "--authentication-kubeconfig", cfg, "--authorization-kubeconfig", cfg,
        "--bind-address", "127.0.0.1", "--secure-port", str(lay.ports["kube-scheduler"]),
        "--cert-dir", str(lay.run / "scheduler"),
        "--leader-elect=false",
        "--profiling=false",
        "--v", str(lay.verbosity),
    ]  # fmt: skip


#: The annotation kwok manages a node by (the launcher's and the tests' nodes carry it).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def _kwok(lay: Layout) -> list[str]:
    return [
        lay.tool("kwok"), "--kubeconfig", str(lay.kubeconfig_for("kwok")),
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
        "--config", str(Path(__file__).with_name("kwok-stages.yaml")),
        "--node-lease-duration-seconds", "40",
        "--server-address", f"127.0.0.1:{lay.ports['kwok']}",
        "--cidr", "10.244.0.0/16", "--node-ip", "10.255.0.1",
    ]  # fmt: skip


COMPONENTS: tuple[Component, ...] = (
    Component("etcd", _etcd, ready_path="/health", ready_cert="apiserver-etcd-client"),
    Component("kube-apiserver", _apiserver, ready_path="/readyz", ready_cert="admin"),
    Component("kube-controller-manager", _controller_manager),
    Component("kube-scheduler", _scheduler),
    Component("kwok", _kwok, ready_path=None),
)

BY_NAME = {c.name: c for c in COMPONENTS}
#: Ports to pick: each component's own, and the extra ones etcd needs.
PORT_NAMES = ("etcd", "etcd-peer", "etcd-metrics", "kube-apiserver", "kube-controller-manager",
              "kube-scheduler", "kwok")  # fmt: skip
