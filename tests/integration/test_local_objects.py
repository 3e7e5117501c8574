"""The objects local mode reads, on this host's real cgroup v1 tree: what `waterline
local-objects` writes for the pods it finds there, and the shipped config/local-example,
are both found and measured by `waterline agent --local` in that same tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.demo.cgroups import CgroupTree
from devtools.demo.pods import DemoPod

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "local-example"


def waterline(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *argv], capture_output=True, text=True, timeout=60, check=False
    )


def local_agent(objects: Path, tree: CgroupTree, tmp_path: Path) -> str:
    """Three dry-run ticks over ``objects``, with the tree's kubelet root; the console view."""
    done = waterline(
        "agent", "--local", "--objects", str(objects), "--kubelet-cgroup-root", tree.kubelet_root,
        "--ticks", "3", "--interval", "0.5", "--dry-run", "--metrics-addr", "off",
        "--state-dir", str(tmp_path / "state"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_local_objects_describes_the_running_pods_and_the_agent_measures_them(
    tree: CgroupTree, tmp_path: Path
) -> None:
    pods = [DemoPod("web", "Guaranteed", 0.5), DemoPod("batch", "BestEffort", None)]
    for pod in pods:
        tree.add_pod(pod)
        tree.start(pod)
    out = tmp_path / "objects"
    done = waterline("local-objects", str(out), "--kubelet-cgroup-root", tree.kubelet_root, "--node-name", "ws")
    assert done.returncode == 0, done.stderr
    assert "found 2 pods" in done.stdout and "1 BestEffort, 1 Guaranteed" in done.stdout
    written: list[dict[str, Any]] = list(yaml.safe_load_all((out / "pods.yaml").read_text()))
    by_uid = {p["metadata"]["uid"]: p for p in written}
    assert set(by_uid) == {p.uid for p in pods}
    web = by_uid[pods[0].uid]
    assert web["status"]["qosClass"] == "Guaranteed"
    assert web["status"]["containerStatuses"][0]["containerID"] == f"containerd://{pods[0].container_id}"
    assert web["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "500m"  # the quota kubelet would write
    assert web["spec"]["containers"][0]["name"] == "sh"  # named after its process

    view = local_agent(out, tree, tmp_path)
    last = view.split("tick 3")[1]
    assert "no cgroup" not in view
    for pod in written:  # each with a CPU figure on the last tick
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        assert f"{key} -" not in last and key in last


def test_the_shipped_example_is_kubelet_shaped(tree: CgroupTree, tmp_path: Path) -> None:
    """Where the example's pods have cgroups (made here with its uids and container ids),
    the agent measures them; where they do not (any other machine) it says so."""
    without = local_agent(EXAMPLE, tree, tmp_path)
    assert "3 of 3 pods have no cgroup on this host" in without
    example = [d for d in yaml.safe_load_all((EXAMPLE / "pods.yaml").read_text())]
    for doc in example:
        status = doc["status"]
        limit = doc["spec"]["containers"][0]["resources"].get("limits", {}).get("cpu")
        pod = DemoPod(
            doc["metadata"]["name"], status["qosClass"],
            None if limit is None else float(limit.rstrip("m")) / (1000 if limit.endswith("m") else 1),
            uid=doc["metadata"]["uid"],
            container_id=status["containerStatuses"][0]["containerID"].partition("://")[2],
        )  # fmt: skip
        tree.add_pod(pod)
        tree.start(pod)
    view = local_agent(EXAMPLE, tree, tmp_path)
    assert "no cgroup" not in view
    assert "node local-example  pods 3" in view
