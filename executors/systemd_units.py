"""Which cgroup file writes systemd can keep, and as which unit properties (pure).

With the kubelet's systemd driver on cgroup v2 the pod slices and container scopes are
systemd units, and systemd writes each unit's own properties back into its cgroup at every
re-realization (``systemctl daemon-reload``, a ``set-property`` on it or its slice). A value
set as the unit's property (``SetUnitProperties``, runtime) is the one systemd writes back,
so a reload keeps it (DESIGN.md "CPU isolation"). This module is the translation, with
no I/O: the unit a cgroup is (its last path component, when that names a slice or a
scope), its D-Bus object path, and the properties that say what a cgroup file says.

Only what systemd has a property for is translated: ``cpu.max`` (``CPUQuotaPerSecUSec``
and ``CPUQuotaPeriodUSec``), ``cpu.idle`` = 1 (``CPUWeight`` = idle, systemd 250+) and
``memory.max`` (``MemoryMax``, type t, bytes or UINT64_MAX for ``max``; a batch pod's memory
limit). The kernel keeps ``memory.max`` in whole pages, so a value read back is the one
written rounded down to a page (``read_back_holds``).
``cpu.max.burst`` has none (systemd 252): it stays a direct write, held by the per-tick
read-back. ``cpu.weight`` is never set as a property: the only time the agent writes it is
after a release, whose property is the unit's own weight given back.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

#: systemd's "unset" for a usec property (``USEC_INFINITY``) and for a weight
#: (``CGROUP_WEIGHT_INVALID``), both UINT64_MAX on the bus.
UNSET = 2**64 - 1
#: ``CPUWeight`` on the bus for ``CPUWeight=idle`` (``CGROUP_WEIGHT_IDLE``, systemd 250+).
IDLE_WEIGHT = 0
#: The first systemd that writes ``cpu.idle`` from ``CPUWeight=idle``.
IDLE_SINCE = 250
QUOTA, PERIOD, WEIGHT = "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec", "CPUWeight"
#: ``MemoryMax`` (systemd's ``CGroupContext.memory_max``, written into ``memory.max``;
#: UINT64_MAX, ``CGROUP_LIMIT_MAX``, is ``max``).
MEMORY_MAX = "MemoryMax"
#: The largest page a kernel keeps ``memory.max`` in (64 KiB: arm64, ppc64).
LARGEST_PAGE = 65536
#: The D-Bus interface of each kind of unit a pod's cgroup can be.
INTERFACES = {".slice": "org.freedesktop.systemd1.Slice", ".scope": "org.freedesktop.systemd1.Scope"}
_PLAIN = frozenset(string.ascii_letters)


@dataclass(frozen=True, slots=True)
class Unit:
    """A systemd unit that owns a cgroup: its name, D-Bus object path and interface."""

    name: str
    path: str
    interface: str


def unit_of(cgroup: str) -> Unit | None:
    """The unit whose cgroup this is (relative to the v2 root, e.g.
    ``kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice``), None when
    its last component names no slice or scope (a cgroupfs driver's ``pod<uid>``, a
    container cgroup under cgroupfs)."""
    name = cgroup.rstrip("/").rsplit("/", 1)[-1]
    for suffix, interface in INTERFACES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return Unit(name, "/org/freedesktop/systemd1/unit/" + bus_label(name), interface)
    return None


def bus_label(name: str) -> str:
    """A unit name as one D-Bus object path label, escaped as systemd does
    (``bus_label_escape``): ASCII letters kept, digits kept except first, every other byte
    ``_`` and two lowercase hex digits."""
    out = []
    for i, byte in enumerate(name.encode()):
        char = chr(byte)
        out.append(char if char in _PLAIN or (i > 0 and char.isdigit() and byte < 128)
                   else f"_{byte:02x}")  # fmt: skip
    return "".join(out)


def properties_of(file: str, text: str, systemd_version: int) -> dict[str, int] | None:
    """The unit properties that make systemd write ``text`` into ``file``, None where
    systemd has none for it (the write stays direct). ``cpu.max`` "Q P": the quota per
    second (systemd writes back ``quota_per_sec * period / 1s``) and the period; "max P":
    no quota. ``cpu.idle`` "1": ``CPUWeight`` = idle, from systemd 250. ``memory.max``
    "N" or "max": ``MemoryMax``. Raises ValueError on a ``cpu.max`` that is not "Q P" or
    "max P", a ``memory.max`` that is not bytes or "max"."""
    if file == "cpu.max":
        fields = text.split()
        if len(fields) != 2 or not fields[1].isdigit() or not (fields[0] == "max" or fields[0].isdigit()):
            raise ValueError(f"cpu.max: {text!r} is not 'QUOTA PERIOD' or 'max PERIOD'")
        period = int(fields[1])
        if period <= 0:
            raise ValueError(f"cpu.max: period {period} in {text!r} is not positive")
        quota = UNSET if fields[0] == "max" else round(int(fields[0]) * 1_000_000 / period)
        return {QUOTA: quota, PERIOD: period}
    if file == "cpu.idle" and text.strip() == "1" and systemd_version >= IDLE_SINCE:
        return {WEIGHT: IDLE_WEIGHT}
    if file == "memory.max":
        value = text.strip()
        if value != "max" and not value.isdigit():
            raise ValueError(f"memory.max: {text!r} is not bytes or 'max'")
        return {MEMORY_MAX: UNSET if value == "max" else int(value)}
    return None


def read_back_holds(file: str, found: str, text: str) -> bool:
    """Whether ``found``, read from ``file`` after ``text`` was set, is ``text`` in force:
    the same text, or for ``memory.max`` the same bytes rounded down to the kernel's page
    (it keeps whole pages: 1000000 reads back 999424 with 4 KiB pages)."""
    found, text = found.strip(), text.strip()
    if found == text:
        return True
    if file == "memory.max" and found.isdigit() and text.isdigit():
        return 0 <= int(text) - int(found) < LARGEST_PAGE
    return False


def given_back(file: str, systemd_version: int) -> tuple[str, ...]:
    """The properties a write of ``file``'s original content gives back to the unit (the
    values the unit had before the agent's first property): ``cpu.max`` its quota and
    period; ``cpu.idle`` (to 0) and ``cpu.weight`` its weight; ``memory.max`` its
    ``MemoryMax``."""
    if file == "cpu.max":
        return (QUOTA, PERIOD)
    if file == "memory.max":
        return (MEMORY_MAX,)
    if file in ("cpu.idle", "cpu.weight") and systemd_version >= IDLE_SINCE:
        return (WEIGHT,)
    return ()


@dataclass(frozen=True, slots=True)
class Choice:
    """How cgroup files are written on this host: through systemd where the cgroup is a
    unit (``systemd``), else directly; ``reason`` says why when not."""

    systemd: bool
    reason: str = ""


def choose(cgroup_version: int, driver: str | None, bus: str | None) -> Choice:
    """Through systemd only on cgroup v2 with the kubelet's systemd driver and systemd's
    bus answering (``bus``: None when it answered, else why not). Never configured: what
    the host is decides."""
    if cgroup_version != 2:
        return Choice(False, f"cgroup v{cgroup_version}: writes stay direct (systemd writes are built "
                             "and verified on v2 only; the per-tick read-back holds the caps)")
    if driver != "systemd":
        return Choice(False, f"the kubelet's cgroup driver is {driver or 'unknown (no kubepods cgroup yet)'}, "
                             "not systemd: no unit owns the pods' cgroups")  # fmt: skip
    if bus is not None:
        return Choice(False, f"systemd's bus is not reachable ({bus})")
    return Choice(True)


def parse_value(reply: str) -> int:
    """A ``busctl get-property`` reply of type t or u ("t 100"); raises ValueError."""
    kind, _, value = reply.strip().partition(" ")
    if kind not in ("t", "u") or not value.isdigit():
        raise ValueError(f"busctl: {reply.strip()!r} is not an unsigned integer property")
    return int(value)


def parse_version(reply: str) -> int:
    """systemd's major version from ``Manager.Version`` ('s "252.38-1~deb12u1"');
    raises ValueError."""
    kind, _, value = reply.strip().partition(" ")
    major = value.strip('"').split(".", 1)[0].split("~", 1)[0].split("-", 1)[0]
    if kind != "s" or not major.isdigit():
        raise ValueError(f"busctl: {reply.strip()!r} is not systemd's version")
    return int(major)
