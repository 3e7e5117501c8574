"""The processes of ``python -m bench colocation --real``: the web server and the batch
worker that run in the real pods, and the load generator that runs on the host, outside
the measured CPU, and reaches the web pod over its pod IP.

The pods run the project's image (its Python, nothing pulled) with this file and
``devtools/demo/load.py`` mounted from a ConfigMap (``python3 /bench/colocation_pod.py
ROLE ...``): so both use the standard library only, and the work a request does and a
batch worker's duty cycle are the hand-made mode's own (``load.spin``, ``load.work``).

* ``web CPU PORT WORK_MS ITERATIONS``: the latency-critical server. Pinned to ``CPU``; one
  client at a time (the generator) over TCP. On connect it sends its ``ITERATIONS`` (8
  bytes; 0 given: calibrated here, ``WORK_MS`` of CPU on an idle CPU, as the hand-made mode
  does), then serves 8-byte requests one at a time in arrival order: each is
  ``spin(ITERATIONS)``, then the 8 bytes go back. What it does between requests is wait.
* ``batch CPU PORT``: one busy worker of a batch pod, pinned to ``CPU``, idle until told.
  A client sends one line ``START STEPS`` (``START`` on the monotonic clock, which the
  host and its containers share; ``STEPS`` as ``load.parse_steps`` reads them); the worker
  follows them (``load.work``) and answers the spin rounds it completed, then waits for
  the next client.
* ``client HOST PORT RATE SEED PATH CPUS``: the open-loop generator, on the host, pinned to
  ``CPUS`` (comma-separated): requests at Poisson arrivals (seeded), each sent at its
  arrival time whatever the server is doing; the response time of each is its answer's
  arrival minus its scheduled arrival (queueing and the network included). Records
  ``(arrival, response)`` float64 pairs to ``PATH`` as ``load.serve`` does (read them with
  ``load.read_records``), flushed every half second, until SIGTERM.
"""

from __future__ import annotations

import array
import contextlib
import os
import random
import selectors
import signal
import socket
import struct
import sys
import time
from collections import deque

try:
    from devtools.demo import load
except ImportError:  # in the pod: load.py beside this file (the ConfigMap)
    import load  # type: ignore[import-not-found,no-redef]

WORD = struct.Struct("<q")


def serve(port: int, iterations: int, work_ms: float) -> None:
    if iterations <= 0:
        iterations = load.calibrate(work_ms / 1000.0)
    server = socket.create_server(("", port), backlog=8)
    while True:
        conn, _ = server.accept()
        with contextlib.suppress(OSError), conn:  # a client gone (a probe, a stopped generator)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(WORD.pack(iterations))
            pending = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                pending += data
                whole = len(pending) // WORD.size * WORD.size
                for i in range(0, whole, WORD.size):
                    load.spin(iterations)
                    conn.sendall(pending[i : i + WORD.size])
                pending = pending[whole:]


def batch(port: int) -> None:
    server = socket.create_server(("", port), backlog=4)
    while True:
        conn, _ = server.accept()
        with contextlib.suppress(OSError), conn, conn.makefile("rwb") as f:
            line = f.readline().decode("ascii").split()
            if len(line) != 2:
                continue
            done = load.work(float(line[0]), load.parse_steps(line[1]))
            f.write(f"{done}\n".encode("ascii"))
            f.flush()


def hello(host: str, port: int, timeout: float = 5.0) -> int:
    """The iterations a web server does a request (what it sends on connect)."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        data = b""
        while len(data) < WORD.size:
            chunk = conn.recv(WORD.size - len(data))
            if not chunk:
                raise ConnectionError(f"{host}:{port} closed before its hello")
            data += chunk
    return int(WORD.unpack(data)[0])


def generate(host: str, port: int, rate: float, seed: int, path: str) -> None:
    """The open-loop generator (see the module's docstring): one thread, the next
    arrival's send and the answers' reads multiplexed on one socket."""
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    conn = socket.create_connection((host, port), timeout=10)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = b""
    while len(got) < WORD.size:  # the server's hello: it is serving
        got += conn.recv(WORD.size - len(got))
    conn.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(conn, selectors.EVENT_READ)
    rng = random.Random(seed)
    sent: deque[float] = deque()  # arrivals of the requests in flight, in order
    records = array.array("d")
    arrival = time.monotonic() + 0.05
    flushed = time.monotonic()
    pending = b""
    outgoing = bytearray()  # requests the socket's buffer did not take yet (a stalled server)
    seq = 0
    with open(path, "ab") as out:
        while not stop:
            now = time.monotonic()
            if now >= arrival:
                outgoing += WORD.pack(seq)
                sent.append(arrival)
                seq += 1
                arrival += rng.expovariate(rate)
            if outgoing:
                with contextlib.suppress(BlockingIOError):
                    del outgoing[: conn.send(outgoing)]
            if now >= arrival:
                continue
            wait = arrival - now if not outgoing else min(arrival - now, 0.002)
            for _key, _ev in sel.select(timeout=wait):
                data = conn.recv(65536)
                if not data:
                    raise ConnectionError(f"{host}:{port} closed the connection")
                done = time.monotonic()
                pending += data
                for _ in range(len(pending) // WORD.size):
                    first = sent.popleft()
                    records.extend((first, done - first))
                pending = pending[len(pending) // WORD.size * WORD.size :]
            if now - flushed > 0.5:
                records.tofile(out)
                out.flush()
                records = array.array("d")
                flushed = now
        records.tofile(out)
    conn.close()


def main(argv: list[str]) -> None:
    role = argv[0]
    if role == "client":
        os.sched_setaffinity(0, {int(c) for c in argv[6].split(",")})
        generate(argv[1], int(argv[2]), float(argv[3]), int(argv[4]), argv[5])
        return
    os.sched_setaffinity(0, {int(argv[1])})
    if role == "web":
        serve(int(argv[2]), int(argv[4]), float(argv[3]))
    elif role == "batch":
        batch(int(argv[2]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
