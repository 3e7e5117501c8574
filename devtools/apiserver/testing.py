"""A running dev server and a client for it, in one context manager (tests, demos)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.kube.client import ClientArgs, KubeApi, build_api
from devtools.apiserver.server import DevServer
from devtools.apiserver.store import Store


@dataclass
class Running:
    server: DevServer
    api: KubeApi
    kubeconfig: Path


@contextmanager
def serve(
    objects: Iterable[Mapping[str, Any]] = (),
    *,
    grace_cap: float = 0.0,
    bookmark_interval: float = 0.2,
    history: int = 10_000,
    client_args: ClientArgs | None = None,
    refuse_invalid: bool = False,
) -> Iterator[Running]:
    """Start a dev server on an ephemeral loopback port, load ``objects``, yield it with
    an official-client API built from the kubeconfig it wrote.

    Unlike a real server (and ``waterline dev-apiserver``), it stores custom resources
    that break their CRD's schema (with a Warning header) unless ``refuse_invalid``: tests
    seed such objects to check the agent's and the controller's own validation."""
    server = DevServer(
        Store(history=history, grace_cap=grace_cap),
        bookmark_interval=bookmark_interval,
        refuse_invalid=refuse_invalid,
    )
    server.load(objects)
    server.start()
    with tempfile.TemporaryDirectory(prefix="waterline-dev-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        api = build_api(str(kubeconfig), args=client_args)
        try:
            yield Running(server, api, kubeconfig)
        finally:
            api.close()
            server.stop()


def pod(
    name: str,
    node: str = "node-1",
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    phase: str = "Running",
    cpu: str = "100m",
) -> dict[str, Any]:
    """A minimal running pod manifest."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pdb(
    name: str, match_labels: Mapping[str, str], namespace: str = "default", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": dict(match_labels)}, **spec},
    }
