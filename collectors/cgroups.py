"""Which cgroup hierarchies the host has, and where each controller lives.

Detected from ``<proc>/self/mountinfo`` (never configured by hand): cgroup v1 (one
hierarchy per controller or per controller group, e.g. ``cpu,cpuacct``), v2 (one unified
hierarchy) or *hybrid* (v1 controllers plus a controller-less cgroup2 at ``unified``).
Kubelet puts pods in v1 whenever the ``cpu`` controller is bound to a v1 hierarchy, so that
decides the version the collectors and the throttler use.

The DaemonSet mounts the host's ``/sys/fs/cgroup`` somewhere (``cgroup_root``). A mount
point in mountinfo that already lies under ``cgroup_root`` is used as is (an rbind shows
up like that); one under the host's conventional ``/sys/fs/cgroup`` is rebased onto
``cgroup_root`` (reading the host's ``/proc/1/mountinfo``). When mountinfo names no usable
cgroup mount, the tree under ``cgroup_root`` is probed instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import structlog

HOST_CGROUP_ROOT = "/sys/fs/cgroup"
#: Mount options of a v1 cgroup mount that are not controller names.
_NOT_CONTROLLERS = frozenset(
    {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "noprefix",
     "clone_children", "xattr", "cpuset_v2_mode", "nsdelegate", "memory_recursiveprot",
     "favordynmods", "memory_localevents", "memory_hugetlb_accounting"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CgroupMount:
    """One cgroup mount as seen in mountinfo."""

    fstype: str  # "cgroup" (v1) or "cgroup2"
    root: str  # the mount's root inside the hierarchy ("/" for a full host mount)
    mount_point: str
    controllers: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class CgroupMounts:
    """Per-controller roots in this process's view of the filesystem."""

    cgroup_root: str
    v1: Mapping[str, str] = field(default_factory=dict)  # controller -> hierarchy root
    unified: str | None = None
    unified_controllers: frozenset[str] = frozenset()

    @property
    def mode(self) -> str:
        """``v1``, ``v2``, ``hybrid`` or ``none``."""
        if self.v1 and self.unified:
            return "hybrid"
        if self.v1:
            return "v1"
        return "v2" if self.unified else "none"

    @property
    def version(self) -> int:
        """The cgroup version kubelet runs pods in: 1 when ``cpu`` is a v1 controller."""
        return 1 if "cpu" in self.v1 else 2

    def controller_root(self, controller: str) -> str | None:
        """Hierarchy root holding ``controller``'s files for pods.

        On v2 ``cpuacct`` means ``cpu.stat``'s ``usage_usec``, present in every cgroup.
        """
        if self.version == 1:
            return self.v1.get(controller)
        if self.unified is None:
            return None
        if controller == "cpuacct" or controller in self.unified_controllers:
            return self.unified
        return None


def _unescape(path: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    if "\\" not in path:
        return path
    out = []
    i = 0
    while i < len(path):
        if path[i] == "\\" and i + 4 <= len(path) and path[i + 1 : i + 4].isdigit():
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup and cgroup2 mounts in mountinfo text; other lines and garbage are skipped."""
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 4:
            continue
        fstype = fields[sep + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        controllers: frozenset[str] = frozenset()
        if fstype == "cgroup":
            controllers = frozenset(
                opt
                for opt in fields[sep + 3].split(",")
                if opt not in _NOT_CONTROLLERS and ("=" not in opt or opt.startswith("name="))
            )
        mounts.append(
            CgroupMount(
                fstype=fstype,
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                controllers=controllers,
            )
        )
    return mounts


def _under(path: str, base: str) -> bool:
    base = base.rstrip("/") or "/"
    return path == base or path.startswith(base + "/") or base == "/"


def _view_path(mount_point: str, cgroup_root: str, rebase: bool) -> str | None:
    if not rebase:
        return mount_point if _under(mount_point, cgroup_root) else None
    if _under(mount_point, HOST_CGROUP_ROOT):
        return cgroup_root.rstrip("/") + mount_point[len(HOST_CGROUP_ROOT) :]
    return None


def _read_controllers(unified: str) -> frozenset[str]:
    try:
        with open(os.path.join(unified, "cgroup.controllers"), encoding="ascii") as f:
            return frozenset(f.read().split())
    except (OSError, UnicodeDecodeError):
        return frozenset()


def mounts_from(mounts: Iterable[CgroupMount], cgroup_root: str) -> CgroupMounts | None:
    """Per-controller roots from parsed mounts; None when none of them is usable here."""
    mounts = [m for m in mounts if m.root == "/"]  # a namespaced view does not show pods
    for rebase in (False, True):
        v1: dict[str, str] = {}
        unified: str | None = None
        for mount in mounts:
            path = _view_path(mount.mount_point, cgroup_root, rebase)
            if path is None or not os.path.isdir(path):
                continue
            if mount.fstype == "cgroup2":
                unified = unified or path
            else:
                for controller in sorted(mount.controllers):
                    v1.setdefault(controller, path)
        if v1 or unified:
            controllers = _read_controllers(unified) if unified else frozenset()
            return CgroupMounts(cgroup_root, v1, unified, controllers)
    return None


def probe_mounts(cgroup_root: str) -> CgroupMounts:
    """Guess the layout from the tree alone (mountinfo unreadable or unhelpful)."""
    if os.path.exists(os.path.join(cgroup_root, "cgroup.controllers")):
        return CgroupMounts(cgroup_root, {}, cgroup_root, _read_controllers(cgroup_root))
    v1: dict[str, str] = {}
    unified: str | None = None
    try:
        names = sorted(os.listdir(cgroup_root))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(cgroup_root, name)
        if os.path.islink(path) or not os.path.isdir(path):
            continue  # cpu -> cpu,cpuacct symlinks: the real dir names the controllers
        if os.path.exists(os.path.join(path, "cgroup.controllers")):
            unified = unified or path
        elif os.path.exists(os.path.join(path, "cgroup.procs")):
            for controller in name.split(","):
                v1.setdefault(controller, path)
    return CgroupMounts(
        cgroup_root, v1, unified, _read_controllers(unified) if unified else frozenset()
    )


def detect_mounts(
    cgroup_root: str = HOST_CGROUP_ROOT, proc_root: str = "/proc", pid: str = "self"
) -> CgroupMounts:
    """Detect the cgroup layout; never raises (an empty result has mode ``none``)."""
    log = structlog.get_logger()
    path = os.path.join(proc_root, pid, "mountinfo")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = mounts_from(parse_mountinfo(f.read()), cgroup_root)
    except OSError as err:
        log.warning("mountinfo unreadable, probing the cgroup tree", code="mountinfo-unreadable", path=path, error=str(err))
        found = None
    result = found if found is not None else probe_mounts(cgroup_root)
    log.info(
        "cgroup layout",
        code="cgroup-layout",
        mode=result.mode,
        version=result.version,
        cgroup_root=cgroup_root,
        v1=dict(result.v1),
        unified=result.unified,
    )
    return result
