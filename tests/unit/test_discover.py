"""`waterline local-objects`: the pods of a kubelet-shaped cgroup tree, written as objects
that local mode then finds and measures in that same tree (fake v1 and v2 trees here; the
real cgroup tree in tests/integration/test_local_objects.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from agent.model.settings import AgentSettings
from agent.node.discover import discover
from agent.node.host import build_host_parts
from agent.node.local import FileObjectSource
from agent.node.local_objects import _same_roots, add_arguments, run
from devtools.harness.fake_cgroups import FakeTree

CID = {name: (name * 64)[:64] for name in ("a", "b", "c", "d", "e")}
UIDS = {
    "web": "11111111-2222-4333-8444-555555555501",
    "burst": "11111111-2222-4333-8444-555555555502",
    "best": "11111111-2222-4333-8444-555555555503",
}


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  10 0 10 100 0 0 0 0\n" + "".join(
        f"cpu{i} 1 0 1 10 0 0 0 0\n" for i in range(4)))  # fmt: skip
    (proc / "meminfo").write_text("MemTotal: 8388608 kB\nMemFree: 4000000 kB\n")
    return proc


def _procs(tree: FakeTree, rel: str, proc: Path, pid: int, comm: str) -> None:
    """One process in the cgroup, named ``comm`` in the fake /proc."""
    for d in tree.dirs(rel):
        (d / "cgroup.procs").write_text(f"{pid}\n")
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "comm").write_text(f"{comm}\n")


def v1_tree(tmp_path: Path, proc: Path) -> FakeTree:
    """cgroupfs driver, containerd and CRI-O, one pod of each QoS class, a pause sandbox."""
    tree = FakeTree(tmp_path / "cg", 1)
    web = f"kubepods/pod{UIDS['web']}"
    burst = f"kubepods/burstable/pod{UIDS['burst']}"
    best = f"kubepods/besteffort/pod{UIDS['best']}"
    for rel in (web, burst, best):
        tree.add(rel)
    tree.add(f"{web}/{CID['a']}", quota="50000")
    (tmp_path / "cg/cpu" / web / CID["a"] / "cpu.shares").write_text("512\n")
    (tmp_path / "cg/memory" / web / CID["a"] / "memory.limit_in_bytes").write_text(f"{256 << 20}\n")
    tree.add(f"{burst}/crio-{CID['b']}")
    (tmp_path / "cg/cpu" / burst / f"crio-{CID['b']}" / "cpu.shares").write_text("256\n")
    tree.add(f"{best}/{CID['c']}")  # the sandbox
    _procs(tree, f"{best}/{CID['c']}", proc, 100, "pause")
    tree.add(f"{best}/{CID['d']}")
    _procs(tree, f"{best}/{CID['d']}", proc, 101, "stress-ng")
    (tmp_path / "cg/cpu" / best / "not-a-container").mkdir()
    return tree


def test_v1_cgroupfs_pods_with_their_class_containers_and_bounds(tmp_path: Path, proc: Path) -> None:
    tree = v1_tree(tmp_path, proc)
    found = discover(tree.mounts.v1["cpu"], 1, "", str(proc), str(tmp_path / "no-logs"),
                     tree.mounts.v1["memory"])  # fmt: skip
    assert found.driver == "cgroupfs"
    pods = {p.uid: p for p in found.pods}
    assert {u: p.qos_class for u, p in pods.items()} == {
        UIDS["web"]: "Guaranteed", UIDS["burst"]: "Burstable", UIDS["best"]: "BestEffort"}  # fmt: skip
    [web] = pods[UIDS["web"]].containers
    assert (web.container_id, web.cpu_limit, web.cpu_request, web.memory_limit) == (
        f"containerd://{CID['a']}", 0.5, 0.5, 256 << 20)  # fmt: skip
    [burst] = pods[UIDS["burst"]].containers
    assert (burst.container_id, burst.cpu_limit, burst.cpu_request) == (f"cri-o://{CID['b']}", None, 0.25)
    [best] = pods[UIDS["best"]].containers  # the pause sandbox is left out
    assert (best.name, best.container_id) == ("stress-ng", f"containerd://{CID['d']}")
    assert pods[UIDS["best"]].namespace == "discovered"
    assert pods[UIDS["best"]].name == "pod-11111111"


def test_v2_systemd_pods_and_kubelet_log_names(tmp_path: Path, proc: Path) -> None:
    tree = FakeTree(tmp_path / "cg", 2)
    escaped = UIDS["burst"].replace("-", "_")
    pod = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{escaped}.slice"
    tree.add(pod)
    tree.add(f"{pod}/cri-containerd-{CID['e']}.scope", quota="150000")
    (tmp_path / "cg" / pod / f"cri-containerd-{CID['e']}.scope" / "cpu.weight").write_text("10\n")
    (tmp_path / "cg" / pod / f"cri-containerd-{CID['e']}.scope" / "memory.max").write_text("max\n")
    logs = tmp_path / "log"
    (logs / "pods" / f"shop_checkout-7d9f_{UIDS['burst']}" / "api").mkdir(parents=True)
    (logs / "containers").mkdir()
    (logs / "containers" / f"checkout-7d9f_shop_api-{CID['e']}.log").symlink_to("/nonexistent")
    found = discover(str(tmp_path / "cg"), 2, "", str(proc), str(logs))
    assert found.driver == "systemd" and found.named
    [p] = found.pods
    assert (p.uid, p.qos_class, p.namespace, p.name) == (UIDS["burst"], "Burstable", "shop", "checkout-7d9f")
    [c] = p.containers
    assert (c.name, c.container_id, c.cpu_limit, c.memory_limit) == ("api", f"containerd://{CID['e']}", 1.5, None)
    assert c.cpu_request == pytest.approx(0.23, abs=0.01)  # weight 10 ~ shares 238 (coarse scale)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    finally:
        structlog.reset_defaults()  # run() configured logging for the whole process


def test_written_objects_are_found_and_measured_by_local_mode(
    tmp_path: Path, proc: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v1_tree(tmp_path, proc)
    out = tmp_path / "objects"
    argv = [str(out), "--cgroup-root", str(tmp_path / "cg"), "--proc-root", str(proc),
            "--log-root", str(tmp_path / "no-logs"), "--node-name", "ws"]  # fmt: skip
    assert _run(argv) == 0
    printed = capsys.readouterr().out
    assert "found 3 pods" in printed and "1 BestEffort, 1 Burstable, 1 Guaranteed" in printed
    # the agent is told the roots the pods were found under, or it would not find them
    roots = f"--cgroup-root {tmp_path / 'cg'} --proc-root {proc}"
    assert f"next: sudo waterline agent --local --objects {out} {roots} --dry-run" in printed
    node = yaml.safe_load((out / "node.yaml").read_text())
    assert node["status"]["allocatable"] == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    pods: list[dict[str, Any]] = list(yaml.safe_load_all((out / "pods.yaml").read_text()))
    web = next(p for p in pods if p["metadata"]["uid"] == UIDS["web"])
    assert web["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}  # fmt: skip
    source = FileObjectSource([str(out)], proc_root=str(proc))
    objects = source()
    assert source.node_name == "ws" and objects.invalid == {}
    assert [p.name for p in objects.policies.policies] == ["local-cpu-guard"]
    assert len(objects.policies.actions) == 1 and not objects.policies.errors
    collector = build_host_parts(str(tmp_path / "cg"), str(proc), "", str(tmp_path / "state"),
                                 dry_run=True, settings=AgentSettings(), node_cpu="pods").collector  # fmt: skip
    assert objects.node is not None
    collection = collector.collect(objects.node, objects.pods)
    assert collection.missing == ()  # every written pod is found in the tree it came from

    assert _run(argv) == 2  # files there: kept unless --force
    assert "already has node.yaml, pods.yaml, policy.yaml (--force overwrites)" in capsys.readouterr().err
    assert _run([*argv, "--force"]) == 0


def test_no_pod_tree_says_what_to_use_instead(tmp_path: Path, proc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FakeTree(tmp_path / "cg", 1)
    assert _run([str(tmp_path / "out"), "--cgroup-root", str(tmp_path / "cg"), "--proc-root", str(proc)]) == 1
    err = capsys.readouterr().err
    assert "no kubepods cgroup under" in err and "config/local-example" in err
    assert not (tmp_path / "out").exists()


def test_the_next_command_keeps_a_kubelet_cgroup_root() -> None:
    """Found under ``--kubelet-cgroup-root /k3s``, the pods are measured there only."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["out", "--kubelet-cgroup-root", "/k3s"])
    assert _same_roots(args) == " --kubelet-cgroup-root /k3s"
    assert _same_roots(parser.parse_args(["out"])) == ""
