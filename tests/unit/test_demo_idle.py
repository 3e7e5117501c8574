"""The demo's third phase judges each part by its own requests: the backlog one part
leaves (requests answered late while web's queue empties) is not counted in the next."""

from __future__ import annotations

from devtools.demo.idle import Part, drained_at, part_lines


def served(arrivals: list[float], work: list[float]) -> list[tuple[float, float]]:
    """(arrival, response) of one server answering in arrival order."""
    free, out = 0.0, []
    for arrival, cost in zip(arrivals, work, strict=True):
        free = max(free, arrival) + cost
        out.append((arrival, free - arrival))
    return out


def _p99(line: str) -> float:
    return float(line.split("p99")[1].split()[0])


def test_a_part_counts_its_requests_only_once_the_backlog_of_the_part_before_drained() -> None:
    arrivals = [i / 100 for i in range(3000)]  # 100 a second for 30 s
    # the last second of "batch, no class" each request waits for a batch slice: 20 ms of
    # work arriving every 10 ms, a backlog of about a second when the batch pods go idle
    work = [0.020 if 19.0 <= a < 20.0 else 0.001 for a in arrivals]
    records = served(arrivals, work)
    no_class = Part("batch, no class", start=10.0, end=20.0)
    idle = Part("batch idle", start=20.2, end=30.0)
    released = Part("released", start=30.0, end=31.0)
    drained = drained_at(records, idle.start, idle.end)
    assert drained is not None and 21.0 < drained < 21.3  # about 1.1 s after the change
    lines = part_lines([no_class, idle, released], records)
    assert len(lines) == 2  # the release is no part to judge
    assert lines[0].startswith("  batch, no class") and _p99(lines[0]) > 500  # its own backlog
    assert lines[1].startswith("  batch idle") and _p99(lines[1]) == 1.0  # none of it
    # the requests from the drain on, not from the end of the first tick
    assert f"({sum(1 for a in arrivals if drained <= a < 30.0)} requests)" in lines[1]


def test_a_part_whose_queue_never_drained_gives_no_figure_of_its_own() -> None:
    arrivals = [i / 100 for i in range(500)]
    records = served(arrivals, [0.020] * len(arrivals))  # always behind
    part = Part("batch, no class", start=1.0, end=5.0)
    assert drained_at(records, part.start, part.end) is None
    line = part_lines([part, Part("released")], records)[0]
    assert "(0 requests)" in line and "never drained" in line
    # the first request of all found the server idle: nothing queued before it
    assert drained_at(records, 0.0, 1.0) == 0.0
