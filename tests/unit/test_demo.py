"""The demo's fallback replay (hosts without writable cgroups) and its waterline choice."""

from __future__ import annotations

import pytest

from devtools.demo.live import waterline_for
from devtools.demo.replay import replay


def test_replay_tells_why_and_shows_throttle_then_exact_restore(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert replay("not running as root") == 0
    out = capsys.readouterr().out
    assert "not running as root" in out and "Replaying the embedded scenario" in out
    assert "throttle demo/batch-a" in out and "throttle demo/batch-b" in out
    assert "restore  demo/batch-a  cap original quota" in out
    assert "restore  demo/batch-b  cap original quota" in out
    assert "demo/web" not in out  # Guaranteed: out of the action's scope
    assert out.rstrip().endswith("still throttled at the end: none")


@pytest.mark.parametrize(
    ("web", "batch", "line"),
    [(0.5, 1.5, 1.4), (0.33, 0.34, 0.55), (0.0, 0.1, 0.3)],
)
def test_the_waterline_leaves_the_batch_pods_sixty_percent(
    web: float, batch: float, line: float
) -> None:
    assert waterline_for(web, batch) == pytest.approx(line)


def test_every_demo_option_says_what_it_is() -> None:
    import argparse

    from devtools.demo.command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert options and all(a.help for a in options), [a.dest for a in options if not a.help]


def test_a_leftover_belongs_to_a_demo_that_no_longer_runs(tmp_path) -> None:
    import os
    import subprocess

    from devtools.demo.leftovers import demo_running, remove_leftovers

    other = subprocess.Popen(["sleep", "30"])  # alive, but not a demo
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        assert demo_running(os.getpid())
        assert not demo_running(other.pid)
        assert not demo_running(gone.pid)
        for pid in (os.getpid(), gone.pid):
            (tmp_path / f"waterline-demo-{pid}-abc").mkdir()
        (tmp_path / "unrelated").mkdir()
        removed = remove_leftovers([], str(tmp_path))  # no cgroup roots: scratch folders only
        assert removed.workdirs == [f"waterline-demo-{gone.pid}-abc"]
        assert {p.name for p in tmp_path.iterdir()} == {f"waterline-demo-{os.getpid()}-abc", "unrelated"}
    finally:
        other.kill()
        other.wait()


def test_the_agents_log_lines_are_shown_under_the_tick_not_inside_its_view() -> None:
    import structlog

    from agent.logs import configure_logging
    from devtools.demo.live import HeldLog

    held = HeldLog()
    configure_logging("console", "warning", stream=held)
    try:
        structlog.get_logger().warning("cgroup file missing", path="/x/cpu.stat")
        structlog.get_logger().info("not shown at level warning")
        assert held.drain() == [
            "  log  [warning  ] cgroup file missing            path=/x/cpu.stat"
        ]
        assert held.drain() == []  # each line once
    finally:
        structlog.reset_defaults()  # configure_logging set it for the whole process
