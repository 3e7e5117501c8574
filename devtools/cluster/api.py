"""A few admin calls to the cluster's API server with the standard library only, so the
launcher starts without the kubernetes client (42 MiB) and before any package is set up."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class Admin:
    """HTTPS to ``server`` with a client certificate of the cluster's CA."""

    def __init__(self, server: str, pki: Path, cert: str = "admin") -> None:
        self.server = server
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.context.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))

    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 10,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:
                return err.code, raw.decode(errors="replace")

    def get(self, path: str) -> Any:
        code, body = self.request("GET", path)
        if code != 200:
            raise RuntimeError(f"GET {path}: {code} {body}")
        return body

    def apply(self, manifest: dict[str, Any], path: str) -> None:
        """Create ``manifest`` at collection ``path``, or replace it when it is there."""
        code, body = self.request("POST", path, manifest)
        if code == 409:
            name = manifest["metadata"]["name"]
            current = self.get(f"{path}/{name}")
            manifest = {**manifest, "metadata": {**manifest["metadata"],
                        "resourceVersion": current["metadata"]["resourceVersion"]}}  # fmt: skip
            code, body = self.request("PUT", f"{path}/{name}", manifest)
        if code not in (200, 201):
            raise RuntimeError(f"apply {manifest.get('kind')} at {path}: {code} {body}")


def write_kubeconfig(
    path: Path, server: str, ca: Path, cert: Path | None = None, key: Path | None = None,
    token: str | None = None, name: str = "waterline",
) -> None:
    """A kubeconfig (JSON, which is YAML) for one user of one cluster."""
    user: dict[str, str] = {}
    if cert is not None and key is not None:
        user = {"client-certificate": str(cert), "client-key": str(key)}
    if token is not None:
        user = {"token": token}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }  # fmt: skip
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
