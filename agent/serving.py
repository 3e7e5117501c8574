"""The HTTP endpoint both programs serve: ``/metrics``, ``/healthz`` and ``/readyz`` on
one port (the node agent's metrics are ``agent.metrics``, the controller's its own).

``/healthz``: the loop is alive (it finished an iteration recently); ``/readyz``: an
iteration succeeded recently and the object source is in sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST

from agent.defaults import HEALTH_PATH, METRICS_PORT, READY_PATH


class Rendered(Protocol):
    """Metrics that render themselves in Prometheus' text format."""

    def render(self) -> bytes: ...


class Health:
    """Liveness and readiness, from the loop's heartbeats.

    Alive while the loop finishes iterations (a stuck loop gets the pod restarted); before
    the first iteration the start-up time counts as a beat. Ready once a tick has
    succeeded within ``stale_after`` seconds and ``source_ready`` (the API caches are in
    sync) says so.
    """

    def __init__(
        self,
        stale_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        source_ready: Callable[[], bool] | None = None,
    ) -> None:
        self.stale_after = stale_after
        self._clock = clock
        self._source_ready = source_ready
        self._last_beat = clock()
        self._last_success: float | None = None

    def beat(self, ok: bool) -> None:
        now = self._clock()
        self._last_beat = now
        if ok:
            self._last_success = now

    def live(self) -> tuple[bool, str]:
        age = self._clock() - self._last_beat
        if age > self.stale_after:
            return False, f"no loop iteration for {age:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if self._source_ready is not None and not self._source_ready():
            return False, "objects not in sync yet"
        if self._last_success is None:
            return False, "no successful tick yet"
        age = self._clock() - self._last_success
        if age > self.stale_after:
            return False, f"no successful tick for {age:.0f}s"
        return True, "ok"


def parse_addr(addr: str) -> tuple[str, int]:
    """``:9108`` / ``0.0.0.0:9108`` / ``[::]:9108`` / ``9108`` -> (host, port); host ``""`` = all."""
    text = addr.strip()
    if not text:
        raise ValueError("empty metrics address")
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"metrics address needs a port 0..65535, got {addr!r}")
    return host, int(port)


DEFAULT_ADDR = f":{METRICS_PORT}"


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on one port, served from a daemon thread."""

    def __init__(self, addr: str, metrics: Rendered, health: Health) -> None:
        host, port = parse_addr(addr)
        self.metrics = metrics
        self.health = health
        handler = _handler(metrics, health)
        server_class = ThreadingHTTPServer
        if ":" in host:
            import socket

            class _V6(ThreadingHTTPServer):
                address_family = socket.AF_INET6

            server_class = _V6
        try:
            self._server: ThreadingHTTPServer = server_class((host, port), handler)
        except OSError as err:
            raise OSError(err.errno, f"cannot serve metrics on {addr!r}: {err.strerror} "
                          "(choose another address with --metrics-addr, or 'off')") from err
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(metrics: Rendered, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
            elif path in (HEALTH_PATH, READY_PATH):
                ok, why = health.live() if path == HEALTH_PATH else health.ready()
                self._send(200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Scrapes every 15 s from every node are not news."""

    return Handler
