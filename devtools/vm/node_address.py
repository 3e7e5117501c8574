"""The guest node's address on this machine: how the API server reaches its kubelet.

qemu's user network puts the guest at 10.0.2.15, which this machine cannot route: the API
server's connection for ``kubectl logs``/``exec`` left by the default route (an egress
proxy answered). So the guest's kubelet registers an address of TEST-NET-2 (RFC 5737,
never a real host) that this machine's loopback device holds while the guest runs, and
qemu forwards ``that address:KUBELET_PORT`` to the guest (``hostfwd``); the guest holds it
too (the kubelet serves only an address of its own).

The address's local route has the source 127.0.0.1: qemu shows a connection from a
loopback source to the guest as coming from the gateway (10.0.2.2), and from any other
source as it is; from the node's address itself the guest, which holds that address
too, dropped it as a martian (no SYN reached the kubelet until the source was 127.0.0.1).

One address per guest, the first one free, so two guests (two clusters: a developer's and
a helper's) can run side by side. Adding it takes root; without root the guest keeps
10.0.2.15 and ``kubectl logs`` is not served for it.
"""

from __future__ import annotations

import subprocess

#: The candidates, first free first.
CANDIDATES = tuple(f"198.51.100.{i}" for i in range(15, 255))
#: The guest kubelet's port: not 10250, which this machine's own kubelet (``make node``)
#: may hold on every address, so qemu could not listen there.
KUBELET_PORT = 10350


def _run(*command: str) -> bool:
    return subprocess.run(list(command), capture_output=True).returncode == 0  # noqa: S603


def _held() -> set[str]:
    done = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", "lo"],  # noqa: S607
                          capture_output=True, text=True)  # fmt: skip
    return {word.split("/")[0] for line in done.stdout.splitlines() for word in line.split()[3:4]}


def hold() -> str | None:
    """A free candidate, now on this machine's loopback with its route; None where none
    can be added (not root). Nothing is left half done."""
    held = _held()
    for ip in CANDIDATES:
        if ip in held:
            continue
        if not _run("ip", "addr", "add", f"{ip}/32", "dev", "lo"):
            return None  # not root (a race with another guest would take the next one here)
        if _run("ip", "route", "replace", "local", ip, "dev", "lo", "src", "127.0.0.1", "table", "local"):
            return ip
        drop(ip)
        return None
    return None


def drop(ip: str) -> None:
    """The address and its route off this machine's loopback (quietly: it may be gone)."""
    if ip not in CANDIDATES:
        return  # the guest's own 10.0.2.15: nothing was added here
    _run("ip", "route", "del", "local", ip, "table", "local")
    _run("ip", "addr", "del", f"{ip}/32", "dev", "lo")


def hostfwd(ip: str) -> str:
    """qemu's ``-nic user`` option forwarding ``ip:KUBELET_PORT`` to the guest's kubelet."""
    return f",hostfwd=tcp:{ip}:{KUBELET_PORT}-:{KUBELET_PORT}" if ip in CANDIDATES else ""
