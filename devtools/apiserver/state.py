"""What the request handler and the endpoints read of their server.

``server.DevServer`` provides it; the handler and the endpoints depend on this protocol,
not on the server module that imports them, so the package has no import cycle.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Protocol

from devtools.apiserver.faults import Fault
from devtools.apiserver.store import Store


class ServerState(Protocol):
    store: Store
    bookmark_interval: float
    refuse_invalid: bool
    requests: deque[tuple[str, str]]
    stopping: threading.Event
    watch_epoch: int

    @property
    def url(self) -> str: ...

    def take_fault(self, method: str, path: str, is_watch: bool) -> Fault | None: ...

    def openapi_root(self) -> dict[str, Any]: ...

    def openapi_document(self, group: str, version: str) -> tuple[bytes, str] | None: ...
