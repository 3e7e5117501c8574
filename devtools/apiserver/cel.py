"""The CEL subset of ``x-kubernetes-validations`` rules the dev server evaluates: presence
tests joined by logic, as in ``has(self.throttle) || has(self.eviction)`` and
``!(has(self.ttl) && has(self.expires))``.

Grammar: ``or := and ('||' and)*``, ``and := unary ('&&' unary)*``,
``unary := '!' unary | '(' or ')' | 'has(' self.field(.field)* ')' | true | false``.
Anything else raises ``Unsupported``: the caller skips that rule and says so.
"""

from __future__ import annotations

import re
from typing import Any

_TOKENS = re.compile(
    r"\s*(\|\||&&|!|\(|\)|has\(\s*self(?:\.[A-Za-z_][A-Za-z0-9_]*)+\s*\)|true|false)"
)


class Unsupported(Exception):
    """The rule is outside the subset."""


def _tokens(rule: str) -> list[str]:
    out, pos, text = [], 0, rule.strip()
    while pos < len(text):
        m = _TOKENS.match(text, pos)
        if m is None:
            raise Unsupported(rule)
        out.append(m.group(1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[str], self_value: Any) -> None:
        self.tokens, self.pos, self.value = tokens, 0, self_value

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def take(self) -> str:
        token = self.peek()
        if not token:
            raise Unsupported("unexpected end of rule")
        self.pos += 1
        return token

    def any_of(self) -> bool:
        result = self.all_of()
        while self.peek() == "||":
            self.take()
            result = self.all_of() or result
        return result

    def all_of(self) -> bool:
        result = self.unary()
        while self.peek() == "&&":
            self.take()
            result = self.unary() and result
        return result

    def unary(self) -> bool:
        token = self.take()
        if token == "!":
            return not self.unary()
        if token == "(":
            result = self.any_of()
            if self.take() != ")":
                raise Unsupported("unbalanced parentheses")
            return result
        if token in ("true", "false"):
            return token == "true"
        if token.startswith("has("):
            return self.has(token[4:-1].strip().split(".")[1:])
        raise Unsupported(token)

    def has(self, path: list[str]) -> bool:
        node = self.value
        for name in path:
            if not isinstance(node, dict) or name not in node:
                return False
            node = node[name]
        return True


def evaluate(rule: str, self_value: Any) -> bool:
    parser = _Parser(_tokens(rule), self_value)
    result = parser.any_of()
    if parser.peek():
        raise Unsupported(rule)
    return result
