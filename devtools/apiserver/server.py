"""The dev server: a store, an HTTP server on it (``handler.py``), the manifests it
starts with, and a kubeconfig for it.

Standard library only (``http.server``), one thread per connection, HTTP/1.1 with
keep-alive; watches are chunked streams of JSON lines like the real server's. Deviations
from a real API server, all deliberate: no auth (any token is accepted), no RBAC, no
admission webhooks, no persistence, no managedFields or server-side apply, no dry runs,
no protobuf and no OpenAPI v2; create keeps the given ``status`` (so tests and demos can
seed running pods in one call); built-in kinds are checked for unknown fields but not for
types or values; a paged list is not a consistent snapshot across pages.

``inject(Fault(...))`` makes chosen requests fail (an HTTP status), stall (longer than the
client's timeout), or, for watches, drop the connection mid-stream or send a malformed
line: the fault tests use it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from devtools.apiserver import crds, openapi
from devtools.apiserver.admission import Admission
from devtools.apiserver.catalog import CRDS
from devtools.apiserver.errors import ApiStatus
from devtools.apiserver.handler import Handler
from devtools.apiserver.manifests import ManifestError, read_manifests
from devtools.apiserver.store import Store

__all__ = ["DevServer", "Fault", "ManifestError", "read_manifests"]
#: Namespaces a new cluster has.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


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
        refuse_invalid: bool = True,
    ) -> None:
        self.store = store or Store()
        #: Refuse (422) custom resources that break their CRD's schema, as a real server
        #: does; False stores them with a warning (see testing.serve).
        self.refuse_invalid = refuse_invalid
        crds.follow(self.store)
        self.bookmark_interval = bookmark_interval
        self.faults: list[Fault] = []
        #: The latest (method, path?query) pairs, for tests.
        self.requests: deque[tuple[str, str]] = deque(maxlen=10_000)
        self.stopping = threading.Event()
        self.watch_epoch = 0  # bumped by drop_watches(): open watches end abruptly
        self._lock = threading.Lock()
        self._openapi: dict[Any, Any] = {}
        self.httpd = ThreadingHTTPServer((host, port), Handler)
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
        """Create every manifest, CustomResourceDefinitions first (so custom resources in
        the same batch find their kind); returns the number of objects created. Raises
        ManifestError naming the object that the server refuses."""
        ordered = sorted(objects, key=lambda o: o.get("kind") != CRDS.kind)
        for obj in ordered:
            meta = obj.get("metadata") or {}
            try:
                resource = self.store.resource_for(obj)
                self.store.create(
                    resource,
                    str(meta.get("namespace") or ""),
                    obj,
                    Admission(refuse_invalid=self.refuse_invalid),
                )
            except ApiStatus as err:
                raise ManifestError(
                    f"{obj.get('kind')} {meta.get('name')}: {err.message}"
                ) from None
        return len(ordered)

    def seed_namespaces(self) -> None:
        """The namespaces a new cluster has (the ``dev-apiserver`` command starts with them)."""
        namespaces = self.store.resource("", "v1", "namespaces")
        for name in SYSTEM_NAMESPACES:
            if not self.store.objects[namespaces].get(("", name)):
                obj = {"metadata": {"name": name}, "status": {"phase": "Active"}}
                self.store.create(namespaces, "", obj)

    def openapi_root(self) -> dict[str, Any]:
        with self.store.cond:
            gvs = {(i.resource.group, i.resource.version) for i in self.store.catalog.values()}
        hashes = {}
        for group, version in gvs:
            found = self.openapi_document(group, version)
            if found is not None:
                hashes[(group, version)] = found[1]
        return openapi.root(hashes)

    def openapi_document(self, group: str, version: str) -> tuple[bytes, str] | None:
        """The encoded OpenAPI v3 document of a group/version and its hash, cached until
        the served resources change."""
        with self.store.cond:
            generation = self.store.catalog_generation
            entries = [
                i
                for i in self.store.catalog.values()
                if (i.resource.group, i.resource.version) == (group, version)
            ]
        with self._lock:
            if self._openapi.get("generation") != generation:
                self._openapi = {"generation": generation}
            if (group, version) not in self._openapi:
                doc = openapi.document(entries, group, version)
                self._openapi[(group, version)] = None if doc is None else openapi.encoded(doc)
            return self._openapi[(group, version)]  # type: ignore[no-any-return]

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
