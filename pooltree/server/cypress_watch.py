"""Watched Cypress nodes: documents outside ``//sys/pool_trees`` that the scheduler reads, as YTsaurus's scheduler
reads ``//sys/scheduler/user_to_default_pool`` (its per-user default parent pools).

A watch names a node, how to parse its value (``None`` when the node does not exist) and who is told. The mutation
that touches the node parses the new value before anything is stored: a value the scheduler could not use refuses
the mutation with an error naming the path and the field (the last good document stays, as the pool trees do).
After the commit the listener gets the parsed value, under Cypress's lock, in commit order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pooltree.server.cypress_nodes import Node
from pooltree.server.protocol import YtError
from pooltree.ypath import join_tokens

USER_TO_DEFAULT_POOL = ("sys", "scheduler", "user_to_default_pool")
"""YTsaurus's ``//sys/scheduler/user_to_default_pool``: a map from user to the pool under which that user's
ephemeral pools are created, used by trees with ``use_user_default_parent_pool_map``."""
USER_TO_DEFAULT_POOL_PATH = join_tokens(USER_TO_DEFAULT_POOL)


@dataclass(frozen=True)
class Watch:
    """One watched node: ``parse(value)`` (raises ``YtError`` to refuse), then ``listener(parsed)`` after commit."""

    tokens: tuple[str, ...]
    parse: Callable[[Any], Any]
    listener: Callable[[Any], None]

    @property
    def path(self) -> str:
        return join_tokens(self.tokens)

    def touched_by(self, paths: Iterable[str]) -> bool:
        """Whether a mutation touching ``paths`` (node paths, as ``flatten`` names them) changes this node."""
        own = self.path
        return any(p == own or p.startswith(own + "/") for p in paths)


def node_value(root: Node, tokens: tuple[str, ...], value_of: Callable[[Node, tuple[str, ...]], Any]) -> Any:
    """The value of the node at ``tokens`` (``value_of(node, tokens)``), or None when there is none."""
    node: Node | None = root
    for token in tokens:
        node = node.children.get(token) if node is not None else None
    return None if node is None else value_of(node, tokens)


def parse_user_to_default_pool(value: Any) -> dict[str, str]:
    """``//sys/scheduler/user_to_default_pool``: absent means no entries; otherwise a map of user → pool name."""
    path = USER_TO_DEFAULT_POOL_PATH
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise YtError(
            f"Invalid {path}: expected a map from user to pool name, got {type(value).__name__}",
            attributes={"path": path},
        )
    result: dict[str, str] = {}
    for user, pool in value.items():
        if not isinstance(pool, str) or not pool:
            raise YtError(
                f"Invalid {path}: the default pool of user {user!r} must be a non-empty pool name, "
                f"got {pool!r}",
                attributes={"path": path, "field": str(user)},
            )
        result[str(user)] = pool
    return result
