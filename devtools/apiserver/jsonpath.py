"""The JSONPath subset printer columns use (a CRD's ``additionalPrinterColumns``):
``.a.b``, ``['a.b']``, ``[0]``, ``[-1]``, ``[*]`` and filters ``[?(@.type=="Ready")]``
(``==`` / ``!=`` against a quoted string or a number). ``find`` returns every value the
path reaches, in document order; an empty list when it reaches none."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_TOKEN = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_\-$]+)
      | \[\s*'(?P<quoted>(?:[^'\\]|\\.)*)'\s*\]
      | \[\s*"(?P<dquoted>(?:[^"\\]|\\.)*)"\s*\]
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*(?P<star>\*)\s*\]
      | \[\s*\?\(\s*@(?P<fpath>(?:\.[A-Za-z0-9_\-]+)+)\s*(?P<op>==|!=)\s*
            (?:'(?P<fs>[^']*)'|"(?P<fd>[^"]*)"|(?P<fn>-?[\d.]+))\s*\)\s*\]
    """,
    re.VERBOSE,
)

Step = Callable[[Any], list[Any]]


def _field(name: str) -> Step:
    return lambda v: [v[name]] if isinstance(v, dict) and name in v else []


def _index(i: int) -> Step:
    return lambda v: [v[i]] if isinstance(v, list) and -len(v) <= i < len(v) else []


def _star(v: Any) -> list[Any]:
    if isinstance(v, list):
        return list(v)
    return list(v.values()) if isinstance(v, dict) else []


def _filter(path: list[str], equal: bool, wanted: Any) -> Step:
    def value(item: Any) -> Any:
        for name in path:
            item = item.get(name) if isinstance(item, dict) else None
        return item

    def keep(v: Any) -> list[Any]:
        items = v if isinstance(v, list) else []
        return [i for i in items if (value(i) == wanted) == equal]

    return keep


def compile_path(path: str) -> list[Step]:
    """Steps of a path; ValueError naming the path and the position it cannot read."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    text = text.removeprefix("$")
    steps: list[Step] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"jsonPath {path!r}: cannot read {text[pos:]!r}")
        pos = m.end()
        if m["name"] is not None:
            steps.append(_field(m["name"]))
        elif m["quoted"] is not None or m["dquoted"] is not None:
            steps.append(_field(re.sub(r"\\(.)", r"\1", m["quoted"] or m["dquoted"] or "")))
        elif m["index"] is not None:
            steps.append(_index(int(m["index"])))
        elif m["star"]:
            steps.append(_star)
        else:
            wanted: Any = m["fs"] if m["fs"] is not None else m["fd"]
            if wanted is None:
                wanted = float(m["fn"]) if "." in m["fn"] else int(m["fn"])
            steps.append(_filter(m["fpath"].split(".")[1:], m["op"] == "==", wanted))
    return steps


def find(obj: Any, path: str) -> list[Any]:
    values = [obj]
    for step in compile_path(path):
        values = [found for v in values for found in step(v)]
    return values
