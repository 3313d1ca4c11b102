"""Effective starvation/preemption parameters and the orchid data of a pool tree (a part of `PoolTree`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import is_
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from pooltree.resources import USER_SLOTS, resources_to_dict
from pooltree.tree.elements import PoolElement, TreeOperation
from pooltree.tree.values import (
    OPERATION_PENDING_ALERT,
    EffectiveParameters,
    _option,
    _threshold_vector,
    spec_option,
)

if TYPE_CHECKING:
    from pooltree.tree.pool_tree import PoolTree


class TreeViews:
    """Read-only views of `PoolTree` state: effective parameters, pool and operation orchid, queue positions."""

    def __init__(self, tree: PoolTree) -> None:
        self.tree = tree
        """The tree whose state this part reads and changes (its one owner)."""

    # ------------------------------------------------------------------------------- effective parameters

    def effective_parameters(self, pool_name: str) -> EffectiveParameters:
        """Starvation and preemption parameters of a pool resolved top-down (§c): own value, else the parent's.

        Ephemeral pools set none of them, so they inherit from their parent. The root takes the tree config.
        """
        chain = reversed(self.tree.pool(pool_name).path)
        cfg = self.tree.config
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
        op = self.tree.operation(operation_id)
        params = self.effective_parameters(op.pool.name)
        if spec_option(op.spec, "enable_aggressive_starvation", False):
            params.aggressive_starvation_enabled = True
        cap = spec_option(op.spec, "max_unpreemptible_allocation_count", None)
        if cap is not None:
            threshold = params.non_preemptible_resource_usage_threshold.copy()
            threshold[USER_SLOTS] = min(threshold[USER_SLOTS], float(cap))
            params.non_preemptible_resource_usage_threshold = threshold
        return params

    # ------------------------------------------------------------------------------------------------ orchid

    def pool_orchid(self, name: str) -> dict[str, Any]:
        """Counts, effective limits, pending queue and placement of one pool (view layer input)."""
        pool = self.tree.pool(name)
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
                bool(_option(self.tree.config, "forbid_immediate_operations_in_root", True))
                if pool.is_root
                else bool(config is not None and config.forbid_immediate_operations)
            ),
            "lightweight_operations_enabled": pool.lightweight_operations_enabled,
            "effective_lightweight_operations_enabled": pool.effective_lightweight_operations_enabled,
            "user": pool.created_by_user,
            **_starvation_options(config),
        }

    def pending_positions(self) -> dict[str, int]:
        """Every pending operation's position in its queue (one pass; ``operation_orchid`` per operation would
        look each one up in its queue)."""
        return {op_id: i for pool in self.tree._pools.values() for i, op_id in enumerate(pool.pending)}

    def pending_position(self, holder: PoolElement, operation_id: str) -> int:
        """``operation_id``'s position in ``holder``'s pending queue (``queue_positions``)."""
        if not holder.pending:
            raise KeyError(operation_id)
        return self.queue_positions(holder)[operation_id]

    def queue_positions(self, holder: PoolElement) -> dict[str, int]:
        """Every operation's position in ``holder``'s (non-empty) pending queue. The positions are computed in one
        pass and kept while the queue has the same length, head and tail: operations only join at the tail and
        leave (anywhere), so any change alters one of the three, and reading every pending operation's position
        costs one pass per change of the queue instead of one per read."""
        queue = holder.pending
        key = (len(queue), next(iter(queue)), next(reversed(queue)))
        cached = self.tree._position_cache.get(holder.name)
        if cached is None or cached[0] != key:
            positions = _after_appends(queue, cached, key)
            cached = (
                key,
                positions if positions is not None else {op_id: i for i, op_id in enumerate(queue)},
            )
            self.tree._position_cache[holder.name] = cached
        return cached[1]

    def queue_facts(self, holder: PoolElement, positions: Mapping[str, int]) -> QueueFacts:
        """What a pending operation's reason says of the queue holding it, read now, with ``positions``."""
        return QueueFacts(
            holder.running_operation_count, holder.max_running_operation_count, len(holder.pending), positions
        )

    def operation_orchid(self, operation_id: str, *, position: int | None = None) -> dict[str, Any]:
        """An operation's placement in this tree; a pending one names the pool holding it and its position
        (``position`` when the caller already knows it)."""
        facts = self.operation_facts(operation_id)
        queues: dict[str, QueueFacts] = {}
        if facts.pending is not None:
            holder = self.tree.operation(operation_id).pending_pool
            assert holder is not None
            if position is None:
                position = self.pending_position(holder, operation_id)
            queues[holder.name] = self.queue_facts(holder, {operation_id: position})
        return operation_placement(operation_id, facts, queues)

    def operation_facts(self, operation_id: str) -> OperationFacts:
        """What ``operation_orchid`` shows of an operation, read now, formatted later (``operation_placement``,
        with the ``queue_facts`` of the queue holding a pending one): the live service reads it under its lock
        and formats it without (``server/live/views.py``)."""
        op = self.tree.operation(operation_id)
        return _facts(_fields(op, None if op.running or op.pending_pool is None else op.pending_pool.name))

    def facts_of(
        self,
        operations: Iterable[tuple[str, TreeOperation | None]],
        previous: Mapping[str, OperationFacts | None],
        queues: dict[str, QueueFacts],
    ) -> dict[str, OperationFacts | None]:
        """``operation_facts`` of each operation of ``operations`` (id, and the operation or None when it is not in
        the tree: None), the queues holding pending ones added to ``queues`` (with every position in them, as
        now). An operation whose facts in ``previous`` are what it shows now (``_same``) keeps that object: an
        operation that did not change since the last read keeps its facts (a view read once a second does not
        make thousands of new objects for the collector to walk)."""
        found: dict[str, OperationFacts | None] = {}
        for operation_id, op in operations:
            if op is None:
                found[operation_id] = None
                continue
            name = None
            if not op.running and op.pending_pool is not None:
                holder = op.pending_pool
                name = holder.name
                if name not in queues:  # the positions as now: the tree's kept ones grow in place
                    queues[name] = self.queue_facts(holder, dict(self.queue_positions(holder)))
            fields = _fields(op, name)
            kept = previous.get(operation_id)
            found[operation_id] = kept if kept is not None and all(map(is_, fields, kept)) else _facts(fields)
        return found

    def orchid(self) -> dict[str, Any]:
        """Every pool (top-down) and every operation of the tree."""
        return {
            "pools": {pool.name: self.pool_orchid(pool.name) for pool in self.tree._pools_top_down()},
            "operations": {op_id: self.operation_orchid(op_id) for op_id in self.tree._operations},
            "alerts": dict(self.tree.alerts),
        }

    def iter_operations(self, pool: PoolElement) -> Iterable[TreeOperation]:
        """Operations attached directly to ``pool``, in attach order."""
        return pool.operations.values()


def _after_appends(
    queue: dict[str, Any],
    cached: tuple[tuple[int, str, str], dict[str, int]] | None,
    key: tuple[int, str, str],
) -> dict[str, int] | None:
    """The cached positions extended by the operations that joined the queue's tail since, when joining is all
    that happened (same head, the old tail still there, and the length grew by exactly the operations after it);
    None when something left the queue (then every position after it moved: computed again in one pass). Each
    start joins the tail, so a long queue is not walked once per start."""
    if cached is None:
        return None
    (old_length, old_head, old_tail), positions = cached
    length, head, _ = key
    if head != old_head or length <= old_length or old_tail not in queue:
        return None
    joined: list[str] = []
    for op_id in reversed(queue):
        if op_id == old_tail:
            break
        joined.append(op_id)
    if old_length + len(joined) != length:
        return None
    for index, op_id in enumerate(reversed(joined)):
        positions[op_id] = old_length + index
    return positions


def _starvation_options(config: Any) -> dict[str, Any]:
    """The pool's own ``fair_share_starvation_timeout`` (ms) and ``fair_share_starvation_tolerance``, its presets
    applied, where set (YTsaurus's orchid shows the pool config's values beside the inherited ``effective_*``)."""
    out: dict[str, Any] = {}
    if config is None:
        return out
    if config.fair_share_starvation_timeout is not None:
        out["fair_share_starvation_timeout"] = round(float(config.fair_share_starvation_timeout) * 1000)
    if config.fair_share_starvation_tolerance is not None:
        out["fair_share_starvation_tolerance"] = config.fair_share_starvation_tolerance
    return out


class OperationFacts(NamedTuple):
    """An operation's placement in its tree as read (``TreeViews.operation_facts``); ``pending``: the pool whose
    queue holds a pending one, with its ``operation_pending`` alert (set by the tree when it queues, replaced,
    never changed). What the reason says of the queue (the operation's position, the queue's length, the pool's
    running counts) is the queue's (``QueueFacts``), read apart: operations joining or leaving a queue change no
    other operation's facts."""

    pool: str
    user: Any
    operation_type: Any
    start_time: Any
    weight: Any
    resource_limits: Any
    lightweight: bool
    offloading: Any
    running: bool
    suspended: bool
    pending: str | None
    alert: dict[str, Any] | None


class QueueFacts(NamedTuple):
    """A pool holding pending operations, as their reasons show it (``TreeViews.queue_facts``): its running and
    maximum running operation counts, its queue's length and the positions in it (by operation id)."""

    running: int
    max_running: Any
    length: int
    positions: Mapping[str, int]


def _fields(op: TreeOperation, pending: str | None) -> tuple[Any, ...]:
    """The fields of ``op``'s ``OperationFacts``, pending in the queue of pool ``pending`` (None: not pending).
    Facts whose every field is the same object show the same (``TreeViews.facts_of`` keeps them)."""
    return (
        op.pool.name,
        op.user,
        op.operation_type,
        op.start_time,
        op.weight,
        op.resource_limits,
        op.lightweight,
        op.offloading,
        op.running,
        op.suspended,
        pending,
        op.alert if pending is not None else None,
    )


def _facts(fields: tuple[Any, ...]) -> OperationFacts:
    return cast(OperationFacts, tuple.__new__(OperationFacts, fields))  # NamedTuple's own __new__ is Python's


def queue_placement(
    holder: str, running: int, max_running: Any, length: int, position: int
) -> dict[str, Any]:
    """What ``operation_placement`` shows of an operation waiting at ``position`` (from 0) in the queue of pool
    ``holder``, whose queue is ``length`` long and which runs ``running`` of at most ``max_running`` operations
    (also what a read process's replica of the queues fills in, ``pooltree/reads``)."""
    return {
        "pending_pool": holder,
        "pending_position": position,
        "pending_reason": (
            f'Max running operation count of pool "{holder}" reached '
            f"({running} of {max_running}); "
            f"position {position + 1} of {length} in its queue"
        ),
    }


def operation_placement(
    operation_id: str, facts: OperationFacts, queues: Mapping[str, QueueFacts]
) -> dict[str, Any]:
    """``TreeViews.operation_orchid``'s map of ``operation_id`` from its facts and the facts of the queue holding it
    (``queues``: by pool name)."""
    info: dict[str, Any] = {
        "pool": facts.pool,
        "user": facts.user,
        "type": facts.operation_type,
        "start_time": facts.start_time,
        "weight": facts.weight,
        "resource_limits": resources_to_dict(facts.resource_limits, drop_infinite=True),
        "lightweight": facts.lightweight,
        "offloading": facts.offloading,
        "running": facts.running,
        "suspended": facts.suspended,
        "alerts": {},
    }
    if facts.pending is not None:
        holder = facts.pending
        running, max_running, length, positions = queues[holder]
        info.update(queue_placement(holder, running, max_running, length, positions[operation_id]))
        if facts.alert is not None:
            info["alerts"][OPERATION_PENDING_ALERT] = {
                "message": facts.alert["message"],
                "attributes": dict(facts.alert["attributes"]),
            }
    return info
