"""The dev server's HTTP side: request bodies (Content-Length or chunked, at most
``MAX_BODY`` bytes: 413 beyond), strict JSON both ways (no NaN or Infinity, duplicate keys
noticed), watches as chunked streams of JSON lines (Tables when kubectl asks for them),
and faults for tests. Resource verbs are in ``api.py``, the other GET endpoints (health,
version, discovery, OpenAPI) in ``endpoints.py``.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog
import yaml

from devtools.apiserver import api, endpoints, protobuf, tables
from devtools.apiserver.admission import Admission
from devtools.apiserver.errors import ApiStatus
from devtools.apiserver.faults import Fault
from devtools.apiserver.manifests import finite
from devtools.apiserver.state import ServerState
from devtools.apiserver.store import Change

#: The real API server's default limit on a request body (3 MiB).
MAX_BODY = 3 * 1024 * 1024
#: A body up to this size is read to its end before the 413 (beyond: the connection closes).
DRAIN_LIMIT = 4 * MAX_BODY
JSON = "application/json"
TOO_LARGE = "the server has rejected the request because the request is too large"
#: kubectl create <kind> sends protobuf: only a Namespace is read (``protobuf``), any other
#: kind is a 415 that says what to do (kubectl does not fall back to JSON).
PROTOBUF = "application/vnd.kubernetes.protobuf"
UNSUPPORTED_PROTOBUF = (
    "this dev API server reads JSON and YAML bodies, and of protobuf only a Namespace "
    "(kubectl create <kind> sends protobuf): write the object in a manifest and use "
    "kubectl apply -f or kubectl create -f"
)


def parse_json(data: bytes, duplicates: list[str] | None = None) -> Any:
    """JSON as the API server reads it: NaN and Infinity are not numbers, nor is a number
    out of a float's range (400; stored, it would make every later answer unencodable)."""

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{text} is out of range for a number")
        return value

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out and duplicates is not None:
                duplicates.append(key)
            out[key] = value
        return out

    return json.loads(data, parse_constant=constant, parse_float=number, object_pairs_hook=pairs)


def _warning_header(text: str) -> str:
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _watch_event(change: Change, match: Callable[[Mapping[str, Any]], bool]) -> str | None:
    """The event type a selector-filtered watch sees for a change, or None."""
    was = change.old is not None and change.type != "ADDED" and match(change.old)
    now = change.type != "DELETED" and match(change.new)
    if change.type == "DELETED":
        return "DELETED" if was else None
    if was and now:
        return "MODIFIED"
    if now:
        return "ADDED"
    return "DELETED" if was else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "waterline-dev-apiserver"

    @property
    def dev(self) -> ServerState:
        return self.server.dev  # type: ignore[attr-defined, no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # -- plumbing -----------------------------------------------------------------------
    def _send(
        self,
        code: int,
        body: Any,
        content_type: str = JSON,
        headers: Mapping[str, str] | list[tuple[str, str]] | None = None,
    ) -> None:
        if isinstance(body, bytes):
            data = body
        else:
            try:
                data = json.dumps(body, allow_nan=False).encode()
            except ValueError as err:  # a NaN from somewhere: never send invalid JSON
                code, content_type = 500, JSON
                data = json.dumps(
                    ApiStatus(500, "InternalError", f"unencodable answer: {err}").body()
                ).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items() if isinstance(headers, Mapping) else headers or []:
                self.send_header(key, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _too_large(self, left: int) -> ApiStatus:
        """413; the ``left`` bytes still coming are read and dropped when they are not
        too many (so the client, still sending, gets the answer), else the connection
        closes after the answer."""
        if left > DRAIN_LIMIT:
            self.close_connection = True
        else:
            while left > 0:
                got = len(self.rfile.read(min(left, 1 << 16)))
                if not got:
                    break
                left -= got
        return ApiStatus(413, "RequestEntityTooLarge", TOO_LARGE)

    def _raw_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._chunked_body()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise ApiStatus(400, "BadRequest", "Content-Length is not a number") from None
        if length > MAX_BODY:
            raise self._too_large(length)
        return self.rfile.read(length) if length > 0 else b""

    def _chunked_body(self) -> bytes:
        data, total = bytearray(), 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                raise ApiStatus(400, "BadRequest", f"malformed chunk size line {line!r}") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                if total > MAX_BODY:
                    raise self._too_large(0)
                return bytes(data)
            total += size
            if total > DRAIN_LIMIT:
                raise self._too_large(DRAIN_LIMIT + 1)
            chunk = self.rfile.read(size)
            if total <= MAX_BODY:
                data += chunk
            self.rfile.readline(8)  # the CRLF after the chunk

    def _body(self, duplicates: list[str]) -> Any:
        data = self._raw_body()
        if not data.strip():
            return {}
        kind = (self.headers.get("Content-Type") or JSON).split(";")[0].strip().lower()
        if kind == PROTOBUF:
            try:
                return protobuf.decode(data)
            except (protobuf.Unsupported, UnicodeDecodeError) as err:
                raise ApiStatus(415, "UnsupportedMediaType", f"{UNSUPPORTED_PROTOBUF} ({err})") from None
        try:
            if kind in ("application/yaml", "application/apply-patch+yaml"):
                body = yaml.safe_load(data)
                finite(body, "body")  # YAML's .nan and .inf are no JSON numbers either
                return body
            return parse_json(data, duplicates)
        except (ValueError, yaml.YAMLError) as err:
            raise ApiStatus(
                400, "BadRequest", f"the request body is not valid JSON: {err}"
            ) from None

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        is_watch = query.get("watch") in api.TRUE
        if self.dev.stopping.is_set():  # stopped: a keep-alive connection gets no answer
            self._drop()
            return
        self.dev.requests.append((method, self.path))
        admission = None
        try:
            duplicates: list[str] = []
            body = self._body(duplicates) if method in ("POST", "PUT", "PATCH", "DELETE") else {}
            admission = Admission(
                query.get("fieldValidation") or "Warn", duplicates, self.dev.refuse_invalid
            )
            found = (
                endpoints.answer(self.dev, url.path, url.query, self._accept())
                if method == "GET"
                else None
            )
            if found is not None:
                self._send(found.code, found.body, found.content_type, found.headers)
                return
            fault = self.dev.take_fault(method, url.path, is_watch)
            if fault is not None and not (
                is_watch and (fault.drop_after is not None or fault.garbage)
            ):
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.status:
                    reason = "InternalError" if fault.status >= 500 else "Injected"
                    raise ApiStatus(fault.status, reason, f"injected fault {fault.status}")
            route = api.route(self.dev.store, url.path)
            if is_watch and method == "GET" and not route.name:
                self._watch(route, query, fault)
                return
            call = api.Call(
                method, route, query, body, self._content_type(), self._accept(), admission
            )
            code, answer = api.dispatch(self.dev.store, call, self.dev.store.clock())
            self._send(code, answer, headers=self._warnings(admission))
        except ApiStatus as status:
            self._send(status.code, status.body(), headers=self._warnings(admission))
        except ValueError as err:
            self._send(400, ApiStatus(400, "BadRequest", str(err)).body())
        except Exception as err:  # a bug here must not look like a network fault
            structlog.get_logger("waterline.devtools.apiserver").exception(
                "request failed", path=self.path
            )
            self._send(500, ApiStatus(500, "InternalError", f"{type(err).__name__}: {err}").body())

    def _content_type(self) -> str:
        return (self.headers.get("Content-Type") or JSON).split(";")[0].strip().lower()

    def _accept(self) -> str:
        return self.headers.get("Accept") or JSON

    def _warnings(self, admission: Admission | None) -> list[tuple[str, str]]:
        return [("Warning", _warning_header(w)) for w in (admission.warnings if admission else [])]

    # -- watches ------------------------------------------------------------------------
    def _watch(self, route: api.Route, query: Mapping[str, str], fault: Fault | None) -> None:
        match = api.matcher(query)
        info = self.dev.store.info(route.resource)
        as_table = api.wants_table(self._accept())
        first = [True]

        def encode(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
            if not as_table or kind not in ("ADDED", "MODIFIED", "DELETED"):
                return obj
            include = query.get("includeObject") or "Metadata"
            out = tables.table(
                info,
                [obj],
                self.dev.store.clock(),
                include_object=include,
                with_definitions=first[0],
            )
            first[0] = False
            return out

        self.send_response(200)
        self.send_header("Content-Type", JSON)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if fault is not None and fault.garbage:
                self._emit(fault.garbage + b"\n")
            version = query.get("resourceVersion") or ""
            if version in ("", "0"):
                items, pos, _ = self.dev.store.list(route.resource, route.namespace or None, match)
                for item in items:
                    self._event("ADDED", encode("ADDED", item))
            else:
                pos = int(version)
            if self._follow(route, query, match, fault, pos, encode):
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _follow(
        self,
        route: api.Route,
        query: Mapping[str, str],
        match: Callable[[Mapping[str, Any]], bool],
        fault: Fault | None,
        pos: int,
        encode: Callable[[str, Mapping[str, Any]], Mapping[str, Any]],
    ) -> bool:
        """Stream the changes after ``pos`` (and bookmarks) until the watch times out or
        the server stops: True; False when the connection was dropped on purpose."""
        store, res = self.dev.store, route.resource
        bookmarks = query.get("allowWatchBookmarks") in api.TRUE
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        last_bookmark = time.monotonic()
        epoch = self.dev.watch_epoch
        sent = 0
        while not self.dev.stopping.is_set():
            if self.dev.watch_epoch != epoch:
                self._drop()  # as a restarting server would
                return False
            try:
                changes = store.changes_after(pos)
            except ApiStatus as status:
                self._event("ERROR", status.body())
                break
            for change in changes:
                pos = change.version
                if change.resource != res:
                    continue
                if route.namespace and change.new["metadata"].get("namespace") != route.namespace:
                    continue
                kind = _watch_event(change, match)
                if kind is None:
                    continue
                if fault is not None and fault.drop_after is not None and sent >= fault.drop_after:
                    self._drop()
                    return False
                self._event(kind, encode(kind, change.new))
                sent += 1
            if res not in store.objects:
                break  # its CRD was deleted: the objects' DELETED events are out, the watch ends
            now = time.monotonic()
            if bookmarks and now - last_bookmark >= self.dev.bookmark_interval:
                mark = {"resourceVersion": str(pos)}
                self._event(
                    "BOOKMARK", {"kind": res.kind, "apiVersion": res.api_version, "metadata": mark}
                )
                last_bookmark = now
            if now >= deadline:
                break
            self._wait_for_change(pos, min(deadline - now, self.dev.bookmark_interval))
        return True

    def _emit(self, line: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()

    def _event(self, kind: str, obj: Mapping[str, Any]) -> None:
        self._emit(json.dumps({"type": kind, "object": obj}, allow_nan=False).encode() + b"\n")

    def _wait_for_change(self, seen: int, timeout: float) -> None:
        store = self.dev.store
        with store.cond:
            epoch = self.dev.watch_epoch
            store.cond.wait_for(
                lambda: (
                    store.version > seen
                    or self.dev.stopping.is_set()
                    or self.dev.watch_epoch != epoch
                ),
                timeout,
            )

    def _drop(self) -> None:
        """Cut the connection in the middle of a chunked stream."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
