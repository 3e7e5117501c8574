"""systemd's D-Bus API through ``busctl``: read a unit's property, set some at runtime.

Why ``busctl`` rather than a Python D-Bus library: it ships with systemd itself (the
``systemd`` package, in every image that runs systemd, the guest's included), so the host
that needs it has it and the agent adds no dependency, no wheel and no lock change; the
calls are few (one per changed cap or mark, never one per tick), so a process per call
costs nothing that shows. Where ``busctl`` is absent (the agent's own image has no
systemd) or the bus does not answer, the agent writes the files directly, as before, and
says so once (``executors.cgroup_writes.choose_writes``).
"""

from __future__ import annotations

import errno
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from executors.systemd_units import Unit, parse_value, parse_version

DEST = "org.freedesktop.systemd1"
MANAGER = ("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager")
TIMEOUT_SECONDS = 5


class BusError(OSError):
    """A busctl call that failed; errno ENOENT when the unit is not loaded (gone)."""


class Busctl:
    """The system bus through ``busctl`` (``binary``: its path)."""

    def __init__(self, binary: str = "busctl") -> None:
        self.binary = binary

    def _run(self, args: Sequence[str]) -> str:
        try:
            done = subprocess.run(
                [self.binary, "--system", f"--timeout={TIMEOUT_SECONDS}", *args],
                capture_output=True, text=True, timeout=2 * TIMEOUT_SECONDS, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as err:
            raise BusError(errno.EIO, f"busctl {args[0]}: {err}") from err
        if done.returncode != 0:
            message = done.stderr.strip() or f"exit {done.returncode}"
            gone = "not loaded" in message or "NoSuchUnit" in message or "Unknown object" in message
            raise BusError(errno.ENOENT if gone else errno.EIO, f"busctl {args[0]}: {message}")
        return done.stdout

    def version(self) -> int:
        """systemd's major version; raises BusError (the bus does not answer) or ValueError."""
        return parse_version(self._run(["get-property", DEST, *MANAGER, "Version"]))

    def get(self, unit: Unit, name: str) -> int:
        """One unsigned property of ``unit``; raises BusError or ValueError."""
        return parse_value(self._run(["get-property", DEST, unit.path, unit.interface, name]))

    def set(self, unit: Unit, properties: Mapping[str, int]) -> None:
        """``SetUnitProperties(unit, runtime=true, ...)``, each property of type t."""
        args = [str(len(properties))]
        for name, value in sorted(properties.items()):
            args += [name, "t", str(value)]
        self._run(["call", DEST, *MANAGER, "SetUnitProperties", "sba(sv)", unit.name, "true", *args])


def find_busctl() -> str | None:
    """busctl's path, None where it is not installed."""
    return shutil.which("busctl")
