"""The demo's pods and the objects the agent reads about them: a Node of two CPUs, the
pods, and a policy that throttles the BestEffort pods above the waterline (the third
phase's pods and idle class: ``devtools.demo.idle``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

WATERLINE_CORES = 1.0
NODE_CORES = 2


@dataclass(frozen=True)
class DemoPod:
    name: str
    qos: str  # Guaranteed | Burstable | BestEffort
    cpu_limit: float | None  # cores
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    container_id: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)
    namespace: str = "demo"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def rel(self, kubelet_root: str) -> str:
        qos = "" if self.qos == "Guaranteed" else self.qos.lower()
        return "/".join(p for p in (kubelet_root, "kubepods", qos, f"pod{self.uid}") if p)

    def container_rel(self, kubelet_root: str) -> str:
        return f"{self.rel(kubelet_root)}/{self.container_id}"

    def manifest(self) -> dict[str, Any]:
        resources_: dict[str, Any] = {}
        if self.cpu_limit is not None:
            cpu = f"{int(self.cpu_limit * 1000)}m"
            resources_ = {
                "requests": {"cpu": cpu, "memory": "64Mi"},
                "limits": {"cpu": cpu, "memory": "64Mi"},
            }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"{self.name}-rs",
                        "uid": f"rs-{self.name}",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": "demo-node",
                "priority": 0,
                "containers": [{"name": "main", "resources": resources_}],
            },
            "status": {
                "phase": "Running",
                "qosClass": self.qos,
                "startTime": "2026-01-01T00:00:00Z",
                "containerStatuses": [
                    {"name": "main", "containerID": f"containerd://{self.container_id}"}
                ],
            },
        }


def demo_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "demo-node", "labels": {"kubernetes.io/hostname": "demo-node"}},
        "status": {"allocatable": {"cpu": str(NODE_CORES), "memory": "4Gi", "pods": "110"}},
    }


def demo_objects(pods: list[DemoPod], waterline: float = WATERLINE_CORES) -> list[dict[str, Any]]:
    node = demo_node()
    policy = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "NodeQOSEnsurancePolicy",
        "metadata": {"name": "cpu-guard"},
        "spec": {
            "objectiveEnsurances": [
                {
                    "name": "cpu-high",
                    "metricRule": {"name": "cpu_total_usage", "value": f"{waterline:g}"},
                    "avoidanceThreshold": 2,
                    "restoreThreshold": 2,
                    "actionName": "throttle-batch",
                }
            ]
        },
    }
    action = {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "AvoidanceAction",
        "metadata": {"name": "throttle-batch"},
        "spec": {
            "coolDownSeconds": 60,
            "throttle": {"cpuThrottle": {"minCPURatio": 5, "stepCPURatio": 25}},
            "scope": {"qosClasses": ["BestEffort"]},
        },
    }
    return [node, *(p.manifest() for p in pods), policy, action]
