"""Start, stop and query a real Kubernetes control plane on loopback.

``Cluster(root, bin_dir).up()`` makes the PKI, writes the components' kubeconfigs, starts
etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (in that order, each
once the one before is ready), waits for the controllers to be at work (the ``default``
ServiceAccount exists), adds the kwok nodes asked for and writes the admin kubeconfig to
``<root>/kubeconfig``. Everything it starts is recorded in ``<root>/run/cluster.json``
(ports, pids) so that another process (``make cluster-down``) can stop it; ``down()``
stops every process and removes ``<root>/run`` and the kubeconfig. The programs come from
``bin_dir`` (``hack/cluster/build`` links them there).

Tests start one cluster per test run in a temporary root (devtools/harness/cluster.py) and use
``kill``/``start`` to restart a component under a running agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from devtools.cluster.api import Admin, write_kubeconfig
from devtools.cluster.components import (
    BY_NAME,
    COMPONENTS,
    KWOK_NODE_ANNOTATION,
    PORT_NAMES,
    Component,
    Layout,
)
from devtools.cluster.pki import apiserver_identity, issue, make_pki

STATE_FILE = "cluster.json"
#: Allocatable of a kwok node unless a test says otherwise.
DEFAULT_ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "pods": "110"}


class ClusterError(RuntimeError):
    """The cluster could not start (the message names the component and its log)."""


def free_ports(names: Iterable[str]) -> dict[str, int]:
    """A free loopback port for each name (bound at once, so no two are the same)."""
    socks, ports = [], {}
    try:
        for name in names:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports[name] = s.getsockname()[1]
    finally:
        for s in socks:
            s.close()
    return ports


def kwok_node(
    name: str,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, str]] = (),
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node that kwok runs (it makes it Ready, renews its Lease and runs its pods)."""
    alloc = {**DEFAULT_ALLOCATABLE, **(allocatable or {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", **(annotations or {})},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok", **(labels or {})},
        },
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {"allocatable": alloc, "capacity": alloc},
    }  # fmt: skip


@dataclass
class Cluster:
    root: Path
    bin_dir: Path
    advertise: str = "127.0.0.1"
    layout: Layout | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # -- state --------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.root / "run" / STATE_FILE

    def load(self) -> Layout | None:
        """The layout of a cluster recorded under root (started by any process), or None."""
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return None
        self.layout = Layout(self.root, self.bin_dir, state["ports"], state.get("advertise", "127.0.0.1"))
        return self.layout

    def _save(self, pids: Mapping[str, int]) -> None:
        assert self.layout is not None
        state = {"ports": self.layout.ports, "advertise": self.layout.advertise, "pids": dict(pids)}
        self.state_path.write_text(json.dumps(state, indent=2) + "\n")

    def _pids(self) -> dict[str, int]:
        try:
            return dict(json.loads(self.state_path.read_text()).get("pids", {}))
        except (OSError, ValueError):
            return {}

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def admin(self) -> Admin:
        lay = self._layout()
        return Admin(lay.server, lay.pki)

    def _layout(self) -> Layout:
        if self.layout is None and self.load() is None:
            raise ClusterError(f"no cluster under {self.root} (make cluster starts one)")
        assert self.layout is not None
        return self.layout

    # -- up -----------------------------------------------------------------------------

    def up(self, nodes: int = 0, timeout: float = 180) -> Layout:
        """Start everything (a cluster already running under root is an error)."""
        for tool in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
            if not (self.bin_dir / tool).exists():
                raise ClusterError(f"no {self.bin_dir / tool}: run hack/cluster/build (make cluster)")
        if self.load() is not None and any(alive(p) for p in self._pids().values()):
            raise ClusterError(f"a cluster is already running under {self.root} (make cluster-down)")
        shutil.rmtree(self.root / "run", ignore_errors=True)
        self.layout = lay = Layout(self.root, self.bin_dir, free_ports(PORT_NAMES), self.advertise)
        lay.logs.mkdir(parents=True)
        make_pki(lay.pki, lay.advertise)
        self._write_kubeconfigs(lay)
        deadline = time.monotonic() + timeout
        try:
            for comp in COMPONENTS:
                self.start(comp.name)
                self._wait_ready(comp, deadline)
            self._wait_controllers(deadline)
            for i in range(nodes):
                self.add_node(kwok_node(f"kwok-node-{i}"))
            self.wait_nodes_ready([f"kwok-node-{i}" for i in range(nodes)], deadline)
        except BaseException:
            self.down()
            raise
        write_kubeconfig(self.kubeconfig, lay.server, lay.pki / "ca.crt",
                         lay.pki / "admin.crt", lay.pki / "admin.key")  # fmt: skip
        return lay

    def _write_kubeconfigs(self, lay: Layout) -> None:
        for who, cert in (("controller-manager", "controller-manager"), ("scheduler", "scheduler"),
                          ("kwok", "kwok"), ("admin", "admin")):  # fmt: skip
            write_kubeconfig(lay.kubeconfig_for(who), lay.server, lay.pki / "ca.crt",
                             lay.pki / f"{cert}.crt", lay.pki / f"{cert}.key")  # fmt: skip

    def start(self, name: str) -> None:
        """Start one component (again: after ``kill``), same flags, same ports."""
        lay = self._layout()
        comp = BY_NAME[name]
        log = open(lay.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(  # noqa: S603
            comp.argv(lay), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **comp.env},
        )
        log.close()
        self.procs[name] = proc
        pids = self._pids()
        pids[name] = proc.pid
        self._save(pids)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Stop one component at once (kill -9 by default), as a crash would."""
        pid = self._pids().get(name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            wait_gone(pid, 30)
        proc = self.procs.pop(name, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    def restart(self, name: str, timeout: float = 90) -> None:
        """``kill`` and ``start`` again on the same port. The port is free for a moment in
        between, and on a shared machine another program may bind it then (a cluster
        starting elsewhere probes for free ports): the start is tried again while the
        component exits saying so."""
        self.kill(name)
        deadline = time.monotonic() + timeout
        while True:
            self.start(name)
            try:
                self._wait_ready(BY_NAME[name], deadline)
                return
            except ClusterError as err:
                if "address already in use" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def expose(self, ip: str) -> None:
        """Serve the API on ``ip`` too (a real node's pods reach it there, through the
        ``kubernetes`` Service): a certificate naming it, every address bound, the
        Service's endpoints kept by lease. A restart of the API server, nothing else."""
        lay = self._layout()
        if lay.advertise == ip:
            return
        issue(lay.pki, apiserver_identity(ip))
        self.layout = replace(lay, advertise=ip)
        self._save(self._pids())
        self.restart("kube-apiserver")

    def _wait_ready(self, comp: Component, deadline: float) -> None:
        lay = self._layout()
        if comp.ready_path is None:
            time.sleep(0.5)
            self._check_alive(comp.name)
            return
        ctx = ssl.create_default_context(cafile=str(lay.pki / "ca.crt"))
        if comp.ready_cert is not None:
            ctx.load_cert_chain(str(lay.pki / f"{comp.ready_cert}.crt"), str(lay.pki / f"{comp.ready_cert}.key"))
        else:  # the controller-manager and scheduler serve a self-signed certificate
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{lay.ports[comp.name]}{comp.ready_path}"
        last = ""
        while time.monotonic() < deadline:
            self._check_alive(comp.name)
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError) as err:
                last = str(err)
            time.sleep(0.3)
        raise ClusterError(f"{comp.name} not ready in time ({last}); its log: {lay.logs / comp.name}.log")

    def _check_alive(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            lay = self._layout()
            tail = (lay.logs / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
            raise ClusterError(f"{name} exited with {proc.returncode}; its log ends:\n" + "\n".join(tail))

    def _wait_controllers(self, deadline: float) -> None:
        """The controller-manager is at work once it made the default ServiceAccount."""
        admin = self.admin()
        while time.monotonic() < deadline:
            self._check_alive("kube-controller-manager")
            code, _ = admin.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            if code == 200:
                return
            time.sleep(0.3)
        raise ClusterError("the controller-manager made no default ServiceAccount in time")

    # -- nodes --------------------------------------------------------------------------

    def add_node(self, manifest: Mapping[str, Any]) -> None:
        """Create (or replace) a Node; a kwok node's status is set as given, then kwok's."""
        admin = self.admin()
        node = dict(manifest)
        admin.apply(node, "/api/v1/nodes")
        status = node.get("status")
        if status:
            name = node["metadata"]["name"]
            code, body = admin.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                                       content_type="application/merge-patch+json")  # fmt: skip
            if code != 200:
                raise ClusterError(f"node {name}: status not set: {code} {body}")

    def wait_nodes_ready(self, names: Iterable[str], deadline: float) -> None:
        admin = self.admin()
        for name in names:
            while True:
                code, node = admin.request("GET", f"/api/v1/nodes/{name}")  # 404 until it registers
                conditions = node.get("status", {}).get("conditions", []) if code == 200 else []
                conds = {c["type"]: c["status"] for c in conditions}
                if conds.get("Ready") == "True":
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(f"node {name} not Ready in time ({conds})")
                time.sleep(0.2)

    # -- down ---------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop every recorded process (TERM, then KILL) and remove the cluster's state (a
        real node joined to it goes first: ``node.down_all``)."""
        stopped = []
        pids = self._pids()
        for name in reversed([c.name for c in COMPONENTS]):
            pid = pids.get(name)
            if pid is not None and alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                if not wait_gone(pid, 10):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    wait_gone(pid, 10)
                stopped.append(name)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self.procs.clear()
        shutil.rmtree(self.root / "run", ignore_errors=True)
        self.kubeconfig.unlink(missing_ok=True)
        self.layout = None
        return stopped

    def status(self) -> dict[str, bool]:
        pids = self._pids()
        return {c.name: pids.get(c.name) is not None and alive(pids[c.name]) for c in COMPONENTS}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is gone for every purpose here
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False
