"""A replica without other shards' allocations: their starts, ends, preemptions and usage changes as deltas, and
its operations' preemption classes as the leader's boundaries (issue 25, step 2 of `ARCHITECTURE.md`).

A shard's replica holds its own nodes' allocations only (`TreeReplica.owns`). What its stages read of another
node's allocation is its share of the operation's and its pools' usage, the least-recently-served serial it moved
and the operation's preemption classes; so an increment of such an allocation carries its operation and the
amounts it added or released, and the replica applies it as the truth's bookkeeping would, without the allocation
(`count_start`, `count_finish`, `count_preempt`, `count_usage`): the same `StrategyState.account` calls with the
same float lists in the same order (the operation's and its pools' usage then equal the truth's to the bit), the
same serial and re-keying of the heaps. An operation leaving the tree (`unregister_in_order`) releases its running
allocations in the truth's order, the ones the replica does not hold as placeholders of their amounts.

The classes: the replica's operations keep no preemptible lists (`NoLists`: a publish configures nothing, a start
or an end lists nothing). Their two boundaries come from the leader (`ClassesMoved`, after each batch: those of
every operation whose boundaries moved since the last; the copy's own lists' at a copy), and the replica's
allocations carry the truth's start order (`Allocation.start_order`: from the copy or the start's increment; for
a start of its own pass, from the leader's answer to a class query or the `StartOrder` increment after the pass).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.strategy.model import Allocation, PreemptionStatus
from pooltree.strategy.preemptible import ClassBoundaries
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.shares import add_floats, sub_floats


def shard_of(address: str, count: int) -> int:
    """The shard that owns node ``address`` (stable across processes and restarts)."""
    digest = hashlib.blake2b(address.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def owner(shard: int, count: int) -> Callable[[str], bool]:
    """Whether a node is ``shard``'s of ``count`` (its replicas hold the node's allocations)."""
    owned: dict[str, bool] = {}

    def owns(address: str) -> bool:
        mine = owned.get(address)
        if mine is None:
            mine = owned[address] = shard_of(address, count) == shard
        return mine

    return owns


NO_BOUNDARIES = ClassBoundaries(float("inf"), float("inf"))
"""The boundaries of an operation with no listed allocation (every allocation NonPreemptible)."""


# ------------------------------------------------------------------ increments


@dataclass(frozen=True)
class StartCounted:
    """Another shard's node started an allocation of ``operation_id`` using ``amounts`` (what a replica that does
    not hold the node reads of an `AllocationStarted`; what the leader sends of a start a shard's pass booked on
    its own node, for the other shards)."""

    operation_id: str
    amounts: tuple[float, ...]
    serial: int = 0
    """The truth's start serial of it (``TreeState.start_serial``), which the replica stamps as the truth did so
    that its least-recently-served tie order is the truth's; 0: the replica's own next serial."""


@dataclass(frozen=True)
class PreemptCounted:
    """Another shard's pass preempted an allocation of ``operation_id`` on its own node, releasing ``amounts``
    (what the other shards read of it: they do not hold the allocation)."""

    operation_id: str
    amounts: tuple[float, ...]


@dataclass(frozen=True)
class ClassesMoved:
    """The truth's boundaries of the operations whose boundaries moved since the last batch:
    ``(operation_id, aggressive_from, preemptible_from)``."""

    boundaries: tuple[tuple[str, float, float], ...]


@dataclass(frozen=True)
class StartOrder:
    """The truth numbered the start of allocation ``allocation_id`` (booked by a shard's pass) ``order``."""

    allocation_id: str
    order: int
    serial: int = 0
    """The truth's start serial of it: the replica stamps its own start again with it (`restamp`), in the truth's
    order among the other shards' starts; 0: left as the replica's pass stamped it."""


@dataclass(frozen=True)
class ClassQuery:
    """A class read of operations the shard's pass changed: the truth's boundaries of ``operation_ids`` now (after
    the bookings sent before it), and the truth's start orders of ``allocation_ids`` (the pass's starts not yet
    numbered)."""

    tree: str
    operation_ids: tuple[str, ...]
    allocation_ids: tuple[str, ...]


@dataclass(frozen=True)
class ClassAnswer:
    """Per operation asked, ``(aggressive_from, preemptible_from)``; per allocation asked, its start order (None:
    not in the truth)."""

    boundaries: tuple[tuple[float, float], ...]
    orders: tuple[int | None, ...]


def answer_classes(truth: TreeScheduler, query: ClassQuery) -> ClassAnswer:
    """The leader's answer to ``query`` from the truth as it is now."""
    operations = truth.operations
    boundaries = []
    for operation_id in query.operation_ids:
        runtime = operations.get(operation_id)
        moved = runtime.lists.boundaries() if runtime is not None else NO_BOUNDARIES
        boundaries.append((moved.aggressive_from, moved.preemptible_from))
    allocations = truth.allocations
    orders = tuple(
        allocation.start_order if (allocation := allocations.get(allocation_id)) is not None else None
        for allocation_id in query.allocation_ids
    )
    return ClassAnswer(tuple(boundaries), orders)


UNNUMBERED = float("inf")
"""The start order of a start of the replica's own pass until the truth's number of it is known: later than every
listed allocation's, as the truth's number is (`PreemptibleLists.add` numbers a start after all of them)."""


# ------------------------------------------------------------------ no lists


class NoLists:
    """A replica's operation's preemptible lists: none (its classes are the leader's boundaries)."""

    __slots__ = ("inclusive",)

    def __init__(self, inclusive: bool = False) -> None:
        self.inclusive = inclusive

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[Allocation]:
        return iter(())

    def counts(self) -> dict[str, int]:
        return {"non_preemptible": 0, "aggressively_preemptible": 0, "preemptible": 0}

    def usage(self, index: int) -> list[float]:
        return []

    def state(self) -> tuple[float, ...]:
        return (0, 0, 0)

    def configure(self, *arguments: Any) -> None:
        pass

    def rebalance(self) -> bool:
        return False

    def add(self, allocation: Allocation) -> None:
        pass

    def remove(self, allocation: Allocation) -> bool:
        return False

    def replace(self, old: Allocation, new: Allocation) -> None:
        pass

    def update_usage(self, allocation: Allocation, resources: Any) -> None:
        allocation.resources = resources

    def status(self, allocation: Allocation) -> PreemptionStatus:
        raise RuntimeError("a replica's classes are read through its boundaries (`TreeReplica.classes`)")

    def boundaries(self) -> ClassBoundaries:
        raise RuntimeError("a replica's boundaries are the leader's (`TreeReplica.boundaries`)")


def drop_lists(strategy: TreeScheduler, runtime: Any) -> ClassBoundaries:
    """Replace the operation's lists by `NoLists`; the boundaries they had."""
    lists = runtime.lists
    if isinstance(lists, NoLists):
        return NO_BOUNDARIES
    boundaries = lists.boundaries()
    runtime.lists = NoLists(lists.inclusive)
    return boundaries


def drop_others(strategy: TreeScheduler, owns: Any) -> None:
    """Forget the allocations of the nodes ``owns`` says are another shard's."""
    allocations = strategy.allocations
    for address, node in strategy.nodes.items():
        if node.allocations and not owns(address):
            for allocation_id in node.allocations:
                allocations.pop(allocation_id, None)
            node.allocations.clear()
    for allocation_id in [a.id for a in allocations.values() if not owns(a.node_address)]:
        del allocations[allocation_id]


# ------------------------------------------------------------------ deltas


def at_serial(strategy: TreeScheduler, serial: int) -> None:
    """The next start the replica stamps takes the truth's ``serial`` (0: its own next one)."""
    if serial > 0:
        strategy.state.start_serial = serial - 1


def restamp(strategy: TreeScheduler, operation_id: str, serial: int) -> None:
    """The truth stamped a start of the replica's own pass with ``serial``: the operation and its pools take it
    as the truth's did (applied in the truth's order, so the last start under a pool stamps it last), and the
    heaps are keyed again. Passes of several shards in flight book their starts in the truth interleaved, while
    each replica stamped its own first: without this, between equally satisfied operations a replica's heaps
    order otherwise than the truth's, and the truth's guesses of a pass's starts (grants) miss."""
    if serial <= 0:
        return
    state = strategy.state
    element = state.elements.get(operation_id)
    if element is None or element.op is None:
        return
    state.start_serial = serial - 1
    state.stamp_start(element)
    strategy.heaps.refresh_leaf(element)


def count_start(
    strategy: TreeScheduler, operation_id: str, amounts: Sequence[float], serial: int = 0
) -> None:
    """`RegularStage.started` of another node's allocation, as far as this replica reads it: the serial (the
    truth's, when given), the operation's and its pools' usage, the heaps."""
    state = strategy.state
    element = state.elements[operation_id]
    runtime = element.op
    assert runtime is not None
    at_serial(strategy, serial)
    state.stamp_start(element)
    state.account(runtime, element, amounts, add_floats)
    strategy.heaps.refresh_leaf(element)


def count_finish(
    strategy: TreeScheduler, operation_id: str, released: Sequence[float] | None, restarted: bool
) -> None:
    """`TreeScheduler.finish_allocation` of another node's allocation (``released``: its amounts; None when it
    was preempted before and released then)."""
    runtime = strategy.operations.get(operation_id)
    if runtime is None:
        return
    element = strategy.state.elements.get(operation_id)
    if released is not None:
        strategy.state.account(runtime, element, released, sub_floats)
    if not restarted and element is not None and element.op is runtime:
        strategy.heaps.refresh_leaf(element)


def count_preempt(strategy: TreeScheduler, operation_id: str, amounts: Sequence[float]) -> None:
    """`PreemptiveStages.preempt` of another node's allocation: usage released, counted, re-keyed."""
    state = strategy.state
    runtime = state.operations.get(operation_id)
    element = state.elements.get(operation_id)
    if runtime is not None:
        state.account(runtime, element, amounts, sub_floats)
        runtime.preempted_allocation_count += 1
        if element is not None and element.op is runtime:
            strategy.heaps.refresh_leaf(element)


def count_usage(strategy: TreeScheduler, operation_id: str, delta: Sequence[float]) -> None:
    """`TreeScheduler.report_usage` of another node's allocation: its accounted usage moved by ``delta``."""
    state = strategy.state
    runtime = state.operations.get(operation_id)
    if runtime is None:
        return
    element = state.elements.get(operation_id)
    state.account(runtime, element, delta, add_floats)
    if element is not None and element.op is runtime:
        strategy.heaps.refresh_leaf(element)


def unregister_in_order(
    strategy: TreeScheduler,
    operation_id: str,
    running: Sequence[tuple[str, Sequence[float] | None]],
) -> None:
    """`TreeScheduler.unregister_operation` with the operation's running allocations released in the truth's
    order (``running``: each one's id and amounts, None when preempted); the ones this replica does not hold
    go as placeholders of their amounts (on no node)."""
    allocations = strategy.allocations
    held = {a.id: a for a in allocations.values() if a.operation_id == operation_id}
    for allocation_id in held:
        del allocations[allocation_id]
    for allocation_id, amounts in running:
        allocation = held.pop(allocation_id, None)
        if allocation is None:
            allocation = _placeholder(allocation_id, operation_id, amounts)
        allocations[allocation_id] = allocation
    allocations.update(held)  # (none: the truth lists every running one)
    strategy.unregister_operation(operation_id)


_PREEMPTED: Any = object()


def _placeholder(allocation_id: str, operation_id: str, amounts: Sequence[float] | None) -> Allocation:
    allocation = Allocation.__new__(Allocation)
    allocation.id = allocation_id
    allocation.operation_id = operation_id
    vector = np.array(amounts if amounts is not None else (), dtype=float)
    allocation._resources = vector
    allocation.amounts = tuple(amounts) if amounts is not None else ()
    allocation.node_address = ""
    allocation.preemption = _PREEMPTED if amounts is None else None
    return allocation
