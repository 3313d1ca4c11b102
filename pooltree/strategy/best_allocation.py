"""Operations' best allocation share and the tree's ``best_allocation_share_update_period`` (default 1 min).

YTsaurus (``TPoolTreeOperationElement::PreUpdate``, ``GetAdjustedResourceLimits``, ``TOperationElement::
ComputeLimitsShare``): an operation's limits share in the fair-share update is capped by its *best allocation
share*, the share of the tree's resources its allocations can take at all given the nodes' memory. With
``d`` = the operation's demand memory per allocation (its demand's memory divided by its demand's user slots,
both whole numbers, as YTsaurus's integer division), a node with memory ``m`` holds ``⌊m / d⌋`` allocations, so
only ``Σ ⌊m / d⌋ · d`` of the memory of the nodes the operation may use (the tree's nodes matching its
``scheduling_tag_filter``) can be its; every other resource counts whole. An operation whose demand has no user
slots, or less than one byte per slot, is not capped. The share is computed at the operation's first fair-share
update and again whenever ``best_allocation_share_update_period`` has passed since, and only while the tree's
resource limits are stable (``node_reconnection_timeout`` after the scheduler connected, `reconnection.py`);
until then an operation is not capped (YTsaurus's initial share is all ones).

``BestAllocationShares`` keeps each operation's memory limit and when it was computed; ``SchedulerCore`` asks it at
every update and hands the limits that bind to the pure update (``UpdateSettings.best_allocation_memory``), which
caps those operations' limits (``pooltree/fairshare/best_allocation.py``).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pooltree.config import TagFilter
from pooltree.resources import MEMORY, USER_SLOTS, Vector
from pooltree.tree.delta import RuntimeTree
from pooltree.tree.values import spec_option

DEFAULT_UPDATE_PERIOD = 60.0
"""Seconds: YTsaurus's default ``best_allocation_share_update_period``."""

NodesView = Mapping[str, tuple[frozenset[str], Vector]]
"""Node address → (tags, resource limits), the tree's nodes."""


def adjusted_memory_limit(demand: Vector, node_memory: Mapping[int, int]) -> float | None:
    """The memory the operation's allocations can take on the nodes (YTsaurus's ``GetAdjustedResourceLimits``):
    ``node_memory`` maps a node memory limit to the number of such nodes. None when the memory is not adjusted (no
    user slots in the demand, no node, or less than a byte per allocation)."""
    slots = int(demand[USER_SLOTS])
    if slots <= 0 or not node_memory:
        return None
    per_allocation = int(demand[MEMORY]) // slots
    if per_allocation == 0:
        return None
    return float(
        sum(memory // per_allocation * per_allocation * count for memory, count in node_memory.items())
    )


class BestAllocationShares:
    """Every operation's memory limit from its best allocation share, recomputed once per update period.

    ``limits`` holds the last computed limit of each operation whose limit binds (below the memory of the nodes
    it may use); an operation due again is found through a heap of due times, so an update costs the operations
    that arrived or are due, not every operation.
    """

    def __init__(self) -> None:
        self.limits: dict[str, float] = {}
        self._computed_at: dict[str, float] = {}
        self._due: list[tuple[float, float, str]] = []  # (due time, computed at, operation id)
        self._period: float | None = None
        self._memory: tuple[Any, dict[str, dict[int, int]]] = (None, {})
        """The node view the memory distributions below were read from, and per tag filter text its distribution."""
        self.revision = 0
        """Moves whenever ``limits`` changes (the simulator skips an update only while it has not moved)."""

    def forget(self, operation_id: str) -> None:
        if self.limits.pop(operation_id, None) is not None:
            self.revision += 1
        self._computed_at.pop(operation_id, None)

    def update(
        self,
        now: float,
        period: float,
        stable: bool,
        operations: Iterable[str],
        demand_of: Callable[[str], Vector | None],
        tag_filter_of: Callable[[str], str],
        nodes: NodesView,
    ) -> dict[str, float]:
        """Recompute the operations that are new or due (when the tree's limits are stable) and return the limits
        that bind: operation id → memory. ``operations`` are the registered ones; ``demand_of`` gives an
        operation's demand (None: it has none), ``tag_filter_of`` its ``scheduling_tag_filter`` text."""
        present = set(operations)
        for gone in self._computed_at.keys() - present:
            self.forget(gone)
        if not stable:
            return self.limits
        if period != self._period:  # a new period: every operation's next time moves
            self._period = period
            self._due = [(at + period, at, op_id) for op_id, at in self._computed_at.items()]
            heapq.heapify(self._due)
        due = sorted(present - self._computed_at.keys())
        while self._due and self._due[0][0] <= now:
            _, at, op_id = heapq.heappop(self._due)
            if self._computed_at.get(op_id) == at:  # not computed again since, nor gone
                due.append(op_id)
        if self._memory[0] is not nodes:  # the same view object until a node comes, goes or changes
            self._memory = (nodes, {})
        memories = self._memory[1]
        for op_id in due:
            demand = demand_of(op_id)
            text = tag_filter_of(op_id)
            node_memory = memories.get(text)
            if node_memory is None:
                node_memory = memories[text] = _node_memory(nodes, text)
            limit = None if demand is None else adjusted_memory_limit(demand, node_memory)
            if limit is not None and limit < sum(memory * count for memory, count in node_memory.items()):
                if self.limits.get(op_id) != limit:
                    self.limits[op_id] = limit
                    self.revision += 1
            elif self.limits.pop(op_id, None) is not None:
                self.revision += 1
            self._computed_at[op_id] = now
            if math.isfinite(period):
                heapq.heappush(self._due, (now + period, now, op_id))
        return self.limits


def operation_tag_filter(pool_tree: RuntimeTree, operation_id: str) -> str:
    """The ``scheduling_tag_filter`` text of a registered operation's spec ("" without one)."""
    operation = pool_tree.operations.get(operation_id)
    if operation is None:
        return ""
    return str(spec_option(operation.spec, "scheduling_tag_filter", "") or "")


def _node_memory(nodes: NodesView, filter_text: str) -> dict[int, int]:
    """The memory distribution (memory limit → node count, YTsaurus's ``TMemoryDistribution``) of the nodes an
    operation with this ``scheduling_tag_filter`` may use."""
    tag_filter: Any = TagFilter.parse(filter_text, "scheduling_tag_filter") if filter_text else None
    if tag_filter is not None and tag_filter.is_empty:
        tag_filter = None
    return dict(
        Counter(
            int(limits[MEMORY])
            for tags, limits in nodes.values()
            if tag_filter is None or tag_filter.matches(tags)
        )
    )
