"""RBAC from the code's access tables, never by hand: the ``rules:`` of every Role and
ClusterRole in deploy/rbac.yaml and in the chart's RBAC templates are written from
agent/node/access.py and agent/cluster/access.py (the tables each program's ``KubeApi``
checks every request against) by `make chart` (devtools/chart.py), and its ``--check``,
run by tests/unit/test_chart.py, fails on a hand edit.

Adding an API call is then one row in the program's access table and `make chart`. The
rest of each RBAC object (its name, labels, binding, the comment above it) is written by
hand, once in deploy/rbac.yaml and once, templated, in the chart: that is what
tests/unit/test_chart.py compares by rendering.

Which Role a grant goes to: a cluster-wide grant (namespace "") to the program's
ClusterRole (the one labelled with its component); a grant in Waterline's namespace to
the Role that ``NAMESPACED_ROLES`` names for its resource. A grant no Role takes is an
error naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agent.cluster.access import controller_access
from agent.kube.access import VERBS, AccessTable, Permission
from agent.node.access import agent_access

#: The component label of each program's RBAC objects -> its access table.
TABLES: dict[str, Callable[[], AccessTable]] = {"agent": agent_access, "controller": controller_access}
#: A namespaced Role's name -> its program's component and the resources it grants (None:
#: every namespaced grant of that program no other Role takes).
NAMESPACED_ROLES: dict[str, tuple[str, frozenset[str] | None]] = {
    "waterline-agent-brake": ("agent", frozenset({"configmaps"})),
    "waterline-agent-self": ("agent", frozenset({"daemonsets"})),
    "waterline-controller": ("controller", None),
}
_KIND = re.compile(r"^kind: (\w+)\s*$", re.MULTILINE)
_COMPONENT = re.compile(r"^\s+app\.kubernetes\.io/component: (\S+)\s*$", re.MULTILINE)
_NAME = re.compile(r"^metadata:\n  name: (\S+)\s*$", re.MULTILINE)


class RbacError(ValueError):
    """An access table or an RBAC file the generator cannot map: the message names it."""


@dataclass(frozen=True, slots=True)
class Rule:
    group: str
    resources: tuple[str, ...]
    name: str
    verbs: tuple[str, ...]
    why: tuple[str, ...]

    def lines(self) -> list[str]:
        out = [f"# {'; '.join(self.why)}"] if self.why else []
        out += [f'- apiGroups: ["{self.group}"]', f"  resources: [{', '.join(self.resources)}]"]
        if self.name:
            out.append(f"  resourceNames: [{self.name}]")
        out.append(f"  verbs: [{', '.join(self.verbs)}]")
        return out


def rules(permissions: Iterable[Permission]) -> list[Rule]:
    """The fewest RBAC rules that grant exactly ``permissions``: one per group, name and
    verb set, the resources with that same verb set together."""
    verbs: dict[tuple[str, str, str], set[str]] = {}
    why: dict[tuple[str, str, str], list[str]] = {}
    for p in permissions:
        key = (p.group, p.name, p.resource)
        verbs.setdefault(key, set()).add(p.verb)
        if p.why and p.why not in why.setdefault(key, []):
            why[key].append(p.why)
    merged: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for (group, name, resource), vs in sorted(verbs.items()):
        ordered = tuple(v for v in (*VERBS, "deletecollection") if v in vs)
        merged.setdefault((group, name, ordered), []).append(resource)
    out = []
    for (group, name, ordered), resources in merged.items():
        said: list[str] = []
        for resource in resources:
            said += [w for w in why.get((group, name, resource), []) if w not in said]
        out.append(Rule(group, tuple(resources), name, ordered, tuple(said)))
    return sorted(out, key=lambda r: (r.group, r.name, r.resources))


def _role_permissions(kind: str, component: str, name: str) -> list[Permission]:
    if kind == "ClusterRole":
        return [p for p in TABLES[component]().permissions if not p.namespace]
    if name not in NAMESPACED_ROLES:
        raise RbacError(f"Role {name} is not in devtools/rbac.py's NAMESPACED_ROLES")
    program, resources = NAMESPACED_ROLES[name]
    others = {r for n, (c, rs) in NAMESPACED_ROLES.items() if c == program and n != name and rs for r in rs}
    return [p for p in TABLES[program]().permissions if p.namespace
            and (p.resource in resources if resources is not None else p.resource not in others)]  # fmt: skip


def placed(text: str) -> dict[str, list[Permission]]:
    """The grants each Role and ClusterRole of an RBAC file takes, by "kind/component/name"."""
    out: dict[str, list[Permission]] = {}
    for doc in text.split("\n---\n"):
        kind, component, name = _identity(doc)
        if kind in ("Role", "ClusterRole"):
            out[f"{kind}/{component}/{name}"] = _role_permissions(kind, component, name)
    return out


def _identity(doc: str) -> tuple[str, str, str]:
    kind, component, name = _KIND.search(doc), _COMPONENT.search(doc), _NAME.search(doc)
    return (kind[1] if kind else "", component[1] if component else "", name[1] if name else "")


def rewrite(text: str, where: str) -> str:
    """``text`` (an RBAC file of deploy/ or a chart template, ``where``) with the rules of
    every Role and ClusterRole written from the access tables; every grant of each table
    must land in exactly one of them."""
    docs = text.split("\n---\n")
    taken: dict[str, set[Permission]] = {c: set() for c in TABLES}
    for i, doc in enumerate(docs):
        kind, component, name = _identity(doc)
        if kind not in ("Role", "ClusterRole"):
            continue
        if component not in TABLES:
            raise RbacError(f"{where}: {kind} {name} has no app.kubernetes.io/component of {sorted(TABLES)}")
        head, found, tail = doc.partition("\nrules:\n")
        if not found:
            raise RbacError(f"{where}: {kind} {name} has no rules: line")
        grants = _role_permissions(kind, component, name)
        taken[NAMESPACED_ROLES[name][0] if kind == "Role" else component].update(grants)
        end = _trailer(tail)
        body = [line for rule in rules(grants) for line in rule.lines()]
        docs[i] = head + "\nrules:\n" + "\n".join(body) + end
    for component, made in TABLES.items():
        missing = set(made().permissions) - taken[component]
        if missing and taken[component]:
            raise RbacError(f"{where}: no Role takes {component}'s grants: "
                            + ", ".join(str(p) for p in sorted(missing)))  # fmt: skip
    return "\n---\n".join(docs)


def _trailer(tail: str) -> str:
    """What follows a rules block at the end of a document (a template's ``{{- end }}``,
    the file's last newline): kept."""
    lines = tail.split("\n")
    keep = len(lines)
    while keep > 0 and (lines[keep - 1] == "" or lines[keep - 1].startswith("{{")):
        keep -= 1
    return "\n" + "\n".join(lines[keep:]) if keep < len(lines) else ""
