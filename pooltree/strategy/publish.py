"""A fair-share update reaching the strategy: usage and demand shares, statuses, starvation, preemption priorities.

`SnapshotPublisher.publish` takes a new `SchedulingTree`: it builds (or, for an unchanged structure, reuses) the
published elements, re-sums pool usage bottom-up, updates starvation (§c), the operations' preemption priorities
(§e.2), their preemptible lists (§d) and the best-leaf heaps (`stages.py`).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from pooltree.fairshare.status import is_below_fair_share
from pooltree.resources import RESOURCE_COUNT
from pooltree.strategy.best_leaf import BestLeaf, remake_pool_heap
from pooltree.strategy.changes import ChangedPublisher
from pooltree.strategy.elements import (
    _Element,
    _floats,
)
from pooltree.strategy.heap_changes import memoised_satisfaction
from pooltree.strategy.limits_tolerance import tolerance_floats
from pooltree.strategy.model import (
    DeactivationReason,
    SchedulingStatus,
    StarvationStatus,
)
from pooltree.strategy.order import number, place
from pooltree.strategy.priorities import configure_lists, update_priorities
from pooltree.strategy.shares import (
    INFINITE_SATISFACTION_RATIO,
    blocked_mask,
)
from pooltree.strategy.shares import add_floats as _add_list
from pooltree.strategy.snapshot import SchedulingTree
from pooltree.strategy.state import StrategyState


class SnapshotPublisher:
    """Publishing a fair-share update; see the module docstring."""

    def __init__(self, state: StrategyState, heaps: BestLeaf) -> None:
        self.state = state
        self.heaps = heaps
        self.changes = ChangedPublisher(state, heaps)
        """The incremental publish of a tree of the same structure (`changes.py`)."""
        self.skeleton: Any = None
        """The published tree's ``skeleton`` (its structure): elements are reused while it is the same."""
        self.bounds: dict[_Element, int] = {}
        """Each pool's bound of its operations' order keys (`order.number`), kept while the pools are the same."""
        self.respecced: Any = None
        """The specs that differ from the previously published tree's (`SchedulingTree.respecced`), else None."""

    # ------------------------------------------------------------------ fair-share update

    def publish(self, tree: SchedulingTree, now: float | None) -> None:
        """Take a new snapshot: statuses, starvation, preemption priorities, preemptible lists and heaps. The
        incremental publish leaves the changed operations' lists to `ChangedPublisher.configure_lists`; what the
        previous publish left is configured first."""
        self.state.publishes += 1  # the elements and their specs change from here on
        self.changes.configure_lists()
        respecced = tree.respecced
        # every published element's spec is the last published tree's: derived from it, only these can differ
        self.respecced = respecced[1] if respecced is not None and respecced[0]() is self.state.tree else None
        self.state.tree = tree
        self.state.config = tree.config
        self.state.spare = tuple(self.state.config.min_spare_allocation_resources_on_node.tolist())
        total = tuple(float(x) for x in tree.total_resources)
        previous = self.state.elements
        fifo_order = self.state.config.fifo_pool_scheduling_order == "fifo"
        if previous and now is not None and tree.skeleton is self.skeleton:
            # changes.py; else every element in three passes
            if not self.changes.publish_changes(tree, now, total, self.respecced):
                self._publish_same_structure(tree, now, total)
                self.changes.statuses_timed = True
            return
        delta = tree.delta
        if previous and now is not None and delta is not None and delta.base is self.skeleton:
            departed = [element for i in delta.removed if (element := previous.get(i)) is not None]
            parents = [element.parent for element in departed]
            renumbered = self._apply_operation_changes(tree, delta, fifo_order)
            self.skeleton = tree.skeleton
            changed = (delta.added, parents, departed, renumbered)
            if not self.changes.publish_changes(tree, now, total, self.respecced, changed):  # changes.py
                self._publish_same_structure(tree, now, total)
                self.changes.statuses_timed = True
            return
        self.changes.forget_changes()  # the paths below recompute every element
        self.changes.statuses_timed = (
            now is not None
        )  # without a time, statuses and starvation are not evaluated
        if previous and tree.skeleton is self.skeleton:
            elements = self._reuse_elements(tree)
        else:
            elements = self._new_elements(tree, previous, fifo_order)
        self.skeleton = tree.skeleton
        self.state.elements = elements
        self.state.total = total
        # usage bottom-up and demand shares
        for element_id in reversed(tree.order):
            element = elements[element_id]
            if element.is_op:
                if element.spec.demand_share is not None:
                    element.demand_share = tuple(_floats(element.spec.demand_share))
                else:
                    element.demand_share = _demand_share_of_needed(element.usage, element.op, total)
            else:
                own = element.spec.demand_share
                _resum_pool(element, None if own is None else tuple(_floats(own)))
            shares = (element.fair_share, element.demand_share)
            if shares != element.blocked_for:  # a function of these two only
                element.blocked = blocked_mask(*shares)
                element.blocked_for = shares
        if now is not None:  # statuses and starvation (§c) with the priorities (§e.2), one top-down pass
            update_priorities(self.state, now, self._computed_statuses())
            self.state.last_update_time = now
        else:
            update_priorities(self.state)
        for element in elements.values():
            if element.is_op and element.op is not None:
                configure_lists(self.state, element)
        self.heaps.rebuild_heaps()

    def _publish_same_structure(self, tree: SchedulingTree, now: float, total: tuple[float, ...]) -> None:
        """`publish` for a tree of the previous structure, in three passes, leaving every element, operation runtime
        and starvation state exactly as the general path (`_reuse_elements` and the passes after it) leaves them.

        What an unchanged spec determines is not recomputed: `build` hands out the very same `ElementSpec` object
        for an element whose shares did not change, so its fair share, FIFO key, demand share and ``blocked``
        mask stay; an operation's satisfaction is recomputed only when its usage, fair share, ``blocked`` or the
        total changed. Pool usage is still re-summed from the children (bit-identical sums), and starvation,
        priorities, preemptible lists and heaps still visit every element, each in one pass.
        """
        elements = self.state.elements
        specs = tree.elements
        operations = self.state.operations
        order = tree.order
        self.state.total = total
        unknown: list[_Element] = []
        prepared = tree.prepared
        # 1. bottom-up: specs, usage and demand shares, blocked masks, preemptible lists
        for element_id in reversed(order):
            element = elements[element_id]
            spec = specs[element_id]
            fresh = spec is not element.spec
            ready = None
            if fresh:
                element.spec = spec
                ready = prepared.get(element_id)
                element.fair_share = tuple(_floats(spec.fair_share)) if ready is None else ready[0]
                element.fifo_key = float(spec.fifo_index)
            if spec.scheduling_status is None:
                unknown.append(element)
            element.excluded = -1
            if element.is_op:
                runtime = operations.get(element_id)
                if runtime is not None:
                    element.usage = runtime.usage
                elif element.op is not None:
                    element.usage = [0.0] * RESOURCE_COUNT
                # else: the zero list this element got when it lost (or never had) a runtime; nothing adds to an
                # operation's list without its runtime, and a new list every period is what the collector pays for
                element.op = runtime
                if spec.demand_share is None:
                    element.demand_share = _demand_share_of_needed(element.usage, runtime, total)
                elif fresh:
                    element.demand_share = tuple(_floats(spec.demand_share)) if ready is None else ready[1]
            else:
                own = None
                if spec.demand_share is not None:
                    own = element.demand_share
                    if fresh:
                        own = tuple(_floats(spec.demand_share)) if ready is None else ready[1]
                _resum_pool(element, own)
            shares = (element.fair_share, element.demand_share)
            if shares != element.blocked_for:  # a function of these two only
                if ready is not None and spec.demand_share is not None:
                    element.blocked = ready[2]  # blocked_mask of these very values, computed in bulk
                else:
                    element.blocked = blocked_mask(*shares)
                element.blocked_for = shares
            if element.is_op and element.op is not None:
                configure_lists(self.state, element)
        # 2. top-down: statuses, starvation (§c) and preemption priorities (§e.2)
        computed = self._statuses_of(unknown) if unknown else {}
        update_priorities(self.state, now, computed)
        self.state.last_update_time = now
        # 3. bottom-up: satisfaction, activity and heaps
        self._rebuild_heaps_same_structure(order, total)

    def _statuses_of(self, pending: list[_Element]) -> dict[str, SchedulingStatus]:
        below = is_below_fair_share(
            np.array([element.fair_share for element in pending]),
            np.array([self.state.usage_share(element) for element in pending]),
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

    def _rebuild_heaps_same_structure(self, order: list[str], total: tuple[float, ...]) -> None:
        """`_rebuild_heaps` after `_publish_same_structure` (which skips `_reuse_elements`' resets): the same
        satisfactions, activity, deactivation counts, heaps and ``keyed_start`` values (0 off the heaps)."""
        elements = self.state.elements
        counted = (DeactivationReason.FAIR_SHARE_EXCEEDED, DeactivationReason.NO_AVAILABLE_DEMAND)
        activity = self.heaps.op_activity
        for element_id in reversed(order):
            element = elements[element_id]
            element.version += 1
            if element.is_op:
                element.sat = memoised_satisfaction(element, total)
                reason = activity(element)
                element.inactive_reason = reason
                element.active = reason is None
                if reason in counted and element.op is not None:
                    element.op.deactivation_reasons[reason.value] += 1
            else:
                remake_pool_heap(element, False, total if self.state.tree.pool_satisfaction_used else None)

    def _new_elements(
        self, tree: SchedulingTree, previous: dict[str, _Element], fifo_order: bool
    ) -> dict[str, _Element]:
        elements: dict[str, _Element] = {}
        for index, element_id in enumerate(tree.order):
            spec = tree.elements[element_id]
            before = previous.get(element_id)
            if before is not None and before.is_op == spec.is_operation:
                # the previous publish's object, set to exactly what a new one starts with (fewer long-lived
                # objects per structural change: CPython's full collections were most of its cost)
                element = before
                _renew(element, spec, index, tree.effective[element_id])
            else:
                element = _Element(spec, index, tree.effective[element_id])
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
                element.op = self.state.operations.get(element_id)
                if element.op is not None:
                    element.usage = element.op.usage
            elements[element_id] = element
        self.bounds = number(elements.values())
        return elements

    def _apply_operation_changes(self, tree: SchedulingTree, delta: Any, fifo_order: bool) -> bool:
        """Bring the published elements to a tree derived from the previous one by operation changes only
        (`SchedulingTree.with_operation_changes`): elements of removed operations go, added operations get the
        element `_new_elements` would give them (the previous object of a changed one renewed, ``last_start``
        kept), the changed parents' children lists follow the new tree. What a new element starts with and
        `_publish_same_structure` keeps from the previous publish (the demand share of a spec that has one) is
        set here; everything else the passes recompute.

        Costs what changed: the other elements keep their objects and order keys (`order.place` numbers the
        added operations inside their pools' blocks), the removed ones' heap entries go stale (their
        ``version`` moves; a renewed element's keeps counting) and their starvation states go. Returns whether
        every element was numbered anew (a block without room or off the layout): the heaps must then be made
        anew, since their entries carry the old keys."""
        elements = self.state.elements
        specs = tree.elements
        gone = {element_id: elements.pop(element_id) for element_id in delta.removed}
        states = self.state.starvation
        for element_id, element in gone.items():
            element.version += 1  # its entries in its parent's heap are stale from now on
            if element_id not in specs:
                states.pop(element_id, None)
        operations = self.state.operations
        added: set[_Element] = set()
        for element_id in delta.added:
            spec = specs[element_id]
            settings = tree.effective[element_id]
            before = gone.get(element_id)
            if before is not None and before.is_op:
                element = before
                _renew(element, spec, 0, settings)
            else:
                element = _Element(spec, 0, settings)
            parent = elements[spec.parent]  # type: ignore[index]
            element.parent = parent
            element.depth = parent.depth + 1
            element.use_fifo = parent.spec.fifo and fifo_order
            element.limited = ((element,) if element.limits is not None else ()) + parent.limited
            runtime = operations.get(element_id)
            element.op = runtime
            if runtime is not None:
                element.usage = runtime.usage
            if spec.demand_share is not None:
                element.demand_share = tuple(_floats(spec.demand_share))
            elements[element_id] = element
            added.add(element)
        children = tree.children
        bounds = self.bounds  # set by `_new_elements`, which made the previous elements
        renumber = False
        for parent_id in delta.parents:
            pool = elements[parent_id]
            # `_new_elements` appends children in tree order, which visits them last first
            pool.children[:] = [elements[child] for child in reversed(children[parent_id])]
            bound = bounds.get(pool)
            moved = None if renumber or bound is None else place(pool, added, bound)
            if moved is None:
                renumber = True
            elif moved:  # the block was numbered anew: the kept entries take the new keys
                heap = [
                    (entry[0], entry[1], child.index, entry[3], child)
                    for entry in pool.heap
                    if entry[3] == (child := entry[4]).version and child.active
                ]
                heapq.heapify(heap)
                pool.heap = heap
        if renumber:
            self.bounds = number(elements[element_id] for element_id in tree.order)
        return renumber

    def _reuse_elements(self, tree: SchedulingTree) -> dict[str, _Element]:
        """The previous publish's elements, for a tree of the same structure (``tree.skeleton``).

        Everything an `_Element` derives from the structure and static settings (parent, children, depth,
        limits, limited ancestors, FIFO use, effective settings, tag matches) is kept; everything a new
        element would start with is reset to the same values, and its spec, fair share and FIFO key taken from
        the new tree, so the rest of :meth:`publish` computes exactly what it computes on new elements.
        """
        elements = self.state.elements
        specs = tree.elements
        operations = self.state.operations
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
            for element_id in self.state.tree.order
            if (element := self.state.elements[element_id]).spec.scheduling_status is None
        ]
        return self._statuses_of(pending) if pending else {}


def _demand_share_of_needed(usage: list[float], op: Any, total: tuple[float, ...]) -> tuple[float, ...]:
    """An operation's demand share: its usage plus what its controller still needs, over the total."""
    needed = op.controller.needed_resources if op is not None else np.zeros(RESOURCE_COUNT)
    return tuple((u + float(n)) / t if t > 0 else 0.0 for u, n, t in zip(usage, needed, total, strict=True))


def _resum_pool(element: _Element, own_demand: tuple[float, ...] | None) -> None:
    """A pool's usage, and without a demand share of its own (``own_demand``) its demand share, summed from its
    children: the same float additions in the same order, unrolled (bit-identical to a rebuild)."""
    usage = [0.0] * RESOURCE_COUNT
    if own_demand is None:
        demand = [0.0] * RESOURCE_COUNT
        for child in element.children:
            _add_list(usage, child.usage)
            _add_list(demand, child.demand_share)
        own_demand = tuple(demand)
    else:
        for child in element.children:
            _add_list(usage, child.usage)
    element.demand_share = own_demand
    element.usage = usage


def _renew(element: _Element, spec: Any, index: int, settings: Any) -> None:
    """Set a previous publish's `_Element` to the state ``_Element(spec, index, settings)`` starts with, keeping its
    ``last_start`` (as `_new_elements` copies it), its ``version`` (the validity token of its heap entries, never
    read otherwise) and its pure caches: ``blocked`` of ``blocked_for``, the satisfaction memo, and tag matches
    while the tag filter is the same object. Every other field of `_Element.__init__` is set here to the same
    value (keep the two in step)."""
    if spec.scheduling_tag_filter is not element.spec.scheduling_tag_filter:
        element.tag_cache = {}
    element.spec = spec
    element.index = index
    element.settings = settings
    element.parent = None
    element.children.clear()
    element.depth = 0
    element.usage = [0.0] * RESOURCE_COUNT
    element.fair_share = tuple(_floats(spec.fair_share))
    element.demand_share = (0.0,) * RESOURCE_COUNT
    threshold = settings.non_preemptible_threshold
    element.threshold_key = None if threshold is None else tuple(_floats(threshold))
    limits = None if spec.specified_resource_limits is None else _floats(spec.specified_resource_limits)
    element.limits = None if limits is None or not any(map(math.isfinite, limits)) else tuple(limits)
    element.limits_tolerance = tolerance_floats(spec.resource_limits_overcommit_tolerance)
    element.limited = ()
    element.sat = INFINITE_SATISFACTION_RATIO
    element.fifo_key = float(spec.fifo_index)
    element.use_fifo = False
    # ``version`` keeps counting (entries of this object in a heap must stay stale: see `BestLeaf.peek`)
    element.keyed_start = 0
    element.active = False
    element.excluded = -1
    element.heap = []
    element.status = SchedulingStatus.NORMAL
    element.starvation = StarvationStatus.NON_STARVING
    element.op = None
    element.inactive_reason = None
