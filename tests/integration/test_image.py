"""The container image (``make image``) run the way deploy/ runs it.

The agent test runs ``waterline agent --local`` from the image, in a container with the
host mounts, arguments and security context of the agent's DaemonSet, read from
deploy/daemonset.yaml and the deploy/components/ patch for this host's cgroup layout, so
they cannot drift apart. It throttles real busy processes in the kubelet-shaped cgroup v1
tree of tests/integration/conftest.py, the kernel's ``cpuacct.usage`` shows the cap, and
the original quotas come back exactly. The only change to the manifest's mounts: the tree
lives under its own kubelet cgroup root (``--kubelet-cgroup-root``), so the writable
kubepods subtree moves under it, as it does for a kubelet with ``--cgroup-root``.

The image is not built here (a cold build takes about a minute): ``make image`` first,
as .ci/run does; without it, or without a container engine that works here, these tests
skip and say why. The controller against ``waterline dev-apiserver`` in a container is
still to come, once the dev server serves what the controller needs (issue 12).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent import defaults
from devtools.demo.cgroups import CgroupTree
from devtools.demo.pods import DemoPod
from tests.deploy_manifests import HostMount, agent_args, agent_daemonset, agent_mounts

# The local agent's own integration test: the same pods, objects and bounds, in a container.
from tests.integration.test_agent_local import close, manifests, start_and_calibrate, state_pods

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
        pytest.skip(found.stderr.strip())
    name = found.stdout.strip()
    present = run([name, "image", "inspect", IMAGE], check=False)
    if present.returncode != 0:
        pytest.skip(f"no image {IMAGE} here: run `make image` first")
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
    """The manifest's volume mounts as run flags: the kubepods subtree under the test's
    kubelet cgroup root, the state directory in a temporary one, emptyDirs as tmpfs."""
    flags: list[str] = []
    writable_cgroups = [
        m for m in mounts if m.path.startswith(defaults.CGROUP_ROOT) and not m.read_only
    ]
    assert len(writable_cgroups) == 1, writable_cgroups
    for m in mounts:
        if m.host_path is None:
            flags += ["--tmpfs", f"{m.path}:rw,size=16m"]
            continue
        host, path = m.host_path, m.path
        if m in writable_cgroups:
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
        *security_flags(ds, engine),
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


def test_the_agent_in_its_container_throttles_to_the_cap_and_restores_exactly(
    agent_run: list[str], tree: CgroupTree, tmp_path: Path
) -> None:
    web = DemoPod("web", "Guaranteed", 0.5)
    batch = [DemoPod("batch-a", "BestEffort", None), DemoPod("batch-b", "BestEffort", None)]
    pods = [web, *batch]
    kernel, got = start_and_calibrate(tree, pods)
    line = got[web.key] + 0.5 * sum(got[p.key] for p in batch)
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "o.yaml").write_text(yaml.safe_dump_all(manifests(pods, line, restore=2)))
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

    try:
        # 1. the quotas are written (the image starts, ticks twice, the rule triggers)
        deadline = time.monotonic() + 30
        while all(q == "-1" for q in quotas().values()):
            assert time.monotonic() < deadline and agent.poll() is None, logs()
            time.sleep(0.2)
        # 2. the kernel holds each throttled pod at the cap written, over a second in which
        #    the cap stayed put (within 10%)
        held: dict[str, list[tuple[float, float]]] = {p.key: [] for p in batch}
        throttled: set[str] = set()
        kernel.sample()
        before = quotas()
        for _ in range(8):
            time.sleep(1.0)
            measured, after = kernel.sample(), quotas()
            for key, quota in after.items():
                if quota != "-1":
                    throttled.add(key)
                if quota == before[key] != "-1":
                    held[key].append((measured[key], int(quota) / 100_000))
            before = after
            if all(any(close(m, cap) for m, cap in held[k]) for k in throttled):
                break
        assert throttled, logs()
        for key in throttled:
            assert any(close(m, cap) for m, cap in held[key]), (key, held[key], logs())
        # 3. the load goes: the original quotas come back, exactly, and the state empties
        tree.stop("web")
        for pod in batch:
            tree.signal(pod.name, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while set(quotas().values()) != {"-1"} or state_pods(tmp_path / "state"):
            assert time.monotonic() < deadline and agent.poll() is None, logs()
            time.sleep(0.5)
        web_quota = tree.read(
            tree.cpu_root, web.container_rel(tree.kubelet_root), "cpu.cfs_quota_us"
        )
        assert web_quota == "50000"
        # 4. it read the host's cgroup layout through --proc-root (/host/proc/self/mountinfo)
        events = [json.loads(x) for x in logs(10**7).splitlines() if x.startswith("{")]
        layout = [e for e in events if e.get("event") == "cgroup layout"]
        assert layout and layout[0]["mode"] in ("v1", "hybrid"), logs()
        assert layout[0]["v1"]["cpu"] == f"{defaults.CGROUP_ROOT}/cpu"
        assert not [e for e in events if "mountinfo unreadable" in str(e.get("event"))]
    finally:
        run([engine, "stop", "--time", "10", name], check=False)
        agent.wait(timeout=30)
    assert agent.returncode == 0, logs()
