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

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.errors import PooltreeError
from pooltree.resources import (
    RESOURCE_COUNT,
    RESOURCES,
    USER_SLOTS,
    Vector,
    parse_resources,
    resources_to_dict,
    unlimited,
)
from pooltree.tree.elements import EPHEMERAL_DELIMITER, ROOT_POOL_NAME, PoolElement, TreeOperation

TOO_MANY_OPERATIONS_CODE = 202
"""YTsaurus ``TooManyOperations``; the HTTP client retries ``start_operation`` on it."""

NO_SUCH_OPERATION_CODE = 1915
DEFAULT_EPHEMERAL_POOL_NAME_REGEX = r"[-_a-z0-9:A-Z]+"
OPERATION_PENDING_ALERT = "operation_pending"


class TooManyOperationsError(PooltreeError):
    """A pool on the operation's path has reached its ``max_operation_count``."""

    code = TOO_MANY_OPERATIONS_CODE


@dataclass(frozen=True, slots=True)
class ParametersUpdate:
    """A validated runtime parameters change of one operation in one tree (``placement`` None = same pool)."""

    operation_id: str
    placement: PoolPlacement | None
    weight: float | None
    resource_limits: Vector


@dataclass(frozen=True, slots=True)
class PoolPlacement:
    """Where an operation goes in one tree, decided (and validated) before anything changes.

    ``pool`` is the existing target pool, or ``None`` when an ephemeral pool ``pool_name`` is to be created
    under ``parent``.
    """

    pool_name: str
    pool: PoolElement | None
    parent: PoolElement | None
    in_default_parent: bool


def _option(config: Any, name: str, default: Any) -> Any:
    """A tree option, or ``default`` when the tree config does not carry it (older configs)."""
    value = getattr(config, name, default)
    return default if value is None else value


def _limits_vector(value: Any) -> Vector:
    """Resource limits (``inf`` where unset) from a vector, a ``Resources`` map or a plain map."""
    if value is None:
        return unlimited()
    if isinstance(value, np.ndarray):
        return np.array(value, dtype=float)
    vector = getattr(value, "vector", None)
    if vector is not None:
        return np.array(vector, dtype=float)
    return parse_resources(value, "resource_limits", missing=math.inf)


def _threshold_vector(threshold: Any) -> Vector:
    """§c: a threshold with any resource set is absolute with unset resources infinite; else all zero."""
    specified = getattr(threshold, "specified", None)
    if not specified:
        return np.zeros(RESOURCE_COUNT)
    vector = np.full(RESOURCE_COUNT, math.inf)
    for name in specified:
        vector[RESOURCES.index(name)] = threshold[name]
    return vector


def _spec_option(spec: Any, name: str, default: Any) -> Any:
    """An operation spec option from an ``OperationSpec`` or a plain map (``None`` → ``default``)."""
    if spec is None:
        return default
    value = spec.get(name, default) if isinstance(spec, Mapping) else getattr(spec, name, default)
    return default if value is None else value


@dataclass(slots=True)
class EffectiveParameters:
    """Starvation and preemption parameters after top-down inheritance (orchid ``effective_*``)."""

    fair_share_starvation_tolerance: float
    fair_share_starvation_timeout: float
    aggressive_starvation_enabled: bool
    fair_share_aggressive_starvation_timeout: float
    non_preemptible_resource_usage_threshold: Vector
    aggressive_preemption_allowed: bool
    normal_preemption_allowed: bool


def _check_weight(weight: Any, path: str) -> float | None:
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise PooltreeError(f"{path}: expected a positive number, got {weight!r}", attributes={"field": path})
    if not math.isfinite(weight) or weight <= 0:
        raise PooltreeError(
            f"{path}: weight must be a positive finite number, got {weight!r}", attributes={"field": path}
        )
    return float(weight)


class PoolTree:
    """One pool tree at run time, built from a ``PoolTreeDefinition`` (``name``, ``config``, ``pools``)."""

    def __init__(self, definition: Any, *, user_default_parent_pools: Mapping[str, str] | None = None):
        self.name: str = definition.name
        self.definition = definition
        self.config = definition.config
        self.user_default_parent_pools: dict[str, str] = dict(user_default_parent_pools or {})
        self.alerts: dict[str, str] = {}
        self._operations: dict[str, TreeOperation] = {}
        self._user_ephemeral_pools: dict[str, list[str]] = {}
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
        self._build_configured_pools(definition.pools)

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

    def _new_ephemeral_pool(
        self, name: str, parent: PoolElement, user: str, *, in_default_parent: bool
    ) -> PoolElement:
        """An on-demand pool with default config, or with the parent's ``ephemeral_subpool_config``."""
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
            parent = pool.parent
            assert parent is not None
            del parent.children[pool.name]
            del self._pools[pool.name]
            if pool.created_by_user is not None and not pool.explicit_parent:
                names = self._user_ephemeral_pools.get(pool.created_by_user)
                if names is not None and pool.name in names:
                    names.remove(pool.name)
                    if not names:
                        del self._user_ephemeral_pools[pool.created_by_user]
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

    # ------------------------------------------------------------------------------------------ pool naming

    def default_parent_pool(self, user: str) -> PoolElement:
        """The user's default parent pool (§f): user map entry, else tree ``default_parent_pool``, else root."""
        if _option(self.config, "use_user_default_parent_pool_map", False):
            mapped = self.user_default_parent_pools.get(user)
            if mapped is not None:
                pool = self._pools.get(mapped)
                if pool is not None and pool.mode != "fifo":
                    return pool
                self.alerts["invalid_default_parent_pool"] = (
                    f"Default parent pool {mapped!r} of user {user!r} "
                    + ("is a FIFO pool" if pool is not None else "does not exist")
                )
        name = _option(self.config, "default_parent_pool", ROOT_POOL_NAME)
        pool = self._pools.get(name)
        if pool is not None and pool.mode != "fifo":
            return pool
        self.alerts["invalid_default_parent_pool"] = f"Default parent pool {name!r} " + (
            "is a FIFO pool" if pool is not None else "does not exist"
        )
        return self.root

    def _validate_ephemeral_name(self, name: str) -> None:
        for part in name.split(EPHEMERAL_DELIMITER):
            if not self._ephemeral_name_re.fullmatch(part):
                raise PooltreeError(
                    f"Pool name {name!r} must match regular expression {self._ephemeral_name_re.pattern!r}",
                    attributes={"pool": name, "pool_tree": self.name},
                )

    def resolve_pool(self, pool_name: str | None, user: str) -> PoolPlacement:
        """Where an operation of ``user`` asking for ``pool_name`` goes (§f pool naming); validates names only."""
        name = pool_name or user
        if not name:
            raise PooltreeError(
                "Operation has neither a pool nor a user name", attributes={"pool_tree": self.name}
            )
        if name == ROOT_POOL_NAME:
            return PoolPlacement(name, self.root, None, False)
        existing = self._pools.get(name)
        if existing is not None:
            if existing.hosts_ephemeral_subpools:
                if existing.mode == "fifo":
                    raise PooltreeError(
                        f"Pool {name!r} is in FIFO mode and cannot host ephemeral subpools",
                        attributes={"pool": name, "pool_tree": self.name},
                    )
                sub_name = f"{name}{EPHEMERAL_DELIMITER}{user}"
                self._validate_ephemeral_name(sub_name)
                sub = self._pools.get(sub_name)
                return PoolPlacement(sub_name, sub, existing if sub is None else None, False)
            return PoolPlacement(name, existing, None, False)
        self._validate_ephemeral_name(name)
        if EPHEMERAL_DELIMITER in name:
            parent_name = name.rsplit(EPHEMERAL_DELIMITER, 1)[0]
            parent = self._pools.get(parent_name)
            if parent is None:
                raise PooltreeError(
                    f"Parent pool {parent_name!r} of ephemeral pool {name!r} does not exist in tree {self.name!r}",
                    attributes={"pool": name, "pool_tree": self.name},
                )
            if parent.mode == "fifo":
                raise PooltreeError(
                    f"Pool {parent_name!r} is in FIFO mode and cannot host ephemeral subpools",
                    attributes={"pool": parent_name, "pool_tree": self.name},
                )
            return PoolPlacement(name, None, parent, False)
        return PoolPlacement(name, None, self.default_parent_pool(user), True)

    # ----------------------------------------------------------------------------------------------- checks

    def _check_immediate(self, placement: PoolPlacement) -> None:
        pool = placement.pool
        if pool is None:
            return
        if pool.is_root:
            forbidden = bool(_option(self.config, "forbid_immediate_operations_in_root", True))
        else:
            forbidden = pool.config is not None and bool(pool.config.forbid_immediate_operations)
        if forbidden:
            raise PooltreeError(
                f'Starting operations immediately in pool "{pool.name}" is forbidden',
                attributes={"pool": pool.name, "pool_tree": self.name},
            )

    def _check_ephemeral_limit(self, placement: PoolPlacement, user: str) -> None:
        if placement.pool is not None or not placement.in_default_parent:
            return
        limit = int(_option(self.config, "max_ephemeral_pools_per_user", 1))
        existing = self._user_ephemeral_pools.get(user, [])
        if len(existing) + 1 > limit:
            raise PooltreeError(
                f'Cannot create new ephemeral pool "{placement.pool_name}" as limit for number of ephemeral pools '
                f'{limit} for user "{user}" in tree "{self.name}" has been reached; previously created pools are '
                f"[{', '.join(existing)}]",
                attributes={
                    "pool": placement.pool_name,
                    "user": user,
                    "pool_tree": self.name,
                    "limit": limit,
                },
            )

    def _check_placement(self, placement: PoolPlacement, user: str) -> PoolElement:
        """Checks shared by a start and a pool change: forbidden immediate operations and the ephemeral pool limit.

        Returns where the count checks start: the pool, or the parent of a pool still to be created.
        """
        self._check_immediate(placement)
        self._check_ephemeral_limit(placement, user)
        start = placement.pool if placement.pool is not None else placement.parent
        assert start is not None
        return start

    def _check_operation_count(self, start: PoolElement) -> None:
        for element in start.path:
            if element.operation_count >= element.max_operation_count:
                raise TooManyOperationsError(
                    f"Limit for the number of concurrent operations {element.max_operation_count} for pool "
                    f'"{element.name}" in tree "{self.name}" has been reached',
                    attributes={
                        "pool": element.name,
                        "pool_tree": self.name,
                        "limit": element.max_operation_count,
                    },
                )

    @staticmethod
    def lowest_violating_pool(pool: PoolElement) -> PoolElement | None:
        """The lowest element on pool → root whose running count has reached its running limit."""
        for element in pool.path:
            if element.running_operation_count >= element.max_running_operation_count:
                return element
        return None

    def _is_lightweight(self, operation_type: str, pool: PoolElement | None) -> bool:
        return (
            operation_type == "vanilla" and pool is not None and pool.effective_lightweight_operations_enabled
        )

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
            placement = self.resolve_pool(self._revival_pool_name(pool, user), user)
        else:
            placement = self.resolve_pool(pool, user)
        if is_gang:
            self._check_gang(placement)
        if not revival:
            self._check_operation_count(self._check_placement(placement, user))
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
        is_gang = bool(_spec_option(spec, "is_gang", False))
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
        violating = self.lowest_violating_pool(pool)
        if violating is None:
            self._mark_running(op)
        else:
            self._enqueue(op, violating)

    def _detach(self, op: TreeOperation) -> bool:
        """Take ``op`` out of its pool's counters; True if it freed a running (non-lightweight) slot."""
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
                violating = self.lowest_violating_pool(op.pool)
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
                violating = self.lowest_violating_pool(op.pool)
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
            candidate = self.resolve_pool(pool, op.user)
            if candidate.pool is not op.pool:
                self._validate_pool_change(op, candidate)
                placement = candidate
        return ParametersUpdate(operation_id, placement, new_weight, new_limits)

    def commit_parameters_update(self, update: ParametersUpdate) -> list[str]:
        """Apply a prepared change; returns operations that became running (the moved one included)."""
        op = self.operation(update.operation_id)
        activated = self._move(op, update.placement) if update.placement is not None else []
        op.weight = update.weight
        op.resource_limits = update.resource_limits
        return activated

    def _validate_pool_change(self, op: TreeOperation, placement: PoolPlacement) -> None:
        """§f: every pool of the new path (only the part not shared with the old one for a running operation)."""
        start = self._check_placement(placement, op.user)
        lightweight_in_new = self._is_lightweight(op.operation_type, placement.pool)
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

    # ------------------------------------------------------------------------------------------ live config

    def apply_config(self, definition: Any) -> list[str]:
        """Switch to a new definition (see :meth:`staged_config`); returns ids of newly running operations."""
        return self.commit_staged(self.staged_config(definition))

    def staged_config(self, definition: Any) -> PoolTree:
        """Build (aside, without touching this tree) the state this tree would have under ``definition``.

        Switch to a new (already validated) definition of this tree, keeping every operation attached.

        The new tree is built aside and swapped in only when complete: any exception leaves this tree as it was.
        Operations keep their pools where the pool still exists. Otherwise:
        - an ephemeral subpool ``hub$user`` stays under ``hub`` while ``hub`` still creates ephemeral subpools
          (non-FIFO); else its operations move to ``hub`` (resolved by these same rules);
        - any other pool that is gone (a removed configured pool or an ephemeral pool of a default parent) is
          re-created as an ephemeral pool of the same name, with default config, under the default parent pool
          of the user who owns it (removed nested pools are flattened there).
        Running operations stay running even when new limits are lower (YTsaurus never stops a running operation
        for a limit); a pool's ``enable_lightweight_operations`` toggle re-accounts them. Pending operations keep
        their FIFO order and are re-checked (``try_run_all_pending_operations``).
        """
        if definition.name != self.name:
            raise PooltreeError(
                f"Cannot apply the config of tree {definition.name!r} to tree {self.name!r}",
                attributes={"pool_tree": self.name},
            )
        new = PoolTree(definition, user_default_parent_pools=self.user_default_parent_pools)
        new._registration_counter = self._registration_counter
        new._pending_counter = self._pending_counter
        targets: dict[str, PoolElement] = {}

        def target_for(old_pool: PoolElement) -> PoolElement:
            cached = targets.get(old_pool.name)
            if cached is not None:
                return cached
            if old_pool.is_root:
                result = new.root
            elif (kept := new._pools.get(old_pool.name)) is not None and not kept.is_ephemeral:
                result = kept
            elif old_pool.is_ephemeral and old_pool.explicit_parent:
                assert old_pool.parent is not None
                hub = new._pools.get(old_pool.parent.name)
                still_allowed = hub is not None and hub.mode != "fifo"
                if still_allowed and hub is not None and not hub.hosts_ephemeral_subpools:
                    # It stopped being a hub: its ephemeral subpools dissolve into it.
                    still_allowed = not old_pool.parent.hosts_ephemeral_subpools
                if still_allowed and hub is not None:
                    result = new._pools.get(old_pool.name) or new._new_ephemeral_pool(
                        old_pool.name, hub, old_pool.created_by_user or "", in_default_parent=False
                    )
                else:
                    result = target_for(old_pool.parent)
            else:
                owner = old_pool.created_by_user or self._first_user(old_pool)
                result = new._pools.get(old_pool.name) or new._new_ephemeral_pool(
                    old_pool.name, new.default_parent_pool(owner), owner, in_default_parent=True
                )
            targets[old_pool.name] = result
            return result

        ops = list(self._operations.values())
        copies: dict[str, TreeOperation] = {}
        for op in ops:
            clone = TreeOperation(
                op.id,
                user=op.user,
                operation_type=op.operation_type,
                pool=new.root,
                weight=op.weight,
                resource_limits=op.resource_limits,
                spec=op.spec,
                start_time=op.start_time,
                registration_index=op.registration_index,
                offloading=op.offloading,
            )
            clone.suspended = op.suspended
            copies[op.id] = clone
            new._operations[op.id] = clone
        for op in ops:
            if op.running:
                new._attach(copies[op.id], target_for(op.pool), keep_running=True)
        for op in sorted((o for o in ops if not o.running), key=lambda o: o.pending_index):
            new._attach(copies[op.id], target_for(op.pool), keep_running=False)
        new.try_run_all_pending_operations()
        return new

    def commit_staged(self, new: PoolTree) -> list[str]:
        """Swap in a state built by :meth:`staged_config`; returns operations that were pending and now run."""
        activated = [
            op_id
            for op_id, op in self._operations.items()
            if not op.running and new._operations[op_id].running
        ]
        self._swap_state(new)
        return activated

    def _first_user(self, pool: PoolElement) -> str:
        for op in pool.operations.values():
            return op.user
        return ""

    def _swap_state(self, new: PoolTree) -> None:
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
            setattr(self, name, getattr(new, name))

    def set_operation_suspended(self, operation_id: str, suspended: bool) -> None:
        self.operation(operation_id).suspended = suspended

    # ------------------------------------------------------------------------------- effective parameters

    def effective_parameters(self, pool_name: str) -> EffectiveParameters:
        """Starvation and preemption parameters of a pool resolved top-down (§c): own value, else the parent's.

        Ephemeral pools set none of them, so they inherit from their parent. The root takes the tree config.
        """
        chain = reversed(self.pool(pool_name).path)
        cfg = self.config
        params = EffectiveParameters(
            fair_share_starvation_tolerance=float(cfg.fair_share_starvation_tolerance),
            fair_share_starvation_timeout=float(cfg.fair_share_starvation_timeout),
            aggressive_starvation_enabled=bool(cfg.enable_aggressive_starvation),
            fair_share_aggressive_starvation_timeout=float(cfg.fair_share_aggressive_starvation_timeout),
            non_preemptible_resource_usage_threshold=np.array(
                cfg.effective_non_preemptible_resource_usage_threshold(), dtype=float
            ),
            aggressive_preemption_allowed=bool(_option(cfg, "allow_aggressive_preemption", True)),
            normal_preemption_allowed=bool(_option(cfg, "allow_normal_preemption", True)),
        )
        for element in chain:
            config = element.config
            if config is None:
                continue
            if config.fair_share_starvation_tolerance is not None:
                params.fair_share_starvation_tolerance = float(config.fair_share_starvation_tolerance)
            if config.fair_share_starvation_timeout is not None:
                params.fair_share_starvation_timeout = float(config.fair_share_starvation_timeout)
            if config.enable_aggressive_starvation is not None:
                params.aggressive_starvation_enabled = bool(config.enable_aggressive_starvation)
            if config.allow_aggressive_preemption is not None:
                params.aggressive_preemption_allowed = bool(config.allow_aggressive_preemption)
            if config.allow_normal_preemption is not None:
                params.normal_preemption_allowed = bool(config.allow_normal_preemption)
            threshold = config.non_preemptible_resource_usage_threshold
            if threshold is not None:
                params.non_preemptible_resource_usage_threshold = _threshold_vector(threshold)
        return params

    def operation_effective_parameters(self, operation_id: str) -> EffectiveParameters:
        """An operation inherits its pool's parameters; the spec may enable aggressive starvation and lower the
        non-preemptible ``user_slots`` threshold (``max_unpreemptible_allocation_count``)."""
        op = self.operation(operation_id)
        params = self.effective_parameters(op.pool.name)
        if _spec_option(op.spec, "enable_aggressive_starvation", False):
            params.aggressive_starvation_enabled = True
        cap = _spec_option(op.spec, "max_unpreemptible_allocation_count", None)
        if cap is not None:
            threshold = params.non_preemptible_resource_usage_threshold.copy()
            threshold[USER_SLOTS] = min(threshold[USER_SLOTS], float(cap))
            params.non_preemptible_resource_usage_threshold = threshold
        return params

    # ------------------------------------------------------------------------------------------------ orchid

    def pool_orchid(self, name: str) -> dict[str, Any]:
        """Counts, effective limits, pending queue and placement of one pool (view layer input)."""
        pool = self.pool(name)
        config = pool.config
        return {
            "name": pool.name,
            "parent": pool.parent.name if pool.parent is not None else None,
            "full_path": pool.full_path,
            "mode": pool.mode,
            "is_ephemeral": pool.is_ephemeral,
            "running_operation_count": pool.running_operation_count,
            "lightweight_running_operation_count": pool.lightweight_running_operation_count,
            "operation_count": pool.operation_count,
            "pool_operation_count": len(pool.operations),
            "max_running_operation_count": pool.max_running_operation_count,
            "max_operation_count": pool.max_operation_count,
            "pending_operation_ids": list(pool.pending),
            "pending_operation_count": len(pool.pending),
            "child_pool_count": len(pool.children),
            "forbid_immediate_operations": (
                bool(_option(self.config, "forbid_immediate_operations_in_root", True))
                if pool.is_root
                else bool(config is not None and config.forbid_immediate_operations)
            ),
            "lightweight_operations_enabled": pool.lightweight_operations_enabled,
            "effective_lightweight_operations_enabled": pool.effective_lightweight_operations_enabled,
            "user": pool.created_by_user,
        }

    def pending_positions(self) -> dict[str, int]:
        """Every pending operation's position in its queue (one pass; ``operation_orchid`` per operation would
        look each one up in its queue)."""
        return {op_id: i for pool in self._pools.values() for i, op_id in enumerate(pool.pending)}

    def pending_position(self, holder: PoolElement, operation_id: str) -> int:
        """``operation_id``'s position in ``holder``'s pending queue. The queue's positions are computed in one pass
        and kept while the queue has the same length, head and tail: operations only join at the tail and leave
        (anywhere), so any change alters one of the three, and reading every pending operation's position costs
        one pass per change of the queue instead of one per read."""
        queue = holder.pending
        if not queue:
            raise KeyError(operation_id)
        key = (len(queue), next(iter(queue)), next(reversed(queue)))
        cached = self._position_cache.get(holder.name)
        if cached is None or cached[0] != key:
            cached = (key, {op_id: i for i, op_id in enumerate(queue)})
            self._position_cache[holder.name] = cached
        return cached[1][operation_id]

    def operation_orchid(self, operation_id: str, *, position: int | None = None) -> dict[str, Any]:
        """An operation's placement in this tree; a pending one names the pool holding it and its position
        (``position`` when the caller already knows it)."""
        op = self.operation(operation_id)
        info: dict[str, Any] = {
            "pool": op.pool.name,
            "user": op.user,
            "type": op.operation_type,
            "start_time": op.start_time,
            "weight": op.weight,
            "resource_limits": resources_to_dict(op.resource_limits, drop_infinite=True),
            "lightweight": op.lightweight,
            "offloading": op.offloading,
            "running": op.running,
            "suspended": op.suspended,
            "alerts": {},
        }
        if not op.running and op.pending_pool is not None:
            holder = op.pending_pool
            if position is None:
                position = self.pending_position(holder, op.id)
            info.update(
                pending_pool=holder.name,
                pending_position=position,
                pending_reason=(
                    f'Max running operation count of pool "{holder.name}" reached '
                    f"({holder.running_operation_count} of {holder.max_running_operation_count}); "
                    f"position {position + 1} of {len(holder.pending)} in its queue"
                ),
            )
            if op.alert is not None:
                info["alerts"][OPERATION_PENDING_ALERT] = {
                    "message": op.alert["message"],
                    "attributes": dict(op.alert["attributes"]),
                }
        return info

    def orchid(self) -> dict[str, Any]:
        """Every pool (top-down) and every operation of the tree."""
        return {
            "pools": {pool.name: self.pool_orchid(pool.name) for pool in self._pools_top_down()},
            "operations": {op_id: self.operation_orchid(op_id) for op_id in self._operations},
            "alerts": dict(self.alerts),
        }

    def iter_operations(self, pool: PoolElement) -> Iterable[TreeOperation]:
        """Operations attached directly to ``pool``, in attach order."""
        return pool.operations.values()
