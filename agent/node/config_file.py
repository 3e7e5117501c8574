"""``--config``: the agent settings file, read at start and re-read when it changes."""

from __future__ import annotations

import os

import structlog
import yaml

from agent.errors import InvalidObject
from agent.model.fields import Fields, bad
from agent.model.settings import CONFIG_SECTIONS, AgentSettings, parse_agent_settings
from agent.node.loop import AfterTick, TickOutcome
from agent.node.sampling import HostCollector
from agent.node.tick import NodeBrain


def read_config(path: str) -> AgentSettings:
    """The ``agent:`` section of a YAML config file; InvalidObject names the bad field."""
    with open(path, encoding="utf-8") as f:
        try:
            doc = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise InvalidObject("config", path, "", f"not valid YAML: {err}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise bad("config", path, "", "must be a mapping with an 'agent' section", doc)
    Fields("config", path).only(doc, CONFIG_SECTIONS)
    return parse_agent_settings(doc.get("agent"), "config", path, prefix="agent.")


class ConfigFile:
    """``--config``: read at start (a bad file stops the start), re-read when its mtime or
    size changes; a bad edit is logged and the last good settings stay in force."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._signature = self._stat()
        self.settings = read_config(path)

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def changed(self) -> AgentSettings | None:
        """New settings if the file changed and parses, else None."""
        signature = self._stat()
        if signature == self._signature:
            return None
        self._signature = signature
        try:
            settings = read_config(self.path)
        except (OSError, InvalidObject) as err:
            structlog.get_logger().error(
                "config file unreadable or invalid: keeping the last good settings",
                code="config-kept",
                path=self.path,
                error=str(err),
            )
            return None
        if settings == self.settings:
            return None
        self.settings = settings
        structlog.get_logger().info(
            "config reloaded",
            path=self.path,
            execute_excess_percent=settings.execute_excess_percent,
            ext_cpu_resource=settings.ext_cpu_resource,
            max_open_files=settings.max_open_files,
        )
        return settings

    def reloader(self, brain: NodeBrain, collector: HostCollector) -> AfterTick:
        """An after-tick hook that applies a changed file from the next tick on."""

        def reload(_outcome: TickOutcome) -> None:
            held = self.settings.max_open_files
            settings = self.changed()
            if settings is not None:
                brain.settings = settings
                # The pod collector reports extended-CPU usage by this resource name.
                collector.pod_stats.ext_cpu_resource = settings.ext_cpu_resource
                if settings.max_open_files != held:
                    collector.hold_files(settings.max_open_files)

        return reload
