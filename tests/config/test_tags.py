"""node_tag_filter formulas: parsing, evaluation, errors with positions, tree overlap."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.config import TagFilter, nodes_of_trees
from pooltree.errors import ConfigError


@pytest.mark.parametrize(
    ("formula", "tags", "expected"),
    [
        ("", set(), True),
        ("   ", {"x"}, True),
        ("ssd", {"ssd"}, True),
        ("ssd", {"hdd"}, False),
        ("ssd & gpu", {"ssd"}, False),
        ("ssd & gpu", {"ssd", "gpu"}, True),
        ("ssd | gpu", {"gpu"}, True),
        ("!gpu", set(), True),
        ("!!gpu", {"gpu"}, True),
        ("a | b & c", {"a"}, True),  # & binds tighter than |
        ("(a | b) & c", {"a"}, False),
        ("!a & b", {"b"}, True),
        ("!(a & b)", {"a", "b"}, False),
        ("dc:vla & rack-12/x.y", {"dc:vla", "rack-12/x.y"}, True),
    ],
)
def test_evaluation(formula: str, tags: set[str], expected: bool) -> None:
    assert TagFilter.parse(formula).matches(tags) is expected


@pytest.mark.parametrize(
    ("formula", "position", "text"),
    [
        ("a &", 3, "unexpected end of formula"),
        ("(a | b", 6, "expected ')'"),
        ("a b", 2, "unexpected 'b'"),
        ("a & & b", 4, "unexpected '&'"),
        ("a # b", 2, "unexpected '#'"),
        (")", 0, "unexpected ')'"),
    ],
)
def test_parse_errors_name_the_position(formula: str, position: int, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        TagFilter.parse(formula, "pool_trees.t.config.node_tag_filter")
    assert info.value.path == "pool_trees.t.config.node_tag_filter"
    assert f"at position {position}" in info.value.reason
    assert text in info.value.reason


def test_tags_listed() -> None:
    assert TagFilter.parse("a & !(b | c)").tags() == frozenset({"a", "b", "c"})


def test_nodes_of_trees_assigns_and_detects_overlap() -> None:
    nodes = {"n1": ["ssd"], "n2": ["gpu"], "n3": ["ssd", "gpu"], "n4": []}
    result = nodes_of_trees({"physical": "!gpu", "gpu": "gpu"}, nodes)
    assert result == {"physical": ["n1", "n4"], "gpu": ["n2", "n3"]}
    assert nodes_of_trees({"a": "x", "b": "y"}, {"n": ["z"]}) == {"a": [], "b": []}
    with pytest.raises(ConfigError) as info:
        nodes_of_trees({"physical": "", "gpu": "gpu"}, nodes)
    assert "several pool trees (physical, gpu)" in info.value.reason
    assert info.value.attributes["node"] == "n2"


@st.composite
def formulas(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b", "c"]))
    kind = draw(st.sampled_from(["!", "&", "|", "()"]))
    if kind == "!":
        return "!" + draw(formulas(depth - 1))
    if kind == "()":
        return "(" + draw(formulas(depth - 1)) + ")"
    return draw(formulas(depth - 1)) + f" {kind} " + draw(formulas(depth - 1))


@settings(max_examples=60, deadline=None)
@given(formulas())
def test_matches_python_boolean_semantics(formula: str) -> None:
    """The same precedence as Python's not/and/or gives the same truth table."""
    python = formula.replace("!", " not ").replace("&", " and ").replace("|", " or ")
    parsed = TagFilter.parse(formula)
    for values in itertools.product([False, True], repeat=3):
        env = dict(zip("abc", values, strict=True))
        tags = {name for name, value in env.items() if value}
        assert parsed.matches(tags) is bool(eval(python, {}, env))
