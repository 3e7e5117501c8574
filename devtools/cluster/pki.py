"""The cluster's certificates and keys, made with ``openssl`` as a real cluster's are.

One CA signs every serving and client certificate (etcd's, the API server's, and the
clients': the admin, the controller-manager, the scheduler, kwok, the API server to etcd and
to kubelets); the service-account key pair signs and checks the tokens the server issues
(``kubectl create token``). Client identities are the ones Kubernetes' own RBAC defaults
bind: ``system:kube-controller-manager``, ``system:kube-scheduler``, and the admin in
``system:masters``.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Days: a test cluster lives minutes, a workstation's a few weeks.
VALID_DAYS = 365


@dataclass(frozen=True, slots=True)
class Identity:
    """A certificate's file stem, subject and (for servers) names."""

    stem: str
    common_name: str
    organization: str = ""
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    server: bool = False


SERVICE_IP = "10.96.0.1"
SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local")  # fmt: skip

IDENTITIES = (
    Identity("etcd-server", "etcd", dns=("localhost",), ips=("127.0.0.1",), server=True),
    Identity("apiserver-etcd-client", "kube-apiserver-etcd-client"),
    Identity("apiserver", "kube-apiserver", dns=SERVER_NAMES, ips=("127.0.0.1", SERVICE_IP), server=True),
    Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"),
    Identity("admin", "kubernetes-admin", "system:masters"),
    Identity("controller-manager", "system:kube-controller-manager"),
    Identity("scheduler", "system:kube-scheduler"),
    Identity("kwok", "kwok-controller", "system:masters"),
)  # fmt: skip


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)  # noqa: S603,S607


def make_pki(folder: Path, advertise: str = "127.0.0.1") -> None:
    """Every key and certificate of the cluster into ``folder`` (``<stem>.crt``/``.key``);
    the API server's names include ``advertise``, the address pods reach it at."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", str(VALID_DAYS), "-subj", "/CN=waterline-cluster-ca", cwd=folder)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)
    for ident in IDENTITIES:
        issue(folder, apiserver_identity(advertise) if ident.stem == "apiserver" else ident)


def apiserver_identity(advertise: str) -> Identity:
    ips = ("127.0.0.1", SERVICE_IP) + (() if advertise == "127.0.0.1" else (advertise,))
    return Identity("apiserver", "kube-apiserver", dns=SERVER_NAMES, ips=ips, server=True)


def issue(folder: Path, ident: Identity) -> None:
    subject = f"/CN={ident.common_name}" + (f"/O={ident.organization}" if ident.organization else "")
    usage = "serverAuth,clientAuth" if ident.server else "clientAuth"
    ext = [f"extendedKeyUsage={usage}", "keyUsage=critical,digitalSignature,keyEncipherment"]
    sans = [f"DNS:{d}" for d in ident.dns] + [f"IP:{ip}" for ip in ident.ips]
    if sans:
        ext.append("subjectAltName=" + ",".join(sans))
    conf = folder / f"{ident.stem}.ext"
    conf.write_text("\n".join(ext) + "\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ident.stem}.key",
             "-out", f"{ident.stem}.csr", "-subj", subject, cwd=folder)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{ident.stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{ident.stem}.crt", "-days", str(VALID_DAYS),
             "-extfile", conf.name, cwd=folder)  # fmt: skip
    (folder / f"{ident.stem}.csr").unlink()
    conf.unlink()
