"""The container image (``make image``) run the way deploy/ runs it.

The agent tests run the image in a container with the host mounts, host namespaces,
arguments and security context of the agent's DaemonSet, read from deploy/daemonset.yaml
and the deploy/components/ patch for this host's cgroup layout, so they cannot drift apart.
``waterline agent --local`` throttles real busy processes in the kubelet-shaped cgroup v1
tree of tests/integration/conftest.py, the kernel throttles the capped pods and they use
no more than their quotas let through, and the original quotas come back exactly; a pod
cgroup's tasks and their schedstat are visible from the agent's container (hostPID). The only change to the manifest's mounts:
the tree lives under its own kubelet cgroup root (``--kubelet-cgroup-root``), so the
writable kubepods subtree moves under it, as it does for a kubelet with ``--cgroup-root``.

``waterline controller`` runs from the image as deploy/controller.yaml runs it, against the
real cluster of devtools/harness/cluster.py (the host's network: it listens on loopback) with the
controller's ServiceAccount token: once from a kubeconfig, once configured as in a pod
(the kubelet's environment and a mounted service account). The image ships the
kubernetes client as bytecode only: these runs are what shows that it still loads and
works.

The image is not built here (a cold build takes about a minute): ``make image`` first,
as .ci/run does; without it, or without a container engine that works here, these tests
skip and say why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from agent import defaults
from devtools.cluster.api import write_kubeconfig
from devtools.demo.cgroups import CgroupTree
from devtools.demo.pods import DemoPod
from devtools.harness.cluster import CONTROLLER_SA, RealCluster, unique
from devtools.harness.waiting import wait_until
from engine.caps import MIN_CPU_CAP
from tests.deploy_manifests import DEPLOY, HostMount, agent_args, agent_daemonset, agent_mounts
from tests.integration.controller_env import job_status, lease, migration_job
from tests.integration.kernel_cpu import assert_quota_binds, cpu_stat

# The local agent's own integration test: the same pods, objects and bounds, in a container.
from tests.integration.test_agent_local import (
    ABOVE_FLOOR,
    LINE,
    NODE_CORES,
    RESTORE,
    manifests,
    start_and_calibrate,
    state_pods,
)
from tests.need import need

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("WATERLINE_IMAGE", defaults.IMAGE)
#: The tree of tests/integration/conftest.py is cgroup v1 with kubelet's cgroupfs names.
COMPONENT = "cgroup-v1-cgroupfs"
NONROOT = "65532:65532"


def _engine_env() -> dict[str, str]:
    return {
        **os.environ,
        "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "hack/containers.conf")),
    }


@pytest.fixture(scope="module")
def engine() -> str:
    """podman or docker, as `make image` chose it; the image must be there."""
    found = subprocess.run(  # noqa: S603
        [str(ROOT / "hack/engine")], capture_output=True, text=True, env=_engine_env(), timeout=60
    )
    if found.returncode != 0:
        need(f"no container engine (hack/engine): {found.stderr.strip()}")
    name = found.stdout.strip()
    present = run([name, "image", "inspect", IMAGE], check=False)
    if present.returncode != 0:
        need(f"no image {IMAGE} here: run `make base-image image` first")
    return name


def run(
    cmd: list[str], check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603
        cmd, capture_output=True, text=True, env=_engine_env(), timeout=timeout
    )
    if check:
        assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr[-2000:]}"
    return done


def read_only_flags(engine: str) -> list[str]:
    # podman adds tmpfs mounts of its own to a read-only container; the manifest has none.
    return ["--read-only", "--read-only-tmpfs=false"] if engine == "podman" else ["--read-only"]


# -- both programs, as the controller runs: uid 65532 ---------------------------------


def test_the_image_runs_as_65532_and_knows_its_version(engine: str) -> None:
    config = json.loads(run([engine, "image", "inspect", IMAGE]).stdout)[0]["Config"]
    assert config["User"] == NONROOT
    assert config["Entrypoint"] == ["waterline"]
    out = run(
        [engine, "run", "--rm", *read_only_flags(engine), "--cap-drop", "ALL", IMAGE, "--version"]
    )
    assert out.stdout == f"waterline {version()}\n"


#: Locked, and cut from the image on purpose (the Containerfile says why).
CUT_FROM_THE_IMAGE = {"tzdata"}


def test_the_image_holds_exactly_the_locked_versions(engine: str) -> None:
    """What the image ships is what the tests ran: requirements/runtime.lock's pins, which
    are dev.lock's, and nothing else beside Waterline itself."""
    listing = "import importlib.metadata as m; print('\\n'.join(sorted(f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))"
    out = run([engine, "run", "--rm", "--entrypoint", "python3", IMAGE, "-c", listing]).stdout
    installed = {_canonical(line) for line in out.split()}
    locked = {_canonical(pin) for pin in locked_pins(ROOT / "requirements/runtime.lock")}
    assert installed == {p for p in locked if p.split("==")[0] not in CUT_FROM_THE_IMAGE} | {
        f"waterline=={version()}"
    }


def locked_pins(lock: Path) -> list[str]:
    """The ``name==version`` lines of a lock made by `make lock` (markers and hashes cut)."""
    return [
        line.split(" ")[0]
        for line in lock.read_text().splitlines()
        if line[:1].isalnum() and "==" in line
    ]


def _canonical(pin: str) -> str:
    name, _, ver = pin.partition("==")
    return f"{name.lower().replace('_', '-').replace('.', '-')}=={ver}"


def version() -> str:
    import tomllib

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_controller_starts_as_65532(engine: str) -> None:
    out = run(
        [engine, "run", "--rm", *read_only_flags(engine), "--cap-drop", "ALL",
         "--user", NONROOT, IMAGE, "controller", "--help"]
    )  # fmt: skip
    assert out.stdout.startswith("usage: waterline controller")


# -- the agent, with the DaemonSet's mounts -------------------------------------------


def container_mounts(
    mounts: list[HostMount], kubelet_root: str, state: Path, engine: str
) -> list[str]:
    """The manifest's volume mounts as run flags: each writable kubepods subtree (cpu; and
    memory, for batch pods' memory limits) under the test's kubelet cgroup root, the state
    directory in a temporary one, emptyDirs as tmpfs. The test's tree has no memory
    hierarchy (its pods get no memory figure, and no batch pod's memory limit is written),
    so the memory subtree's writable mount is left out: that hierarchy stays read-only in
    the container, under the manifest's read-only mount of it."""
    flags: list[str] = []
    writable_cgroups = [
        m for m in mounts if m.path.startswith(defaults.CGROUP_ROOT) and not m.read_only
    ]
    assert writable_cgroups and all(
        os.path.basename(m.path) == "kubepods" for m in writable_cgroups
    ), writable_cgroups
    for m in mounts:
        if m.host_path is None:
            flags += ["--tmpfs", f"{m.path}:rw,size=16m"]
            continue
        host, path = m.host_path, m.path
        if m in writable_cgroups:
            if os.path.basename(os.path.dirname(path)) not in ("cpu", "cpu,cpuacct"):
                continue
            host = path = os.path.join(os.path.dirname(path), kubelet_root, os.path.basename(path))
        elif path == defaults.STATE_DIR:
            host = str(state)
        flags += ["--volume", f"{host}:{path}:{'ro' if m.read_only else 'rw'}"]
    return flags


def security_flags(ds: dict[str, Any], engine: str) -> list[str]:
    """The agent container's securityContext as run flags; fails on a field not mapped."""
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert ds["spec"]["template"]["spec"]["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"  # the engine's default profile
    }
    return [
        "--user", f"{sc['runAsUser']}:{sc['runAsGroup']}", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", *read_only_flags(engine),
    ]  # fmt: skip


def namespace_flags(ds: dict[str, Any]) -> list[str]:
    """The agent pod's host namespaces as run flags: the host's pid namespace, no other."""
    pod = ds["spec"]["template"]["spec"]
    assert not pod.get("hostNetwork") and not pod.get("hostIPC")
    return ["--pid", "host"] if pod.get("hostPID") else []


def proc_root(ds: dict[str, Any]) -> str:
    """Where the agent reads the host's /proc (its --proc-root)."""
    (root,) = [a.split("=", 1)[1] for a in agent_args(ds) if a.startswith("--proc-root=")]
    return root


def container_args(ds: dict[str, Any], node: str) -> list[str]:
    args = agent_args(ds)
    assert args[0] == "agent"
    return [a.replace(f"$({defaults.NODE_NAME_ENV})", node) for a in args]


@pytest.fixture
def agent_run(engine: str, tree: CgroupTree, tmp_path: Path) -> Iterator[list[str]]:
    """`<engine> run` with the DaemonSet's flags up to the image; removed afterwards."""
    ds = agent_daemonset(COMPONENT)
    name = f"waterline-it-{os.getpid()}-{tmp_path.name}"
    state = tmp_path / "state"
    state.mkdir()
    flags = [
        engine, "run", "--rm", "--name", name, "--network", "none",
        *namespace_flags(ds), *security_flags(ds, engine),
        *container_mounts(agent_mounts(ds), tree.kubelet_root, state, engine),
    ]  # fmt: skip
    try:
        yield flags
    finally:
        run([engine, "rm", "--force", name], check=False)


def test_outside_kubepods_the_cgroup_tree_is_read_only(
    agent_run: list[str], tree: CgroupTree
) -> None:
    """What the manifest promises: the agent's container can write CPU quotas in the
    kubepods subtree only (writing back the value already there, so nothing changes)."""
    pod = DemoPod("probe", "BestEffort", None)
    tree.add_pod(pod)
    inside = os.path.join(tree.cpu_root, pod.container_rel(tree.kubelet_root), "cpu.cfs_quota_us")
    outside = os.path.join(tree.cpu_root, tree.kubelet_root, "cpu.cfs_quota_us")
    acct = os.path.join(tree.acct_root, pod.container_rel(tree.kubelet_root), "cpuacct.usage")
    probe = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        value = open(path).read()\n"
        "        open(path, 'w').write(value)\n"
        "        print(path, 'written')\n"
        "    except OSError as err:\n"
        "        print(path, err.strerror)\n"
    )
    out = run(
        [*agent_run, "--entrypoint", "/opt/waterline/bin/python", IMAGE,
         "-c", probe, inside, outside, acct]
    )  # fmt: skip
    assert out.stdout.splitlines() == [
        f"{inside} written",
        f"{outside} Read-only file system",
        f"{acct} Read-only file system",
    ]


def test_in_the_agents_container_a_pods_tasks_and_their_schedstat_are_visible(
    agent_run: list[str], tree: CgroupTree
) -> None:
    """The latency-critical pods' run-queue wait comes from their tasks: the pids in the
    pod's cgroup.procs, then /proc/<pid>/schedstat of each under the host's /proc. With the
    manifest's settings the agent's container lists the same pids as the host (the kernel
    shows only the reader's pid namespace's tasks there) and reads their schedstat."""
    pod = DemoPod("victim", "Guaranteed", 0.5)
    tree.add_pod(pod)
    tree.start(pod)
    tree.signal(pod.name, signal.SIGSTOP)  # it ran, and stays in its cgroup, idle
    procs = os.path.join(tree.cpu_root, pod.container_rel(tree.kubelet_root), "cgroup.procs")
    host_pids = Path(procs).read_text().split()
    assert host_pids
    probe = (
        "import json, sys\n"
        "procs, proc_root = sys.argv[1:]\n"
        "pids = open(procs).read().split()\n"
        "print(json.dumps({p: open(f'{proc_root}/{p}/schedstat').read().split() for p in pids}))\n"
    )
    ds = agent_daemonset(COMPONENT)
    out = run(
        [*agent_run, "--entrypoint", "/opt/waterline/bin/python", IMAGE,
         "-c", probe, procs, proc_root(ds)]
    )  # fmt: skip
    seen = json.loads(out.stdout)
    assert sorted(seen) == sorted(host_pids)
    for fields in seen.values():
        run_ns, _wait_ns, slices = map(int, fields)  # the wait may well be 0 on an idle host
        assert run_ns > 0 and slices > 0


def test_the_agent_in_its_container_throttles_to_the_cap_and_restores_exactly(
    agent_run: list[str], tree: CgroupTree, tmp_path: Path
) -> None:
    """The local agent's throttle test (tests/integration/test_agent_local.py), run from
    the image: the waterline just above an idle tree, so each busy BestEffort pod is capped
    at the floor; the quota read back is the cap the agent recorded, the kernel throttles
    each capped pod and lets it use no more than its quota allows (bounds load cannot
    break: tests/integration/kernel_cpu.py), and the original quotas come back exactly."""
    web = DemoPod("web", "Guaranteed", 0.5)
    batch = [DemoPod(name, "BestEffort", None) for name in ("batch-a", "batch-b")]
    pods = [web, *batch]
    start_and_calibrate(tree, pods, least=ABOVE_FLOOR)
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "o.yaml").write_text(yaml.safe_dump_all(manifests(pods, LINE, restore=RESTORE)))
    ds = agent_daemonset(COMPONENT)
    command = [
        *agent_run, "--volume", f"{objects}:/objects:ro", IMAGE,
        *container_args(ds, "demo-node"), "--local", "--objects", "/objects",
        "--kubelet-cgroup-root", tree.kubelet_root, "--node-cpu", "pods",
        "--metrics-addr", "off", "--no-console", "--log-format", "json", "--interval", "1",
    ]  # fmt: skip
    log_path = tmp_path / "agent.log"
    with log_path.open("wb") as log:
        agent = subprocess.Popen(  # noqa: S603
            command, stdout=log, stderr=subprocess.STDOUT, env=_engine_env()
        )
    engine, name = agent_run[0], agent_run[agent_run.index("--name") + 1]

    def logs(tail: int = 3000) -> str:
        return log_path.read_text(errors="replace")[-tail:]

    def quotas() -> dict[str, str]:
        return {p.key: tree.quota(p) for p in batch}

    def recorded_caps() -> dict[str, float]:
        """The caps the agent's state file records (it records a cap after writing it)."""
        state = state_pods(tmp_path / "state")
        containers = {p.key: state.get(p.uid, {}).get("containers", {}) for p in batch}
        return {k: c["main"]["cap"] for k, c in containers.items() if "main" in c}

    def stat(pod: DemoPod) -> dict[str, int]:
        return cpu_stat(f"{tree.cpu_root}/{pod.container_rel(tree.kubelet_root)}/cpu.stat")

    try:
        # 1. every BestEffort pod is capped and the cap recorded (the image starts, ticks
        #    twice, the rule triggers); 120 s: the container's start on a busy core
        def capped() -> bool:
            assert agent.poll() is None, logs()
            return len(recorded_caps()) == len(batch)

        wait_until(capped, 120, "every BestEffort pod capped and recorded", interval=0.2,
                   explain=logs)  # fmt: skip
        caps = recorded_caps()
        for pod in batch:
            cap = caps[pod.key]
            assert cap == pytest.approx(MIN_CPU_CAP), caps  # the gap takes each to the floor
            assert int(tree.quota(pod)) == max(1000, round(cap * 100_000)), (quotas(), caps)
        # 2. the kernel enforces them: each capped pod is throttled (only a quota does that)
        #    and uses no more than its quota lets through over the window
        by_key = {p.key: p for p in batch}
        assert_quota_binds(caps, lambda key: tree.cpu_seconds(by_key[key]),
                           lambda key: stat(by_key[key])["nr_throttled"], explain=logs)  # fmt: skip
        # web still runs above the line: the caps are held as they are
        assert recorded_caps() == caps and quotas() == {
            p.key: str(max(1000, round(caps[p.key] * 100_000))) for p in batch
        }
        # 3. the load goes and the line moves up to the node's core (the agent re-reads
        #    its objects file): the caps are raised in a few ticks (a line just above the
        #    idle tree would raise them by its gap, 0.02 core, a one-second tick), then the
        #    original quotas come back exactly and the state empties
        tree.stop("web")
        for pod in batch:
            tree.signal(pod.name, signal.SIGSTOP)
        (objects / "o.yaml").write_text(
            yaml.safe_dump_all(manifests(pods, NODE_CORES, restore=RESTORE))
        )

        def restored() -> bool:
            assert agent.poll() is None, logs()
            return set(quotas().values()) == {"-1"} and not state_pods(tmp_path / "state")

        wait_until(restored, 120, "every quota restored and the state empty", interval=0.5,
                   explain=logs)  # fmt: skip
        web_quota = tree.read(
            tree.cpu_root, web.container_rel(tree.kubelet_root), "cpu.cfs_quota_us"
        )
        assert web_quota == "50000"
        # 4. it read the host's cgroup layout through --proc-root (/host/proc/self/mountinfo)
        events = [json.loads(x) for x in logs(10**7).splitlines() if x.startswith("{")]
        layout = [e for e in events if e.get("code") == "cgroup-layout"]
        assert layout and layout[0]["mode"] in ("v1", "hybrid"), logs()
        assert layout[0]["v1"]["cpu"] == f"{defaults.CGROUP_ROOT}/cpu"
        assert not [e for e in events if e.get("code") == "mountinfo-unreadable"]
    finally:
        run([engine, "stop", "--time", "10", name], check=False)
        agent.wait(timeout=30)
    assert agent.returncode == 0, logs()


# -- the controller, as deploy/controller.yaml runs it --------------------------------


def controller_deployment() -> dict[str, Any]:
    docs = yaml.safe_load_all((DEPLOY / "controller.yaml").read_text())
    (deployment,) = [d for d in docs if d and d["kind"] == "Deployment"]
    return dict(deployment)


def controller_flags(engine: str, pod_name: str) -> list[str]:
    """The controller pod's security context, environment and name (its hostname) as run
    flags; fails on a field not mapped."""
    pod = controller_deployment()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc, pod_sc = container["securityContext"], pod["securityContext"]
    assert sc["privileged"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert pod_sc["runAsNonRoot"] is True and pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "volumes" not in pod and not pod.get("hostNetwork")
    field_refs = {"metadata.name": pod_name, "metadata.namespace": defaults.NAMESPACE}
    env: list[str] = []
    for e in container["env"]:
        value = e["value"] if "value" in e else field_refs[e["valueFrom"]["fieldRef"]["fieldPath"]]
        env += ["--env", f"{e['name']}={value}"]
    return [
        "--user", f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", *read_only_flags(engine),
        "--hostname", pod_name, *env,
    ]  # fmt: skip


@pytest.fixture
def ghost_job(kube: RealCluster) -> Iterator[str]:
    """A PodMigrationJob for a pod that does not exist: a leader's round fails it."""
    name = unique("ghost")
    kube.apply([migration_job(name, "default", "no-such-pod")])
    try:
        yield name
    finally:
        kube.kubectl("delete", "podmigrationjob", name, "--ignore-not-found")


@dataclass
class Started:
    """A controller container: its engine process, the pod name it was given (its
    hostname and $POD_NAME), the container's name, and its log."""

    process: subprocess.Popen[bytes]
    pod_name: str
    container: str
    log: Path

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def run_controller(engine: str, tmp_path: Path, flags: list[str], args: list[str]) -> Started:
    """``waterline controller`` from the image as deploy/controller.yaml runs it, on the
    host's network (the cluster listens on loopback)."""
    pod_name = unique("waterline-controller-it")
    name = f"waterline-it-{os.getpid()}-{tmp_path.name}"
    (container,) = controller_deployment()["spec"]["template"]["spec"]["containers"]
    command = [
        engine, "run", "--rm", "--name", name, "--network", "host",
        *controller_flags(engine, pod_name), *flags, IMAGE, *container["args"], *args,
        "--interval", "0.3", "--metrics-addr", "127.0.0.1:0", "--log-format", "json",
    ]  # fmt: skip
    log_path = tmp_path / "controller.log"
    with log_path.open("wb") as log:
        controller = subprocess.Popen(  # noqa: S603
            command, stdout=log, stderr=subprocess.STDOUT, env=_engine_env()
        )
    return Started(controller, pod_name, name, log_path)


def leads_fails_the_ghost_and_releases(
    kube: RealCluster, engine: str, ghost: str, started: Started
) -> None:
    """Its rounds arbitrate (the ghost's job ends Failed), the Lease names the pod;
    stopped, it releases the Lease and exits 0."""
    try:
        wait_until(lambda: job_status(kube, ghost).get("phase") == "Failed", 60, started.logs())
        assert job_status(kube, ghost)["reason"] == "MissingPod"
        # deploy/controller.yaml sets POD_NAME from the pod's name: the Lease's holder.
        assert lease(kube)["spec"]["holderIdentity"] == started.pod_name, started.logs()
    finally:
        run([engine, "stop", "--time", "10", started.container], check=False)
        started.process.wait(timeout=30)
    assert started.process.returncode == 0, started.logs()
    # released for the next replica
    assert not lease(kube)["spec"].get("holderIdentity"), started.logs()


def test_the_controller_in_the_image_leads_and_runs_rounds_on_the_real_cluster(
    engine: str, kube: RealCluster, ghost_job: str, tmp_path: Path
) -> None:
    """With a kubeconfig holding the controller's ServiceAccount token."""
    ca = tmp_path / "ca.crt"
    ca.write_bytes(kube.ca.read_bytes())
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, kube.server, Path("/etc/waterline/ca.crt"),
                     token=kube.token(CONTROLLER_SA))  # fmt: skip
    for path in (ca, kubeconfig):
        path.chmod(0o644)  # read by uid 65532
    flags = ["--volume", f"{kubeconfig}:/etc/waterline/kubeconfig:ro",
             "--volume", f"{ca}:/etc/waterline/ca.crt:ro"]  # fmt: skip
    started = run_controller(engine, tmp_path, flags, ["--kubeconfig", "/etc/waterline/kubeconfig"])
    leads_fails_the_ghost_and_releases(kube, engine, ghost_job, started)


def test_in_a_pod_the_controller_is_configured_from_the_service_account(
    engine: str, kube: RealCluster, ghost_job: str, tmp_path: Path
) -> None:
    """No --kubeconfig, as in a pod: the API server's address comes from the environment
    the kubelet sets, the token and CA bundle from the mounted service account (a real
    token of waterline-controller, the cluster's CA), and the controller leads with them."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(kube.token(CONTROLLER_SA))
    (account / "ca.crt").write_bytes(kube.ca.read_bytes())
    (account / "namespace").write_text(defaults.NAMESPACE)
    for path in (account, *account.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    host, port = urlsplit(kube.server).hostname, urlsplit(kube.server).port
    flags = ["--env", f"KUBERNETES_SERVICE_HOST={host}", "--env", f"KUBERNETES_SERVICE_PORT={port}",
             "--volume", f"{account}:/var/run/secrets/kubernetes.io/serviceaccount:ro"]  # fmt: skip
    leads_fails_the_ghost_and_releases(kube, engine, ghost_job, run_controller(engine, tmp_path, flags, []))
