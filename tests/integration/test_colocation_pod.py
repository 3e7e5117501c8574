"""The processes of the co-location benchmark's real pods (``bench.colocation_pod``): the
web server answers the host's open-loop generator in arrival order and survives clients
that go at once; a batch worker follows the steps it is told and answers the work it did.
Over loopback, exactly as over a pod IP. No timing is asserted beyond "it answered"."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.colocation_pod import hello
from devtools.demo.load import read_records

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _start(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "bench.colocation_pod", *argv], cwd=ROOT)  # noqa: S603


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_the_web_server_answers_the_open_loop_generator_in_order(tmp_path: Path) -> None:
    cpu = str(min(os.sched_getaffinity(0)))
    port = _port()
    server = _start("web", cpu, str(port), "1.0", "2000")
    try:
        _wait_listening(port)
        for _ in range(3):  # clients that go at once (the run's readiness probe) do not stop it
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert hello("127.0.0.1", port) == 2000
        path = tmp_path / "records"
        client = _start("client", "127.0.0.1", str(port), "200", "7", str(path), cpu)
        time.sleep(1.5)
        client.terminate()
        assert client.wait(timeout=10) in (0, -15)
    finally:
        server.kill()
        server.wait()
    records = read_records(str(path))
    assert len(records) > 50  # about 300 at 200 a second
    arrivals = [a for a, _ in records]
    assert arrivals == sorted(arrivals) and all(r > 0 for _, r in records)
    # served in order: each answer comes after the previous one's
    done = [a + r for a, r in records]
    assert all(b >= a - 1e-6 for a, b in zip(done, done[1:], strict=False))


def test_a_batch_worker_follows_its_steps_and_answers_the_work_it_did() -> None:
    cpu = str(min(os.sched_getaffinity(0)))
    port = _port()
    worker = _start("batch", cpu, str(port))
    try:
        _wait_listening(port)
        counts = []
        for demand in (0.5, 0.0):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn, conn.makefile("rwb") as f:
                f.write(f"{time.monotonic() + 0.05:.6f} 0:{demand:g},0.3:0\n".encode())
                f.flush()
                counts.append(int(f.readline()))
    finally:
        worker.kill()
        worker.wait()
    assert counts[0] > 0 and counts[1] == 0
