"""This machine as a real node of the cluster: containerd, the kubelet and kube-proxy.

``RealNode(cluster).up()`` (``make node``, after ``make cluster``) joins this host to the
running cluster the way a node joins any cluster: containerd with runc (Debian's: crun
refuses this host's hybrid cgroups) and the CNI plugins from Debian's
containernetworking-plugins (a bridge, host-local addresses, portmap), the kubelet with
its own client and serving certificates from the cluster's CA (no bootstrap), the
cgroupfs driver on cgroup v1 (what this host has), and kube-proxy (iptables), so that pods
reach the API server through the ``kubernetes`` Service. Images come from archives, not a
registry: the sandbox image is made here (devtools.cluster.images), the project's image and
its base are saved from the engine that built them.

What this host needs beyond a stock node, each the smallest change that works here (and
docs/install.md says so):

* ``failCgroupV1: false``: Kubernetes 1.35+ refuses cgroup v1 unless told;
* containerd's ``restrict_oom_score_adj``: this host withholds CAP_SYS_RESOURCE, so
  writing a negative ``oom_score_adj`` (the kubelet asks -998 for sandboxes, -997 for
  Guaranteed containers) fails and runc cannot start any pod; with it, a negative score is
  raised to containerd's own (0);
* ``failSwapOn: false`` (there is no swap, the check is moot) and low eviction thresholds
  (a shared disk would otherwise make the kubelet evict the tests' pods);
* the API server is exposed on the host's address (``Cluster.expose``): loopback is not
  reachable from a pod's network namespace.

``down()`` (``make node-down``; ``make cluster-down`` does it first) stops the kubelet,
removes every pod sandbox through the CRI (crictl: so the CNI plugins release addresses
and rules), stops containerd and kube-proxy, removes kube-proxy's and the kubelet's
iptables chains, the bridge, the mounts and the kubepods cgroups, and the Node object.
One real node per host: a second ``up`` while one runs is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.cluster.api import write_kubeconfig
from devtools.cluster.images import PAUSE_IMAGE, compile_pause, pause_archive
from devtools.cluster.launcher import Cluster, ClusterError, alive, wait_gone
from devtools.cluster.pki import Identity, issue

RUNTIME = Path("/run/waterline-node")
KUBELET_ROOT = Path("/var/lib/waterline-node/kubelet")
POD_LOGS = Path("/var/log/waterline-node/pods")
CNI_STATE = Path("/var/lib/cni/networks/waterline")
BRIDGE = "wl0"
POD_CIDR = "10.88.0.0/16"
SOCKET = RUNTIME / "containerd.sock"
OWNER = RUNTIME / "owner.json"
#: Labels the real node carries (unprefixed: NodeRestriction lets a kubelet set them).
LABELS = {"waterline.test/real-node": "true"}
PROGRAMS = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "crictl")
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
#: Chains the kubelet and kube-proxy leave behind them (kube-proxy --cleanup takes its own).
KUBE_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")


def host_ip() -> str:
    """The address of the interface the default route leaves by."""
    out = subprocess.run(["ip", "-4", "-o", "route", "get", "192.0.2.254"],  # noqa: S607
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return out[out.index("src") + 1]


def node_name() -> str:
    return socket.gethostname().lower().split(".")[0]


def missing_prerequisites(bin_dir: Path) -> list[str]:
    problems = []
    if os.geteuid() != 0:
        problems.append("a real node needs root")
    gone = [p for p in PROGRAMS if not (bin_dir / p).exists()]
    if gone:
        problems.append(f"not built: {', '.join(gone)} (hack/cluster/build {' '.join(gone)})")
    if shutil.which("runc") is None:
        problems.append("no runc (apt-get install runc)")
    cni = [p for p in CNI_PLUGINS if not Path("/usr/lib/cni", p).exists()]
    if cni:
        problems.append(f"no CNI plugin {', '.join(cni)} (apt-get install containernetworking-plugins)")
    for tool in ("iptables", "ip", "gcc"):
        if shutil.which(tool) is None:
            problems.append(f"no {tool}")
    return problems


@dataclass
class RealNode:
    cluster: Cluster
    name: str = field(default_factory=node_name)
    ip: str = field(default_factory=host_ip)
    images: tuple[Path, ...] = ()

    @property
    def folder(self) -> Path:
        return self.cluster.root / "run" / "node"

    @property
    def bin(self) -> Path:
        return self.cluster.bin_dir

    # -- up -----------------------------------------------------------------------------

    def up(self, timeout: float = 180) -> None:
        problems = missing_prerequisites(self.bin)
        if problems:
            raise ClusterError("cannot make a real node here: " + "; ".join(problems))
        owner = _owner()
        if owner is not None:
            raise ClusterError(f"a real node already runs on this host, for {owner['cluster']} "
                               f"(make node-down there)")  # fmt: skip
        lay = self.cluster._layout()
        deadline = time.monotonic() + timeout
        self.folder.mkdir(parents=True, exist_ok=True)
        for d in (RUNTIME, KUBELET_ROOT, POD_LOGS):
            d.mkdir(parents=True, exist_ok=True)
        OWNER.write_text(json.dumps({"cluster": str(self.cluster.root), "node": self.name}))
        try:
            self.cluster.expose(self.ip)
            self._pki()
            self._write_configs()
            self._start("containerd", [str(self.bin / "containerd"), "--config", str(self.folder / "containerd.toml")])
            _wait_for(lambda: SOCKET.exists(), deadline, "containerd's socket")
            self._load_images()
            self.start_kubelet()
            self.cluster.wait_nodes_ready([self.name], deadline)
            self._start("kube-proxy", [str(self.bin / "kube-proxy"), "--config", str(self.folder / "kube-proxy.yaml"),
                                       "--v", str(lay.verbosity)])  # fmt: skip
            _wait_for(self._proxy_healthy, deadline, "kube-proxy's health")
        except BaseException:
            self.down()
            raise

    def start_kubelet(self) -> subprocess.Popen[bytes]:
        """Start the kubelet (``up`` does; a test restarts it to see what it does at its start)."""
        self._start("kubelet", [
            str(self.bin / "kubelet"), "--config", str(self.folder / "kubelet.yaml"),
            "--kubeconfig", str(self.folder / "kubelet.kubeconfig"),
            "--hostname-override", self.name, "--node-ip", self.ip,
            "--node-labels", ",".join(f"{k}={v}" for k, v in LABELS.items()),
            "--root-dir", str(KUBELET_ROOT), "--v", str(self.cluster._layout().verbosity),
        ])  # fmt: skip
        return self.cluster.procs["kubelet"]

    def stop_kubelet(self) -> bool:
        """Stop the kubelet (SIGTERM, as systemd does), leaving containerd and the pods."""
        return _stop(self._state().get("kubelet"))

    def _pki(self) -> None:
        pki = self.cluster._layout().pki
        issue(pki, Identity("kubelet-client", f"system:node:{self.name}", "system:nodes"))
        issue(pki, Identity("kubelet-server", self.name, dns=(self.name,), ips=(self.ip, "127.0.0.1"), server=True))
        issue(pki, Identity("kube-proxy", "system:kube-proxy"))

    def _write_configs(self) -> None:
        lay = self.cluster._layout()
        pki, f = lay.pki, self.folder
        for who in ("kubelet", "kube-proxy"):
            cert = "kubelet-client" if who == "kubelet" else "kube-proxy"
            write_kubeconfig(f / f"{who}.kubeconfig", lay.server, pki / "ca.crt",
                             pki / f"{cert}.crt", pki / f"{cert}.key")  # fmt: skip
        (f / "cni").mkdir(exist_ok=True)
        (f / "cni" / "10-waterline.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "waterline",
            "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))  # fmt: skip
        (f / "containerd.toml").write_text(CONTAINERD_CONFIG.format(
            root=f / "containerd", state=RUNTIME / "containerd", socket=SOCKET, pause=PAUSE_IMAGE,
            runc=shutil.which("runc"), cni=f / "cni"))  # fmt: skip
        (f / "kubelet.yaml").write_text(KUBELET_CONFIG.format(
            ca=pki / "ca.crt", cert=pki / "kubelet-server.crt", key=pki / "kubelet-server.key",
            socket=SOCKET, ip=self.ip, logs=POD_LOGS))  # fmt: skip
        (f / "kube-proxy.yaml").write_text(KUBE_PROXY_CONFIG.format(
            kubeconfig=f / "kube-proxy.kubeconfig", cidr=POD_CIDR, name=self.name))  # fmt: skip

    def _start(self, name: str, argv: list[str]) -> None:
        lay = self.cluster._layout()
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ.get('PATH', '')}"}
        with open(lay.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,  # noqa: S603
                                    start_new_session=True, env=env)  # fmt: skip
        self.cluster.procs[name] = proc
        state = self._state()
        state[name] = proc.pid
        (self.folder / "node.json").write_text(json.dumps(state))

    def _state(self) -> dict[str, int]:
        try:
            return dict(json.loads((self.folder / "node.json").read_text()))
        except (OSError, ValueError):
            return {}

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "ctr"), "-a", str(SOCKET), "-n", "k8s.io", *args],  # noqa: S603
                              capture_output=True, text=True)  # fmt: skip

    def _load_images(self) -> None:
        pause = pause_archive(compile_pause(self.folder / "pause"), self.folder / "pause.tar")
        for archive in (pause, *self.images):
            done = self.ctr("images", "import", str(archive))
            if done.returncode != 0:
                raise ClusterError(f"containerd did not import {archive}: {done.stderr.strip()[-500:]}")

    def _proxy_healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen("http://127.0.0.1:10256/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    # -- down ---------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop and remove everything ``up`` made (also half of it, after a failed up)."""
        state = self._state()
        stopped = []
        if _stop(state.get("kubelet")):
            stopped.append("kubelet")
        if SOCKET.exists():  # every pod sandbox through the CRI: the CNI releases its part
            subprocess.run([str(self.bin / "crictl"), "--runtime-endpoint", f"unix://{SOCKET}", "--timeout", "60s",  # noqa: S603
                            "rmp", "--all", "--force"], capture_output=True, timeout=180)  # fmt: skip
        for name in ("containerd", "kube-proxy"):
            if _stop(state.get(name)):
                stopped.append(name)
        if (self.bin / "kube-proxy").exists():
            subprocess.run([str(self.bin / "kube-proxy"), "--cleanup"], capture_output=True)  # noqa: S603
        _remove_chains()
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)  # noqa: S607
        for top in (KUBELET_ROOT.parent, RUNTIME, self.folder, Path("/run/containerd/runc/k8s.io")):
            _unmount_under(top)
        _remove_kubepods_cgroups()
        for path in (KUBELET_ROOT.parent, POD_LOGS.parent, CNI_STATE, self.folder, RUNTIME,
                     Path("/run/containerd/runc/k8s.io")):  # fmt: skip
            shutil.rmtree(path, ignore_errors=True)
        for shared in ("/run/containerd/s", "/run/containerd/fifo", "/run/containerd/runc", "/run/containerd"):
            with contextlib.suppress(OSError):  # containerd's fixed paths: only when empty
                os.rmdir(shared)
        for name in ("kubelet", "containerd", "kube-proxy"):
            self.cluster.procs.pop(name, None)
        with contextlib.suppress(ClusterError, OSError, RuntimeError):
            self.cluster.admin().request("DELETE", f"/api/v1/nodes/{self.name}")
        return stopped


def down_all(cluster: Cluster) -> list[str]:
    """The cluster and the real node joined to it, the node first."""
    stopped = RealNode(cluster).down() if (cluster.root / "run" / "node" / "node.json").exists() else []
    return stopped + cluster.down()


def _owner() -> dict[str, str] | None:
    """Who runs the node on this host, if a node runs (its kubelet alive)."""
    try:
        owner = dict(json.loads(OWNER.read_text()))
        state = json.loads((Path(owner["cluster"]) / "run" / "node" / "node.json").read_text())
    except (OSError, ValueError, KeyError):
        return None
    return owner if alive(int(state.get("kubelet", 0)) or -1) else None


def _stop(pid: int | None) -> bool:
    if pid is None or not alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, 20):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 10)
    return True


def _wait_for(condition: object, deadline: float, what: str) -> None:
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise ClusterError(f"{what}: not there in time")
        time.sleep(0.2)


def _remove_chains() -> None:
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            rules = subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True).stdout  # noqa: S603
            for line in rules.splitlines():
                parts = line.split()
                if line.startswith("-A ") and "-j" in parts and parts[parts.index("-j") + 1] in KUBE_CHAINS:
                    subprocess.run([tool, "-t", table, "-D", *parts[1:]], capture_output=True)  # noqa: S603
            for chain in KUBE_CHAINS:
                subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)  # noqa: S603
                subprocess.run([tool, "-t", table, "-X", chain], capture_output=True)  # noqa: S603


def _unmount_under(top: Path) -> None:
    """Every mount point at or below ``top``, deepest first."""
    prefix = str(top.resolve())
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted({p for p in points if p == prefix or p.startswith(prefix + "/")}, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)  # noqa: S607


def _remove_kubepods_cgroups() -> None:
    base = Path("/sys/fs/cgroup")
    for hierarchy in [base, *[p for p in base.iterdir() if p.is_dir()]] if base.exists() else []:
        top = hierarchy / "kubepods"
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


CONTAINERD_CONFIG = """\
# containerd of the real node (devtools/cluster/node.py writes it).
version = 3
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause}"
[plugins."io.containerd.cri.v1.runtime"]
  # This host withholds CAP_SYS_RESOURCE: a negative oom_score_adj cannot be written.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni}"
"""

KUBELET_CONFIG = """\
# The real node's kubelet (devtools/cluster/node.py writes it).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
address: {ip}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
rotateCertificates: false
serverTLSBootstrap: false
podLogsDir: {logs}
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"""

KUBE_PROXY_CONFIG = """\
# The real node's kube-proxy (devtools/cluster/node.py writes it).
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {kubeconfig}}}
mode: iptables
clusterCIDR: {cidr}
hostnameOverride: {name}
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {{maxPerCore: 0}}
"""
