"""The virtual Cypress's tree edits (``cypress.py``), as plain functions over a root ``Node``.

Resolving a path to its node (``resolve_tokens``, ``find``, ``node_at``), where a write may go (``find_for_write``,
``parent_for_create``, ``create_target``, ``pool_target``) and moving a node (``move_node``), each with YTsaurus's
rules for pool trees and pools. They change only the root they are given: ``Cypress`` hands them a copy and
makes it current once the whole result is valid and stored.
"""

from __future__ import annotations

from typing import Any

from pooltree.server.cypress_nodes import (
    ACCOUNT_TYPE,
    ACCOUNTS,
    ACCOUNTS_PATH,
    COMPOSITE_TYPES,
    POOL_TREES,
    POOL_TREES_PATH,
    PROTECTED,
    ROOT_POOL,
    Node,
    check_name,
    new_id,
    scalar_type,
    under_pool_trees,
    walk,
)
from pooltree.server.pool_rules import check_pool_name, pool_name_error, pool_name_regexes
from pooltree.server.protocol import ALREADY_EXISTS, RESOLVE_ERROR, YtError, resolve_error
from pooltree.ypath import YPath, join_tokens, parse_ypath


def node_at(root: Node, tokens: tuple[str, ...]) -> Node:
    node = root
    for token in tokens:
        node = node.children[token]
    return node


def resolve_tokens(root: Node, ypath: YPath) -> tuple[str, ...]:
    if ypath.object_id is None:
        return ypath.tokens
    for tokens, node in walk(root):
        if node.id == ypath.object_id:
            return tokens + ypath.tokens
    raise resolve_error(ypath.text, f"No such object {ypath.object_id}")


def find(root: Node, tokens: tuple[str, ...], text: str) -> tuple[Node | None, tuple[str, ...]]:
    """The node at ``tokens``, or the orchid node with the tokens below it; resolve error if missing."""
    node = root
    for index, token in enumerate(tokens):
        if node.type == "orchid":
            return None, tokens[index:]
        child = node.children.get(token)
        if child is None:
            if node.type not in COMPOSITE_TYPES:
                raise resolve_error(
                    text, f"Node {join_tokens(tokens[:index])} of type {node.type} has no children"
                )
            raise resolve_error(text, f'Node {join_tokens(tokens[:index])} has no child with key "{token}"')
        node = child
    if node.type == "orchid":
        return None, ()
    return node, ()


def pool_name(root: Node, name: Any) -> str:
    """``name`` when some caller may give it to a pool: the users' or the administrators' regex of
    ``//sys/@config/scheduler_pool_manager`` (which one applies to the caller is the security policy's check)."""
    users, administrators = pool_name_regexes(root.children["sys"].attributes)
    if pool_name_error(name, "Pool", users) is None:
        return str(name)
    return check_pool_name(name, "Pool", regex=administrators)


def pool_target(root: Node, tokens: tuple[str, ...], parent_name: Any) -> tuple[str, ...]:
    """Where pool ``tokens`` goes when its ``@parent_name`` becomes ``parent_name``."""
    tree_tokens = tokens[:3]
    if parent_name == ROOT_POOL:
        return (*tree_tokens, tokens[-1])
    if not isinstance(parent_name, str):
        raise YtError(
            f"Attribute parent_name must be a pool name, got {parent_name!r}",
            attributes={"path": join_tokens(tokens) + "/@parent_name"},
        )
    for found, node in walk(node_at(root, tree_tokens), tree_tokens):
        if len(found) > 3 and found[-1] == parent_name and node.type == "scheduler_pool":
            return (*found, tokens[-1])
    raise YtError(
        f'Parent pool "{parent_name}" does not exist in pool tree "{tokens[2]}"',
        code=RESOLVE_ERROR,
        attributes={"pool_tree": tokens[2], "parent_name": parent_name},
    )


def find_for_write(
    root: Node, tokens: tuple[str, ...], ypath: YPath, *, missing_ok: bool
) -> tuple[Node | None, tuple[str, ...]]:
    for index in range(len(tokens) + 1):
        if is_orchid(root, tokens[:index]):
            raise YtError(f"{ypath.text} is read-only: the orchid reflects the scheduler state")
    try:
        return find(root, tokens, ypath.text)
    except YtError:
        if missing_ok and tokens:
            return None, ()
        raise


def is_orchid(root: Node, tokens: tuple[str, ...]) -> bool:
    node = root
    for token in tokens:
        if node.type == "orchid" or token not in node.children:
            return node.type == "orchid"
        node = node.children[token]
    return node.type == "orchid"


def build_node(value: Any, now: float) -> Node:
    if isinstance(value, dict) and not ("$value" in value and set(value) <= {"$value", "$attributes"}):
        node = Node(new_id(), "map_node", creation_time=now, modification_time=now)
        for name in sorted(value):
            node.children[name] = build_node(value[name], now)
        return node
    return Node(new_id(), scalar_type(value), value=value, creation_time=now, modification_time=now)


def parent_for_create(
    root: Node, tokens: tuple[str, ...], ypath: YPath, recursive: bool, now: float, node_type: str
) -> Node:
    if not tokens:
        raise YtError("The root node already exists", code=ALREADY_EXISTS, attributes={"path": ypath.text})
    parent = root
    for index, token in enumerate(tokens[:-1]):
        child = parent.children.get(token)
        if child is None:
            if not recursive:
                raise resolve_error(
                    ypath.text, f'Node {join_tokens(tokens[:index])} has no child with key "{token}"'
                )
            if under_pool_trees(tokens[: index + 1]):
                raise YtError(
                    f"Cannot create intermediate nodes inside {POOL_TREES_PATH}: create pool trees and pools "
                    "one level at a time",
                    attributes={"path": ypath.text},
                )
            child = Node(new_id(), "map_node", creation_time=now, modification_time=now)
            parent.children[token] = child
            parent.children = dict(sorted(parent.children.items()))
        parent = child
    parent_tokens = tokens[:-1]
    if parent.type not in COMPOSITE_TYPES:
        raise YtError(
            f"Cannot create {ypath.text}: its parent is a {parent.type}", attributes={"path": ypath.text}
        )
    if parent_tokens == POOL_TREES and node_type != "scheduler_pool_tree":
        raise YtError(
            f"Only scheduler_pool_tree nodes can be created in {POOL_TREES_PATH}, not {node_type}",
            attributes={"path": ypath.text, "type": node_type},
        )
    if parent.type in ("scheduler_pool_tree", "scheduler_pool") and node_type != "scheduler_pool":
        raise YtError(
            f"Only scheduler_pool nodes can be created inside a pool tree, not {node_type}",
            attributes={"path": ypath.text, "type": node_type},
        )
    if node_type == "scheduler_pool_tree" and parent_tokens != POOL_TREES:
        raise YtError(
            f"scheduler_pool_tree nodes live directly in {POOL_TREES_PATH}",
            attributes={"path": ypath.text},
        )
    if node_type == "scheduler_pool" and parent.type not in ("scheduler_pool_tree", "scheduler_pool"):
        raise YtError(
            "scheduler_pool nodes live inside a pool tree (//sys/pool_trees/<tree>/...)",
            attributes={"path": ypath.text},
        )
    return parent


def create_target(
    root: Node, node_type: str, path: str | None, attrs: dict[str, Any]
) -> tuple[tuple[str, ...], str]:
    """Where a new node goes; consumes ``name``/``pool_tree``/``parent_name`` of object-style creation."""
    if path is not None:
        ypath = parse_ypath(path)
        if ypath.attribute is not None:
            raise YtError(f"Cannot create a node at attribute path {path}", attributes={"path": path})
        tokens = resolve_tokens(root, ypath)
        return tokens, join_tokens(tokens)
    if node_type == "scheduler_pool_tree":
        name = check_name("Pool tree", attrs.pop("name", None))
        return (*POOL_TREES, name), f"{POOL_TREES_PATH}/{name}"
    if node_type == ACCOUNT_TYPE:
        name = check_name("Account", attrs.pop("name", None))
        return (*ACCOUNTS, name), f"{ACCOUNTS_PATH}/{name}"
    if node_type != "scheduler_pool":
        raise YtError(f"Creating a {node_type} needs a path", attributes={"parameter": "path"})
    missing = [key for key in ("name", "pool_tree") if key not in attrs]
    if missing:
        raise YtError(
            f'Attribute "{missing[0]}" is required to create a scheduler_pool '
            "(attributes={name=...; pool_tree=...; parent_name=...})",
            attributes={"attribute": missing[0]},
        )
    name = pool_name(root, attrs.pop("name"))
    tree_name = attrs.pop("pool_tree")
    parent_name = attrs.pop("parent_name", None)
    trees = node_at(root, POOL_TREES)
    if not isinstance(tree_name, str) or tree_name not in trees.children:
        raise YtError(
            f'Pool tree "{tree_name}" does not exist',
            code=RESOLVE_ERROR,
            attributes={"pool_tree": str(tree_name)},
        )
    tree_tokens = (*POOL_TREES, tree_name)
    if parent_name in (None, ROOT_POOL):
        return (*tree_tokens, name), join_tokens((*tree_tokens, name))
    for tokens, node in walk(trees.children[tree_name], tree_tokens):
        if len(tokens) > 3 and tokens[-1] == parent_name and node.type == "scheduler_pool":
            return (*tokens, name), join_tokens((*tokens, name))
    raise YtError(
        f'Parent pool "{parent_name}" does not exist in pool tree "{tree_name}"',
        code=RESOLVE_ERROR,
        attributes={"pool_tree": tree_name, "parent_name": str(parent_name)},
    )


def move_node(
    root: Node,
    node: Node,
    source: tuple[str, ...],
    target: tuple[str, ...],
    recursive: bool,
    force: bool,
    now: float,
) -> str:
    text, target_text = join_tokens(source), join_tokens(target)
    if source in PROTECTED:
        raise YtError(f"Node {text} cannot be moved", attributes={"path": text})
    if target[: len(source)] == source:
        raise YtError(
            f"Cannot move {text} into itself or its own descendant {target_text}",
            attributes={"source_path": text, "destination_path": target_text},
        )
    if node.type == "scheduler_pool_tree":
        raise YtError(
            f"Pool tree {text} cannot be moved or renamed: operations and @default_tree refer to it by name",
            attributes={"path": text},
        )
    if node.type == "scheduler_pool":
        trees = node_at(root, POOL_TREES)
        if target[:2] != POOL_TREES or len(target) < 4 or target[2] not in trees.children:
            raise YtError(
                f'Pool "{source[-1]}" cannot be moved out of the pool trees (to {target_text})',
                attributes={"pool": source[-1], "pool_tree": source[2], "destination_path": target_text},
            )
        pool_name(root, target[-1])
        moved = {t[-1] for t, _ in walk(node, source)}  # the pool and its subpools keep their names
        holder = next(
            (
                join_tokens(t)
                for t, _ in walk(trees.children[target[2]], target[:3])
                if len(t) > 3 and t[-1] in moved and t[: len(source)] != source
            ),
            None,
        )
        if holder is not None and holder != target_text:
            raise YtError(
                f'Pool "{holder.rsplit("/", 1)[-1]}" already exists in pool tree "{target[2]}" at {holder}',
                code=ALREADY_EXISTS,
                attributes={"pool": holder.rsplit("/", 1)[-1], "pool_tree": target[2], "path": holder},
            )
    try:
        existing, _ = find(root, target, target_text)
    except YtError:
        existing = None
    if existing is not None and (
        not force or target in PROTECTED or existing.type in ("scheduler_pool_tree", "scheduler_pool")
    ):
        raise YtError(
            f"Node {target_text} already exists",
            code=ALREADY_EXISTS,
            attributes={"path": target_text},
        )
    parent = parent_for_create(root, target, parse_ypath(target_text), recursive, now, node.type)
    old_parent = node_at(root, source[:-1])
    del old_parent.children[source[-1]]
    old_parent.modification_time = now
    parent.children[target[-1]] = node
    parent.children = dict(sorted(parent.children.items()))
    parent.modification_time = now
    node.modification_time = now
    return node.id


def check_creation(
    root: Node, parent: Node, node_type: str, tokens: tuple[str, ...], attrs: dict[str, Any], text: str
) -> None:
    """The master's rules for a new pool (a name the pool manager's regexes allow, unique in its tree) and a new
    pool tree (a valid name, ``@config`` a map; the first tree becomes ``@default_tree``)."""
    if node_type == "scheduler_pool":
        pool_name(root, tokens[-1])
        tree = node_at(root, tokens[:3])
        holder = next(
            (
                join_tokens(t)
                for t, n in walk(tree, tokens[:3])
                if t != tokens and t[-1] == tokens[-1] and len(t) > 3
            ),
            None,
        )
        if holder is not None:
            raise YtError(
                f'Pool "{tokens[-1]}" already exists in pool tree "{tokens[2]}" at {holder}',
                code=ALREADY_EXISTS,
                attributes={"pool": tokens[-1], "pool_tree": tokens[2], "path": holder},
            )
    elif node_type == "scheduler_pool_tree":
        check_name("Pool tree", tokens[-1])
        if not isinstance(attrs.setdefault("config", {}), dict):
            raise YtError(
                f'Attribute "config" of pool tree "{tokens[-1]}" must be a map of tree options',
                attributes={"path": f"{text}/@config"},
            )
        if not parent.children and "default_tree" not in parent.attributes:
            parent.attributes["default_tree"] = tokens[-1]  # the first tree becomes the default
