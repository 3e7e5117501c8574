"""The guest image: built by ``hack/vm/build``, cached by a hash of what it is made from.

The inputs are the build script and the guest's files (``hack/vm/``) and the two locks
(``requirements/runtime.lock``, ``installer.lock``): a change to any of them makes a new
image; a change to the project's code does not (the code goes in fresh at each boot, as a
wheel on the 9p share). The cache is ``$XDG_CACHE_HOME/waterline/vm/<hash>`` (default
``~/.cache``); older images there are removed once a new one is built, and the .debs
debootstrap fetched are kept in ``.../vm/debs`` so a rebuild downloads only what moved.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the image is made from (files, or folders taken whole).
INPUTS = ("hack/vm", "requirements/runtime.lock", "requirements/installer.lock")
FILES = ("rootfs.ext4", "vmlinuz", "initrd.img")


class ImageError(RuntimeError):
    """The image could not be built: the message says why (the build log's tail)."""


@dataclass(frozen=True, slots=True)
class Image:
    folder: Path
    #: Seconds the build took; 0 when the cached image was used.
    build_seconds: float = 0.0

    @property
    def rootfs(self) -> Path:
        return self.folder / "rootfs.ext4"

    @property
    def kernel(self) -> Path:
        return self.folder / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.folder / "initrd.img"

    @property
    def cached(self) -> bool:
        return self.build_seconds == 0.0


def cache_root() -> Path:
    """``$WATERLINE_CACHE/vm`` (as hack/cluster/build's ``cluster-bin``), else
    ``$XDG_CACHE_HOME/waterline/vm``: a branch with other inputs builds into a cache of its
    own, so it does not remove the image the others boot."""
    if os.environ.get("WATERLINE_CACHE"):
        return Path(os.environ["WATERLINE_CACHE"]) / "vm"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "waterline" / "vm"


def inputs_hash(root: Path = ROOT) -> str:
    """A hash of the inputs' paths, contents and executable bits."""
    digest = hashlib.sha256()
    files: list[Path] = []
    for name in INPUTS:
        path = root / name
        files.extend(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def ready(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES)


def ensure_image(
    root: Path = ROOT, pip: str | None = None, say: Callable[[str], None] = print
) -> Image:
    """The cached image for these inputs, built first when there is none. Raises
    ImageError (with the build's reason) when it cannot be built."""
    cache = cache_root()
    folder = cache / inputs_hash(root)
    if ready(folder):
        return Image(folder)
    if shutil.which("debootstrap") is None or shutil.which("mkfs.ext4") is None:
        raise ImageError("the guest image needs debootstrap and mkfs.ext4 "
                         "(apt-get install debootstrap e2fsprogs)")  # fmt: skip
    if os.geteuid() != 0:
        raise ImageError("building the guest image needs root (debootstrap)")
    env = dict(os.environ, DEB_CACHE=str(cache / "debs"))
    env.setdefault("PIP", pip or str(root / ".venv" / "bin" / "pip"))
    say(f"vm: building the guest image into {folder} (cold: some minutes)")
    start = time.monotonic()
    with subprocess.Popen([str(root / "hack" / "vm" / "build"), str(folder)], env=env,  # noqa: S603
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as build:  # fmt: skip
        assert build.stdout is not None and build.stderr is not None
        for line in build.stdout:  # its steps, as they come: a cold build takes minutes
            say(line.rstrip("\n"))
        errors = build.stderr.read()
    took = time.monotonic() - start
    if build.returncode != 0 or not ready(folder):
        raise ImageError(f"hack/vm/build failed ({build.returncode}): {errors.strip()[-2000:]}")
    for old in cache.iterdir():  # one image at a time: each is about a gigabyte
        if old.is_dir() and old.name not in (folder.name, "debs") and ".work." not in old.name:
            shutil.rmtree(old, ignore_errors=True)
    return Image(folder, build_seconds=took)
