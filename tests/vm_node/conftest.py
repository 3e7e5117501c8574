"""The cgroup v2 + systemd guest as a real node of the run's cluster (devtools/vm/node.py):
containerd, runc, the kubelet with the systemd cgroup driver and kube-proxy, Waterline's
image imported, deploy/ installed by the run's ``kube`` fixture, so the agent runs as the
DaemonSet's pod on the guest. Everything the tests read of the node they read in the guest
(``VmNode.run`` through the share): the kernel's cgroup files and systemd's units.

Run last by ``make test`` (on the run's cluster), alone by ``make test-vm-node``: a
boot and a join under software emulation take about 3 min, the thirteen tests about 17
more on a quiet machine. The image run is ``WATERLINE_VM_NODE_IMAGE`` (a local image built
with ``make image IMAGE=...``, run under the project's name in the guest, so a shared
machine's tag is left alone) or the project's (``make image``). Where qemu, the guest
image, the node's programs or the image is missing the tests skip with the reason, and
fail in CI (``need``). With ``WATERLINE_TEST_CLUSTER=.cluster`` (a developer's shortcut)
the run borrows that cluster and, when ``make vm-node`` runs a guest on it, that guest too.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from devtools.cluster.images import default_images
from devtools.cluster.launcher import ClusterError
from devtools.harness.cluster import NAMESPACE, RealCluster
from devtools.harness.waiting import wait_until
from devtools.vm.guest import QEMU
from devtools.vm.image import ImageError, ensure_image
from devtools.vm.node import LABELS, NAME, TAINT, Steps, VmNode, agent_pod, pod_ready, save_image
from tests.need import need

#: Figures printed at the end of the run, by test.
FIGURES: dict[str, list[str]] = {}
CGROUP = "/sys/fs/cgroup"
#: Burns one CPU.
BUSY = "while :; do :; done"
IDLE = "while :; do sleep 1; done"
#: Daemon-reloads per check (``VmNodeRun.reloads``): each takes seconds under emulation.
RELOADS = 3

#: The guest's watcher: each file's value every 20 ms, appended when it changes (one
#: Python process, no fork per read: forks cost milliseconds under emulation).
WATCHER = """
import os, sys, time
files = sys.argv[1:]
last = [None] * len(files)
while not os.path.exists("/tmp/watch-stop"):
    for i, path in enumerate(files):
        with open(path) as f:
            value = f.read().strip()
        if value != last[i]:
            last[i] = value
            with open(f"/tmp/watch.{i}", "a") as out:
                out.write(value + "\\n")
    time.sleep(0.02)
"""


def cores(cpu_max: str) -> float:
    """A ``cpu.max`` value in cores (``max``: unlimited)."""
    quota, period = cpu_max.split()
    return float("inf") if quota == "max" else int(quota) / int(period)


def report(test: str, *lines: str) -> None:
    FIGURES.setdefault(test, []).extend(lines)
    for line in lines:
        print(f"[{test}] {line}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("the guest node (cgroup v2, systemd driver): figures")
    for test, lines in FIGURES.items():
        terminalreporter.write_line(f"{test}:")
        for line in lines:
            terminalreporter.write_line(f"  {line}")


@dataclass(frozen=True, slots=True)
class PodUnits:
    """Where the kubelet (systemd driver) and runc put a pod: its slice and its one
    container's scope, as systemd units and as cgroup paths under /sys/fs/cgroup."""

    name: str
    slice: str
    scope: str
    slice_path: str
    scope_path: str

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodUnits:
        uid = pod["metadata"]["uid"].replace("-", "_")
        qos = pod["status"]["qosClass"]
        container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        if qos == "Guaranteed":
            parent, unit = "kubepods.slice", f"kubepods-pod{uid}.slice"
        else:
            tier = qos.lower()
            parent, unit = (
                f"kubepods.slice/kubepods-{tier}.slice",
                f"kubepods-{tier}-pod{uid}.slice",
            )
        scope = f"cri-containerd-{container}.scope"
        return cls(
            pod["metadata"]["name"], unit, scope, f"{parent}/{unit}", f"{parent}/{unit}/{scope}"
        )


@dataclass
class VmNodeRun:
    kube: RealCluster
    node: VmNode
    steps: Steps | None  # None: a guest this run did not start (borrowed)
    image: str

    def read(self, *paths: str) -> dict[str, str]:
        """Files under /sys/fs/cgroup, read in the guest in one go (missing: "")."""
        script = "".join(
            f'echo "{p}	$(cat {CGROUP}/{p} 2>/dev/null | tr "\\n" " ")"\n' for p in paths
        )
        out = self.node.check(script)
        got = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
        return {p: got.get(p, "").strip() for p in paths}

    def usage(self, path: str) -> int:
        """The cgroup's ``usage_usec`` (its ``cpu.stat``): CPU time, kernel-counted."""
        stat = self.read(f"{path}/cpu.stat")[f"{path}/cpu.stat"].split()
        return int(stat[stat.index("usage_usec") + 1])

    def watch(self, files: list[str]) -> None:
        """Start the watcher in the guest on ``files`` (under /sys/fs/cgroup)."""
        paths = " ".join(f"{CGROUP}/{f}" for f in files)
        self.node.check(f"rm -f /tmp/watch.* /tmp/watch-stop\ncat > /tmp/watch.py <<'PY'\n{WATCHER}\nPY\n"
                        f"nohup python3 /tmp/watch.py {paths} >/dev/null 2>&1 &\n"
                        "n=0; until [ -e /tmp/watch.0 ]; do n=$((n + 1)); [ $n -lt 300 ] || exit 1; sleep 0.1; done")  # fmt: skip

    def seen(self, files: list[str]) -> dict[str, list[str]]:
        """Stop the watcher: each watched file's values in the order seen (one value: it
        never changed)."""
        self.node.check("touch /tmp/watch-stop; sleep 0.5")
        out = {}
        for i, f in enumerate(files):
            lines = self.node.check(f"cat /tmp/watch.{i}").splitlines()
            out[f] = [line.strip() for line in lines if line.strip()]
        return out

    def reloads(self, count: int) -> list[float]:
        """``count`` daemon-reloads one after the other: the seconds each took."""
        took = []
        for _ in range(count):
            start = time.monotonic()
            self.node.check("systemctl daemon-reload", timeout=300)
            took.append(time.monotonic() - start)
        return took

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """systemd's view of a unit's properties."""
        out = self.node.check(f"systemctl show {' '.join(f'-p {p}' for p in props)} {unit}")
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def pod(self, namespace: str, label: str) -> dict[str, Any]:
        """The Running pod with ``app=<label>`` once its container runs."""
        found: list[dict[str, Any]] = []

        def running() -> bool:
            items = json.loads(self.kube.kubectl("-n", namespace, "get", "pods", "-l", f"app={label}",
                                                 "-o", "json").stdout)["items"]  # fmt: skip
            found[:] = [p for p in items if p.get("status", {}).get("phase") == "Running"
                        and p["status"].get("containerStatuses", [{}])[0].get("containerID")]  # fmt: skip
            return bool(found)

        wait_until(running, 600, f"pod app={label} running on {NAME}", interval=2)
        return found[0]

    def metrics(self) -> dict[str, float]:
        """The agent's metrics (read in the guest: the pod's address is the guest's)."""
        pod = agent_pod(self.kube.cluster, NAME)
        assert pod is not None, "no agent pod on the guest"
        ip = pod["status"]["podIP"]
        out = self.node.check(f"python3 -c \"import urllib.request; print(urllib.request.urlopen("
                              f"'http://{ip}:9108/metrics', timeout=20).read().decode())\"")  # fmt: skip
        values = {}
        for line in out.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


def pod_manifest(name: str, namespace: str, image: str, script: str, labels: Mapping[str, str],
                 resources: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One replica on the guest node running ``script`` on Waterline's image (never pulled)."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **labels}},
                "spec": {
                    "nodeSelector": dict(LABELS),
                    "tolerations": [{"key": TAINT[0], "operator": "Equal", "value": TAINT[1],
                                     "effect": TAINT[2]}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main", "image": image, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", script], "resources": dict(resources or {}),
                    }],
                },
            },
        },
    }  # fmt: skip


@pytest.fixture(scope="session")
def vm(kube: RealCluster) -> Iterator[VmNodeRun]:
    """The guest joined to the run's cluster, deploy/ (installed by ``kube``) running its
    agent there; the controller scaled to 0 (it does nothing for these tests and would
    take the emulated CPUs)."""
    if shutil.which(QEMU) is None:
        need(f"{QEMU} is not installed (apt-get install qemu-system-x86)")
    try:
        image = ensure_image(say=lambda _line: None)
    except ImageError as err:
        need(str(err))
    project = default_images()[0]
    local = os.environ.get("WATERLINE_VM_NODE_IMAGE") or project
    node = VmNode(kube.cluster, image)
    scale = ("-n", NAMESPACE, "scale", "deployment", "waterline-controller")
    if kube.borrowed and node.running():  # make vm-node's guest, on the borrowed cluster
        kube.kubectl(*scale, "--replicas=0")
        report(
            "setup", f"the guest already running on {kube.cluster.root} (make vm-node): borrowed"
        )
        yield VmNodeRun(kube, node, None, project)
        return
    try:
        node.images = (save_image(local, node.folder.parent / "vm-node-image.tar"),)
    except ClusterError as err:
        need(f"the guest's image: {err}")
    node.tags = {local: project} if local != project else {}
    kube.kubectl(*scale, "--replicas=0")
    try:
        try:
            steps = node.up()
        except ClusterError as err:
            need(f"the guest node did not come up: {err}")
        start = time.monotonic()
        wait_until(lambda: pod_ready(agent_pod(kube.cluster, NAME)), 900, f"the agent's pod Ready on {NAME}",
                   interval=2)  # fmt: skip
        taints = json.loads(kube.kubectl("get", "node", NAME, "-o", "jsonpath={.spec.taints}").stdout or "[]")
        report("setup", *steps.lines(), f"the agent's pod Ready {time.monotonic() - start:.0f} s after that",
               f"image {local} as {project}", f"taints {taints}")  # fmt: skip
        # Only the tests' pods (and the agent) may land there: other tests' pods in the
        # same cluster would take its 2 CPUs (devtools.vm.node.TAINT).
        assert {"key": TAINT[0], "value": TAINT[1], "effect": TAINT[2]} in taints, taints
        yield VmNodeRun(kube, node, steps, project)
    finally:
        node.down()
        kube.kubectl(*scale, "--replicas=1", check=False)


@pytest.fixture(scope="session")
def work(vm: VmNodeRun) -> Iterator[dict[str, PodUnits]]:
    """A busy BestEffort batch pod and an idle Guaranteed pod on the guest."""
    ns = vm.kube.namespace("vmn")
    guaranteed = {
        "requests": {"cpu": "200m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"},
    }
    try:
        vm.kube.apply([pod_manifest("batch", ns, vm.image, BUSY, {"role": "batch"}),
                       pod_manifest("lc", ns, vm.image, IDLE, {"role": "lc"}, guaranteed)])  # fmt: skip
        yield {name: PodUnits.of(vm.pod(ns, name)) for name in ("batch", "lc")}
    finally:
        vm.kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
