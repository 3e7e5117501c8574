"""``kubectl apply -k deploy/`` on the real cluster, as a user installs Waterline.

It is accepted whole: every object of the kustomization is on the server (the CRDs
Established with their structural schemas and CEL rules compiled, RBAC, the
ValidatingAdmissionPolicy type-checked and bound, the workloads); applied again, nothing
changes. With the controller running, ``kubectl get nqp`` shows VALID and NODES filled in.
An invalid policy or action is refused by the server's own validation (the CRD's schema
and CEL rules) with the field named, before any Waterline code sees it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from agent.kube.resources import ACTIONS, POLICIES
from devtools.harness.cluster import ROOT, RealCluster, unique
from devtools.harness.waiting import wait_until
from tests.integration.controller_env import Made, replicas

pytestmark = pytest.mark.integration


def kustomization(kube: RealCluster) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k deploy/`` applies."""
    out = kube.kubectl("kustomize", str(ROOT / "deploy")).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_apply_k_deploy_is_accepted_whole(kube: RealCluster) -> None:
    objects = kustomization(kube)
    # The run's fixture applied it on a fresh cluster; applied again it changes nothing.
    again = kube.kubectl("apply", "-k", str(ROOT / "deploy")).stdout.splitlines()
    assert len(again) == len(objects)
    assert all(line.endswith((" unchanged", " configured")) for line in again), again
    for obj in objects:
        where = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
        kind = f"{obj['kind'].lower()}.{obj['apiVersion'].rsplit('/', 1)[0]}" if "/" in obj["apiVersion"] else obj["kind"].lower()
        kube.kubectl("get", kind, obj["metadata"]["name"], *where, "-o", "name")

    print("\nCRDs on the real server:")
    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        served = json.loads(kube.kubectl("get", "crd", crd["metadata"]["name"], "-o", "json").stdout)
        conditions = {c["type"]: c["status"] for c in served["status"]["conditions"]}
        assert conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"
        assert "NonStructuralSchema" not in conditions  # a structural schema
        assert served["status"]["acceptedNames"]["kind"] == crd["spec"]["names"]["kind"]
        # its CEL rules were compiled when it was created (a rule that does not compile,
        # or costs too much, is refused then), and kept as written
        rules = cel_rules(served["spec"]["versions"][0]["schema"])
        assert rules == cel_rules(crd["spec"]["versions"][0]["schema"])
        print(f"  {crd['metadata']['name']}: Established, {len(rules)} CEL rules")

    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    served = json.loads(kube.kubectl("get", "validatingadmissionpolicy",
                                     policy["metadata"]["name"], "-o", "json").stdout)  # fmt: skip
    wait_until(lambda: (served_status(kube, policy["metadata"]["name"]) or {}).get("observedGeneration")
               == served["metadata"]["generation"], 30, "the policy type-checked")  # fmt: skip
    checked = served_status(kube, policy["metadata"]["name"]) or {}
    assert not checked.get("typeChecking", {}).get("expressionWarnings"), checked
    (binding,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    bound = json.loads(kube.kubectl("get", "validatingadmissionpolicybinding",
                                    binding["metadata"]["name"], "-o", "json").stdout)  # fmt: skip
    assert bound["spec"]["policyName"] == policy["metadata"]["name"]
    assert bound["spec"]["validationActions"] == ["Deny"]
    print(f"  {policy['metadata']['name']}: type-checked without warnings, bound (Deny)")


def served_status(kube: RealCluster, name: str) -> dict[str, Any] | None:
    out = kube.kubectl("get", "validatingadmissionpolicy", name, "-o", "json").stdout
    status: dict[str, Any] | None = json.loads(out).get("status")
    return status


def cel_rules(schema: Any) -> list[str]:
    """Every x-kubernetes-validations rule in a CRD version's schema."""
    found: list[str] = []
    if isinstance(schema, dict):
        found += [r["rule"] for r in schema.get("x-kubernetes-validations", [])]
        for value in schema.values():
            found += cel_rules(value)
    elif isinstance(schema, list):
        for value in schema:
            found += cel_rules(value)
    return sorted(found)


def test_get_nqp_shows_valid_and_nodes_with_the_controller_running(
    kube: RealCluster, made: Made
) -> None:
    pool = unique("pool")
    for _ in range(2):
        kube.node(labels={"pool": pool})
    action, name = unique("throttle"), unique("guard")
    made.add(ACTIONS, {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "AvoidanceAction",
                       "metadata": {"name": action},
                       "spec": {"throttle": {"cpuThrottle": {"minCPURatio": 10}}}})  # fmt: skip
    made.add(POLICIES, {"apiVersion": "qos.waterline.io/v1alpha1", "kind": "NodeQOSEnsurancePolicy",
                        "metadata": {"name": name},
                        "spec": {"nodeSelector": {"matchLabels": {"pool": pool}},
                                 "objectiveEnsurances": [{"name": "cpu", "actionName": action,
                                                          "metricRule": {"name": "cpu_total_usage", "value": "6"}}]}})  # fmt: skip
    with replicas(kube, 1):
        wait_until(lambda: columns(kube, "nqp", name)[1:3] == ["True", "2"], 60, "VALID and NODES")
    header, row = kube.kubectl("get", "nqp", name).stdout.splitlines()
    print(f"\nkubectl get nqp {name}:\n{header}\n{row}")
    assert header.split()[:4] == ["NAME", "VALID", "NODES", "RULES"]
    assert row.split()[:4] == [name, "True", "2", "cpu"]
    assert columns(kube, "avoidanceaction", action)[:3] == [action, "True", "2"]


def columns(kube: RealCluster, kind: str, name: str) -> list[str]:
    lines = kube.kubectl("get", kind, name, "--no-headers").stdout.splitlines()
    return lines[0].split() if lines else []


INVALID = [
    pytest.param(
        "NodeQOSEnsurancePolicy",
        {"objectiveEnsurances": [{"name": "cpu", "actionName": "x",
                                  "metricRule": {"name": "cpu_total_usage", "value": "-1"}}]},
        "spec.objectiveEnsurances[0].metricRule.value", id="negative-value",
    ),
    pytest.param(
        "NodeQOSEnsurancePolicy",
        {"objectiveEnsurances": [{"name": "cpu", "actionName": "x",
                                  "metricRule": {"name": "cpu_total_usag", "value": "6"}}]},
        "spec.objectiveEnsurances[0].metricRule.name", id="unknown-metric",
    ),
    pytest.param(
        "NodeQOSEnsurancePolicy",
        {"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]},
         "objectiveEnsurances": [{"name": "cpu", "actionName": "x",
                                  "metricRule": {"name": "cpu_total_usage", "value": "6"}}]},
        "spec.nodeSelector.matchExpressions[0]", id="cel-in-without-values",
    ),
    pytest.param("AvoidanceAction", {"coolDownSeconds": 5}, "spec", id="cel-no-throttle-no-eviction"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "spec", "field"), INVALID)
def test_an_invalid_object_is_refused_by_the_server_naming_the_field(
    kube: RealCluster, kind: str, spec: dict[str, Any], field: str
) -> None:
    name = unique("invalid")
    manifest = {"apiVersion": "qos.waterline.io/v1alpha1", "kind": kind,
                "metadata": {"name": name}, "spec": spec}  # fmt: skip
    done = kube.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert done.returncode != 0
    print(f"\n{done.stderr.strip()}")
    assert f'"{name}" is invalid' in done.stderr and f"{field}: " in done.stderr
    assert "NotFound" in kube.kubectl("get", kind.lower(), name, check=False).stderr
