"""The guest node's step times (devtools/vm/node.py): each step's start, as the guest's
uptime, makes the steps' durations; ``up`` closes the last one."""

from __future__ import annotations

from devtools.vm.node import GUEST_SCRIPT, Steps, guest_steps


def test_each_step_lasts_until_the_next_one_starts() -> None:
    marks = "network 61.20\nprograms 62.00\ncontainerd 70.5\nimages 74.0\nup 190.25\n"
    assert guest_steps(marks) == {"network": 0.8, "programs": 8.5, "containerd": 3.5, "images": 116.2}


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
    script = GUEST_SCRIPT.format(etc="/e", socket="/s", name="n", ip="i", gateway="g", labels="l", taint="t")
    service = script[script.index("service() {") : script.index("\n}\n", script.index("service() {"))]
    assert "--property=Restart=on-failure" in service
    wait = script[script.index("step kube-proxy") : script.index("step up")]
    assert "is-failed kube-proxy" in wait and "is-active" not in wait
