"""Writes that systemd keeps (issue 30), on fake trees: the unit a cgroup is, the properties
a cap or a mark is, the choice between systemd and the files, and ``SystemdWrites``
recording each unit's own values before it sets its own and giving exactly them back. The
bus here is ``Units``, which does what systemd does with a runtime property (writes it into
the unit's cgroup, again at each reload); the real systemd is in tests/vm/
(``systemd_keeps_caps_and_marks_through_a_reload_storm``)."""

from __future__ import annotations

import errno
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from agent.model.batch import BATCH_CPU, BATCH_MEMORY, batch_limits
from agent.model.objects import parse_pod
from devtools.harness.fake_cgroups import FakeTree
from engine.records import Reverted
from executors.batch_limits_state import BatchLimitsState
from executors.busctl import BusError
from executors.cgroup_batch_limits import CgroupBatchLimiter
from executors.cgroup_throttle import CgroupThrottler
from executors.cgroup_writes import (
    DirectWrites,
    SystemdWrites,
    UnitRecord,
    UnitsState,
    choose_writes,
)
from executors.quota_state import QuotaState
from executors.systemd_units import (
    IDLE_WEIGHT,
    MEMORY_MAX,
    PERIOD,
    QUOTA,
    UNSET,
    WEIGHT,
    Unit,
    bus_label,
    choose,
    given_back,
    parse_value,
    parse_version,
    properties_of,
    read_back_holds,
    unit_of,
)
from tests.builders import pod
from tests.unit.test_quota_state import POD, _tree

SCOPE = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice/cri-containerd-c1.scope"


# -- the pure parts -----------------------------------------------------------------------------


def test_the_unit_is_the_last_component_when_it_names_a_slice_or_a_scope() -> None:
    unit = unit_of(SCOPE)
    assert unit is not None and unit.name == "cri-containerd-c1.scope"
    assert unit.interface == "org.freedesktop.systemd1.Scope"
    assert unit.path == "/org/freedesktop/systemd1/unit/cri_2dcontainerd_2dc1_2escope"
    pod = unit_of("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5b0e_1.slice/")
    assert pod is not None and pod.interface.endswith(".Slice")
    assert unit_of("kubepods/burstable/podu-1/c1") is None  # cgroupfs: no unit
    assert unit_of("kubepods/.slice") is None


def test_bus_labels_escape_as_systemd_does() -> None:
    assert bus_label("kubepods-besteffort-pod5b0e7c1a_1111.slice") == \
        "kubepods_2dbesteffort_2dpod5b0e7c1a_5f1111_2eslice"
    assert bus_label("1a.scope") == "_31a_2escope"  # a leading digit is escaped


def test_a_cap_is_the_quota_per_second_and_the_period() -> None:
    assert properties_of("cpu.max", "50000 100000", 252) == {QUOTA: 500000, PERIOD: 100000}
    assert properties_of("cpu.max", "12345 50000", 252) == {QUOTA: 246900, PERIOD: 50000}
    assert properties_of("cpu.max", "max 100000", 252) == {QUOTA: UNSET, PERIOD: 100000}
    with pytest.raises(ValueError, match="cpu.max"):
        properties_of("cpu.max", "50000", 252)
    with pytest.raises(ValueError, match="period 0"):
        properties_of("cpu.max", "50000 0", 252)


def test_the_idle_mark_is_cpuweight_idle_from_systemd_250_and_burst_has_no_property() -> None:
    assert properties_of("cpu.idle", "1", 252) == {WEIGHT: IDLE_WEIGHT}
    assert properties_of("cpu.idle", "1", 249) is None  # older: written directly
    assert properties_of("cpu.max.burst", "75000", 252) is None
    assert properties_of("cpu.weight", "50", 252) is None
    assert given_back("cpu.max", 252) == (QUOTA, PERIOD)
    assert given_back("cpu.idle", 252) == given_back("cpu.weight", 252) == (WEIGHT,)
    assert given_back("cpu.max.burst", 252) == ()


def test_a_memory_limit_is_memorymax_and_reads_back_rounded_to_a_page() -> None:
    assert properties_of("memory.max", "3221225472", 252) == {MEMORY_MAX: 3 * 1024**3}
    assert properties_of("memory.max", "max\n", 252) == {MEMORY_MAX: UNSET}
    assert given_back("memory.max", 252) == (MEMORY_MAX,)
    with pytest.raises(ValueError, match="memory.max"):
        properties_of("memory.max", "3G", 252)
    assert read_back_holds("memory.max", "999424\n", "1000000")  # 1000000 in whole pages
    assert not read_back_holds("memory.max", "max", "1000000")
    assert not read_back_holds("memory.max", "2000000", "1000000")
    assert read_back_holds("cpu.max", "50000 100000\n", "50000 100000")
    assert not read_back_holds("cpu.max", "max 100000", "50000 100000")


def test_systemd_writes_only_on_v2_with_the_systemd_driver_and_the_bus_answering() -> None:
    assert choose(2, "systemd", None).systemd
    assert "v1" in choose(1, "systemd", None).reason
    assert "cgroupfs" in choose(2, "cgroupfs", None).reason
    assert "no kubepods" in choose(2, None, None).reason
    off = choose(2, "systemd", "busctl is not installed")
    assert not off.systemd and "not reachable (busctl is not installed)" in off.reason


def test_busctl_replies_are_parsed_or_refused() -> None:
    assert parse_value("t 18446744073709551615\n") == UNSET
    assert parse_version('s "252.38-1~deb12u1"\n') == 252
    with pytest.raises(ValueError, match="busctl"):
        parse_value('s "idle"')
    with pytest.raises(ValueError, match="version"):
        parse_version("t 5")


def test_a_v1_or_cgroupfs_host_writes_directly_and_says_what_units_still_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert isinstance(choose_writes(1, "systemd", str(tmp_path)), DirectWrites)
    UnitsState(str(tmp_path)).put("a.scope", UnitRecord({QUOTA: UNSET}, {QUOTA: 500000}))
    assert isinstance(choose_writes(2, "cgroupfs", str(tmp_path)), DirectWrites)
    assert "systemd-units-left" in capsys.readouterr().out


# -- SystemdWrites with a unit manager that behaves as systemd does -----------------------------


class Units:
    """systemd's side: each unit's properties (unset: UINT64_MAX), written into its cgroup
    when set and at every ``reload``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.props: dict[str, dict[str, int]] = {}
        self.cgroups: dict[str, str] = {}
        self.calls = 0

    def add(self, cgroup: str, **props: int) -> None:
        unit = unit_of(cgroup)
        assert unit is not None
        self.cgroups[unit.name] = cgroup
        self.props[unit.name] = dict(props)

    def get(self, unit: Unit, name: str) -> int:
        if unit.name not in self.props:
            raise BusError(errno.ENOENT, f"Unit {unit.name} not loaded.")
        return self.props[unit.name].get(name, UNSET)

    def set(self, unit: Unit, properties: Mapping[str, int]) -> None:
        self.calls += 1
        self.props[unit.name].update(properties)
        self._realize(unit.name)

    def reload(self) -> None:
        for name in self.props:
            self._realize(name)

    def _realize(self, name: str) -> None:
        cg, props = self.root / self.cgroups[name], self.props[name]
        if (cg / "cpu.max").exists():
            quota, period = props.get(QUOTA, UNSET), props.get(PERIOD, UNSET)
            period = 100000 if period == UNSET else period
            text = "max" if quota == UNSET else str(quota * period // 1_000_000)
            (cg / "cpu.max").write_text(f"{text} {period}\n")
        if (cg / "cpu.idle").exists():
            weight = props.get(WEIGHT, UNSET)
            (cg / "cpu.idle").write_text("1\n" if weight == IDLE_WEIGHT else "0\n")
            if weight != IDLE_WEIGHT:
                (cg / "cpu.weight").write_text(f"{100 if weight == UNSET else weight}\n")
        if (cg / "memory.max").exists():  # the kernel keeps whole 4 KiB pages
            limit = props.get(MEMORY_MAX, UNSET)
            (cg / "memory.max").write_text("max\n" if limit == UNSET else f"{limit // 4096 * 4096}\n")


def _throttler(tmp_path: Path) -> tuple[CgroupThrottler, Units, str]:
    tree, container = _tree(tmp_path, 2)
    units = Units(tree.root)
    c1 = container.format("c1")
    units.add(c1)  # no CPUQuota: the file reads "max 100000"
    units.add(container.format("c2"), CPUQuotaPerSecUSec=3_000_000, CPUQuotaPeriodUSec=100000)
    writes = SystemdWrites(units, UnitsState(str(tmp_path / "state")), 252)  # type: ignore[arg-type]
    return CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")), writes=writes), units, container


def test_a_cap_set_as_the_units_property_survives_a_reload_and_its_release_gives_the_units_own_back(
    tmp_path: Path,
) -> None:
    throttler, units, container = _throttler(tmp_path)
    c1, c2 = container.format("c1"), container.format("c2")
    before = {name: dict(props) for name, props in units.props.items()}
    assert throttler.apply(POD, {"a": 0.2, "b": 0.5}, owner="throttle")
    assert units.props["cri-containerd-c1.scope"] == {QUOTA: 200000, PERIOD: 100000}
    # the units' own values were persisted before the first property was set
    saved = json.loads((tmp_path / "state" / "systemd-units.json").read_text())["units"]
    assert saved["cri-containerd-c1.scope"]["original"] == {QUOTA: UNSET, PERIOD: UNSET}
    assert saved["cri-containerd-c2.scope"]["original"] == {QUOTA: 3_000_000, PERIOD: 100000}
    units.reload()  # systemctl daemon-reload
    assert (Path(throttler.cpu_root) / c1 / "cpu.max").read_text().strip() == "20000 100000"
    assert throttler.hold() == []  # nothing lifted: nothing to count
    calls = units.calls
    assert throttler.apply(POD, {"a": 0.2, "b": 0.5}, owner="throttle")
    assert units.calls == calls  # a cap in force is not set again
    assert throttler.restore(POD)
    def own(props: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        return {n: {k: v for k, v in p.items() if v != UNSET} for n, p in props.items()}
    assert own(units.props) == own(before)  # the units' own values, exactly (unset: unset)
    assert (Path(throttler.cpu_root) / c1 / "cpu.max").read_text().strip() == "max 100000"
    assert (Path(throttler.cpu_root) / c2 / "cpu.max").read_text().strip() == "300000 100000"
    units.reload()  # nothing of the agent is left in systemd
    assert (Path(throttler.cpu_root) / c1 / "cpu.max").read_text().strip() == "max 100000"


def test_a_limit_set_on_the_unit_under_the_cap_is_the_units_own_value_given_back(tmp_path: Path) -> None:
    throttler, units, container = _throttler(tmp_path)
    c1 = container.format("c1")
    assert throttler.apply(POD, {"a": 0.2, "b": 0.5}, owner="throttle")
    unit = unit_of(c1)
    assert unit is not None
    units.set(unit, {QUOTA: 1_500_000})  # systemctl set-property CPUQuota=150%
    [found] = throttler.hold()
    assert found.new_original and found.rewritten
    assert units.props[unit.name][QUOTA] == 200000  # the cap is the property again
    assert throttler.restore(POD)
    assert units.props[unit.name][QUOTA] == 1_500_000
    assert (Path(throttler.cpu_root) / c1 / "cpu.max").read_text().strip() == "150000 100000"


class ResizedUnits(Units):
    """A resize racing the agent: right after the agent's first property set, runc (the
    kubelet's resize) sets the unit's ``CPUQuota`` for the new limit, as it does through
    systemd, so the agent's read-back finds the new limit in the file."""

    def __init__(self, root: Path, unit: str, quota: int) -> None:
        super().__init__(root)
        self.race: tuple[str, int] | None = (unit, quota)

    def set(self, unit: Unit, properties: Mapping[str, int]) -> None:
        super().set(unit, properties)
        if self.race is not None and self.race[0] == unit.name:
            name, quota = self.race
            self.race = None
            self.props[name][QUOTA] = quota
            self._realize(name)


def test_a_resize_overtaking_the_cap_leaves_the_cap_as_the_units_property_and_the_new_limit_its_own(
    tmp_path: Path,
) -> None:
    """Seen in a cold CI on the guest: runc's ``CPUQuota`` for a resize landed between the
    agent's property set and its read-back; the agent wrote the file directly and the unit
    kept runc's value, so a daemon-reload would have lifted the cap."""
    tree, container = _tree(tmp_path, 2)
    c1 = container.format("c1")
    unit = unit_of(c1)
    assert unit is not None
    units = ResizedUnits(tree.root, unit.name, 800_000)  # the resize: limit 800m
    units.add(c1, CPUQuotaPerSecUSec=1_000_000, CPUQuotaPeriodUSec=100000)
    units.add(container.format("c2"))
    writes = SystemdWrites(units, UnitsState(str(tmp_path / "state")), 252)  # type: ignore[arg-type]
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")), writes=writes)
    assert throttler.apply(POD, {"a": 0.16, "b": 0.5}, owner="throttle")
    assert units.props[unit.name][QUOTA] == 160_000  # the cap is the unit's property
    assert (Path(throttler.cpu_root) / c1 / "cpu.max").read_text().strip() == "16000 100000"
    saved = json.loads((tmp_path / "state" / "systemd-units.json").read_text())["units"]
    assert saved[unit.name]["original"][QUOTA] == 800_000  # runc's, the unit's own now
    units.reload()  # a daemon-reload keeps the cap
    assert (Path(throttler.cpu_root) / c1 / "cpu.max").read_text().strip() == "16000 100000"
    assert throttler.restore(POD)
    assert units.props[unit.name][QUOTA] == 800_000


def test_an_idle_mark_is_cpuweight_idle_and_its_release_the_units_weight(tmp_path: Path) -> None:
    slice_ = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podbe.slice"
    cg = tmp_path / "cg" / slice_
    cg.mkdir(parents=True)
    (cg / "cpu.idle").write_text("0\n")
    (cg / "cpu.weight").write_text("50\n")
    units = Units(tmp_path / "cg")
    units.add(slice_, CPUWeight=50)
    writes = SystemdWrites(units, UnitsState(str(tmp_path / "state")), 252)  # type: ignore[arg-type]
    writes.write(str(tmp_path / "cg"), slice_, "cpu.idle", "1")
    assert units.props["kubepods-besteffort-podbe.slice"][WEIGHT] == IDLE_WEIGHT
    units.reload()
    assert (cg / "cpu.idle").read_text().strip() == "1"
    writes.give_back(str(tmp_path / "cg"), slice_, "cpu.idle", "0")
    writes.give_back(str(tmp_path / "cg"), slice_, "cpu.weight", "50")
    assert units.props["kubepods-besteffort-podbe.slice"][WEIGHT] == 50
    assert ((cg / "cpu.idle").read_text().strip(), (cg / "cpu.weight").read_text().strip()) == ("0", "50")
    assert UnitsState(str(tmp_path / "state")).units() == {}  # nothing left to give back


def test_burst_and_a_failing_bus_write_the_file_directly(tmp_path: Path) -> None:
    cg = tmp_path / "cg" / "x.slice" / "c.scope"
    cg.mkdir(parents=True)
    (cg / "cpu.max.burst").write_text("0\n")
    (cg / "cpu.max").write_text("max 100000\n")
    units = Units(tmp_path / "cg")  # the unit is not loaded: the bus says so
    writes = SystemdWrites(units, UnitsState(str(tmp_path / "state")), 252)  # type: ignore[arg-type]
    writes.write(str(tmp_path / "cg"), "x.slice/c.scope", "cpu.max.burst", "75000")
    writes.write(str(tmp_path / "cg"), "x.slice/c.scope", "cpu.max", "50000 100000")
    assert (cg / "cpu.max.burst").read_text() == "75000"
    assert (cg / "cpu.max").read_text() == "50000 100000"
    assert units.calls == 0


def test_a_batch_pods_limits_are_its_units_properties_kept_by_a_reload_and_given_back_exactly(
    tmp_path: Path,
) -> None:
    """The batch limiter on a systemd-driver tree: the BestEffort pod's slice and its
    container's scope get ``CPUQuota`` and ``MemoryMax`` from its batch resources, the
    units' own values (unset) recorded first; a reload writes the limits back, not ``max``;
    the release gives the units their own values and the files theirs."""
    pod_rel = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podb1.slice"
    scope = f"{pod_rel}/cri-containerd-c-main.scope"
    tree = FakeTree(tmp_path / "cg", 2)
    units = Units(tree.root)
    for rel in ("kubepods.slice", "kubepods.slice/kubepods-besteffort.slice", pod_rel, scope):
        tree.add(rel)
        (tree.root / rel / "memory.max").write_text("max\n")
    units.add(pod_rel)
    units.add(scope)
    state = tmp_path / "state"
    writes = SystemdWrites(units, UnitsState(str(state)), 252)  # type: ignore[arg-type]
    found: list[Reverted] = []
    limiter = CgroupBatchLimiter(tree.mounts, BatchLimitsState(str(state)), writes=writes)
    limiter.on_reverted = found.append
    side = {BATCH_CPU: "500", BATCH_MEMORY: "1000000"}  # not a whole number of pages
    batch = parse_pod(pod("batch", uid="b1", qos="BestEffort", containers=[
        {"name": "main", "resources": {"requests": side, "limits": side}}],
        container_ids={"main": "containerd://c-main"}))  # fmt: skip
    limits = batch_limits(batch)
    assert limits is not None and limiter.set_limits(batch, limits)
    assert units.props["kubepods-besteffort-podb1.slice"] == {QUOTA: 500000, PERIOD: 100000, MEMORY_MAX: 1000000}
    assert units.props["cri-containerd-c-main.scope"][MEMORY_MAX] == 1000000
    saved = json.loads((state / "systemd-units.json").read_text())["units"]
    assert saved["cri-containerd-c-main.scope"]["original"] == {QUOTA: UNSET, PERIOD: UNSET, MEMORY_MAX: UNSET}
    units.reload()  # systemctl daemon-reload: the units' properties are the limits
    for rel in (pod_rel, scope):
        assert (tree.root / rel / "cpu.max").read_text().strip() == "50000 100000"
        assert (tree.root / rel / "memory.max").read_text().strip() == "999424"
    assert limiter.hold() == [] and found == []  # nothing lifted, nothing counted
    calls = units.calls
    assert limiter.set_limits(batch, limits) and units.calls == calls  # in force: not set again
    assert limiter.release_all() == ["b1"]
    assert all(v == UNSET for props in units.props.values() for v in props.values())
    units.reload()  # nothing of the agent is left in systemd
    for rel in (pod_rel, scope):
        assert (tree.root / rel / "cpu.max").read_text().strip() == "max 100000"
        assert (tree.root / rel / "memory.max").read_text().strip() == "max"
    assert UnitsState(str(state)).units() == {}


def test_the_records_of_units_whose_pod_went_while_capped_are_swept(tmp_path: Path) -> None:
    """A pod deleted while capped: its release finds no cgroup and writes nothing, so its
    units' records would stay in systemd-units.json for ever (a churn run found them). A
    write at least SWEEP_SECONDS after the last sweep drops them; records of units still
    there, and those from before the cgroup was kept, stay."""
    throttler, units, container = _throttler(tmp_path)
    writes = throttler.writes
    assert isinstance(writes, SystemdWrites)
    assert throttler.apply(POD, {"a": 0.2, "b": 0.5}, owner="throttle")
    state = UnitsState(str(tmp_path / "state"))
    assert {n: r.cgroup for n, r in state.units().items()} == {
        "cri-containerd-c1.scope": container.format("c1"), "cri-containerd-c2.scope": container.format("c2")}
    legacy = json.loads((tmp_path / "state" / "systemd-units.json").read_text())
    legacy["units"]["old.scope"] = {"original": {QUOTA: UNSET}, "ours": {QUOTA: 1}}  # no "cgroup"
    (tmp_path / "state" / "systemd-units.json").write_text(json.dumps(legacy))
    writes.state = UnitsState(str(tmp_path / "state"))
    c2 = Path(throttler.cpu_root) / container.format("c2")
    for name in list(c2.iterdir()):
        name.unlink()
    c2.rmdir()  # the container went with its pod
    writes._swept_at = None  # a minute later
    assert throttler.apply(POD, {"a": 0.3}, owner="throttle")
    left = UnitsState(str(tmp_path / "state")).units()
    assert sorted(left) == ["cri-containerd-c1.scope", "old.scope"]
