"""Reading YAML and JSON documents that may be hostile: bounded before any parser builds them.

Scenarios (`waterline simulate`) and local mode's ``--objects`` files come from users and
from tools; a bad one must be refused with a reason, never crash the process or stall it:

* **nesting deeper than 100 levels** is refused. PyYAML's C loader builds a document
  recursively in C and segfaults on ~100,000 nested ``[`` (no exception to catch); its
  Python loader and the json module raise RecursionError further down. So the depth is
  measured *before* a document is built: for YAML on libyaml's event stream (a state
  machine with its own stack: it never recurses), for JSON by a scan of the brackets
  outside strings (bytes operations, no Python loop over characters);
* **a YAML alias bomb** ("billion laughs": anchors of aliases of anchors) is refused when
  the aliases would expand to more nodes than the document itself plus 100,000. PyYAML
  shares an aliased node rather than copying it, so the bomb costs little to load; it is
  whatever walks the result afterwards that would never finish;
* **garbage** (not UTF-8, not YAML, not JSON) is refused with the parser's first line.

Every refusal is a :class:`DocumentError` (a ValueError) whose message says what was wrong.
YAML is read with YAML 1.2 floats (``2.0e10`` is a number, as SIMULATE.md writes it), with
the C loader where PyYAML has it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

MAX_DEPTH = 100
#: Nodes that aliases may add beyond the document's own.
ALIAS_ALLOWANCE = 100_000

try:  # the C loader is several times faster on large scenarios
    _BaseLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _BaseLoader = yaml.SafeLoader


class YamlLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """Safe YAML with YAML 1.2 floats: PyYAML follows YAML 1.1, where ``2.0e10`` (no sign
    in the exponent) would be a string, not a number."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


class DocumentError(ValueError):
    """A document refused before or while parsing it; the message says why."""


# -- YAML -------------------------------------------------------------------------------

_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def check_yaml(text: str) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH or whose aliases expand too far, from the
    event stream alone (nothing is built). Syntax errors are left to the loader."""
    depth = nodes = expanded = 0
    open_at: list[tuple[str | None, int]] = []  # (anchor, nodes when it opened)
    sizes: dict[str, int] = {}  # anchor -> nodes it stands for, aliases included
    try:
        for event in yaml.parse(text, Loader=YamlLoader):
            if isinstance(event, _OPEN):
                depth += 1
                if depth > MAX_DEPTH:
                    raise DocumentError(f"nested deeper than {MAX_DEPTH} levels")
                nodes += 1
                open_at.append((event.anchor, nodes))
            elif isinstance(event, _CLOSE):
                depth -= 1
                anchor, start = open_at.pop()
                if anchor is not None:
                    sizes[anchor] = nodes - start + 1
            elif isinstance(event, yaml.ScalarEvent):
                nodes += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor or "", 1)
                nodes += size
                expanded += size
                if expanded > nodes - expanded + ALIAS_ALLOWANCE:
                    raise DocumentError(
                        f"aliases expand to more than {expanded:,} nodes (an alias bomb?)"
                    )
    except yaml.YAMLError:
        return  # the loader reports it, with its position


def load_yaml_all(text: str) -> list[Any]:
    """Every document of a YAML stream, once :func:`check_yaml` passed it."""
    check_yaml(text)
    try:
        return list(yaml.load_all(text, Loader=YamlLoader))
    except yaml.YAMLError as err:
        raise DocumentError(f"not valid YAML: {_yaml_reason(err)}") from None
    except ValueError as err:  # a scalar the constructor refuses: ``2026-13-01``
        raise DocumentError(f"not valid YAML: {err}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None


def load_yaml(text: str) -> Any:
    """The one document of a YAML text (an empty text is None)."""
    docs = load_yaml_all(text)
    if len(docs) > 1:
        raise DocumentError(f"expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


# -- JSON -------------------------------------------------------------------------------

_KEEP = b'[]{}"\\'
_DROP = bytes(b for b in range(256) if b not in _KEEP)
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_ONE_KIND = bytes.maketrans(b"{}", b"[]")


def json_depth(data: bytes, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a JSON text, or ``limit + 1`` once it is known to exceed it.

    Only brackets, quotes and backslashes are kept (one ``translate``); escapes and then
    strings are removed, so brackets inside strings do not count; ``{}`` become ``[]``
    (the kind does not change the depth); then every innermost ``[]`` is removed, exactly
    one level per pass (``replace`` does not cascade). What is left after ``limit`` passes
    is deeper than the limit (or unbalanced, which the parser refuses anyway)."""
    marks = data.translate(None, _DROP)
    if b"\\" in marks:
        marks = _ESCAPE.sub(b"", marks)
    marks = _STRING.sub(b"", marks.replace(b'""', b"")).translate(_ONE_KIND)
    depth = 0
    while marks:
        if depth == limit:
            return limit + 1
        shorter = marks.replace(b"[]", b"")
        if shorter == marks:
            return depth  # unbalanced: json.loads says where
        marks = shorter
        depth += 1
    return depth


def load_json(data: bytes | str) -> Any:
    raw = data.encode() if isinstance(data, str) else data
    if json_depth(raw) > MAX_DEPTH:
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(raw)
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise DocumentError(f"not valid JSON: {_first_line(err)}") from None


def _yaml_reason(err: yaml.YAMLError) -> str:
    """The problem and where it is (``did not find expected ',' or ']' (line 3, column 9)``)."""
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return _first_line(err)


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


__all__ = [
    "MAX_DEPTH",
    "DocumentError",
    "YamlLoader",
    "check_yaml",
    "json_depth",
    "load_json",
    "load_yaml",
    "load_yaml_all",
]
