"""The guest node's step times (devtools/vm/node.py): each step's start, as the guest's
uptime, makes the steps' durations; ``up`` closes the last one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from devtools.cluster.launcher import Cluster
from devtools.vm.node import GUEST_SCRIPT, STATE, Steps, guest_folder, guest_steps, stop_guest


def test_each_step_lasts_until_the_next_one_starts() -> None:
    marks = "network 61.20\nprograms 62.00\ncontainerd 70.5\nimages 74.0\nup 190.25\n"
    assert guest_steps(marks) == {"network": 0.8, "programs": 8.5, "containerd": 3.5, "images": 116.2}


def test_the_install_before_the_first_step_is_a_step_of_its_own() -> None:
    """The guest's service starts (``out/started``), copies Waterline in, then marks
    ``network``: that copy was printed nowhere, so the steps did not add up."""
    marks = "network 217.0\nprograms 218.5\n"
    assert guest_steps(marks, started="72.5\n") == {"install": 144.5, "network": 1.5}
    assert guest_steps(marks, started="") == {"network": 1.5}


def test_a_step_not_closed_yet_and_a_torn_line_are_left_out() -> None:
    assert guest_steps("network 61.2\nprograms 62.0\ncontainerd") == {"network": 0.8}
    assert guest_steps("") == {}


def test_the_lines_say_every_step() -> None:
    lines = Steps(boot=58.4, guest={"network": 0.8, "images": 116.2}, ready=301.6).lines()
    assert lines == [
        "boot (qemu's start to the guest's service): 58 s",
        "network: 0.8 s",
        "images: 116.2 s",
        "qemu's start to the node Ready: 302 s",
    ]


def test_the_guest_services_restart_and_only_a_failed_kube_proxy_stops_the_join() -> None:
    """kube-proxy exits on purpose ("NodeIPs changed for the node") when it started before
    the kubelet registered the Node's addresses, which a loaded machine makes likely (two
    joins in a row stopped there): its unit restarts it, as a distribution's does, and the
    join's wait gives up only on a unit systemd calls failed (its restarts spent)."""
    script = GUEST_SCRIPT.format(etc="/e", socket="/s", name="n", ip="i", node_ip="i", gateway="g", labels="l",
                                 taint="t")
    service = script[script.index("service() {") : script.index("\n}\n", script.index("service() {"))]
    assert "--property=Restart=on-failure" in service
    wait = script[script.index("step kube-proxy") : script.index("step up")]
    assert "is-failed kube-proxy" in wait and "is-active" not in wait


def test_a_guest_is_stopped_from_its_record_with_no_image(tmp_path: Path) -> None:
    """``make cluster-down`` and ``make vm-node-down`` stop the guest from the pid its start
    recorded under the cluster's run folder (here a process that ignores the power-off
    request, so it is killed after the timeout); the record goes, and a second stop finds
    no guest. No cluster runs: deleting the Node fails quietly."""
    cluster = Cluster(tmp_path, tmp_path / "bin")
    folder = guest_folder(cluster)
    (folder / "share").mkdir(parents=True)
    with subprocess.Popen(["sleep", "600"]) as proc:  # noqa: S607
        (folder / STATE).write_text(json.dumps({"qemu": proc.pid}))
        assert stop_guest(cluster, timeout=0.5) is True
        proc.wait(timeout=5)  # gone (stop_guest may have reaped it: no code to assert)
    assert not (folder / STATE).exists()
    assert stop_guest(cluster, timeout=0.5) is False
