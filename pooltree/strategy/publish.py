"""A fair-share update reaching the strategy: usage and demand shares, statuses, starvation, preemption priorities.

`SnapshotPublisher.publish` takes a new `SchedulingTree`: it builds (or, for an unchanged structure, reuses) the
published elements, re-sums pool usage bottom-up, updates starvation (§c), the operations' preemption priorities
(§e.2), their preemptible lists (§d) and the best-leaf heaps (`stages.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.fairshare.status import is_below_fair_share
from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.elements import (
    StarvationState,
    _Element,
    _floats,
    _lists_state,
)
from pooltree.strategy.model import (
    PreemptionPriority,
    SchedulingStatus,
    StarvationStatus,
)
from pooltree.strategy.shares import (
    INFINITE_SATISFACTION_RATIO,
    blocked_mask,
)
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.snapshot import SchedulingTree
from pooltree.strategy.stages import SchedulingStages


class SnapshotPublisher(SchedulingStages):
    """Publishing a fair-share update; see the module docstring."""

    _skeleton: Any

    # ------------------------------------------------------------------ fair-share update

    def publish(self, tree: SchedulingTree, now: float | None) -> None:
        """Take a new snapshot: statuses, starvation, preemption priorities, preemptible lists and heaps."""
        self.tree = tree
        self.config = tree.config
        self._spare = tuple(self.config.min_spare_allocation_resources_on_node.tolist())
        total = tuple(float(x) for x in tree.total_resources)
        previous = getattr(self, "_elements", {})
        fifo_order = self.config.fifo_pool_scheduling_order == "fifo"
        if previous and tree.skeleton is getattr(self, "_skeleton", None):
            elements = self._reuse_elements(tree)
        else:
            elements = self._new_elements(tree, previous, fifo_order)
        self._skeleton = tree.skeleton
        self._elements = elements
        self._total = total
        # usage bottom-up and demand shares
        for element_id in reversed(tree.order):
            element = elements[element_id]
            if element.is_op:
                if element.spec.demand_share is not None:
                    element.demand_share = tuple(_floats(element.spec.demand_share))
                else:
                    needed = element.op.controller.needed_resources if element.op is not None else np.zeros(5)
                    element.demand_share = tuple(
                        (u + float(n)) / t if t > 0 else 0.0
                        for u, n, t in zip(element.usage, needed, total, strict=True)
                    )
            else:
                usage = [0.0] * RESOURCE_COUNT
                if element.spec.demand_share is None:
                    demand = [0.0] * RESOURCE_COUNT
                    for child in element.children:
                        _add_list(usage, child.usage)  # the same float additions, in the same order, unrolled
                        _add_list(demand, child.demand_share)
                    element.demand_share = tuple(demand)
                else:
                    for child in element.children:
                        _add_list(usage, child.usage)
                    element.demand_share = tuple(_floats(element.spec.demand_share))
                element.usage = usage
            shares = (element.fair_share, element.demand_share)
            if shares != element.blocked_for:  # a function of these two only
                element.blocked = blocked_mask(*shares)
                element.blocked_for = shares
        if now is not None:
            self._update_starvation(now)
            self.last_update_time = now
        self._update_priorities()
        for element in elements.values():
            if element.is_op and element.op is not None:
                self._configure_lists(element)
        self._rebuild_heaps()

    def _new_elements(
        self, tree: SchedulingTree, previous: dict[str, _Element], fifo_order: bool
    ) -> dict[str, _Element]:
        elements: dict[str, _Element] = {}
        for index, element_id in enumerate(tree.order):
            spec = tree.elements[element_id]
            element = _Element(spec, index, tree.effective[element_id])
            before = previous.get(element_id)
            if before is not None:
                element.last_start = before.last_start
            own = (element,) if element.limits is not None else ()
            if spec.parent is not None:
                parent = elements[spec.parent]
                element.parent = parent
                element.depth = parent.depth + 1
                parent.children.append(element)
                element.use_fifo = parent.spec.fifo and fifo_order
                # limited elements on the path to the root, nearest first (parents precede children in order)
                element.limited = own + parent.limited
            else:
                element.limited = own
            if element.is_op:
                element.op = self.operations.get(element_id)
                if element.op is not None:
                    element.usage = element.op.usage
            elements[element_id] = element
        return elements

    def _reuse_elements(self, tree: SchedulingTree) -> dict[str, _Element]:
        """The previous publish's elements, for a tree of the same structure (``tree.skeleton``).

        Everything an `_Element` derives from the structure and static settings (parent, children, depth,
        limits, limited ancestors, FIFO use, effective settings, tag matches) is kept; everything a new
        element would start with is reset to the same values, and its spec, fair share and FIFO key taken from
        the new tree, so the rest of :meth:`publish` computes exactly what it computes on new elements.
        """
        elements = self._elements
        specs = tree.elements
        operations = self.operations
        normal = SchedulingStatus.NORMAL
        non_starving = StarvationStatus.NON_STARVING
        for element_id, element in elements.items():
            spec = specs[element_id]
            element.spec = spec
            element.fair_share = tuple(_floats(spec.fair_share))
            element.fifo_key = float(spec.fifo_index)
            element.sat = INFINITE_SATISFACTION_RATIO
            element.keyed_start = 0
            element.active = False
            element.excluded = -1
            element.heap = []
            element.status = normal
            element.starvation = non_starving
            element.inactive_reason = None
            if element.is_op:
                runtime = operations.get(element_id)
                element.op = runtime
                element.usage = runtime.usage if runtime is not None else [0.0] * RESOURCE_COUNT
        return elements

    def _computed_statuses(self) -> dict[str, SchedulingStatus]:
        """§c statuses of the elements the snapshot gives none for, by the fair-share update's own rule, at once."""
        pending = [
            element
            for element_id in self.tree.order
            if (element := self._elements[element_id]).spec.scheduling_status is None
        ]
        if not pending:
            return {}
        below = is_below_fair_share(
            np.array([element.fair_share for element in pending]),
            np.array([self._usage_share(element) for element in pending]),
            np.array([element.demand_share for element in pending]),
            np.array([element.settings.starvation_tolerance for element in pending]),
            is_operation=np.array([element.is_op for element in pending]),
            schedulable=np.array(
                [
                    element.spec.schedulable and (not element.is_op or element.op is not None)
                    for element in pending
                ]
            ),
        )
        return {
            element.id: SchedulingStatus.BELOW_FAIR_SHARE if flag else SchedulingStatus.NORMAL
            for element, flag in zip(pending, np.atleast_1d(below).tolist(), strict=True)
        }

    def _update_starvation(self, now: float) -> None:
        config = self.config
        computed = self._computed_statuses()
        for element_id in self.tree.order:
            element = self._elements[element_id]
            spec = element.spec
            if spec.scheduling_status is not None:
                status = SchedulingStatus(spec.scheduling_status)
            else:
                status = computed[element_id]
            if element.parent is None:
                status = SchedulingStatus.NORMAL
            element.status = status
            state = self.starvation.setdefault(element_id, StarvationState())
            if (
                element.parent is None
                or (not element.is_op and not config.enable_pool_starvation)
                or status == SchedulingStatus.NORMAL
            ):
                state.status = StarvationStatus.NON_STARVING
                state.below_fair_share_since = None
                state.starving_since = None
            elif state.below_fair_share_since is None:
                state.below_fair_share_since = now
            else:
                timeout = element.settings.starvation_timeout
                aggressive_timeout = config.fair_share_aggressive_starvation_timeout
                if element.is_op and element.op is not None:
                    pending = element.op.controller.pending_allocation_count
                    factor = pending / config.allocation_count_preemption_timeout_coefficient
                    if factor < 1.0:
                        timeout *= factor
                        aggressive_timeout *= factor
                since = state.below_fair_share_since
                previous = state.status
                if element.settings.aggressive_starvation_enabled and now > since + aggressive_timeout:
                    state.status = StarvationStatus.AGGRESSIVELY_STARVING
                elif now > since + timeout:
                    state.status = StarvationStatus.STARVING
                if previous == StarvationStatus.NON_STARVING and state.status != previous:
                    state.starving_since = now
            element.starvation = state.status
        for stale in set(self.starvation) - set(self._elements):
            del self.starvation[stale]

    def _update_priorities(self) -> None:
        """Operation preemption priority from starving ancestors-or-self (§e.2, scheduling_preemption_priority_scope)."""
        by_priority: dict[PreemptionPriority, list[_Element]] = {
            PreemptionPriority.NORMAL: [],
            PreemptionPriority.AGGRESSIVE: [],
        }
        own_only = self.config.scheduling_preemption_priority_scope == "operation_only"
        aggressive = StarvationStatus.AGGRESSIVELY_STARVING
        starving = StarvationStatus.STARVING
        # per pool: the most severe starvation status among the pool and its ancestors (parents come first)
        severity: dict[str, int] = {}
        none_rank, normal_rank, aggressive_rank = 0, 1, 2
        elements = self._elements
        for element_id in self.tree.order:
            element = elements[element_id]
            if element.is_op:
                element.starvation = self.starvation.get(element_id, StarvationState()).status
                own = element.starvation
                rank = aggressive_rank if own == aggressive else normal_rank if own == starving else none_rank
                if not own_only and element.parent is not None:
                    rank = max(rank, severity[element.parent.id])
                if rank == aggressive_rank:
                    priority = PreemptionPriority.AGGRESSIVE
                elif rank == normal_rank:
                    priority = PreemptionPriority.NORMAL
                else:
                    priority = PreemptionPriority.NONE
                if element.op is not None:
                    element.op.preemption_priority = priority
                if priority != PreemptionPriority.NONE:
                    by_priority[priority].append(element)
            else:
                own = element.starvation
                rank = aggressive_rank if own == aggressive else normal_rank if own == starving else none_rank
                if element.parent is not None:
                    rank = max(rank, severity[element.parent.id])
                severity[element_id] = rank
        self._ops_by_priority = by_priority

    def _priority(self, element: _Element) -> PreemptionPriority:
        return element.op.preemption_priority if element.op is not None else PreemptionPriority.NONE

    def _configure_lists(self, element: _Element) -> None:
        config = self.config
        runtime = element.op
        assert runtime is not None
        key = (
            element.fair_share,
            element.demand_share,
            self._total,
            element.threshold_key,
            config.aggressive_preemption_satisfaction_threshold,
            config.preemption_satisfaction_threshold,
        )
        lists = runtime.lists
        if key != runtime.lists_key:
            # configure is a function of these arguments only: equal ones would leave the lists as they are
            lists.configure(*key)
            runtime.lists_key = key
            runtime.lists_settled = False
        elif runtime.lists_settled:
            return
        before = _lists_state(lists)
        lists.rebalance()
        runtime.lists_settled = _lists_state(lists) == before
