"""One JSON file of the actuators' memory in the agent's state directory (a hostPath, so
it outlives the agent's pod): the throttler's original quotas (``executors.quota_state``)
and the isolator's original weights and bursts (``executors.isolation_state``).

Written atomically on every change (``agent.files.atomic_write``): a crash leaves the old
or the new file, never a torn one. A file that cannot be parsed is moved aside
(``.corrupt-<time>``), logged as an error and flagged (``unreadable``): its owner then
rebuilds what it lost from the pod specs, so no pod stays changed for ever.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from agent.files import atomic_write

T = TypeVar("T")
#: What a parser of a state file may raise on a file that is not what it expects.
UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError)


class JsonStateFile:
    def __init__(self, state_dir: str, filename: str) -> None:
        self.dir = state_dir
        self.path = os.path.join(state_dir, filename)
        #: The file existed but could not be read (it was moved aside).
        self.unreadable = False

    def load(self, parse: Callable[[Any], T], empty: T, consequence: str) -> T:
        """The file's content through ``parse``; ``empty`` when there is no file, or when
        it cannot be read (moved aside, logged with ``consequence``)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                return parse(json.load(f))
        except FileNotFoundError:
            return empty
        except UNREADABLE as err:
            aside = f"{self.path}.corrupt-{int(time.time())}"
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = ""
            self.unreadable = True
            structlog.get_logger().error(
                f"{os.path.basename(self.path)} unreadable: moved aside; {consequence}",
                path=self.path, moved_to=aside, error=str(err),
            )  # fmt: skip
            return empty

    def save(self, document: Any) -> None:
        """Atomically replace the file; raises OSError (nothing changed then)."""
        atomic_write(self.path, json.dumps(document, sort_keys=True, indent=1).encode())
