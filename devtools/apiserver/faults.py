"""Injected faults: a test makes chosen requests of the dev server fail, stall or drop."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Fault:
    """Applies to requests whose path contains ``path`` (and method / watch-ness match),
    ``times`` times. A watch fault with ``drop_after`` or ``garbage`` streams normally and
    then misbehaves; otherwise ``delay`` seconds of silence, then ``status`` if non-zero."""

    path: str
    method: str = "GET"
    watch: bool | None = None  # True: only watches; False: never watches; None: both
    status: int = 500
    delay: float = 0.0
    times: int = 1
    drop_after: int | None = None  # watch: cut the connection after this many events
    garbage: bytes | None = None  # watch: send this line first

    def applies(self, method: str, path: str, is_watch: bool) -> bool:
        return (
            self.times > 0
            and self.path in path
            and (not self.method or self.method == method)
            and (self.watch is None or self.watch == is_watch)
        )
