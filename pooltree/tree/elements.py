"""Runtime elements of one pool tree: pools (configured, ephemeral and the root) and operations in a tree.

These are plain mutable records kept lean (``__slots__``, ints) because admission and activation run on every
operation start and finish. All the rules live in :mod:`pooltree.tree.pool_tree`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pooltree.resources import Vector

ROOT_POOL_NAME = "<Root>"
EPHEMERAL_DELIMITER = "$"


class PoolElement:
    """A pool (or the root) at run time: its place in the hierarchy, effective count limits and counters.

    ``path`` is the tuple (self, parent, …, root) used by every limit check. ``pending`` is this pool's FIFO queue
    of operations held by ITS running limit (they may live in descendant pools).
    """

    __slots__ = (
        "children",
        "config",
        "created_by_user",
        "ephemeral_config",
        "explicit_parent",
        "full_path",
        "is_ephemeral",
        "is_root",
        "lightweight_operations_enabled",
        "lightweight_running_operation_count",
        "max_operation_count",
        "max_running_operation_count",
        "mode",
        "name",
        "operation_count",
        "operations",
        "parent",
        "path",
        "pending",
        "running_operation_count",
    )

    def __init__(
        self,
        name: str,
        parent: PoolElement | None,
        *,
        config: Any = None,
        ephemeral_config: Any = None,
        is_ephemeral: bool = False,
        created_by_user: str | None = None,
        explicit_parent: bool = False,
        mode: str = "fair_share",
        max_operation_count: int,
        max_running_operation_count: int,
        lightweight_operations_enabled: bool = False,
        full_path: str = "",
    ):
        self.name = name
        self.parent = parent
        self.children: dict[str, PoolElement] = {}
        self.config = config
        self.ephemeral_config = ephemeral_config
        self.is_ephemeral = is_ephemeral
        self.is_root = parent is None
        self.created_by_user = created_by_user
        self.explicit_parent = explicit_parent
        self.mode = mode
        self.max_operation_count = max_operation_count
        self.max_running_operation_count = max_running_operation_count
        self.lightweight_operations_enabled = lightweight_operations_enabled
        self.full_path = full_path
        self.operation_count = 0
        self.running_operation_count = 0
        self.lightweight_running_operation_count = 0
        self.pending: dict[str, TreeOperation] = {}
        self.operations: dict[str, TreeOperation] = {}
        self.path: tuple[PoolElement, ...] = (self,) if parent is None else (self, *parent.path)
        if parent is not None:
            parent.children[name] = self

    @property
    def effective_lightweight_operations_enabled(self) -> bool:
        """Lightweight operations work only in FIFO pools, never in the root (§f)."""
        return self.lightweight_operations_enabled and self.mode == "fifo" and not self.is_root

    @property
    def hosts_ephemeral_subpools(self) -> bool:
        """Whether operations started in this pool go to its ephemeral subpools ``pool$user``."""
        return bool(self.config is not None and self.config.create_ephemeral_subpools)

    def is_empty(self) -> bool:
        return self.operation_count == 0 and not self.children

    def __repr__(self) -> str:
        return (
            f"PoolElement({self.name!r}, ops={self.operation_count}, running={self.running_operation_count})"
        )


class TreeOperation:
    """An operation's registration in one tree: its pool, runtime parameters and running/pending status.

    ``pending_pool`` is the pool whose running limit holds the operation (``None`` while running);
    ``pending_index`` orders pending operations across queues (FIFO, assigned on every enqueue).
    """

    __slots__ = (
        "alert",
        "id",
        "lightweight",
        "offloading",
        "operation_type",
        "pending_index",
        "pending_pool",
        "pool",
        "registration_index",
        "resource_limits",
        "running",
        "spec",
        "start_time",
        "suspended",
        "user",
        "weight",
    )

    def __init__(
        self,
        operation_id: str,
        *,
        user: str,
        operation_type: str,
        pool: PoolElement,
        weight: float | None,
        resource_limits: Vector,
        spec: Any,
        start_time: float,
        registration_index: int,
        offloading: bool = False,
    ):
        self.id = operation_id
        self.user = user
        self.operation_type = operation_type
        self.pool = pool
        self.weight = weight
        self.resource_limits = resource_limits
        self.spec = spec
        self.start_time = start_time
        self.registration_index = registration_index
        self.offloading = offloading
        self.running = False
        self.lightweight = False
        self.suspended = False
        self.pending_pool: PoolElement | None = None
        self.pending_index = 0
        self.alert: dict[str, Any] | None = None

    def __repr__(self) -> str:
        status = (
            "running" if self.running else f"pending@{self.pending_pool.name if self.pending_pool else '?'}"
        )
        return f"TreeOperation({self.id!r}, pool={self.pool.name!r}, {status})"


_FROZEN_TYPES: dict[type, bool] = {}


def frozen_spec(spec: Any) -> bool:
    """Whether an operation's spec cannot change in place: absent, or a frozen model (``OperationSpec``), not a
    plain map. The per-period builds cache what they derive from a frozen spec by its identity; memoised per type
    (an ``isinstance`` against the ``Mapping`` ABC costs about a microsecond, and this runs for every operation)."""
    kind = type(spec)
    frozen = _FROZEN_TYPES.get(kind)
    if frozen is None:
        config = getattr(kind, "model_config", None)
        frozen = spec is None or (
            bool(isinstance(config, dict) and config.get("frozen")) and not issubclass(kind, Mapping)
        )
        _FROZEN_TYPES[kind] = frozen
    return frozen


def pool_key(pool: PoolElement) -> tuple[Any, ...]:
    """What every per-period projection of a pool (the fair-share input's element, the strategy's static spec) is
    computed from in the pool itself: the runtime object, its config objects (frozen: compared by identity), mode
    and rootness. Each projection appends what else it reads (inherited values, the tree config, the parent)."""
    return (pool, pool.config, pool.ephemeral_config, pool.mode, pool.is_root)
