"""The dev API server's HTTP contract, over real sockets: the official client's watch,
request bodies (chunked, too large, not JSON, contradicting the URL), field validation,
discovery in both forms, OpenAPI v3, the Table format, CRDs that come and go."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from devtools.apiserver.handler import MAX_BODY
from devtools.apiserver.testing import Running, pod, serve

pytestmark = pytest.mark.integration

CRDS = [
    yaml.safe_load(p.read_text())
    for p in sorted((Path(__file__).resolve().parents[2] / "deploy" / "crds").glob("*.yaml"))
]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
QUEUE = {
    "apiVersion": "qos.waterline.io/v1alpha1",
    "kind": "Queue",
    "metadata": {"name": "research"},
    "spec": {"weight": 2, "reclaimable": True},
}


@pytest.fixture
def env() -> Iterator[Running]:
    with serve(CRDS, refuse_invalid=True) as running:
        yield running


def call(
    env: Running,
    method: str,
    path: str,
    body: bytes | Any = None,
    headers: dict[str, str] | None = None,
    chunked: bool = False,
) -> tuple[int, Any, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", env.server.port, timeout=10)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if chunked and data is not None:
        pieces = [data[i : i + 7] for i in range(0, len(data), 7)]
        conn.request(method, path, body=iter(pieces), headers=sent, encode_chunked=True)
    else:
        conn.request(method, path, body=data, headers=sent)
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    kind = response.getheader("Content-Type") or ""
    return response.status, json.loads(raw) if "json" in kind else raw, response


def test_the_official_client_watch_receives_modified_events(env: Running) -> None:
    config.load_kube_config(str(env.kubeconfig))
    core = client.CoreV1Api()
    core.create_namespaced_pod("default", pod("web-1"))

    def relabel() -> None:
        time.sleep(0.3)
        core.patch_namespaced_pod("web-1", "default", {"metadata": {"labels": {"tier": "a"}}})

    threading.Thread(target=relabel, daemon=True).start()
    seen = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, "default", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if event["type"] == "MODIFIED":
            assert event["object"].metadata.labels == {"tier": "a"}
            stream.stop()
    assert seen == [("ADDED", "web-1"), ("MODIFIED", "web-1")]
    assert any("watch=True" in q for _, q in env.server.requests)  # what the client sends


def test_a_chunked_body_is_read(env: Running) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    code, answer, _ = call(env, "POST", "/api/v1/namespaces/default/configmaps", cm, chunked=True)
    assert code == 201 and answer["data"] == {"a": "1"}


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_413(env: Running, chunked: bool) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}}
    cm["data"] = {"blob": "x" * MAX_BODY}
    code, answer, _ = call(
        env, "POST", "/api/v1/namespaces/default/configmaps", cm, chunked=chunked
    )
    assert code == 413 and answer["reason"] == "RequestEntityTooLarge"
    assert call(env, "GET", "/api/v1/namespaces/default/configmaps/big")[0] == 404


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_without_numbers_is_refused(env: Running, constant: str) -> None:
    body = (
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":%s}' % constant.encode()
    )
    code, answer, _ = call(env, "POST", "/api/v1/namespaces/default/configmaps", body)
    assert code == 400 and f"{constant.lstrip('-')} is not valid JSON" in answer["message"]


@pytest.mark.parametrize(
    ("body", "kind", "message"),
    [
        (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":1e400}', "json",
         "1e400 is out of range for a number"),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: n}\ndata: {a: .nan}\n", "yaml",
         "body.data.a: nan is not a JSON number"),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: n}\ndata: {a: -.inf}\n", "yaml",
         "body.data.a: -inf is not a JSON number"),
    ],
)  # fmt: skip
def test_a_number_json_cannot_carry_is_refused_not_stored(
    env: Running, body: bytes, kind: str, message: str
) -> None:
    """Stored, it made every later list of the namespace's ConfigMaps a 500."""
    path = "/api/v1/namespaces/default/configmaps"
    code, answer, _ = call(env, "POST", path, body, {"Content-Type": f"application/{kind}"})
    assert code == 400 and message in answer["message"], answer
    code, listing, _ = call(env, "GET", path)
    assert code == 200 and listing["items"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"apiVersion": "v1", "kind": "Pod"}, "the kind in the data (Pod) does not match"),
        ({"apiVersion": "apps/v1", "kind": "ConfigMap"}, "the API version in the data (apps/v1)"),
        ({"metadata": {"namespace": "other"}}, "does not match the namespace sent on the request"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_a_body_contradicting_the_url_is_400(env: Running, body: Any, message: str) -> None:
    if isinstance(body, dict):
        body = {"apiVersion": "v1", "kind": "ConfigMap", **body}
        body["metadata"] = {"name": "c", **body.get("metadata", {})}
    code, answer, _ = call(env, "POST", "/api/v1/namespaces/default/configmaps", body)
    assert code == 400 and message in answer["message"]


def test_field_validation_strict_warn_and_ignore(env: Running) -> None:
    bad = pod("p")
    bad["spec"]["containers"][0]["imagee"] = "nginx"
    path = "/api/v1/namespaces/default/pods"
    code, answer, _ = call(env, "POST", path + "?fieldValidation=Strict", bad)
    assert code == 400
    assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in answer["message"]
    code, _, response = call(env, "POST", path, bad)  # the default is Warn
    assert code == 201
    assert response.getheader("Warning") == '299 - "unknown field \\"spec.containers[0].imagee\\""'
    call(env, "DELETE", path + "/p")
    code, _, response = call(env, "POST", path + "?fieldValidation=Ignore", bad)
    assert code == 201 and response.getheader("Warning") is None
    duplicated = b'{"kind":"Queue","metadata":{"name":"q"},"spec":{"weight":1,"weight":2}}'
    queues = "/apis/qos.waterline.io/v1alpha1/queues?fieldValidation=Strict"
    code, answer, _ = call(env, "POST", queues, duplicated)
    assert code == 400 and "duplicate field 'weight'" in answer["message"]


def test_a_custom_resource_is_pruned_defaulted_and_validated(env: Running) -> None:
    path = "/apis/qos.waterline.io/v1alpha1/queues"
    code, answer, response = call(env, "POST", path, {**QUEUE, "spec": {"weight": 2, "x": 1}})
    assert code == 201 and "x" not in answer["spec"]  # pruned, with a warning
    assert 'unknown field \\"spec.x\\"' in (response.getheader("Warning") or "")
    code, answer, _ = call(
        env, "POST", path, {**QUEUE, "metadata": {"name": "q"}, "spec": {"weight": 0}}
    )
    assert code == 422
    assert answer["message"].startswith('Queue.qos.waterline.io "q" is invalid: spec.weight')
    assert answer["details"]["causes"][0]["field"] == "spec.weight"
    merge = {"Content-Type": "application/merge-patch+json"}
    status = {"status": {"allocated": {"cpu": "1"}}}
    code, answer, _ = call(env, "PATCH", f"{path}/research/status", status, merge)
    assert code == 200 and answer["metadata"]["generation"] == 1  # status is not spec
    code, answer, _ = call(env, "PATCH", f"{path}/research", {"spec": {"weight": 3}}, merge)
    assert answer["spec"]["weight"] == 3 and answer["metadata"]["generation"] == 2
    assert answer["status"] == {"allocated": {"cpu": "1"}}


def test_discovery_legacy_and_aggregated(env: Running) -> None:
    code, groups, _ = call(env, "GET", "/apis")
    names = [g["name"] for g in groups["groups"]]
    for group in (
        "apps",
        "batch",
        "policy",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "events.k8s.io",
        "apiextensions.k8s.io",
        "qos.waterline.io",
    ):
        assert group in names
    _, core, _ = call(env, "GET", "/api/v1")
    pods = {r["name"]: r for r in core["resources"]}
    assert pods["pods"]["shortNames"] == ["po"] and pods["pods"]["categories"] == ["all"]
    assert (
        pods["pods/eviction"]["kind"] == "Eviction" and pods["pods/eviction"]["group"] == "policy"
    )
    _, qos, _ = call(env, "GET", "/apis/qos.waterline.io/v1alpha1")
    by_name = {r["name"]: r for r in qos["resources"]}
    assert by_name["nodeqosensurancepolicies"]["shortNames"] == ["nqp"]
    assert by_name["nodeqosensurancepolicies"]["categories"] == ["waterline"]
    for crd in CRDS:  # a status subresource where the CRD has one
        plural = crd["spec"]["names"]["plural"]
        has_status = "status" in (crd["spec"]["versions"][0].get("subresources") or {})
        assert (f"{plural}/status" in by_name) == has_status
    assert by_name["podmigrationjobs/status"]["verbs"] == ["get", "patch", "update"]
    code, aggregated, response = call(env, "GET", "/apis", headers={"Accept": AGGREGATED})
    assert response.getheader("Content-Type").startswith(
        "application/json;g=apidiscovery.k8s.io;v=v2"
    )
    assert aggregated["kind"] == "APIGroupDiscoveryList"
    apps = next(i for i in aggregated["items"] if i["metadata"]["name"] == "apps")
    deployments = next(
        r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments"
    )
    assert deployments["scope"] == "Namespaced" and deployments["shortNames"] == ["deploy"]
    assert deployments["subresources"][0]["subresource"] == "status"
    _, core_aggregated, _ = call(env, "GET", "/api", headers={"Accept": AGGREGATED})
    assert [i["versions"][0]["version"] for i in core_aggregated["items"]] == ["v1"]


def test_openapi_v3_says_every_kind_validates_fields_and_follows_crds(env: Running) -> None:
    _, root, _ = call(env, "GET", "/openapi/v3")
    for url in (p["serverRelativeURL"] for p in root["paths"].values()):
        code, doc, _ = call(env, "GET", url)
        assert code == 200
        kinds = {
            op["x-kubernetes-group-version-kind"]["kind"]
            for item in doc["paths"].values()
            for op in [item.get("patch")]
            if op and any(p["name"] == "fieldValidation" for p in op["parameters"])
        }
        schemas = {
            gvk["kind"]
            for s in doc["components"]["schemas"].values()
            for gvk in s.get("x-kubernetes-group-version-kind", [])
        }
        assert kinds and kinds == schemas, url
    qos = root["paths"]["apis/qos.waterline.io/v1alpha1"]["serverRelativeURL"]
    call(
        env,
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/queues.qos.waterline.io",
    )
    _, after, _ = call(env, "GET", "/openapi/v3")
    assert after["paths"]["apis/qos.waterline.io/v1alpha1"]["serverRelativeURL"] != qos
    code, proto, response = call(
        env,
        "GET",
        "/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    assert code == 200 and proto.startswith(b"\n\x032.0")


def test_table_of_custom_resources_has_the_crd_columns(env: Running) -> None:
    call(env, "POST", "/apis/qos.waterline.io/v1alpha1/queues", QUEUE)
    code, table, _ = call(
        env, "GET", "/apis/qos.waterline.io/v1alpha1/queues", headers={"Accept": TABLE}
    )
    assert code == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Weight",
        "Reclaimable",
        "Age",
    ]
    assert table["rows"][0]["cells"][:3] == ["research", 2, True]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_deleting_a_crd_deletes_its_objects_and_stops_serving_them(env: Running) -> None:
    path = "/apis/qos.waterline.io/v1alpha1/queues"
    call(env, "POST", path, QUEUE)
    conn = http.client.HTTPConnection("127.0.0.1", env.server.port, timeout=10)
    conn.request("GET", f"{path}?watch=1&resourceVersion={env.server.store.version}")
    stream = conn.getresponse()
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/queues.qos.waterline.io"
    assert call(env, "DELETE", crd)[0] == 200
    assert json.loads(stream.readline())["type"] == "DELETED"
    conn.close()
    assert call(env, "GET", path)[0] == 404
    assert (
        call(env, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRDS[3])[0]
        == 201
    )
    assert call(env, "GET", path)[1]["items"] == []


def test_the_test_helper_stores_what_the_schema_refuses_with_a_warning() -> None:
    with serve(CRDS) as env:  # refuse_invalid=False: tests seed invalid objects
        queue = {**QUEUE, "spec": {"weight": 0}}
        code, answer, response = call(env, "POST", "/apis/qos.waterline.io/v1alpha1/queues", queue)
        assert code == 201 and answer["spec"]["weight"] == 0
        assert "spec.weight: Invalid value: 0" in (response.getheader("Warning") or "")
