"""`python -m bench cluster`: the verdict is taken on CPU time, so a busy machine (wall time
inflated on either side of the ratio) does not change it; wall time is still printed."""

from bench.cluster import Clock, engine_line


def test_the_verdict_is_on_cpu_time_and_both_figures_are_printed() -> None:
    load = Clock(wall=20.0, cpu=8.0)  # the load ran on a busy machine: wall far above CPU
    times = [Clock(wall=3.0, cpu=3.6), Clock(wall=3.2, cpu=3.8), Clock(wall=2.9, cpu=3.7)]
    line = engine_line("queues", times, load, "1 queues")
    # by wall time 0.15x (it would meet); by CPU time 0.46x, also within 0.5x
    assert "(goal <= 0.5x: meets, 3 runs)" in line
    assert "cpu   3.70 s [3.60-3.80]  0.46x load [0.45-0.47]" in line
    assert "wall   3.00 s [2.90-3.20]  0.15x load [0.14-0.16]" in line
    # an engine slow in CPU fails even when a loaded load made its wall ratio look small
    slow = [Clock(wall=3.0, cpu=4.4), Clock(wall=3.0, cpu=4.5)]
    assert "fails" in engine_line("queues", slow, load, "")
    # and one quick in CPU meets even when its own runs were slowed in wall time
    slowed = [Clock(wall=30.0, cpu=3.0), Clock(wall=31.0, cpu=3.1)]
    assert "meets" in engine_line("queues", slowed, load, "")
    mixed = [Clock(wall=1.0, cpu=3.0), Clock(wall=1.0, cpu=4.5)]
    assert "undecided" in engine_line("queues", mixed, load, "")


def test_clock_spans_add_up() -> None:
    assert Clock(1.0, 0.5) + Clock(2.0, 0.25) == Clock(3.0, 0.75)
