"""Local debug mode's objects: Pods, the Node, policies and actions from YAML files.

``--objects PATH`` names a file or a folder (read recursively, ``*.yaml``, ``*.yml``,
``*.json``), and may be repeated. A file holds Kubernetes manifests (several documents,
a ``kind: List``, or a plain list), or a scenario (its ``objects`` are used). The files are
re-read when one of them changes (size or mtime) or appears or goes, so editing a policy
while the agent runs takes effect on the next tick.

A path that does not exist stops the start (ValueError: the command exits 2); a typo in
``--objects`` must not start an agent that acts on nothing.

Decisions where the issue is silent:

* a file that cannot be read or parsed (garbage, not UTF-8, nested deeper than 100 levels,
  an alias bomb, larger than 64 MiB: see ``agent.documents``) is named in the log and
  counted as an invalid ``file``; every other file keeps acting. A file that was good
  before keeps its last good content: a half-saved edit must not make every policy
  vanish and restore every pod;
* an invalid object is skipped and reported; every other object keeps working;
* pods without ``spec.nodeName`` are taken as this node's (hand-written local files rarely
  bind pods);
* no Node object with the chosen name: a Node is made from this host (its CPUs and
  memory, label ``kubernetes.io/hostname``), so policies without a node selector apply.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from agent.documents import DocumentError, load_json, load_yaml_all
from agent.errors import InvalidObject
from agent.model.objects import Node, namespace_labels
from agent.model.policy import ACTION_KIND, POLICY_KIND, load_policies
from agent.model.store import ObjectStore
from agent.node.loop import Objects
from collectors.node_stats import parse_meminfo, parse_proc_stat

SUFFIXES = (".yaml", ".yml", ".json")
#: A node's objects fit in far less; a bigger file is a mistake (a log, a disk image).
MAX_FILE_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class _Parsed:
    signature: tuple[int, int]
    objects: tuple[Any, ...]


def object_files(paths: Sequence[str]) -> list[str]:
    """The files of ``paths``: a file as given, a folder's manifests (recursively, sorted,
    hidden ones left out)."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                out.extend(
                    os.path.join(root, n)
                    for n in sorted(names)
                    if n.endswith(SUFFIXES) and not n.startswith(".")
                )
        else:
            out.append(path)
    return out


def read_objects_file(path: str) -> list[Any]:
    """The documents of one file: YAML, or one JSON document for ``*.json`` (read by the
    standard library under our own depth bound, as a scenario's JSON is, not by the YAML
    parser, whose own bounds differ between PyYAML releases). Raises OSError or
    DocumentError with the reason; a hostile file is refused before it is parsed."""
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise DocumentError(f"larger than {MAX_FILE_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DocumentError(f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    if path.endswith(".json"):
        return [load_json(data)]
    return load_yaml_all(text)


def documents_objects(docs: Sequence[Any]) -> list[Any]:
    """Manifests in parsed documents: plain, ``kind: List``, lists, or a scenario's objects."""
    out: list[Any] = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, list):
            out.extend(doc)
        elif isinstance(doc, dict) and "kind" not in doc and isinstance(doc.get("objects"), list):
            out.extend(doc["objects"])
        elif isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def host_resources(proc_root: str = "/proc") -> tuple[float, float]:
    """This host's online CPUs and total memory (bytes), from ``proc_root``."""
    cpus = float(os.cpu_count() or 1)
    memory = 0.0
    try:
        with open(os.path.join(proc_root, "stat"), encoding="ascii", errors="replace") as f:
            cpus = float(parse_proc_stat(f.read()).cpus)
        with open(os.path.join(proc_root, "meminfo"), encoding="ascii", errors="replace") as f:
            memory = float(parse_meminfo(f.read()).get("MemTotal", 0))
    except (OSError, ValueError):
        pass
    return cpus, memory


def host_node(name: str, proc_root: str = "/proc") -> Node:
    """A Node standing for this host: its online CPUs and total memory."""
    cpus, memory = host_resources(proc_root)
    resources = {"cpu": cpus, "memory": memory, "pods": 110.0}
    return Node(
        name=name,
        labels={"kubernetes.io/hostname": name},
        allocatable=dict(resources),
        capacity=dict(resources),
    )


class FileObjectSource:
    """Callable returning the current :class:`Objects`; re-reads files that changed."""

    def __init__(
        self, paths: Sequence[str], node_name: str | None = None, proc_root: str = "/proc"
    ) -> None:
        if not paths:
            raise ValueError("local mode needs at least one --objects PATH")
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise ValueError(f"--objects {missing[0]}: no such file or directory")
        self.paths = list(paths)
        self.proc_root = proc_root
        self._wanted = node_name
        self._parsed: dict[str, _Parsed] = {}
        self._signature: tuple[tuple[str, tuple[int, int]], ...] | None = None
        self._objects: Objects | None = None
        self.node_name = node_name or ""
        self._unreadable: set[str] = set()
        #: path -> why it could not be parsed (kept until it parses or goes)
        self.bad_files: dict[str, str] = {}
        self.log = structlog.get_logger()
        self()  # read once now: resolves the node name and reports bad files at start

    def _read_file(self, path: str, signature: tuple[int, int]) -> None:
        try:
            docs = read_objects_file(path)
        except (OSError, DocumentError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            self.bad_files[path] = reason
            kept = path in self._parsed
            self.log.error(
                "objects file skipped" if not kept else "objects file unreadable",
                code="objects-file-skipped" if not kept else "objects-file-unreadable",
                path=path,
                error=reason,
                kept="its last good content" if kept else "nothing of it",
            )
            return
        self.bad_files.pop(path, None)
        self._parsed[path] = _Parsed(signature, tuple(documents_objects(docs)))

    def __call__(self) -> Objects:
        files = object_files(self.paths)
        signature = []
        unreadable = set()
        for path in files:
            try:
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
                    raise OSError(errno.EINVAL, "not a regular file")
            except OSError as err:
                unreadable.add(path)
                if path not in self._unreadable:  # once, not every tick
                    self.log.error("objects file unreadable", code="objects-file-unreadable", path=path, error=str(err))
                continue
            signature.append((path, (st.st_mtime_ns, st.st_size)))
        self._unreadable = unreadable
        key = tuple(signature)
        if self._objects is not None and key == self._signature:
            return self._objects
        for path, sig in signature:
            known = self._parsed.get(path)
            if known is None or known.signature != sig:
                self._read_file(path, sig)
        present = {p for p, _ in signature}
        for gone in [p for p in self._parsed if p not in present]:
            del self._parsed[gone]
        for gone in [p for p in self.bad_files if p not in present]:
            del self.bad_files[gone]
        self._signature = key
        self._objects = self._build()
        return self._objects

    def manifests(self) -> list[Any]:
        """Every object of the files as last read (a file that stopped parsing: its last
        good content), in file order."""
        return [raw for parsed in self._parsed.values() for raw in parsed.objects]

    def _build(self) -> Objects:
        store = ObjectStore()
        invalid: dict[str, int] = {}
        if self.bad_files or self._unreadable:
            invalid["file"] = len(self.bad_files) + len(self._unreadable)
        for path, parsed in self._parsed.items():
            for index, raw in enumerate(parsed.objects):
                try:
                    store.add(raw, f"{path}[{index}]")
                except (InvalidObject, ValueError, TypeError, KeyError, AttributeError) as err:
                    kind = raw.get("kind") if isinstance(raw, dict) else None
                    invalid[str(kind or "object")] = invalid.get(str(kind or "object"), 0) + 1
                    self.log.error("invalid object skipped", path=path, index=index, error=str(err))
        policies = load_policies(store.raw.get(POLICY_KIND, []), store.raw.get(ACTION_KIND, []), strict=True)
        for bad in policies.errors:
            self.log.error("invalid policy or action", code="invalid-object", error=str(bad))
        node = self._node(store)
        pods = tuple(p for p in store.pods if p.node_name in ("", node.name))
        self.log.info(
            "objects loaded",
            files=len(self._parsed),
            node=node.name,
            pods=len(pods),
            policies=len(policies.policies),
            actions=len(policies.actions),
            invalid=sum(invalid.values()) + len(policies.errors),
        )
        labels = partial(namespace_labels, store.namespaces)
        return Objects(node, pods, policies, labels, invalid)

    def _node(self, store: ObjectStore) -> Node:
        if not self.node_name:
            nodes = list(store.nodes)
            self.node_name = nodes[0] if len(nodes) == 1 else socket.gethostname()
        node = store.nodes.get(self.node_name)
        if node is None:
            self.log.warning(
                "no Node object with this name: using this host's CPUs and memory",
                node=self.node_name,
            )
            node = host_node(self.node_name, self.proc_root)
        return node
