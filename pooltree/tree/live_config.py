"""Live config changes of a pool tree: build the new state aside, swap it in when complete (a part of `PoolTree`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pooltree.errors import PooltreeError
from pooltree.tree.elements import PoolElement, TreeOperation

if TYPE_CHECKING:
    from pooltree.tree.pool_tree import PoolTree


class LiveConfig:
    """``apply_config`` / ``staged_config`` / ``commit_staged`` of `PoolTree`."""

    def __init__(self, tree: PoolTree) -> None:
        self.tree = tree
        """The tree whose state this part reads and changes (its one owner)."""

    # ------------------------------------------------------------------------------------------ live config

    def apply_config(self, definition: Any) -> list[str]:
        """Switch to a new definition (see :meth:`staged_config`); returns ids of newly running operations."""
        return self.commit_staged(self.staged_config(definition))

    def staged_config(self, definition: Any) -> Any:
        """Build (aside, without touching this tree) the state this tree would have under ``definition``.

        Switch to a new (already validated) definition of this tree, keeping every operation attached.

        The new tree is built aside and swapped in only when complete: any exception leaves this tree as it was.
        Operations keep their pools where the pool still exists. Otherwise:
        - an ephemeral subpool ``hub$user`` stays under ``hub`` while ``hub`` still creates ephemeral subpools
          (non-FIFO); else its operations move to ``hub`` (resolved by these same rules); a removed ``hub``
          comes back as an ephemeral pool (the rule below) and keeps the subpool;
        - any other pool that is gone (a removed configured pool or an ephemeral pool of a default parent) is
          re-created as an ephemeral pool of the same name, with default config, under the default parent pool
          of the user who owns it (removed nested pools are flattened there).
        Running operations stay running even when new limits are lower (YTsaurus never stops a running operation
        for a limit); a pool's ``enable_lightweight_operations`` toggle re-accounts them. Pending operations keep
        their FIFO order and are re-checked (``try_run_all_pending_operations``).
        """
        if definition.name != self.tree.name:
            raise PooltreeError(
                f"Cannot apply the config of tree {definition.name!r} to tree {self.tree.name!r}",
                attributes={"pool_tree": self.tree.name},
            )
        new = type(self.tree)(definition, user_default_parent_pools=self.tree.user_default_parent_pools)
        new._registration_counter = self.tree._registration_counter
        new._pending_counter = self.tree._pending_counter
        targets = _PoolTargets(new, self._first_user)
        ops = list(self.tree._operations.values())
        copies: dict[str, TreeOperation] = {}
        for op in ops:
            copies[op.id] = new._operations[op.id] = _copy_operation(op, new.root)
        for op in ops:
            if op.running:
                new._attach(copies[op.id], targets.target_for(op.pool), keep_running=True)
        for op in sorted((o for o in ops if not o.running), key=lambda o: o.pending_index):
            new._attach(copies[op.id], targets.target_for(op.pool), keep_running=False)
        new.try_run_all_pending_operations()
        return new

    def commit_staged(self, new: Any) -> list[str]:
        """Swap in a state built by :meth:`staged_config`; returns operations that were pending and now run."""
        activated = [
            op_id
            for op_id, op in self.tree._operations.items()
            if not op.running and new._operations[op_id].running
        ]
        self._swap_state(new)
        return activated

    def _first_user(self, pool: PoolElement) -> str:
        for op in pool.operations.values():
            return op.user
        return ""

    def _swap_state(self, new: Any) -> None:
        # a user whose pools became explicit stays listed, as on YTsaurus
        for user in self.tree._user_ephemeral_pools:
            new._user_ephemeral_pools.setdefault(user, [])
        for name in (
            "definition",
            "config",
            "alerts",
            "_operations",
            "_user_ephemeral_pools",
            "_registration_counter",
            "_pending_counter",
            "_position_cache",
            "_max_operation_count_per_pool",
            "_max_running_operation_count_per_pool",
            "_ephemeral_name_re",
            "root",
            "_pools",
        ):
            setattr(self.tree, name, getattr(new, name))
        self.tree._bump_structure()

    def set_operation_suspended(self, operation_id: str, suspended: bool) -> None:
        self.tree.operation(operation_id).suspended = suspended
        self.tree._bump_operation(operation_id)


class _PoolTargets:
    """Where each pool of the current tree goes in the tree built under a new definition (`staged_config`'s
    rules), each answer remembered by pool name."""

    def __init__(self, new: Any, first_user: Any) -> None:
        self.new = new
        """The tree being built."""
        self.first_user = first_user
        """The user of a pool's first operation (the owner of a re-created ephemeral pool without a creator)."""
        self.targets: dict[str, PoolElement] = {}

    def target_for(self, old_pool: PoolElement) -> PoolElement:
        """The pool of the new tree that takes ``old_pool``'s operations."""
        cached = self.targets.get(old_pool.name)
        if cached is not None:
            return cached
        new = self.new
        if old_pool.is_root:
            result = new.root
        elif (kept := new._pools.get(old_pool.name)) is not None and not kept.is_ephemeral:
            result = kept
        elif old_pool.is_ephemeral and old_pool.explicit_parent:
            result = self._subpool_target(old_pool)
        else:
            owner = old_pool.created_by_user or self.first_user(old_pool)
            result = new._pools.get(old_pool.name) or new._new_ephemeral_pool(
                old_pool.name, new.naming.default_parent_pool(owner), owner, in_default_parent=True
            )
        self.targets[old_pool.name] = result
        return result

    def _subpool_target(self, old_pool: PoolElement) -> PoolElement:
        """An ephemeral subpool ``hub$user``: kept under its hub while the hub still hosts ephemeral subpools, under
        a re-created ephemeral hub when the hub was removed, else its operations go to the hub's target."""
        new = self.new
        parent = old_pool.parent
        assert parent is not None
        if parent.name not in new._pools:
            # its hub was removed: as on YTsaurus the hub comes back as an ephemeral pool, keeping this subpool
            return new._pools.get(old_pool.name) or new._new_ephemeral_pool(
                old_pool.name,
                self.target_for(parent),
                old_pool.created_by_user or "",
                in_default_parent=False,
            )
        hub = new._pools.get(parent.name)
        still_allowed = hub is not None and hub.mode != "fifo"
        if still_allowed and hub is not None and not hub.hosts_ephemeral_subpools:
            # It stopped being a hub: its ephemeral subpools dissolve into it.
            still_allowed = not parent.hosts_ephemeral_subpools
        if still_allowed and hub is not None:
            return new._pools.get(old_pool.name) or new._new_ephemeral_pool(
                old_pool.name, hub, old_pool.created_by_user or "", in_default_parent=False
            )
        return self.target_for(parent)


def _copy_operation(op: TreeOperation, root: PoolElement) -> TreeOperation:
    """A copy of ``op`` for a tree being built, attached to nothing yet (its pool set to ``root``)."""
    clone = TreeOperation(
        op.id,
        user=op.user,
        operation_type=op.operation_type,
        pool=root,
        weight=op.weight,
        resource_limits=op.resource_limits,
        spec=op.spec,
        start_time=op.start_time,
        registration_index=op.registration_index,
        offloading=op.offloading,
    )
    clone.suspended = op.suspended
    return clone
