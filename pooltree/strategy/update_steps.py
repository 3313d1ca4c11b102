"""A fair-share update in three steps, so that its computation can run without the caller's lock.

`SchedulerCore.update_fair_share` is `read_update` (the period's input read from the runtime tree, the controllers
and the nodes), `compute_update` (the fair-share function and the build of the strategy's tree) and
`publish_update` (the snapshot handed to the strategy), all here, each a function of the core (`SchedulerCore`'s
methods of the same names call them; `finish_update` is the end a publish in parts leaves). The live service runs
the read and the publish under its scheduling lock and the computation between them without it
(`server/live/updates.py`), as YTsaurus computes a tree's fair share on a snapshot and publishes the result to its
node shards.

The computation reads only what the read captured (`UpdateRead`) and the period's caches (`KeptState`), which only
an update of the same tree touches: heartbeats and commands change neither. What they may change meanwhile is the
runtime tree the build walks and the nodes: `update_is_current` says whether the core still stands where the read
left it (the tree's ``revision``, its config objects, the total resources, no other update since); when it does
not, the publish refuses the computed update and the caller reads and computes again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pooltree.fairshare import update_fair_share
from pooltree.resources import Vector
from pooltree.strategy.build import build_scheduling_tree
from pooltree.strategy.fifo_limit import clear_statuses, fifo_unschedulable
from pooltree.strategy.full_host_preemption import observe_operations
from pooltree.strategy.guarantee_priority import high_priority_operations
from pooltree.strategy.kept import KeptState
from pooltree.strategy.reconnection import nodes_for_tag_filters
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.strategy.ssd_preemption import classify_ssd_operations
from pooltree.strategy.starvation_tolerance import apply_absolute_starvation_tolerance
from pooltree.tree import FairShareInput, read_input
from pooltree.tree.delta import PeriodDelta, RuntimeTree

if TYPE_CHECKING:
    from pooltree.strategy.core import SchedulerCore


FairShareFunction = Callable[..., Any]
"""``(root_pool, total_resources, settings, now, state) -> FairShareResult`` (see pooltree.fairshare)."""


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class UpdateRead:
    """What `SchedulerCore.read_update` read for one period, all the computation needs."""

    now: float
    number: int
    """The core's update number at the read: another update read since (a stale tree's publish) makes it old."""
    kept: KeptState
    """What the previous period kept, with this period's input rows (the core holds its ``failed`` form with those
    rows meanwhile)."""
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
            tree, rows = build_scheduling_tree(
                update.pool_tree,
                result,
                update.total,
                update.config,
                kept.projection,
                kept.build,
                update.delta,
            )
            kept = kept.built(rows)
    return UpdateComputed(update, result, kept, left_out, tree)


def read_update(core: SchedulerCore, now: float) -> UpdateRead:
    """The first step of an update: finish the last one, unregister completed operations and read the period's
    input (`update_steps.UpdateRead`). Until the update is published the core keeps its caches' ``failed``
    form: a period stopped half-way leaves the next reading every row."""
    core.finish_update()  # what an update left unfinished comes first
    times = core.phase_times
    kept = core.kept
    core.kept = kept.failed()
    core._update_number += 1
    with times.phase("update"):
        with times.phase("unregister"):
            core.unregister_completed(now)
        with times.phase("input"):
            changed, generation = core.input_resources.changed()
            delta = kept.delta(core.pool_tree, changed)
            read = _fair_share_input(core, kept, delta, now)
            core.input_resources.taken(generation)  # a read that failed leaves them to the next
            kept = kept.read(read.rows)
            core.kept = core.kept.read(read.rows)  # a read that returned: its rows stand whatever follows
            settings = _with_best_allocation(core, read.settings, now)
            if settings.enable_discretized_fair_share:
                settings = _with_job_resources(core, settings)
            min_needed = (
                _min_needed(core) if core.config.enable_absolute_fair_share_starvation_tolerance else None
            )
    return UpdateRead(
        now=now,
        number=core._update_number,
        kept=kept,
        delta=delta,
        read=read,
        settings=settings,
        total=core.total_resources,
        pool_tree=core.pool_tree,
        revision=core.pool_tree.revision,
        tree_config=core.pool_tree.config,
        config=core.config,
        function=core._fair_share or update_fair_share,
        min_needed=min_needed,
    )


def update_is_current(core: SchedulerCore, update: UpdateRead) -> bool:
    """Whether the core stands where ``update``'s read left it: no other update read since, the same tree at the
    same revision with the same config objects, the same total resources (no node joined, left or changed)."""
    return (
        update.number == core._update_number
        and update.pool_tree is core.pool_tree
        and update.revision == core.pool_tree.revision
        and update.tree_config is core.pool_tree.config
        and update.config is core.config
        and update.total is core._total_resources
    )


def publish_update(core: SchedulerCore, computed: UpdateComputed, *, in_parts: bool = False) -> bool:
    """The last step of an update: hand the computed snapshot to the strategy (``in_parts``: as
    `update_fair_share`). False, with nothing published, when the core no longer stands where the update's read
    left it (`update_is_current`); the caller then reads again (the core keeps the ``failed`` form of its kept
    state, `KeptState.failed`: whose build walks the tree, since this one may have walked it while it changed)."""
    update = computed.update
    if not core.update_is_current(update):
        return False
    times = core.phase_times
    result = computed.result
    with times.phase("update"):
        core.kept = computed.kept
        core.strategy.high_priority = (
            high_priority_operations(result, core.controllers)
            if core.config.enable_guarantee_priority_scheduling
            else frozenset()
        )
        core.last_result = result
        # `ssd_preemption.py`: classified before the publish, so no heartbeat sees a published operation unclassified
        if core.strategy.ssd.enabled:
            ssd = classify_ssd_operations(
                update.kept.ssd, core.strategy.ssd.config, computed.kept.projection, update.delta
            )
            core.kept = core.kept.finished(ssd)
            core.strategy.ssd.take(ssd)
        with times.phase("publish"):
            previous = core.strategy.fifo_unschedulable
            left_out = computed.left_out
            core.strategy.fifo_unschedulable = left_out
            if in_parts:
                core.strategy.publish(computed.tree, update.now, lists_later=True)
            else:
                core.strategy.publish(computed.tree, update.now)
            if left_out != previous:
                core.strategy.rekey_operations(left_out ^ previous)
        core._unfinished = update.now
        if not in_parts:
            core.finish_update()
    return True


def finish_update(core: SchedulerCore, limit: int | None = None) -> bool:
    """The end of the last fair-share update (`update_fair_share` ``in_parts``): the preemptible lists its
    publish left, at most ``limit`` operations' (None: all), then, once none is left, the scheduling segments
    and the full-host preemption observations, which read the lists (the SSD classification is made with the
    publish: `publish_update`). Whether the update is finished
    (True at once when none is unfinished)."""
    if core._unfinished is None:
        return True
    times = core.phase_times
    with times.phase("lists"):
        if not core.strategy.configure_lists(limit):
            return False
    now = core._unfinished
    core._unfinished = None
    with times.phase("segments"):
        core.update_gpu_scheduling(now)
        if core.strategy.full_host.enabled:  # `full_host_preemption.py`
            observe_operations(core.strategy.full_host, core.pool_tree, core.controllers)
    return True


def _with_best_allocation(core: SchedulerCore, settings: Any, now: float) -> Any:
    """The update's settings with the memory limits the operations' best allocation shares leave them."""
    core.refresh_best_allocation(now)
    core._best_allocation_used = core.best_allocation.revision
    limits = core.best_allocation.limits
    return dataclasses.replace(settings, best_allocation_memory=dict(limits)) if limits else settings


def _with_job_resources(core: SchedulerCore, settings: Any) -> Any:
    """The update's settings with every operation's per-job vector (discretized fair share): its controller's
    initial min needed resources; an operation whose controller has none keeps its continuous function."""
    jobs = {
        op_id: vector
        for op_id, controller in core.controllers.items()
        if (vector := controller.initial_min_needed_resources) is not None
    }
    return dataclasses.replace(settings, discretized_job_resources=jobs)


def _min_needed(core: SchedulerCore) -> dict[str, Vector]:
    """Operation id → its controller's aggregated minimum needed allocation resources."""
    return {op_id: controller.min_needed_resources for op_id, controller in core.controllers.items()}


def _fair_share_input(core: SchedulerCore, kept: KeptState, delta: PeriodDelta, now: float) -> FairShareInput:
    """The fair-share update's input tree and settings, read from the runtime tree with the period's delta, and
    what the read wrote for the update."""
    nodes = nodes_for_tag_filters(
        core.nodes_view, core.connection_time, core.config.node_reconnection_timeout, now
    )
    return read_input(
        core.pool_tree,
        core.input_resources.resources,
        nodes=nodes,
        projection=kept.projection,
        previous=kept.input,
        delta=delta,
    )
