"""The part of CEL that ``x-kubernetes-validations`` rules are written in, evaluated
against ``self`` (and ``oldSelf`` for transition rules):

* literals: integers, doubles, 'strings' and "strings", true, false, null, [lists];
* ``self`` / ``oldSelf`` and field access (``self.spec.ttl``), indexing (``self.x[0]``,
  ``self.m['k']``);
* ``!``, unary ``-``, ``+ - * / %``, ``== != < <= > >=``, ``in``, ``&& ||`` and
  ``cond ? a : b``;
* ``has(self.f)``, ``size(x)`` / ``x.size()``, ``type(x)`` compared with ``int``,
  ``uint``, ``double``, ``string``, ``bool``, ``list``, ``map``, ``null_type``;
  ``int()``, ``string()``, ``double()``; ``startsWith``, ``endsWith``, ``contains``,
  ``matches``; the macros ``all``, ``exists``, ``exists_one``.

A rule that uses anything else raises ``Unsupported`` (the caller skips it and says so);
an error while evaluating (a missing field without ``has``, a type mismatch) raises
``EvalError``, which fails the rule as on a real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>\d+\.\d+(?:[eE][+-]?\d+)?|\d+[uU]?)
    | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<op>\|\||&&|==|!=|<=|>=|[<>!?:.,()\[\]+\-*/%])
    | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
TYPES = ("int", "uint", "double", "string", "bool", "list", "map", "null_type", "bytes")
Env = dict[str, Any]
Node = Callable[[Env], Any]


class Unsupported(Exception):
    """The rule uses CEL this evaluator does not know."""


class EvalError(Exception):
    """The rule failed to evaluate (no such key, no such overload)."""


class _Type(str):
    """A CEL type value, as ``type(x)`` returns and ``int`` names."""


def type_of(value: Any) -> _Type:
    if value is None:
        return _Type("null_type")
    if isinstance(value, bool):
        return _Type("bool")
    if isinstance(value, int):
        return _Type("int")
    kinds = ((float, "double"), (str, "string"), (list, "list"), (dict, "map"))
    return _Type(next((name for cls, name in kinds if isinstance(value, cls)), "unknown"))


def _tokens(rule: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = rule.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise Unsupported(f"cannot read {text[pos:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _binary(op: str, a: Any, b: Any) -> Any:
    if op in ("==", "!="):
        same = type_of(a) == type_of(b) or {type_of(a), type_of(b)} <= {"int", "double"}
        equal = same and a == b
        return equal if op == "==" else not equal
    if op == "in":
        if isinstance(b, list | dict):
            return a in b
        raise EvalError(f"no such overload: in {type_of(b)}")
    if type_of(a) != type_of(b) and not {type_of(a), type_of(b)} <= {"int", "double"}:
        raise EvalError(f"no such overload: {type_of(a)} {op} {type_of(b)}")
    try:
        return {
            "<": lambda: a < b,
            "<=": lambda: a <= b,
            ">": lambda: a > b,
            ">=": lambda: a >= b,
            "+": lambda: a + b,
            "-": lambda: a - b,
            "*": lambda: a * b,
            "/": lambda: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
            "%": lambda: a % b,
        }[op]()
    except (TypeError, ZeroDivisionError) as err:
        raise EvalError(str(err)) from None


def _size(value: Any) -> int:
    if isinstance(value, str | list | dict):
        return len(value)
    raise EvalError(f"no such overload: size({type_of(value)})")


def _convert(name: str, value: Any) -> Any:
    try:
        return {"int": int, "uint": int, "double": float, "string": str}[name](value)
    except (TypeError, ValueError) as err:
        raise EvalError(f"{name}({value!r}): {err}") from None


METHODS: dict[str, Callable[..., Any]] = {
    "size": _size,
    "startsWith": lambda s, p: str(s).startswith(p),
    "endsWith": lambda s, p: str(s).endswith(p),
    "contains": lambda s, p: p in str(s),
    "matches": lambda s, p: re.search(p, str(s)) is not None,
}
BINARY_LEVELS = (
    ("||",),
    ("&&",),
    ("==", "!=", "<", "<=", ">", ">=", "in"),
    ("+", "-"),
    ("*", "/", "%"),
)


class _Parser:
    """Recursive descent, one method per precedence level, producing closures of an
    environment ({"self": ..., "oldSelf": ...} and macro variables)."""

    def __init__(self, rule: str) -> None:
        self.tokens, self.pos = _tokens(rule), 0

    def peek(self) -> str:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise Unsupported("unexpected end of rule")
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise Unsupported(f"expected {expected!r}, got {token[1]!r}")
        self.pos += 1
        return token

    def parse(self) -> Node:
        node = self.conditional()
        if self.pos != len(self.tokens):
            raise Unsupported(f"unexpected {self.peek()!r}")
        return node

    def conditional(self) -> Node:
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.take("?")
        then = self.conditional()
        self.take(":")
        other = self.conditional()
        return lambda env: then(env) if _truth(cond(env)) else other(env)

    def binary(self, level: int) -> Node:
        if level == len(BINARY_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in BINARY_LEVELS[level]:
            op = self.take()[1]
            right = self.binary(level + 1)
            left = _combine(op, left, right)
        return left

    def unary(self) -> Node:
        if self.peek() == "!":
            self.take()
            inner = self.unary()
            return lambda env: not _truth(inner(env))
        if self.peek() == "-":
            self.take()
            inner = self.unary()
            return lambda env: _binary("-", 0, inner(env))
        return self.member(self.primary())

    def member(self, node: Node) -> Node:
        while self.peek() in (".", "["):
            if self.take()[1] == "[":
                index = self.conditional()
                self.take("]")
                node = _index(node, index)
                continue
            name = self.take()[1]
            if self.peek() == "(":
                node = self.method(node, name)
            else:
                node = _field(node, name)
        return node

    def method(self, target: Node, name: str) -> Node:
        self.take("(")
        if name in ("all", "exists", "exists_one"):
            var = self.take()[1]
            self.take(",")
            body = self.conditional()
            self.take(")")
            return _macro(name, target, var, body)
        if name not in METHODS:
            raise Unsupported(f"method {name}()")
        args = self.arguments()
        fn = METHODS[name]
        return lambda env: fn(target(env), *(a(env) for a in args))

    def arguments(self) -> list[Node]:
        args: list[Node] = []
        while self.peek() != ")":
            args.append(self.conditional())
            if self.peek() == ",":
                self.take(",")
        self.take(")")
        return args

    def primary(self) -> Node:
        kind, text = self.take()
        if kind == "num":
            value: Any = float(text) if "." in text else int(text.rstrip("uU"))
            return lambda env: value
        if kind == "str":
            literal = re.sub(r"\\(.)", r"\1", text[1:-1])
            return lambda env: literal
        if text == "(":
            inner = self.conditional()
            self.take(")")
            return inner
        if text == "[":
            items = []
            while self.peek() != "]":
                items.append(self.conditional())
                if self.peek() == ",":
                    self.take(",")
            self.take("]")
            return lambda env: [i(env) for i in items]
        if kind == "id":
            return self.identifier(text)
        raise Unsupported(f"unexpected {text!r}")

    def identifier(self, name: str) -> Node:
        constants = {"true": True, "false": False, "null": None}
        if name in constants:
            return lambda env: constants[name]
        if self.peek() == "(":
            return self.call(name)
        if name in TYPES:
            return lambda env: _Type(name)
        return lambda env: _variable(env, name)

    def call(self, name: str) -> Node:
        if name == "has":
            self.take("(")
            target = self.member(self.primary())
            self.take(")")
            return _has(target)
        self.take("(")
        args = self.arguments()
        if name == "size" and len(args) == 1:
            return lambda env: _size(args[0](env))
        if name == "type" and len(args) == 1:
            return lambda env: type_of(args[0](env))
        if name in ("int", "uint", "double", "string") and len(args) == 1:
            return lambda env: _convert(name, args[0](env))
        raise Unsupported(f"function {name}()")


def _truth(value: Any) -> bool:
    if not isinstance(value, bool):
        raise EvalError(f"expected a bool, got {type_of(value)}")
    return value


def _combine(op: str, left: Node, right: Node) -> Node:
    if op == "&&":
        return lambda env: _truth(left(env)) and _truth(right(env))
    if op == "||":
        return lambda env: _truth(left(env)) or _truth(right(env))
    return lambda env: _binary(op, left(env), right(env))


class _Missing:
    """A field access that found nothing: an error unless ``has()`` asked."""

    def __init__(self, name: str) -> None:
        self.name = name


def _resolve(value: Any) -> Any:
    if isinstance(value, _Missing):
        raise EvalError(f"no such key: {value.name}")
    return value


def _field(target: Node, name: str) -> Node:
    def get(env: Env) -> Any:
        value = _resolve(target(env))
        if isinstance(value, dict):
            return value[name] if name in value else _Missing(name)
        raise EvalError(f"no such field {name!r} on {type_of(value)}")

    return lambda env: _resolve(get(env)) if not env.get("__has__") else get(env)


def _index(target: Node, index: Node) -> Node:
    def get(env: Env) -> Any:
        value, key = _resolve(target(env)), index(env)
        try:
            return value[key]
        except (KeyError, IndexError, TypeError):
            raise EvalError(f"no such key: {key!r}") from None

    return get


def _has(target: Node) -> Node:
    def test(env: Env) -> bool:
        try:
            return not isinstance(target({**env, "__has__": True}), _Missing)
        except EvalError:
            return False

    return test


def _variable(env: Env, name: str) -> Any:
    if name not in env or name.startswith("__"):
        raise Unsupported(f"variable {name}")
    return env[name]


def _macro(name: str, target: Node, var: str, body: Node) -> Node:
    def run(env: Env) -> bool:
        items = _resolve(target(env))
        if isinstance(items, dict):
            items = list(items)
        if not isinstance(items, list):
            raise EvalError(f"{name}() needs a list or a map, got {type_of(items)}")
        hits = sum(1 for item in items if _truth(body({**env, var: item})))
        return {"all": hits == len(items), "exists": hits > 0, "exists_one": hits == 1}[name]

    return run


def compile_rule(rule: str) -> Node:
    return _Parser(rule).parse()


def uses_old_self(rule: str) -> bool:
    return any(kind == "id" and text == "oldSelf" for kind, text in _tokens(rule))


def evaluate(rule: str, self_value: Any, old_value: Any = None) -> bool:
    """The rule's verdict; Unsupported for CEL outside this subset, EvalError when it
    fails to evaluate."""
    env: Env = {"self": self_value}
    if old_value is not None:
        env["oldSelf"] = old_value
    return _truth(compile_rule(rule)(env))
