"""The scheduler's state generation: a counter moved by every change that can give a node's heartbeat work.

Node shards answer a node's heartbeat themselves when the leader proved, after that node's last heartbeat it
processed, that an identical heartbeat starts, stops and acknowledges nothing (``pooltree/shards/verdicts.py``).
The proof holds while the scheduler's state is the one it was made against; ``StateGeneration`` tells when that
may no longer be so. It moves (under the scheduler's lock) on every job record written (a start, an end, a
preemption, a lost job), every operation change (``_touch`` and operation commits: starts, aborts, suspensions,
parameters, completions), every pool tree change, node sweeps and revival, and after a fair-share update only when
something a quiet node's proof read changed (``LiveScheduler._publish_tree``: starving operations, violated limits,
nodes with queued stops). A generation that moves too often only sends more heartbeats to the leader; one that
misses a change would let a shard answer a heartbeat the leader would have given work, so the tests replay
recorded runs through shards and compare every decision.

A node that cannot start more (a full node) reads no pending work: its proof holds while nothing of its own and
nothing of the whole tree that a full node's proof reads changed. So besides ``value`` (moved by everything) the
generation keeps ``coarse`` (moved by everything but a job of one node and pending work: ``bump``) and, per node,
the ``value`` at the node's last own change (``stamps``: ``bump_node``, for its job records and the stops queued
for it from elsewhere). A full node's proof holds at (``coarse``, its stamp), so on a busy cluster the heartbeats
of full nodes that report nothing new stay with the shards while other nodes' jobs start and end. What a full
node's proof reads of the whole tree (``full_flags``: starving operations, violated limits, nodes with stops
queued, segments, the GPU policy; a stale tree to publish, tentative bans to apply) is compared after every
fair-share update (``updated``) and at the end of every heartbeat the leader processes (``settle``), so what a
heartbeat changes there outside the job records (a gang's restarts queued on other nodes, a usage report above a
limit) moves ``coarse`` before any shard can answer on an older proof.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from pooltree.resources import RESOURCE_COUNT


class StateGeneration:
    """Monotonic counters (``value``, ``coarse``, per node ``stamps``) and the last fair-share flags compared."""

    def __init__(self) -> None:
        self.value = 0
        """Moved by every change; read without the lock by the shards' pusher (an int read is atomic)."""
        self.coarse = 0
        """``value`` at the last change that can give work to a node that cannot start more (``bump``)."""
        self.stamps: dict[str, int] = {}
        """Per node, ``value`` at its last own change (``bump_node``; absent: 0). Kept while ``watch_updates``."""
        self.moved: deque[tuple[str, int]] = deque()
        """(node, stamp) of every ``bump_node`` not yet taken by the shards' pusher (``take_moved``)."""
        self._flags: dict[str, tuple[Any, Any]] = {}
        """Per tree, (the pending work, ``full_flags``) the last update or heartbeat compared."""
        self.watch_updates = False
        """Whether updates are compared (``updated``): set while node shards use the generation, so a scheduler
        without them does not pay ``quiet_flags`` (a walk over the tree's controllers) per update."""

    def bump(self) -> None:
        """A change that can give any node work: every proof made before it is void."""
        self.value += 1
        self.coarse = self.value

    def bump_work(self) -> None:
        """A change of pending work or of an operation's jobs only: void for proofs of nodes that can start
        more, not for those of full nodes."""
        self.value += 1

    def bump_node(self, address: str) -> None:
        """A change of the node's own jobs or of what is queued for it (and so of pending work): void for the
        proofs of nodes that can start more and for the full-node proofs of ``address``."""
        self.value += 1
        if self.watch_updates:
            self.stamps[address] = self.value
            self.moved.append((address, self.value))

    def full_stamp(self, address: str) -> tuple[int, int]:
        """What a full node's proof holds at: (``coarse``, the node's stamp)."""
        return self.coarse, self.stamps.get(address, 0)

    def take_moved(self) -> list[tuple[str, int]]:
        """The (node, stamp) pairs moved since the last call (the pusher's and ``InProcessShards``' side)."""
        moved = self.moved
        taken: list[tuple[str, int]] = []
        while moved:
            taken.append(moved.popleft())
        return taken

    def updated(self, tree: str, core: Any) -> None:
        """A fair-share update of ``tree`` (its ``SchedulerCore``) ended: ``coarse`` moves when what a full node's
        proof reads of the tree (``full_flags``) differs from the last comparison's, ``value`` when the pending
        work (``pending_summary``, read by the other nodes' proofs) does."""
        if not self.watch_updates:
            return
        pending, full = pending_summary(core), full_flags(core)
        last = self._flags.get(tree)
        self._flags[tree] = (pending, full)
        if last is None or last[1] != full:
            self.bump()
        elif last[0] != pending:
            self.bump_work()

    def settle(self, cores: dict[str, Any], stale: bool) -> None:
        """The end of a heartbeat the leader processed (lock held): ``coarse`` moves when a tree's ``full_flags``
        changed since the last comparison, or while ``stale`` (a tree waits to be published or tentative bans to
        be applied: the next heartbeat the leader takes does it, so a full node's must not be answered)."""
        if not self.watch_updates:
            return
        moved = stale
        for tree, core in cores.items():
            full = full_flags(core)
            last = self._flags.get(tree)
            if last is None or last[1] != full:
                self._flags[tree] = (None if last is None else last[0], full)
                moved = True
        if moved:
            self.bump()


def quiet_flags(core: Any) -> tuple[Any, ...]:
    """What a quiet node's proof (``SchedulerCore.heartbeat_is_noop``) reads of the whole tree and a fair-share
    update can move: the pending work (a controller may add work with time) and ``full_flags``."""
    return (pending_summary(core), *full_flags(core))


def full_flags(core: Any) -> tuple[Any, ...]:
    """What a full node's proof reads of the whole tree: starving operations, violated resource limits, the
    nodes with stops queued outside their heartbeats (job time limits, gang restarts), and whether scheduling
    segments or the GPU policy decide (their nodes are never proven quiet)."""
    strategy = core.strategy
    return (
        core.has_starving_operations(),
        core.limits_violated(),
        frozenset(core.nodes_with_queued_preemptions()),
        strategy.segments.enabled,
        strategy.gpu_policy.allocating,
    )


def pending_min_needed(core: Any) -> np.ndarray | None:
    """The componentwise minimum of the min needed resources of the tree's operations with pending allocations,
    None when none has any (what ``SchedulerCore.heartbeat_is_noop`` asks; a lower bound is enough, so operations
    not published count too)."""
    minimum: np.ndarray | None = None
    for controller in core.controllers.values():
        if controller.pending_allocation_count > 0:
            if minimum is None:
                minimum = np.full(RESOURCE_COUNT, np.inf)
            np.minimum(minimum, controller.min_needed_resources, out=minimum)
    return minimum


def pending_summary(core: Any) -> tuple[int, tuple[float, ...] | None]:
    """The tree's pending allocations and their ``pending_min_needed``, to compare updates by."""
    count = sum(max(controller.pending_allocation_count, 0) for controller in core.controllers.values())
    minimum = pending_min_needed(core)
    return count, None if minimum is None else tuple(minimum.tolist())
