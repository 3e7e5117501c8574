"""The last objects the agent saw, kept in its state directory.

An agent started while the API server is down has nothing to decide on: its watches
cannot list. It then acts on the objects the previous run saved (its node, its pods, the
namespaces, policies and actions), so the node stays guarded by local throttling from
the first tick (evictions wait for the API). Saved when the watches are first in sync
and then at most once a ``min_interval`` while the objects change, the last change at the
latest ``min_interval`` after it was made, and once more when the agent stops (unless an
outage left its cache stale); written atomically. Any copy can be older than the node's
pods and policies by the time a new agent reads it (objects change between the stop and
the new agent's sync; a killed agent saves nothing at the end), so a start on it hands no
cap back for a pod it does not show (agent.node.resume waits for the API server's pods for
those), and until the watches sync it only tightens (``TickContext.provisional``).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import structlog

from agent.errors import InvalidObject
from agent.files import atomic_write
from agent.model.objects import namespace_labels
from agent.model.policy import ACTION_KIND, POLICY_KIND, load_policies
from agent.model.store import ObjectStore
from agent.node.loop import Objects

SAVED_FILE = "objects.json"
FORMAT_VERSION = 1
SAVE_INTERVAL = 60.0


class SavedObjects:
    def __init__(
        self,
        state_dir: str,
        node_name: str,
        min_interval: float = SAVE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        logger: Any = None,
    ) -> None:
        self.path = os.path.join(state_dir, SAVED_FILE)
        self.node_name = node_name
        self.min_interval = min_interval
        self.clock = clock
        self.log = logger or structlog.get_logger()
        self._saved_at: float | None = None
        self._loaded: Objects | None = None
        self._tried = False

    # -- saving ----------------------------------------------------------------------
    def save_if_due(self, manifests: Callable[[], Sequence[Mapping[str, Any]]]) -> bool:
        """Save now if nothing was saved yet or ``min_interval`` has passed."""
        now = self.clock()
        if self._saved_at is not None and now - self._saved_at < self.min_interval:
            return False
        return self.save(manifests)

    def save(self, manifests: Callable[[], Sequence[Mapping[str, Any]]]) -> bool:
        """Save now, whatever the interval (the agent stopping: the next one starts on
        this copy if the API server does not answer it)."""
        self._saved_at = self.clock()
        doc = {"version": FORMAT_VERSION, "node": self.node_name, "savedAt": time.time(),
               "objects": list(manifests())}
        try:
            atomic_write(self.path, json.dumps(doc, separators=(",", ":")).encode())
        except (OSError, TypeError, ValueError) as err:
            self.log.warning("could not save the objects for a start without the API",
                             path=self.path, error=str(err))
            return False
        return True

    # -- loading ---------------------------------------------------------------------
    def objects(self) -> Objects | None:
        """The saved objects (read once), or None when there are none usable."""
        if not self._tried:
            self._tried = True
            self._loaded = self._load()
        return self._loaded

    def _load(self) -> Objects | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            self.log.warning("saved objects unreadable", path=self.path, error=str(err))
            return None
        why = _unusable(doc, self.node_name)
        if why is not None:
            self.log.warning("saved objects not used", path=self.path, why=why)
            return None
        objects = build_objects(doc["objects"], self.node_name)
        if objects is not None:
            self.log.warning(
                "no objects from the API server yet (starting, or not answering): acting on "
                f"the objects saved {_age(doc.get('savedAt'))} (throttling only, nothing "
                "handed back) until the watches sync",
                path=self.path, pods=len(objects.pods),
                policies=len(objects.policies.policies),
            )  # fmt: skip
        return objects


def _unusable(doc: object, node_name: str) -> str | None:
    """Why a saved file is not this node's copy in this format (None: it is)."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if doc.get("version") != FORMAT_VERSION:
        return f"format version {doc.get('version')!r}, this agent reads {FORMAT_VERSION}"
    if doc.get("node") != node_name:
        return f"saved on node {doc.get('node')!r}, this is {node_name!r}"
    if not isinstance(doc.get("objects"), list):
        return "no list of objects"
    return None


def _age(saved_at: object) -> str:
    """How long ago a copy was saved, in words; a missing or garbled time says so."""
    try:
        seconds = time.time() - float(saved_at)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "at an unknown time"
    if not math.isfinite(seconds) or seconds < 0:
        return "at an unknown time"
    return f"{seconds:.0f} s ago"


def build_objects(manifests: Sequence[object], node_name: str) -> Objects | None:
    """Objects from slim manifests; None without the node. Objects that do not parse
    any more (a newer format) are skipped."""
    store = ObjectStore()
    for index, raw in enumerate(manifests):
        try:
            store.add(raw, f"saved[{index}]")
        except (InvalidObject, ValueError, TypeError, KeyError, AttributeError):
            continue
    node = store.nodes.get(node_name)
    if node is None:
        return None
    policies = load_policies(store.raw.get(POLICY_KIND, []), store.raw.get(ACTION_KIND, []))
    labels = partial(namespace_labels, store.namespaces)
    pods = tuple(p for p in store.pods if p.node_name == node_name)
    return Objects(node, pods, policies, labels, origin="saved")
