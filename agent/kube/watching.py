"""The list+watch loop (a reflector, as client-go calls it) that keeps a cache current.

List once, then watch from the list's resourceVersion with bookmarks, resuming from the
last seen version whenever a watch ends (server timeout, dropped connection, malformed
line). A 410 Gone (version compacted) relists at once; a relist deletes what vanished.
Any other failure waits with exponential backoff and jitter, then retries: an API error,
and any other exception too (a bug in handling one object must not end the thread while
liveness stays green; it is logged with its traceback). The wait ends early when another
reflector of the same cache gets through again: the API server is back, and a watch that
sat out the rest of a delay grown to a minute during the outage would keep the node's
evictions paused (they wait for every watch) and its objects stale for that long. Once
per outage for each reflector, so it adds at most one request per watch. Across nodes the
retries stay spread: each node's first one comes from its own jittered delay. Every fault
is logged once when it starts and once when it ends (not per retry), a transient one marks
the API unreachable in the cache until a request succeeds again, and each reflector
reports to the ``ThreadBoard`` (``/healthz``) as ok or failing.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog

from agent.errors import InvalidObject
from agent.kube.backoff import Backoff, BackoffArgs
from agent.kube.cache import Cache
from agent.kube.client import KubeApi, WatchStream
from agent.kube.errors import KubeError, KubeGone, from_status
from agent.kube.fetching import Selectors, list_objects
from agent.kube.health import ThreadBoard
from agent.kube.resources import Resource

#: How often a reflector backing off looks whether another one got through (seconds).
RECOVERY_CHECK = 0.5


@dataclass(frozen=True, slots=True)
class WatchArgs:
    #: The server ends each watch after this many seconds (randomised in [t, 2t) as
    #: client-go does, so that watches of many agents do not restart together).
    watch_timeout_seconds: int = 300
    #: A watch that sends nothing (not even a bookmark) this long past its timeout is dead.
    read_slack_seconds: float = 30.0
    list_read_timeout: float = 60.0
    page_size: int = 500
    backoff: BackoffArgs = field(default_factory=BackoffArgs)

    def validate(self) -> WatchArgs:
        if self.watch_timeout_seconds < 1:
            raise InvalidObject(
                "WatchArgs",
                "",
                "watch_timeout_seconds",
                f"must be >= 1, got {self.watch_timeout_seconds}",
            )
        if self.read_slack_seconds <= 0:
            raise InvalidObject(
                "WatchArgs", "", "read_slack_seconds", f"must be > 0, got {self.read_slack_seconds}"
            )
        if self.list_read_timeout <= 0:
            raise InvalidObject(
                "WatchArgs", "", "list_read_timeout", f"must be > 0, got {self.list_read_timeout}"
            )
        if self.page_size < 1:
            raise InvalidObject("WatchArgs", "", "page_size", f"must be >= 1, got {self.page_size}")
        self.backoff.validate()
        return self


class MalformedEvent(KubeError):
    """A watch line that is not a JSON event: resume from the last good version."""


class Reflector:
    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        cache: Cache,
        selectors: Selectors = Selectors(),
        args: WatchArgs | None = None,
        rng: random.Random | None = None,
        logger: Any = None,
        board: ThreadBoard | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.cache = cache
        self.selectors = selectors
        self.args = (args or WatchArgs()).validate()
        self.rng = rng or random.Random()
        self.backoff = Backoff(self.args.backoff, self.rng)
        self.name = f"{resource.plural}?{'&'.join(f'{k}={v}' for k, v in selectors.query())}"
        self.log = (logger or structlog.get_logger("waterline.kube.watch")).bind(watch=self.name)
        self.resource_version = ""
        self._fault: str | None = None
        #: The cache's recovery count when the current attempt began, and whether a
        #: backoff was already cut short by one since this reflector last got through.
        self._attempt_recoveries = 0
        self._woken = False
        self._stream: WatchStream | None = None
        self._stopped = threading.Event()
        self.board = board
        self.thread_name = f"watch-{self.name.rstrip('?')}"
        if board is not None:
            board.register(self.thread_name)

    # -- the loop -----------------------------------------------------------------------
    def run(
        self, stop: threading.Event | None = None, sleep: Callable[[float], Any] | None = None
    ) -> None:
        """Run until ``stop`` is set (or ``self.stop()``)."""
        stop = stop or self._stopped
        wait = sleep or partial(self._back_off, stop)
        while not (stop.is_set() or self._stopped.is_set()):
            try:
                self._attempt_recoveries = self.cache.recoveries
                self.step(stop)
                self.backoff.reset()
            except KubeGone as err:
                if not self.resource_version:  # the list itself expired: back off, retry
                    self._failed(err)
                    wait(self.backoff.next())
                    continue
                self.log.info(
                    "watch version expired, relisting", code="watch-relist",
                    resource_version=self.resource_version,
                )
                self.resource_version = ""
            except KubeError as err:
                if stop.is_set() or self._stopped.is_set():
                    return
                self._failed(err)
                wait(self.backoff.next())
            except Exception as err:  # a bug must not end the thread: log, back off, retry
                if stop.is_set() or self._stopped.is_set():
                    return
                self.log.exception("watch failed unexpectedly, retrying with backoff")
                self._failed(KubeError(f"{type(err).__name__}: {err}"), logged=True)
                self.resource_version = ""  # start over from a fresh list
                wait(self.backoff.next())

    def step(self, stop: threading.Event | None = None) -> None:
        """List if there is no version yet, then watch until the stream ends."""
        if not self.resource_version:
            self.relist()
        self.watch(stop)

    def relist(self) -> None:
        listing = list_objects(
            self.api,
            self.resource,
            self.selectors,
            page_size=self.args.page_size,
            timeout=(self.api.args.connect_timeout, self.args.list_read_timeout),
        )
        self.cache.replace(self.resource.kind, listing.items)
        self.resource_version = listing.resource_version
        self._ok()

    def watch(self, stop: threading.Event | None = None) -> None:
        timeout = self.args.watch_timeout_seconds
        timeout = int(timeout + self.rng.random() * timeout)
        query = self.selectors.query() + [
            ("watch", "true"),
            ("resourceVersion", self.resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout)),
        ]
        path = self.resource.path(self.selectors.namespace)
        self._stream = stream = self.api.stream(path, query, timeout + self.args.read_slack_seconds)
        if (stop and stop.is_set()) or self._stopped.is_set():
            # stopped while the watch was opening: ``stop`` found no stream to close, and
            # a quiet watch would hold this thread until its timeout
            stream.close()
            self._stream = None
            return
        self._ok()
        try:
            for line in stream:
                if (stop and stop.is_set()) or self._stopped.is_set():
                    return
                self._handle(line)
        finally:
            self._stream = None

    def stop(self) -> None:
        """Stop the loop, interrupting a watch that waits for data."""
        self._stopped.set()
        stream = self._stream
        if stream is not None:
            stream.close()

    # -- internals ----------------------------------------------------------------------
    def _back_off(self, stop: threading.Event, delay: float) -> None:
        """Wait ``delay``, or less: until ``stop``, or until another reflector of the
        cache has recovered since the failed attempt began (checked every
        ``RECOVERY_CHECK`` seconds; a recovery while this attempt's request was still in
        flight counts). Cut short once until this reflector gets through again: in a
        partial outage (429s, some 5xx) siblings that flap must not turn the growing
        delay into a retry per flap, on every node at once."""
        end = time.monotonic() + delay
        while (left := end - time.monotonic()) > 0:
            if not self._woken and self.cache.recoveries != self._attempt_recoveries:
                self._woken = True
                return
            if stop.wait(min(left, RECOVERY_CHECK)) or self._stopped.is_set():
                return

    def _handle(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            raise MalformedEvent(f"malformed watch line: {line[:200]!r}") from None
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise MalformedEvent(f"malformed watch event: {line[:200]!r}")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            raise from_status(int(obj.get("code") or 500), obj)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        version = str(meta.get("resourceVersion") or "")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("kind", self.resource.kind)
            obj.setdefault("apiVersion", self.resource.api_version)
            self.cache.apply(self.resource.kind, kind, obj)
        elif kind != "BOOKMARK":
            raise MalformedEvent(f"unknown watch event type {kind!r}")
        if version:
            self.resource_version = version

    def _failed(self, err: KubeError, logged: bool = False) -> None:
        fault = f"{type(err).__name__}: {err.message}"
        if self.board is not None:
            self.board.failed(self.thread_name, fault)
        if self._fault is None and not logged:
            self.log.warning("watch failed, retrying with backoff", code="watch-failed", error=fault, status=err.status)
        elif fault != self._fault and not logged:
            self.log.debug("watch still failing", error=fault, status=err.status)
        self._fault = fault
        if err.transient or logged:
            self.cache.set_reachable(self.name, False)

    def _ok(self) -> None:
        self._woken = False
        if self._fault is not None:
            self.log.info("watch recovered", code="watch-recovered", after=self._fault)
            self._fault = None
        if self.board is not None:
            self.board.beat(self.thread_name)
        self.cache.set_reachable(self.name, True)


class Informers:
    """Reflector threads that feed one cache; ``stop`` ends them promptly."""

    def __init__(self, reflectors: list[Reflector]) -> None:
        self.reflectors = reflectors
        self.threads: list[threading.Thread] = []
        self.stopping = threading.Event()

    def start(self) -> Informers:
        for reflector in self.reflectors:
            thread = threading.Thread(
                target=reflector.run,
                args=(self.stopping,),
                name=reflector.thread_name,
                daemon=True,
            )
            thread.start()
            self.threads.append(thread)
            if reflector.board is not None:  # its liveness is the thread's own
                reflector.board.register(reflector.thread_name, thread)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        for reflector in self.reflectors:
            reflector.stop()
        for thread in self.threads:
            thread.join(timeout)


def start_watches(
    api: KubeApi,
    cache: Cache,
    watches: list[tuple[Resource, Selectors]],
    args: WatchArgs | None = None,
    rng: random.Random | None = None,
    board: ThreadBoard | None = None,
) -> Informers:
    """One reflector thread per (resource, selectors), all feeding ``cache``; each gets
    its own random stream so their watch timeouts and backoffs spread out."""
    rng = rng or random.Random()
    reflectors = [
        Reflector(api, res, cache, sel, args, random.Random(rng.random()), board=board)
        for res, sel in watches
    ]
    return Informers(reflectors).start()
