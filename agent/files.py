"""Files the agent keeps in its state directory, written so that a crash never leaves
half a file: the throttler's original quotas (``executors.quota_state``), the objects last
seen (``agent.node.saved``) and the eviction limits (``agent.node.eviction_memory``)."""

from __future__ import annotations

import contextlib
import os
import tempfile


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file:
    a temp file in the same directory, fsync, rename, fsync the directory. Raises OSError
    (the old file is untouched then)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
