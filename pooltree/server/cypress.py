"""A small virtual Cypress: ``//sys/pool_trees`` with pool trees and pools, generic nodes, and the orchid.

Pool trees are ``scheduler_pool_tree`` nodes under ``//sys/pool_trees`` (tree options in ``@config``), pools are
nested ``scheduler_pool`` nodes whose attributes are pool options. Every mutation is applied to a copy of the
tree; if it touches ``//sys/pool_trees`` the resulting pool trees document is validated as a whole, and only a
valid state is written to the store and becomes current, so a rejected change leaves the last good state.
"""

from __future__ import annotations

import copy
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pooltree.errors import ConfigError, PooltreeError
from pooltree.server import quotas
from pooltree.server.batch import UNSUPPORTED
from pooltree.server.cypress_attributes import (
    canonical_keys,
    canonical_pool_attributes,
    refuse_pool_option_on_tree,
    remove_attribute,
    set_attribute,
)
from pooltree.server.cypress_edits import (
    build_node,
    check_creation,
    create_target,
    find,
    find_for_write,
    move_node,
    node_at,
    parent_for_create,
    pool_name,
    pool_target,
    resolve_tokens,
)
from pooltree.server.cypress_nodes import (  # noqa: F401 (re-exported)
    ACCOUNT_TYPE,
    ACCOUNTS,
    ACCOUNTS_PATH,
    BOOTSTRAP,
    COMPOSITE_TYPES,
    CREATABLE_TYPES,
    ORCHID_PATH,
    POOL_OBJECT_KEYS,
    POOL_SCHEMA,
    POOL_SCHEMA_PATH,
    POOL_TREES,
    POOL_TREES_PATH,
    PROTECTED,
    ROOT_POOL,
    SCALAR_TYPES,
    SYSTEM_ATTRIBUTES,
    Listener,
    Node,
    OrchidProvider,
    PoolTreesChange,
    Validator,
    blob_ids,
    check_name,
    default_validator,
    flatten,
    is_index,
    lookup_nested,
    new_id,
    scalar_type,
    under_pool_trees,
    walk,
)
from pooltree.server.cypress_watch import Watch, node_value
from pooltree.server.pool_rules import (
    check_pool_depth,
    check_pool_manager_config,
)
from pooltree.server.protocol import (
    ALREADY_EXISTS,
    RESOLVE_ERROR,
    YtError,
    format_datetime,
    resolve_error,
)
from pooltree.server.store import Store
from pooltree.server.tree_options import split_pool_attributes, strict_types
from pooltree.ypath import YPath, join_tokens, parse_ypath

log = logging.getLogger(__name__)


class Cypress:
    """The virtual Cypress over a ``Store``; thread-safe, mutations are validated and atomic.

    Reads take no lock: a mutation changes a copy of the tree and replaces the published one whole (``_mutate``,
    under the lock), never a published node in place, so a read that takes ``self._root`` once reads one published
    state however long it takes. A read thus never waits behind a mutation, nor behind a start, which holds this
    lock (the scheduler's ``config_lock``) while it waits for the scheduling lock: an orchid read (answered from the
    scheduler's read snapshot) and the security checks of every command (``security_chain``, ``security_target``)
    are answered while starts queue."""

    def __init__(
        self,
        store: Store,
        *,
        validator: Validator | None = None,
        orchid: OrchidProvider | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._validator = validator if validator is not None else default_validator()
        self.orchid = orchid
        self._clock = clock
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._watches: list[Watch] = []
        self._root = self._load()
        self._parsed = self._validate(
            self.pool_trees_document(self._root), self.default_tree_attribute(), disjoint=False
        )

    # Public hooks for the modules that extend Cypress (files, transactions; they resolve paths with
    # ``cypress_edits``).

    blob_released: Callable[[set[str]], None] | None = None
    """Called (under the lock) with content blobs no file node refers to any more after a mutation."""

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def root(self) -> Node:
        return self._root

    def mutate(self, change: Callable[[Node, float], Any]) -> Any:
        """Apply ``change(root_copy, now)`` atomically (validated, stored, then current)."""
        return self._mutate(change)

    # Loading and bootstrapping.

    def _load(self) -> Node:
        records = self._store.load_nodes()
        nodes: dict[tuple[str, ...], Node] = {}
        for path in sorted(records, key=lambda p: (p.count("/"), p)):
            record = records[path]
            tokens = parse_ypath(path).tokens
            node = Node(
                id=record["id"],
                type=record["type"],
                attributes=dict(record.get("attributes") or {}),
                value=record.get("value"),
                creation_time=float(record.get("creation_time", 0.0)),
                modification_time=float(record.get("modification_time", 0.0)),
            )
            nodes[tokens] = node
            if tokens:
                parent = nodes.get(tokens[:-1])
                if parent is None:
                    raise PooltreeError(
                        f"store holds node {path} without its parent", attributes={"path": path}
                    )
                parent.children[tokens[-1]] = node
        now = self._clock()
        missing: dict[str, dict[str, Any]] = {}
        for tokens, node_type in BOOTSTRAP:
            if tokens not in nodes:
                node = Node(new_id(), node_type, creation_time=now, modification_time=now)
                nodes[tokens] = node
                if tokens:
                    nodes[tokens[:-1]].children[tokens[-1]] = node
                missing[join_tokens(tokens)] = node.record()
        if missing:
            self._store.save_nodes(missing, [])
        nodes[("sys",)].attributes.setdefault("config", {})  # the master's dynamic config (pool_rules.py)
        nodes[POOL_SCHEMA].attributes.setdefault("acl", [])
        for node in nodes.values():
            node.children = dict(sorted(node.children.items()))
            if node.type == "scheduler_pool_tree":
                node.attributes.setdefault("config", {})
        for name, account in quotas.accounts(nodes[()]).items():
            account.attributes.setdefault("resource_limits", quotas.limits(name, None))
        return nodes[()]

    # Listeners and the pool trees document.

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` after every committed change of the pool trees (in commit order)."""
        self._listeners.append(listener)

    def watch(self, path: str, parse: Callable[[Any], Any], listener: Callable[[Any], None]) -> Any:
        """Watch the node at ``path`` (``cypress_watch.py``): mutations touching it are refused when ``parse`` of
        its new value raises; ``listener`` gets the parsed value after each commit. Returns the current parsed one."""
        with self._lock:
            watch = Watch(parse_ypath(path).tokens, parse, listener)
            self._watches.append(watch)
            return parse(node_value(self._root, watch.tokens, self._plain_value))

    def _plain_value(self, node: Node, tokens: tuple[str, ...]) -> Any:
        return self._value(self._root, node, tokens, None)  # no attributes: the root is not read

    @property
    def parsed_pool_trees(self) -> Any:
        """What the validator returned for the current (last good) pool trees."""
        return self._parsed

    def pool_trees_document(self, root: Node | None = None) -> dict[str, dict[str, Any]]:
        """The current pool trees as ``{tree: {"config": {...}, "pools": {pool: {...options, "pools": ...}}}}``."""
        trees_node = node_at(root or self._root, POOL_TREES)
        return {name: self._tree_document(tree) for name, tree in trees_node.children.items()}

    @staticmethod
    def _tree_document(tree: Node) -> dict[str, Any]:
        def pool_doc(pool: Node) -> dict[str, Any]:
            doc = split_pool_attributes(copy.deepcopy(pool.attributes))[0]
            if pool.children:
                doc["pools"] = {name: pool_doc(child) for name, child in pool.children.items()}
            return doc

        config = copy.deepcopy(tree.attributes.get("config", {}))
        return {"config": config, "pools": {name: pool_doc(child) for name, child in tree.children.items()}}

    def default_tree_attribute(self, root: Node | None = None) -> str | None:
        value = node_at(root or self._root, POOL_TREES).attributes.get("default_tree")
        return value if isinstance(value, str) else None

    def default_tree(self) -> str:
        """``@default_tree`` of ``//sys/pool_trees`` when it names a pool tree; a resolve error otherwise.

        As in YTsaurus, only the attribute makes a tree the default: without it (or while it names a tree that
        does not exist) operations must name their ``pool_trees``, even when there is one tree.
        """
        root = self._root  # published whole: no lock (the class's docstring)
        configured = self.default_tree_attribute(root)
        if configured is not None and configured in node_at(root, POOL_TREES).children:
            return configured
        reason = (
            "set //sys/pool_trees/@default_tree"
            if configured is None
            else f'//sys/pool_trees/@default_tree names pool tree "{configured}", which does not exist'
        )
        raise resolve_error(
            "//sys/scheduler/orchid/scheduler/default_pool_tree",
            f"Default pool tree is not configured: {reason}",
        )

    def _validate(self, trees: dict[str, dict[str, Any]], default_tree: Any, *, disjoint: bool = True) -> Any:
        """The validator's result for ``trees``; ``disjoint`` (a change, not a load) also bounds the pools' depth.

        Trees whose ``node_tag_filter`` formulas overlap are accepted, as YTsaurus's master accepts them: the
        scheduler refuses the update while a known node would match several trees (its ``update_pools`` alert,
        ``LiveScheduler.apply_pool_trees``), and a node whose tags match several trees is refused at heartbeat."""
        # YTsaurus's master keeps any string in @default_tree, a removed tree's name included (removing the
        # default tree is allowed); the scheduler then refuses the pool trees update with the ``update_pools``
        # alert "Default tree is missing" (``LiveScheduler.apply_pool_trees``)
        if default_tree is not None and not isinstance(default_tree, str):
            raise YtError(
                f"Invalid pool trees configuration: @default_tree must be a pool tree name, got {default_tree!r}",
                attributes={"path": f"{POOL_TREES_PATH}/@default_tree"},
            )
        if disjoint:  # a change; a stored state is loaded as it is
            check_pool_depth(trees)
        try:
            strict_types(trees)
            parsed = self._validator(copy.deepcopy(trees))
        except ConfigError as error:
            attributes: dict[str, Any] = {"field": error.path, "reason": error.reason}
            cypress_path = cypress_path_of_field(error.path)
            if cypress_path:
                attributes["path"] = cypress_path
            raise YtError(
                f"Invalid pool trees configuration: {error.message}",
                attributes=attributes,
                inner_errors=[error],
            ) from error
        except PooltreeError as error:
            raise YtError(
                f"Invalid pool trees configuration: {error.message}", code=error.code, inner_errors=[error]
            ) from error
        return parsed

    # Resolution helpers.

    # Reads.

    def get(self, path: str, *, attributes: Sequence[str] | None = None) -> Any:
        """The value at ``path`` (``@attr`` paths give attributes); ``attributes`` decorates every node."""
        ypath = parse_ypath(path)
        root = self._root  # published whole: no lock (the class's docstring)
        tokens = resolve_tokens(root, ypath)
        node, rest = find(root, tokens, ypath.text)
        if node is None:
            return self._orchid_get(rest, ypath)
        if ypath.attribute is not None:
            return copy.deepcopy(self._attribute(root, node, tokens, ypath))
        return self._value(root, node, tokens, list(attributes) if attributes else None)

    def list(self, path: str, *, attributes: Sequence[str] | None = None, max_size: int | None = None) -> Any:
        """Child names (or attribute names for ``/@``), sorted, with ``<incomplete=%true>`` past ``max_size``."""
        ypath = parse_ypath(path)
        root = self._root  # published whole: no lock (the class's docstring)
        tokens = resolve_tokens(root, ypath)
        node, rest = find(root, tokens, ypath.text)
        if node is None:
            value = self._orchid_get(rest, ypath)
            if not isinstance(value, dict):
                raise YtError(f"Cannot list {ypath.text}: it is not a map", attributes={"path": ypath.text})
            names: list[Any] = sorted(value)
        elif ypath.attribute is not None:
            value = self._attribute(root, node, tokens, ypath)
            if not isinstance(value, dict):
                raise YtError(f"Cannot list {ypath.text}: it is not a map", attributes={"path": ypath.text})
            names = sorted(value)
        else:
            if node.type not in COMPOSITE_TYPES:
                raise YtError(
                    f"Cannot list node {ypath.text} of type {node.type}",
                    attributes={"path": ypath.text, "type": node.type},
                )
            names = list(node.children)
            if attributes:
                names = [
                    self._decorate(root, name, child, (*tokens, name), list(attributes))
                    for name, child in node.children.items()
                ]
        if max_size is not None and len(names) > max_size:
            return {"$attributes": {"incomplete": True}, "$value": names[: max(0, max_size)]}
        return names

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except YtError as error:
            if error.code == RESOLVE_ERROR:
                return False
            raise
        return True

    def security_chain(self, path: str) -> list[tuple[str, str, dict[str, Any]]]:
        """For ``pooltree.security``: ``(path, type, {acl, inherit_acl})`` of the node at ``path`` (or of its
        nearest existing ancestor) and of every ancestor up to the root, nearest first."""
        ypath = parse_ypath(path)
        root = self._root  # published whole: no lock (the class's docstring)
        tokens = resolve_tokens(root, ypath)
        found: list[tuple[tuple[str, ...], Node]] = [((), root)]
        for index, token in enumerate(tokens):
            child = found[-1][1].children.get(token)
            if child is None:
                break
            found.append((tokens[: index + 1], child))
        return [
            (
                join_tokens(t),
                n.type,
                {k: copy.deepcopy(n.attributes[k]) for k in ("acl", "inherit_acl") if k in n.attributes},
            )
            for t, n in reversed(found)
        ]

    def _published(self, ypath: YPath) -> tuple[tuple[str, ...], Node | None]:
        """The resolved tokens of ``ypath`` and its node in the published tree (None when missing); no lock (the
        class's docstring)."""
        root = self._root
        tokens = resolve_tokens(root, ypath)
        node: Node | None = root
        for token in tokens:
            node = node.children.get(token) if node is not None else None
        return tokens, node

    def security_target(self, path: str) -> tuple[str, tuple[str, ...] | None, str, str | None, bool]:
        """For ``pooltree.security``: ``(node path, attribute keys, parent path, type or None when the node does
        not exist, whether it has ``acl``/``inherit_acl``/``owner`` of its own)`` of a YPath (object ids
        resolved; a malformed path is the YT error naming it)."""
        ypath = parse_ypath(path)
        tokens, node = self._published(ypath)
        parent = join_tokens(tokens[:-1]) if tokens else "/"
        if node is None:
            return join_tokens(tokens), ypath.attribute, parent, None, False
        own = any(key in node.attributes for key in ("acl", "inherit_acl", "owner"))
        return join_tokens(tokens), ypath.attribute, parent, node.type, own

    def security_subtree(self, path: str) -> list[tuple[tuple[str, ...], str, Any, Any]]:
        """``(tokens, type, acl, inherit_acl)`` of every node below ``path``, parents before their children
        (empty when there is no such node). The values are the published tree's own: a mutation works on a copy
        and replaces the tree whole, so they never change under the caller, who must not change them either."""
        tokens, node = self._published(parse_ypath(path))
        if node is None:
            return []
        return [
            (found, child.type, child.attributes.get("acl"), child.attributes.get("inherit_acl"))
            for found, child in walk(node, tokens)
            if found != tokens
        ]

    def pool_path(self, tree: str, pool: str) -> str | None:
        """The Cypress path of pool ``pool`` of pool tree ``tree`` (None when there is no such pool)."""
        trees = node_at(self._root, POOL_TREES)  # published whole: no lock (the class's docstring)
        if tree not in trees.children:
            return None
        tree_tokens = (*POOL_TREES, tree)
        for tokens, _ in walk(trees.children[tree], tree_tokens):
            if len(tokens) > len(tree_tokens) and tokens[-1] == pool:
                return join_tokens(tokens)
        return None

    def _orchid_get(self, tokens: tuple[str, ...], ypath: YPath) -> Any:
        if ypath.attribute is not None:
            raise resolve_error(ypath.text, "Orchid nodes have no attributes")
        if tokens == ("scheduler", "default_pool_tree"):
            return self.default_tree()
        if self.orchid is None:
            if tokens in ((), ("scheduler",)):
                value: dict[str, Any] = {"default_pool_tree": self._default_or_none()}
                return {"scheduler": value} if not tokens else value
            raise resolve_error(ypath.text, "The scheduler orchid is not available on this server")
        try:
            value = self.orchid.get(list(tokens))
        except LookupError as error:
            raise resolve_error(ypath.text, f"No orchid entry at /{'/'.join(tokens)}: {error}") from error
        if tokens == ("scheduler",) and isinstance(value, dict):
            value = {**value, "default_pool_tree": value.get("default_pool_tree", self._default_or_none())}
        return value

    def _default_or_none(self) -> str | None:
        try:
            return self.default_tree()
        except YtError:
            return None

    def _system_attributes(self, root: Node, node: Node, tokens: tuple[str, ...]) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "id": node.id,
            "type": node.type,
            "name": tokens[-1] if tokens else "",
            "path": join_tokens(tokens),
            "creation_time": format_datetime(node.creation_time),
            "modification_time": format_datetime(node.modification_time),
            "account": quotas.account_of(root, tokens),
            "resource_usage": {"node_count": 1, "chunk_count": 0, "disk_space": 0, "tablet_count": 0},
        }
        if node.type == ACCOUNT_TYPE:
            attrs.update(quotas.account_attributes(root, tokens[-1], node))
        if tokens:
            attrs["parent_id"] = node_at(root, tokens[:-1]).id if _has(root, tokens[:-1]) else None
        if node.type in COMPOSITE_TYPES:
            attrs["child_count"] = len(node.children)
        if node.type in SCALAR_TYPES:
            attrs["value"] = copy.deepcopy(node.value)
        if tokens == ORCHID_PATH[:2] and self.orchid is not None:
            try:  # //sys/scheduler/@alerts: the scheduler's alerts, as the orchid serves them
                attrs["alerts"] = self.orchid.get(["scheduler", "alerts"])
            except LookupError:
                attrs["alerts"] = []
        if node.type == "file":
            size = int((node.value or {}).get("size") or 0)
            chunks = len((node.value or {}).get("chunks") or [])
            attrs.update(uncompressed_data_size=size, compressed_data_size=size, chunk_count=chunks)
            attrs["resource_usage"] = {**attrs["resource_usage"], "disk_space": size, "chunk_count": chunks}
            attrs.setdefault("compression_codec", "none")
        if node.type == "scheduler_pool" and len(tokens) > 3:
            attrs["parent_name"] = tokens[-2] if len(tokens) > 4 else ROOT_POOL
        return attrs

    def _all_attributes(self, root: Node, node: Node, tokens: tuple[str, ...]) -> dict[str, Any]:
        return {**self._system_attributes(root, node, tokens), **copy.deepcopy(node.attributes)}

    def _attribute(self, root: Node, node: Node, tokens: tuple[str, ...], ypath: YPath) -> Any:
        keys = canonical_keys(node, ypath.attribute or ())
        refuse_pool_option_on_tree(node, keys, ypath.text, reading=True)
        if not keys:
            return self._all_attributes(root, node, tokens)
        name = keys[0]
        if name in node.attributes:
            value = node.attributes[name]
        else:
            system = self._system_attributes(root, node, tokens)
            if name not in system:
                raise resolve_error(ypath.text, f'Attribute "{name}" is not found')
            value = system[name]
        return lookup_nested(value, keys[1:], ypath.text)

    def _value(self, root: Node, node: Node, tokens: tuple[str, ...], attributes: list[str] | None) -> Any:
        if node.type in COMPOSITE_TYPES:
            value: Any = {
                name: self._value(root, child, (*tokens, name), attributes)
                for name, child in node.children.items()
            }
        elif node.type == "orchid":
            value = None
        else:
            value = copy.deepcopy(node.value)
        return self._decorate(root, value, node, tokens, attributes) if attributes else value

    def _decorate(
        self, root: Node, value: Any, node: Node, tokens: tuple[str, ...], attributes: list[str]
    ) -> Any:
        every = self._all_attributes(root, node, tokens)
        return {"$attributes": {k: every[k] for k in attributes if k in every}, "$value": value}

    # Mutations.

    def _mutate(self, change: Callable[[Node, float], Any]) -> Any:
        with self._lock:
            now = self._clock()
            candidate = copy.deepcopy(self._root)
            result = change(candidate, now)
            _keep_tree_configs(candidate)
            quotas.check_change(self._root, candidate)  # accounts' limits (YTsaurus error 902)
            before, after = flatten(self._root), flatten(candidate)
            upserts = {path: record for path, record in after.items() if before.get(path) != record}
            deletes = [path for path in before if path not in after]
            if not upserts and not deletes:
                return result
            touched = [*upserts, *deletes]
            event: PoolTreesChange | None = None
            if any(p == POOL_TREES_PATH or p.startswith(POOL_TREES_PATH + "/") for p in touched):
                old_trees = self.pool_trees_document(self._root)
                new_trees = self.pool_trees_document(candidate)
                default_tree = node_at(candidate, POOL_TREES).attributes.get("default_tree")
                parsed = self._validate(new_trees, default_tree)
                event = PoolTreesChange(
                    trees=new_trees,
                    changed=frozenset(n for n, doc in new_trees.items() if old_trees.get(n) != doc),
                    removed=frozenset(set(old_trees) - set(new_trees)),
                    default_tree=default_tree,
                    parsed=parsed,
                )
            if "//sys" in upserts:
                check_pool_manager_config(node_at(candidate, ("sys",)).attributes)
            watched = [
                (watch, watch.parse(node_value(candidate, watch.tokens, self._plain_value)))
                for watch in self._watches
                if watch.touched_by(touched)
            ]
            self._store.save_nodes(upserts, deletes)
            self._root = candidate
            dropped = blob_ids(before[p] for p in touched if p in before) - blob_ids(upserts.values())
            if dropped and self.blob_released is not None:
                dropped -= blob_ids(after.values())
                if dropped:
                    self.blob_released(dropped)
            if event is not None:
                self._parsed = event.parsed
                for listener in list(self._listeners):
                    try:
                        listener(event)
                    except Exception:
                        log.exception("pool trees listener %r failed", listener)
            for watch, value in watched:
                try:
                    watch.listener(value)
                except Exception:
                    log.exception("listener of %s failed", watch.path)
            return result

    def set(self, path: str, value: Any, *, recursive: bool = False, force: bool = False) -> None:
        """Set a node value or an attribute (``path/@name/key``)."""
        ypath = parse_ypath(path)

        def change(root: Node, now: float) -> None:
            tokens = resolve_tokens(root, ypath)
            node, _ = find_for_write(root, tokens, ypath, missing_ok=ypath.attribute is None)
            if ypath.attribute == ("parent_name",) and node is not None and node.type == "scheduler_pool":
                move_node(root, node, tokens, pool_target(root, tokens, value), False, False, now)
                return
            if ypath.attribute == ("name",) and node is not None and node.type == "scheduler_pool":
                pool_name(root, value)  # renaming a pool, as YTsaurus allows
                move_node(root, node, tokens, (*tokens[:-1], value), False, False, now)
                return
            if (
                ypath.attribute == ("parent_name",)
                and node is not None
                and node.type == "scheduler_pool_tree"
            ):
                # YTsaurus: a pool tree has no parent pool to move it under (test_move_via_attribute_of_pool_trees)
                raise YtError(
                    f"Pool tree {ypath.text.rsplit('/@', 1)[0]} cannot be moved: it is not a pool",
                    attributes={"path": ypath.text},
                )
            if ypath.attribute is not None:
                assert node is not None
                set_attribute(node, ypath, copy.deepcopy(value), recursive)
                node.modification_time = now
                return
            if node is not None:
                if node.type not in ("map_node", *SCALAR_TYPES) or tokens in PROTECTED:
                    raise YtError(
                        f"Cannot set the value of {ypath.text} (a {node.type}); set its attributes "
                        f"({ypath.text}/@<name>) instead",
                        attributes={"path": ypath.text, "type": node.type},
                    )
                parent = node_at(root, tokens[:-1])
                if node.type == "document":  # as YTsaurus: a document's new value is still one document
                    replacement = Node(
                        node.id, "document", value=copy.deepcopy(value), creation_time=node.creation_time
                    )
                    replacement.modification_time = now
                else:
                    replacement = build_node(value, now)
                replacement.attributes = node.attributes if replacement.type == node.type else {}
                parent.children[tokens[-1]] = replacement
                parent.modification_time = now
                return
            parent = parent_for_create(root, tokens, ypath, recursive, now, "map_node")
            parent.children[tokens[-1]] = build_node(value, now)
            parent.children = dict(sorted(parent.children.items()))
            parent.modification_time = now

        self._mutate(change)

    def create(
        self,
        node_type: str,
        path: str | None = None,
        *,
        attributes: dict[str, Any] | None = None,
        recursive: bool = False,
        ignore_existing: bool = False,
        force: bool = False,
    ) -> str:
        """Create a node or object; returns its id. Pools and trees may be given by attributes instead of path."""
        if node_type in ("table", "replicated_table", "chaos_replicated_table", "table_collocation"):
            raise YtError(f'Cannot create a "{node_type}": {UNSUPPORTED}', attributes={"type": node_type})
        if node_type not in CREATABLE_TYPES:
            raise YtError(
                f'Cannot create objects of type "{node_type}"; supported: {", ".join(sorted(CREATABLE_TYPES))}',
                attributes={"type": node_type},
            )
        attrs = copy.deepcopy(attributes or {})
        if not isinstance(attrs, dict):
            raise YtError("Parameter 'attributes' must be a map", attributes={"parameter": "attributes"})

        def change(root: Node, now: float) -> str:
            tokens, text = create_target(root, node_type, path, attrs)
            existing: Node | None = None
            try:
                existing, _ = find(root, tokens, text)
            except YtError:
                existing = None
            if existing is not None:
                if ignore_existing and existing.type == node_type:
                    return existing.id
                if not force or tokens in PROTECTED or node_type != existing.type:
                    raise YtError(
                        f"Node {text} already exists",
                        code=ALREADY_EXISTS,
                        attributes={"path": text, "type": existing.type},
                    )
            parent = parent_for_create(root, tokens, parse_ypath(text), recursive, now, node_type)
            check_creation(root, parent, node_type, tokens, attrs, text)
            node = Node(new_id(), node_type, creation_time=now, modification_time=now)
            if node_type in SCALAR_TYPES:
                node.value = attrs.pop("value", None)
            elif node_type == "file":
                node.value = {"chunks": [], "size": 0}
            clash = sorted(set(attrs) & SYSTEM_ATTRIBUTES)
            if clash:
                raise YtError(f'Attribute "{clash[0]}" cannot be set', attributes={"path": text})
            for key in attrs:
                refuse_pool_option_on_tree(node, (key,), f"{text}/@{key}", reading=False)
            node.attributes = canonical_pool_attributes(attrs) if node_type == "scheduler_pool" else attrs
            if node_type == ACCOUNT_TYPE:  # a new account starts with what its limits say, else nothing
                given = attrs.get("resource_limits", {})
                if isinstance(given, dict):  # anything else is refused by the quota check, naming the field
                    attrs["resource_limits"] = {**quotas.limits(tokens[-1], None), **given}
            parent.children[tokens[-1]] = node
            parent.children = dict(sorted(parent.children.items()))
            parent.modification_time = now
            return node.id

        return str(self._mutate(change))

    def move(self, source: str, destination: str, *, recursive: bool = False, force: bool = False) -> str:
        """Move (or rename) a node; pools move within their tree (YTsaurus rules), the whole tree is validated."""
        src, dst = parse_ypath(source), parse_ypath(destination)
        if src.attribute is not None or dst.attribute is not None:
            raise YtError("Attributes cannot be moved; move the node", attributes={"path": source})

        def change(root: Node, now: float) -> str:
            source_tokens = resolve_tokens(root, src)
            node, _ = find_for_write(root, source_tokens, src, missing_ok=False)
            assert node is not None
            return move_node(root, node, source_tokens, resolve_tokens(root, dst), recursive, force, now)

        return str(self._mutate(change))

    def remove(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        """Remove a node (``recursive`` for non-empty composites) or an attribute; ``force`` ignores absence."""
        ypath = parse_ypath(path)

        def change(root: Node, now: float) -> None:
            try:
                tokens = resolve_tokens(root, ypath)
                node, _ = find_for_write(root, tokens, ypath, missing_ok=False)
            except YtError as error:
                if force and error.code == RESOLVE_ERROR:
                    return
                raise
            assert node is not None
            if ypath.attribute is not None:
                remove_attribute(node, ypath, force)
                node.modification_time = now
                return
            if tokens in PROTECTED:
                raise YtError(f"Node {ypath.text} cannot be removed", attributes={"path": ypath.text})
            if node.children and not recursive:
                raise YtError(
                    f"Cannot remove non-empty composite node {ypath.text} without recursive=%true",
                    attributes={"path": ypath.text, "child_count": len(node.children)},
                )
            parent = node_at(root, tokens[:-1])
            del parent.children[tokens[-1]]
            parent.modification_time = now

        self._mutate(change)


def _keep_tree_configs(root: Node) -> None:
    """Every pool tree has a ``config`` map (``{}`` when none is set), after any change as after loading: removing
    ``@config`` (or every attribute) resets it to ``{}`` in memory and in the store alike."""
    trees = root.children["sys"].children["pool_trees"].children
    for tree in trees.values():
        if tree.type == "scheduler_pool_tree":
            tree.attributes.setdefault("config", {})


def cypress_path_of_field(field_path: str) -> str | None:
    """``pool_trees.physical.pools.a.pools.b.weight`` -> ``//sys/pool_trees/physical/a/b/@weight``."""
    parts = re.split(r"\.|(?=\[)", field_path)
    if parts and parts[0] == "pool_trees":
        parts = parts[1:]
    if not parts or not parts[0]:
        return None
    tokens = [parts[0]]
    rest = parts[1:]
    while len(rest) >= 2 and rest[0] == "pools":
        tokens.append(rest[1])
        rest = rest[2:]
    path = f"{POOL_TREES_PATH}/" + "/".join(tokens)
    if rest:
        path += "/@" + "/".join(part.strip("[]") for part in rest)
    return path


def _has(root: Node, tokens: tuple[str, ...]) -> bool:
    try:
        node_at(root, tokens)
    except KeyError:
        return False
    return True
