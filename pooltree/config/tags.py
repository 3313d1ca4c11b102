"""``node_tag_filter`` / ``scheduling_tag_filter``: boolean formulas over node tags, and node-to-tree assignment.

Grammar (YTsaurus boolean formulas): ``expr := term ('|' term)*``, ``term := factor ('&' factor)*``,
``factor := '!' factor | '(' expr ')' | TAG``. A tag is a run of letters, digits and ``_ - . : /``.
``!`` binds tightest, then ``&``, then ``|``. An empty (or blank) filter matches every node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pooltree.errors import ConfigError

_TAG_RE = re.compile(r"[A-Za-z0-9_\-.:/]+")


@dataclass(frozen=True)
class _Tag:
    name: str

    def evaluate(self, tags: frozenset[str]) -> bool:
        return self.name in tags


@dataclass(frozen=True)
class _Not:
    operand: _Node

    def evaluate(self, tags: frozenset[str]) -> bool:
        return not self.operand.evaluate(tags)


@dataclass(frozen=True)
class _And:
    operands: tuple[_Node, ...]

    def evaluate(self, tags: frozenset[str]) -> bool:
        return all(operand.evaluate(tags) for operand in self.operands)


@dataclass(frozen=True)
class _Or:
    operands: tuple[_Node, ...]

    def evaluate(self, tags: frozenset[str]) -> bool:
        return any(operand.evaluate(tags) for operand in self.operands)


_Node = _Tag | _Not | _And | _Or


class _Parser:
    """Recursive-descent parser; positions in errors are 0-based character offsets into the formula."""

    def __init__(self, text: str, path: str):
        self.text = text
        self.path = path
        self.pos = 0

    def fail(self, reason: str) -> ConfigError:
        return ConfigError(self.path, f"invalid tag filter {self.text!r}: {reason} at position {self.pos}")

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_spaces()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def parse(self) -> _Node:
        node = self.expression()
        if self.peek():
            raise self.fail(f"unexpected {self.text[self.pos]!r}")
        return node

    def expression(self) -> _Node:
        operands = [self.term()]
        while self.peek() == "|":
            self.pos += 1
            operands.append(self.term())
        return operands[0] if len(operands) == 1 else _Or(tuple(operands))

    def term(self) -> _Node:
        operands = [self.factor()]
        while self.peek() == "&":
            self.pos += 1
            operands.append(self.factor())
        return operands[0] if len(operands) == 1 else _And(tuple(operands))

    def factor(self) -> _Node:
        char = self.peek()
        if char == "!":
            self.pos += 1
            return _Not(self.factor())
        if char == "(":
            self.pos += 1
            node = self.expression()
            if self.peek() != ")":
                raise self.fail("expected ')'")
            self.pos += 1
            return node
        if not char:
            raise self.fail("unexpected end of formula, expected a tag, '!' or '('")
        match = _TAG_RE.match(self.text, self.pos)
        if not match:
            raise self.fail(f"unexpected {char!r}, expected a tag, '!' or '('")
        self.pos = match.end()
        return _Tag(match.group(0))


@dataclass(frozen=True)
class TagFilter:
    """A parsed tag formula; ``TagFilter.parse("ssd & !gpu").matches({"ssd"})`` is True."""

    text: str = ""
    _root: _Node | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, text: str | None, path: str = "") -> TagFilter:
        """Parse a formula; a malformed one raises ConfigError naming ``path`` and the character position."""
        if text is None:
            return cls("")
        if not isinstance(text, str):
            raise ConfigError(path, f"tag filter must be a string, got {type(text).__name__}")
        if not text.strip():
            return cls(text)
        return cls(text, _Parser(text, path).parse())

    @property
    def is_empty(self) -> bool:
        return self._root is None

    def matches(self, tags: Iterable[str]) -> bool:
        """Whether a node with ``tags`` satisfies the formula (always True for the empty filter)."""
        if self._root is None:
            return True
        return self._root.evaluate(frozenset(tags))

    def tags(self) -> frozenset[str]:
        """Every tag the formula mentions."""
        found: set[str] = set()
        stack: list[_Node] = [self._root] if self._root is not None else []
        while stack:
            node = stack.pop()
            if isinstance(node, _Tag):
                found.add(node.name)
            elif isinstance(node, _Not):
                stack.append(node.operand)
            else:
                stack.extend(node.operands)
        return frozenset(found)

    def __str__(self) -> str:
        return self.text


def nodes_of_trees(
    trees: Mapping[str, TagFilter | str | None], nodes: Mapping[str, Iterable[str]]
) -> dict[str, list[str]]:
    """Assign every node (address → tags) to the pool tree whose ``node_tag_filter`` it matches.

    Returns tree → node addresses (in the order of ``nodes``); every tree appears, possibly with no nodes.
    A node that matches no tree belongs to none. A node matching two trees is an error: YTsaurus trees must
    not overlap.
    """
    filters = {
        name: value
        if isinstance(value, TagFilter)
        else TagFilter.parse(value, f"pool_trees.{name}.config.node_tag_filter")
        for name, value in trees.items()
    }
    result: dict[str, list[str]] = {name: [] for name in filters}
    for address, tags in nodes.items():
        tag_set = frozenset(tags)
        matched = [name for name, tag_filter in filters.items() if tag_filter.matches(tag_set)]
        if len(matched) > 1:
            raise ConfigError(
                f"cluster.nodes.{address}",
                f"node {address!r} with tags {sorted(tag_set)} matches the node_tag_filter of several pool trees "
                f"({', '.join(matched)}); pool trees must not share nodes",
                attributes={"node": address, "pool_trees": matched},
            )
        if matched:
            result[matched[0]].append(address)
    return result
