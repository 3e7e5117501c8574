"""Hostile documents are refused with a reason before any parser builds them: deep nesting
(the C YAML loader would segfault), alias bombs, garbage."""

import json

import pytest

from agent.documents import (
    MAX_DEPTH,
    DocumentError,
    json_depth,
    load_json,
    load_yaml,
    load_yaml_all,
)

BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,  # unclosed: refused before the syntax error is even found
        nested(100_000),
        "- " * 100_000 + "x",  # block sequences, compact
        "{a: " * 100_000,
    ],
)
def test_yaml_nested_far_too_deep_is_refused_not_a_crash(text):
    """Whichever layer refuses it first: our bound, or (PyYAML 6.0.4 and later) libyaml's
    own at 1,000 levels, whose scanner runs ahead of the events we count. Either way one
    DocumentError with a one-line reason, never a segfault or a RecursionError."""
    with pytest.raises(DocumentError) as err:
        load_yaml(text)
    assert "\n" not in str(err.value) and str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        "".join(" " * i + "a:\n" for i in range(MAX_DEPTH + 1)),  # block mappings
        nested(MAX_DEPTH + 1),
        nested(500),  # deeper than ours, within any PyYAML's own bound
        "{a: " * 500 + "1" + "}" * 500,
    ],
)
def test_yaml_nested_deeper_than_our_bound_is_refused_by_it(text):
    with pytest.raises(DocumentError, match="nested deeper than 100 levels"):
        load_yaml(text)


def test_yaml_at_the_bound_loads():
    doc = load_yaml(nested(MAX_DEPTH))
    for _ in range(MAX_DEPTH - 1):
        doc = doc[0]
    assert doc == []


def test_an_alias_bomb_is_refused_and_ordinary_aliases_load():
    with pytest.raises(DocumentError, match="alias bomb"):
        load_yaml(BOMB)
    merged = load_yaml("base: &b {cpu: 1}\nweb: {<<: *b, memory: 2}\nbatch: {<<: *b}\n")
    assert merged["web"] == {"cpu": 1, "memory": 2} and merged["batch"] == {"cpu": 1}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: [1, 2\n", "not valid YAML: did not find expected ',' or ']' (line 2, column 1)"),
        ("\x00garbage", "not valid YAML: unacceptable character #x0000"),
        ("a: 1\n---\nb: 2\n", "expected one YAML document, found 2"),
    ],
)
def test_yaml_garbage_says_why(text, reason):
    with pytest.raises(DocumentError) as err:
        load_yaml(text)
    assert str(err.value).startswith(reason)


def test_yaml_streams_and_yaml_1_2_floats():
    assert load_yaml_all("a: 2.0e10\n---\n- 1\n") == [{"a": 2.0e10}, [1]]


@pytest.mark.parametrize(
    ("data", "depth"),
    [
        (b"{}", 1),
        (b'{"a": [1, {"b": [[]]}], "c": "x"}', 5),
        (b'{"a": "[[[[{{{{", "b": [1]}', 2),  # brackets in strings do not count
        (b'{"a": "\\"[[[", "b": "\\\\", "c": [[]]}', 3),  # nor escaped quotes and backslashes
        (b'["]", "[", ["}"]]', 2),
        (b'{"a": [{"b": []}]}', 4),  # each pass removes exactly one level, whatever the kinds
        (("{[" * 60 + "]}" * 60).encode(), MAX_DEPTH + 1),
        (nested(MAX_DEPTH).encode(), MAX_DEPTH),
        (nested(MAX_DEPTH + 1).encode(), MAX_DEPTH + 1),
        (nested(100_000).encode(), MAX_DEPTH + 1),  # stops counting past the bound
    ],
)
def test_json_depth_counts_the_brackets_outside_strings(data, depth):
    assert json_depth(data) == depth
    if depth <= MAX_DEPTH:
        assert load_json(data) == json.loads(data)


def test_json_too_deep_or_garbage_is_refused():
    with pytest.raises(DocumentError, match="nested deeper than 100 levels"):
        load_json(b"[" * 100_000)  # json.loads would raise RecursionError
    with pytest.raises(DocumentError, match="nested deeper than 100 levels"):
        load_json(nested(MAX_DEPTH + 1))
    with pytest.raises(DocumentError, match="not valid JSON: Expecting value"):
        load_json(b"\xff\xfe garbage")
