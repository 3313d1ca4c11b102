"""Per-operation preemption classes of allocations (yt-semantics §d).

An operation's running allocations are kept in start order, split into three consecutive lists:
NonPreemptible | AggressivelyPreemptible | Preemptible. A boundary moves so that an allocation stays in the
left (less preemptible) class iff the usage of everything before it is still below the bound, so the allocation
that crosses the boundary belongs to the less preemptible class. With the tree's
``consider_allocation_on_fair_share_bound_preemptible`` (``inclusive``) the test counts the allocation itself, so
the crossing allocation belongs to the more preemptible class.

Each listed allocation carries its place in the start order (``Allocation.start_order``, numbered here), so an
allocation's class is read from the two boundaries alone (`ClassBoundaries`: where the AggressivelyPreemptible and
the Preemptible lists begin): what the preemptive stages read (`PreemptibleLists.status`), and what a holder of
the boundaries without the other allocations (a node shard's replica) can answer the same way.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Sequence
from operator import ge as _ge
from typing import Protocol

from pooltree.resources import RESOURCE_COUNT, Vector
from pooltree.strategy.model import Allocation, PreemptionStatus
from pooltree.strategy.shares import EPSILON
from pooltree.strategy.shares import add_floats as _add
from pooltree.strategy.shares import minus_floats as _minus
from pooltree.strategy.shares import plus_floats as _plus
from pooltree.strategy.shares import sub_floats as _sub

_INF = math.inf
_INFINITE_BOUND = (_INF,) * RESOURCE_COUNT
_WHOLE_AMOUNT = float(2**40)
"""Amounts up to this, whole, and fewer than `_WHOLE_COUNT` of them listed: every sum of them is exact."""
_WHOLE_COUNT = 2**13
_PREEMPTIBLE = PreemptionStatus.PREEMPTIBLE
"""A new allocation's class, read once (an enum member read through its class costs ~0.1 us a start)."""


class PreemptionClasses(Protocol):
    """What the preemptive stages read of an operation's classes: a listed allocation's class
    (`PreemptibleLists`, `ClassBoundaries`)."""

    def status(self, allocation: Allocation) -> PreemptionStatus: ...


class ClassBoundaries:
    """An operation's preemption classes as its two boundaries in the start order: an allocation before
    ``aggressive_from`` is NonPreemptible, before ``preemptible_from`` AggressivelyPreemptible, else Preemptible
    (``math.inf``: no allocation of the more preemptible class)."""

    __slots__ = ("aggressive_from", "preemptible_from")

    def __init__(self, aggressive_from: float, preemptible_from: float) -> None:
        self.aggressive_from = aggressive_from
        self.preemptible_from = preemptible_from

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ClassBoundaries)
            and self.aggressive_from == other.aggressive_from
            and self.preemptible_from == other.preemptible_from
        )

    def __hash__(self) -> int:
        return hash((self.aggressive_from, self.preemptible_from))

    def __repr__(self) -> str:
        return f"ClassBoundaries({self.aggressive_from!r}, {self.preemptible_from!r})"

    def status(self, allocation: Allocation) -> PreemptionStatus:
        """The class of a listed allocation, from its place in the start order."""
        order = allocation.start_order
        if order >= self.preemptible_from:
            return PreemptionStatus.PREEMPTIBLE
        if order >= self.aggressive_from:
            return PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE
        return PreemptionStatus.NON_PREEMPTIBLE


class PreemptibleLists:
    """The three ordered allocation lists of one operation and their cumulative usage (absolute, as floats)."""

    __slots__ = (
        "_aggressive_bound",
        "_all_blocked",
        "_checked",
        "_integral",
        "_inverse_total",
        "_lists",
        "_next_order",
        "_normal",
        "_open",
        "_open_only",
        "_usage",
        "aggressive_threshold",
        "blocked",
        "dirty",
        "fair_share",
        "inclusive",
        "non_preemptible_threshold",
        "preemptible",
        "threshold",
        "total",
    )

    def __init__(self) -> None:
        self._lists: tuple[deque[Allocation], deque[Allocation], deque[Allocation]] = (
            deque(),
            deque(),
            deque(),
        )
        self._usage: list[list[float]] = [[0.0] * RESOURCE_COUNT for _ in range(3)]
        self._next_order = 0
        """The start order the next appended allocation takes (above every listed one's)."""
        self.fair_share: tuple[float, ...] = (0.0,) * RESOURCE_COUNT
        self.blocked: tuple[bool, ...] = (True,) * RESOURCE_COUNT
        self.total: tuple[float, ...] = (1.0,) * RESOURCE_COUNT
        self._inverse_total: tuple[float, ...] = (1.0,) * RESOURCE_COUNT
        self._all_blocked = True
        self._open: tuple[int, ...] = ()
        self._open_only = False
        """``below`` reads only the open resources' shares (no non-preemptible usage threshold, some resource not
        blocked): `_balance_open` tests them inline."""
        self.non_preemptible_threshold: tuple[float, ...] | None = None
        self.aggressive_threshold = 0.2
        self.threshold = 1.0
        self.preemptible = True
        self.inclusive = False
        """An allocation stays in the less preemptible class only if the prefix including it is below the bound."""
        self.dirty = False
        self._integral = True
        """Every amount ever listed was a whole number in [0, 2**40] and fewer than 2**13 were listed at once, so
        every usage, prefix and sum the balance computes is exact (`rebalance` skips its second pass by it);
        cleared for good otherwise (`_note`)."""
        self._checked: tuple[float, ...] = ()
        """The last amounts `_note` found whole (an operation's allocations mostly share theirs)."""
        self._aggressive_bound: tuple[float, ...] = (0.0,) * RESOURCE_COUNT
        self._normal: tuple[float, ...] = (0.0,) * RESOURCE_COUNT

    def configure(
        self,
        fair_share: Sequence[float],
        demand_share: Sequence[float],
        total: Sequence[float],
        non_preemptible_threshold: Vector | None,
        aggressive_threshold: float,
        threshold: float,
    ) -> None:
        """Publish a new fair share and thresholds; the caller rebalances afterwards.

        Every operation's fair share moves at each update, so this runs for most operations each period: written
        with ``map`` and list displays rather than generators, the total's inverse kept while the total is equal
        and the blocked mask's open resources looked up (`_open_of`); the same fields as the plain rule
        (`tests/strategy/test_preemptible_configure.py`)."""
        fair = tuple(map(float, fair_share))
        demand = tuple(map(float, demand_share))
        if len(demand) != len(fair):
            raise ValueError("configure: the fair share and the demand share differ in length")
        self.fair_share = fair
        blocked = self.blocked = tuple(map(_ge, fair, demand))
        totals = tuple(map(float, total))
        if totals != self.total:  # the inverse is the total's alone (a NaN is never equal: made again)
            self._inverse_total = tuple([1.0 / t if t > 0 else 0.0 for t in totals])
        self.total = totals
        self.non_preemptible_threshold = (
            None if non_preemptible_threshold is None else tuple(map(float, non_preemptible_threshold))
        )
        self.aggressive_threshold = aggressive_threshold
        self.threshold = threshold
        # preemptible unless the fair share is the demand (within EPSILON) and the demand is not zero
        preemptible = False
        for f, d in zip(fair, demand, strict=True):
            if not abs(f - d) <= EPSILON:  # (a NaN is not within it)
                preemptible = True
                break
        if not preemptible:
            preemptible = all([d <= EPSILON for d in demand])
        self.preemptible = preemptible
        opened = _OPEN_OF.get(blocked)
        if opened is None:
            opened = _OPEN_OF[blocked] = _open_of(blocked)
        self._open, self._all_blocked = opened
        self._open_only = self.non_preemptible_threshold is None and not self._all_blocked
        # the two bounds are fixed until the next configure: compute them once
        self._aggressive_bound = tuple([f * aggressive_threshold for f in fair])
        self._normal = tuple([f * threshold for f in fair]) if preemptible else _INFINITE_BOUND

    def __len__(self) -> int:
        return sum(len(lst) for lst in self._lists)

    def __iter__(self) -> Iterator[Allocation]:
        for lst in self._lists:
            yield from lst

    def counts(self) -> dict[str, int]:
        return {
            "non_preemptible": len(self._lists[0]),
            "aggressively_preemptible": len(self._lists[1]),
            "preemptible": len(self._lists[2]),
        }

    def usage(self, index: int) -> list[float]:
        return list(self._usage[index])

    def state(self) -> tuple[float, ...]:
        """The three sizes and usages in one flat tuple: equal states are equal tuples (the lists are consecutive
        segments of one start order, so equal sizes are the same split; with equal sums, the same state)."""
        lists, usage = self._lists, self._usage
        return (len(lists[0]), len(lists[1]), len(lists[2]), *usage[0], *usage[1], *usage[2])

    def status(self, allocation: Allocation) -> PreemptionStatus:
        """A listed allocation's class, read from the boundaries alone (as `ClassBoundaries.status`): its start
        order against the heads of the AggressivelyPreemptible and Preemptible lists."""
        order = allocation.start_order
        lists = self._lists
        if lists[2] and order >= lists[2][0].start_order:
            return PreemptionStatus.PREEMPTIBLE
        if lists[1] and order >= lists[1][0].start_order:
            return PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE
        return PreemptionStatus.NON_PREEMPTIBLE

    def boundaries(self) -> ClassBoundaries:
        """The two boundaries as start orders: the first AggressivelyPreemptible allocation's (else the first
        Preemptible one's) and the first Preemptible one's; ``math.inf`` where there is none."""
        _, aggressive, preemptible = self._lists
        preemptible_from = preemptible[0].start_order if preemptible else _INF
        aggressive_from = aggressive[0].start_order if aggressive else preemptible_from
        return ClassBoundaries(aggressive_from, preemptible_from)

    def add(self, allocation: Allocation) -> None:
        """Append a new allocation as Preemptible and rebalance.

        Prefix usage only grows along the start order, so once some allocation is Preemptible every later one is
        too: with a non-empty Preemptible list the new tail needs no rebalancing at all, and otherwise only the
        AggressivelyPreemptible | Preemptible boundary can move (onto the new allocation).
        """
        if self._integral:  # (`_note` does nothing once it is cleared: a call less a start)
            self._note(allocation.amounts)
        if allocation.revived:
            self._insert_in_start_order(allocation)
            return
        allocation.preemption_status = _PREEMPTIBLE
        allocation.start_order = self._next_order
        self._next_order += 1
        had_preemptible = bool(self._lists[2])
        self._lists[2].append(allocation)
        _add(self._usage[2], allocation.amounts)
        if had_preemptible:
            return
        if self.inclusive:
            self.rebalance()
            return
        cumulative = _plus(self._usage[0], self._usage[1])
        if self._lists[1] or not self._below(cumulative, self._aggressive_bound):
            self._balance(1, self._normal, cumulative)
        else:
            self.rebalance()

    def _insert_in_start_order(self, allocation: Allocation) -> None:
        """A re-attached allocation (its job ran before a scheduler restart and keeps its start time, as YTsaurus's
        revived allocations do): placed after every allocation that started no later, classes recomputed, the
        start order numbered again."""
        ordered = list(self)
        position = len(ordered)
        while position > 0 and ordered[position - 1].start_time > allocation.start_time:
            position -= 1
        ordered.insert(position, allocation)
        for index, listed in enumerate(self._lists):
            listed.clear()
            self._usage[index] = [0.0] * RESOURCE_COUNT
        self._next_order = len(ordered)
        for order, item in enumerate(ordered):
            item.start_order = order
            item.preemption_status = PreemptionStatus.PREEMPTIBLE
            self._lists[2].append(item)
            _add(self._usage[2], item.amounts)
        self.rebalance()

    def remove(self, allocation: Allocation) -> bool:
        """Drop a finished or preempted allocation and rebalance; False if it was not listed.

        Incremental: removing lowers the prefix usage of later allocations only, so boundaries can only move
        towards the Preemptible end. A Preemptible allocation has nothing after it in a less preemptible class
        and the prefix before the Preemptible head is unchanged, so its removal needs no rebalancing at all.
        Victims are usually the latest started, so the search starts from the tail.
        """
        for index in _SEARCH_FROM[allocation.preemption_status]:
            listed = self._lists[index]
            if listed and listed[-1] is allocation:
                listed.pop()
            else:
                try:
                    listed.remove(allocation)
                except ValueError:
                    continue
            _sub(self._usage[index], allocation.amounts)
            if (
                index != 2 or self.inclusive
            ):  # inclusive: the next Preemptible head may now fit below the bound
                self.rebalance()
            return True
        return False

    def replace(self, old: Allocation, new: Allocation) -> None:
        """Put ``new`` in ``old``'s start-order position and class (a job restarted in its allocation) and
        rebalance; ``old`` leaves the lists."""
        index = _STATUSES.index(old.preemption_status)
        listed = self._lists[index]
        listed[listed.index(old)] = new
        new.preemption_status = old.preemption_status
        new.start_order = old.start_order
        self._note(new.amounts)
        _sub(self._usage[index], old.amounts)
        _add(self._usage[index], new.amounts)
        self.rebalance()

    def update_usage(self, allocation: Allocation, resources: Vector) -> None:
        """Replace an allocation's accounted usage in place (keeps its start-order position) and rebalance."""
        index = _STATUSES.index(allocation.preemption_status)
        _sub(self._usage[index], allocation.amounts)
        allocation.resources = resources
        _add(self._usage[index], allocation.amounts)
        self._note(allocation.amounts)
        self.rebalance()

    def _note(self, amounts: tuple[float, ...]) -> None:
        """Keep ``_integral``: amounts entering the lists' usages, checked (before the balance that reads them)."""
        if not self._integral:
            return
        if amounts != self._checked:
            for value in amounts:
                if not (0.0 <= value <= _WHOLE_AMOUNT and value.is_integer()):
                    self._integral = False
                    return
            self._checked = amounts
        lists = self._lists
        if len(lists[0]) + len(lists[1]) + len(lists[2]) >= _WHOLE_COUNT:
            self._integral = False

    def _below(self, prefix: list[float], bound: tuple[float, ...]) -> bool:
        """below(P, B) of §d: under the non-preemptible usage threshold, or B strictly dominates share(P)."""
        threshold = self.non_preemptible_threshold
        if threshold is not None and all(t > p for t, p in zip(threshold, prefix, strict=True)):
            return True
        if bound[0] == _INF:
            return True
        inverse = self._inverse_total
        if self._all_blocked:
            return any(b > p * i for b, p, i in zip(bound, prefix, inverse, strict=True))
        for r in self._open:  # noqa: SIM110 (a plain loop: no generator on the hot path)
            if not bound[r] > prefix[r] * inverse[r]:
                return False
        return True

    def _balance(self, left: int, bound: tuple[float, ...], cumulative: list[float]) -> bool:
        """Move the boundary between lists ``left`` and ``left + 1`` to where ``bound`` puts it; whether it moved."""
        if self._open_only and not self.inclusive and bound[0] != _INF:
            return self._balance_open(left, bound, cumulative)
        return self._balance_plain(left, bound, cumulative)

    def _balance_open(self, left: int, bound: tuple[float, ...], cumulative: list[float]) -> bool:
        """`_balance_plain` where `_below` reads only the open resources (``_open_only``, not ``inclusive``, a
        finite bound): its tests written inline on the same floats (``bound[r] > (prefix[r] - amount[r]) *
        inverse[r]``), the prefix without the left tail made only when the tail moves. The same moves, statuses
        and usages (`tests/strategy/test_preemptible_open.py`)."""
        moved = False
        left_list, right_list = self._lists[left], self._lists[left + 1]
        left_usage, right_usage = self._usage[left], self._usage[left + 1]
        inverse = self._inverse_total
        opened = self._open
        while left_list:
            last = left_list[-1]
            amounts = last.amounts
            for r in opened:
                if not bound[r] > (cumulative[r] - amounts[r]) * inverse[r]:
                    break
            else:  # below the bound without it: the tail stays
                break
            left_list.pop()
            right_list.appendleft(last)
            last.preemption_status = _STATUSES[left + 1]
            _sub(left_usage, amounts)
            _add(right_usage, amounts)
            _sub(cumulative, amounts)
            moved = True
        while right_list:
            for r in opened:
                if not bound[r] > cumulative[r] * inverse[r]:
                    return moved
            head = right_list.popleft()
            amounts = head.amounts
            left_list.append(head)
            head.preemption_status = _STATUSES[left]
            _sub(right_usage, amounts)
            _add(left_usage, amounts)
            _add(cumulative, amounts)
            moved = True
        return moved

    def _balance_plain(self, left: int, bound: tuple[float, ...], cumulative: list[float]) -> bool:
        """`_balance` for every case: each test through `_below`."""
        moved = False
        left_list, right_list = self._lists[left], self._lists[left + 1]
        left_usage, right_usage = self._usage[left], self._usage[left + 1]
        right_status = _STATUSES[left + 1]
        left_status = _STATUSES[left]
        inclusive = self.inclusive
        while left_list:
            last = left_list[-1]
            without = _minus(cumulative, last.amounts)
            if self._below(cumulative if inclusive else without, bound):
                break
            left_list.pop()
            right_list.appendleft(last)
            last.preemption_status = right_status
            _sub(left_usage, last.amounts)
            _add(right_usage, last.amounts)
            cumulative[:] = without
            moved = True
        while right_list and self._below(
            _plus(cumulative, right_list[0].amounts) if inclusive else cumulative, bound
        ):
            head = right_list.popleft()
            left_list.append(head)
            head.preemption_status = left_status
            _sub(right_usage, head.amounts)
            _add(left_usage, head.amounts)
            _add(cumulative, head.amounts)
            moved = True
        return moved

    def rebalance(self) -> bool:
        """Two passes of both boundaries so that large threshold changes propagate; whether any allocation moved
        (none: the lists and their usages are as they were). A first pass that moves nothing leaves the lists,
        usages and bounds it read, so the second would move nothing: it is skipped.

        With exact sums (``_integral``) and the crossing allocation in the less preemptible class (not
        ``inclusive``), the second pass repeats tests the first one ended on, unless the first boundary's balance
        emptied the AggressivelyPreemptible list and the second one's filled it again: each balance ends with its
        left tail's test passed (the last allocation it moved left was admitted by the prefix before it, which the
        exact sum gives back) and its right head's failed or its right list empty, and the second balance does not
        touch what the first one tests. So the second pass is skipped then too
        (`tests/strategy/test_preemptible_second_pass.py`)."""
        aggressive_bound = self._aggressive_bound
        normal_bound = self._normal
        lists = self._lists
        moved = self._balance(0, aggressive_bound, list(self._usage[0]))
        emptied = not lists[1]
        if not self._balance(1, normal_bound, _plus(self._usage[0], self._usage[1])) and not moved:
            return False
        if self._integral and not self.inclusive and not (emptied and lists[1]):
            return True
        self._balance(0, aggressive_bound, list(self._usage[0]))
        self._balance(1, normal_bound, _plus(self._usage[0], self._usage[1]))
        return True


_STATUSES = (
    PreemptionStatus.NON_PREEMPTIBLE,
    PreemptionStatus.AGGRESSIVELY_PREEMPTIBLE,
    PreemptionStatus.PREEMPTIBLE,
)
_SEARCH_FROM = {
    status: (first, *(i for i in range(3) if i != first)) for first, status in enumerate(_STATUSES)
}
"""The lists `remove` looks in, its status's own first, then the others in order."""


def _open_of(blocked: tuple[bool, ...]) -> tuple[tuple[int, ...], bool]:
    """A blocked mask's open resources (those not blocked) and whether every resource is blocked."""
    return tuple(r for r, is_blocked in enumerate(blocked) if not is_blocked), all(blocked)


_OPEN_OF: dict[tuple[bool, ...], tuple[tuple[int, ...], bool]] = {}
"""`_open_of` by mask (at most 2**RESOURCE_COUNT of them), filled as masks are met."""
