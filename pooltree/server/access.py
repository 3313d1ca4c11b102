"""The objects ``pooltree.security`` asks about, as this service holds them: Cypress nodes with their ``acl`` and
``inherit_acl`` attributes (pool trees and pools), operations (owner, ``owners``, ``acl``) and where an operation
would run. ``ServiceResolver`` implements ``pooltree.security.ObjectResolver``; it decides nothing itself."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.security.acl import Ace, AclNode, parse_acl, parse_inherit_acl
from pooltree.security.guard import (
    POOL_TREES_ROOT_ACL,
    ROOT_ACL,
    TMP_ACCOUNT_ACL,
    TMP_ACL,
    OperationAccess,
    Target,
    WouldBlock,
    access_of,
)
from pooltree.server.cypress import POOL_TREES_PATH, Cypress
from pooltree.server.pool_rules import pool_name_error, pool_name_regexes
from pooltree.ypath import join_tokens, parse_ypath

ACCESS_CACHE_SIZE = 4096
BUILTIN_ACLS: dict[str, tuple[Ace, ...]] = {
    "/": ROOT_ACL,
    POOL_TREES_PATH: POOL_TREES_ROOT_ACL,
    "//tmp": TMP_ACL,
    "//sys/accounts/tmp": TMP_ACCOUNT_ACL,
}


def object_name(path: str, node_type: str) -> str:
    """How a denial names an object: pools and pool trees as YTsaurus names them, other nodes by path."""
    return object_name_of(parse_ypath(path).tokens, node_type, path)


def object_name_of(tokens: tuple[str, ...], node_type: str, path: str) -> str:
    """``object_name`` of a node whose tokens are known (no parsing)."""
    if node_type == "scheduler_pool" and len(tokens) > 3:
        return f'pool "{tokens[-1]}" in pool tree "{tokens[2]}"'
    if node_type == "scheduler_pool_tree" and len(tokens) == 3:
        return f'pool tree "{tokens[2]}"'
    return f"node {path}"


class ServiceResolver:
    """ACL chains from Cypress, operation access from the live scheduler (or the store), pool placement,
    transactions' owners from the ``FileService``. Without a scheduler (an API without operations) there are no
    operations or jobs to ask about."""

    def __init__(self, cypress: Cypress, scheduler: Any = None, files: Any = None) -> None:
        self.cypress = cypress
        self.scheduler = scheduler
        self.files = files
        """The ``FileService`` whose transactions ``transaction_owner`` answers about (None: no transactions)."""
        self._finished: OrderedDict[str, OperationAccess | None] = OrderedDict()
        self._lock = threading.Lock()
        self._pool_paths: dict[tuple[str, str], str | None] = {}
        """(tree, pool) → Cypress path; dropped on every pool trees change (a lookup walks the whole tree)."""
        cypress.subscribe(lambda change: self._pool_paths.clear())

    def acl_chain(self, path: str) -> list[AclNode]:
        chain: list[AclNode] = []
        for node_path, node_type, attributes in self.cypress.security_chain(path):
            acl = _stored_acl(attributes.get("acl"), node_path)
            inherit = _stored_inherit(attributes.get("inherit_acl"))
            chain.append(
                AclNode(
                    object_name(node_path, node_type),
                    acl + BUILTIN_ACLS.get(node_path, ()),
                    inherit,
                    node_path,
                )
            )
        return chain

    def locate(self, path: str) -> Target:
        node, attribute, parent, node_type, own = self.cypress.security_target(path)
        return Target(node, attribute, parent, node_type is not None, node_type, own)

    def subtree_chains(self, path: str) -> list[list[AclNode]]:
        above = self.acl_chain(path)
        base = len(parse_ypath(above[0].path or "/").tokens) if above else 0
        chains: list[list[AclNode]] = []
        stack: list[AclNode] = []
        for tokens, node_type, acl, inherit in self.cypress.security_subtree(path):
            node_path = join_tokens(tokens)
            del stack[len(tokens) - base - 1 :]
            stack.append(
                AclNode(
                    object_name_of(tokens, node_type, node_path),
                    (_stored_acl(acl, node_path) if acl is not None else ())
                    + BUILTIN_ACLS.get(node_path, ()),
                    _stored_inherit(inherit),
                    node_path,
                )
            )
            chains.append([*reversed(stack), *above])
        return chains

    def job_operation(self, job_id: str) -> str | None:
        if self.scheduler is None:
            return None
        with self.scheduler.lock:
            job = self.scheduler.jobs.get(job_id)
            return None if job is None else job.operation_id

    def transaction_owner(self, transaction_id: str) -> str | None:
        return None if self.files is None else self.files.transaction_owner(transaction_id)

    def pool_chain(self, tree: str, pool: str) -> list[AclNode] | None:
        key = (tree, pool)
        if key not in self._pool_paths:
            self._pool_paths[key] = self.cypress.pool_path(tree, pool)
        path = self._pool_paths[key]
        return None if path is None else self.acl_chain(path)

    def pool_name_error(self, name: str, *, administrator: bool) -> PooltreeError | None:
        """The error for a pool name the caller may not give: the administrators' or the users' regex of
        ``//sys/@config/scheduler_pool_manager`` (``pool_rules.py``)."""
        users, administrators = pool_name_regexes(self.cypress.root.children["sys"].attributes)
        return pool_name_error(name, "Pool", administrators if administrator else users)

    def tree_chain(self, tree: str) -> list[AclNode]:
        return self.acl_chain(f"{POOL_TREES_PATH}/{tree}")

    def operation_access(self, operation_id: str, *, blocking: bool = True) -> OperationAccess | None:
        if self.scheduler is None:
            return None
        op = self.scheduler.operations.get(operation_id)
        if op is not None:
            return access_of(op.id, op.user, op.spec, op.runtime_parameters)
        with self._lock:
            if operation_id in self._finished:
                self._finished.move_to_end(operation_id)
                return self._finished[operation_id]
        if not blocking:
            raise WouldBlock(operation_id)
        record = self.scheduler.store.get_operation(operation_id)
        access = (
            None
            if record is None
            else access_of(record.id, record.user, record.spec, record.runtime_parameters)
        )
        if record is not None and record.state in ("completed", "failed", "aborted"):
            with self._lock:
                self._finished[operation_id] = access
                while len(self._finished) > ACCESS_CACHE_SIZE:
                    self._finished.popitem(last=False)
        return access

    def operation_pools(self, spec: Mapping[str, Any], user: str) -> list[tuple[str, str, str | None]]:
        """(tree, pool the operation would run in, the existing pool whose ``use`` decides: the pool itself, or
        the parent of an ephemeral pool; None for the tree's root)."""
        if self.scheduler is None:
            return []
        with self.scheduler.lock:
            registry = self.scheduler.registry
            out: list[tuple[str, str, str | None]] = []
            for registration in registry.registrations_for(spec, user):
                tree = registry.tree(registration.tree)
                placement = tree.resolve_pool(registration.pool, user)
                holder = placement.pool if placement.pool is not None else placement.parent
                name = None if holder is None or holder.is_root else holder.name
                out.append((registration.tree, placement.pool_name, name))
            return out

    def pool_of(self, tree: str, pool: str, user: str) -> tuple[str, str | None]:
        """Where ``update_operation_parameters`` moving an operation to ``pool`` in ``tree`` would put it."""
        with self.scheduler.lock:
            placement = self.scheduler.registry.tree(tree).resolve_pool(pool, user)
            holder = placement.pool if placement.pool is not None else placement.parent
            return placement.pool_name, (None if holder is None or holder.is_root else holder.name)

    def operation_trees(self, operation_id: str) -> list[str]:
        if self.scheduler is None:
            return []
        op = self.scheduler.operations.get(operation_id)
        return list(op.trees) if op is not None else []


def _stored_acl(value: Any, path: str) -> tuple[Ace, ...]:
    try:
        return parse_acl(value, f"{path}/@acl")
    except PooltreeError:
        return (
            Ace("deny", ("everyone",), ("read", "write", "use", "administer", "create", "remove", "manage")),
        )
        # an unreadable ACL (written before validation existed) denies rather than allows


def _stored_inherit(value: Any) -> bool:
    try:
        return parse_inherit_acl(value)
    except PooltreeError:
        return False
