"""Agent decision settings (``config.agent`` in a scenario, the agent's config file live)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.model.fields import Fields

DEFAULT_EXT_CPU_RESOURCE = "qos.waterline.io/ext-cpu"
#: The seconds every API call of one tick may take together (evictions, events, taint).
DEFAULT_API_TIME_BUDGET = 5.0
#: The seconds a tick waits for the answer to one eviction before it gives up on it (the
#: request goes on in the background), so a hanging Eviction API delays throttling by this.
DEFAULT_EVICTION_ANSWER_SECONDS = 1.0
#: The most file descriptors the collectors hold open across ticks (issue 32: a cgroup or
#: schedstat file read again by one ``pread`` instead of open, read and close). Each held
#: file costs about 4.4 KiB of kernel memory once read (its seq-file page), charged to the
#: agent's memory cgroup but not shown in its RSS: 4,096 is 17 MiB, every file of 250 pods
#: of 3 containers on cgroup v1 (1,000 cgroups, 4 files each). Past it the files are opened
#: and closed each tick (CPU, not memory, pays for a larger node). 0 holds none.
DEFAULT_MAX_OPEN_FILES = 4096
#: The largest ``maxOpenFiles`` taken: the kernel's usual ceiling on a process's open files
#: (``fs.nr_open``); the process's own limit bounds the budget further (a quarter of it is
#: left to sockets and logs).
MAX_OPEN_FILES_LIMIT = 1 << 20


@dataclass(frozen=True, slots=True)
class EvictionRateLimit:
    """A token bucket per node: an eviction needs a whole token; ``per_minute`` tokens
    come back per minute of sample time, up to ``burst``. ``per_minute`` 0 = no limit."""

    per_minute: float = 10.0
    burst: int = 5

    @property
    def enabled(self) -> bool:
        return self.per_minute > 0


@dataclass(frozen=True, slots=True)
class AgentSettings:
    #: Scales evict and throttle-down gaps by (1 + p/100): act a little beyond the line.
    execute_excess_percent: float = 0.0
    #: The extended resource (in cores) that the extCpuUsage sorter looks at.
    ext_cpu_resource: str = DEFAULT_EXT_CPU_RESOURCE
    eviction_rate_limit: EvictionRateLimit = field(default_factory=EvictionRateLimit)
    #: Evictions paused on this node, as the controller's cluster brake does (a scenario
    #: sets it; live, the brake ConfigMap is read besides it).
    cluster_brake: bool = False
    #: Seconds all API calls of one tick may take, so a slow API server never delays
    #: the local throttling of the next tick by more than this.
    api_time_budget_seconds: float = DEFAULT_API_TIME_BUDGET
    #: Seconds a tick waits for one eviction's answer (at most what is left of the
    #: budget); no answer by then is an API fault, and the tick goes on to throttle.
    eviction_answer_seconds: float = DEFAULT_EVICTION_ANSWER_SECONDS
    #: Descriptors the collectors may hold open across ticks (``DEFAULT_MAX_OPEN_FILES``);
    #: never more than the process's ``RLIMIT_NOFILE`` leaves. No decision depends on it.
    max_open_files: int = DEFAULT_MAX_OPEN_FILES


_FIELDS = (
    "executeExcessPercent",
    "extCpuResource",
    "evictionRateLimit",
    "clusterBrake",
    "apiTimeBudgetSeconds",
    "evictionAnswerSeconds",
    "maxOpenFiles",
)


#: The sections of a Waterline config file, the agent's and the controller's: one file (one
#: ConfigMap) may serve both programs, each reads its own sections and refuses a name that
#: is neither's, so a typo such as ``agnet:`` is never silently ignored.
#: tests/unit/test_controller_config.py checks the controller's sections are all here.
CONFIG_SECTIONS = (
    "agent",
    "arbitration",
    "defrag",
    "queues",
    "daemonset",
    "clusterEvictionBudget",
    "migration",
)


def parse_agent_settings(
    raw: Mapping[str, Any] | None, kind: str = "config", name: str = "agent", prefix: str = ""
) -> AgentSettings:
    """The settings; InvalidObject names the field (``agent.model.fields``' one format:
    ``config agent: executeExcessPercent must be between 0 and 100, got 150``). ``prefix``
    is where the section sits in its object (``agent.`` in a config file)."""
    fields = Fields(kind, name, prefix)
    raw = fields.mapping(raw)
    fields.only(raw, _FIELDS)
    excess = raw.get("executeExcessPercent")
    resource = raw.get("extCpuResource")
    if resource is not None and (not isinstance(resource, str) or not resource):
        raise fields.bad("extCpuResource", "must be a resource name", resource)
    brake = raw.get("clusterBrake")
    budget = raw.get("apiTimeBudgetSeconds")
    answer = raw.get("evictionAnswerSeconds")
    open_files = raw.get("maxOpenFiles")
    return AgentSettings(
        execute_excess_percent=0.0
        if excess is None
        else fields.percent(excess, "executeExcessPercent"),
        ext_cpu_resource=resource or DEFAULT_EXT_CPU_RESOURCE,
        eviction_rate_limit=_rate_limit(raw.get("evictionRateLimit"), fields),
        cluster_brake=False if brake is None else fields.boolean(brake, "clusterBrake"),
        api_time_budget_seconds=DEFAULT_API_TIME_BUDGET
        if budget is None
        else fields.number(budget, "apiTimeBudgetSeconds", above=0),
        eviction_answer_seconds=DEFAULT_EVICTION_ANSWER_SECONDS
        if answer is None
        else fields.number(answer, "evictionAnswerSeconds", above=0),
        max_open_files=DEFAULT_MAX_OPEN_FILES
        if open_files is None
        else fields.integer(open_files, "maxOpenFiles", minimum=0, maximum=MAX_OPEN_FILES_LIMIT),
    )


def _rate_limit(raw: object, fields: Fields) -> EvictionRateLimit:
    section = fields.mapping(raw, "evictionRateLimit")
    limit = fields.child("evictionRateLimit")
    limit.only(section, ("perMinute", "burst"))
    default = EvictionRateLimit()
    per_minute = section.get("perMinute")
    burst = section.get("burst")
    return EvictionRateLimit(
        per_minute=default.per_minute
        if per_minute is None
        else limit.number(per_minute, "perMinute", minimum=0),
        burst=default.burst if burst is None else limit.integer(burst, "burst", minimum=1),
    )
