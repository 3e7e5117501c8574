"""Waterline on a real cgroup v2 host with systemd as PID 1 (a Debian 12 guest under qemu,
docs/vm.md): the systemd driver's layout made by systemd, the v2 collectors on the real
files, throttling through cpu.max, and caps that survive ``systemctl daemon-reload``.

The checks run in the guest (guest_checks.py, one boot for all); each test here asserts
on one check's verdict and figures. CPU figures are the guest kernel's (cpu.stat).
"""

from __future__ import annotations

import pytest

from tests.need import need
from tests.vm.conftest import GuestRun

pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.integration]
UNLIMITED = "max 100000"


def test_the_guest_is_cgroup_v2_with_systemd_as_pid_1(guest: GuestRun) -> None:
    f = guest.result("guest")
    assert f["pid1"] == "systemd" and f["cgroup_fs"] == "cgroup2fs"
    assert {"cpu", "memory", "io", "pids"} <= set(f["controllers"])
    assert f["waterline"].startswith("waterline")


def test_the_systemd_drivers_layout_is_found_where_systemd_put_it(guest: GuestRun) -> None:
    f = guest.result("systemd_layout")
    assert (f["mode"], f["driver"]) == ("v2", "systemd")
    for name in ("batch", "web"):
        assert "/" + f["found"][name]["main"] == f["systemd_says"][name]
    assert "cpu" in f["subtree_control"]["kubepods.slice"].split()


def test_v2_collectors_read_usage_throttling_working_set_and_pod_psi(guest: GuestRun) -> None:
    f = guest.result("v2_collectors")
    for name, pod in f["pods"].items():
        assert pod["cpu_cores"] == pytest.approx(pod["kernel_cores"], rel=0.1, abs=0.05), name
        assert 0 < pod["working_set_bytes"] <= pod["memory_current"], name
        assert pod["nr_periods"] is not None and pod["cpu_pressure_avg10"] is not None, name
    assert f["pods"]["web"]["cpu_pressure_avg10"] > 5


def test_lc_cpu_pressure_throttles_through_cpu_max_and_restores_exactly(guest: GuestRun) -> None:
    f = guest.result("lc_pressure_throttles_and_restores_exactly")
    assert f["throttles"] and {m for m, _v, _c in f["throttles"]} == {"lc_cpu_pressure"}
    assert f["quota_seen"][-1] == "20000 100000"
    assert f["batch_cores_at_floor"] <= 0.2 * 1.1 + 0.01
    assert f["original"] == f["restored"] == UNLIMITED


def test_daemon_reload_lifts_a_quota_written_straight_into_cpu_max(guest: GuestRun) -> None:
    f = guest.result("daemon_reload_lifts_a_cap_written_by_hand")
    assert f["written"] == "50000 100000" and f["after_reload"] == UNLIMITED
    assert f["cores_after_reload"] > f["cores_capped"]


def test_caps_survive_daemon_reload_and_set_property(guest: GuestRun) -> None:
    f = guest.result("caps_hold_across_daemon_reloads")
    lifted = [x for x in f["lifts"] if x["found"] != "50000 100000"]
    assert len(lifted) >= 2 and f["reverted_total"] >= len(lifted)
    # each lift lasts until the agent's next tick (the written-back cap), and the kernel's
    # figure over the two reloads is the cap plus what those lifts let batch's 2 loops take
    # (a fixed 1.15x failed a loaded suite run: lifts of 0.80 and 0.91 s in 7.9 s, 0.59 core)
    assert all(x["for_s"] <= 1.0 + f["longest_tick_s"] + 0.5 for x in lifted)
    # a lift shorter than the watcher's poll is counted by the agent but not seen: each such
    # revert lifted the cap for at most one tick
    unseen_s = max(0.0, f["reverted_total"] - len(f["lifts"])) * (1.0 + f["longest_tick_s"])
    reload_lifts_s = sum(x["for_s"] for x in lifted[:2]) + unseen_s
    assert f["cores_across_reloads"] <= 0.5 * 1.15 + reload_lifts_s / f["window_s"] * (2 - 0.5)
    assert f["lift_log_lines"] == 1
    assert f["released"] == "150000 100000"


def test_a_cap_held_as_the_units_own_property_survives_daemon_reload(guest: GuestRun) -> None:
    f = guest.result("systemd_property_holds_across_reload")
    assert f["after_reload"] == "20000 100000"


def test_idle_mark_and_burst_are_held_across_daemon_reload_and_released_exactly(guest: GuestRun) -> None:
    """Issue 24 on systemd's units: cpu.idle on batch's pod slice, cpu.max.burst on web's
    scope (50% of its 1.5-core quota); what a daemon-reload reverts is written back by the
    next tick and counted; the release puts the slice's own weight back, not the kernel's
    default."""
    f = guest.result("idle_and_burst_held_across_daemon_reload")
    if f.get("kernel_files") is False:
        need("a guest kernel with cpu.idle and cpu.max.burst (5.15 or later)")
    assert f["set"] == {"idle": "1", "weight_while_idle": f["set"]["weight_while_idle"], "burst": "75000"}
    # each reload lifts the mark; on a loaded host the second reload can come while the
    # first lift is still open (one lift of 1.02 s seen in a suite run), so the watcher must
    # see one and the agent's count cover what it saw
    assert len(f["idle_lifts"]) >= 1 and f["reverted"]["cpu_idle"] >= len(f["idle_lifts"])
    assert all(lift["for_s"] <= 1.0 + f["longest_tick_s"] + 0.5 for lift in f["idle_lifts"])
    burst_lifted = sum(1 for r in f["after_reloads"] if r["burst"] != "75000")
    assert (f["reverted"]["cpu_burst"] or 0) >= burst_lifted and f["revert_log_lines"] == 1
    assert f["released"] == {"idle": "0", "weight": f["original"]["weight"], "burst": f["original"]["burst"]}
    assert f["isolated_pods"] == {"idle": 1.0, "burst": 1.0}


def test_systemd_keeps_caps_and_marks_through_a_reload_storm(guest: GuestRun) -> None:
    """Issue 30: the cap and the idle mark set as the units' runtime properties; under load
    a storm of daemon-reloads and set-property calls lifts none of them (0 ms in a 20 ms
    watcher), no revert is counted, and the release gives every file and property back."""
    f = guest.result("systemd_keeps_caps_and_marks_through_a_reload_storm")
    assert f["through_systemd"] == 1.0 and f["reloads"] >= 10
    assert f["lifts"] == {"cap": [], "idle": [], "burst": []}
    assert f["reverted"] == {"cpu_quota": 0.0, "cpu_idle": 0.0, "cpu_burst": 0.0}
    assert f["cores_across_storm"] <= 0.5 * 1.1
    assert f["released"] == f["original"] == f["after_release_reload"]
    assert f["released_props"] == f["original_props"]
