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
