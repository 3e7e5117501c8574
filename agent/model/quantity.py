"""Kubernetes resource quantities as floats in base units (cores, bytes, plain counts).

Kubernetes accepts decimal SI suffixes (n u m k M G T P E), binary suffixes
(Ki Mi Gi Ti Pi Ei) and decimal exponents (``1e3``, ``1E-3``). CPU ``100m`` is 0.1 cores,
memory ``1Gi`` is 1073741824 bytes.
"""

from __future__ import annotations

import re

from agent.model.fields import problem

_SUFFIXES: dict[str, float] = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>[a-zA-Z]*))$"
)

_SHAPE = 'must be a quantity like "500m", "2Gi" or a number'

_cache: dict[str, float] = {}
#: The most distinct quantities remembered: the pods' few ("100m", "64Mi") are met every
#: relist; past the bound the cache starts again. Not 100,000: a node's batch capacity
#: (``waterline.io/batch-memory`` in bytes, a new figure at each publication) comes back
#: through the node's watch, so an agent meets new quantities all its life (issue 32:
#: 100,000 of them held 11.6 MiB, 121 B each, reached after months at 2 a minute).
_MAX_CACHED = 4096


def cached_quantities() -> int:
    """How many parsed quantities are remembered now (at most ``_MAX_CACHED``)."""
    return len(_cache)


def parse_quantity(value: object) -> float:
    """Parse a quantity (string or number) into a float in base units.

    Raises ValueError with the offending text; callers wrap it with the object and field.
    """
    if isinstance(value, bool):
        raise ValueError(problem(_SHAPE, value))
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(problem(_SHAPE, value))
    cached = _cache.get(value)
    if cached is not None:
        return cached
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(problem(_SHAPE, value))
    number = float(match.group("num"))
    if match.group("exp"):
        result = number * 10.0 ** int(match.group("exp")[1:])
    else:
        suffix = match.group("suffix") or ""
        if suffix not in _SUFFIXES:
            raise ValueError(problem(f"{_SHAPE} (unknown suffix {suffix!r})", value))
        result = number * _SUFFIXES[suffix]
    if len(_cache) >= _MAX_CACHED:
        _cache.clear()
    _cache[value] = result
    return result


def parse_resource_list(raw: object) -> dict[str, float]:
    """Parse a ResourceList mapping ({cpu: "500m", memory: "1Gi"}) into floats. An amount
    below zero is refused, as the API server refuses it in a pod's requests and limits (a
    negative request would free room that is not there: a new-user trial saw a queue plan
    find a full node empty)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(problem("must be a mapping of resources", raw))
    out: dict[str, float] = {}
    for name, quantity in raw.items():
        try:
            out[str(name)] = parse_quantity(quantity)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
        if out[str(name)] < 0:
            raise ValueError(f"{name}: {problem('must not be negative', quantity)}")
    return out


def format_cpu(cores: float) -> str:
    """Render cores the way Kubernetes prints them (``1500m``), for messages and events."""
    millis = round(cores * 1000)
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"
