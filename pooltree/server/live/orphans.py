"""Operations of a removed pool tree, as YTsaurus's strategy treats them when a pool trees update drops a tree
(``RemoveTreesFromOperationStates``, ``AbortOrphanedOperations``): an operation leaves the removed trees (their
``scheduling_options_per_pool_tree`` entries are erased, its allocations there aborted and run again elsewhere) and
keeps running in the others; one left without any tree is aborted with "No suitable fair-share trees to schedule
operation". Every change is committed to the store before the runtime changes, as every operation command is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pooltree.errors import PooltreeError
from pooltree.node.job import yt_error
from pooltree.server.live.persistence import planned
from pooltree.strategy.model import FinishedAllocation

if TYPE_CHECKING:
    from pooltree.server.live.model import LiveOperation
    from pooltree.server.live.scheduler import LiveScheduler

NO_SUITABLE_TREES = "No suitable fair-share trees to schedule operation"
GENERIC_ERROR = 1
TREE_CHANGED = "node_fair_share_tree_changed"
"""The abort reason of allocations in a removed tree (YTsaurus ``NodeFairShareTreeChanged``: the tree's nodes
leave it)."""


def leave_removed_trees(scheduler: LiveScheduler, removed: Iterable[str], now: float) -> None:
    """Take every operation out of the ``removed`` trees; abort those left without a tree."""
    gone_trees = frozenset(removed)
    for op in list(scheduler.operations.values()):
        gone = [name for name in op.trees if name in gone_trees]
        if not gone or op.is_final:
            continue
        if len(gone) == len(op.trees):
            error = yt_error(GENERIC_ERROR, NO_SUITABLE_TREES, {"removed_pool_trees": gone})
            scheduler.finish_operation(op.id, "aborted", now, error=error)
        else:
            leave_trees(scheduler, op, gone, now)


def leave_trees(
    scheduler: LiveScheduler, op: LiveOperation, gone: list[str], now: float, *, reason: str = TREE_CHANGED
) -> None:
    """Take ``op`` out of the ``gone`` trees (committed first); its allocations there are aborted with ``reason``
    and run again elsewhere."""
    kept = [name for name in op.trees if name not in gone]
    per_tree = dict(op.runtime_parameters.get("scheduling_options_per_pool_tree") or {})
    runtime_parameters = {
        **op.runtime_parameters,
        "scheduling_options_per_pool_tree": {k: v for k, v in per_tree.items() if k not in gone},
    }
    pools = {name: pool for name, pool in op.pools.items() if name not in gone}
    scheduler.persistence.commit_operation(
        planned(op, trees=kept, pools=pools, runtime_parameters=runtime_parameters)
    )
    # committed: act
    for name in gone:
        core = scheduler.cores.get(name)
        if core is None or op.id not in core.controllers:
            continue
        for allocation in core.detach_controller(op.id):
            scheduler.commands.abort_on_node(allocation, reason, now)
            finished = FinishedAllocation(allocation.id, "aborted", abort_reason=reason)
            with contextlib.suppress(PooltreeError):  # an allocation the controller no longer runs
                op.controller.on_allocation_finished(allocation, finished, now)
    activated = scheduler.registry.leave_trees(op.id, gone, now)
    op.trees, op.pools, op.runtime_parameters = kept, pools, runtime_parameters
    op.revision += 1
    scheduler.updates.dirty.update(kept)
    scheduler.commands.on_activated(activated, now)
    scheduler.commands.sync_state(op, now)
