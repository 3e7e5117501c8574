"""How the cgroup writers put a value in a cgroup file: directly, or through systemd.

The throttler and the isolator decide what to write and record what was there first; the
one place they write is this (``write`` for a cap or a mark, ``give_back`` for a release).
Two ways, chosen once per host from what the host is (``choose_writes``), never by hand:

* ``DirectWrites``: the file is written (cgroup v1, the cgroupfs driver, or no bus).
* ``SystemdWrites``: where the cgroup is a systemd unit and systemd has a property for
  the file (``executors.systemd_units``), the value is set as the unit's runtime property
  (``SetUnitProperties``), so a daemon-reload re-applies it instead of lifting it; then the
  file is read back and written directly if systemd left it otherwise. Elsewhere (burst,
  a cgroup that is no unit) the write stays direct. The per-tick read-back of the writers
  stays the net for both.

Crash-safe and exact like the files' originals: the unit's own values (what the kubelet
set, or unset) are persisted (``systemd-units.json``, atomically) *before* the first
property is set, and a release gives exactly them back before it writes the file's
original, so both the unit and the file end as they were. A property found changed since
the agent set it (an operator's ``set-property``, a resize) is someone else's value: it is
the unit's own value from then on, given back on release, never overwritten by an old one.
Where a property call fails the write goes direct (logged); a unit not loaded any more is
a pod gone: its record is dropped. So is the record of a unit whose cgroup is gone (a pod
deleted while capped: its release finds no cgroup and writes nothing), found by a sweep at
most once a minute, at a write (``SystemdWrites.SWEEP_SECONDS``): the file stays as small
as what the node holds, however many pods come and go.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from collectors.files import read_bytes
from executors.busctl import Busctl, BusError, find_busctl
from executors.state_file import JsonStateFile
from executors.systemd_units import (
    Choice,
    Unit,
    choose,
    given_back,
    properties_of,
    read_back_holds,
    unit_of,
)

STATE_FILE = "systemd-units.json"
FORMAT_VERSION = 1


class CgroupWrites(Protocol):
    """Where a writer's values go (``root``: the cpu controller's mount; ``cgroup``
    relative to it). Both raise OSError when the value is not in force."""

    through_systemd: bool

    def write(self, root: str, cgroup: str, file: str, text: str) -> None: ...

    def give_back(self, root: str, cgroup: str, file: str, text: str) -> None: ...


def write_file(root: str, cgroup: str, file: str, text: str) -> None:
    fd = os.open(f"{root}/{cgroup}/{file}", os.O_WRONLY | os.O_TRUNC)  # never O_CREAT: gone is ENOENT
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class DirectWrites:
    """Every value written straight into its file (what the agent did before systemd)."""

    through_systemd = False

    def write(self, root: str, cgroup: str, file: str, text: str) -> None:
        write_file(root, cgroup, file, text)

    def give_back(self, root: str, cgroup: str, file: str, text: str) -> None:
        write_file(root, cgroup, file, text)


@dataclass(frozen=True, slots=True)
class UnitRecord:
    """A unit the agent set properties on: its own values before (``original``, what a
    release gives back) and the agent's (``ours``, to tell someone else's change)."""

    original: Mapping[str, int] = field(default_factory=dict)
    ours: Mapping[str, int] = field(default_factory=dict)
    #: The unit's cgroup relative to the v2 root ("" in records written before it was kept:
    #: those are never swept).
    cgroup: str = ""


class UnitsState:
    """``systemd-units.json``: the units' own property values, by unit name."""

    def __init__(self, state_dir: str) -> None:
        self.file = JsonStateFile(state_dir, STATE_FILE)
        self._units: dict[str, UnitRecord] = self.file.load(
            self._parse, {}, "the units keep the agent's properties until a release of the "
            "pod writes the files' originals; a daemon-reload then re-applies them")  # fmt: skip

    @staticmethod
    def _parse(doc: Any) -> dict[str, UnitRecord]:
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"{STATE_FILE}: unknown format version {doc.get('version')!r}")
        return {name: UnitRecord({k: int(v) for k, v in rec["original"].items()},
                                 {k: int(v) for k, v in rec["ours"].items()}, str(rec.get("cgroup", "")))
                for name, rec in doc["units"].items()}  # fmt: skip

    def get(self, unit: str) -> UnitRecord | None:
        return self._units.get(unit)

    def units(self) -> Mapping[str, UnitRecord]:
        return dict(self._units)

    def put(self, unit: str, record: UnitRecord | None) -> None:
        """Persist (atomically) with ``unit``'s record replaced, or dropped when None;
        raises OSError (nothing changed then)."""
        units = dict(self._units)
        if record is None or not record.original:
            units.pop(unit, None)
        else:
            units[unit] = record
        self._save(units)

    def drop(self, names: set[str]) -> None:
        """Persist without the records of ``names`` (one write); raises OSError."""
        self._save({name: rec for name, rec in self._units.items() if name not in names})

    def _save(self, units: dict[str, UnitRecord]) -> None:
        self.file.save({"version": FORMAT_VERSION, "units": {
            name: {"original": dict(rec.original), "ours": dict(rec.ours), "cgroup": rec.cgroup}
            for name, rec in units.items()}})  # fmt: skip
        self._units = units


class SystemdWrites:
    """Values systemd has a property for set on the cgroup's unit (see the module)."""

    through_systemd = True

    def __init__(self, bus: Busctl, state: UnitsState, systemd_version: int) -> None:
        self.bus = bus
        self.state = state
        self.version = systemd_version
        self._log = structlog.get_logger()
        self._swept_at: float | None = None

    #: Seconds between two sweeps for records of units whose cgroup is gone (the module).
    SWEEP_SECONDS = 60.0

    def _sweep(self, root: str) -> None:
        now = time.monotonic()
        if self._swept_at is not None and now - self._swept_at < self.SWEEP_SECONDS:
            return
        self._swept_at = now
        gone = {name for name, rec in self.state.units().items()
                if rec.cgroup and not os.path.isdir(f"{root}/{rec.cgroup}")}  # fmt: skip
        if gone:
            try:
                self.state.drop(gone)
            except OSError as err:
                self._log.warning("systemd: records of gone units not dropped", error=str(err))
                return
            self._log.info("systemd: records of units whose cgroup is gone dropped",
                           code="units-gone", units=sorted(gone))  # fmt: skip

    #: Property sets per write: a second when the first was overtaken (see ``write``).
    ATTEMPTS = 2

    def write(self, root: str, cgroup: str, file: str, text: str) -> None:
        """The value as the unit's property, read back from the file; the file written
        directly only where that fails. A read-back that does not hold usually means
        someone set the unit between the agent's call and the read (runc applying a
        kubelet resize sets ``CPUQuota`` through systemd, seen in a cold CI): the property
        is set once more, ``_set`` recording their value as the unit's own, so the unit
        keeps the agent's value rather than theirs under a file written directly (which
        the next daemon-reload would lift)."""
        self._sweep(root)
        unit = unit_of(cgroup)
        wanted = properties_of(file, text, self.version) if unit is not None else None
        if unit is not None and wanted is not None:
            for _ in range(self.ATTEMPTS):
                try:
                    self._set(unit, wanted, cgroup)
                except (OSError, ValueError) as err:
                    self._log.warning("systemd: property not set, the file is written directly (a "
                                      "daemon-reload will lift it until the next tick)", unit=unit.name,
                                      file=file, error=str(err))  # fmt: skip
                    break
                if self._holds(f"{root}/{cgroup}/{file}", file, text):  # systemd wrote it
                    return
        write_file(root, cgroup, file, text)

    @staticmethod
    def _holds(path: str, file: str, text: str) -> bool:
        try:
            return read_back_holds(file, read_bytes(path, 256).decode(), text)
        except (OSError, UnicodeDecodeError):
            return False

    def _set(self, unit: Unit, wanted: Mapping[str, int], cgroup: str) -> None:
        """The unit's own values recorded (those not recorded yet, and those someone else
        changed since the agent set them), persisted, then the properties set."""
        record = self.state.get(unit.name) or UnitRecord()
        original = dict(record.original)
        for name in wanted:
            current = self.bus.get(unit, name)
            if name not in original or record.ours.get(name) != current:
                original[name] = current
        ours = {**record.ours, **wanted}
        if (original, ours, cgroup) != (dict(record.original), dict(record.ours), record.cgroup):
            self.state.put(unit.name, UnitRecord(original, ours, cgroup))
        self.bus.set(unit, wanted)

    def give_back(self, root: str, cgroup: str, file: str, text: str) -> None:
        self._sweep(root)
        unit = unit_of(cgroup)
        names = given_back(file, self.version) if unit is not None else ()
        record = self.state.get(unit.name) if unit is not None else None
        if unit is not None and record is not None and any(n in record.original for n in names):
            self._give_back(unit, record, [n for n in names if n in record.original])
        write_file(root, cgroup, file, text)

    def _give_back(self, unit: Unit, record: UnitRecord, names: list[str]) -> None:
        """The unit's own values set again, except where someone else set another since
        the agent did (theirs stands); then forgotten. Raises OSError to retry later."""
        try:
            back = {n: record.original[n] for n in names if self.bus.get(unit, n) == record.ours.get(n)}
            if back:
                self.bus.set(unit, back)
        except BusError as err:
            if err.errno != errno.ENOENT:
                raise
        except ValueError as err:
            raise OSError(errno.EIO, str(err)) from err
        self.state.put(unit.name, UnitRecord(
            {n: v for n, v in record.original.items() if n not in names},
            {n: v for n, v in record.ours.items() if n not in names}, record.cgroup))  # fmt: skip
        self._log.info("systemd: unit's own properties given back", unit=unit.name, properties=names)


def probe_bus(bus: Busctl | None) -> tuple[int, str | None]:
    """(systemd's version, None) when its bus answers, else (0, why not)."""
    if bus is None:
        return 0, "busctl is not installed"
    try:
        return bus.version(), None
    except (OSError, ValueError) as err:
        return 0, str(err)


def choose_writes(cgroup_version: int, driver: str | None, state_dir: str) -> CgroupWrites:
    """This host's way (``executors.systemd_units.choose``); said once when it is not
    systemd's on a v2 host (``systemd-writes-off``: the waterline_cgroup_writes_through_systemd
    gauge reads 0)."""
    binary = find_busctl() if cgroup_version == 2 and driver == "systemd" else None
    bus = Busctl(binary) if binary is not None else None
    version, why = probe_bus(bus) if cgroup_version == 2 and driver == "systemd" else (0, None)
    choice: Choice = choose(cgroup_version, driver, why)
    log = structlog.get_logger()
    if not choice.systemd:
        if cgroup_version == 2:
            log.warning("caps and marks are written directly: a daemon-reload lifts them until the "
                        "next tick", code="systemd-writes-off", reason=choice.reason)  # fmt: skip
        if os.path.exists(os.path.join(state_dir, STATE_FILE)) and (left := UnitsState(state_dir).units()):
            log.error("units keep properties an earlier run set through systemd; they are given "
                      "back only where systemd's bus is reachable", code="systemd-units-left",
                      units=sorted(left))  # fmt: skip
        return DirectWrites()
    assert bus is not None
    log.info("caps and marks are set through systemd's units", code="systemd-writes-on",
             systemd=version)  # fmt: skip
    return SystemdWrites(bus, UnitsState(state_dir), version)
