"""Images for a node that reaches no registry: made here or saved by podman, loaded into
containerd from archives.

* the sandbox ("pause") image is hack/node/pause.c, compiled static by gcc and packed by
  :func:`pause_archive` into an OCI image archive (one layer: the binary), with no image
  tool at all;
* the project's image (``make image``) and its base (``make base-image``) are saved by the
  container engine that built them (:func:`save`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAUSE_SOURCE = ROOT / "hack" / "node" / "pause.c"
PAUSE_IMAGE = "localhost/waterline/pause:1"


def _tar(members: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar of ``name -> (content, mode)``, reproducible (mtime 0, root-owned)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes, media_type: str) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[f"blobs/sha256/{digest[7:]}"] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def compile_pause(out: Path) -> Path:
    subprocess.run(["gcc", "-O2", "-static", "-s", "-o", str(out), str(PAUSE_SOURCE)],  # noqa: S603,S607
                   check=True, capture_output=True)  # fmt: skip
    return out


def pause_archive(binary: Path, out: Path, name: str = PAUSE_IMAGE) -> Path:
    """An OCI image archive (``ctr images import`` reads it) holding ``binary`` as /pause."""
    layer_tar = _tar({"pause": (binary.read_bytes(), 0o755)})
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }, sort_keys=True).encode()  # fmt: skip
    blobs: dict[str, bytes] = {}
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": _blob(blobs, config, "application/vnd.oci.image.config.v1+json"),
        "layers": [_blob(blobs, layer, "application/vnd.oci.image.layer.v1.tar+gzip")],
    }, sort_keys=True).encode()  # fmt: skip
    desc = _blob(blobs, manifest, "application/vnd.oci.image.manifest.v1+json")
    desc["annotations"] = {"org.opencontainers.image.ref.name": name,
                           "io.containerd.image.name": name}  # fmt: skip
    index = json.dumps({"schemaVersion": 2, "manifests": [desc]}).encode()
    members = {"oci-layout": (b'{"imageLayoutVersion":"1.0.0"}', 0o644), "index.json": (index, 0o644)}
    members.update({k: (v, 0o644) for k, v in blobs.items()})
    out.write_bytes(_tar(members))
    return out


def save(engine: str, image: str, out: Path, env: dict[str, str]) -> Path:
    """``engine save`` of a local image as an OCI archive (podman) or a docker archive."""
    fmt = ["--format", "oci-archive"] if Path(engine).name == "podman" else []
    subprocess.run([engine, "save", *fmt, "-o", str(out), image], check=True,  # noqa: S603
                   capture_output=True, env=env)  # fmt: skip
    return out


def default_images() -> list[str]:
    """The project's image (``make image``) and its base (``make base-image``): the tests'
    workloads run on them, so a node needs nothing pulled."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return [f"ghcr.io/waterline/waterline:{version}", "docker.io/library/debian:bookworm-slim"]


def save_images(images: list[str], cluster: object) -> tuple[Path, ...]:
    """Each local image saved to an archive under the cluster's node folder."""
    import os

    from devtools.cluster.launcher import ClusterError

    env = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "hack/containers.conf"))}
    found = subprocess.run([str(ROOT / "hack/engine")], capture_output=True, text=True, env=env)  # noqa: S603
    if found.returncode != 0:
        raise ClusterError(f"no container engine to save the node's images: {found.stderr.strip()}")
    engine = found.stdout.strip()
    folder = cluster.root / "run" / "node" / "images"  # type: ignore[attr-defined]
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, image in enumerate(images):
        if subprocess.run([engine, "image", "inspect", image], capture_output=True, env=env).returncode != 0:  # noqa: S603
            raise ClusterError(f"no image {image} here: make base-image image")
        out.append(save(engine, image, folder / f"{i}.tar", env))
    return tuple(out)
