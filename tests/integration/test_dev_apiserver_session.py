"""The workstation session of docs/dev-apiserver.md with the real commands:
`waterline dev-apiserver` loaded with the CRDs, the sample objects, the policies and the
documented node, then `waterline agent` for that node, and `waterline controller`: the controller syncs its caches, leads, runs rounds
(counted in its metrics) and acts on the sample PodMigrationJob (its pod does not exist:
arbitration fails it with MissingPod, written through the status subresource)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.kube.client import build_api

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB = "/apis/qos.waterline.io/v1alpha1/podmigrationjobs/migrate-web-7d9f8-x2k4q"


def waterline(*args: str) -> subprocess.Popen[str]:
    tool = "devtools" if args[0] == "dev-apiserver" else "agent"  # the dev tools run from the checkout
    return subprocess.Popen(
        [sys.executable, "-m", tool, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )


def lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's output lines as they come, read by a thread (no read blocks a test)."""
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return out


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "kubeconfig"
    server = waterline(
        "dev-apiserver",
        "--objects=deploy/crds",
        "--objects=config/samples",
        "--objects=config/policies",
        "--objects=docs/examples/dev-node.yaml",
        f"--kubeconfig-out={path}",
    )
    try:
        banner = lines(server).get(timeout=20)
        assert "with 20 objects" in banner, banner  # 5 CRDs, 4 samples, 8 policies, 3 node/pods
        yield path
    finally:
        stop(server)


def test_the_controller_syncs_and_runs_rounds_on_the_sample_objects(kubeconfig: Path) -> None:
    controller = waterline(
        "controller",
        f"--kubeconfig={kubeconfig}",
        "--interval=0.2",
        "--metrics-addr=127.0.0.1:0",
        "--log-format=json",
    )
    try:
        output, port = lines(controller), None
        while port is None:
            record = json.loads(output.get(timeout=20))
            if record.get("event") == "serving metrics":
                port = record["port"]
        metrics_url = f"http://127.0.0.1:{port}/metrics"

        def rounds() -> float:
            text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
            for sample in text.splitlines():
                if sample.startswith('waterline_controller_rounds_total{outcome="ok"}'):
                    return float(sample.split()[-1])
            return 0.0

        api = build_api(str(kubeconfig))
        deadline = time.monotonic() + 20
        while (
            rounds() < 2 or (api.request("GET", JOB).get("status") or {}).get("phase") != "Failed"
        ):
            assert time.monotonic() < deadline, "no rounds, or the sample job was not arbitrated"
            time.sleep(0.1)
        assert api.request("GET", JOB)["status"]["reason"] == "MissingPod"
        lease = api.request(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/waterline-system/leases/waterline-controller",
        )
        assert lease["spec"]["holderIdentity"]
        api.close()
    finally:
        stop(controller)
    assert controller.returncode == 0


def test_the_agent_runs_against_it_for_the_documented_node(
    kubeconfig: Path, tmp_path: Path
) -> None:
    agent = waterline(
        "agent",
        f"--kubeconfig={kubeconfig}",
        "--node-name=dev-node",
        "--dry-run",
        "--ticks=3",
        "--interval=0.2",
        f"--state-dir={tmp_path / 'state'}",
        "--metrics-addr=off",
        "--log-format=json",
    )
    out, _ = agent.communicate(timeout=30)
    assert agent.returncode == 0, out
    events = [json.loads(line).get("event") for line in out.splitlines()]
    assert "agent started" in events and events[-1] == "agent stopped"
