"""The guest as a real node of a running cluster (``make vm-node``, docs/vm.md).

The cgroup v2 + systemd guest of ``make vm`` joins ``make cluster``'s control plane the way
this host joins it in ``make node`` (devtools/cluster/node.py), with the same programs:
containerd (Debian's runc, ``SystemdCgroup = true``), the kubelet with the **systemd cgroup
driver** on cgroup v2, kube-proxy (iptables) and Debian's CNI plugins, each started as a
transient systemd service (``systemd-run``), as a distribution's units would run them.

* **Network**: qemu's user network. The guest is 10.0.2.15 and reaches this machine's
  loopback at the gateway, 10.0.2.2: the API server is exposed there (``Cluster.expose``:
  its certificate names 10.0.2.2, it advertises 10.0.2.2, so the ``kubernetes`` Service's
  endpoint, which pods reach through kube-proxy, is the address the guest dials). Nothing
  in the guest dials anything else: the images come on the share, ``IfNotPresent``/
  ``Never`` finds them. The API server reaches the guest's kubelet (``kubectl logs``/
  ``exec``) at an address this machine's loopback holds and qemu forwards to the guest
  (devtools/vm/node_address.py); without root the Node's address is 10.0.2.15 and those
  are not served (the tests read the guest through the share).
* **Identities**: the kubelet's client and serving certificates and kube-proxy's, issued
  by the cluster's CA under their own stems (``vm-*``), so the host's real node can join
  the same cluster beside it.
* **Images**: the sandbox image made here (devtools.cluster.images) and the archives given
  (the project's image and its base, saved by the engine that built them) are imported
  into the guest's containerd; a local image under another name is tagged as the
  project's (``tags``), as tests/e2e does.
* **The share** carries the programs (the same builds as ``make node``: .cluster/bin), the
  configuration, the certificates and the images in, and the guest's logs and step times
  out (``out/steps``: each step's guest uptime). After the node is up the guest runs
  commands the host drops in ``cmd/`` (``run``) until ``cmd/stop`` appears; then it powers
  off.

``up`` measures each step (qemu's start to the guest's service, then the guest's own
clock for each step, then the node Ready as the API server says); ``down`` stops the
guest and removes the Node. The guest's disk is a throw-away overlay (``-snapshot``):
nothing is left behind but the Node object, which ``down`` deletes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.cluster.api import write_kubeconfig
from devtools.cluster.images import PAUSE_IMAGE, ROOT, compile_pause, pause_archive, save
from devtools.cluster.launcher import Cluster, ClusterError, alive, wait_gone
from devtools.cluster.pki import Identity, issue
from devtools.vm import node_address
from devtools.vm.guest import CMDLINE, QEMU, accel, prepare_share
from devtools.vm.image import Image

NAME = "waterline-vm"  # the guest's hostname (hack/vm/build)
GUEST_IP = "10.0.2.15"
#: qemu's user network: the gateway is this machine's loopback.
GATEWAY = "10.0.2.2"
POD_CIDR = "10.88.0.0/16"
LABELS = {"waterline.test/vm-node": "true"}
#: The guest registers tainted, so only pods that ask for it land there (the tests' pods
#: tolerate it; the agent's DaemonSet tolerates every taint). In ``make test`` the guest
#: joins a cluster other tests have used: a cold CI once had an earlier test's Pending
#: 1.5-core pod scheduled onto it as soon as it was Ready, which left no room for the
#: Guaranteed pod of tests/vm_node.
TAINT = ("waterline.test/vm-node", "true", "NoSchedule")
PROGRAMS = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "crictl")
#: Where the guest keeps the share's configuration (the share is read through 9p).
ETC = "/etc/waterline-node"
SOCKET = "/run/containerd/containerd.sock"
STATE = "vm.json"
NAMESPACE = "waterline-system"
AGENT = "app.kubernetes.io/name%3Dwaterline-agent"


def guest_path(name: str) -> str:
    return f"{ETC}/{name}"


@dataclass(frozen=True, slots=True)
class Steps:
    """How long each part of the join took, in seconds."""

    #: qemu's start to the guest's service (the guest's boot, under emulation).
    boot: float | None
    #: step name -> seconds, measured by the guest's clock (install, network, programs,
    #: containerd, images, kubelet, kube-proxy).
    guest: dict[str, float]
    #: qemu's start to the Node Ready (the API server's word).
    ready: float
    #: The kubelet's start (seen on the share by this machine's clock) to the Node Ready.
    kubelet_to_ready: float | None = None

    def lines(self) -> list[str]:
        out = [f"boot (qemu's start to the guest's service): {self.boot:.0f} s" if self.boot is not None
               else "boot: ?"]  # fmt: skip
        out += [f"{name}: {seconds:.1f} s" for name, seconds in self.guest.items()]
        if self.kubelet_to_ready is not None:
            out.append(f"the kubelet's start to the node Ready: {self.kubelet_to_ready:.0f} s")
        out.append(f"qemu's start to the node Ready: {self.ready:.0f} s")
        return out


def guest_steps(lines: str, started: str = "") -> dict[str, float]:
    """``out/steps`` (``<step> <uptime>`` at each step's start, ``up`` last) as each
    step's duration; with ``started`` (``out/started``: the guest's uptime when its service
    began) the first step is ``install``, Waterline copied in from the share
    (guest.INSTALL): left out, the printed steps did not add up to the total (145 s of
    540 missing in a loaded run)."""
    if started.strip():
        lines = f"install {started.strip()}\n{lines}"
    marks = [
        (parts[0], float(parts[1]))
        for parts in (line.split() for line in lines.splitlines())
        if len(parts) == 2
    ]
    return {
        name: round(nxt - at, 1) for (name, at), (_n, nxt) in zip(marks, marks[1:], strict=False)
    }


@dataclass
class VmNode:
    cluster: Cluster
    image: Image
    #: Image archives imported into the guest's containerd (the sandbox image is added).
    images: tuple[Path, ...] = ()
    #: Tags made in the guest after the import: local name -> the name the manifests run.
    tags: Mapping[str, str] = field(default_factory=dict)
    memory_mib: int = 2048
    cpus: int = 2
    name: str = NAME
    started: float = 0.0
    #: The Node's address: one this machine's loopback holds for it (node_address), else
    #: the guest's own (``up`` decides).
    node_ip: str = GUEST_IP

    @property
    def folder(self) -> Path:
        return guest_folder(self.cluster)

    @property
    def share(self) -> Path:
        return self.folder / "share"

    # -- up -----------------------------------------------------------------------------

    def up(self, timeout: float = 1500) -> Steps:
        """Boot the guest and join it; the steps' times. Raises ClusterError (with the
        guest's log) when it does not come up; nothing is left running then."""
        if shutil.which(QEMU) is None:
            raise ClusterError(f"{QEMU} is not installed (apt-get install qemu-system-x86)")
        gone = [p for p in PROGRAMS if not (self.cluster.bin_dir / p).exists()]
        if gone:
            raise ClusterError(
                f"not built: {', '.join(gone)} (hack/cluster/build {' '.join(gone)})"
            )
        if self._pid() is not None:
            raise ClusterError(
                f"a guest node already runs for {self.cluster.root} (make vm-node-down)"
            )
        shutil.rmtree(self.folder, ignore_errors=True)
        self.share.mkdir(parents=True)
        try:
            self.cluster.expose(GATEWAY)
            self.node_ip = node_address.hold() or GUEST_IP
            self._prepare()
            self._boot()
            deadline = self.started + timeout
            kubelet, ready = self._wait_ready(deadline)
            boot = None
            with contextlib.suppress(OSError, ValueError):
                boot = float((self.share / "out" / "booted").read_text())
            return Steps(boot, guest_steps(self._read("out/steps"), self._read("out/started")), ready,
                         None if kubelet is None else ready - kubelet)  # fmt: skip
        except BaseException:
            self.down()
            raise

    def _prepare(self) -> None:
        lay = self.cluster._layout()
        pki = lay.pki
        issue(pki, Identity("vm-kubelet-client", f"system:node:{self.name}", "system:nodes"))
        issue(
            pki,
            Identity(
                "vm-kubelet-server",
                self.name,
                dns=(self.name,),
                ips=(self.node_ip, GUEST_IP, "127.0.0.1"),
                server=True,
            ),
        )
        issue(pki, Identity("vm-kube-proxy", "system:kube-proxy"))
        node = self.share / "node"
        (node / "cni").mkdir(parents=True)
        for stem in ("vm-kubelet-client", "vm-kubelet-server", "vm-kube-proxy"):
            for ext in ("crt", "key"):
                shutil.copy2(pki / f"{stem}.{ext}", node / f"{stem}.{ext}")
        shutil.copy2(pki / "ca.crt", node / "ca.crt")
        server = f"https://{GATEWAY}:{lay.ports['kube-apiserver']}"
        for who, stem in (("kubelet", "vm-kubelet-client"), ("kube-proxy", "vm-kube-proxy")):
            write_kubeconfig(node / f"{who}.kubeconfig", server, Path(guest_path("ca.crt")),
                             Path(guest_path(f"{stem}.crt")), Path(guest_path(f"{stem}.key")))  # fmt: skip
        (node / "cni" / "10-waterline.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "waterline",
            "plugins": [
                {"type": "bridge", "bridge": "wl0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))  # fmt: skip
        (node / "containerd.toml").write_text(CONTAINERD_CONFIG.format(socket=SOCKET, pause=PAUSE_IMAGE,
                                                                       cni=guest_path("cni")))  # fmt: skip
        (node / "kubelet.yaml").write_text(KUBELET_CONFIG.format(etc=ETC, socket=SOCKET, port=node_address.KUBELET_PORT))
        (node / "kube-proxy.yaml").write_text(
            KUBE_PROXY_CONFIG.format(etc=ETC, cidr=POD_CIDR, name=self.name)
        )
        (self.share / "bin").mkdir()
        for program in PROGRAMS:
            shutil.copy2((self.cluster.bin_dir / program).resolve(), self.share / "bin" / program)
        images = self.share / "images"
        images.mkdir()
        pause_archive(compile_pause(self.folder / "pause"), images / "0-pause.tar")
        for i, archive in enumerate(self.images, 1):
            shutil.copy2(archive, images / f"{i}-{archive.name}")
        (self.share / "tags").write_text("".join(f"{a} {b}\n" for a, b in self.tags.items()))
        labels = ",".join(f"{k}={v}" for k, v in LABELS.items())
        taint = f"{TAINT[0]}={TAINT[1]}:{TAINT[2]}"
        prepare_share(self.share, GUEST_SCRIPT.format(etc=ETC, socket=SOCKET, name=self.name, ip=GUEST_IP,
                                                      node_ip=self.node_ip,
                                                      gateway=GATEWAY, labels=labels, taint=taint))  # fmt: skip
        (self.share / "cmd").mkdir()
        (self.share / "out" / "logs").mkdir()

    def _boot(self) -> None:
        qemu = shutil.which(QEMU)
        assert qemu is not None
        command = [
            qemu, "-machine", "q35", "-accel", accel(), "-cpu", "max" if accel() == "tcg" else "host",
            "-smp", str(self.cpus), "-m", str(self.memory_mib),
            "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd), "-append", CMDLINE,
            "-drive", f"file={self.image.rootfs},format=raw,if=virtio,snapshot=on",
            "-virtfs", f"local,path={self.share},mount_tag=share,security_model=none,id=share",
            "-nic", "user,model=virtio-net-pci" + node_address.hostfwd(self.node_ip),
            "-display", "none", "-no-reboot",
            "-serial", f"file:{self.share / 'console.log'}", "-monitor", "none",
        ]  # fmt: skip
        with open(self.folder / "qemu.log", "wb") as log:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,  # noqa: S603
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self.started = time.monotonic()
        (self.folder / STATE).write_text(json.dumps({"qemu": proc.pid, "share": str(self.share),
                                                     "node_ip": self.node_ip}))  # fmt: skip

    def _wait_ready(self, deadline: float) -> tuple[float | None, float]:
        """Wait for the Node Ready and the guest's last step (kube-proxy healthy: ``up``,
        which comes after the Node is Ready, so the steps printed end with kube-proxy's);
        when the kubelet's step started, if it was seen, and when the Node was Ready
        (seconds after qemu's start, this machine's clock, to a second)."""
        admin = self.cluster.admin()
        booted = False
        kubelet: float | None = None
        ready: float | None = None
        while True:
            if not booted and (self.share / "out" / "started").exists():
                booted = True
                (self.share / "out" / "booted").write_text(f"{time.monotonic() - self.started:.1f}")
            if kubelet is None and "\nkubelet " in "\n" + self._read("out/steps"):
                kubelet = time.monotonic() - self.started
            rc = self._read("out/rc").strip()
            if rc or self._pid() is None:
                raise ClusterError(f"the guest's join stopped (rc {rc or '?'}); its log ends:\n"
                                   f"{self._read('out/guest.log')[-3000:]}\nconsole:\n"
                                   f"{self._read('console.log')[-2000:]}")  # fmt: skip
            if ready is None:
                code, node = admin.request("GET", f"/api/v1/nodes/{self.name}")
                conditions = node.get("status", {}).get("conditions", []) if code == 200 else []
                if {c["type"]: c["status"] for c in conditions}.get("Ready") == "True":
                    ready = time.monotonic() - self.started
            if ready is not None and "\nup " in "\n" + self._read("out/steps"):
                return kubelet, ready
            if time.monotonic() > deadline:
                raise ClusterError(f"node {self.name} not Ready in time; the guest's steps: "
                                   f"{self._read('out/steps').split()}; its log ends:\n"
                                   f"{self._read('out/guest.log')[-3000:]}")  # fmt: skip
            time.sleep(1)

    def running(self) -> bool:
        """A guest of this cluster is running (``make vm-node``'s, from another process)."""
        return self._pid() is not None

    def _read(self, name: str) -> str:
        try:
            return (self.share / name).read_text(errors="replace")
        except OSError:
            return ""

    def _pid(self) -> int | None:
        return guest_pid(self.folder)

    # -- the guest's commands -------------------------------------------------------------

    def run(self, script: str, timeout: float = 300) -> tuple[int, str]:
        """Run ``script`` (sh) in the guest, as root; its exit code and output. Commands
        run one at a time, in the order given; raises ClusterError when the guest does not
        answer in time."""
        cmd = self.share / "cmd"
        number = len(list(cmd.glob("*.rc"))) + len(list(cmd.glob("*.sh")))
        stem = f"{time.time_ns()}-{number}"
        (cmd / f"{stem}.tmp").write_text(script)
        (cmd / f"{stem}.tmp").rename(cmd / f"{stem}.sh")
        deadline = time.monotonic() + timeout
        while not (cmd / f"{stem}.rc").exists():
            if time.monotonic() > deadline or self._pid() is None:
                raise ClusterError(f"the guest did not run {script[:200]!r} in {timeout:.0f} s")
            time.sleep(0.2)
        rc = int((cmd / f"{stem}.rc").read_text().strip())
        out = (cmd / f"{stem}.out").read_text(errors="replace")
        for ext in ("rc", "out"):
            (cmd / f"{stem}.{ext}").unlink(missing_ok=True)
        return rc, out

    def check(self, script: str, timeout: float = 300) -> str:
        """``run``, raising ClusterError (with the output) on a non-zero exit."""
        rc, out = self.run(script, timeout)
        if rc != 0:
            raise ClusterError(f"in the guest, {script[:200]!r} exited {rc}: {out[-2000:]}")
        return out

    # -- down -----------------------------------------------------------------------------

    def down(self, timeout: float = 120) -> bool:
        """Stop the guest and delete the Node: ``stop_guest`` (the node's address given
        back here too: a failed ``up`` may stop before the record has it)."""
        stopped = stop_guest(self.cluster, self.name, timeout)
        node_address.drop(self.node_ip)
        return stopped


def guest_folder(cluster: Cluster) -> Path:
    """Where a guest node of ``cluster`` keeps its share and its record."""
    return cluster.root / "run" / "vm-node"


def guest_record(folder: Path) -> dict[str, Any]:
    """What the guest's start recorded in ``folder`` (its qemu, its node address); {} if none."""
    try:
        record = json.loads((folder / STATE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def guest_pid(folder: Path) -> int | None:
    """The running guest's qemu, as its start recorded it in ``folder``; None if none runs."""
    try:
        pid = int(guest_record(folder)["qemu"])
    except (KeyError, TypeError, ValueError):
        return None
    return pid if alive(pid) else None


def stop_guest(cluster: Cluster, name: str = NAME, timeout: float = 120) -> bool:
    """Stop the guest node of ``cluster`` (asked to power off, killed after ``timeout``)
    and delete its Node; True when a guest was running. Needs no image: a guest is stopped
    from what its start recorded under the cluster's ``run`` folder."""
    folder = guest_folder(cluster)
    record, pid = guest_record(folder), guest_pid(folder)
    if pid is not None:
        with contextlib.suppress(OSError):
            (folder / "share" / "cmd" / "stop").write_text("")
        if not wait_gone(pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            wait_gone(pid, 10)
    with contextlib.suppress(ClusterError, OSError, RuntimeError):
        cluster.admin().request("DELETE", f"/api/v1/nodes/{name}")
    with contextlib.suppress(OSError):
        (folder / STATE).unlink()
    node_address.drop(str(record.get("node_ip", "")))
    return pid is not None


def save_image(image: str, out: Path) -> Path:
    """A local image (``make image``) saved to an archive for the guest's containerd."""
    env = {
        **os.environ,
        "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "hack/containers.conf")),
    }
    found = subprocess.run([str(ROOT / "hack/engine")], capture_output=True, text=True, env=env)  # noqa: S603
    if found.returncode != 0:
        raise ClusterError(f"no container engine to save {image}: {found.stderr.strip()}")
    engine = found.stdout.strip()
    inspected = subprocess.run([engine, "image", "inspect", image], capture_output=True, env=env)  # noqa: S603
    if inspected.returncode != 0:
        raise ClusterError(f"no image {image} here: make image IMAGE={image} builds it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    return save(engine, image, out, env)


def agent_pod(cluster: Cluster, node: str) -> dict[str, Any] | None:
    """The agent's pod on ``node``, or None."""
    code, pods = cluster.admin().request(
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={AGENT}&fieldSelector=spec.nodeName%3D{node}",
    )
    items = [
        p
        for p in (pods.get("items", []) if code == 200 else [])
        if not p["metadata"].get("deletionTimestamp")
    ]
    return items[0] if items else None


def pod_ready(pod: Mapping[str, Any] | None) -> bool:
    conditions = (pod or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def install(cluster: Cluster, node: VmNode, timeout: float = 900) -> float:
    """deploy/ applied as a user applies it (``kubectl apply -k``); seconds until the
    agent's pod on the guest is Ready. Raises ClusterError when it is not in time."""
    start = time.monotonic()
    subprocess.run([str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig),  # noqa: S603
                    "apply", "-k", str(ROOT / "deploy")], check=True, capture_output=True)  # fmt: skip
    while not pod_ready(pod := agent_pod(cluster, node.name)):
        if time.monotonic() - start > timeout:
            status = (pod or {}).get("status", {})
            raise ClusterError(f"the agent's pod on {node.name} not Ready in {timeout:.0f} s: "
                               f"{json.dumps(status.get('containerStatuses') or status)[:1500]}")  # fmt: skip
        time.sleep(2)
    return time.monotonic() - start


#: The guest's join, after the share's install of Waterline (devtools/vm/guest.INSTALL):
#: each step's start goes to out/steps with the guest's uptime; the services log to the
#: share (out/logs/). Then the command loop.
GUEST_SCRIPT = r"""
S=/mnt/share
set -eu
step() {{ echo "$1 $(cut -d' ' -f1 /proc/uptime)" >>"$S/out/steps"; echo "== $1"; }}
# name, command...: a transient service logging to the share, restarted when it exits with
# an error, as a distribution's units are (kube-proxy exits on purpose when it started
# before the kubelet had registered the Node's addresses: "NodeIPs changed for the node").
service() {{
	name=$1; shift
	systemd-run --quiet --unit="$name" --property=Delegate=yes --property=KillMode=process \
		--property=Restart=on-failure --property=RestartSec=2 \
		--property=StandardOutput="append:$S/out/logs/$name.log" --property=StandardError=inherit "$@"
}}
step network
ip link set lo up
ip addr add {ip}/24 dev eth0
[ "{node_ip}" = "{ip}" ] || ip addr add {node_ip}/32 dev lo  # the Node's address (devtools/vm/node_address.py)
ip link set eth0 up
ip route add default via {gateway}
# Nothing outside this machine: through qemu's user network the guest could reach the
# world; only the gateway (this machine's loopback) is let through, the node's own
# traffic and the pods' (after kube-proxy's DNAT of the kubernetes Service to it).
iptables -I OUTPUT -o eth0 ! -d {gateway} -j REJECT
iptables -I FORWARD -o eth0 ! -d {gateway} -j REJECT
# kube-proxy sets conntrack's parameters at its start and exits when the module is not
# loaded yet.
modprobe overlay
modprobe br_netfilter
modprobe nf_conntrack
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
step programs
install -m 0755 "$S"/bin/* /usr/local/bin/
mkdir -p {etc}
cp -r "$S"/node/. {etc}/
step containerd
service containerd /usr/local/bin/containerd --config {etc}/containerd.toml
n=0; until [ -S {socket} ]; do n=$((n + 1)); [ $n -lt 600 ] || exit 1; sleep 0.5; done
step images
for archive in "$S"/images/*.tar; do
	ctr -a {socket} -n k8s.io images import "$archive" >/dev/null
done
while read -r from to; do
	[ -n "$from" ] && ctr -a {socket} -n k8s.io images tag --force "$from" "$to" >/dev/null
done <"$S/tags"
step kubelet
service kubelet /usr/local/bin/kubelet --config {etc}/kubelet.yaml --kubeconfig {etc}/kubelet.kubeconfig \
	--hostname-override {name} --node-ip {node_ip} --node-labels {labels} --register-with-taints {taint} --v 1
step kube-proxy
# kube-proxy waits 30 s for its Node, then runs without its IPs and exits once the Node
# shows them ("NodeIPs changed"): under a loaded machine's emulation the kubelet had not
# registered it by then, and the join failed. So the Node first, as the kubelet says.
n=0; until grep -q "Successfully registered node" "$S/out/logs/kubelet.log"; do n=$((n + 1)); [ $n -lt 600 ] || exit 1; sleep 1; done
service kube-proxy /usr/local/bin/kube-proxy --config {etc}/kube-proxy.yaml --v 1
n=0
until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:10256/healthz', timeout=5)" 2>/dev/null; do
	! systemctl -q is-failed kube-proxy || {{ echo "kube-proxy failed: out/logs/kube-proxy.log"; exit 1; }}
	n=$((n + 1)); [ $n -lt 300 ] || exit 1; sleep 1
done
step up
set +e
cmd=$S/cmd
while [ ! -e "$cmd/stop" ]; do
	for f in "$cmd"/*.sh; do
		[ -e "$f" ] || continue
		stem=${{f%.sh}}
		sh "$f" >"$stem.out" 2>&1
		echo $? >"$stem.rc.tmp"
		mv "$f" "$stem.done"
		mv "$stem.rc.tmp" "$stem.rc"
		rm -f "$stem.done"
	done
	sleep 0.3
done
systemctl stop kubelet kube-proxy containerd
"""

CONTAINERD_CONFIG = """\
# containerd of the guest node (devtools/vm/node.py writes it): runc with the systemd
# cgroup driver, as the kubelet's.
version = 3
[grpc]
  address = "{socket}"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause}"
[plugins."io.containerd.cri.v1.runtime"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni}"
"""

KUBELET_CONFIG = """\
# The guest node's kubelet (devtools/vm/node.py writes it): the systemd cgroup driver on
# cgroup v2, what most nodes run.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {etc}/ca.crt}}
authorization: {{mode: Webhook}}
tlsCertFile: {etc}/vm-kubelet-server.crt
tlsPrivateKeyFile: {etc}/vm-kubelet-server.key
readOnlyPort: 0
port: {port}
healthzBindAddress: 127.0.0.1
rotateCertificates: false
serverTLSBootstrap: false
resolvConf: ""
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"""

KUBE_PROXY_CONFIG = """\
# The guest node's kube-proxy (devtools/vm/node.py writes it).
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {etc}/kube-proxy.kubeconfig}}
mode: iptables
clusterCIDR: {cidr}
hostnameOverride: {name}
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {{maxPerCore: 0}}
"""
