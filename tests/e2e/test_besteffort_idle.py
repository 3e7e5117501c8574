"""The real kubelet and a `besteffort` QoS cgroup in the idle class (issue 33, docs/node.md
"The besteffort QoS cgroup in the idle class").

Kubernetes 1.37's kubelet (cgroupfs, cgroup v1) writes ``cpu.shares`` 2 to
``kubepods/besteffort`` at its start, at each pod's admission and every minute; while
``cpu.idle`` is 1 there the kernel refuses it (EINVAL). What it does then decides whether
the agent may ever mark that cgroup, so it is pinned here through what the kernel and the
API server show, not through the kubelet's log wording:

* admission goes on: a BestEffort and a Burstable pod become Ready while the mark is set;
* the kubelet survives its periodic update with the mark set;
* a kubelet *started* with the mark set exits non-zero (its container manager fails: the
  node cannot come back while the mark stays), and starts once it is lifted;
* lifting the mark leaves the kernel's default weight (1024, not the kubelet's 2) until the
  kubelet's next update writes 2 again.

The test restores the node in every case: the mark lifted, the weight 2, a kubelet running
and the Node Ready, before the other e2e tests run.
"""

from __future__ import annotations

import errno
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.harness.waiting import wait_until
from tests.e2e.conftest import IDLE, RealNodeRun, deployment, report
from tests.e2e.kernel import CPU, KUBEPODS, PodCgroups, read

BESTEFFORT = CPU / KUBEPODS / "besteffort"
#: The kubelet's weight for the besteffort QoS cgroup (MinShares) and the kernel's default,
#: which a cgroup gets back when it leaves the idle class.
KUBELET_SHARES, KERNEL_SHARES = "2", "1024"
#: The kubelet's QoS update runs every minute (periodicQOSCgroupUpdateInterval): two of them.
TWO_UPDATES = 130.0


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _refused(path: Path, value: str) -> int | None:
    """The errno of writing ``value`` to ``path`` (None: accepted)."""
    try:
        _write(path, value)
    except OSError as err:
        return err.errno
    return None


def _node_ready(real: RealNodeRun) -> bool:
    node = real.get("node", real.node.name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def _kubelet_running(real: RealNodeRun) -> subprocess.Popen[bytes]:
    """The kubelet of the node, started again when a step left it stopped."""
    proc = real.node.cluster.procs.get("kubelet")
    if proc is None or proc.poll() is not None:
        proc = real.node.start_kubelet()
    return proc


@pytest.fixture
def mark(real: RealNodeRun) -> Iterator[None]:
    """The node as it was after the test: no mark, the kubelet's weight, a Ready kubelet."""
    try:
        yield
    finally:
        _write(BESTEFFORT / "cpu.idle", "0")
        _write(BESTEFFORT / "cpu.shares", KUBELET_SHARES)
        _kubelet_running(real)
        wait_until(lambda: _node_ready(real), 180, "the Node Ready", interval=1)


def test_the_real_kubelet_with_an_idle_besteffort_cgroup(real: RealNodeRun, mark: None) -> None:
    assert read(BESTEFFORT / "cpu.idle") == "0"
    assert read(BESTEFFORT / "cpu.shares") == KUBELET_SHARES
    ns = real.kube.namespace("be-idle")
    try:
        # The mark: the kernel refuses the kubelet's weight from now on.
        _write(BESTEFFORT / "cpu.idle", "1")
        assert _refused(BESTEFFORT / "cpu.shares", KUBELET_SHARES) == errno.EINVAL
        marked_at = time.monotonic()

        # Admission: both pods run; their pod cgroups are made, the mark stays.
        real.kube.apply([
            deployment("be", ns, IDLE, {"role": "be"}),
            deployment("bu", ns, IDLE, {"role": "bu"},
                       {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}),
        ])  # fmt: skip
        pods = {n: PodCgroups.of(real.ready_pod(ns, f"app={n}")) for n in ("be", "bu")}
        assert {n: p.qos for n, p in pods.items()} == {"be": "BestEffort", "bu": "Burstable"}
        assert all((CPU / p.rel).is_dir() for p in pods.values())
        assert read(BESTEFFORT / "cpu.idle") == "1"
        admitted = time.monotonic() - marked_at

        # The periodic update (every minute): the kubelet lives through it, the node stays Ready.
        kubelet = _kubelet_running(real)
        time.sleep(max(0.0, 65 - (time.monotonic() - marked_at)))
        assert kubelet.poll() is None, f"the kubelet exited ({kubelet.returncode}) with the mark set"
        assert _node_ready(real)
        assert read(BESTEFFORT / "cpu.idle") == "1"

        # Its start: a kubelet started with the mark set exits, and the mark is still there.
        assert real.node.stop_kubelet()
        started = time.monotonic()
        failed = real.node.start_kubelet()
        code = failed.wait(timeout=120)
        assert code != 0, "the kubelet started with the besteffort cgroup in the idle class"
        failed_after = time.monotonic() - started
        assert read(BESTEFFORT / "cpu.idle") == "1"

        # Lifted: the kernel's default weight, then the kubelet starts and writes its 2.
        _write(BESTEFFORT / "cpu.idle", "0")
        assert read(BESTEFFORT / "cpu.shares") == KERNEL_SHARES
        kubelet = real.node.start_kubelet()
        wait_until(lambda: read(BESTEFFORT / "cpu.shares") == KUBELET_SHARES, 120, "the kubelet's weight", interval=0.2)
        wait_until(lambda: _node_ready(real), 180, "the Node Ready", interval=1)
        assert kubelet.poll() is None
        assert [p["metadata"]["uid"] for n in ("be", "bu") for p in real.pods(ns, f"app={n}")] == [
            pods["be"].uid, pods["bu"].uid]  # the same pods, never restarted by it

        # The periodic update writes 2 back after a lift (no pod admitted meanwhile).
        _write(BESTEFFORT / "cpu.idle", "1")
        _write(BESTEFFORT / "cpu.idle", "0")
        lifted = time.monotonic()
        assert read(BESTEFFORT / "cpu.shares") == KERNEL_SHARES
        wait_until(lambda: read(BESTEFFORT / "cpu.shares") == KUBELET_SHARES, TWO_UPDATES, "the kubelet's weight after a lift",
                   interval=0.5)
        report("besteffort-idle",
               f"marked: pods be and bu Ready {admitted:.1f} s after the mark; the kubelet alive after 65 s",
               f"a kubelet started with the mark exited with code {code} after {failed_after:.1f} s",
               f"lifted: cpu.shares {KERNEL_SHARES} (the kernel's), the kubelet's {KUBELET_SHARES} again "
               f"{time.monotonic() - lifted:.1f} s later (its periodic update)")  # fmt: skip
    finally:
        real.kubectl("delete", "namespace", ns, "--wait", "--timeout", "120s", check=False, timeout=150)
