"""The load of the co-location benchmark and of the demo's third phase: processes that run
inside the pods' cgroups (``python -m devtools.demo.load ROLE ...``, from the checkout).

* ``lc``: the latency-critical server. An open-loop generator: requests arrive as a Poisson
  process at a fixed rate (a seeded RNG, so every run sees the same arrivals), each is a
  fixed amount of CPU work (a loop of ``iterations``), served one at a time in arrival
  order; the response time of each, queueing included, is ``done - arrival``. A late
  server does not slow the arrivals (open loop: that is what makes queueing show).
  Records ``(arrival, response)`` as float64 pairs on the monotonic clock, flushed to a
  file every half second, until SIGTERM.
* ``worker``: one busy worker of a best-effort pod. Its demand (cores) follows a
  timeline of steps from a start time: in each 10 ms window it burns ``demand x 10 ms``
  of its own CPU time, then sleeps to the window's end; a window it could not finish in
  time is not made up later (a batch job does not owe CPU). Given a file, it writes there
  the spin rounds it completed when it exits: the batch work done, not only the CPU used.

Both pin themselves to the CPU given (sched affinity) before they start, so the
contention is real on a 2-core machine shared with other work.
"""

from __future__ import annotations

import array
import os
import random
import signal
import sys
import time

WINDOW = 0.010


def load_argv(*args: object) -> list[str]:
    """The command that runs a role of this module (the checkout's root as the cwd)."""
    return [sys.executable, "-m", "devtools.demo.load", *map(str, args)]


def spin(iterations: int) -> None:
    for _ in range(iterations):
        pass


def calibrate(target_seconds: float, tries: int = 30) -> int:
    """Iterations of :func:`spin` that take ``target_seconds`` of CPU here (the fastest of
    ``tries`` runs: other work can only make a run slower)."""
    probe = 20_000
    best = float("inf")
    for _ in range(tries):
        t0 = time.thread_time()
        spin(probe)
        best = min(best, time.thread_time() - t0)
    return max(1, round(probe * target_seconds / max(best, 1e-9)))


def serve(rate: float, iterations: int, seed: int, path: str) -> None:
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    rng = random.Random(seed)
    records = array.array("d")
    arrival = time.monotonic() + 0.05
    flushed = time.monotonic()
    with open(path, "ab") as out:
        while not stop:
            now = time.monotonic()
            if arrival > now:
                time.sleep(arrival - now)
            spin(iterations)
            done = time.monotonic()
            records.extend((arrival, done - arrival))
            arrival += rng.expovariate(rate)
            if done - flushed > 0.5:
                records.tofile(out)
                out.flush()
                records = array.array("d")
                flushed = done
        records.tofile(out)


def read_records(path: str) -> list[tuple[float, float]]:
    data = array.array("d")
    with open(path, "rb") as f:
        data.frombytes(f.read())
    return [(data[i], data[i + 1]) for i in range(0, len(data) - 1, 2)]


def work(start: float, steps: list[tuple[float, float]]) -> int:
    """Follow ``steps`` = [(seconds after start, demand cores)]; return after the last, with
    the spin rounds done (of 2,000 iterations each)."""
    done = 0
    end = start + steps[-1][0]
    window = max(time.monotonic(), start)
    while window < end:
        elapsed = window - start
        demand = next((d for t, d in reversed(steps) if t <= elapsed), 0.0)
        if demand > 0:
            t0 = time.thread_time()
            burn = demand * WINDOW
            while time.thread_time() - t0 < burn:
                spin(2_000)
                done += 1
        window += WINDOW
        now = time.monotonic()
        if window > now:
            time.sleep(window - now)
        else:
            window = now  # behind: the missed windows are not made up
    return done


def parse_steps(text: str) -> list[tuple[float, float]]:
    """``t:demand,t:demand,...`` (seconds, cores)."""
    steps = []
    for part in text.split(","):
        t, _, d = part.partition(":")
        steps.append((float(t), float(d)))
    return steps


def main(argv: list[str]) -> None:
    cpu = int(argv[1])
    os.sched_setaffinity(0, {cpu})
    if argv[0] == "lc":
        serve(float(argv[2]), int(argv[3]), int(argv[4]), argv[5])
    elif argv[0] == "worker":
        done = work(float(argv[2]), parse_steps(argv[3]))
        if len(argv) > 4:
            with open(argv[4], "w", encoding="ascii") as f:
                f.write(str(done))
    elif argv[0] == "calibrate":
        print(calibrate(float(argv[2])))
    else:
        raise SystemExit(f"unknown role {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
