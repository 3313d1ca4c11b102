"""The read-only scheduler view (orchid layout of PRODUCT.md §3), built from the tree runtime and a fair-share result.

Starvation is the strategy's (yt-semantics §c, :class:`pooltree.strategy.TreeScheduler`): a caller that keeps a
strategy across updates (the live service, the simulator) passes it and its history shows; a one-off snapshot uses
:func:`snapshot_strategy`, i.e. the first update the strategy sees. In that first update an element below its fair
share only gets ``below_fair_share_since = now`` and stays ``non_starving``: being ``starving`` needs time below
fair share longer than ``fair_share_starvation_timeout``, and the snapshot format (PRODUCT.md §2) carries no such
history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import numpy as np

from pooltree.alerts import fair_share_issues, issue_text
from pooltree.errors import PooltreeError
from pooltree.fairshare.model import FairShareResult
from pooltree.fairshare.results import element_kinds
from pooltree.resources import RESOURCES, Vector, resources_to_dict, share_to_dict, zeros
from pooltree.strategy import TreeScheduler
from pooltree.strategy.build import scheduling_tree_from_runtime
from pooltree.tree.elements import TreeOperation
from pooltree.tree.pool_tree import PoolTree
from pooltree.tree.tree_views import OperationFacts, QueueFacts, operation_placement

ROOT = "<Root>"

STRATEGY_FIELDS = (
    "scheduling_status",
    "starvation_status",
    "below_fair_share_since",
    "starving_since",
    "lowest_starving_ancestor",
    "lowest_aggressively_starving_ancestor",
    "effective_fair_share_starvation_tolerance",
    "effective_fair_share_starvation_timeout",
    "effective_aggressive_starvation_enabled",
    "effective_aggressive_preemption_allowed",
    "scheduling_segment",
    "scheduling_segment_module",
)
"""Strategy fields taken into the view (usage stays the fair-share result's: a snapshot has no allocations)."""


def _ratio(x: Vector) -> float:
    return float(np.max(x)) if len(x) else 0.0


def element_view(result: Any) -> dict[str, Any]:
    detailed = result.detailed_fair_share
    return {
        "fair_share_ratio": _ratio(result.fair_share),
        "usage_ratio": _ratio(result.usage_share),
        "demand_ratio": _ratio(result.demand_share),
        "detailed_fair_share": {
            "strong_guarantee": share_to_dict(detailed.strong_guarantee),
            "integral_guarantee": share_to_dict(detailed.integral_guarantee),
            "weight_proportional": share_to_dict(detailed.weight_proportional),
            "total": share_to_dict(detailed.total),
        },
        "usage_share": share_to_dict(result.usage_share),
        "demand_share": share_to_dict(result.demand_share),
        "limits_share": share_to_dict(result.limits_share),
        "strong_guarantee_share": share_to_dict(result.strong_guarantee_share),
        "effective_strong_guarantee_resources": resources_to_dict(result.inferred_strong_guarantee_resources),
        "estimated_guarantee_share": share_to_dict(result.estimated_guarantee_share),
        "dominant_resource": result.dominant_resource,
        "weight": float(result.weight),
        "resource_usage": resources_to_dict(result.resource_usage),
        "resource_demand": resources_to_dict(result.resource_demand),
        "resource_limits": resources_to_dict(result.resource_limits, drop_infinite=True),
        "scheduling_status": result.scheduling_status,
        "starvation_status": "non_starving",
        "satisfaction_ratio": float(result.satisfaction_ratio),
        "parent": result.parent,
    }


def pending_view(placement: dict[str, Any]) -> dict[str, Any]:
    """A pending operation (not an element of the fair-share update, as in YTsaurus), or one registered in its tree
    after the update a view shows, as an update shows it while it is pending: its placement and queue position
    (``placement``: ``PoolTree.operation_orchid``) and zero shares (a pending operation has no usage and no
    demand)."""
    zero = zeros()
    view = {
        **placement,
        "fair_share_ratio": 0.0,
        "usage_ratio": 0.0,
        "demand_ratio": 0.0,
        "detailed_fair_share": {
            key: share_to_dict(zero)
            for key in ("strong_guarantee", "integral_guarantee", "weight_proportional", "total")
        },
        "usage_share": share_to_dict(zero),
        "demand_share": share_to_dict(zero),
        "resource_usage": resources_to_dict(zero),
        "resource_demand": resources_to_dict(zero),
        "starvation_status": "non_starving",
        "scheduling_status": "normal",
        "dominant_resource": RESOURCES[0],  # the update's argmax of an all-zero demand share
        "satisfaction_ratio": 0.0,
    }
    view["parent"] = view["pool"]
    view["weight"] = 1.0 if view.get("weight") is None else float(view["weight"])
    return view


def snapshot_strategy(
    tree: PoolTree, result: FairShareResult, total_resources: Vector, now: float
) -> TreeScheduler:
    """The strategy after its first update at ``now`` on this tree and result (statuses, starvation bookkeeping)."""
    scheduler = TreeScheduler(scheduling_tree_from_runtime(tree, result, total_resources))
    scheduler.publish(scheduler.tree, now)
    return scheduler


class ViewParts(NamedTuple):
    """What a tree's view reads of the tree itself besides its fair-share result (``view_parts``): each pool
    element's placement ({} when the tree dropped it since the update), the facts of each operation element
    (None when dropped) and of the operations the update does not hold (pending, or registered after it), the
    queues holding pending ones, the tree's alerts, and the operations with a discretized fair share active
    when the tree's option is on (else None). The live service reads them under its lock and assembles the view
    without it (``server/live/views.py``)."""

    placements: dict[str, dict[str, Any]]
    operations: dict[str, OperationFacts | None]
    unpublished: dict[str, OperationFacts]
    queues: dict[str, QueueFacts]
    alerts: list[str]
    discretized: frozenset[str] | None


def view_parts(tree: PoolTree, result: FairShareResult, previous: ViewParts | None = None) -> ViewParts:
    """``tree``'s parts of the view of ``result`` (see ``ViewParts``). An operation whose facts are those it had in
    ``previous`` (an earlier read of the same tree) keeps that object (``TreeViews.facts_of``)."""
    placements: dict[str, dict[str, Any]] = {}
    registered = tree.operations
    elements = result.elements
    published: list[tuple[str, TreeOperation | None]] = []
    for element_id, is_operation in element_kinds(elements):  # the elements' results are not made here
        if is_operation:
            published.append((element_id, registered.get(element_id)))
            continue
        # A view may be built after the update it shows (the live service builds it when read): an element the
        # tree has dropped since (a finished operation, an emptied ephemeral pool) keeps its shares only.
        try:
            placements[element_id] = tree.pool_orchid(element_id)
        except PooltreeError:
            placements[element_id] = {}
    unpublished_operations = [(op_id, op) for op_id, op in registered.items() if op_id not in elements]
    queues: dict[str, QueueFacts] = {}
    facts_of = tree.views.facts_of
    operations = facts_of(published, previous.operations if previous is not None else {}, queues)
    unpublished = cast(
        dict[str, OperationFacts],
        facts_of(unpublished_operations, previous.unpublished if previous is not None else {}, queues),
    )
    discretized = None
    if tree.config.enable_discretized_fair_share:  # YTsaurus's orchid flag (`fairshare/discretized.py`)
        discretized = frozenset(getattr(result, "discretized_fair_share_active", frozenset()))
    alerts = [issue_text(issue) for issue in fair_share_issues(tree, result.errors)]
    return ViewParts(placements, operations, unpublished, queues, alerts, discretized)


def pool_entry(
    parts: ViewParts,
    element_id: str,
    element: Any,
    strategy_fields: Callable[[str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pool's entry of a tree's view (``assemble_tree_view``'s ``pools``) from its parts and its element's result;
    its ``strategy_fields`` (when given) over its shares."""
    return {**parts.placements[element_id], **_shares_view(element_id, element, strategy_fields)}


def _shares_view(
    element_id: str, element: Any, strategy_fields: Callable[[str], dict[str, Any]] | None
) -> dict[str, Any]:
    """An element's shares and counters (``element_view``), its ``strategy_fields`` (when given) over them."""
    view = element_view(element)
    if strategy_fields is not None:
        view.update(strategy_fields(element_id))
    return view


def operation_pool(parts: ViewParts, operation_id: str) -> Any:
    """The ``pool`` of an operation's entry in the view assembled from ``parts`` (``assemble_tree_view``: its
    placement's; an update's element and the strategy's fields have none), None when the view has no such entry or
    its entry no pool, without assembling the view."""
    facts = parts.unpublished.get(operation_id)
    if facts is None:
        facts = parts.operations.get(operation_id)
    if facts is None:
        return None
    return operation_placement(operation_id, facts, parts.queues).get("pool")


def assemble_tree_view(
    parts: ViewParts,
    result: FairShareResult,
    total_resources: Vector,
    strategy_fields: Callable[[str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One tree in the orchid layout from its parts and fair-share result: pools (including ``<Root>``) and
    operations with shares and counters, an element's ``strategy_fields`` (when given) over its shares."""
    pools: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    queues = parts.queues
    for element_id, element in result.elements.items():
        if not element.is_operation:
            pools[element_id] = pool_entry(parts, element_id, element, strategy_fields)
            continue
        facts = parts.operations[element_id]
        placement = operation_placement(element_id, facts, queues) if facts is not None else {}
        operations[element_id] = {**placement, **_shares_view(element_id, element, strategy_fields)}
    if parts.discretized is not None:
        for operation_id, entry in operations.items():
            entry["discretized_fair_share_active"] = operation_id in parts.discretized
    for operation_id, facts in parts.unpublished.items():
        operations[operation_id] = pending_view(operation_placement(operation_id, facts, queues))
    return {
        "resource_limits": resources_to_dict(total_resources),
        "resource_usage": resources_to_dict(result.elements[ROOT].resource_usage),
        "pool_count": len(pools) - 1,
        "pools": pools,
        "operations": operations,
        "alerts": parts.alerts,
    }


def tree_view(
    tree: PoolTree,
    result: FairShareResult,
    total_resources: Vector,
    strategy: TreeScheduler | None = None,
) -> dict[str, Any]:
    """One tree in the orchid layout: pools (including ``<Root>``) and operations with shares and counters.

    With ``strategy`` the starvation fields (:data:`STRATEGY_FIELDS`) are the strategy's; without it every element
    reads ``non_starving`` (callers that have a strategy overlay its view themselves). Tree ``alerts`` list the
    fair-share update's errors and the tree's own alerts; pending operations carry their ``operation_pending``
    alert under ``alerts``.
    """
    fields = None
    if strategy is not None:

        def fields(element_id: str) -> dict[str, Any]:
            extra = strategy.element_view(element_id)
            return {key: extra[key] for key in STRATEGY_FIELDS if key in extra}

    view = assemble_tree_view(view_parts(tree, result), result, total_resources, fields)
    if strategy is not None and strategy.segments.enabled:
        view["scheduling_segments"] = strategy.segments.view({a: n.tags for a, n in strategy.nodes.items()})
    if strategy is not None and strategy.gpu_policy.config.planning:
        view["gpu_assignment_plan"] = strategy.gpu_policy.view()
    return view
