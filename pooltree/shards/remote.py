"""Shards that start allocations in their own processes: the leader's side.

`ProcessShardStarts(scheduler, count)` is `ShardStarts` (`starts.py`: the truth, its increments, the claim check)
with each shard's replicas in the shard's process (`passes.py`) at the end of a pipe of its own (a `ShardLink`,
attached by `host.NodeShards` when it starts the process). A heartbeat that reached the leader through a shard
(`carrying`) has its passes run there; any other (a node whose shard is down, a node's first heartbeat to the
leader's own address) is scheduled on the truth by the leader, and its decisions reach the shards as increments.

Per heartbeat and tree, on the leader thread that answers it:

1. Under the scheduling lock: the node's reports, its limits into the truth, what was queued for the node.
2. The scheduling lock is let go (`SchedulingLock.suspended`): the shard's pass runs in its process while the
   leader takes other heartbeats. One pass per shard at a time (the link's lock, taken with the scheduling lock
   let go); the increments the shard has not seen are taken, in order, under the scheduling lock with the
   link's lock held, and sent with the request (a snapshot of the truth first when the shard has no current copy),
   with allocations granted ahead (`_grants`): for each allocation that ended on the node since its last pass (not
   preempted), its operation's real controller is asked for the next one now, on the node's free resources
   (`replica.Grant`). A start of the pass that a grant answers exactly (the same node and time, no more offered,
   the allocation fits) takes it without a round trip; its booking carries the usage the replica decided on, and
   the leader makes the claim's limit check then.
3. Each claim (and each class read of an operation the pass changed, `deltas.ClassQuery`), with the bookings the
   pass made since its last message (sent together, in order), is handled under the scheduling lock, briefly, with
   the heartbeat's job writes in place: the claim checked against the truth (`ShardStarts._check_claim`), a start or
   preemption applied to the truth as it is now. A booking the truth can no longer take (the operation gone, the node
   gone, a victim already stopped or started by a pass still in flight) is not applied: its allocation goes back to
   its controller and the shard takes a new copy before its next pass. A claim for an operation whose grants the pass
   did not take first has those taken back before it is answered (`take_back`: the controller as if they were never
   made, so the claim gets what it would have got).
4. The scheduling lock is taken again; the grants no start took are taken back (last made first); the heartbeat
   goes on as in one process (job records of the starts, stored before the node is told; stops queued).

A shard process that dies during a pass (kill -9) ends the conversation: the starts already applied are the
heartbeat's (stored, then sent to a node that no longer hears from this shard: they are the node's missing jobs,
lost after `LOST_AFTER_MISSED_HEARTBEATS` and run again by their controllers, never twice); the allocations granted
to its claims and not yet booked go back to their controllers, its grants not booked are taken back. The
restarted process gets snapshots.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from pooltree.resources import USER_SLOTS
from pooltree.server.live import LiveScheduler
from pooltree.shards.deltas import ClassQuery, answer_classes
from pooltree.shards.increments import (
    ANY_SHARD,
    IncrementLog,
    encode,
    encode_started,
)
from pooltree.shards.passes import (
    PassDone,
    PassFailed,
    PassRequest,
    Preempted,
    Started,
    Unclaimed,
    flat,
    unflat,
)
from pooltree.shards.pickling import dumps, loads, snapshot_of
from pooltree.shards.replica import (
    Claim,
    ClaimAnswer,
    Grant,
    Increment,
    NodeSynced,
    preempt_as,
)
from pooltree.shards.starts import ShardStarts, _give_back, _pending, _room_for, _Tree
from pooltree.strategy.model import (
    Allocation,
    ExecNode,
    FinishedAllocation,
    HeartbeatResult,
    NodeHeartbeat,
    SchedulingStage,
)
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.shares import fits_floats, sub_floats

log = logging.getLogger(__name__)

LOG_LIMIT = 200_000
"""Increments a tree's log holds at most for a shard that has not asked for them (past it, a new copy instead)."""

_END_EVENTS = frozenset({"allocation_finished", "allocation_aborted", "allocation_failed"})

GRANTS_PER_PASS = 16
"""Allocations granted ahead with one pass's request at most."""

GRANT_USE_FLOOR = 0.5
"""A shard's passes get grants while the share of their grants that starts took (a moving average over its passes
with grants, `ShardLink.grant_use`) is at least this; below it only every `GRANT_PROBE`-th pass gets them (a grant
no start takes costs the leader a controller's choice made and undone)."""

GRANT_PROBE = 8

GRANTS_PER_PROBE = 2
"""Allocations granted ahead with a probe's request at most (a probe only tells whether grants would be used
again; a full one cost the leader 3% of its CPU in `live_nodes`' loaded window, where they went unused)."""


class _Locked:
    """``with``: the scheduler's lock held and the heartbeat's job writes collected (a plain class: a generator
    context manager costs several times more, and a pass enters this once per claim)."""

    __slots__ = ("before", "scheduler", "writes")

    def __init__(self, scheduler: LiveScheduler, writes: dict | None) -> None:  # type: ignore[type-arg]
        self.scheduler = scheduler
        self.writes = writes
        self.before: dict | None = None  # type: ignore[type-arg]

    def __enter__(self) -> None:
        self.scheduler.lock.acquire()
        persistence = self.scheduler.persistence
        self.before, persistence.job_writes = persistence.job_writes, self.writes

    def __exit__(self, *exc: object) -> None:
        self.scheduler.persistence.job_writes = self.before
        self.scheduler.lock.release()


class ShardLink:
    """The leader's end of one shard process's pass pipe, and what its replicas hold."""

    def __init__(self, index: int, conn: Connection) -> None:
        self.index = index
        self.conn = conn
        self.lock = threading.Lock()
        """One pass of this shard at a time (taken with the scheduling lock let go)."""
        self.alive = True
        self.nodes: dict[str, set[str]] = {}
        """Per tree the shard holds a current copy of: the nodes its replica knows (absent: a snapshot is due)."""
        self.cursors: dict[str, int] = {}
        """Per tree it holds a copy of: its position in the tree's `IncrementLog` (what it has seen)."""
        self.grant_use = 1.0
        """The share of its passes' grants that starts took, a moving average (weight 1/5 per pass with grants)."""
        self.passes_without_grants = 0
        """Passes since its last one with grants while ``grant_use`` is below `GRANT_USE_FLOOR`."""


class ProcessShardStarts(ShardStarts):
    """``count`` shard processes that start allocations for ``scheduler`` (see the module docstring)."""

    def __init__(self, scheduler: LiveScheduler, count: int) -> None:
        super().__init__(scheduler, count, pickled=True)
        self.links: list[ShardLink | None] = [None] * count
        self._via = threading.local()
        self.unsettled: set[str] = set()
        """Allocations started by passes still in flight (their jobs not yet recorded): not preempted meanwhile."""
        self.shard_apply_cpu = [0.0] * count
        """Of ``shard_cpu``, what bringing the replicas forward took (snapshots, increments)."""
        self.shard_passes = [0] * count
        """Passes each shard process ran to their end (``pooltree_node_shard_passes_total``)."""
        self.snapshots = 0
        """Snapshots of a truth sent to shard processes."""
        self.sent_bytes = 0
        """Bytes of requests and claim answers sent to the shard processes."""
        self.received_bytes = 0
        """Bytes of claims, bookings and pass ends received from them."""
        self.messages = 0
        """Messages received from the shard processes (a claim with the bookings before it, or a pass's end)."""
        self.dropped = 0
        """Bookings of a shard the truth could not take (each made the shard copy the truth again)."""
        self.logs: dict[str, IncrementLog] = {}
        """Per tree, the increments for the shard processes, each batch pickled once for all (`increments.py`)."""
        self.freed: dict[tuple[str, str], list[str]] = {}
        """Per (tree, node): the operations whose allocations ended there (not preempted) since the node's last
        pass, in order: its next pass's request grants each of them an allocation ahead (`_grants`)."""
        self.granted_by: dict[str, Any] = {}
        """Allocation id → the controller that granted it ahead, until its pass ends (taken back by that controller
        even when its operation left the tree meanwhile)."""
        self.grants_made = 0
        """Allocations granted ahead with pass requests."""
        self.grants_taken_back = 0
        """Of those, the ones no start of their pass took (taken back by their controllers, `take_back`)."""
        self.claims = 0
        """Claims answered over a pass pipe (one round trip each)."""
        self.claims_refused = 0
        """Of those, the ones answered with no allocation."""
        self.granted_starts = 0
        """Starts booked from allocations granted ahead (no round trip)."""

    # -------------------------------------------------------------- the processes

    def attach(self, index: int, conn: Connection) -> None:
        """Shard ``index``'s (new) process is at the end of ``conn``; its replicas come as snapshots."""
        with self.scheduler.lock:
            self.links[index] = ShardLink(index, conn)
            self.inboxes[index].clear()

    def detach(self, index: int) -> None:
        """Shard ``index``'s process is gone: its nodes' passes run on the truth until it is back. Its pipe is
        closed once no pass uses it (a pass in flight reads the end of the pipe first): a descriptor closed under a
        pass could be reused by the next process's pipe."""
        link = self.links[index]
        if link is None:
            return
        link.alive = False
        with self.scheduler.lock:
            if self.links[index] is link:
                self.links[index] = None
            self.inboxes[index].clear()
        with link.lock, contextlib.suppress(OSError):
            link.conn.close()

    @contextlib.contextmanager
    def carrying(self, index: int) -> Iterator[None]:
        """The heartbeat this thread answers came through shard ``index``: its passes run there."""
        self._via.shard = index
        try:
            yield
        finally:
            self._via.shard = None

    # -------------------------------------------------------------- ShardStarts' hooks

    def _shard_for(self, address: str) -> int | None:
        """The shard the heartbeat came through, when it owns the node (a node's passes run in one shard only:
        its replica's view of the node is then the truth's); else the leader."""
        shard = getattr(self._via, "shard", None)
        if shard is None or super()._shard_for(address) != shard:
            return None
        link = self.links[shard]
        return shard if link is not None and link.alive else None

    def _holds(self, shard: int, tree: str) -> bool:
        link = self.links[shard]
        return link is not None and tree in link.nodes

    def _mark_stale(self, shard: int, tree: str) -> None:
        link = self.links[shard]
        if link is not None:
            link.nodes.pop(tree, None)
            link.cursors.pop(tree, None)

    def _send(self, tree: str, increment: Increment, *, others: bool = False) -> None:
        """Into the tree's log, once for every shard process that holds the tree (``others``: but the origin)."""
        holders = [link for link in self.links if link is not None and tree in link.nodes]
        if not holders:
            self.logs.pop(tree, None)  # nobody follows the tree: the next pass of each starts from a snapshot
            return
        if isinstance(increment, NodeSynced):
            for link in holders:
                link.nodes[tree].add(increment.address)
        tree_log = self.logs.get(tree)
        if tree_log is None:
            tree_log = self.logs[tree] = IncrementLog()
        origin = self.origin if others and self.origin is not None else ANY_SHARD
        tree_log.append(encode(increment), origin)
        if tree_log.entries > LOG_LIMIT:
            self._bound(tree, tree_log)

    def _send_started(
        self, tree: str, allocation: Allocation, stage: SchedulingStage, now: float, serial: int
    ) -> None:
        """The start's fields and the truth's serial taken now into the log (no copy of the allocation), for every
        shard but the origin."""
        if not any(link is not None and tree in link.nodes for link in self.links):
            self.logs.pop(tree, None)
            return
        tree_log = self.logs.get(tree)
        if tree_log is None:
            tree_log = self.logs[tree] = IncrementLog()
        tree_log.append(
            encode_started(allocation, stage, now, serial), ANY_SHARD if self.origin is None else self.origin
        )
        if tree_log.entries > LOG_LIMIT:
            self._bound(tree, tree_log)

    def _bound(self, tree: str, tree_log: IncrementLog) -> None:
        """The log is over `LOG_LIMIT`: the shards furthest behind (holding a copy of a tree none of their nodes'
        passes asked for in a long time) take a new copy at their next pass instead, and the log is trimmed."""
        end = tree_log.end()
        oldest = min(link.cursors.get(tree, end) for link in self.links if link is not None)
        for link in self.links:
            if link is not None and link.cursors.get(tree, end) == oldest:
                self._mark_stale(link.index, tree)
        tree_log.trim(min(link.cursors.get(tree, end) for link in self.links if link is not None))

    def _run_pass(
        self,
        shard: int,
        tree: str,
        state: _Tree,
        truth: TreeScheduler,
        heartbeat: NodeHeartbeat,
        now: float,
        result: HeartbeatResult,
    ) -> PassDone | None:
        scheduler = self.scheduler
        link = self.links[shard]
        assert link is not None
        backoff = truth.nodes[heartbeat.address].last_preemptive_scheduling_time
        writes = scheduler.persistence.job_writes
        granted: set[str] = set()
        started: list[str] = []
        done: PassDone | None = None
        request: PassRequest | None = None
        with scheduler.lock.suspended(), link.lock:
            with self._locked(writes):
                request = self._request(link, tree, state, truth, heartbeat, now, backoff)
            if request is not None:
                done = self._converse(link, state, truth, request, result, writes, granted, started)
        scheduler.persistence.job_writes = writes
        self.unsettled.difference_update(started)  # their jobs are recorded before the lock is let go again
        if request is not None and request.grants:
            if done is not None:  # booked: no longer granted, not taken back (still known to `granted_by`)
                used = sum(
                    1
                    for grant in request.grants
                    if grant.allocation.id in self.granted_by and grant.allocation.id not in state.granted
                )
                link.grant_use = 0.8 * link.grant_use + 0.2 * used / len(request.grants)
            self._take_back(state, request.grants)
        self._give_back(state, granted, now)
        if done is None:
            self._mark_stale(shard, tree)
            return None
        self.shard_cpu[shard] += done.cpu
        self.shard_apply_cpu[shard] += done.apply_cpu
        self.shard_passes[shard] += 1
        node = truth.nodes.get(heartbeat.address)
        if node is not None and done.backoff is not None:
            node.last_preemptive_scheduling_time = done.backoff
        return done

    # -------------------------------------------------------------- one pass

    def _locked(self, writes: dict | None) -> _Locked:  # type: ignore[type-arg]
        """The scheduling lock, with the heartbeat's job writes collected."""
        return _Locked(self.scheduler, writes)

    def _request(
        self,
        link: ShardLink,
        tree: str,
        state: _Tree,
        truth: TreeScheduler,
        heartbeat: NodeHeartbeat,
        now: float,
        backoff: float,
    ) -> PassRequest | None:
        """The pass's request: the increments the shard has not seen (or a snapshot); None when the shard or
        the tree went away meanwhile."""
        if not link.alive or self.links[link.index] is not link or self.trees.get(tree) is not state:
            return None
        node = truth.nodes.get(heartbeat.address)
        if node is None:
            return None
        self._send_classes(tree, state, truth)  # (before the log is taken: with no holder it is dropped)
        tree_log = self.logs.get(tree)
        if tree_log is None:
            tree_log = self.logs[tree] = IncrementLog()
        end = tree_log.end()
        known = link.nodes.get(tree)
        snapshot = None
        published = None
        chunks: list[bytes] = []
        if known is None or len(known) != len(truth.nodes):  # (a node the truth lost: a new copy)
            for operation_id, runtime in truth.operations.items():
                state.watch(operation_id, runtime.controller)
            snapshot = snapshot_of(truth, lambda operation_id: _pending(truth, operation_id))
            published = self.published_serial(tree, truth)
            link.nodes[tree] = set(truth.nodes)
            self.snapshots += 1
        else:
            chunks = tree_log.since(link.cursors[tree])
        link.cursors[tree] = end
        tree_log.trim(min(kept.cursors.get(tree, end) for kept in self.links if kept is not None))
        return PassRequest(
            tree,
            snapshot,
            chunks,
            link.index,
            heartbeat.address,
            np.array(node.resource_limits, dtype=float),
            node.tags,
            now,
            backoff,
            self._grants(tree, state, truth, node, now, self._granting(link)),
            published,
            self.count,
        )

    def _grants(
        self, tree: str, state: _Tree, truth: TreeScheduler, node: ExecNode, now: float, limit: int
    ) -> tuple[Grant, ...]:
        """Allocations granted ahead for the node's pass, asked of the real controllers with the node's free
        resources as the truth holds them, while those fit what the grants so far leave: first one per allocation
        that ended on the node since its last pass (not preempted), of its operation (its usage just fell: likely
        the pass's first choice), then one for each operation the truth's heaps put first (`BestLeaf.leading`:
        what a pass on a node that is filling tries first). Only controllers that can take an allocation back
        exactly (`can_take_back`) and hold no revived job for the node are asked; each grant is checked as a
        claim would be (the operation runs in the published tree with pending work). A guess: a grant no start
        takes is taken back. At most ``limit`` (none: the ended jobs' operations are forgotten all the same)."""
        freed = self.freed.pop((tree, node.address), [])
        if limit <= 0:
            return ()
        offered = tuple((node.resource_limits - node.usage).tolist())
        available = np.array(offered)
        room = list(offered)
        grants: list[Grant] = []
        self._grant(state, truth, node, now, freed, limit, offered, available, room, grants)
        if len(grants) < limit and room[USER_SLOTS] >= 1.0:  # (every job takes a user slot: else none fits)
            leading = [element.id for element in truth.heaps.leading(limit) if element.id not in freed]
            self._grant(state, truth, node, now, leading, limit, offered, available, room, grants)
        self.grants_made += len(grants)
        return tuple(grants)

    def _grant(
        self,
        state: _Tree,
        truth: TreeScheduler,
        node: ExecNode,
        now: float,
        operation_ids: list[str],
        limit: int,
        offered: tuple[float, ...],
        available: np.ndarray,
        room: list[float],
        grants: list[Grant],
    ) -> None:
        """`_grants` for ``operation_ids`` in order, into ``grants`` (``room``: what the grants so far leave)."""
        for operation_id in operation_ids:
            if len(grants) >= limit:
                break
            runtime = truth.operations.get(operation_id)
            element = truth.state.elements.get(operation_id)
            if runtime is None or element is None or element.op is not runtime:
                continue
            controller = runtime.controller
            if (
                not controller.can_take_back
                or controller.has_reservations(node.address)
                or controller.pending_allocation_count <= 0
                or not fits_floats(controller.min_needed_resources.tolist(), room)
            ):
                continue
            allocation = controller.schedule_allocation(node, available, now)
            if allocation is None:
                continue
            sub_floats(room, allocation.amounts)
            state.granted[allocation.id] = allocation
            self.granted_by[allocation.id] = controller
            pending, min_needed = _pending(truth, operation_id)
            grants.append(Grant(operation_id, allocation, offered, now, pending, min_needed))

    @staticmethod
    def _granting(link: ShardLink) -> int:
        """How many grants the shard's next pass may get: `GRANTS_PER_PASS` while its passes take most of theirs,
        else none but on every `GRANT_PROBE`-th pass, a probe of `GRANTS_PER_PROBE` (to see whether they would be
        taken again)."""
        if link.grant_use >= GRANT_USE_FLOOR:
            return GRANTS_PER_PASS
        link.passes_without_grants += 1
        if link.passes_without_grants < GRANT_PROBE:
            return 0
        link.passes_without_grants = 0
        return min(GRANTS_PER_PROBE, GRANTS_PER_PASS)

    def _take_back(self, state: _Tree, grants: tuple[Grant, ...] | list[Grant]) -> None:
        """Grants no start of the pass took (still in ``state.granted``: not booked, not given back) go back to
        their controllers as if never made (`take_back`, last made first)."""
        for grant in reversed(grants):
            controller = self.granted_by.pop(grant.allocation.id, None)
            allocation = state.granted.pop(grant.allocation.id, None)
            if allocation is None or controller is None:
                continue
            controller.take_back(allocation)
            self.grants_taken_back += 1

    def _truth_event(self, tree: str, state: _Tree, truth: TreeScheduler, event: dict[str, Any]) -> None:
        super()._truth_event(tree, state, truth, event)
        if event.get("event") in _END_EVENTS and event.get("reason") is None:
            freed = self.freed.setdefault((tree, event["node"]), [])
            if len(freed) < GRANTS_PER_PASS:
                freed.append(event["operation_id"])

    def _converse(
        self,
        link: ShardLink,
        state: _Tree,
        truth: TreeScheduler,
        request: PassRequest,
        result: HeartbeatResult,
        writes: dict | None,  # type: ignore[type-arg]
        granted: set[str],
        started: list[str],
    ) -> PassDone | None:
        """The pass in the shard process: its claims answered and bookings applied as they come."""
        conn = link.conn
        try:
            data = dumps(flat(request))
            self.sent_bytes += len(data)
            conn.send_bytes(data)
            while True:
                data = conn.recv_bytes()
                self.received_bytes += len(data)
                self.messages += 1
                # the bookings since the last message, then a claim or the end
                *bookings, last = [unflat(message) for message in loads(data)]
                answer: Any = None
                if bookings or isinstance(last, (Claim, ClassQuery)):
                    with self._locked(writes):
                        for booking in bookings:
                            self._booking(link.index, state, truth, booking, result, granted, started)
                        if isinstance(last, ClassQuery):
                            answer = answer_classes(truth, last)
                        elif isinstance(last, Claim):
                            # the operation's grants the pass did not take first (the replica dropped them)
                            self._take_back(
                                state, [g for g in request.grants if g.operation_id == last.operation_id]
                            )
                            self.claims += 1
                            answer = self._remote_claim(state, last, granted)
                if isinstance(last, PassDone):
                    return last
                if isinstance(last, PassFailed):
                    log.error(
                        "node shard %d's pass in tree %s failed: %s", link.index, request.tree, last.error
                    )
                    return None
                data = dumps(flat(answer))
                self.sent_bytes += len(data)
                conn.send_bytes(data)
        except (EOFError, OSError) as error:  # the shard process died: its pass ends here
            log.warning("node shard %d ended during a pass in tree %s: %s", link.index, request.tree, error)
            link.alive = False
            return None

    def _remote_claim(self, state: _Tree, claim: Claim, granted: set[str]) -> ClaimAnswer:
        if self.trees.get(claim.tree) is not state:
            self.claims_refused += 1
            return ClaimAnswer(None, 0, np.zeros(len(claim.available)))
        answer = self._check_claim(claim)
        if answer.allocation is not None:
            granted.add(answer.allocation.id)
        else:
            self.claims_refused += 1
        return answer

    def _booking(
        self,
        shard: int,
        state: _Tree,
        truth: TreeScheduler,
        message: Started | Preempted | Unclaimed,
        result: HeartbeatResult,
        granted: set[str],
        started: list[str],
    ) -> None:
        """A start, preemption or give-back of the shard's pass, applied to the truth (or refused: see above)."""
        if isinstance(message, Unclaimed):
            granted.discard(message.allocation_id)
            self._give_back(state, {message.allocation_id}, message.time, message.finished)
            return
        if isinstance(message, Started):
            allocation = state.granted.get(message.allocation_id)
            element = truth.state.elements.get(allocation.operation_id) if allocation is not None else None
            node = truth.nodes.get(message.node)
            if (
                allocation is None
                or element is None
                or element.op is not truth.operations.get(allocation.operation_id)
                or node is None
                or (message.limited_usage is not None and not _room_for(truth, message.limited_usage))
            ):
                self._dropped(shard, state)
                return
            del state.granted[message.allocation_id]
            granted.discard(message.allocation_id)
            if message.limited_usage is not None:
                self.granted_starts += 1
            self.origin = shard
            try:
                truth.regular.started(
                    allocation, element, node, message.time, result, SchedulingStage(message.stage), None
                )
            finally:
                self.origin = None
            self.unsettled.add(allocation.id)
            started.append(allocation.id)
            return
        record = message.record
        victim = truth.allocations.get(record.allocation_id)
        if (
            victim is None
            or victim.preempted
            or (victim.id in self.unsettled and victim.id not in started)
            or victim.node_address not in truth.nodes
        ):
            self._dropped(shard, state)
            return
        self.origin = shard
        try:
            preempt_as(truth, victim, record, result)
        finally:
            self.origin = None

    def _dropped(self, shard: int, state: _Tree) -> None:
        """A booking the truth could not take: the shard's replica of the tree is copied again."""
        self.dropped += 1
        for tree, kept in self.trees.items():
            if kept is state:
                self._mark_stale(shard, tree)

    def _give_back(
        self, state: _Tree, ids: set[str], now: float, finished: FinishedAllocation | None = None
    ) -> None:
        """Allocations granted to claims and not booked go back to their controllers."""
        for allocation_id in sorted(ids):
            _give_back(state, allocation_id, finished or FinishedAllocation(allocation_id, "aborted"), now)
