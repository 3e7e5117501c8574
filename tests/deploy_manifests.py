"""The agent's DaemonSet as deploy/ ships it, with or without one of deploy/components/,
and the host mounts it asks for: read by tests/unit/test_deploy.py and by
tests/integration/test_image.py, which runs the image with exactly these mounts.

A component's JSON patch is applied here with the RFC 6902 operations the components use
(``test``, ``replace``, ``add``, ``remove``); test_deploy.py checks the result against
``kubectl kustomize`` where kubectl is installed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
COMPONENTS = DEPLOY / "components"


def component_names() -> list[str]:
    return sorted(p.parent.name for p in COMPONENTS.glob("*/kustomization.yaml"))


def agent_daemonset(component: str | None = None) -> dict[str, Any]:
    """deploy/daemonset.yaml's DaemonSet, patched by ``component`` if given."""
    (ds,) = [d for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text()) if d]
    return apply_component(ds, component) if component else ds


def apply_component(doc: dict[str, Any], component: str) -> dict[str, Any]:
    kustomization = yaml.safe_load((COMPONENTS / component / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component", component
    out = copy.deepcopy(doc)
    for patch in kustomization["patches"]:
        target = patch["target"]
        if target["kind"] == out["kind"] and target["name"] == out["metadata"]["name"]:
            for op in yaml.safe_load(patch["patch"]):
                _apply(out, op)
    return out


def _apply(doc: Any, op: dict[str, Any]) -> None:
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if op["op"] == "test":
        got = node[int(last)] if isinstance(node, list) else node[last]
        assert got == op["value"], f"patch test failed at {op['path']}: {got!r} != {op['value']!r}"
    elif op["op"] == "replace":
        node[int(last) if isinstance(node, list) else last] = op["value"]
    elif op["op"] == "add" and isinstance(node, list):
        node.insert(len(node) if last == "-" else int(last), op["value"])
    elif op["op"] == "add":
        node[last] = op["value"]
    elif op["op"] == "remove":
        del node[int(last) if isinstance(node, list) else last]
    else:
        raise ValueError(f"unsupported JSON patch operation {op}")


@dataclass(frozen=True)
class HostMount:
    """One volumeMount of the agent's container and what it mounts."""

    name: str
    path: str  # in the container
    host_path: str | None  # None: not a hostPath (emptyDir)
    read_only: bool
    host_type: str | None = None


def agent_mounts(ds: dict[str, Any]) -> list[HostMount]:
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = []
    for m in container["volumeMounts"]:
        host = volumes[m["name"]].get("hostPath") or {}
        mounts.append(
            HostMount(
                name=m["name"],
                path=m["mountPath"],
                host_path=host.get("path"),
                read_only=bool(m.get("readOnly")),
                host_type=host.get("type"),
            )
        )
    return mounts


def agent_args(ds: dict[str, Any]) -> list[str]:
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return list(container["args"])
