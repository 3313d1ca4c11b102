"""A node shard's replica of one tree's strategy: the same `TreeScheduler`, brought forward by the leader's
increments.

The leader's `TreeScheduler` of a tree is the truth. A shard holds a replica of it per tree: a copy of the truth
taken when the truth's published state moves (a fair-share update, an operation or node joining or leaving: the
replica's ``source`` no longer matches, `TreeReplica.stale`) with every controller replaced by a `ClaimController`,
and between copies brought forward by *increments* applied in the leader's order through the strategy's own
methods (`apply`):

- `PendingWork`: an operation's controller has new pending work (count, min needed resources);
- `NodeSynced`: a node's limits and tags as its heartbeat reported them;
- `AllocationStarted`: the strategy's start bookkeeping (`RegularStage.started`: the node, the operation and its
  pools charged, the least-recently-served serial, heaps re-keyed);
- `AllocationPreempted`: `PreemptiveStages.preempt` (usage released, the allocation marked preempted);
- `AllocationFinished`: `TreeScheduler.finish_allocation`;
- `UsageChanged`: `TreeScheduler.report_usage` (a node's measured usage above the reserve);
- `ClassesMoved`, `StartOrder`: the truth's class boundaries and start orders (`deltas.py`).

The replica holds its own nodes' allocations only (``owns``): another node's start, preemption, end or usage
report is applied as a delta of its operation (`deltas.py`), and the replica keeps no preemptible lists: its
stages read an operation's classes through `TreeReplica.classes` (the leader's boundaries; for an operation the
current pass changed, a `ClassQuery` to the leader).

The replica runs the stages of its nodes' heartbeats itself (`TreeScheduler.process_heartbeat` on the copy). Its
controllers are proxies: an operation's pending work is what the increments last said, and ``schedule_allocation``
is a *claim* to the leader (`Claim`), answered with the allocation the real controller chose (and the pending
work it leaves) or None (refused: the pass goes on as if the controller had returned nothing). What the pass
decides is reported in order through the replica's event sink (``allocation_started``, ``allocation_preempted``),
which the leader applies to the truth.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pooltree.resources import Vector
from pooltree.shards.deltas import (
    NO_BOUNDARIES,
    UNNUMBERED,
    ClassAnswer,
    ClassesMoved,
    ClassQuery,
    PreemptCounted,
    StartCounted,
    StartOrder,
    at_serial,
    count_finish,
    count_preempt,
    count_start,
    count_usage,
    drop_lists,
    drop_others,
    restamp,
    unregister_in_order,
)
from pooltree.shards.pickling import TAPPED, Pending, load_snapshot
from pooltree.strategy.change_log import STRATEGY_READERS
from pooltree.strategy.elements import ControllerDefaults, OperationRuntime, Speculation
from pooltree.strategy.model import (
    Allocation,
    ExecNode,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
    PreemptionRecord,
    SchedulingStage,
)
from pooltree.strategy.preemptible import ClassBoundaries
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.shares import fits_floats
from pooltree.strategy.snapshot import ElementSpec, SchedulingTree, SpecRows

# ------------------------------------------------------------------ increments


@dataclass(frozen=True)
class PendingWork:
    """An operation's controller has ``pending`` allocations to start, each needing at least ``min_needed``."""

    operation_id: str
    pending: int
    min_needed: Vector


@dataclass(frozen=True)
class NodeSynced:
    """A node's heartbeat reported these limits and tags (a node new to the tree joins it)."""

    address: str
    limits: Vector
    tags: frozenset[str]
    time: float


@dataclass(frozen=True)
class AllocationStarted:
    """The leader started ``allocation`` (a copy, with its node) in ``stage`` at ``time``."""

    allocation: Allocation
    stage: SchedulingStage
    time: float
    serial: int = 0
    """The truth's start serial of it (`deltas.at_serial`; 0: the replica's own next one)."""


@dataclass(frozen=True)
class AllocationPreempted:
    """The leader preempted (or stopped) an allocation; ``record`` says why, when and for whom; ``amounts``: the
    usage it released (what a replica that does not hold the allocation applies, `deltas.count_preempt`)."""

    record: PreemptionRecord
    amounts: tuple[float, ...]


@dataclass(frozen=True)
class AllocationFinished:
    """A node reported an allocation ended (or the leader lost it): of ``operation_id``, releasing ``released``
    (None: it was preempted, and released then); ``restarted``: a gang's job restarted in it (a replica without
    the allocation applies these, `deltas.count_finish`)."""

    finished: FinishedAllocation
    time: float
    operation_id: str
    released: tuple[float, ...] | None
    restarted: bool


@dataclass(frozen=True)
class UsageChanged:
    """An allocation's accounted usage is now ``resources`` (a node's report above the reserve), ``delta`` more
    than before, of ``operation_id`` (a replica without the allocation applies the delta, `deltas.count_usage`)."""

    allocation_id: str
    resources: Vector
    operation_id: str
    delta: tuple[float, ...]


@dataclass(frozen=True)
class Published:
    """The truth published ``tree`` at ``time`` (a fair-share update), with the settings its core gave it."""

    tree: SchedulingTree
    time: float | None
    high_priority: frozenset[str]
    fifo_unschedulable: frozenset[str]
    scheduling_tags_enabled: bool
    serial: int | None = None
    """The leader's number for ``tree`` (shard processes: a later `PublishedChanges` names its base by it)."""


@dataclass(frozen=True)
class OperationChanges:
    """How a published tree's structure differs from its base's (`SchedulingTree.with_operation_changes`, its
    ``delta``): operations ``removed`` and ``added`` (a changed one in both), the tree's element ids in its order,
    and the new children lists of the parents whose operations changed."""

    ids: list[str]
    removed: set[str]
    added: list[str]
    children: dict[str, list[str]]


@dataclass(frozen=True)
class PublishedChanges:
    """The truth published a tree derived from the one it published before (``base``, by the leader's number):
    that tree's specs with ``replaced`` written over them, ``total_resources`` and ``prepared``, of the base's
    structure (`SchedulingTree.with_shares`) or, with ``operations``, of the base's with operations added and
    removed (`SchedulingTree.with_operation_changes`), published at ``time`` with the settings its core gave it.
    The shard process derives it from its replica's published tree, so that the structure and the unchanged specs
    stay its very objects and `TreeScheduler.publish` takes the incremental path (`increments.published_changes`)."""

    base: int
    serial: int
    total_resources: Vector
    replaced: list[ElementSpec]
    prepared: Any
    time: float | None
    high_priority: frozenset[str]
    fifo_unschedulable: frozenset[str]
    scheduling_tags_enabled: bool
    operations: OperationChanges | None = None


class ReplicaBehind(RuntimeError):
    """A `PublishedChanges` names a base the replica does not hold (the pass fails: the leader sends a new copy)."""


@dataclass(frozen=True)
class Registered:
    """An operation's controller attached to the tree (with its pending work)."""

    operation_id: str
    pending: int
    min_needed: Vector


@dataclass(frozen=True)
class Unregistered:
    """An operation left the tree (its allocations no longer count): ``running``, its running allocations in the
    truth's order, each one's id and amounts (None: preempted), released in that order
    (`deltas.unregister_in_order`)."""

    operation_id: str
    running: tuple[tuple[str, tuple[float, ...] | None], ...]


@dataclass(frozen=True)
class Rekeyed:
    """These operations were re-keyed (a rule outside the published specs changed for them)."""

    operation_ids: frozenset[str]


Increment = (
    PendingWork
    | NodeSynced
    | AllocationStarted
    | AllocationPreempted
    | AllocationFinished
    | UsageChanged
    | Published
    | PublishedChanges
    | Registered
    | Unregistered
    | Rekeyed
    | StartCounted
    | PreemptCounted
    | ClassesMoved
    | StartOrder
)


def copy_allocation(allocation: Allocation) -> Allocation:
    """An allocation as a replica holds it: its own object (a replica's bookkeeping writes into it), with its
    own vectors (`Allocation.__slots__` copied one by one: `copy.copy` of a slotted object is several times
    slower)."""
    out = Allocation.__new__(Allocation)
    for name in Allocation.__slots__:
        setattr(out, name, getattr(allocation, name))
    out.resources = allocation.resources.copy()
    out.reserve = allocation.reserve.copy()
    return out


# ------------------------------------------------------------------ claims


@dataclass(frozen=True)
class Claim:
    """A start a replica's pass decided: the operation's next allocation on ``address`` within ``available``,
    checked by the leader against the truth; ``limited_usage`` is the replica's usage of the operation and each
    ancestor with resource limits when it decided (the leader refuses when the truth has more: another shard's
    start the replica has not heard of could make the start overshoot a limit)."""

    tree: str
    operation_id: str
    address: str
    available: Vector
    limited_usage: tuple[tuple[str, tuple[float, ...]], ...]
    time: float


@dataclass(frozen=True)
class ClaimAnswer:
    """The allocation the real controller chose (None: refused) and the pending work it leaves."""

    allocation: Allocation | None
    pending: int
    min_needed: Vector


@dataclass(frozen=True)
class Grant:
    """An allocation granted ahead with a pass's request: what the operation's real controller answered
    ``schedule_allocation(node, offered, time)`` with (after the operation's earlier grants of the pass), and the
    pending work it left. A claim of the pass for the operation takes it instead of asking the leader when the
    claim's node and time are the grant's, what it offers is at most ``offered`` and the allocation fits it: the
    controller (its tasks in order, each offering its first pending job) would then have answered the claim with
    this allocation (`TreeReplica.claim`)."""

    operation_id: str
    allocation: Allocation
    offered: tuple[float, ...]
    time: float
    pending: int
    min_needed: Vector


ClaimSender = Callable[[Claim], ClaimAnswer]
"""Carries a claim to the leader and returns its answer."""


class ClaimController(ControllerDefaults):
    """A replica's controller of one operation: its pending work as the increments said, starts claimed from the
    leader (the `OperationController` protocol the strategy reads; the defaults for the rest)."""

    def __init__(self, replica: TreeReplica, operation_id: str, pending: int, min_needed: Vector) -> None:
        self.replica = replica
        self.operation_id = operation_id
        self.pending_allocation_count = pending
        self.min_needed_resources = np.array(min_needed, dtype=float)
        self.pending_revision = 0
        self.pending_watchers: list[tuple[set[str], str]] = []
        """``(into, key)``: ``key`` added to ``into`` whenever the pending work is set (`strategy/watch.py`)."""
        self.speculation: Speculation | None = None
        self.initial_min_needed_resources: Vector | None = None

    def schedule_allocation(self, node: ExecNode, available: Vector, now: float) -> Allocation | None:
        """A claim to the leader; the allocation it granted (a copy the replica books) or None."""
        return self.replica.claim(self.operation_id, node.address, available, now)

    def on_allocation_finished(
        self, allocation: Allocation, finished: FinishedAllocation, now: float
    ) -> None:
        """An increment's finish: the leader told the real controller already. A granted allocation the pass
        could not book (``scheduling_resource_overcommit``) goes back to the leader."""
        if not self.replica.applying:
            self.replica.unclaim(allocation, finished, now)

    @property
    def needed_resources(self) -> Vector:
        """The pending work's resources (read by a publish of the whole tree only, for an operation without a
        demand share: made when read, not at every change of the pending work)."""
        return self.min_needed_resources * max(self.pending_allocation_count, 0)

    def set_pending(self, pending: int, min_needed: Vector) -> None:
        self.pending_allocation_count = pending
        self.min_needed_resources = np.array(min_needed, dtype=float)
        self.pending_revision += 1
        for into, key in self.pending_watchers:
            into.add(key)


# ------------------------------------------------------------------ the replica


class TreeReplica:
    """One shard's replica of one tree's strategy (see the module docstring)."""

    def __init__(
        self,
        tree: str,
        send_claim: ClaimSender,
        send_unclaim: Callable[[str, Allocation, FinishedAllocation, float], None],
        owns: Callable[[str], bool],
        send_classes: Callable[[ClassQuery], ClassAnswer],
    ) -> None:
        self.tree = tree
        self.send_claim = send_claim
        self.send_unclaim = send_unclaim
        self.owns = owns
        """Whether a node is this shard's (the replica holds its allocations; another's come as deltas)."""
        self.send_classes = send_classes
        """Asks the leader a class read of an operation the current pass changed (`deltas.ClassQuery`)."""
        self.boundaries: dict[str, ClassBoundaries] = {}
        """Per operation, the truth's boundaries as the last batch (or the copy) gave them."""
        self.marked: set[str] = set()
        """Operations the current pass changed since their last class query."""
        self.asked: dict[str, ClassBoundaries] = {}
        """Per operation, the boundaries the leader answered the current pass's last class query of it with."""
        self.unnumbered: list[str] = []
        """The current pass's starts whose truth's number is not known yet (the truth numbers them at their
        bookings; `deltas.UNNUMBERED` meanwhile)."""
        self.class_queries = 0
        """Class reads asked of the leader."""
        self.strategy: TreeScheduler | None = None
        self.current = False
        """The copy follows the truth (False: a new copy is due before the next pass)."""
        self.controllers: dict[str, ClaimController] = {}
        self.applying = False
        """Increments are being applied (a proxy's finish then is the leader's, already done)."""
        self.send_effect: Callable[[dict[str, Any]], None] | None = None
        """Where what the current pass decides goes, at once and in order (the copy's events: starts, preemptions)."""
        self.copies = 0
        """Copies taken of the truth."""
        self.applied = 0
        """Increments applied."""
        self.claims = 0
        self.refused = 0
        self.owned_answers = False
        """Claims' answers come as new objects (unpickled in a shard process): their allocations are not copied."""
        self.grants: dict[str, deque[Grant]] = {}
        """Per operation, the allocations granted ahead for the current pass, in the order they were made."""
        self.granted_usage: dict[str, tuple[tuple[str, tuple[float, ...]], ...]] = {}
        """Per allocation taken from a grant in the current pass: the usage of its operation and each ancestor with
        limits when the replica decided on it (the leader checks the truth against it at the booking, as a claim)."""
        self.grants_used = 0
        """Claims answered by a grant (no round trip to the leader)."""
        self.published_serial: int | None = None
        """The leader's number of the tree the copy published last (None: not known; see `PublishedChanges`)."""
        self.published_changes = 0
        """Publishes derived from the copy's own published tree (`PublishedChanges`)."""

    # -------------------------------------------------------------- copies and increments

    def copy_from(self, truth: TreeScheduler, pending: Callable[[str], tuple[int, Vector]]) -> None:
        """Become a copy of ``truth`` (its published tree shared, not copied; controllers replaced by proxies
        holding ``pending(operation_id)``; no clock, no listeners)."""
        state = truth.state
        memo: dict[int, Any] = {id(state.tree): state.tree, id(state.config): state.config}
        skeleton = truth.publisher.skeleton
        if skeleton is not None:  # the published structure: shared, so the next publish may be incremental
            memo[id(skeleton)] = skeleton
        for name in TAPPED:
            tap = truth.__dict__.get(name)
            if tap is not None:
                memo[id(tap)] = None
        if truth.clock is not None:
            memo[id(truth.clock)] = truth.clock
        for element in state.elements.values():  # published, never changed in place: shared
            memo[id(element.spec)] = element.spec
            memo[id(element.settings)] = element.settings
        self.controllers = {}
        for operation_id, runtime in truth.operations.items():
            count, min_needed = pending(operation_id)
            proxy = ClaimController(self, operation_id, count, min_needed)
            self.controllers[operation_id] = proxy
            memo[id(runtime.controller)] = proxy
        sink = state.event_sink
        state.event_sink = None
        try:
            replica = copy.deepcopy(truth, memo)
        finally:
            state.event_sink = sink
        for name in TAPPED:
            replica.__dict__.pop(name, None)
        replica.state.queued_preemptions.clear()  # the leader delivers what it queued (`take_queued`)
        self._adopt(replica)

    def load(self, snapshot: bytes, published: int | None = None) -> None:
        """Become the replica of a snapshot of the truth (`pickling.snapshot_of`: the copy of a shard process);
        ``published``: the leader's number of the truth's published tree in it, if it has one."""
        self.controllers = {}
        self.published_serial = published

        def proxy(pending: Pending) -> ClaimController:
            controller = ClaimController(self, pending.operation_id, pending.pending, pending.min_needed)
            self.controllers[pending.operation_id] = controller
            return controller

        self._adopt(load_snapshot(snapshot, proxy))

    def _adopt(self, replica: TreeScheduler) -> None:
        """``replica`` (its controllers our proxies) becomes the copy the heartbeats' stages run on: the other
        shards' nodes' allocations dropped, each operation's lists replaced by their boundaries."""
        drop_others(replica, self.owns)
        self.boundaries = {
            operation_id: drop_lists(replica, runtime) for operation_id, runtime in replica.operations.items()
        }
        replica.preemption.read_classes_with(self.classes)
        changes = replica.state.changes
        changes.keep_readers(STRATEGY_READERS)  # the truth's core reads the truth's log, not this copy's
        for operation_id, proxy in self.controllers.items():
            proxy.pending_watchers.append((changes.pending, operation_id))
        replica.state.event_sink = self._event
        self.strategy = replica
        self.current = True
        self.copies += 1

    def stale(self) -> bool:
        """Whether a new copy is due (none yet, or the leader asked for one)."""
        return self.strategy is None or not self.current

    def apply(self, increments: list[Increment], *, owned: bool = False) -> None:
        """Bring the copy forward by the leader's increments, in order, through the strategy's own methods
        (``owned``: the increments' allocations are this replica's own objects, not copied again)."""
        strategy = self.strategy
        assert strategy is not None
        self.applying = True
        try:
            for increment in increments:
                _apply(self, strategy, increment, owned)
            self.applied += len(increments)
        finally:
            self.applying = False

    def _event(self, event: dict[str, Any]) -> None:
        if self.applying:
            return
        kind = event.get("event", "")
        if kind == "allocation_started":
            operation_id = event["operation_id"]
            allocation = self.strategy.allocations[event["allocation_id"]]  # type: ignore[union-attr]
            allocation.start_order = UNNUMBERED  # type: ignore[assignment]
            self.unnumbered.append(allocation.id)
            if self.classes_of(operation_id).preemptible_from == UNNUMBERED:
                # no Preemptible allocation before it: the truth's lists may move their boundaries (with one,
                # the start is appended as Preemptible and nothing moves: `PreemptibleLists.add`)
                self.marked.add(operation_id)
        elif kind.startswith("allocation_"):
            # a removal may move the boundaries past allocations not held
            self.marked.add(event["operation_id"])
        if self.send_effect is not None:
            self.send_effect(event)

    def classes_of(self, operation_id: str) -> ClassBoundaries:
        """The boundaries the replica holds for the operation (the current pass's last answer, else the batch's)."""
        asked = self.asked.get(operation_id)
        if asked is not None:
            return asked
        return self.boundaries.get(operation_id, NO_BOUNDARIES)

    def classes(self, runtime: OperationRuntime) -> ClassBoundaries:
        """An operation's classes as the stages read them (`PreemptiveStages.classes`): the batch's boundaries;
        for an operation the current pass changed (`marked`), the leader's now: one `ClassQuery` for every marked
        operation, after the pass's bookings so far, which also numbers the pass's starts as the truth did."""
        if runtime.id in self.marked and not self.applying:
            self._ask()
        return self.classes_of(runtime.id)

    def _ask(self) -> None:
        operations = tuple(sorted(self.marked))
        started = tuple(self.unnumbered)
        self.marked.clear()
        self.unnumbered.clear()
        self.class_queries += 1
        answer = self.send_classes(ClassQuery(self.tree, operations, started))
        for operation_id, (aggressive_from, preemptible_from) in zip(
            operations, answer.boundaries, strict=True
        ):
            self.asked[operation_id] = ClassBoundaries(aggressive_from, preemptible_from)
        allocations = self.strategy.allocations  # type: ignore[union-attr]
        for allocation_id, order in zip(started, answer.orders, strict=True):
            allocation = allocations.get(allocation_id)
            if allocation is not None and order is not None:
                allocation.start_order = order

    # -------------------------------------------------------------- a heartbeat's stages

    def schedule(self, heartbeat: NodeHeartbeat, now: float) -> HeartbeatResult:
        """The stages of the node's heartbeat on the copy; the decisions go out as claims and effects."""
        strategy = self.strategy
        assert strategy is not None
        self.marked.clear()
        self.asked.clear()
        self.unnumbered.clear()
        try:
            return strategy.process_heartbeat(heartbeat, now)
        finally:  # the starts left unnumbered take the truth's numbers from the next batch (`StartOrder`)
            self.marked.clear()
            self.asked.clear()
            self.unnumbered.clear()

    def claim(self, operation_id: str, address: str, available: Vector, now: float) -> Allocation | None:
        strategy = self.strategy
        assert strategy is not None
        element = strategy.state.elements.get(operation_id)
        limited = tuple((e.id, tuple(e.usage)) for e in element.limited) if element is not None else ()
        proxy = self.controllers.get(operation_id)
        grants = self.grants.get(operation_id)
        if grants:
            grant = grants[0]
            if _answers(grant, address, available, now):
                grants.popleft()
                self.grants_used += 1
                self.granted_usage[grant.allocation.id] = limited
                if proxy is not None:
                    proxy.set_pending(grant.pending, grant.min_needed)
                return grant.allocation if self.owned_answers else copy_allocation(grant.allocation)
            del self.grants[operation_id]  # the leader takes them back before it answers the claim
        self.claims += 1
        answer = self.send_claim(Claim(self.tree, operation_id, address, available, limited, now))
        if proxy is not None:
            proxy.set_pending(answer.pending, answer.min_needed)
        if answer.allocation is None:
            self.refused += 1
            return None
        return answer.allocation if self.owned_answers else copy_allocation(answer.allocation)

    def unclaim(self, allocation: Allocation, finished: FinishedAllocation, now: float) -> None:
        self.send_unclaim(self.tree, allocation, finished, now)


def _answers(grant: Grant, address: str, available: Vector, now: float) -> bool:
    """Whether the real controller would answer this claim with the grant's allocation (see `Grant`)."""
    allocation = grant.allocation
    if allocation.node_address != address or grant.time != now:
        return False
    offered = available.tolist()
    if any(amount > limit for amount, limit in zip(offered, grant.offered, strict=True)):
        return False
    return fits_floats(allocation.amounts, offered)


def preempt_as(
    strategy: TreeScheduler, allocation: Allocation, record: PreemptionRecord, result: HeartbeatResult | None
) -> None:
    """Preempt ``allocation`` in ``strategy`` as ``record`` says another strategy did (`PreemptiveStages.preempt`:
    the same reason, stage, time, explanation, timeout and preemptor), into ``result`` when given."""
    preemptor = (
        strategy.allocations.get(record.preemptor_allocation_id)
        if record.preemptor_allocation_id is not None
        else None
    )
    strategy.preemption.preempt(
        allocation,
        strategy.nodes[allocation.node_address],
        record.time,
        result if result is not None else HeartbeatResult(address=allocation.node_address),
        (record.reason, record.stage),
        record.explanation,
        timeout=record.timeout,
        preemptor=preemptor,
        preempted_for=record.preemptor_operation_id if preemptor is None else None,
    )


def _apply(replica: TreeReplica, strategy: TreeScheduler, increment: Increment, owned: bool) -> None:
    """One increment on the copy (see the module docstring)."""
    if isinstance(increment, PendingWork):
        proxy = replica.controllers.get(increment.operation_id)
        if proxy is not None:
            proxy.set_pending(increment.pending, increment.min_needed)
    elif isinstance(increment, NodeSynced):
        strategy.sync_node(NodeHeartbeat(increment.address, increment.limits, increment.tags), increment.time)
    elif isinstance(increment, StartCounted):
        count_start(strategy, increment.operation_id, increment.amounts, increment.serial)
    elif isinstance(increment, PreemptCounted):
        count_preempt(strategy, increment.operation_id, increment.amounts)
    elif isinstance(increment, AllocationStarted):
        if not replica.owns(increment.allocation.node_address):
            count_start(
                strategy, increment.allocation.operation_id, increment.allocation.amounts, increment.serial
            )
            return
        allocation = increment.allocation if owned else copy_allocation(increment.allocation)
        element = strategy.state.elements[allocation.operation_id]
        node = strategy.nodes[allocation.node_address]
        result = HeartbeatResult(address=node.address)
        at_serial(strategy, increment.serial)
        strategy.regular.started(allocation, element, node, increment.time, result, increment.stage, None)
    elif isinstance(increment, AllocationPreempted):
        record = increment.record
        held = strategy.allocations.get(record.allocation_id)
        if held is None:
            count_preempt(strategy, record.operation_id, increment.amounts)
        else:
            preempt_as(strategy, held, record, None)
    elif isinstance(increment, AllocationFinished):
        if increment.finished.allocation_id in strategy.allocations:
            strategy.finish_allocation(increment.finished, increment.time)
        else:
            count_finish(strategy, increment.operation_id, increment.released, increment.restarted)
    elif isinstance(increment, UsageChanged):
        if increment.allocation_id in strategy.allocations:
            strategy.report_usage(increment.allocation_id, increment.resources)
        else:
            count_usage(strategy, increment.operation_id, increment.delta)
    elif isinstance(increment, ClassesMoved):
        boundaries = replica.boundaries
        for operation_id, aggressive_from, preemptible_from in increment.boundaries:
            boundaries[operation_id] = ClassBoundaries(aggressive_from, preemptible_from)
    elif isinstance(increment, StartOrder):
        allocation = strategy.allocations.get(increment.allocation_id)
        if allocation is not None:
            allocation.start_order = increment.order
            restamp(strategy, allocation.operation_id, increment.serial)
    elif isinstance(increment, Published):
        strategy.high_priority = increment.high_priority
        strategy.fifo_unschedulable = increment.fifo_unschedulable
        strategy.scheduling_tags_enabled = increment.scheduling_tags_enabled
        strategy.publish(increment.tree, increment.time)
        replica.published_serial = increment.serial
    elif isinstance(increment, PublishedChanges):
        if replica.published_serial != increment.base:
            raise ReplicaBehind(
                f"published tree {increment.base} is not the replica's ({replica.published_serial})"
            )
        tree = _derived_tree(strategy.state.tree, increment)
        tree.prepared = increment.prepared
        strategy.high_priority = increment.high_priority
        strategy.fifo_unschedulable = increment.fifo_unschedulable
        strategy.scheduling_tags_enabled = increment.scheduling_tags_enabled
        strategy.publish(tree, increment.time)
        replica.published_serial = increment.serial
        replica.published_changes += 1
    elif isinstance(increment, Registered):
        proxy = ClaimController(replica, increment.operation_id, increment.pending, increment.min_needed)
        replica.controllers[increment.operation_id] = proxy
        strategy.register_operation(increment.operation_id, proxy)  # the proxy's pending work is watched
        replica.boundaries[increment.operation_id] = drop_lists(
            strategy, strategy.operations[increment.operation_id]
        )
    elif isinstance(increment, Unregistered):
        unregister_in_order(strategy, increment.operation_id, increment.running)
        replica.controllers.pop(increment.operation_id, None)
        replica.boundaries.pop(increment.operation_id, None)
    else:
        strategy.rekey_operations(increment.operation_ids)


def _derived_tree(base: SchedulingTree, changes: PublishedChanges) -> SchedulingTree:
    """The tree ``changes`` says the truth derived from ``base`` (the replica's published tree), derived the same
    way, so that the structure's unchanged parts and the unchanged specs are ``base``'s objects."""
    rows = SpecRows()
    rows.base = base
    rows.replaced = changes.replaced
    operations = changes.operations
    if operations is None:
        return base.with_shares(changes.total_resources, rows)
    replaced = {spec.id: spec for spec in changes.replaced}
    previous = base.elements
    for element_id in operations.ids:
        spec = replaced.get(element_id) or previous.get(element_id)
        if spec is None:
            raise ReplicaBehind(
                f"element {element_id!r} is neither replaced nor in the replica's published tree"
            )
        rows.append(spec)
    rows.ids = operations.ids
    rows.tail = 0  # the ids are the truth's tree's, in its order: its map is made of them (`_specs_of`)
    rows.children = operations.children
    return base.with_operation_changes(changes.total_resources, rows, operations.removed, operations.added)
