"""A fault-injecting HTTP proxy in front of the real kube-apiserver.

Clients under test (the agent, the controller, a reflector) talk plain HTTP on loopback to
the proxy with their own bearer token; the proxy forwards every request over TLS to the
real server, verifying its certificate, and streams the answer back (watches line by line).
A test makes chosen requests fail, stall or drop with :class:`Fault`, configured per verb
and path, and reads what was asked of the server in :attr:`FaultProxy.requests`. Nothing is
answered by the proxy itself but the injected faults: every other answer is the real
server's.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: Headers that belong to one hop, never forwarded.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "accept-encoding", "content-length"}  # fmt: skip


@dataclass
class Fault:
    """Applies to requests whose path (with its query) contains ``path``, of ``method``
    ("" for any) and watch-ness (``watch`` None: both), ``times`` times.

    * plain: ``delay`` seconds of silence, then an error ``status`` with a Status body (and
      ``Retry-After`` when ``retry_after``); ``status=0`` forwards after the delay (a slow
      answer); ``delay=float('inf')`` hangs until the proxy stops; ``hangup`` closes the
      connection with no answer at all (a server that died mid-request, recorded as
      status 0);
    * a watch with ``drop_after`` or ``garbage`` is forwarded and then misbehaves: the
      connection is cut after that many events, or the line ``garbage`` comes first;
    * ``edit``: the answer is forwarded with each object it carries (a list's items, a
      watch event's object, a single object) passed through ``edit`` first, which changes
      it in place: a malformed object, which the real server never sends but a buggy
      server or a proxy between could."""

    path: str
    method: str = "GET"
    watch: bool | None = None
    status: int = 500
    delay: float = 0.0
    times: int = 1
    drop_after: int | None = None
    garbage: bytes | None = None
    retry_after: int | None = None
    hangup: bool = False
    edit: Callable[[dict[str, Any]], None] | None = None

    def applies(self, method: str, path: str, is_watch: bool) -> bool:
        return (
            self.times > 0
            and self.path in path
            and (not self.method or self.method == method)
            and (self.watch is None or self.watch == is_watch)
        )

    @property
    def streams(self) -> bool:
        """Forwarded, then misbehaving in the answer itself."""
        return self.drop_after is not None or self.garbage is not None or self.edit is not None

    def edited(self, data: bytes, watch: bool) -> bytes:
        """``data`` (a JSON answer, or one watch line) with its objects edited."""
        if self.edit is None:
            return data
        try:
            doc = json.loads(data)
        except ValueError:
            return data
        if not isinstance(doc, dict):
            return data
        if watch:
            if isinstance(doc.get("object"), dict) and doc.get("type") != "ERROR":
                self.edit(doc["object"])
        elif isinstance(doc.get("items"), list):
            for item in doc["items"]:
                if isinstance(item, dict):
                    self.edit(item)
        else:
            self.edit(doc)
        return json.dumps(doc).encode() + (b"\n" if watch else b"")


@dataclass(frozen=True, slots=True)
class Seen:
    """A request as the proxy saw it. ``status`` is the answer's, or 0 for one the proxy
    hung up on or held with a delay (those are recorded as they arrive, before any answer)."""

    method: str
    path: str  # with the query
    status: int
    watch: bool
    #: When the answer's status came back (wall clock, ``time.time()``).
    at: float = field(default_factory=time.time)
    #: The request's body (writes), as sent.
    body: bytes | None = None


def _is_watch(path: str) -> bool:
    query = urlsplit(path).query
    return any(part in ("watch=true", "watch=1") for part in query.split("&"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a stopped watch, a timed-out request) is no error of
        the proxy's: only other exceptions are printed."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FaultProxy:
    def __init__(self, upstream: str, ca: Path) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 443
        self.context = ssl.create_default_context(cafile=str(ca))
        self.faults: list[Fault] = []
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._watches: set[socket.socket] = set()
        #: (path, code) of every ERROR event a watch stream carried: the server's own
        #: 410 Gone for a resourceVersion too old arrives that way, inside a 200 stream.
        self.watch_errors: list[tuple[str, int]] = []
        self._stopping = threading.Event()
        self._stopped = False
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (its port closes: a server gone); again is a no-op."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self.drop_watches()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def drop_watches(self) -> int:
        """Cut every open watch stream (as a restarted server or a load balancer would)."""
        with self._lock:
            socks = list(self._watches)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return len(socks)

    def seen(self, method: str = "GET", path: str = "", watch: bool | None = None) -> list[Seen]:
        with self._lock:
            return [
                s for s in self.requests
                if s.method == method and path in s.path and (watch is None or s.watch == watch)
            ]  # fmt: skip

    def writes(self, path: str = "") -> list[Seen]:
        """Every request that asked for a change (any method but GET), in order."""
        with self._lock:
            return [s for s in self.requests if s.method != "GET" and path in s.path]

    def _take(self, method: str, path: str, is_watch: bool) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.applies(method, path, is_watch):
                    fault.times -= 1
                    return fault
        return None

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._serve()

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET  # noqa: N815

            def _serve(self) -> None:
                if proxy._stopping.is_set():  # a kept-alive connection outlives the port:
                    self.close_connection = True  # a stopped proxy answers nothing on it
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                watch = _is_watch(self.path)
                fault = proxy._take(self.command, self.path, watch)
                held = fault is not None and not fault.streams and fault.delay > 0
                if held:  # recorded as it arrives: it may never be answered
                    proxy._record(Seen(self.command, self.path, 0, watch, body=body))
                record = (lambda status: None) if held else (
                    lambda status: proxy._record(Seen(self.command, self.path, status, watch, body=body)))
                if fault is not None and not fault.streams:
                    if self._wait(fault.delay):
                        return
                    # Recorded before the client can see the answer: a test that reads
                    # seen() right after its call returns must find the request there.
                    if fault.hangup:
                        record(0)
                        self.close_connection = True
                        with contextlib.suppress(OSError):
                            self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if fault.status:
                        record(fault.status)
                        self._status(fault.status, fault.retry_after)
                        return
                    fault = None
                try:
                    conn = http.client.HTTPSConnection(
                        proxy.upstream_host, proxy.upstream_port, context=proxy.context,
                        timeout=None if watch else 60,
                    )
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                except OSError as err:
                    record(502)
                    self._status(502, None, f"upstream unreachable: {err}")
                    return
                record(resp.status)
                try:
                    if watch and resp.status == 200:
                        self._stream(resp, fault)
                    else:
                        self._whole(resp, fault)
                except OSError:  # the client went away (it stopped, or timed out)
                    self.close_connection = True
                finally:
                    conn.close()

            def _wait(self, delay: float) -> bool:
                """Sleep ``delay`` (forever: until the proxy stops); True when stopping."""
                if delay <= 0:
                    return False
                return proxy._stopping.wait(None if delay == float("inf") else delay)

            def _status(self, code: int, retry_after: int | None, message: str = "injected fault") -> None:
                data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "message": message, "code": code}).encode()  # fmt: skip
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if retry_after is not None:
                    self.send_header("Retry-After", str(retry_after))
                self.end_headers()
                self.wfile.write(data)

            def _copy_headers(self, resp: http.client.HTTPResponse) -> None:
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)

            def _whole(self, resp: http.client.HTTPResponse, fault: Fault | None) -> None:
                data = resp.read()
                if fault is not None and resp.status == 200:
                    data = fault.edited(data, watch=False)
                self._copy_headers(resp)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, resp: http.client.HTTPResponse, fault: Fault | None) -> None:
                self._copy_headers(resp)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sock = self.connection
                with proxy._lock:
                    proxy._watches.add(sock)
                try:
                    if fault is not None and fault.garbage is not None:
                        self._chunk(fault.garbage.rstrip(b"\n") + b"\n")
                    events = 0
                    while not proxy._stopping.is_set():
                        line = resp.readline()
                        if not line:
                            break
                        self._note_error(line)
                        if fault is not None:
                            line = fault.edited(line, watch=True)
                        self._chunk(line)
                        events += 1
                        if fault is not None and fault.drop_after is not None and events >= fault.drop_after:
                            sock.shutdown(socket.SHUT_RDWR)
                            self.close_connection = True
                            return
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    self.close_connection = True
                finally:
                    with proxy._lock:
                        proxy._watches.discard(sock)

            def _note_error(self, line: bytes) -> None:
                if b'"ERROR"' not in line:
                    return
                try:
                    event = json.loads(line)
                    code = int(event["object"].get("code") or 0)
                except (ValueError, KeyError, TypeError, AttributeError):
                    return
                if event.get("type") == "ERROR":
                    with proxy._lock:
                        proxy.watch_errors.append((self.path, code))

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler

