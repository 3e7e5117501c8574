"""The official client against the dev API server over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from agent.kube.client import build_api
from agent.kube.creating import create
from agent.kube.errors import KubeConflict, KubeNotFound
from agent.kube.events import EventRecorder, KubeEvents, pod_ref, policy_ref
from agent.kube.evicting import BLOCKED, EVICTED, FAILED, GONE, evict
from agent.kube.fetching import Selectors, get_object, list_objects
from agent.kube.leases import KubeLeases
from agent.kube.nodeview import start_node_view
from agent.kube.patching import merge_patch, replace
from agent.kube.resources import EVENTS, LEASES, NODES, PODS, POLICIES
from agent.kube.watching import WatchArgs
from agent.model.eviction import EvictionResult
from agent.model.objects import Pod
from devtools.apiserver.server import DevServer, Fault, read_manifests
from devtools.apiserver.testing import pdb, pod, serve
from executors.eviction import ApiEvictor
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"

POLICY = {
    "apiVersion": "qos.waterline.io/v1alpha1",
    "kind": "NodeQOSEnsurancePolicy",
    "metadata": {"name": "cpu-guard"},
    "spec": {
        "objectiveEnsurances": [
            {
                "name": "cpu-high",
                "metricRule": {"name": "cpu_total_usage", "value": "6"},
                "actionName": "throttle",
            }
        ]
    },
}
ACTION = {
    "apiVersion": "qos.waterline.io/v1alpha1",
    "kind": "AvoidanceAction",
    "metadata": {"name": "throttle"},
    "spec": {"coolDownSeconds": 300},
}
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-1", "labels": {"pool": "batch"}},
    "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
}




def test_list_pods_of_one_node_by_field_selector_paged() -> None:
    objs = [pod(f"a{i}", "node-1") for i in range(7)] + [pod(f"b{i}", "node-2") for i in range(5)]
    with serve(objs) as env:
        listing = list_objects(
            env.api, PODS, Selectors(field_selector="spec.nodeName=node-1"), page_size=3
        )
        assert sorted(i["metadata"]["name"] for i in listing.items) == [f"a{i}" for i in range(7)]
        assert all(i["kind"] == "Pod" for i in listing.items)
        assert int(listing.resource_version) >= 12
        pages = [q for m, q in env.server.requests if "continue=" in q]
        assert len(pages) == 2  # 3 + 3 + 1


def test_node_view_follows_watches_with_field_selector() -> None:
    with serve(
        [NODE, POLICY, ACTION, pod("mine"), pod("other", "node-2"), pdb("budget", {"app": "x"})]
    ) as env:
        view, informers = start_node_view(env.api, "node-1", WatchArgs(watch_timeout_seconds=5))
        try:
            wait_until(lambda: view.synced)
            assert [p.name for p in view.pods()] == ["mine"]
            node = view.node()
            assert node is not None and node.cpu_cores == 8.0
            assert [p["metadata"]["name"] for p in view.policies()] == ["cpu-guard"]
            assert [a["metadata"]["name"] for a in view.actions()] == ["throttle"]
            assert [b.name for b in view.pdbs()] == ["budget"]
            assert "default" not in view.namespaces()  # only namespaces that exist as objects
            assert view.api_reachable
            # a pod that moves onto the node appears (ADDED for the selector), one that
            # leaves disappears (DELETED for the selector)
            before = view.version
            moved = get_object(env.api, PODS, "other", "default")
            moved["spec"]["nodeName"] = "node-1"
            replace(env.api, PODS, moved)
            left = get_object(env.api, PODS, "mine", "default")
            left["spec"]["nodeName"] = "node-3"
            replace(env.api, PODS, left)
            wait_until(lambda: [p.name for p in view.pods()] == ["other"])
            assert view.version > before
            store = view.store()
            assert [p.name for p in store.pods_on("node-1")] == [
                "other"
            ] and "node-1" in store.nodes
        finally:
            informers.stop()


def test_eviction_allowed_blocked_gone_and_two_budgets() -> None:
    objs = [
        pod("free"),
        pod("web-1", labels={"app": "web"}),
        pod("web-2", labels={"app": "web"}),
        pdb("web", {"app": "web"}, minAvailable=1),
        pod("db-1", labels={"app": "db", "tier": "data"}),
        pdb("db", {"app": "db"}, maxUnavailable=1),
        pdb("data", {"tier": "data"}, maxUnavailable=1),
    ]
    with serve(objs) as env:
        assert evict(env.api, "default", "free", 30).result == EVICTED
        assert evict(env.api, "default", "web-1", 0).result == EVICTED
        blocked = evict(env.api, "default", "web-2", 0)
        assert blocked.result == BLOCKED and blocked.status == 429
        assert (
            "The disruption budget web needs 1 healthy pods and has 1 currently" in blocked.message
        )
        assert evict(env.api, "default", "free", 0).result == GONE
        two = evict(env.api, "default", "db-1", 0)
        assert (
            two.result == FAILED
            and two.status == 500
            and "more than one PodDisruptionBudget" in two.message
        )
        remaining = {i["metadata"]["name"] for i in list_objects(env.api, PODS).items}
        assert remaining == {"web-2", "db-1"}  # never deleted by a refused eviction


def test_unhealthy_pod_may_go_when_the_budget_is_otherwise_met() -> None:
    objs = [
        pod("w1", labels={"app": "w"}),
        pod("w2", labels={"app": "w"}),
        pod("sick", labels={"app": "w"}, ready=False),
        pdb("w", {"app": "w"}, minAvailable=2),
    ]
    with serve(objs) as env:
        assert evict(env.api, "default", "w1", 0).result == BLOCKED
        assert evict(env.api, "default", "sick", 0).result == EVICTED


def test_graceful_eviction_leaves_the_pod_terminating_then_gone() -> None:
    with serve([pod("slow")], grace_cap=0.3) as env:
        assert evict(env.api, "default", "slow", 30).result == EVICTED
        terminating = get_object(env.api, PODS, "slow", "default")
        assert (
            terminating["metadata"]["deletionTimestamp"]
            and terminating["metadata"]["deletionGracePeriodSeconds"] == 30
        )
        assert (
            evict(env.api, "default", "slow", 30).result == EVICTED
        )  # terminating: no budget check
        wait_until(lambda: not list_objects(env.api, PODS).items)


def test_api_evictor_maps_outcomes_and_guards_the_uid() -> None:
    with serve(
        [pod("p"), pod("q", labels={"app": "q"}), pdb("q", {"app": "q"}, minAvailable=1), pod("r")]
    ) as env:
        evictor = ApiEvictor(env.api)
        raw = get_object(env.api, PODS, "p", "default")
        stale = Pod("default", "p", "not-the-current-uid")
        # a successor with the same name is spared
        assert evictor.evict(stale, 0).result is EvictionResult.GONE
        assert (
            get_object(env.api, PODS, "p", "default")["metadata"]["uid"] == raw["metadata"]["uid"]
        )
        assert evictor.evict(Pod("default", "p", raw["metadata"]["uid"]), 0).result is (
            EvictionResult.EVICTED
        )
        assert evictor.evict(Pod("default", "q", "default/q"), 0).result is (
            EvictionResult.BLOCKED_BY_PDB
        )
        # the API's own failures: a 500 and a throttling 429 (no budget cause) are `failed`
        for status in (500, 429):
            env.server.inject(Fault("/pods/r/eviction", method="POST", status=status))
            assert evictor.evict(Pod("default", "r", "default/r"), 0).result is (
                EvictionResult.FAILED
            )


def test_stale_replace_is_a_conflict_and_merge_patch_applies() -> None:
    with serve([NODE]) as env:
        first = get_object(env.api, NODES, "node-1")
        first["metadata"]["labels"]["a"] = "1"
        updated = replace(env.api, NODES, first)
        assert int(updated["metadata"]["resourceVersion"]) > int(
            first["metadata"]["resourceVersion"]
        )
        first["metadata"]["labels"]["b"] = "2"  # still carries the old resourceVersion
        with pytest.raises(KubeConflict):
            replace(env.api, NODES, first)
        patched = merge_patch(
            env.api, NODES, "node-1", {"metadata": {"labels": {"pool": None, "c": "3"}}}
        )
        assert patched["metadata"]["labels"] == {"a": "1", "c": "3"}
        with pytest.raises(KubeNotFound):
            get_object(env.api, NODES, "node-9")
        with pytest.raises(KubeConflict):
            create(env.api, NODES, {"metadata": {"name": "node-1"}})


def test_cr_status_subresource() -> None:
    with serve([POLICY]) as env:
        patched = merge_patch(
            env.api, POLICIES, "cpu-guard", {"status": {"phase": "Valid"}}, subresource="status"
        )
        assert patched["status"] == {"phase": "Valid"}
        assert patched["metadata"]["generation"] == 1  # status writes do not bump generation
        # the main resource ignores status and bumps generation on a spec change
        body = get_object(env.api, POLICIES, "cpu-guard")
        body["status"] = {"phase": "Hacked"}
        body["spec"]["nodeSelector"] = {"matchLabels": {"pool": "batch"}}
        after = replace(env.api, POLICIES, body)
        assert after["status"] == {"phase": "Valid"} and after["metadata"]["generation"] == 2
        # and the status subresource ignores spec
        body = get_object(env.api, POLICIES, "cpu-guard")
        body["spec"] = {}
        body["status"] = {"phase": "Invalid", "message": "x"}
        after = replace(env.api, POLICIES, body, subresource="status")
        assert after["spec"]["nodeSelector"] and after["status"]["phase"] == "Invalid"


def test_events_are_created_and_aggregated_through_the_api() -> None:
    with serve([pod("p")]) as env:
        recorder = EventRecorder(KubeEvents(env.api), "waterline-agent", "node-1")
        target = pod_ref(Pod("default", "p", "uid-p"))
        for _ in range(3):
            recorder.record(target, "Normal", "Throttled", "cpu capped at 0.5 cores")
        recorder.record(
            policy_ref("cpu-guard"),
            "Warning",
            "InvalidPolicy",
            "spec.objectiveEnsurances[0].actionName: no such action",
        )
        events = list_objects(env.api, EVENTS).items
        by_reason = {e["reason"]: e for e in events}
        assert set(by_reason) == {"Throttled", "InvalidPolicy"}
        assert (
            by_reason["Throttled"]["count"] == 3
            and by_reason["Throttled"]["involvedObject"]["name"] == "p"
        )
        assert by_reason["InvalidPolicy"]["metadata"]["namespace"] == "default"


def test_leases_create_renew_and_conflict() -> None:
    with serve() as env:
        leases = KubeLeases(env.api, "kube-system", "waterline", timeout=2.0)
        assert leases.get() is None
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "waterline", "namespace": "kube-system"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        }
        created = leases.create(lease)
        with pytest.raises(KubeConflict):
            leases.create(lease)
        created["spec"]["holderIdentity"] = "b"
        leases.replace(created)
        with pytest.raises(KubeConflict):  # same (now stale) resourceVersion
            leases.replace(created)
        assert (
            get_object(env.api, LEASES, "waterline", "kube-system")["spec"]["holderIdentity"] == "b"
        )


def test_watch_from_a_compacted_version_gets_410_and_bookmarks_flow() -> None:
    with serve([pod("a")], bookmark_interval=0.05) as env:
        old = list_objects(env.api, PODS).resource_version
        create(env.api, PODS, pod("b"))
        env.server.store.compact()
        stream = env.api.stream(
            PODS.path(), [("watch", "true"), ("resourceVersion", old), ("timeoutSeconds", "2")], 5
        )
        (line,) = list(stream)
        assert b'"ERROR"' in line and b"410" in line
        now = list_objects(env.api, PODS).resource_version
        stream = env.api.stream(
            PODS.path(),
            [
                ("watch", "true"),
                ("resourceVersion", now),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", "1"),
            ],
            5,
        )
        assert any(b'"BOOKMARK"' in line for line in stream)


def test_dev_apiserver_command_loads_objects_and_writes_a_kubeconfig(tmp_path: Path) -> None:
    manifests = tmp_path / "objects"
    manifests.mkdir()
    (manifests / "a.yaml").write_text(
        yaml.safe_dump_all(
            [NODE, {"apiVersion": "v1", "kind": "List", "items": [pod("x"), POLICY]}]
        )
    )
    action = {**ACTION, "spec": {"coolDownSeconds": 300, "eviction": {}}}  # the CRD's rule
    (manifests / "b.json").write_text(json.dumps(action))
    (manifests / "notes.txt").write_text("not a manifest: ignored")
    assert [o["kind"] for o in read_manifests(manifests)] == [
        "Node",
        "Pod",
        "NodeQOSEnsurancePolicy",
        "AvoidanceAction",
    ]
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devtools",
            "dev-apiserver",
            "--port",
            "0",
            "--objects",
            str(manifests),  # before the CRDs it needs: CRDs are created first
            "--objects",
            str(CRDS),
            "--kubeconfig-out",
            kubeconfig.name,  # relative, as a user types it: printed absolute
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "NOT for production" in banner and "9 objects" in banner  # 5 CRDs + 4
        assert proc.stdout.readline().strip() == f"export KUBECONFIG={kubeconfig}"
        api = build_api(str(kubeconfig))
        assert [
            i["metadata"]["name"]
            for i in list_objects(api, PODS, Selectors(field_selector="spec.nodeName=node-1")).items
        ] == ["x"]
        assert [p["metadata"]["name"] for p in list_objects(api, POLICIES).items] == ["cpu-guard"]
        api.close()
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("a: [", "bad.yaml: not valid YAML/JSON"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {}\n",
            "bad.yaml document 1: metadata.name is required",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: .nan}\n",
            "is not a JSON number",
        ),
        (
            yaml.safe_dump(POLICY),
            "bad.yaml: NodeQOSEnsurancePolicy cpu-guard: no resource serves kind",
        ),
    ],
)
def test_dev_apiserver_command_names_a_bad_manifest(
    tmp_path: Path, content: str, complaint: str
) -> None:
    (tmp_path / "bad.yaml").write_text(content)
    done = subprocess.run(
        [sys.executable, "-m", "devtools", "dev-apiserver", "--objects", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert complaint in done.stderr and "Traceback" not in done.stderr


def test_server_stop_ends_open_watches() -> None:
    server = DevServer().start()
    try:
        done = threading.Event()

        def watch() -> None:
            with urllib.request.urlopen(
                f"{server.url}/api/v1/pods?watch=true&timeoutSeconds=30", timeout=10
            ) as r:
                r.read()
            done.set()

        threading.Thread(target=watch, daemon=True).start()
        time.sleep(0.1)
    finally:
        server.stop()
    assert done.wait(5)
