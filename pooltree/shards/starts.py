"""Node shards that start allocations: the leader's side (the owner of the truth) and in-process shards.

`ShardStarts(scheduler, count)` makes ``count`` shards, each holding a `TreeReplica` per tree (`replica.py`), and
becomes the scheduler's ``tree_pass`` (`LiveScheduler.tree_pass`): the leader still takes every heartbeat's reports
(finished jobs stored and acknowledged, usage, lost jobs, the node's limits), then the stages of the node's
heartbeat run in the replica of the node's shard (`shard_of`). For each tree, per heartbeat:

1. The truth (the leader's `TreeScheduler`) takes the node's limits and tags; a change (or a new node) and the
   pending work that moved (controllers notify, `strategy/watch.py`) become increments for every shard, in order
   with the ones the truth's own changes made: its events (starts, preemptions, ends: its event sink is tapped)
   and its publishes, operations attached or gone, re-keys and accounted usage reports (those methods of the
   truth's instance are wrapped, `_tap_methods`).
2. The shard's replica takes its increments in order (a copy of the truth the first time, and when the truth lost
   a node or restarted a job outside the stages).
3. The replica runs the stages. A start is a claim (`Claim`): the leader refuses it when the operation no longer
   runs or has no pending work, or when the truth's usage of the operation or an ancestor with resource limits is
   above what the replica decided on (another shard's start it has not heard of: YTsaurus's precommit, so a limit
   is never overshot, also not by two shards at once); else the real controller chooses the job. The replica's
   bookkeeping of the start, and each preemption, reach the truth at once through the replica's event sink, and
   the truth applies them with the same methods (`RegularStage.started`, `PreemptiveStages.preempt`): usage
   charged, and increments for the other shards. The live scheduler then stores the job before its node is told
   to start it (the group commit, as for every start), and queues the stops.

A tree whose strategy keeps per-heartbeat state this does not carry (the GPU policy, scheduling segments, packing,
SSD or full-host preemption, tentative operations) is scheduled on the truth by the leader as before; its events
still reach the replicas as increments.

In one process every increment reaches every replica before its next heartbeat, so a replay decides exactly as
the single-process scheduler (`tests/shards/test_shard_starts.py`). Shards in processes would see increments a
pipe's latency late: then a fair share may be overshot by what one heartbeat starts per other shard (never a
limit), until the increments arrive; that is the design of `ARCHITECTURE.md` and is not built yet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from pooltree.resources import RESOURCE_COUNT, Vector, same_vector
from pooltree.server.live import LiveScheduler
from pooltree.shards.deltas import (
    ClassAnswer,
    ClassesMoved,
    ClassQuery,
    PreemptCounted,
    StartCounted,
    StartOrder,
    answer_classes,
    owner,
)
from pooltree.shards.host import shard_of
from pooltree.shards.increments import published_changes
from pooltree.shards.pickling import dumps, loads, snapshot_of
from pooltree.shards.replica import (
    AllocationFinished,
    AllocationPreempted,
    AllocationStarted,
    Claim,
    ClaimAnswer,
    Increment,
    NodeSynced,
    PendingWork,
    Published,
    Registered,
    Rekeyed,
    TreeReplica,
    Unregistered,
    UsageChanged,
    copy_allocation,
    preempt_as,
)
from pooltree.strategy.core import SchedulerCore
from pooltree.strategy.model import (
    Allocation,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
    SchedulingStage,
)
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.snapshot import SchedulingTree
from pooltree.strategy.watch import watch_pending

_LIMIT_EPSILON = 1e-9
STAGES = frozenset(stage.value for stage in SchedulingStage)


def replicable(strategy: TreeScheduler) -> bool:
    """Whether a replica decides a heartbeat of this tree exactly as the truth (the parts that keep state of
    their own across heartbeats, or that a heartbeat changes besides starts and preemptions, are off)."""
    return not (
        strategy.gpu_policy.allocating
        or strategy.segments.enabled
        or strategy.packing.config.enable
        or strategy.ssd.enabled
        or strategy.full_host.enabled
        or strategy.tentative.operations
    )


class _Tree:
    """The leader's bookkeeping of one tree: its core, the pending work that moved, what shards were told."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self.pending_moved: set[str] = set()
        self.watched: set[str] = set()
        self.granted: dict[str, Allocation] = {}
        """Allocations the real controllers chose for claims, until the replica books them (or gives them back)."""
        self.touched: set[str] = set()
        """Operations whose boundaries may have moved since the last batch (`ShardStarts._send_classes`)."""
        self.sent: dict[str, tuple[float, float]] = {}
        """Per operation, the boundaries the replicas were last told (`deltas.ClassesMoved`)."""
        self.finishing: dict[str, Allocation] = {}
        """The allocations the truth's ``finish_allocation`` is ending (their end's increment carries them)."""

    def watch(self, operation_id: str, controller: Any) -> None:
        """Hear of the operation's pending work moving (into ``pending_moved``), once per operation."""
        if operation_id not in self.watched:
            self.watched.add(operation_id)
            watch_pending(controller, self.pending_moved, operation_id)


class ShardStarts:
    """``count`` node shards that start allocations for ``scheduler`` (see the module docstring)."""

    def __init__(self, scheduler: LiveScheduler, count: int, *, pickled: bool = False) -> None:
        if count < 1:
            raise ValueError("node shards need a count of at least 1")
        self.scheduler = scheduler
        self.count = count
        self.pickled = pickled
        """Copies, increments and claim answers reach the replicas in their pickling form (`pickling.py`), as
        a shard process receives them."""
        self.replicas: list[dict[str, TreeReplica]] = [{} for _ in range(count)]
        self.inboxes: list[dict[str, list[Increment]]] = [{} for _ in range(count)]
        self.trees: dict[str, _Tree] = {}
        self.origin: int | None = None
        """The shard whose pass is being applied to the truth (its replica has those changes already)."""
        self.passes = 0
        """Heartbeat passes the shards ran."""
        self.leader_passes = 0
        """Heartbeat passes of trees a replica cannot decide, run on the truth."""
        self.proven_empty = 0
        """Heartbeat passes not run: `SchedulerCore.heartbeat_is_noop` proved them empty (a full node, nothing to
        preempt for), so the shard was not asked."""
        self.shard_cpu = [0.0] * count
        """Per shard, CPU seconds of its replicas' work (copies, increments, stages; without the leader's
        handling of its claims and effects): what shard processes would take off the leader (`bench/`)."""
        self._handling = 0.0
        """CPU seconds of the leader's claim and effect handling during the current pass."""
        self._shards: dict[str, int] = {}
        """Node address → its shard (`shard_of`, a hash: kept)."""
        self.published: dict[str, tuple[SchedulingTree, int]] = {}
        """In the pickling form, per tree: the truth's last published tree and its number (`_send_published`)."""
        self._serials = itertools.count(1)
        self.published_whole = 0
        """Publishes sent in the pickling form whole (a new structure, or no numbered base)."""
        self.published_as_changes = 0
        """Publishes sent as their changes from the tree published before (`replica.PublishedChanges`)."""
        scheduler.tree_pass = self.tree_pass

    # -------------------------------------------------------------- the heartbeat in one tree

    def tree_pass(
        self, tree: str, core: SchedulerCore, heartbeat: NodeHeartbeat, now: float
    ) -> HeartbeatResult:
        """The stages of ``heartbeat`` in ``tree``: run by the node's shard, applied to the truth."""
        state = self._attach(tree, core)
        truth = core.strategy
        self._sync_node(tree, core, heartbeat, now)
        self._flush_pending(tree, state)
        shard = self._shard_for(heartbeat.address)
        if shard is None or not replicable(truth):
            self.leader_passes += 1
            return core.process_heartbeat(heartbeat, now)
        if not truth.can_start_more(truth.nodes[heartbeat.address]) and core.heartbeat_is_noop(
            heartbeat.address, now, _no_bound
        ):
            # the strategy's own proof (the simulator skips heartbeats by it): the pass would start and preempt
            # nothing, so the shard is not asked; only the node's preemptive backoff moves, as the pass moves it
            core.skip_heartbeat(heartbeat.address, now)
            self.proven_empty += 1
            return HeartbeatResult(address=heartbeat.address)
        result = HeartbeatResult(address=heartbeat.address)
        node = truth.nodes[heartbeat.address]
        truth.take_queued(node, result)
        flags = self._run_pass(shard, tree, state, truth, heartbeat, now, result)
        if flags is not None:
            result.preemptive_scheduling_performed = flags.preemptive_scheduling_performed
            result.scheduled_with_preemption = flags.scheduled_with_preemption
            result.schedule_attempts = flags.schedule_attempts
            result.timeout_expired = flags.timeout_expired
        self.passes += 1
        return result

    def _shard_for(self, address: str) -> int | None:
        """The shard that runs the node's passes (None: the leader runs them on the truth)."""
        shard = self._shards.get(address)
        if shard is None:
            shard = self._shards[address] = shard_of(address, self.count)
        return shard

    def _run_pass(
        self,
        shard: int,
        tree: str,
        state: _Tree,
        truth: TreeScheduler,
        heartbeat: NodeHeartbeat,
        now: float,
        result: HeartbeatResult,
    ) -> HeartbeatResult | None:
        """The stages in the shard's replica, its decisions applied to the truth into ``result`` as they come;
        the replica's own result (its flags)."""
        began = time.process_time()
        replica = self._replica(shard, tree, state, truth)
        node = truth.nodes[heartbeat.address]
        copied = replica.strategy.nodes.get(heartbeat.address)  # type: ignore[union-attr]
        if (
            copied is not None
        ):  # the leader's backoff: heartbeats the verdicts answered moved it (`verdicts.py`)
            copied.last_preemptive_scheduling_time = node.last_preemptive_scheduling_time
        self.origin = shard
        self._handling = 0.0
        try:
            replica.send_effect = lambda event: self._effect(state, truth, replica, event, result)
            shard_result = replica.schedule(heartbeat, now)
        finally:
            replica.send_effect = None
            self.origin = None
            self.shard_cpu[shard] += time.process_time() - began - self._handling
        copied = replica.strategy.nodes[heartbeat.address] if replica.strategy is not None else None
        if copied is not None:
            node.last_preemptive_scheduling_time = copied.last_preemptive_scheduling_time
        return shard_result

    def _attach(self, tree: str, core: SchedulerCore) -> _Tree:
        """The tree's bookkeeping; a tree (re)made since is tapped: its events become increments."""
        state = self.trees.get(tree)
        if state is not None and state.core is core:
            return state
        state = _Tree(core)
        self.trees[tree] = state
        strategy = core.strategy
        sink = strategy.state.event_sink

        def tap(event: dict[str, Any]) -> None:
            if sink is not None:
                sink(event)
            self._truth_event(tree, state, strategy, event)

        strategy.state.event_sink = tap
        self._tap_methods(tree, state, strategy)
        for shard, inboxes in enumerate(self.inboxes):
            inboxes.pop(tree, None)
            self._mark_stale(shard, tree)
        return state

    def _replica(self, shard: int, tree: str, state: _Tree, truth: TreeScheduler) -> TreeReplica:
        """The shard's replica of the tree, brought up to the truth (increments, or a new copy)."""
        self._send_classes(tree, state, truth)
        replica = self.replicas[shard].get(tree)
        if replica is None:
            replica = TreeReplica(
                tree, self._claim, self._unclaim, owner(shard, self.count), self._ask_classes
            )
            self.replicas[shard][tree] = replica
        inbox = self.inboxes[shard].pop(tree, [])
        if not replica.stale():
            replica.apply(loads(dumps(inbox)) if self.pickled else inbox)
            if len(replica.strategy.nodes) == len(truth.nodes):  # type: ignore[union-attr]
                return replica  # (a node the truth lost: a new copy)
        for operation_id, runtime in truth.operations.items():
            state.watch(operation_id, runtime.controller)
        if self.pickled:
            snapshot = snapshot_of(truth, lambda operation_id: _pending(truth, operation_id))
            replica.load(snapshot, self.published_serial(tree, truth))
        else:
            replica.copy_from(truth, lambda operation_id: _pending(truth, operation_id))
        return replica

    # -------------------------------------------------------------- increments

    def _send_classes(self, tree: str, state: _Tree, truth: TreeScheduler) -> None:
        """The truth's boundaries of the operations whose boundaries moved since the last batch (`ClassesMoved`),
        before a pass's batch or copy: a replica's unchanged operations are classified by them."""
        if not state.touched:
            return
        operations = truth.operations
        sent = state.sent
        moved: list[tuple[str, float, float]] = []
        for operation_id in sorted(state.touched):
            runtime = operations.get(operation_id)
            if runtime is None:
                sent.pop(operation_id, None)
                continue
            boundaries = runtime.lists.boundaries()
            now = (boundaries.aggressive_from, boundaries.preemptible_from)
            if sent.get(operation_id) != now:
                sent[operation_id] = now
                moved.append((operation_id, *now))
        state.touched.clear()
        if moved:
            self._send(tree, ClassesMoved(tuple(moved)))

    def _send(self, tree: str, increment: Increment, *, others: bool = False) -> None:
        """Queue an increment for every shard's replica of ``tree`` (``others``: but the origin's)."""
        for shard, inboxes in enumerate(self.inboxes):
            if others and shard == self.origin:
                continue
            if self._holds(shard, tree):
                inboxes.setdefault(tree, []).append(increment)

    def _send_published(self, tree: str, published: Published, previous: SchedulingTree) -> None:
        """The truth published (``previous``: the tree it had published before). In one process the replicas share
        the published tree (their publish is incremental as the truth's). In the pickling form (shard processes)
        the publish is numbered and goes as its changes from ``previous`` when the replicas hold that tree by its
        number (every publish of the truth passes here, so a replica's published tree is the truth's at the same
        place of its increments), else whole; a replica whose tree is not the named base fails its pass
        (`replica.ReplicaBehind`) and is copied again."""
        if not self.pickled:
            self._send(tree, published)
            return
        serial = next(self._serials)
        base = self.published.get(tree)
        self.published[tree] = (published.tree, serial)
        changes = None
        if base is not None and base[0] is previous:
            changes = published_changes(published, previous, base[1], serial)
        if changes is not None:
            self.published_as_changes += 1
            self._send(tree, changes)
        else:
            self.published_whole += 1
            self._send(tree, dataclasses.replace(published, serial=serial))

    def published_serial(self, tree: str, truth: TreeScheduler) -> int | None:
        """The number of the truth's published tree (what a snapshot of it holds), None when not numbered."""
        known = self.published.get(tree)
        return known[1] if known is not None and known[0] is truth.state.tree else None

    def _send_started(
        self, tree: str, allocation: Allocation, stage: SchedulingStage, now: float, serial: int
    ) -> None:
        """The truth started ``allocation`` (its start serial ``serial``): an increment for every shard but the
        origin (whose pass booked it)."""
        self._send(tree, AllocationStarted(copy_allocation(allocation), stage, now, serial), others=True)

    def _holds(self, shard: int, tree: str) -> bool:
        """Whether the shard holds a replica of ``tree`` (increments are kept for it)."""
        return tree in self.replicas[shard]

    def _sync_node(self, tree: str, core: SchedulerCore, heartbeat: NodeHeartbeat, now: float) -> None:
        """The node's limits and tags into the truth; a change (or a new node) is an increment."""
        truth = core.strategy
        before = truth.nodes.get(heartbeat.address)
        limits = None if before is None else before.resource_limits.copy()
        tags = None if before is None else before.tags
        core.sync_node_limits(heartbeat)
        node = truth.sync_node(heartbeat, now)
        if limits is None or tags != node.tags or not same_vector(limits, node.resource_limits):
            self._send(tree, NodeSynced(node.address, node.resource_limits.copy(), node.tags, now))

    def _flush_pending(self, tree: str, state: _Tree) -> None:
        """Pending work that moved since the last flush, as increments (before what moved it reaches them)."""
        if not state.pending_moved:
            return
        truth = state.core.strategy
        moved = sorted(state.pending_moved)
        state.pending_moved.clear()
        for operation_id in moved:
            if operation_id in truth.operations:
                pending, min_needed = _pending(truth, operation_id)
                self._send(tree, PendingWork(operation_id, pending, min_needed))

    def _truth_event(self, tree: str, state: _Tree, truth: TreeScheduler, event: dict[str, Any]) -> None:
        """An event of the truth's strategy: a start, preemption or end the replicas must apply."""
        kind = event.get("event", "")
        if not kind.startswith("allocation_"):
            return
        self._flush_pending(tree, state)
        allocation_id = event["allocation_id"]
        state.touched.add(event["operation_id"])
        if kind == "allocation_started":
            allocation = truth.allocations[allocation_id]
            if event["stage"] not in STAGES:  # a start outside the stages (a gang restart, an adopted job)
                self._recopy(tree)
                return
            serial = truth.state.start_serial  # the truth's serial of this start (stamped before the event)
            if self.origin is None:
                self._send_started(tree, allocation, SchedulingStage(event["stage"]), event["time"], serial)
            else:  # a shard's pass booked it on its own node: the others read its amounts, the origin its number
                self._send(
                    tree, StartCounted(allocation.operation_id, allocation.amounts, serial), others=True
                )
                self._send(tree, StartOrder(allocation_id, allocation.start_order, serial))
        elif kind == "allocation_preempted":
            allocation = truth.allocations.get(allocation_id)
            if allocation is None or allocation.preemption is None:
                self._recopy(tree)
                return
            if self.origin is None:
                self._send(tree, AllocationPreempted(allocation.preemption, allocation.amounts))
            else:  # a victim of a shard's pass, on its node: the other shards read its amounts
                self._send(tree, PreemptCounted(allocation.operation_id, allocation.amounts), others=True)
        else:
            ended = state.finishing.get(allocation_id)
            if ended is None:  # an end not of `finish_allocation`: every replica copies the truth again
                self._recopy(tree)
                return
            finished = FinishedAllocation(allocation_id, event.get("state", "aborted"))
            released = None if ended.preempted else ended.amounts
            self._send(
                tree,
                AllocationFinished(finished, event["time"], ended.operation_id, released, ended.restarted),
            )

    def _recopy(self, tree: str) -> None:
        """Every replica of ``tree`` takes a new copy before its next pass."""
        for shard in range(self.count):
            self._mark_stale(shard, tree)
            self.inboxes[shard].pop(tree, None)

    def _mark_stale(self, shard: int, tree: str) -> None:
        """The shard's replica of ``tree`` takes a new copy before its next pass."""
        replica = self.replicas[shard].get(tree)
        if replica is not None:
            replica.current = False

    def _tap_methods(self, tree: str, state: _Tree, strategy: TreeScheduler) -> None:
        """The truth's publishes and operation changes become increments, in order with its events."""
        publish = strategy.publish
        register = strategy.register_operation
        unregister = strategy.unregister_operation
        rekey = strategy.rekey_operations
        report_usage = strategy.report_usage

        def tapped_publish(published: Any, now: float | None) -> None:
            previous = strategy.state.tree
            publish(published, now)
            state.touched.update(strategy.operations)
            self._flush_pending(tree, state)
            settings = (strategy.high_priority, strategy.fifo_unschedulable, strategy.scheduling_tags_enabled)
            self._send_published(tree, Published(published, now, *settings), previous)

        def tapped_register(operation_id: str, controller: Any) -> None:
            register(operation_id, controller)
            self._flush_pending(tree, state)
            state.watch(operation_id, controller)
            state.touched.add(operation_id)
            self._send(tree, Registered(operation_id, *_pending(strategy, operation_id)))

        def tapped_unregister(operation_id: str) -> list[Allocation]:
            listed = tuple(
                (a.id, None if a.preempted else a.amounts)
                for a in strategy.allocations.values()
                if a.operation_id == operation_id
            )
            running = unregister(operation_id)
            self._flush_pending(tree, state)
            state.touched.discard(operation_id)
            state.sent.pop(operation_id, None)
            self._send(tree, Unregistered(operation_id, listed))
            return running

        def tapped_rekey(operation_ids: Any) -> None:
            operation_ids = frozenset(operation_ids)
            rekey(operation_ids)
            self._send(tree, Rekeyed(operation_ids))

        def tapped_report_usage(allocation_id: str, reported: Vector | Sequence[float]) -> bool:
            allocation = strategy.allocations.get(allocation_id)
            before = allocation.resources if allocation is not None else None
            changed = report_usage(allocation_id, reported)
            if changed:
                assert allocation is not None and before is not None
                resources = allocation.resources
                delta = tuple((resources - before).tolist())  # what the truth accounted (`_change_usage`)
                state.touched.add(allocation.operation_id)
                self._send(
                    tree, UsageChanged(allocation_id, resources.copy(), allocation.operation_id, delta)
                )
            return changed

        strategy.publish = tapped_publish  # type: ignore[method-assign]
        strategy.register_operation = tapped_register  # type: ignore[method-assign]
        strategy.unregister_operation = tapped_unregister  # type: ignore[method-assign]
        strategy.rekey_operations = tapped_rekey  # type: ignore[method-assign]
        strategy.report_usage = tapped_report_usage  # type: ignore[method-assign]
        self._tap_ends_and_lists(state, strategy)

    @staticmethod
    def _tap_ends_and_lists(state: _Tree, strategy: TreeScheduler) -> None:
        """An ending allocation is kept while the truth ends it (its end's increment carries its operation and
        amounts); what configures the truth's lists outside its events marks every operation's boundaries moved."""
        finish = strategy.finish_allocation
        configure_lists = strategy.configure_lists
        set_inclusive = strategy.set_allocation_on_bound_preemptible

        def tapped_finish(finished: FinishedAllocation, now: float) -> Allocation | None:
            ending = strategy.allocations.get(finished.allocation_id)
            if ending is not None:
                state.finishing[finished.allocation_id] = ending
            try:
                return finish(finished, now)
            finally:
                state.finishing.pop(finished.allocation_id, None)

        def tapped_configure_lists(limit: int | None = None) -> bool:
            state.touched.update(strategy.operations)
            return configure_lists(limit)

        def tapped_set_inclusive(enabled: bool) -> None:
            state.touched.update(strategy.operations)
            set_inclusive(enabled)

        strategy.finish_allocation = tapped_finish  # type: ignore[method-assign]
        strategy.configure_lists = tapped_configure_lists  # type: ignore[method-assign]
        strategy.set_allocation_on_bound_preemptible = tapped_set_inclusive  # type: ignore[method-assign]

    # -------------------------------------------------------------- claims and effects

    def _claim(self, claim: Claim) -> ClaimAnswer:
        """A shard's start, checked against the truth (YTsaurus's precommit); the real controller's choice."""
        with self._handling_time():
            if self.pickled:
                return loads(dumps(self._check_claim(loads(dumps(claim)))))
            return self._check_claim(claim)

    def _check_claim(self, claim: Claim) -> ClaimAnswer:
        state = self.trees[claim.tree]
        truth = state.core.strategy
        runtime = truth.operations.get(claim.operation_id)
        node = truth.nodes.get(claim.address)
        if runtime is None or node is None:
            return ClaimAnswer(None, 0, np.zeros(len(claim.available)))
        pending, min_needed = _pending(truth, claim.operation_id)
        element = truth.state.elements.get(claim.operation_id)
        if element is None or element.op is not runtime or pending <= 0 or not _room(truth, claim):
            return ClaimAnswer(None, pending, min_needed)
        allocation = runtime.controller.schedule_allocation(node, claim.available, claim.time)
        pending, min_needed = _pending(truth, claim.operation_id)
        if allocation is not None:
            state.granted[allocation.id] = allocation
        return ClaimAnswer(allocation, pending, min_needed)

    def _ask_classes(self, query: ClassQuery) -> ClassAnswer:
        """A replica's class read of an operation its pass changed, answered from the truth (the pass's bookings
        are applied to it as they are made)."""
        with self._handling_time():
            truth = self.trees[query.tree].core.strategy
            if self.pickled:
                return loads(dumps(answer_classes(truth, loads(dumps(query)))))  # type: ignore[no-any-return]
            return answer_classes(truth, query)

    def _unclaim(self, tree: str, allocation: Allocation, finished: FinishedAllocation, now: float) -> None:
        """A granted allocation the replica could not book goes back to its real controller."""
        _give_back(self.trees[tree], allocation.id, finished, now)

    @contextlib.contextmanager
    def _handling_time(self) -> Iterator[None]:
        """Counts the CPU time of the leader's handling of a claim or an event during a shard's pass."""
        began = time.process_time()
        try:
            yield
        finally:
            self._handling += time.process_time() - began

    def _effect(
        self,
        state: _Tree,
        truth: TreeScheduler,
        replica: TreeReplica,
        event: dict[str, Any],
        result: HeartbeatResult,
    ) -> None:
        """What the shard's pass decided, applied to the truth at once and in order."""
        with self._handling_time():
            self._apply_effect(truth, replica, event, result, state.granted)

    @staticmethod
    def _apply_effect(
        truth: TreeScheduler,
        replica: TreeReplica,
        event: dict[str, Any],
        result: HeartbeatResult,
        granted: dict[str, Allocation],
    ) -> None:
        kind = event.get("event")
        if kind == "allocation_started":
            allocation = granted.pop(event["allocation_id"])
            element = truth.state.elements[allocation.operation_id]
            node = truth.nodes[event["node"]]
            stage = SchedulingStage(event["stage"])
            truth.regular.started(allocation, element, node, event["time"], result, stage, None)
        elif kind == "allocation_preempted":
            copied = replica.strategy.allocations[event["allocation_id"]]  # type: ignore[union-attr]
            record = copied.preemption
            allocation = truth.allocations.get(event["allocation_id"])
            if record is None or allocation is None or allocation.preempted:
                return  # the victim ended already: nothing to stop
            preempt_as(truth, allocation, record, result)


def _give_back(state: _Tree, allocation_id: str, finished: FinishedAllocation, now: float) -> None:
    """An allocation granted to a claim and not booked goes back to its real controller (if still granted)."""
    allocation = state.granted.pop(allocation_id, None)
    if allocation is None:
        return
    runtime = state.core.strategy.operations.get(allocation.operation_id)
    if runtime is not None:
        runtime.controller.on_allocation_finished(allocation, finished, now)


def _no_bound() -> Vector:
    """The lower bound of pending work's min needed resources `heartbeat_is_noop` takes: none (zeros), so a pass
    is proven empty only on a node that cannot start more (no walk over the operations per heartbeat; the proof
    is asked only of such nodes, `TreeScheduler.can_start_more` first)."""
    return np.zeros(RESOURCE_COUNT)


def _pending(truth: TreeScheduler, operation_id: str) -> tuple[int, Vector]:
    """The real controller's pending work (count, min needed resources)."""
    controller = truth.operations[operation_id].controller
    return controller.pending_allocation_count, np.array(controller.min_needed_resources, dtype=float)


def _room(truth: TreeScheduler, claim: Claim) -> bool:
    """Whether the truth's usage of the operation and of each ancestor with limits is at most what the replica
    decided on (then the start fits every limit the replica checked)."""
    return _room_for(truth, claim.limited_usage)


def _room_for(truth: TreeScheduler, limited_usage: tuple[tuple[str, tuple[float, ...]], ...]) -> bool:
    """`_room` for the usage a replica decided on (a claim's, or a granted start's at its booking)."""
    elements = truth.state.elements
    for element_id, usage in limited_usage:
        element = elements.get(element_id)
        if element is None:
            return False
        for truth_used, seen in zip(element.usage, usage, strict=True):
            if truth_used > seen + _LIMIT_EPSILON:
                return False
    return True
