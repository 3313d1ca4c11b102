"""A fair-share update in three steps, so that its computation can run without the caller's lock.

`SchedulerCore.update_fair_share` is `SchedulerCore.read_update` (the period's input read from the runtime tree,
the controllers and the nodes), `compute_update` (the fair-share function and the build of the strategy's tree,
here) and `SchedulerCore.publish_update` (the snapshot handed to the strategy). The live service runs the read and
the publish under its scheduling lock and the computation between them without it (`server/live/updates.py`), as
YTsaurus computes a tree's fair share on a snapshot and publishes the result to its node shards.

The computation reads only what the read captured (`UpdateRead`) and the period's caches (`KeptState`), which only
an update of the same tree touches: heartbeats and commands change neither. What they may change meanwhile is the
runtime tree the build walks and the nodes: `SchedulerCore.update_is_current` says whether the core still stands where the read
left it (the tree's ``revision``, its config objects, the total resources, no other update since); when it does
not, the publish refuses the computed update and the caller reads and computes again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pooltree.resources import Vector
from pooltree.strategy.build import scheduling_tree_from_runtime
from pooltree.strategy.fifo_limit import clear_statuses, fifo_unschedulable
from pooltree.strategy.kept import KeptState
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.strategy.starvation_tolerance import apply_absolute_starvation_tolerance
from pooltree.tree import FairShareInput
from pooltree.tree.delta import PeriodDelta, RuntimeTree


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class UpdateRead:
    """What `SchedulerCore.read_update` read for one period, all the computation needs."""

    now: float
    number: int
    """The core's update number at the read: another update read since (a stale tree's publish) makes it old."""
    kept: KeptState
    """The period's caches as the previous period left them (the core holds their ``failed`` form meanwhile)."""
    delta: PeriodDelta
    read: FairShareInput
    settings: Any
    total: Vector
    """The total resources object of the read (a node joining or leaving makes the core compute a new one)."""
    pool_tree: RuntimeTree
    revision: int
    """``pool_tree.revision`` at the read."""
    tree_config: Any
    config: StrategyConfig
    function: Callable[..., Any]
    min_needed: Mapping[str, Vector] | None
    """Operation id → its minimum needed resources, with ``enable_absolute_fair_share_starvation_tolerance``."""


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class UpdateComputed:
    """The computed update, ready to publish: the result, the caches for the next period, the strategy's tree."""

    update: UpdateRead
    result: Any
    kept: KeptState
    left_out: frozenset[str]
    """Operations of FIFO pools the tree's ``max_schedulable_element_count_in_fifo_pool`` leaves out."""
    tree: SchedulingTree


def compute_update(update: UpdateRead, times: Any) -> UpdateComputed:
    """The fair-share function on the read input and the strategy's tree built from its result (``times``: the
    core's `PhaseTimes`). Touches nothing but ``update`` and its caches: safe without the caller's lock while no
    other update of the tree runs."""
    kept = update.kept
    with times.phase("update"):
        with times.phase("fair_share"):
            read = update.read
            result = update.function(
                read.root, update.total, update.settings, update.now, kept.update_state(read)
            )
            kept = kept.updated(getattr(result, "state", None))
            if update.min_needed is not None:
                apply_absolute_starvation_tolerance(result, update.min_needed, update.total)
            limit = update.config.max_schedulable_element_count_in_fifo_pool
            left_out: frozenset[str] = frozenset()
            if limit is not None:
                left_out = fifo_unschedulable(kept.projection, result, limit)
                clear_statuses(result, left_out)
        with times.phase("build"):
            tree = scheduling_tree_from_runtime(
                update.pool_tree, result, update.total, update.config, cache=kept.build, delta=update.delta
            )
    return UpdateComputed(update, result, kept, left_out, tree)
