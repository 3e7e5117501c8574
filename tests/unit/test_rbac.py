"""RBAC is exactly the calls in code (issue 11): every program's access table (built from
its own watch lists, lease and ``@calls`` rows, and checked on every request it sends)
against the Roles and ClusterRoles deploy/rbac.yaml binds to its service account, both
ways. The runtime side (the code makes no call outside its table) is
tests/integration/test_access_tables.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agent import defaults
from agent.cluster.access import controller_access
from agent.kube.access import AccessTable, Permission, call_of, grant
from agent.kube.resources import CONFIGMAPS, NODES, PODS
from agent.node.access import agent_access
from devtools import rbac

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "deploy" / "rbac.yaml"


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def granted(account: str, docs: list[dict[str, Any]] | None = None) -> set[Permission]:
    """What the Roles bound to ``account`` grant, one Permission per group, resource,
    verb, name and namespace ("" = cluster-wide)."""
    docs = _docs() if docs is None else docs
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}  # fmt: skip
    out: set[Permission] = set()
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subject = {"kind": "ServiceAccount", "name": account, "namespace": defaults.NAMESPACE}
        if subject not in binding["subjects"]:
            continue
        namespace = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            out.add(Permission(group, resource, verb, namespace, name))
    return out


def diff(table: AccessTable, rules: set[Permission]) -> list[str]:
    declared = set(table.permissions)
    missing = sorted(declared - rules)
    unused = sorted(rules - declared)
    return [f"{table.program} calls but deploy/rbac.yaml does not grant: {p}" for p in missing] + [
        f"deploy/rbac.yaml grants {table.program} what its code never calls "
        f"({table.declared_in}): {p}"
        for p in unused
    ]


@pytest.mark.parametrize(
    ("table", "account"),
    [(agent_access(), "waterline-agent"), (controller_access(), "waterline-controller")],
    ids=["agent", "controller"],
)
def test_rbac_grants_exactly_the_calls_in_code(table: AccessTable, account: str) -> None:
    problems = diff(table, granted(account))
    assert not problems, "\n".join(problems)


def test_a_drift_either_way_fails_naming_the_call() -> None:
    """A call added to the code without RBAC, or a rule left behind, is named."""
    docs = _docs()
    table = controller_access()
    extra = AccessTable(table.program, table.declared_in,
                        [*table.permissions, grant(PODS, "create")])  # fmt: skip
    assert diff(extra, granted("waterline-controller", docs)) == [
        "waterline-controller calls but deploy/rbac.yaml does not grant: create pods"
    ]
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "waterline-controller")
    role["rules"].append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["update"]})
    assert diff(table, granted("waterline-controller", docs)) == [
        "deploy/rbac.yaml grants waterline-controller what its code never calls "
        "(agent/cluster/access.py): update nodes"
    ]


def test_an_undeclared_call_is_refused_before_it_is_sent() -> None:
    table = agent_access()
    table.check("PATCH", NODES.path(None, "node-1"))
    with pytest.raises(Exception, match="may not delete pods in namespace demo") as err:
        table.check("DELETE", PODS.path("demo", "hog"))
    assert "agent/node/access.py" in str(err.value) and "deploy/rbac.yaml" in str(err.value)
    assert getattr(err.value, "status", None) == 403
    assert table.refused == [Permission("", "pods", "delete", "demo", "hog")]


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/pods", [], Permission("", "pods", "list")),
        ("GET", "/api/v1/pods", [("watch", "true")], Permission("", "pods", "watch")),
        ("GET", "/api/v1/namespaces/demo", [], Permission("", "namespaces", "get", "", "demo")),
        ("POST", "/api/v1/namespaces/d/pods/p/eviction", [], Permission("", "pods/eviction", "create", "d", "p")),
        ("PATCH", "/apis/qos.waterline.io/v1alpha1/podmigrationjobs/j/status", [],
         Permission("qos.waterline.io", "podmigrationjobs/status", "patch", "", "j")),
        ("POST", "/api/v1/namespaces/waterline-system/configmaps", [],
         Permission("", "configmaps", "create", "waterline-system")),
        ("GET", "/api/v1/namespaces/waterline-system/configmaps",
         [("fieldSelector", "metadata.name=waterline-brake"), ("watch", "true")],
         Permission("", "configmaps", "watch", "waterline-system", "waterline-brake")),
    ],
)  # fmt: skip
def test_requests_map_to_the_permission_the_api_server_checks(
    method: str, path: str, query: list[tuple[str, str]], expected: Permission
) -> None:
    assert call_of(method, path, query) == expected


def test_the_brake_is_readable_by_every_agent_and_writable_only_by_the_controller() -> None:
    brake = ("", "configmaps")
    agent = {p.verb for p in granted("waterline-agent") if (p.group, p.resource) == brake}
    controller = {p.verb for p in granted("waterline-controller") if (p.group, p.resource) == brake}
    assert agent == {"get", "list", "watch"}
    assert controller == {"create", "list", "watch", "patch", "delete"}
    named = {p.name for p in granted("waterline-agent") if p.resource == CONFIGMAPS.plural}
    assert named == {defaults.BRAKE_CONFIGMAP}


def test_each_program_runs_as_its_service_account() -> None:
    docs = [d for p in sorted((ROOT / "deploy").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    accounts = {d["kind"]: d["spec"]["template"]["spec"]["serviceAccountName"]
                for d in docs if d["kind"] in ("DaemonSet", "Deployment")}  # fmt: skip
    assert accounts == {"DaemonSet": "waterline-agent", "Deployment": "waterline-controller"}


# -- the rules are written from the tables (devtools/rbac.py, `make chart`) ----------------


def test_a_hand_edited_rule_is_written_back_from_the_table() -> None:
    text = RBAC.read_text()
    edited = text.replace("  verbs: [create, patch]\n", "  verbs: [create, patch, delete]\n", 1)
    assert edited != text
    assert rbac.rewrite(edited, "deploy/rbac.yaml") == text


def test_a_grant_no_role_takes_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    roles = {n: r for n, r in rbac.NAMESPACED_ROLES.items() if n != "waterline-agent-brake"}
    monkeypatch.setattr(rbac, "NAMESPACED_ROLES", {**roles, "waterline-agent-brake": ("agent", frozenset())})
    with pytest.raises(rbac.RbacError, match="configmaps in namespace waterline-system named waterline-brake"):
        rbac.rewrite(RBAC.read_text(), "deploy/rbac.yaml")


def test_rules_are_the_fewest_that_grant_exactly_the_table() -> None:
    """One rule per group, name and verb set; what it grants is the table, both ways."""
    for table in (agent_access(), controller_access()):
        made = rbac.rules(table.permissions)
        keys = [(r.group, r.name, r.verbs) for r in made]
        assert len(keys) == len(set(keys))
        granted_back = {Permission(r.group, res, v, "", r.name) for r in made for res in r.resources for v in r.verbs}
        assert granted_back == {Permission(p.group, p.resource, p.verb, "", p.name) for p in table.permissions}
