"""Exact heartbeat skipping for a simulator: whether a heartbeat that reports nothing provably starts and preempts
nothing (`heartbeat_is_noop`), and the accounting of one skipped (`skip_heartbeat`). `SchedulerCore` exposes both."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pooltree.resources import Vector
from pooltree.strategy.segment_inputs import has_incompatible_allocations, has_starving_operations_for

if TYPE_CHECKING:
    from pooltree.strategy.core import SchedulerCore


def heartbeat_is_noop(
    core: SchedulerCore, address: str, now: float, pending_min_needed: Callable[[], Vector | None]
) -> bool:
    """Whether a heartbeat of ``address`` at ``now`` that reports nothing provably starts and preempts nothing.

    Sufficient conditions, stage by stage (yt-semantics §e.1): the node fits its limits (no overcommit abort);
    it runs no allocation of a graceful-mode operation (graceful pass); it cannot start more, or no operation's
    min needed resources fit its free resources (``pending_min_needed`` returns the componentwise minimum over
    operations with pending allocations, or ``None`` when there are none; a lower bound is enough); and, if the
    preemptive stages are due, no operation is starving and no element violates its resource limits. A
    simulator may then call :meth:`skip_heartbeat` instead of :meth:`process_heartbeat`.
    """
    strategy = core.strategy
    node = strategy.nodes.get(address)
    if node is None or strategy.has_queued_preemptions(address):
        return False
    if strategy.gpu_policy.allocating:  # a heartbeat only carries out the plan
        return not strategy.gpu_policy.has_work(address)
    # Python floats of the 5-vectors: the same float operations as the numpy forms, without their overhead
    limits = node.resource_limits.tolist()
    usage = node.usage.tolist()
    for used, limit in zip(usage, limits, strict=True):
        if used > limit + 1e-9:
            return False
    if strategy.runs_graceful_allocations(node):
        return False
    candidates = (
        strategy.segments.module_aware_candidates(address, node.tags) if strategy.segments.enabled else None
    )
    if candidates is not None:  # a node of a module-aware segment runs only the operations bound there
        if strategy.can_start_more(node) and _any_fits(core, candidates, limits, usage):
            return False
    elif strategy.can_start_more(node):
        needed = pending_min_needed()
        if needed is not None and strategy.segments.enabled:  # module-aware operations never run here
            needed = core.default_pending.minimum(core.controllers, strategy.segments)
        if needed is not None and all(
            n <= limit - used + 1e-9 for n, limit, used in zip(needed.tolist(), limits, usage, strict=True)
        ):
            return False
    last = node.last_preemptive_scheduling_time
    due = last is None or now > last + core.config.preemptive_scheduling_backoff
    return not (
        due
        and (
            (
                has_starving_operations_for(strategy, node)
                if strategy.segments.enabled
                else core.has_starving_operations()
            )
            or core.limits_violated()
            or has_incompatible_allocations(strategy, node)
        )
    )


def _any_fits(core: SchedulerCore, operation_ids: list[str], limits: list[float], usage: list[float]) -> bool:
    """Whether one of the operations has a pending allocation whose min needed resources fit the free ones."""
    for operation_id in operation_ids:
        controller = core.controllers.get(operation_id)
        if controller is None or controller.pending_allocation_count <= 0:
            continue
        needed = controller.min_needed_resources.tolist()
        if all(n <= limit - used + 1e-9 for n, limit, used in zip(needed, limits, usage, strict=True)):
            return True
    return False


def skip_heartbeat(core: SchedulerCore, address: str, now: float) -> None:
    """Account a heartbeat that :meth:`heartbeat_is_noop` proved empty: only the preemptive backoff moves."""
    node = core.strategy.nodes[address]
    last = node.last_preemptive_scheduling_time
    if last is None or now > last + core.config.preemptive_scheduling_backoff:
        node.last_preemptive_scheduling_time = now
