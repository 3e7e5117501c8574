"""The dev server's HTTP side: routing, list/watch streaming, faults for tests.

Standard library only (``http.server``), one thread per connection, HTTP/1.1 with
keep-alive; watches are chunked streams of JSON lines like the real server's. Deviations
from a real API server, all deliberate: no auth (any token is accepted), no admission or
defaulting, create keeps the given ``status`` (so tests and demos can seed running pods in
one call), strategic-merge patches are applied as JSON merge patches, a paged list is not
a consistent snapshot across pages.

``inject(Fault(...))`` makes chosen requests fail (an HTTP status), stall (longer than the
client's timeout), or, for watches, drop the connection mid-stream or send a malformed
line: the fault tests use it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog
import yaml

from agent.kube.resources import Resource
from devtools.apiserver import eviction
from devtools.apiserver.selectors import field_predicate, label_predicate
from devtools.apiserver.store import ApiStatus, Change, Store


@dataclass
class Fault:
    """Applies to requests whose path contains ``path`` (and method / watch-ness match),
    ``times`` times. A watch fault with ``drop_after`` or ``garbage`` streams normally and
    then misbehaves; otherwise ``delay`` seconds of silence, then ``status`` if non-zero."""

    path: str
    method: str = "GET"
    watch: bool | None = None  # True: only watches; False: never watches; None: both
    status: int = 500
    delay: float = 0.0
    times: int = 1
    drop_after: int | None = None  # watch: cut the connection after this many events
    garbage: bytes | None = None  # watch: send this line first

    def applies(self, method: str, path: str, is_watch: bool) -> bool:
        return (
            self.times > 0
            and self.path in path
            and (not self.method or self.method == method)
            and (self.watch is None or self.watch == is_watch)
        )


class DevServer:
    def __init__(
        self,
        store: Store | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.store = store or Store()
        self.bookmark_interval = bookmark_interval
        self.faults: list[Fault] = []
        #: The latest (method, path?query) pairs, for tests.
        self.requests: deque[tuple[str, str]] = deque(maxlen=10_000)
        self.stopping = threading.Event()
        self.watch_epoch = 0  # bumped by drop_watches(): open watches end abruptly
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.dev = self  # type: ignore[attr-defined]
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> DevServer:
        for target in (lambda: self.httpd.serve_forever(poll_interval=0.05), self._reap_forever):
            thread = threading.Thread(target=target, name="dev-apiserver", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self.stopping.set()
        with self.store.cond:
            self.store.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def drop_watches(self) -> None:
        """Cut every open watch connection mid-stream (as a restarting API server would)."""
        with self.store.cond:
            self.watch_epoch += 1
            self.store.cond.notify_all()

    def take_fault(self, method: str, path: str, is_watch: bool) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.applies(method, path, is_watch):
                    fault.times -= 1
                    return fault
        return None

    def load(self, objects: Iterable[Mapping[str, Any]]) -> int:
        """Create every manifest (CRDs register their resource instead); returns the count."""
        count = 0
        for obj in objects:
            if obj.get("kind") == "CustomResourceDefinition":
                self.store.register_crd(obj)
                continue
            resource = self.store.resource_for(obj)
            self.store.create(
                resource, str((obj.get("metadata") or {}).get("namespace") or ""), obj
            )
            count += 1
        return count

    def write_kubeconfig(self, path: str | Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "waterline-dev", "cluster": {"server": self.url}}],
            "users": [{"name": "dev", "user": {"token": "dev-token-not-checked"}}],
            "contexts": [
                {
                    "name": "waterline-dev",
                    "context": {"cluster": "waterline-dev", "user": "dev", "namespace": "default"},
                }
            ],
            "current-context": "waterline-dev",
        }
        Path(path).write_text(yaml.safe_dump(config, sort_keys=False))

    def _reap_forever(self) -> None:
        while not self.stopping.wait(0.05):
            self.store.reap()


def read_manifests(path: str | Path) -> list[dict[str, Any]]:
    """YAML or JSON documents: single objects, ``kind: List`` or ``{objects: [...]}``."""
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(Path(path).read_text()):
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("items"), list) and str(doc.get("kind", "")).endswith("List"):
            out.extend(d for d in doc["items"] if isinstance(d, dict))
        elif isinstance(doc.get("objects"), list) and "kind" not in doc:
            out.extend(d for d in doc["objects"] if isinstance(d, dict))
        else:
            out.append(doc)
    return out


@dataclass(frozen=True, slots=True)
class _Route:
    resource: Resource
    namespace: str
    name: str
    subresource: str


def _route(store: Store, path: str) -> _Route:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in store.resources:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
    resource = store.resource(group, version, rest[0])
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in ("status", "eviction"):
        raise ApiStatus(
            404, "NotFound", f"the server could not find the requested resource ({sub})"
        )
    if resource.namespaced and name and not namespace:
        raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
    return _Route(resource, namespace, name, sub)


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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "waterline-dev-apiserver"

    @property
    def dev(self) -> DevServer:
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
    def _send(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as err:
            raise ApiStatus(400, "BadRequest", f"malformed JSON body: {err}") from None
        if not isinstance(body, dict):
            raise ApiStatus(400, "BadRequest", "the body must be a JSON object")
        return body

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        is_watch = query.get("watch") in ("true", "1")
        if self.dev.stopping.is_set():  # stopped: a keep-alive connection gets no answer
            self._drop()
            return
        self.dev.requests.append((method, self.path))
        try:
            body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else {}
            if url.path in ("/healthz", "/readyz", "/livez"):
                self._send(200, {"status": "ok"})
                return
            if url.path == "/version":
                self._send(
                    200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-waterline-dev"}
                )
                return
            fault = self.dev.take_fault(method, url.path, is_watch)
            if fault is not None and not (
                is_watch and (fault.drop_after is not None or fault.garbage)
            ):
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.status:
                    raise ApiStatus(
                        fault.status,
                        "InternalError" if fault.status >= 500 else "Injected",
                        f"injected fault {fault.status}",
                    )
            route = _route(self.dev.store, url.path)
            if is_watch and method == "GET" and not route.name:
                self._watch(route, query, fault)
                return
            code, answer = self._dispatch(method, route, query, body)
            self._send(code, answer)
        except ApiStatus as status:
            self._send(status.code, status.body())
        except ValueError as err:
            self._send(400, ApiStatus(400, "BadRequest", str(err)).body())
        except Exception as err:  # a bug here must not look like a network fault
            structlog.get_logger("waterline.devtools.apiserver").exception(
                "request failed", path=self.path
            )
            self._send(500, ApiStatus(500, "InternalError", f"{type(err).__name__}: {err}").body())

    def _dispatch(
        self, method: str, route: _Route, query: Mapping[str, str], body: dict[str, Any]
    ) -> tuple[int, Mapping[str, Any]]:
        store, res, ns, name, sub = (
            self.dev.store,
            route.resource,
            route.namespace,
            route.name,
            route.subresource,
        )
        if sub == "eviction":
            if method != "POST" or res.kind != "Pod":
                raise ApiStatus(405, "MethodNotAllowed", "eviction takes POST on pods")
            return 201, eviction.evict(store, ns, name, body)
        if sub == "status" and not res.status_subresource:
            raise ApiStatus(404, "NotFound", f"{res.plural} has no status subresource")
        if not name:
            if method == "GET":
                return 200, self._list(route, query)
            if method == "POST":
                return 201, store.create(res, ns, body)
            raise ApiStatus(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        if method == "GET":
            return 200, store.get(res, ns, name)
        if method == "PUT":
            return 200, store.replace(res, ns, name, body, sub)
        if method == "PATCH":
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if kind not in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ):
                raise ApiStatus(
                    415, "UnsupportedMediaType", f"the dev server does not support {kind!r} patches"
                )
            return 200, store.patch(res, ns, name, body, sub)
        if method == "DELETE":
            uid = str((body.get("preconditions") or {}).get("uid") or "")
            if res.kind == "Pod":
                grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
                return 200, store.delete_pod(ns, name, None if grace is None else int(grace), uid)
            return 200, store.delete(res, ns, name, uid)
        raise ApiStatus(405, "MethodNotAllowed", f"{method} is not allowed")

    def _matcher(self, query: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
        labels = label_predicate(query.get("labelSelector", ""))
        fields = field_predicate(query.get("fieldSelector", ""))
        return lambda obj: labels(obj) and fields(obj)

    def _list(self, route: _Route, query: Mapping[str, str]) -> dict[str, Any]:
        offset = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0)
        page, version, more = self.dev.store.list(
            route.resource, route.namespace or None, self._matcher(query), offset, limit
        )
        meta: dict[str, Any] = {"resourceVersion": str(version)}
        if more:
            meta["continue"] = str(offset + limit)
        res = route.resource
        return {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": meta,
            "items": page,
        }

    def _watch(self, route: _Route, query: Mapping[str, str], fault: Fault | None) -> None:
        match = self._matcher(query)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if fault is not None and fault.garbage:
                self._emit(fault.garbage + b"\n")
            version = query.get("resourceVersion") or ""
            if version in ("", "0"):
                items, pos, _ = self.dev.store.list(route.resource, route.namespace or None, match)
                for item in items:
                    self._event("ADDED", item)
            else:
                pos = int(version)
            if self._follow(route, query, match, fault, pos):
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _follow(
        self,
        route: _Route,
        query: Mapping[str, str],
        match: Callable[[Mapping[str, Any]], bool],
        fault: Fault | None,
        pos: int,
    ) -> bool:
        """Stream the changes after ``pos`` (and bookmarks) until the watch times out or
        the server stops: True; False when the connection was dropped on purpose."""
        store, res = self.dev.store, route.resource
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        last_bookmark = time.monotonic()
        epoch = self.dev.watch_epoch
        sent = 0
        while not self.dev.stopping.is_set():
            if self.dev.watch_epoch != epoch:
                self._drop()
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
                self._event(kind, change.new)
                sent += 1
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
        self._emit(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

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
