"""The soak's RSS slope (least squares with its 95% interval) and how it finds and reads the
DaemonSet's agent on the real node (bench/soak.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.soak import agent_pid, count_events, slope


def test_a_straight_line_has_its_slope_and_no_width() -> None:
    xs = [0.0, 0.25, 0.5, 0.75, 1.0]
    b, half = slope(xs, [50 + 2 * x for x in xs])
    assert math.isclose(b, 2.0) and half < 1e-9


def test_flat_noise_has_an_interval_holding_zero() -> None:
    xs = [i / 60 for i in range(60)]
    ys = [50 + (0.3 if i % 2 else -0.3) for i in range(60)]
    b, half = slope(xs, ys)
    assert b - half <= 0 <= b + half


def test_growth_beyond_the_noise_is_an_interval_above_zero() -> None:
    xs = [i / 60 for i in range(60)]
    ys = [50 + 5 * x + (0.3 if i % 2 else -0.3) for i, x in enumerate(xs)]
    b, half = slope(xs, ys)
    assert b - half > 0


def test_too_few_samples_give_no_slope() -> None:
    assert all(math.isnan(v) for v in slope([0.0, 1.0], [1.0, 2.0]))


def test_the_agent_process_is_the_oldest_agent_in_its_container(tmp_path: Path) -> None:
    cid = "0123abcd" * 8
    for pid, cgroup, argv in [
        (40, f"4:cpu:/kubepods/pod1/{cid}\n", b"/pause\0"),  # not the agent
        (41, f"4:cpu:/kubepods/pod1/{cid}\n", b"/usr/local/bin/python\0/usr/local/bin/waterline\0agent\0"),
        (57, f"4:cpu:/kubepods/pod1/{cid}\n", b"python\0-m\0agent\0agent\0"),  # a child of it
        (30, "4:cpu:/kubepods/pod2/other\n", b"waterline\0agent\0"),  # another container's
    ]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(cgroup)
        (tmp_path / str(pid) / "cmdline").write_bytes(argv)
    (tmp_path / "self").mkdir()
    assert agent_pid(cid, tmp_path) == 41


def test_no_agent_process_is_said(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no agent process"):
        agent_pid("feed", tmp_path)


def test_watch_events_are_counted_in_either_json_spacing() -> None:
    lines = ['{"event": "watch failed", "kind": "pods"}', '{"event":"watch failed: gone"}',
             '{"event": "watch recovered"}', '{"event": "tick"}']  # fmt: skip
    assert (count_events(lines, "watch failed"), count_events(lines, "watch recovered")) == (2, 1)
