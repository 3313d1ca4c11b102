"""The data model of the virtual Cypress: node types, the ``Node`` record, paths and names (no I/O, no locks)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pooltree.config import parse_pool_trees
from pooltree.server.pool_rules import check_pool_name
from pooltree.server.protocol import resolve_error
from pooltree.ypath import join_tokens

ROOT_POOL = "<Root>"
POOL_TREES = ("sys", "pool_trees")
POOL_TREES_PATH = "//sys/pool_trees"
ORCHID_PATH = ("sys", "scheduler", "orchid")
POOL_SCHEMA = ("sys", "schemas", "scheduler_pool")
"""YTsaurus's ``//sys/schemas/scheduler_pool``: ``administer`` on it lets a user name pools with the
administrators' pool name regex."""
POOL_SCHEMA_PATH = "//sys/schemas/scheduler_pool"
COMPOSITE_TYPES = frozenset({"map_node", "scheduler_pool_tree", "scheduler_pool"})
SCALAR_TYPES = frozenset(
    {"string_node", "int64_node", "uint64_node", "double_node", "boolean_node", "list_node", "document"}
)
ACCOUNTS = ("sys", "accounts")
ACCOUNTS_PATH = "//sys/accounts"
ACCOUNT_TYPE = "account"
"""Accounts (``pooltree.server.quotas``): ``account`` objects under ``//sys/accounts``; ``sys`` and ``tmp`` are built in."""
CREATABLE_TYPES = COMPOSITE_TYPES | SCALAR_TYPES | {"file", ACCOUNT_TYPE}
SYSTEM_ATTRIBUTES = frozenset(
    {
        "id",
        "type",
        "name",
        "path",
        "parent_id",
        "creation_time",
        "modification_time",
        "resource_usage",
        "child_count",
        "value",
    }
)
POOL_OBJECT_KEYS = ("name", "pool_tree", "parent_name")
PROTECTED = (
    (),
    ("sys",),
    POOL_TREES,
    ("sys", "scheduler"),
    ORCHID_PATH,
    POOL_SCHEMA[:2],
    POOL_SCHEMA,
    ACCOUNTS,
    (*ACCOUNTS, "sys"),
    (*ACCOUNTS, "tmp"),
)
BOOTSTRAP: tuple[tuple[tuple[str, ...], str], ...] = (
    ((), "map_node"),
    (("sys",), "map_node"),
    (POOL_TREES, "map_node"),
    (("sys", "scheduler"), "map_node"),
    (ORCHID_PATH, "orchid"),
    (POOL_SCHEMA[:2], "map_node"),
    (POOL_SCHEMA, "map_node"),
    (("tmp",), "map_node"),
    (ACCOUNTS, "map_node"),
    ((*ACCOUNTS, "sys"), ACCOUNT_TYPE),
    ((*ACCOUNTS, "tmp"), ACCOUNT_TYPE),
)

Validator = Callable[[dict[str, Any]], Any]


class OrchidProvider(Protocol):
    """The live scheduler view under ``//sys/scheduler/orchid``; raises ``LookupError`` for a missing path."""

    def get(self, path_tokens: Sequence[str]) -> Any: ...


@dataclass(frozen=True)
class PoolTreesChange:
    """What a committed mutation did to the pool trees, for the scheduler to apply."""

    trees: dict[str, dict[str, Any]]
    """The whole new pool trees document ``{tree: {config, pools}}``."""
    changed: frozenset[str]
    """Trees added or changed."""
    removed: frozenset[str]
    default_tree: str | None
    """``//sys/pool_trees/@default_tree`` (None when unset)."""
    parsed: Any = None
    """What the validator returned for ``trees`` (``parse_pool_trees`` gives the tree definitions)."""


Listener = Callable[[PoolTreesChange], None]


def default_validator() -> Validator:
    """``pooltree.config.parse_pool_trees``: the one validator of pool tree documents."""
    return parse_pool_trees


def new_id() -> str:
    """A YT-style GUID: four lowercase hex groups."""
    return "-".join(f"{secrets.randbits(32):x}" for _ in range(4))


@dataclass
class Node:
    """One Cypress node: type, user attributes, a value (scalar nodes) or children (composite nodes)."""

    id: str
    type: str
    attributes: dict[str, Any] = field(default_factory=dict)
    value: Any = None
    children: dict[str, Node] = field(default_factory=dict)
    creation_time: float = 0.0
    modification_time: float = 0.0

    def record(self) -> dict[str, Any]:
        """What the store keeps for this node (children are separate records)."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "attributes": self.attributes,
            "creation_time": self.creation_time,
            "modification_time": self.modification_time,
        }
        if self.type in SCALAR_TYPES or self.type == "file":
            out["value"] = self.value
        return out


def walk(node: Node, tokens: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Node]]:
    yield tokens, node
    for name, child in node.children.items():
        yield from walk(child, (*tokens, name))


def flatten(root: Node) -> dict[str, dict[str, Any]]:
    return {join_tokens(tokens): node.record() for tokens, node in walk(root)}


def scalar_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean_node"
    if isinstance(value, int):
        return "uint64_node" if value > 2**63 - 1 else "int64_node"
    if isinstance(value, float):
        return "double_node"
    if isinstance(value, str):
        return "string_node"
    if isinstance(value, list):
        return "list_node"
    return "document"


def under_pool_trees(tokens: tuple[str, ...]) -> bool:
    return tokens[:2] == POOL_TREES


def check_name(kind: str, name: Any) -> str:
    return check_pool_name(name, kind)


def lookup_nested(value: Any, keys: Sequence[str], path: str) -> Any:
    for key in keys:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and is_index(key, len(value)):
            value = value[int(key)]
        else:
            raise resolve_error(path, f'Node has no child with key "{key}"')
    return value


def is_index(key: str, size: int) -> bool:
    try:
        index = int(key)
    except ValueError:
        return False
    return -size <= index < size


def blob_ids(records: Iterable[dict[str, Any]]) -> set[str]:
    """Every stored content blob the given file records refer to."""
    found: set[str] = set()
    for record in records:
        if record.get("type") == "file" and isinstance(record.get("value"), dict):
            found.update(record["value"].get("chunks") or [])
    return found
