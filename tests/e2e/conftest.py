"""The real node of the end-to-end tests: this machine joined to the test run's cluster
(containerd, the kubelet and kube-proxy: devtools.cluster.node), Waterline installed on it
from deploy/ through tests/e2e/overlay, and the workloads the tests act on.

The run's cluster (the ``kube`` fixture) has deploy/ installed for the other tests, unpinned
and with the cgroup v2 layout: its agents run "fake" on kwok nodes. For the real node the
e2e tests install what a user of this host installs, ``kubectl apply -k`` of an overlay of
hack/node/overlay (cgroup v1 with the cgroupfs driver, pinned to the real node), over it;
at the end (or in the uninstall test) ``kubectl delete -k`` of the same, the node goes, and
deploy/ is installed again as the other tests expect it. Everything here is package-scoped,
so that happens before any other package's tests run.

The node needs root, the node's programs (built here when missing), runc, Debian's CNI
plugins and the project's image and its base (``make base-image image``: the image is built
again here when it is of another commit than this checkout's; or
``WATERLINE_E2E_IMAGE=`` a local image built with ``make image IMAGE=...``, run under the
project's name on the node, so a shared machine's tag is left alone): where one is
missing the tests skip with the reason, and fail in CI (``need``). A failed run leaves no
node behind: ``RealNode.down`` runs in every case (and ``kube``'s close does it again).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.cluster.images import default_images, save_images
from devtools.cluster.launcher import ClusterError
from devtools.cluster.node import LABELS, PROGRAMS, RealNode, missing_prerequisites
from devtools.harness.cluster import BIN, NAMESPACE, ROOT, RealCluster
from devtools.harness.waiting import wait_until
from tests.e2e.kernel import PodCgroups
from tests.need import need

OVERLAY = Path(__file__).resolve().parent / "overlay"
#: The agent's state directory on the host (deploy/daemonset.yaml's hostPath).
STATE_DIR = Path("/var/lib/waterline")
STATE_FILES = (
    "cpu-quota.json", "objects.json", "evictions.json", "batch-limits.json",
    "cpu-isolation.json", "systemd-units.json",
)  # fmt: skip
AGENT = "app.kubernetes.io/name=waterline-agent"
CONTROLLER = "app.kubernetes.io/name=waterline-controller"
#: Figures printed at the end of the run (pytest_terminal_summary), by test.
FIGURES: dict[str, list[str]] = {}


def report(test: str, *lines: str) -> None:
    """Record figures for the summary (and print them: seen at once with -s)."""
    FIGURES.setdefault(test, []).extend(lines)
    for line in lines:
        print(f"[{test}] {line}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("real node: kernel-measured figures")
    for test, lines in FIGURES.items():
        terminalreporter.write_line(f"{test}:")
        for line in lines:
            terminalreporter.write_line(f"  {line}")


@dataclass
class RealNodeRun:
    kube: RealCluster
    node: RealNode
    installed: bool = False

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.kube.kubectl(*args, **kw)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Running pods on the real node that are not being deleted, oldest first."""
        items = self.get("pods", "-n", namespace, "-l", selector)["items"]
        live = [p for p in items if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
                and p["spec"].get("nodeName") == self.node.name]  # fmt: skip
        return sorted(live, key=lambda p: p["metadata"]["creationTimestamp"])

    def ready_pod(self, namespace: str, selector: str, timeout: float = 300) -> dict[str, Any]:
        """The one Running and Ready pod of ``selector`` on the real node."""
        found: list[dict[str, Any]] = []

        def ready() -> bool:
            pods = [p for p in self.pods(namespace, selector)
                    if any(c["type"] == "Ready" and c["status"] == "True"
                           for c in p["status"].get("conditions", []))]  # fmt: skip
            found[:] = pods
            return len(pods) == 1

        wait_until(ready, timeout, interval=1)
        return found[0]

    def agent_pod(self) -> dict[str, Any]:
        return self.ready_pod(NAMESPACE, AGENT)

    def install(self) -> None:
        self.kubectl("apply", "-k", str(OVERLAY))
        self.installed = True
        self.kubectl("-n", NAMESPACE, "rollout", "status", "daemonset/waterline-agent", "--timeout", "300s",
                     timeout=320)  # fmt: skip
        self.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/waterline-controller",
                     "--timeout", "300s", timeout=320)  # fmt: skip

    def uninstall(self) -> subprocess.CompletedProcess[str]:
        """``kubectl delete -k`` of what was installed; waits until it is all gone."""
        done = self.kubectl("delete", "-k", str(OVERLAY), "--ignore-not-found", "--wait",
                            "--timeout", "300s", timeout=330)  # fmt: skip
        self.installed = False
        return done


def _stale_state() -> list[str]:
    """The agent's state files on this host, from a node that is gone: a new node starts
    clean (they would name pods, caps and objects of another cluster)."""
    removed = []
    for name in STATE_FILES:
        path = STATE_DIR / name
        if path.exists():
            path.unlink()
            removed.append(str(path))
    return removed


def _revision(image: str | None) -> str:
    """The commit an image was built from (its label), or this checkout's (None)."""
    if image is None:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)  # noqa: S607
        status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)  # noqa: S607
        clean = status.returncode == 0 and not status.stdout.strip()  # untracked files count
        return (head.stdout.strip() or "unknown") + ("" if clean else "-dirty")  # as hack/build-image labels it
    env = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "hack/containers.conf"))}
    engine = subprocess.run([str(ROOT / "hack/engine")], capture_output=True, text=True, env=env).stdout.strip()  # noqa: S603
    label = '{{index .Labels "org.opencontainers.image.revision"}}'
    found = subprocess.run([engine or "podman", "image", "inspect", "--format", label, image],  # noqa: S603
                           capture_output=True, text=True, env=env)  # fmt: skip
    return found.stdout.strip() or "unknown"


def _image_of_this_checkout(image: str) -> None:
    """The project's image built again (``make image``) when it is not this checkout's: an
    e2e run on an image of an older commit would judge older code (a dirty checkout's is
    always built again: its label cannot tell which edits it holds)."""
    here, found = _revision(None), _revision(image)
    if found == here and not here.endswith("-dirty"):
        return
    built = subprocess.run(["make", "-C", str(ROOT), "image"], capture_output=True, text=True)  # noqa: S607
    if built.returncode != 0:
        need(f"make image (the image is of {found}, this checkout {here}) failed: "
             f"{(built.stderr or built.stdout).strip()[-2000:]}")


def _node_tools() -> None:
    """The node's programs, built from their Go modules when missing (a no-op when built)."""
    if all((BIN / p).exists() for p in PROGRAMS):
        return
    built = subprocess.run([str(ROOT / "hack/cluster/build"), *PROGRAMS],  # noqa: S603
                           capture_output=True, text=True)  # fmt: skip
    if built.returncode != 0:
        need(f"hack/cluster/build {' '.join(PROGRAMS)} failed: {built.stderr.strip()[-2000:]}")


@pytest.fixture(scope="package")
def real(kube: RealCluster) -> Iterator[RealNodeRun]:
    """This machine as a node of the run's cluster, Waterline installed on it."""
    _node_tools()
    problems = missing_prerequisites(BIN)
    if problems:
        need("no real node here: " + "; ".join(problems))
    project, base = default_images()
    local = os.environ.get("WATERLINE_E2E_IMAGE") or project
    if local == project:
        _image_of_this_checkout(project)
    try:
        images = save_images([local, base], kube.cluster)
    except (ClusterError, subprocess.CalledProcessError) as err:
        need(f"the node's images: {err}")
    node = RealNode(kube.cluster, images=images)
    start = time.monotonic()
    try:
        node.up(timeout=600)
        if local != project:  # deploy/ runs the project's name: that image under it
            tagged = node.ctr("images", "tag", "--force", local, project)
            if tagged.returncode != 0:
                raise ClusterError(f"ctr images tag {local} {project}: {tagged.stderr.strip()}")
    except ClusterError as err:
        node.down()
        need(f"the real node did not come up: {err}")
    run = RealNodeRun(kube, node)
    try:
        removed = _stale_state()
        run.install()
        agent = run.agent_pod()
        report("setup", f"node {node.name} ({node.ip}) Ready and Waterline installed in "
                        f"{time.monotonic() - start:.0f} s; agent {agent['metadata']['name']}"
                        + (f"; stale state removed: {', '.join(removed)}" if removed else ""),
               f"image {local}, built from {_revision(local)}; this checkout is at {_revision(None)}")  # fmt: skip
        yield run
    finally:
        try:
            if run.installed:
                run.uninstall()
        finally:
            node.down()
            _stale_state()
            kube.install(again=True)  # deploy/ as the other tests expect it


# -- the workloads ------------------------------------------------------------------------

BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
#: Burns one CPU while /tmp/idle is absent, sleeps while it is there (``load()``).
BUSY = "while :; do while [ ! -e /tmp/idle ]; do :; done; while [ -e /tmp/idle ]; do sleep 1; done; done"
IDLE = "while :; do sleep 1; done"


def deployment(name: str, namespace: str, script: str, labels: Mapping[str, str],
               resources: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One replica on the real node, running ``script`` on the base image (never pulled)."""
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
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main", "image": BASE_IMAGE, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", script], "resources": dict(resources or {}),
                    }],
                },
            },
        },
    }  # fmt: skip


#: The latency-critical pod (Guaranteed), the batch pods (BestEffort, Burstable with a CPU
#: limit, so the kubelet writes a real quota that uninstall must give back exactly), and a
#: victim for the memory waterline's eviction.
WORKLOADS = {
    "lc": (IDLE, {"qos.waterline.io/latency-critical": "true"},
           {"requests": {"cpu": "200m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "32Mi"}}),
    "batch-be": (BUSY, {"role": "batch"}, None),
    "batch-bu": (BUSY, {"role": "batch"},
                 {"requests": {"cpu": "20m", "memory": "16Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}),
    "victim": (IDLE, {"role": "victim"}, None),
}  # fmt: skip
BATCH = ("batch-be", "batch-bu")
WATCHED = ("lc", *BATCH)


@dataclass
class Work:
    run: RealNodeRun
    namespace: str
    pods: dict[str, PodCgroups]
    #: What the kubelet wrote in the cpu controller's files of the pods and containers,
    #: before any policy existed.
    originals: dict[str, dict[str, str]] = field(default_factory=dict)

    def load(self, on: bool) -> None:
        """Start or stop the batch pods' busy loops."""
        for name in BATCH:
            cmd = "rm -f /tmp/idle" if on else "touch /tmp/idle"
            self.run.kubectl("-n", self.namespace, "exec", self.pods[name].name, "--", "sh", "-c", cmd)

    def original_quota(self, name: str) -> str:
        return self.originals[name][f"{self.pods[name].container('main')}/cpu.cfs_quota_us"]

    def capped(self) -> dict[str, str]:
        """The batch pods whose container quota is not the kubelet's, with the quota."""
        out = {}
        for name in BATCH:
            quota = self.pods[name].quota("main")
            if quota != self.original_quota(name):
                out[name] = quota
        return out


@pytest.fixture(scope="package")
def work(real: RealNodeRun) -> Iterator[Work]:
    ns = real.kube.namespace("e2e")
    try:
        real.kube.apply([deployment(n, ns, s, labels, r) for n, (s, labels, r) in WORKLOADS.items()])
        pods = {n: PodCgroups.of(real.ready_pod(ns, f"app={n}")) for n in WORKLOADS}
        made = Work(real, ns, pods)
        made.originals = {n: pods[n].files() for n in WATCHED}
        yield made
    finally:
        real.kubectl("delete", "namespace", ns, "--wait", "--timeout", "120s", check=False, timeout=150)
