"""One reader for the fields of config sections and custom resources.

Every refusal has one shape, ``<Kind> <name>: <field path> <problem>, got <value>``
(``config arbitration: maxMigratingPerNode must be >= 1, got 0``, ``PodMigrationJob j-1:
spec.ttl must be a duration like "300s", "5m", "1h30m" or a number of seconds, got
'soon'``), so an operator
finds the offending line whichever engine or object refused it. A ``Fields`` knows the
object (kind, name) and where in it the fields sit (``prefix``); its checks take the value,
so they serve a parser reading a dict and a ``validate()`` re-checking a dataclass alike.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from agent.errors import InvalidObject
from agent.model.timeutil import parse_time

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_SHAPE = 'must be a duration like "300s", "5m", "1h30m" or a number of seconds'
_BARE_SECONDS = re.compile(r"\d+(?:\.\d*)?|\.\d+")


#: Longest value an error line shows whole; a longer one is abbreviated (``shown``).
SHOWN_CHARS = 100
#: How much of a long value ``shown`` keeps: nesting levels, items, characters of a string.
_SHORT_LEVELS, _SHORT_ITEMS, _SHORT_STRING = 2, 3, 40


def shown(value: object) -> str:
    """``value`` for an error line, as YAML writes it (flow style): ``true``, ``null``,
    ``.nan``, ``'soon'``, ``[1, 'a']``, ``{a: 1}``. The operator wrote YAML: Python's
    ``True`` or ``None`` would quote something they never wrote. Abbreviated past
    ``SHOWN_CHARS`` (an error is one line; a whole samples list pasted under a misspelt
    key would be hundreds)."""
    text = _flow(value, None)
    return text if len(text) <= SHOWN_CHARS else clip(_flow(value, 0))


def _flow(value: object, level: int | None) -> str:
    """YAML flow text of a parsed value; ``level`` (None: whole) abbreviates deep or long
    collections and long strings (``...``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if not math.isfinite(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)  # 1e+20 needs its dot to read back as a float: 1.0e+20
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    if isinstance(value, str):
        cut = level is not None and len(value) > _SHORT_STRING
        return _quoted(value[: _SHORT_STRING - 3] + "..." if cut else value)
    if isinstance(value, Mapping):
        items = [f"{_flow(k, _deeper(level))}: {_flow(v, _deeper(level))}" for k, v in value.items()]
        return _collection("{", items, "}", level)
    if isinstance(value, (list, tuple, set, frozenset)):
        return _collection("[", [_flow(v, _deeper(level)) for v in value], "]", level)
    return repr(value)


def _deeper(level: int | None) -> int | None:
    return None if level is None else level + 1


def _collection(open_: str, items: list[str], close: str, level: int | None) -> str:
    if level is not None and items and level >= _SHORT_LEVELS:
        return f"{open_}...{close}"
    if level is not None and len(items) > _SHORT_ITEMS:
        items = [*items[:_SHORT_ITEMS], "..."]
    return f"{open_}{', '.join(items)}{close}"


def _quoted(text: str) -> str:
    """A string as YAML quotes it: single quotes (``''`` for one inside), or double quotes
    with escapes when it holds a control character."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return json.dumps(text)
    return "'" + text.replace("'", "''") + "'"


def clip(text: str) -> str:
    """``text`` cut to ``SHOWN_CHARS``, ending in ``...`` when cut."""
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def problem(text: str, value: object) -> str:
    """``<problem>, got <value>``: the tail every refusal ends with."""
    return f"{text}, got {shown(value)}"


def bad(kind: str, name: str, field: str, text: str, value: object) -> InvalidObject:
    return InvalidObject(kind, name, field, problem(text, value))


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_duration(value: object) -> float:
    """Seconds, from the one reading of every duration and TTL (PodMigrationJob and
    Reservation ``spec.ttl``, defrag ``coolDownTime``): a number of seconds, a string of
    seconds (``"0"``, ``"90"``, ``"1.5"``), or a Go/metav1.Duration string (``"90s"``,
    ``"1h30m"``, ``"250ms"``). Finite and non-negative; ``""`` is refused. Whether 0
    means "never expires" is the field's meaning, not the parser's (both TTLs: never).
    Raises ValueError ending in ``, got <value>``.
    """
    if is_number(value):
        return _finite_non_negative(float(value), value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(problem(_DURATION_SHAPE, value))
    text = value.strip()
    if _BARE_SECONDS.fullmatch(text):
        return _finite_non_negative(float(text), value)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(problem(_DURATION_SHAPE, value))
    return _finite_non_negative(sum(float(n) * _DURATION_UNIT[u] for n, u in parts), value)


def _finite_non_negative(seconds: float, value: object) -> float:
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(problem("must be a finite, non-negative duration", value))
    return seconds


@dataclass(frozen=True, slots=True)
class Fields:
    """Checks for the fields of one object; ``prefix`` is the path of the mapping read
    (``"spec."``), so every error names the full field path."""

    kind: str
    name: str = ""
    prefix: str = ""

    def at(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def child(self, key: str) -> Fields:
        return Fields(self.kind, self.name, f"{self.at(key)}.")

    def bad(self, key: str, text: str, value: object) -> InvalidObject:
        return bad(self.kind, self.name, self.at(key), text, value)

    # -- shapes -------------------------------------------------------------------------
    def mapping(self, value: object, key: str = "") -> Mapping[str, Any]:
        """A mapping; None reads as empty. ``key`` "" means the object itself."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            if not key:
                raise InvalidObject(self.kind, self.name, self.prefix.rstrip("."),
                                    problem("must be a mapping", value))
            raise self.bad(key, "must be a mapping", value)
        return value

    def only(self, raw: Mapping[str, Any], known: Iterable[str]) -> None:
        """Refuse the first unknown key (sorted), naming it and the known ones."""
        names = list(known)
        unknown = sorted(str(k) for k in raw if k not in names)
        if unknown:
            key = unknown[0]
            raise self.bad(key, f"is not a known field (known: {', '.join(names)})", raw[key])

    # -- scalars --------------------------------------------------------------------------
    def number(
        self,
        value: object,
        key: str,
        *,
        above: float | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        """A finite number, optionally > above, >= minimum and <= maximum."""
        if not is_number(value) or not math.isfinite(value):
            raise self.bad(key, "must be a number", value)
        number = float(value)
        self._range(number, value, key, above, minimum, maximum)
        return number

    def integer(
        self, value: object, key: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        if not is_integer(value):
            raise self.bad(key, "must be an integer", value)
        self._range(value, value, key, None, minimum, maximum)
        return value

    def percent(self, value: object, key: str) -> float:
        """A number of percent, 0 to 100."""
        if not is_number(value) or value != value:
            raise self.bad(key, "must be a number (percent)", value)
        if not 0 <= value <= 100:
            raise self.bad(key, "must be between 0 and 100", value)
        return float(value)

    def duration(self, value: object, key: str) -> float:
        try:
            return parse_duration(value)
        except ValueError as err:
            raise InvalidObject(self.kind, self.name, self.at(key), str(err)) from None

    def time(self, value: object, key: str) -> float | None:
        """An RFC 3339 time in epoch seconds; None (or "") reads as None."""
        try:
            return parse_time(value)
        except ValueError:
            raise self.bad(key, "must be an RFC 3339 time", value) from None

    def boolean(self, value: object, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.bad(key, "must be true or false", value)
        return value

    def string(self, value: object, key: str, *, required: bool = False) -> str:
        """A string; None reads as "" (refused when ``required``)."""
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise self.bad(key, "must be a string", value)
        if required and not value:
            raise self.bad(key, "must be set", value)
        return value

    def choice(self, value: object, key: str, choices: Collection[str]) -> str:
        if value not in choices:
            raise self.bad(key, f"must be one of {', '.join(choices)}", value)
        return str(value)

    def _range(
        self,
        number: float,
        value: object,
        key: str,
        above: float | None,
        minimum: float | None,
        maximum: float | None,
    ) -> None:
        if above is not None and not number > above:
            raise self.bad(key, f"must be > {_bound(above)}", value)
        if minimum is not None and number < minimum:
            raise self.bad(key, f"must be >= {_bound(minimum)}", value)
        if maximum is not None and number > maximum:
            raise self.bad(key, f"must be <= {_bound(maximum)}", value)


def _bound(limit: float) -> str:
    """A bound as written in the spec: ``1000000000``, not ``1e+09``; ``0.5`` as is."""
    return str(int(limit)) if float(limit).is_integer() else f"{limit:g}"


def config_values(
    section: str,
    raw: object,
    keys: Mapping[str, str],
    nullable: Collection[str] = (),
) -> dict[str, Any]:
    """The values of the camelCase config section ``section`` by dataclass field name.

    Unknown keys are refused, naming them. A null value means the field's default (the
    key is left out), except for the keys in ``nullable``, where null is itself a value
    (arbitration's limits: no limit, or the default by replicas)."""
    fields = Fields("config", section)
    mapping = fields.mapping(raw)
    fields.only(mapping, keys)
    return {keys[k]: v for k, v in mapping.items() if v is not None or k in nullable}


__all__ = ["Fields", "bad", "config_values", "is_integer", "is_number", "parse_duration", "problem"]
