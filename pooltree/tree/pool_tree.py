"""The runtime of one pool tree: pools, registered operations, operation count limits and pending queues (§f).

Rules, in YTsaurus terms:
- every composite (pool or root) keeps ``operation_count``, ``running_operation_count`` and
  ``lightweight_running_operation_count``; each change propagates to every ancestor including the root;
- admission walks pool → root (from the parent when the pool is still to be created) and fails with
  ``TooManyOperations`` when some element already has ``operation_count ≥ max_operation_count``;
- a non-lightweight operation runs unless some element on its path has ``running ≥ max_running``; otherwise it
  waits in the pending queue of the LOWEST such element, with the alert "Max running operation count violated";
- when a running operation leaves pool P, the queues of P, parent(P), …, root are scanned in FIFO order and
  operations run while there is room (re-queued to a still-violating ancestor if one blocks them).

Config changes (:meth:`PoolTree.apply_config`) build a whole new tree and swap it in only when it is complete, so a
failure leaves the previous state intact. What happens to operations whose pool disappears is documented there.
"""

from __future__ import annotations

import bisect
import operator
import re
from collections.abc import Mapping
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.resources import unlimited
from pooltree.tree.elements import EPHEMERAL_DELIMITER, ROOT_POOL_NAME, PoolElement, TreeOperation
from pooltree.tree.live_config import LiveConfig
from pooltree.tree.naming import PoolNaming, lowest_violating_pool
from pooltree.tree.tree_views import OperationFacts, TreeViews
from pooltree.tree.values import (
    DEFAULT_EPHEMERAL_POOL_NAME_REGEX,
    NO_SUCH_OPERATION_CODE,
    OPERATION_PENDING_ALERT,
    TOO_MANY_OPERATIONS_CODE,
    EffectiveParameters,
    ParametersUpdate,
    PoolPlacement,
    TooManyOperationsError,
    _check_weight,
    _limits_vector,
    _option,
    spec_option,
)

_JOURNAL_LIMIT = 4096
"""Operation changes kept in the journal (the per-period caches read it every period)."""

__all__ = [
    "DEFAULT_EPHEMERAL_POOL_NAME_REGEX",
    "EPHEMERAL_DELIMITER",
    "NO_SUCH_OPERATION_CODE",
    "OPERATION_PENDING_ALERT",
    "TOO_MANY_OPERATIONS_CODE",
    "EffectiveParameters",
    "ParametersUpdate",
    "PoolPlacement",
    "PoolTree",
    "TooManyOperationsError",
]


class PoolTree:
    """One pool tree at run time, built from a ``PoolTreeDefinition`` (``name``, ``config``, ``pools``).

    Composed of three parts made here, each holding this tree: ``naming`` (where an operation goes and the checks
    before it is placed, `naming.py`), ``live_config`` (config changes built aside and swapped in,
    `live_config.py`) and ``views`` (effective parameters and orchid data, `tree_views.py`); the methods below that
    other code calls on a tree pass to them."""

    def __init__(self, definition: Any, *, user_default_parent_pools: Mapping[str, str] | None = None):
        self.name: str = definition.name
        self.definition = definition
        self.config = definition.config
        self.user_default_parent_pools: dict[str, str] = dict(user_default_parent_pools or {})
        self.alerts: dict[str, str] = {}
        self._operations: dict[str, TreeOperation] = {}
        self._user_ephemeral_pools: dict[str, list[str]] = {}
        self.revision = 0
        """Bumped by every change of the tree's structure or of a running operation's placement, running state or
        parameters (what the per-period input and snapshot are built from; pending operations are not part of
        them, so queueing or dropping one does not bump it); equal revisions of the same tree mean those caches
        may skip visiting every element (``fair_share_input``, ``strategy.build``)."""
        self.structure_revision = 0
        """The ``revision`` of the latest change of the pools themselves (created, removed, a config swap): every
        later bump concerns one operation and is journaled (:meth:`operations_changed_since`)."""
        self._operation_journal: list[tuple[int, str]] = []
        """``(revision, operation id)`` of every bump since ``structure_revision`` that concerns one operation."""
        self._registration_counter = 0
        self._pending_counter = 0
        self._position_cache: dict[str, tuple[tuple[int, str, str], dict[str, int]]] = {}
        cfg = self.config
        # Pool defaults from the seeds' pool table (running 8, total 50); see PoolTreeConfig for why seeds win.
        self._max_operation_count_per_pool = int(_option(cfg, "max_operation_count_per_pool", 50))
        self._max_running_operation_count_per_pool = int(
            _option(cfg, "max_running_operation_count_per_pool", 8)
        )
        regex = _option(cfg, "ephemeral_pool_name_regex", DEFAULT_EPHEMERAL_POOL_NAME_REGEX)
        self._ephemeral_name_re = re.compile(regex)
        self.root = PoolElement(
            ROOT_POOL_NAME,
            None,
            max_operation_count=int(_option(cfg, "max_operation_count", 50000)),
            max_running_operation_count=int(_option(cfg, "max_running_operation_count", 2000)),
            full_path="/",
        )
        self._pools: dict[str, PoolElement] = {ROOT_POOL_NAME: self.root}
        self.naming = PoolNaming(self)
        self.live_config = LiveConfig(self)
        self.views = TreeViews(self)
        self._build_configured_pools(definition.pools)

    # ------------------------------------------------------------------------ the parts' methods, on the tree

    def default_parent_pool(self, user: str) -> PoolElement:
        return self.naming.default_parent_pool(user)

    def resolve_pool(self, pool_name: str | None, user: str) -> PoolPlacement:
        return self.naming.resolve_pool(pool_name, user)

    lowest_violating_pool = staticmethod(lowest_violating_pool)

    def apply_config(self, definition: Any) -> list[str]:
        return self.live_config.apply_config(definition)

    def staged_config(self, definition: Any) -> PoolTree:
        return self.live_config.staged_config(definition)

    def commit_staged(self, new: PoolTree) -> list[str]:
        return self.live_config.commit_staged(new)

    def set_operation_suspended(self, operation_id: str, suspended: bool) -> None:
        self.live_config.set_operation_suspended(operation_id, suspended)

    def effective_parameters(self, pool_name: str) -> EffectiveParameters:
        return self.views.effective_parameters(pool_name)

    def operation_effective_parameters(self, operation_id: str) -> EffectiveParameters:
        return self.views.operation_effective_parameters(operation_id)

    def pool_orchid(self, name: str) -> dict[str, Any]:
        return self.views.pool_orchid(name)

    def pending_positions(self) -> dict[str, int]:
        return self.views.pending_positions()

    def pending_position(self, holder: PoolElement, operation_id: str) -> int:
        return self.views.pending_position(holder, operation_id)

    def operation_orchid(self, operation_id: str, *, position: int | None = None) -> dict[str, Any]:
        return self.views.operation_orchid(operation_id, position=position)

    def operation_facts(self, operation_id: str) -> OperationFacts:
        return self.views.operation_facts(operation_id)

    def orchid(self) -> dict[str, Any]:
        return self.views.orchid()

    # ----------------------------------------------------------------------------------------------- building

    def _build_configured_pools(self, pools: Mapping[str, Any]) -> None:
        """Create configured pools parents first (the definition lists every pool by name)."""
        remaining = dict(pools)
        while remaining:
            progressed = False
            for name, pool_def in list(remaining.items()):
                parent_name = pool_def.parent or ROOT_POOL_NAME
                parent = self._pools.get(parent_name)
                if parent is None:
                    continue
                self._new_configured_pool(pool_def, parent)
                del remaining[name]
                progressed = True
            if not progressed:
                missing = sorted(remaining)
                raise PooltreeError(
                    f"Pools {missing} of tree {self.name!r} have parents that are not in the tree",
                    attributes={"pool_tree": self.name, "pools": missing},
                )

    def _new_configured_pool(self, pool_def: Any, parent: PoolElement) -> PoolElement:
        self._bump_structure()
        config = pool_def.config
        full_path = getattr(pool_def, "full_path", None) or self._child_full_path(parent, pool_def.name)
        pool = PoolElement(
            pool_def.name,
            parent,
            config=config,
            mode=config.mode,
            max_operation_count=self._effective_limit(
                config.max_operation_count, self._max_operation_count_per_pool
            ),
            max_running_operation_count=self._effective_limit(
                config.max_running_operation_count, self._max_running_operation_count_per_pool
            ),
            lightweight_operations_enabled=bool(config.enable_lightweight_operations),
            full_path=full_path,
        )
        self._pools[pool.name] = pool
        return pool

    @staticmethod
    def _effective_limit(own: int | None, default: int) -> int:
        return default if own is None else int(own)

    @staticmethod
    def _child_full_path(parent: PoolElement, name: str) -> str:
        return f"/{name}" if parent.is_root else f"{parent.full_path}/{name}"

    # ------------------------------------------------------------------------------------------- revisions

    def _bump_structure(self) -> None:
        """A change of the pools (or the whole state): the per-period caches rebuild their walk."""
        self.revision += 1
        self.structure_revision = self.revision
        self._operation_journal.clear()

    def _bump_operation(self, operation_id: str) -> None:
        """A change of one operation's placement, running or suspended state or parameters."""
        self.revision += 1
        journal = self._operation_journal
        if len(journal) >= _JOURNAL_LIMIT:
            del journal[: _JOURNAL_LIMIT // 2]  # a cache that far behind rebuilds its walk
        journal.append((self.revision, operation_id))

    def operations_changed_since(self, revision: int) -> set[str] | None:
        """Ids of the operations whose registration, placement, running or suspended state or parameters changed
        after ``revision`` (a value of ``revision`` read earlier), when the pools did not change since; ``None``
        when they did or the journal no longer reaches back that far (the caller then walks the whole tree).
        The incremental builds (``fair_share_input``, ``strategy.build``) re-read only these operations."""
        current = self.revision
        if revision == current:
            return set()
        if revision > current or self.structure_revision > revision:
            return None
        journal = self._operation_journal
        start = bisect.bisect_right(journal, revision, key=operator.itemgetter(0))
        # every revision after ``revision`` must be journaled (a bump from elsewhere leaves a gap)
        if len(journal) - start != current - revision or journal[start][0] != revision + 1:
            return None
        return {entry[1] for entry in journal[start:]}

    def _new_ephemeral_pool(
        self, name: str, parent: PoolElement, user: str, *, in_default_parent: bool
    ) -> PoolElement:
        """An on-demand pool with default config, or with the parent's ``ephemeral_subpool_config``."""
        self._bump_structure()
        sub = parent.config.ephemeral_subpool_config if parent.config is not None else None
        pool = PoolElement(
            name,
            parent,
            ephemeral_config=sub,
            is_ephemeral=True,
            created_by_user=user,
            explicit_parent=not in_default_parent,
            mode=sub.mode if sub is not None else "fair_share",
            max_operation_count=self._effective_limit(
                sub.max_operation_count if sub is not None else None, self._max_operation_count_per_pool
            ),
            max_running_operation_count=self._effective_limit(
                sub.max_running_operation_count if sub is not None else None,
                self._max_running_operation_count_per_pool,
            ),
            full_path=self._child_full_path(parent, name),
        )
        self._pools[name] = pool
        if in_default_parent:
            self._user_ephemeral_pools.setdefault(user, []).append(name)
        return pool

    def user_to_ephemeral_pools(self) -> dict[str, list[str]]:
        """Each user's ephemeral pools in the default parent (the orchid's ``user_to_ephemeral_pools``)."""
        return {user: list(names) for user, names in sorted(self._user_ephemeral_pools.items())}

    def _remove_if_empty_ephemeral(self, pool: PoolElement) -> None:
        """Drop empty ephemeral pools, recursively upward."""
        while pool.is_ephemeral and pool.is_empty():
            self._bump_structure()
            parent = pool.parent
            assert parent is not None
            del parent.children[pool.name]
            del self._pools[pool.name]
            if pool.created_by_user is not None and not pool.explicit_parent:
                names = self._user_ephemeral_pools.get(pool.created_by_user)
                if names is not None and pool.name in names:
                    names.remove(
                        pool.name
                    )  # the user stays listed, with no pool (YTsaurus erases the pool only)
            pool = parent

    # ------------------------------------------------------------------------------------------------- access

    @property
    def pools(self) -> Mapping[str, PoolElement]:
        """Every pool by name, the root (``<Root>``) included."""
        return self._pools

    @property
    def operations(self) -> Mapping[str, TreeOperation]:
        """Registered operations in registration order."""
        return self._operations

    def pool(self, name: str) -> PoolElement:
        pool = self._pools.get(name)
        if pool is None:
            raise PooltreeError(
                f"Pool {name!r} does not exist in tree {self.name!r}",
                attributes={"pool": name, "pool_tree": self.name},
            )
        return pool

    def operation(self, operation_id: str) -> TreeOperation:
        op = self._operations.get(operation_id)
        if op is None:
            raise PooltreeError(
                f"Operation {operation_id} is not registered in tree {self.name!r}",
                code=NO_SUCH_OPERATION_CODE,
                attributes={"operation_id": operation_id, "pool_tree": self.name},
            )
        return op

    def has_operation(self, operation_id: str) -> bool:
        return operation_id in self._operations

    # ----------------------------------------------------------------------------------------- registration

    def prepare_registration(
        self,
        operation_id: str,
        *,
        user: str,
        pool: str | None = None,
        is_gang: bool = False,
        revival: bool = False,
    ) -> PoolPlacement:
        """Validate a new operation against this tree (names, forbidden pools, gang rules, ephemeral and count
        limits).

        ``revival``: the operation was already admitted before a scheduler restart. As YTsaurus's revive
        (``RegisterOperation`` → ``GetOrCreatePool``, without the start-time ``ValidatePoolLimits`` and
        ``ValidateOperationPoolsCanBeUsed``), it skips the ``max_operation_count``, ephemeral-pool-per-user and
        forbidden-immediate checks, and a pool removed meanwhile is re-created as an ephemeral pool (see
        :meth:`_revival_pool_name`). ``max_running_operation_count`` still applies when it is attached.
        """
        if operation_id in self._operations:
            raise PooltreeError(
                f"Operation {operation_id} is already registered in tree {self.name!r}",
                attributes={"operation_id": operation_id, "pool_tree": self.name},
            )
        if revival:
            placement = self.naming.resolve_pool(self._revival_pool_name(pool, user), user)
        else:
            placement = self.naming.resolve_pool(pool, user)
        if is_gang:
            self._check_gang(placement)
        if not revival:
            self.naming._check_operation_count(self.naming._check_placement(placement, user))
        return placement

    def _revival_pool_name(self, pool_name: str | None, user: str) -> str:
        """The pool a revived operation goes to: its own pool; for an ephemeral subpool ``hub$user`` whose hub is
        gone (or can no longer host subpools), the hub's name, re-created as an ephemeral pool under the default
        parent pool, the same rule as a live config change (:meth:`staged_config`)."""
        name = pool_name or user
        while EPHEMERAL_DELIMITER in name and name not in self._pools:
            parent_name = name.rsplit(EPHEMERAL_DELIMITER, 1)[0]
            parent = self._pools.get(parent_name)
            if parent is not None and parent.mode != "fifo":
                break
            name = parent_name
        return name

    def _check_gang(self, placement: PoolPlacement) -> None:
        """YTsaurus ``AreGangOperationsAllowed``: with the tree's ``allow_gang_operations_only_in_fifo_pools``, a
        gang operation may run only in a FIFO pool (a pool creating ephemeral subpools counts with its subpools'
        mode) or a pool with ``always_allow_gang_operations``."""
        if not _option(self.config, "allow_gang_operations_only_in_fifo_pools", False):
            return
        pool = placement.pool
        always = False
        if pool is None:  # a new ephemeral pool: default configured, mode from its parent's subpool config
            parent = placement.parent
            sub = None if parent is None or parent.config is None else parent.config.ephemeral_subpool_config
            mode = "fair_share" if sub is None else sub.mode
            name = placement.pool_name
        elif pool.is_root:
            return
        else:
            config = pool.config
            if config is not None and config.create_ephemeral_subpools:
                sub = config.ephemeral_subpool_config
                mode = "fair_share" if sub is None else sub.mode
            else:
                mode = pool.mode
            always = bool(config is not None and config.always_allow_gang_operations)
            name = pool.name
        if mode != "fifo" and not always:
            raise PooltreeError(
                f'Gang operations are allowed only in FIFO pools in tree "{self.name}", and pool "{name}" is in '
                f"{mode} mode (the tree sets allow_gang_operations_only_in_fifo_pools; a pool may set "
                "always_allow_gang_operations)",
                attributes={"pool": name, "pool_tree": self.name, "pool_mode": mode},
            )

    def _placement_pool(self, placement: PoolPlacement, user: str) -> PoolElement:
        """The placement's pool, creating its ephemeral pool (owned by ``user``) when it does not exist yet."""
        if placement.pool is not None:
            return placement.pool
        assert placement.parent is not None
        return self._pools.get(placement.pool_name) or self._new_ephemeral_pool(
            placement.pool_name, placement.parent, user, in_default_parent=placement.in_default_parent
        )

    def commit_registration(
        self,
        operation_id: str,
        placement: PoolPlacement,
        *,
        user: str,
        operation_type: str = "vanilla",
        weight: float | None = None,
        resource_limits: Any = None,
        spec: Any = None,
        now: float = 0.0,
        offloading: bool = False,
    ) -> TreeOperation:
        """Attach a validated operation: running, lightweight or pending in the lowest violating pool."""
        pool = self._placement_pool(placement, user)
        self._registration_counter += 1
        op = TreeOperation(
            operation_id,
            user=user,
            operation_type=operation_type,
            pool=pool,
            weight=weight,
            resource_limits=resource_limits if resource_limits is not None else unlimited(),
            spec=spec,
            start_time=now,
            registration_index=self._registration_counter,
            offloading=offloading,
        )
        self._operations[operation_id] = op
        self._attach(op, pool, keep_running=False)
        return op

    def register_operation(
        self,
        operation_id: str,
        *,
        user: str,
        operation_type: str = "vanilla",
        pool: str | None = None,
        weight: float | None = None,
        resource_limits: Any = None,
        spec: Any = None,
        now: float = 0.0,
        offloading: bool = False,
    ) -> TreeOperation:
        """Validate and attach one operation (``TooManyOperationsError`` etc. leave the tree unchanged)."""
        checked_weight = _check_weight(weight, "weight")
        limits = _limits_vector(resource_limits)
        is_gang = bool(spec_option(spec, "is_gang", False))
        placement = self.prepare_registration(operation_id, user=user, pool=pool, is_gang=is_gang)
        return self.commit_registration(
            operation_id,
            placement,
            user=user,
            operation_type=operation_type,
            weight=checked_weight,
            resource_limits=limits,
            spec=spec,
            now=now,
            offloading=offloading,
        )

    def unregister_operation(self, operation_id: str) -> list[str]:
        """Remove an operation; returns the ids of pending operations this activated (in activation order)."""
        op = self.operation(operation_id)
        pool = op.pool
        freed = self._detach(op)
        del self._operations[operation_id]
        activated = self._activate_from(pool) if freed else []
        self._remove_if_empty_ephemeral(pool)
        return activated

    # ---------------------------------------------------------------------------------------------- counters

    def _attach(self, op: TreeOperation, pool: PoolElement, *, keep_running: bool) -> None:
        op.pool = pool
        pool.operations[op.id] = op
        path = pool.path
        for element in path:
            element.operation_count += 1
        op.lightweight = op.operation_type == "vanilla" and pool.effective_lightweight_operations_enabled
        if op.lightweight or keep_running:
            self._mark_running(op)
            return
        violating = lowest_violating_pool(pool)
        if violating is None:
            self._mark_running(op)
        else:
            self._enqueue(op, violating)

    def _detach(self, op: TreeOperation) -> bool:
        """Take ``op`` out of its pool's counters; True if it freed a running (non-lightweight) slot."""
        if op.running:  # a pending operation is no element of the per-period step: nothing it reads changes
            self._bump_operation(op.id)
        pool = op.pool
        del pool.operations[op.id]
        path = pool.path
        for element in path:
            element.operation_count -= 1
        if not op.running:
            pending_pool = op.pending_pool
            if pending_pool is not None:
                del pending_pool.pending[op.id]
                op.pending_pool = None
            return False
        op.running = False
        if op.lightweight:
            for element in path:
                element.lightweight_running_operation_count -= 1
            return False
        for element in path:
            element.running_operation_count -= 1
        return True

    def _mark_running(self, op: TreeOperation) -> None:
        self._bump_operation(op.id)
        op.running = True
        op.alert = None
        if op.lightweight:
            for element in op.pool.path:
                element.lightweight_running_operation_count += 1
        else:
            for element in op.pool.path:
                element.running_operation_count += 1

    def _enqueue(self, op: TreeOperation, violating: PoolElement) -> None:
        self._pending_counter += 1
        op.running = False
        op.pending_pool = violating
        op.pending_index = self._pending_counter
        violating.pending[op.id] = op
        op.alert = {
            "type": OPERATION_PENDING_ALERT,
            "message": "Max running operation count violated",
            "attributes": {
                "pool": violating.name,
                "limit": violating.max_running_operation_count,
                "pool_tree": self.name,
            },
        }

    def _activate_from(self, pool: PoolElement) -> list[str]:
        """Run pending operations after a running slot freed in ``pool``: queues of pool, parent, …, root."""
        activated: list[str] = []
        for current in pool.path:
            queue = current.pending
            if not queue:
                continue
            available = current.max_running_operation_count - current.running_operation_count
            while available > 0 and queue:
                op = next(iter(queue.values()))
                del queue[op.id]
                op.pending_pool = None
                violating = lowest_violating_pool(op.pool)
                if violating is not None:
                    self._enqueue(op, violating)
                    continue
                self._mark_running(op)
                activated.append(op.id)
                available -= 1
        return activated

    def try_run_all_pending_operations(self) -> list[str]:
        """Re-check every pending operation (after limit or config changes): run it, or re-queue it."""
        activated: list[str] = []
        for pool in self._pools_top_down():
            for op in list(pool.pending.values()):
                if op.lightweight:
                    del pool.pending[op.id]
                    op.pending_pool = None
                    self._mark_running(op)
                    activated.append(op.id)
                    continue
                violating = lowest_violating_pool(op.pool)
                if violating is pool:
                    continue
                del pool.pending[op.id]
                op.pending_pool = None
                if violating is None:
                    self._mark_running(op)
                    activated.append(op.id)
                else:
                    self._enqueue(op, violating)
        return activated

    def _pools_top_down(self) -> list[PoolElement]:
        order: list[PoolElement] = [self.root]
        index = 0
        while index < len(order):
            order.extend(order[index].children.values())
            index += 1
        return order

    # ------------------------------------------------------------------------------------ runtime parameters

    def pools_to_validate_on_pool_change(
        self, op: TreeOperation, new_start: PoolElement, *, lightweight_in_new: bool = False
    ) -> list[PoolElement]:
        """New path pools to check (§f): all of them for a pending operation, else only the non-shared part.

        A running operation that is lightweight where it is but not in the new pool starts counting toward the
        running limits of the shared ancestors too, so the whole new path is checked for it.
        """
        new_path = list(new_start.path)
        if not op.running:
            return new_path
        if op.lightweight and not lightweight_in_new:
            return new_path
        old_path = list(op.pool.path)
        while new_path and old_path and new_path[-1] is old_path[-1]:
            new_path.pop()
            old_path.pop()
        return new_path

    def prepare_parameters_update(
        self,
        operation_id: str,
        *,
        pool: str | None = None,
        weight: Any = None,
        resource_limits: Any = None,
    ) -> ParametersUpdate:
        """Validate a runtime parameters change (unset = keep) without changing anything.

        A pool change is checked per §f: "Max operation count of pool P violated" and, unless the operation is
        lightweight in the new pool, "Max running operation count of pool P violated".
        """
        op = self.operation(operation_id)
        new_weight = _check_weight(weight, "weight") if weight is not None else op.weight
        new_limits = _limits_vector(resource_limits) if resource_limits is not None else op.resource_limits
        placement: PoolPlacement | None = None
        if pool is not None:
            candidate = self.naming.resolve_pool(pool, op.user)
            if candidate.pool is not op.pool:
                self._validate_pool_change(op, candidate)
                placement = candidate
        return ParametersUpdate(operation_id, placement, new_weight, new_limits)

    def commit_parameters_update(self, update: ParametersUpdate) -> list[str]:
        """Apply a prepared change; returns operations that became running (the moved one included)."""
        self._bump_operation(update.operation_id)
        op = self.operation(update.operation_id)
        activated = self._move(op, update.placement) if update.placement is not None else []
        op.weight = update.weight
        op.resource_limits = update.resource_limits
        return activated

    def _validate_pool_change(self, op: TreeOperation, placement: PoolPlacement) -> None:
        """§f: every pool of the new path (only the part not shared with the old one for a running operation)."""
        start = self.naming._check_placement(placement, op.user)
        lightweight_in_new = self.naming._is_lightweight(op.operation_type, placement.pool)
        for element in self.pools_to_validate_on_pool_change(
            op, start, lightweight_in_new=lightweight_in_new
        ):
            if element.operation_count >= element.max_operation_count:
                what, limit = "Max operation count", element.max_operation_count
            elif (
                not lightweight_in_new
                and element.running_operation_count >= element.max_running_operation_count
            ):
                what, limit = "Max running operation count", element.max_running_operation_count
            else:
                continue
            raise PooltreeError(
                f'{what} of pool "{element.name}" violated',
                attributes={"pool": element.name, "pool_tree": self.name, "limit": limit},
            )

    def _move(self, op: TreeOperation, placement: PoolPlacement) -> list[str]:
        new_pool = self._placement_pool(placement, op.user)
        old_pool = op.pool
        was_running = op.running
        self._detach(op)
        self._attach(op, new_pool, keep_running=was_running)
        activated = [op.id] if op.running and not was_running else []
        activated.extend(self._activate_from(old_pool))
        self._remove_if_empty_ephemeral(old_pool)
        return activated
