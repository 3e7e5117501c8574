"""What each program may ask of the API server: its access table, checked on every request.

The calls are scattered over the code; RBAC must grant exactly them. So every program
declares its calls once, as ``Permission`` rows
(group, resource[/subresource], verb, namespace, name) built from the resource table of
``agent.kube.resources`` (``grant``, ``watches``), and its ``KubeApi`` carries that
``AccessTable``: a request the table does not declare is refused *before it is sent*
with ``UndeclaredCall`` (a 403, as RBAC would answer), whose message names the call and
the file to declare it in. The RBAC rules of deploy/ and of the chart are written from
these tables (`make chart`, devtools/rbac.py), so adding a call is one row and
`make chart`; ``tests/unit/test_rbac.py`` compares every table with the Roles bound to
the program's service account, both ways, and a hand-edited rule fails
tests/unit/test_chart.py.

The mapping from HTTP to RBAC is the API server's: GET of a name = get, of a collection
= list (``watch=true``: watch), POST = create, PUT = update, PATCH = patch, DELETE =
delete; a list or watch with ``fieldSelector=metadata.name=X`` is authorized against
``resourceNames: [X]``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from agent.kube.errors import KubeForbidden
from agent.kube.resources import Resource

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
_METHOD_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True, slots=True, order=True)
class Permission:
    """One RBAC grant: ``namespace`` "" is cluster-wide (a ClusterRole), else a Role in
    that namespace; ``name`` "" is any object, else ``resourceNames: [name]``."""

    group: str
    resource: str  # plural, or plural/subresource
    verb: str
    namespace: str = ""
    name: str = ""
    why: str = field(default="", compare=False)

    def covers(self, call: Permission) -> bool:
        return (
            (self.group, self.resource, self.verb) == (call.group, call.resource, call.verb)
            and self.namespace in ("", call.namespace)
            and self.name in ("", call.name)
        )

    def __str__(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        named = f" named {self.name}" if self.name else ""
        group = f".{self.group}" if self.group else ""
        return f"{self.verb} {self.resource}{group}{where}{named}"


def grant(
    resource: Resource,
    verb: str,
    subresource: str = "",
    *,
    namespace: str = "",
    name: str = "",
    why: str = "",
) -> Permission:
    if verb not in VERBS:
        raise ValueError(f"unknown verb {verb!r}")
    plural = f"{resource.plural}/{subresource}" if subresource else resource.plural
    return Permission(resource.group, plural, verb, namespace, name, why)


def watches(
    resources: Iterable[Resource], *, namespace: str = "", name: str = ""
) -> list[Permission]:
    """list + watch of each resource (what a reflector does)."""
    return [
        grant(r, verb, namespace=namespace, name=name, why="watched")
        for r in resources
        for verb in ("list", "watch")
    ]


def call_of(method: str, path: str, query: Sequence[tuple[str, str]] = ()) -> Permission:
    """The RBAC permission an HTTP request needs (as the API server's authorizer sees it)."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise ValueError(f"not a resource path: {path}")
    plural, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    params = dict(query)
    if method == "GET":
        verb = "get" if name else ("watch" if params.get("watch") in ("true", "1") else "list")
        selector = params.get("fieldSelector", "")
        if not name and selector.startswith("metadata.name=") and "," not in selector:
            name = selector.removeprefix("metadata.name=")
    else:
        verb = _METHOD_VERB.get(method, method.lower())
        if verb == "delete" and not name:
            verb = "deletecollection"
        if verb == "create" and not sub:
            name = ""  # RBAC cannot restrict create by name
    resource = f"{plural}/{sub}" if sub else plural
    return Permission(group, resource, verb, namespace, name)


class UndeclaredCall(KubeForbidden):
    """The program asked for something its access table does not declare (so RBAC would
    not grant it either): refused before sending, as a 403."""


class AccessTable:
    """A program's declared calls; ``check`` refuses the undeclared ones and keeps them
    in ``refused`` (tests assert it stays empty)."""

    def __init__(self, program: str, declared_in: str, permissions: Iterable[Permission]) -> None:
        self.program, self.declared_in = program, declared_in
        self.permissions = tuple(sorted(set(permissions)))
        self.refused: list[Permission] = []
        self._lock = threading.Lock()

    def allows(self, call: Permission) -> bool:
        return any(p.covers(call) for p in self.permissions)

    def check(self, method: str, path: str, query: Sequence[tuple[str, str]] = ()) -> None:
        call = call_of(method, path, query)
        if self.allows(call):
            return
        with self._lock:
            self.refused.append(call)
        raise UndeclaredCall(
            f"{self.program} may not {call} ({method} {path}): the call is not in its access "
            f"table ({self.declared_in}); declare it there, and `make chart` writes its rule "
            f"into deploy/rbac.yaml and the chart",
            status=403,
            reason="Forbidden",
        )


__all__ = ["AccessTable", "Permission", "UndeclaredCall", "call_of", "grant", "watches"]
