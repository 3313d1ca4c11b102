"""`PublishStep`: what the incremental same-structure publish (`changes.py`) keeps about one structure between publishes
(starvation deadlines, pending counts read, preemption priorities, lazy deactivation counts).

How it flows: `ChangedPublisher.step` is its one holder, and only a publish changes it: the incremental publish
continues it (`ChangedPublisher.publish_changes`, `follow` for operation changes) or starts a new one, a publish
that recomputes every element ends it (adding its lazy counts, `flush`). What heartbeats and commands change
between publishes reaches the next publish through the strategy's change log instead (`change_log.py`: the
operations touched, whose pending work moved, whose lists a configuration in parts left unsettled), and an element
view reads the lazy counts without adding them (`ChangedPublisher.deactivation_reasons`). It is not a part of the
period's `KeptState`: it indexes the published elements, which are the strategy's."""

from __future__ import annotations

from typing import Any

from pooltree.strategy.elements import _Element
from pooltree.strategy.model import DeactivationReason, PreemptionPriority, SchedulingStatus

COUNTED_REASONS = (DeactivationReason.FAIR_SHARE_EXCEEDED, DeactivationReason.NO_AVAILABLE_DEMAND)
"""Deactivation reasons every publish counts (``deactivation_reasons``)."""
_NORMAL = SchedulingStatus.NORMAL


class PublishStep:
    """What the incremental publish keeps about one structure (``skeleton``) between publishes."""

    __slots__ = (
        "below",
        "clock",
        "config",
        "counted",
        "deadlines",
        "due",
        "numbered",
        "pending",
        "pools",
        "priorities",
        "serial",
        "skeleton",
    )

    def __init__(self, skeleton: object, ordered: list[_Element]):
        """``ordered``: every element, in tree order."""
        self.skeleton = skeleton
        ops = [element for element in ordered if element.is_op]
        self.pools = [element for element in ordered if not element.is_op]
        self.below = {element for element in ordered if element.status is not _NORMAL}
        """Elements below their fair share: their starvation clocks run."""
        self.clock: float | None = None
        """The time of the last incremental publish: ``None`` until the first one, which re-evaluates every
        element below its fair share (the pending counts their last evaluation read are not known)."""
        self.config: object = None
        """The config the deadlines were computed with."""
        self.due: list[tuple[float, int, _Element]] = []
        """A heap of (deadline, number, element): the element's starvation can change at the first publish later
        than the deadline (`StarvationState.due`); an entry counts while ``deadlines`` holds its number."""
        self.deadlines: dict[_Element, int] = {}
        """Element below its fair share with a deadline ahead → the number of its entry in ``due``."""
        self.numbered = 0
        """Entries pushed to ``due`` so far."""
        self.pending: dict[_Element, int] = {}
        """Operation below its fair share → the pending allocation count its last evaluation read (its timeouts
        shrink with it): a different count re-evaluates it."""
        self.priorities: dict[_Element, PreemptionPriority] = {}
        """Operation → its preemption priority where that is not ``NONE`` (``StrategyState.ops_by_priority`` in a dict)."""
        self.serial = 0
        """Incremental publishes of this step so far (the current one's number while it runs)."""
        self.counted: dict[_Element, tuple[Any, str, int]] = {
            element: (element.op, element.inactive_reason.value, 1)
            for element in ops
            if element.op is not None and element.inactive_reason in COUNTED_REASONS
        }
        """Inactive operations whose reason every publish counts (``deactivation_reasons``), lazily: (runtime,
        reason, number of the first publish not yet added to its counter)."""

    def follow(self, skeleton: object, elements: dict[str, _Element], departed: list[_Element]) -> bool:
        """This step, in place, for the tree that operation changes made of it (``elements`` after
        `_apply_operation_changes`; ``departed``: the previous elements of the removed operations): what it keeps
        of elements that are gone is dropped, their counts added. The pools are the same elements. Returns
        whether a departed element had a preemption priority (the priority lists still hold it)."""
        self.skeleton = skeleton
        serial = self.serial
        counted = self.counted
        listed = False
        for element in departed:
            if elements.get(element.id) is element:  # a changed operation: its element renewed, still there
                continue
            self.below.discard(element)
            self.deadlines.pop(element, None)  # its entries in ``due`` are skipped when popped
            self.pending.pop(element, None)
            if self.priorities.pop(element, None) is not None:
                listed = True
            entry = counted.pop(element, None)
            if entry is not None and entry[2] <= serial:
                entry[0].deactivation_reasons[entry[1]] += serial - entry[2] + 1
        return listed

    def lazy_count(self, element: _Element) -> tuple[str, int] | None:
        """The deactivation count of ``element``'s operation this step holds and has not added yet: (reason, count),
        or None."""
        entry = self.counted.get(element)
        if entry is None or entry[0] is not element.op or entry[2] > self.serial:
            return None
        return entry[1], self.serial - entry[2] + 1

    def flush(self) -> None:
        """Add the counts of the publishes so far to the operations' ``deactivation_reasons``."""
        serial = self.serial
        counted = self.counted
        for element, (runtime, value, start) in counted.items():
            if start <= serial:
                runtime.deactivation_reasons[value] += serial - start + 1
                counted[element] = (runtime, value, serial + 1)
