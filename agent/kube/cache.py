"""The slim local cache: one record per object, keyed by kind and namespace/name.

Every kind the model has a record for (core kinds, workloads, the cluster engines' custom
resources: ``agent.model.store.RECORD_PARSERS``) is parsed once, as it enters, into a frozen
record; other kinds (the node policies, Leases) are kept as raw dicts without ``managedFields`` and
the last-applied annotation, which are most of an object's bytes. An object that does not
parse is left out of the records and listed under ``invalid`` with the error, logged once
per distinct error; every other object keeps working.

Readers get a change counter and can block until it moves (``wait_for_change``), and an
``api_reachable`` flag that the reflectors keep up to date. For the kinds named in
``keep_raw`` the slim manifests are kept beside the records (``raws``): the node agent
saves them, to start from them when the API server is down.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from agent.errors import InvalidObject
from agent.model.store import RECORD_PARSERS

Parser = Callable[[Mapping[str, Any]], object]

DEFAULT_PARSERS: Mapping[str, Parser] = RECORD_PARSERS

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy without the fields nobody here reads but that weigh the most."""
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        out["metadata"] = meta
    return out


class Cache:
    def __init__(
        self,
        parsers: Mapping[str, Parser] = DEFAULT_PARSERS,
        logger: Any = None,
        keep_raw: Iterable[str] = (),
    ) -> None:
        self.parsers = dict(parsers)
        self.keep_raw = frozenset(keep_raw)
        self._raw: dict[str, dict[str, Mapping[str, Any]]] = {}
        self.log = logger or structlog.get_logger("waterline.kube.cache")
        self._cond = threading.Condition()
        self._records: dict[str, dict[str, object]] = {}
        self._invalid: dict[str, dict[str, str]] = {}
        self._synced: set[str] = set()
        self._reachable: dict[str, bool] = {}
        self._recoveries = 0
        self._version = 0
        self._listeners: list[Callable[[str], None]] = []

    # -- writers (the reflectors) -------------------------------------------------------
    def replace(self, kind: str, items: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: objects missing from it are deleted."""
        parsed: dict[str, object] = {}
        invalid: dict[str, str] = {}
        raws: dict[str, Mapping[str, Any]] = {}
        for obj in items:
            key = object_key(obj)
            record, error = self._parse(kind, obj)
            if error is None:
                parsed[key] = record
                if kind in self.keep_raw:
                    raws[key] = slim(obj)
            else:
                invalid[key] = error
        with self._cond:
            before = self._invalid.get(kind, {})
            for key, error in invalid.items():
                if before.get(key) != error:
                    self._log_invalid(kind, key, error)
            self._records[kind] = parsed
            self._invalid[kind] = invalid
            if kind in self.keep_raw:
                self._raw[kind] = raws
            self._synced.add(kind)
            self._changed(kind)

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""
        key = object_key(obj)
        if event_type == "DELETED":
            record, error = None, None
        else:
            record, error = self._parse(kind, obj)
        with self._cond:
            records = self._records.setdefault(kind, {})
            invalid = self._invalid.setdefault(kind, {})
            raws = self._raw.setdefault(kind, {})
            if event_type == "DELETED":
                records.pop(key, None)
                invalid.pop(key, None)
                raws.pop(key, None)
            elif error is None:
                records[key] = record
                invalid.pop(key, None)
                if kind in self.keep_raw:
                    raws[key] = slim(obj)
            else:
                records.pop(key, None)
                raws.pop(key, None)
                if invalid.get(key) != error:
                    self._log_invalid(kind, key, error)
                invalid[key] = error
            self._changed(kind)

    def set_reachable(self, source: str, reachable: bool) -> None:
        with self._cond:
            before = self._reachable.get(source)
            if before != reachable:
                self._reachable[source] = reachable
                if reachable and before is False:
                    self._recoveries += 1
                self._changed("")

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(kind)`` is called after every change ("" for reachability), under
        the cache lock: keep it short (set an Event, put on a queue)."""
        with self._cond:
            self._listeners.append(listener)

    # -- readers ------------------------------------------------------------------------
    def records(self, kind: str) -> list[object]:
        with self._cond:
            return list(self._records.get(kind, {}).values())

    def raws(self, kind: str) -> list[Mapping[str, Any]]:
        """The slim manifests of a ``keep_raw`` kind's valid objects."""
        with self._cond:
            return list(self._raw.get(kind, {}).values())

    def get(self, kind: str, key: str) -> object | None:
        with self._cond:
            return self._records.get(kind, {}).get(key)

    def invalid(self, kind: str) -> dict[str, str]:
        with self._cond:
            return dict(self._invalid.get(kind, {}))

    def synced(self, kinds: Iterable[str]) -> bool:
        with self._cond:
            return all(k in self._synced for k in kinds)

    @property
    def api_reachable(self) -> bool:
        with self._cond:
            return bool(self._reachable) and all(self._reachable.values())

    @property
    def recoveries(self) -> int:
        """How many times a source got through again after failing: a reflector backing
        off takes a change as the API server being back (``Reflector``)."""
        with self._cond:
            return self._recoveries

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def wait_for_change(self, since: int, timeout: float | None = None) -> int:
        """Block until the change counter passes ``since`` (or timeout); return it."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != since, timeout)
            return self._version

    # -- internals ----------------------------------------------------------------------
    def _parse(self, kind: str, obj: Mapping[str, Any]) -> tuple[object, str | None]:
        parser = self.parsers.get(kind)
        try:
            if parser is None:
                return slim(obj), None
            return parser(obj), None
        except InvalidObject as err:
            return None, str(err)
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            return None, f"{kind} {object_key(obj)}: {type(err).__name__}: {err}"

    def _log_invalid(self, kind: str, key: str, error: str) -> None:
        self.log.warning("invalid object left out of the cache", code="invalid-object-skipped", kind=kind, key=key, error=error)

    def _changed(self, kind: str) -> None:
        self._version += 1
        self._cond.notify_all()
        for listener in self._listeners:
            listener(kind)
