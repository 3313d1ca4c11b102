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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.resources import RESOURCE_COUNT


class StateGeneration:
    """A monotonic counter (``value``) and the last fair-share flags it was compared with."""

    def __init__(self) -> None:
        self.value = 0
        """Moved by ``bump``; read without the lock by the shards' pusher (an int read is atomic)."""
        self._flags: dict[str, Any] = {}
        """Per tree, what the last update's proofs read of the whole tree (``updated``)."""
        self.watch_updates = False
        """Whether updates are compared (``updated``): set while node shards use the generation, so a scheduler
        without them does not pay ``quiet_flags`` (a walk over the tree's controllers) per update."""

    def bump(self) -> None:
        self.value += 1

    def updated(self, tree: str, core: Any) -> None:
        """A fair-share update of ``tree`` (its ``SchedulerCore``) ended: the generation moves when what a quiet
        node's proof reads of the tree (``quiet_flags``) differs from the last update's."""
        if not self.watch_updates:
            return
        flags = quiet_flags(core)
        if self._flags.get(tree) != flags:
            self._flags[tree] = flags
            self.bump()


def quiet_flags(core: Any) -> tuple[Any, ...]:
    """What a quiet node's proof (``SchedulerCore.heartbeat_is_noop``) reads of the whole tree and a fair-share
    update can move: the pending work (a controller may add work with time), starving operations, violated resource limits, the nodes with stops queued outside their
    heartbeats (job time limits), and whether scheduling segments or the GPU policy decide (their nodes are
    never proven quiet)."""
    strategy = core.strategy
    return (
        pending_summary(core),
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
